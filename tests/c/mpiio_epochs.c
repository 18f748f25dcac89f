/* An unmodified MPI-IO checkpointer for the crash tests (tests/test_mpiio_crash.py).
 *
 *   mpiio_epochs PATH EPOCHS BLOCK SLEEP_MS
 *
 * Epoch e (1..EPOCHS): every rank r writes BLOCK bytes at offset 64 + r*BLOCK (byte i is
 * (e*31 + r*7 + i) % 251), rank 0 writes a 64-byte header "epoch e of N" at 0, all ranks
 * MPI_File_sync; after the sync returns rank 0 prints "synced e" (flushed). Then SLEEP_MS
 * of "compute". Epochs are collective writes (write_at_all). The file is closed at the end.
 * The content after epoch e is therefore known exactly: the test computes it. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void die(const char *what, int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(rc, msg, &n);
    fprintf(stderr, "mpiio_epochs: %s failed: %s\n", what, msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (argc != 5) {
        fprintf(stderr, "usage: mpiio_epochs PATH EPOCHS BLOCK SLEEP_MS\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int epochs = atoi(argv[2]);
    long block = atol(argv[3]);
    int sleep_ms = atoi(argv[4]);
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    if (rc != MPI_SUCCESS) die("MPI_File_open", rc);
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    char *buf = malloc(block);
    char header[64];
    for (int e = 1; e <= epochs; e++) {
        for (long i = 0; i < block; i++) buf[i] = (char)((e * 31 + rank * 7 + i) % 251);
        rc = MPI_File_write_at_all(fh, 64 + (MPI_Offset)rank * block, buf, (int)block, MPI_BYTE, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) die("MPI_File_write_at_all", rc);
        if (rank == 0) {
            memset(header, 0, sizeof header);
            snprintf(header, sizeof header, "epoch %d of %d", e, epochs);
            rc = MPI_File_write_at(fh, 0, header, sizeof header, MPI_BYTE, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) die("MPI_File_write_at", rc);
        }
        rc = MPI_File_sync(fh);
        if (rc != MPI_SUCCESS) die("MPI_File_sync", rc);
        if (rank == 0) {
            printf("synced %d\n", e);
            fflush(stdout);
        }
        usleep(sleep_ms * 1000);
    }
    rc = MPI_File_close(&fh);
    if (rc != MPI_SUCCESS) die("MPI_File_close", rc);
    if (rank == 0) printf("closed\n");
    free(buf);
    MPI_Finalize();
    return 0;
}
