/* Quick write-overhead measurement (not a test): every rank writes COUNT segments of SIZE
 * bytes with MPI_File_write_at (rank-interleaved), then MPI_File_sync and MPI_File_close.
 * Prints the time from before the open to after the close and the bandwidth.
 * Usage: seg PATH SIZE COUNT */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    long size = atol(argv[2]), count = atol(argv[3]);
    char *buf = malloc(size);
    memset(buf, 'a' + rank, size);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_File fh;
    if (MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh))
        MPI_Abort(MPI_COMM_WORLD, 2);
    for (long i = 0; i < count; i++)
        MPI_File_write_at(fh, (MPI_Offset)(i * n + rank) * size, buf, (int)size, MPI_BYTE, MPI_STATUS_IGNORE);
    MPI_File_sync(fh);
    MPI_File_close(&fh);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0;
    if (rank == 0)
        printf("%ld x %ld B x %d ranks: %.3f s, %.1f MB/s\n", count, size, n, t, (double)size * count * n / t / 1e6);
    free(buf);
    MPI_Finalize();
    return 0;
}
