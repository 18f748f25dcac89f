/* Non-blocking MPI-IO (MPI_File_iwrite_at/iread_at + MPI_Waitall; OMPIO does them with POSIX
 * AIO), then a sync and a close. Usage: iwriter PATH */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 4
#define LEN (64 * 1024)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_File fh;
    if (MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh))
        MPI_Abort(MPI_COMM_WORLD, 2);
    static unsigned char buf[N][LEN], back[N][LEN];
    MPI_Request req[N];
    for (int k = 0; k < N; k++) {
        memset(buf[k], 'a' + rank * N + k, LEN);
        MPI_File_iwrite_at(fh, ((MPI_Offset)k * n + rank) * LEN, buf[k], LEN, MPI_BYTE, &req[k]);
    }
    MPI_Waitall(N, req, MPI_STATUSES_IGNORE);
    MPI_File_sync(fh);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_sync(fh);
    /* read the next rank's pieces */
    int other = (rank + 1) % n;
    for (int k = 0; k < N; k++)
        MPI_File_iread_at(fh, ((MPI_Offset)k * n + other) * LEN, back[k], LEN, MPI_BYTE, &req[k]);
    MPI_Waitall(N, req, MPI_STATUSES_IGNORE);
    int ok = 1;
    for (int k = 0; k < N; k++)
        for (int i = 0; i < LEN; i++)
            if (back[k][i] != 'a' + other * N + k) ok = 0;
    if (MPI_File_close(&fh)) MPI_Abort(MPI_COMM_WORLD, 3);
    printf("rank %d read back %s\n", rank, ok ? "ok" : "WRONG");
    MPI_Finalize();
    return 0;
}
