/* shared PATH [pmpi]: shared file pointers as a file system gives them.
 *
 * Every rank writes a block of BLOCK ints (its rank, then a running index) with
 * MPI_File_write_shared; after a barrier every rank reads the whole file with
 * MPI_File_read_at and checks that it holds each rank's block exactly once, whole. Then
 * MPI_File_write_ordered appends a second round in rank order, and after a barrier every rank
 * checks it with MPI_File_read_at_all. Last, MPI_File_seek_shared(0) and MPI_File_read_shared:
 * the blocks read by all ranks together are the first-round blocks, each once. Every check
 * runs on every rank; any mismatch (e.g. zeros where another rank wrote) fails the program.
 * Prints "shared ok". The file's first round is in a run-dependent order, the second is not.
 * With `pmpi`, the shared-pointer calls go through their profiling names (PMPI_File_write_shared,
 * ...), as a tool or library layered on MPI calls them. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 1024

static void die(int rc, const char *what) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "shared: %s failed: %s\n", what, msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

static void fail(int rank, const char *what, long at, int got, int want) {
    fprintf(stderr, "shared: rank %d: %s: int %ld is %d, want %d\n", rank, what, at, got, want);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* `blocks` consecutive blocks of `buf`: each a whole block of a distinct rank < n. */
static void check_blocks(const int *buf, int blocks, int n, int rank, const char *what) {
    int *seen = calloc(n, sizeof(int));
    for (int b = 0; b < blocks; b++) {
        const int *blk = buf + (long)b * BLOCK;
        int owner = blk[0];
        if (owner < 0 || owner >= n || seen[owner])
            fail(rank, what, (long)b * BLOCK, owner, -1);
        seen[owner] = 1;
        for (int i = 1; i < BLOCK; i++)
            if (blk[i] != owner * 1000000 + i)
                fail(rank, what, (long)b * BLOCK + i, blk[i], owner * 1000000 + i);
    }
    free(seen);
}

typedef int (*data_call)(MPI_File, void *, int, MPI_Datatype, MPI_Status *);
typedef int (*const_data_call)(MPI_File, const void *, int, MPI_Datatype, MPI_Status *);
static const_data_call write_shared = MPI_File_write_shared, write_ordered = MPI_File_write_ordered;
static data_call read_shared = MPI_File_read_shared;
static int (*seek_shared)(MPI_File, MPI_Offset, int) = MPI_File_seek_shared;

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc < 2) {
        fprintf(stderr, "usage: shared PATH\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int *mine = malloc(BLOCK * sizeof(int));
    mine[0] = rank;
    for (int i = 1; i < BLOCK; i++)
        mine[i] = rank * 1000000 + i;
    long round = (long)n * BLOCK;
    int *all = malloc(2 * round * sizeof(int));
    MPI_File fh;
    MPI_Status st;
    if (argc > 2 && strcmp(argv[2], "pmpi") == 0) {
        write_shared = PMPI_File_write_shared;
        write_ordered = PMPI_File_write_ordered;
        read_shared = PMPI_File_read_shared;
        seek_shared = PMPI_File_seek_shared;
    }
    die(MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh),
        "MPI_File_open");
    die(MPI_File_set_size(fh, 0), "MPI_File_set_size");

    die(write_shared(fh, mine, BLOCK, MPI_INT, &st), "MPI_File_write_shared");
    MPI_Barrier(MPI_COMM_WORLD);
    memset(all, 0, 2 * round * sizeof(int));
    die(MPI_File_read_at(fh, 0, all, (int)round, MPI_INT, &st), "MPI_File_read_at");
    check_blocks(all, n, n, rank, "after write_shared and a barrier");

    /* The shared pointer is now at the end of the first round. */
    die(write_ordered(fh, mine, BLOCK, MPI_INT, &st), "MPI_File_write_ordered");
    MPI_Barrier(MPI_COMM_WORLD);
    memset(all, 0, 2 * round * sizeof(int));
    die(MPI_File_read_at_all(fh, 0, all, (int)(2 * round), MPI_INT, &st), "MPI_File_read_at_all");
    for (int r = 0; r < n; r++)
        for (int i = 0; i < BLOCK; i++) {
            int want = i == 0 ? r : r * 1000000 + i;
            long at = round + (long)r * BLOCK + i;
            if (all[at] != want)
                fail(rank, "after write_ordered and a barrier", at, all[at], want);
        }

    die(seek_shared(fh, 0, MPI_SEEK_SET), "MPI_File_seek_shared");
    int *got = calloc(BLOCK, sizeof(int));
    die(read_shared(fh, got, BLOCK, MPI_INT, &st), "MPI_File_read_shared");
    int *gathered = malloc(round * sizeof(int));
    MPI_Allgather(got, BLOCK, MPI_INT, gathered, BLOCK, MPI_INT, MPI_COMM_WORLD);
    check_blocks(gathered, n, n, rank, "read_shared after seek_shared");
    MPI_Offset pos = -1;
    MPI_Barrier(MPI_COMM_WORLD); /* every rank's read_shared has moved the pointer */
    die(MPI_File_get_position_shared(fh, &pos), "MPI_File_get_position_shared");
    /* In etypes: bytes, the default view's. */
    if (pos != round * (long)sizeof(int))
        fail(rank, "shared position after read_shared", 0, (int)pos, (int)(round * sizeof(int)));

    die(MPI_File_close(&fh), "MPI_File_close");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("shared ok\n");
    free(mine);
    free(all);
    free(got);
    free(gathered);
    MPI_Finalize();
    return 0;
}
