/* Writes a file, closes it, then rank 0 deletes it with MPI_File_delete.
 * Prints the delete's result. Usage: deleter PATH */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_File fh;
    char buf[4096];
    memset(buf, 'd', sizeof buf);
    if (MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh))
        MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_File_write_at(fh, (MPI_Offset)rank * sizeof buf, buf, sizeof buf, MPI_BYTE, MPI_STATUS_IGNORE);
    if (MPI_File_close(&fh)) MPI_Abort(MPI_COMM_WORLD, 3);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("delete: %d\n", MPI_File_delete(argv[1], MPI_INFO_NULL));
    MPI_Finalize();
    return 0;
}
