/* posixview PATH [plain]: what the file system shows of an MPI-IO file after MPI_File_sync and after
 * MPI_File_close, read with stdio and stat as a post-processing step of the same program
 * would read it.
 *
 * Every rank writes BLOCK bytes of value rank+1 at rank*BLOCK collectively, then
 * MPI_File_sync and a barrier: rank 0 stat()s PATH (size n*BLOCK) and reads it with
 * fopen/fread while it is still open. Every rank then writes a second block of value
 * rank+101 at (n+rank)*BLOCK and closes the file; after a barrier every rank stat()s PATH
 * (size 2*n*BLOCK) and reads all of it with fopen/fread, and rank 0 once more with
 * open/read. With `plain`, rank 0 then writes two files of its own next to PATH, PATH.notes
 * with fopen and PATH.raw with open, twice each (plain files, not MPI-IO).
 * Prints "posixview ok"; any difference is printed and aborts. */
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK 65536

static int rank, nranks;

static void die(int rc, const char *what) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "posixview: rank %d: %s failed: %s\n", rank, what, msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

static void fail(const char *what) {
    fprintf(stderr, "posixview: rank %d: %s\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* The value of byte i of the file once `rounds` rounds are written. */
static unsigned char expected(long i) {
    long block = i / BLOCK;
    return block < nranks ? (unsigned char)(block + 1) : (unsigned char)(block - nranks + 101);
}

/* Checks PATH's size and bytes with stat and stdio (and POSIX read when `posix`). */
static void check(const char *path, int rounds, int posix) {
    long want = (long)rounds * nranks * BLOCK;
    struct stat st;
    char msg[256];
    if (stat(path, &st) != 0)
        fail("stat failed");
    if (st.st_size != want) {
        snprintf(msg, sizeof msg, "stat size %ld after %d round(s), want %ld", (long)st.st_size, rounds,
                 want);
        fail(msg);
    }
    unsigned char *buf = malloc(want);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail("fopen failed");
    size_t got = fread(buf, 1, want, f);
    fclose(f);
    if ((long)got != want) {
        snprintf(msg, sizeof msg, "fread returned %zu bytes, want %ld", got, want);
        fail(msg);
    }
    if (posix) {
        int fd = open(path, O_RDONLY);
        unsigned char *again = malloc(want);
        if (fd < 0 || read(fd, again, want) != want || memcmp(buf, again, want) != 0)
            fail("open/read differs from fread");
        close(fd);
        free(again);
    }
    for (long i = 0; i < want; i++) {
        if (buf[i] != expected(i)) {
            snprintf(msg, sizeof msg, "byte %ld is 0x%02x after %d round(s), want 0x%02x", i, buf[i], rounds,
                     expected(i));
            fail(msg);
        }
    }
    free(buf);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (argc < 2) {
        fprintf(stderr, "usage: posixview PATH\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const char *path = argv[1];
    MPI_File fh;
    MPI_Status status;
    char *buf = malloc(BLOCK);
    die(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh),
        "MPI_File_open");
    memset(buf, rank + 1, BLOCK);
    die(MPI_File_write_at_all(fh, (MPI_Offset)rank * BLOCK, buf, BLOCK, MPI_BYTE, &status),
        "MPI_File_write_at_all");
    die(MPI_File_sync(fh), "MPI_File_sync");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        check(path, 1, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    memset(buf, rank + 101, BLOCK);
    die(MPI_File_write_at_all(fh, (MPI_Offset)(nranks + rank) * BLOCK, buf, BLOCK, MPI_BYTE, &status),
        "MPI_File_write_at_all (second round)");
    die(MPI_File_close(&fh), "MPI_File_close");
    MPI_Barrier(MPI_COMM_WORLD);
    check(path, 2, rank == 0);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && argc > 2 && strcmp(argv[2], "plain") == 0) {
        char other[4096];
        for (int round = 0; round < 2; round++) {
            snprintf(other, sizeof other, "%s.notes", path);
            FILE *f = fopen(other, "w");
            if (!f || fputs("notes\n", f) < 0 || fclose(f) != 0)
                fail("writing PATH.notes");
            snprintf(other, sizeof other, "%s.raw", path);
            int fd = open(other, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0 || write(fd, "raw\n", 4) != 4 || close(fd) != 0)
                fail("writing PATH.raw");
        }
    }
    free(buf);
    if (rank == 0)
        printf("posixview ok\n");
    MPI_Finalize();
    return 0;
}
