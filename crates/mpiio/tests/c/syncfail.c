/* Writes (one large piece, committed at once, and one small, queued), tells the test it is
 * ready (rank 0 creates PATH.ready), waits for PATH.go, then syncs and closes and prints
 * what MPI returned. Usage: syncfail PATH */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_File fh;
    if (MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh))
        MPI_Abort(MPI_COMM_WORLD, 2);
    static char big[1 << 20];
    memset(big, 'b', sizeof big);
    MPI_File_write_at(fh, (MPI_Offset)rank * sizeof big, big, sizeof big, MPI_BYTE, MPI_STATUS_IGNORE);
    MPI_File_write_at(fh, 4 * sizeof big + rank * 100, big, 100, MPI_BYTE, MPI_STATUS_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);
    char p[4096];
    if (rank == 0) {
        snprintf(p, sizeof p, "%s.ready", argv[1]);
        fclose(fopen(p, "w"));
    }
    snprintf(p, sizeof p, "%s.go", argv[1]);
    while (access(p, F_OK) != 0) usleep(10000);
    int s = MPI_File_sync(fh);
    int c = MPI_File_close(&fh);
    int cls_s = 0, cls_c = 0;
    MPI_Error_class(s, &cls_s);
    MPI_Error_class(c, &cls_c);
    printf("rank %d sync %s close %s\n", rank, cls_s == MPI_ERR_IO ? "MPI_ERR_IO" : s == 0 ? "ok" : "other",
           cls_c == MPI_ERR_IO ? "MPI_ERR_IO" : c == 0 ? "ok" : "other");
    MPI_Finalize();
    return 0;
}
