/* excl PATH [delete|racing-delete]: exclusive creation and deletion as a file system gives them.
 *
 * Rank 0 deletes PATH (a missing file is fine; with `racing-delete` every rank deletes it at
 * once and goes straight on, as ROMIO's creat_excl test does), then every rank opens it with
 * MPI_MODE_CREATE|MPI_MODE_EXCL (must succeed), writes its block (BLOCK bytes of value
 * rank+1 at rank*BLOCK) collectively and closes it; a second EXCL open must fail. With
 * `delete`, rank 0 then deletes PATH (must succeed) and checks with access() that it is gone.
 * Prints "excl ok". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 65536

static void die(int rc, const char *what) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "excl: %s failed: %s\n", what, msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 2) {
        fprintf(stderr, "usage: excl PATH [delete]\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const char *path = argv[1];
    int del = argc > 2 && strcmp(argv[2], "delete") == 0;
    int racing = argc > 2 && strcmp(argv[2], "racing-delete") == 0;
    if (rank == 0 || racing) {
        int rc = MPI_File_delete(path, MPI_INFO_NULL);
        int cls = MPI_SUCCESS;
        if (rc != MPI_SUCCESS)
            MPI_Error_class(rc, &cls);
        if (cls != MPI_SUCCESS && cls != MPI_ERR_NO_SUCH_FILE)
            die(rc, "MPI_File_delete of a missing file");
    }
    if (!racing)
        MPI_Barrier(MPI_COMM_WORLD);
    MPI_File fh;
    MPI_Status st;
    int amode = MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_RDWR;
    die(MPI_File_open(MPI_COMM_WORLD, path, amode, MPI_INFO_NULL, &fh), "first EXCL open");
    char *buf = malloc(BLOCK);
    memset(buf, rank + 1, BLOCK);
    die(MPI_File_write_at_all(fh, (MPI_Offset)rank * BLOCK, buf, BLOCK, MPI_BYTE, &st),
        "MPI_File_write_at_all");
    die(MPI_File_close(&fh), "MPI_File_close");
    MPI_Barrier(MPI_COMM_WORLD);
    /* Errors of this open are returned, not fatal (files default to MPI_ERRORS_RETURN). */
    if (MPI_File_open(MPI_COMM_WORLD, path, amode, MPI_INFO_NULL, &fh) == MPI_SUCCESS) {
        fprintf(stderr, "excl: rank %d: the second EXCL open succeeded\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (del && rank == 0) {
        die(MPI_File_delete(path, MPI_INFO_NULL), "MPI_File_delete");
        if (access(path, F_OK) == 0) {
            fprintf(stderr, "excl: %s still exists after MPI_File_delete\n", path);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("excl ok\n");
    free(buf);
    MPI_Finalize();
    return 0;
}
