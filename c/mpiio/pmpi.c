/* pmpi PATH: writes a file through the profiling interface only (PMPI_File_open,
 * PMPI_File_write_at_all, PMPI_File_sync, PMPI_File_close), as tools and Open MPI's Fortran
 * bindings do: rank r writes BLOCK bytes ((r * 7 + i) % 251) at r * BLOCK. Prints "pmpi ok". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define BLOCK 100000

static void die(int rc, const char *what) {
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "pmpi: %s failed (%d)\n", what, rc);
        PMPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv) {
    PMPI_Init(&argc, &argv);
    int rank;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 2) {
        fprintf(stderr, "usage: pmpi PATH\n");
        PMPI_Abort(MPI_COMM_WORLD, 1);
    }
    unsigned char *buf = malloc(BLOCK);
    for (int i = 0; i < BLOCK; i++)
        buf[i] = (unsigned char)((rank * 7 + i) % 251);
    MPI_File fh;
    MPI_Status st;
    die(PMPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL,
                       &fh),
        "PMPI_File_open");
    die(PMPI_File_set_size(fh, 0), "PMPI_File_set_size");
    die(PMPI_File_write_at_all(fh, (MPI_Offset)rank * BLOCK, buf, BLOCK, MPI_BYTE, &st),
        "PMPI_File_write_at_all");
    die(PMPI_File_sync(fh), "PMPI_File_sync");
    die(PMPI_File_close(&fh), "PMPI_File_close");
    PMPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("pmpi ok\n");
    free(buf);
    PMPI_Finalize();
    return 0;
}
