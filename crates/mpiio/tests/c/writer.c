/* MPI-IO writer for the libpdcx_mpiio tests: independent, strided (file view), collective
 * (300 KiB per rank, above the byte stream's one-copy threshold) and overlapping writes, a
 * sync, a system() call, a get_size, a close, then a read-only reopen that reads every byte.
 * Prints one line per rank: its view of the size and a checksum of the whole file.
 * With "self", every rank writes its own file PATH.RANK over MPI_COMM_SELF.
 * Usage: writer PATH [append] [nosetsize] [self] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLK 1000
#define STRIDE 100
#define COLL (300 * 1024)

static unsigned char byte_at(int rank, long i) { return (unsigned char)(rank * 37 + i * 13 + 1); }

static void check(int rc, const char *what) {
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "%s failed: %d\n", what, rc);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int world_rank, rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    int amode = MPI_MODE_CREATE | MPI_MODE_WRONLY;
    int setsize = 1;
    MPI_Comm comm = MPI_COMM_WORLD;
    char path[4096];
    snprintf(path, sizeof path, "%s", argv[1]);
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "append") == 0) amode |= MPI_MODE_APPEND;
        if (strcmp(argv[i], "nosetsize") == 0) setsize = 0;
        if (strcmp(argv[i], "self") == 0) {
            comm = MPI_COMM_SELF;
            snprintf(path, sizeof path, "%s.%d", argv[1], world_rank);
        }
    }
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &n);
    MPI_File fh;
    check(MPI_File_open(comm, path, amode, MPI_INFO_NULL, &fh), "open");
    if (setsize) check(MPI_File_set_size(fh, 0), "set_size");

    /* independent contiguous: block `rank` of region A */
    unsigned char *buf = malloc(COLL);
    for (long i = 0; i < COLL; i++) buf[i] = byte_at(rank, i);
    check(MPI_File_write_at(fh, (MPI_Offset)rank * BLK, buf, BLK, MPI_BYTE, MPI_STATUS_IGNORE), "write_at");

    /* strided through a file view: 10 pieces of STRIDE bytes, interleaved with the other ranks */
    MPI_Datatype vec;
    MPI_Type_vector(10, STRIDE, STRIDE * n, MPI_BYTE, &vec);
    MPI_Type_commit(&vec);
    MPI_Offset base = (MPI_Offset)n * BLK;
    check(MPI_File_set_view(fh, base + (MPI_Offset)rank * STRIDE, MPI_BYTE, vec, "native", MPI_INFO_NULL), "set_view");
    check(MPI_File_write(fh, buf + 7, 10 * STRIDE, MPI_BYTE, MPI_STATUS_IGNORE), "strided write");
    check(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL), "reset view");
    check(MPI_File_sync(fh), "sync");
    /* a helper process between writes (fork + exec with the preload inherited) */
    if (system("true") != 0) MPI_Abort(MPI_COMM_WORLD, 4);

    /* collective: COLL bytes per rank after regions A and B */
    base = 2 * (MPI_Offset)n * BLK;
    check(MPI_File_write_at_all(fh, base + (MPI_Offset)rank * COLL, buf, COLL, MPI_BYTE, MPI_STATUS_IGNORE), "write_at_all");

    /* overlapping: rank 0 writes, then (sync-barrier-sync) the last rank overwrites half */
    unsigned char x[200];
    memset(x, 'X', sizeof x);
    if (rank == 0) check(MPI_File_write_at(fh, 10, x, 200, MPI_BYTE, MPI_STATUS_IGNORE), "overlap 0");
    check(MPI_File_sync(fh), "sync");
    MPI_Barrier(MPI_COMM_WORLD);
    check(MPI_File_sync(fh), "sync");
    memset(x, 'Y', sizeof x);
    if (rank == n - 1) check(MPI_File_write_at(fh, 110, x, 200, MPI_BYTE, MPI_STATUS_IGNORE), "overlap 1");
    check(MPI_File_sync(fh), "sync");
    MPI_Offset size;
    check(MPI_File_get_size(fh, &size), "get_size");
    check(MPI_File_close(&fh), "close");

    /* read everything back */
    check(MPI_File_open(comm, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh), "reopen");
    MPI_Offset size2;
    check(MPI_File_get_size(fh, &size2), "get_size 2");
    unsigned char *all = malloc(size2);
    check(MPI_File_read_at_all(fh, 0, all, (int)size2, MPI_BYTE, MPI_STATUS_IGNORE), "read_at_all");
    check(MPI_File_close(&fh), "close 2");
    unsigned long sum = 0;
    for (MPI_Offset i = 0; i < size2; i++) sum = sum * 31 + all[i];
    printf("rank %d size %lld/%lld sum %lx\n", world_rank, (long long)size, (long long)size2, sum);
    free(all);
    free(buf);
    MPI_Type_free(&vec);
    MPI_Finalize();
    return 0;
}
