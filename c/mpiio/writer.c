/*
 * writer: an ordinary MPI-IO program (it knows nothing about pdcx) that writes one file in
 * one of several access patterns, for comparing a direct run with a run under `pdcx run`.
 *
 *   mpirun -n 4 ./writer MODE PATH [SIZE ...]
 *
 * Modes and their size arguments (sizes take K/M suffixes, powers of two):
 *   indep    [BLOCK]              MPI_File_write_at: rank r writes bytes [r*BLOCK, (r+1)*BLOCK)
 *                                 as two calls (first half, then second half)
 *   coll     [BLOCK]              the same layout with MPI_File_write_at_all
 *   strided  [UNIT [COUNT [GAP]]] a vector file view (COUNT blocks of UNIT-GAP bytes, stride
 *                                 ranks*UNIT, displacement r*UNIT) + MPI_File_write_all: the
 *                                 ranks' blocks interleave; GAP > 0 leaves a hole of GAP bytes
 *                                 at the end of every slot (holes are never written)
 *   strided-indep [UNIT [COUNT [GAP]]]  the same view written with independent MPI_File_write
 *                                 (ROMIO: data sieving, a read-modify-write of the whole range
 *                                 under a lock, so it reads back the other ranks' blocks)
 *   overlap  [BLOCK]              every rank writes its block; sync-barrier-sync; rank r rewrites
 *                                 the middle half of rank (r+1)%n's block; sync-barrier-sync;
 *                                 rank 0 writes a 64-byte header at 0, then a 40-byte one
 *   fpp      [BLOCK]              file per process: PATH.RANK opened on MPI_COMM_SELF, rank r
 *                                 writes BLOCK + r*1000 bytes in 4 calls
 *   multi    [BLOCK]              epochs: write blocks, sync; rewrite the first quarter of every
 *                                 block and append a half block per rank past the end, sync;
 *                                 set_size shrink to ranks*BLOCK - BLOCK/3, set_size grow to
 *                                 ranks*BLOCK + BLOCK, rank 0 writes 100 bytes at the new end-100;
 *                                 close
 *   readback [BLOCK]              write blocks, sync-barrier-sync, every rank reads rank
 *                                 (r+1)%n's block and its own (MPI_File_read_at) and checks them;
 *                                 also reads 100 bytes across EOF and checks the short count
 *
 * The content is deterministic: the byte at file offset o written by rank r in epoch e is
 * byte_at(o, r, e), so two runs of the same mode and size produce the same file.
 *
 * Environment: WRITER_HINTS="key=value,key=value" is passed as the MPI_Info of
 * MPI_File_open (e.g. romio_ds_write=disable,romio_cb_write=disable: ROMIO's data sieving and
 * two-phase writes read holes back from the file and write whatever the read left in their
 * buffer, so a run with holes is not byte-reproducible unless they are off).
 *
 * WRITER_CRASH_AFTER_SYNC=K (mode multi): right after the K-th MPI_File_sync returns, every
 * rank overwrites the first BLOCK/8 bytes of its block (epoch 9), all ranks meet in a
 * barrier and each kills itself with SIGKILL: a crash with written-but-unsynced data, whose
 * writes must never reach a copy made at the consistency points.
 *
 * Every MPI call is checked (MPI_ERRORS_RETURN on files); a failure prints the call and the
 * MPI error string and aborts with exit status 1. Rank 0 prints "writer MODE ok" at the end.
 */
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks;
static const char *mode;

#define CHECK(call)                                                                         \
    do {                                                                                    \
        int rc_ = (call);                                                                   \
        if (rc_ != MPI_SUCCESS) fail_mpi(#call, rc_, __LINE__);                             \
    } while (0)

static void fail_mpi(const char *what, int rc, int line) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "writer %s: rank %d: line %d: %s failed: %s\n", mode, rank, line, what, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static void fail(const char *fmt, const char *detail) {
    fprintf(stderr, "writer %s: rank %d: ", mode, rank);
    fprintf(stderr, fmt, detail);
    fprintf(stderr, "\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static uint8_t byte_at(uint64_t off, int r, int epoch) {
    uint64_t x = off * 0x9E3779B97F4A7C15ull + (uint64_t)(r + 1) * 0xBF58476D1CE4E5B9ull +
                 (uint64_t)(epoch + 1) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (uint8_t)(x ^ (x >> 17));
}

/* Fills buf with the bytes rank r writes in epoch e at file offsets off..off+len. */
static void fill(uint8_t *buf, uint64_t off, size_t len, int r, int epoch) {
    for (size_t i = 0; i < len; i++) buf[i] = byte_at(off + i, r, epoch);
}

static size_t parse_size(const char *s) {
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s) fail("bad size argument %s", s);
    if (*end == 'K' || *end == 'k') v <<= 10, end++;
    else if (*end == 'M' || *end == 'm') v <<= 20, end++;
    else if (*end == 'G' || *end == 'g') v <<= 30, end++;
    if (*end != '\0') fail("bad size argument %s", s);
    return (size_t)v;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) fail("out of memory%s", "");
    return p;
}

static MPI_Info hints(void) {
    MPI_Info info;
    CHECK(MPI_Info_create(&info));
    const char *env = getenv("WRITER_HINTS");
    if (!env || !*env) return info;
    char *copy = strdup(env), *save = NULL;
    for (char *kv = strtok_r(copy, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) fail("WRITER_HINTS entry without '=': %s", kv);
        *eq = '\0';
        CHECK(MPI_Info_set(info, kv, eq + 1));
    }
    free(copy);
    return info;
}

static MPI_File open_file(MPI_Comm comm, const char *path, int amode) {
    MPI_File fh;
    MPI_Info info = hints();
    /* Files get MPI_ERRORS_RETURN by default; set it explicitly so a failing open returns. */
    CHECK(MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN));
    int rc = MPI_File_open(comm, path, amode, info, &fh);
    if (rc != MPI_SUCCESS) fail_mpi("MPI_File_open", rc, __LINE__);
    CHECK(MPI_Info_free(&info));
    CHECK(MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN));
    return fh;
}

static void write_at(MPI_File fh, uint64_t off, size_t len, int epoch, int collective) {
    uint8_t *buf = xmalloc(len);
    fill(buf, off, len, rank, epoch);
    MPI_Status st;
    int count = 0;
    if (collective)
        CHECK(MPI_File_write_at_all(fh, (MPI_Offset)off, buf, (int)len, MPI_BYTE, &st));
    else
        CHECK(MPI_File_write_at(fh, (MPI_Offset)off, buf, (int)len, MPI_BYTE, &st));
    CHECK(MPI_Get_count(&st, MPI_BYTE, &count));
    if ((size_t)count != len) fail("short write%s", "");
    free(buf);
}

/* MPI-IO's rule for conflicting accesses from different ranks without atomic mode. */
static void sync_barrier_sync(MPI_File fh) {
    CHECK(MPI_File_sync(fh));
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    CHECK(MPI_File_sync(fh));
}

static void check_read(MPI_File fh, uint64_t off, size_t len, int owner, int epoch) {
    uint8_t *buf = xmalloc(len), *want = xmalloc(len);
    memset(buf, 0xEE, len);
    fill(want, off, len, owner, epoch);
    MPI_Status st;
    int count = 0;
    CHECK(MPI_File_read_at(fh, (MPI_Offset)off, buf, (int)len, MPI_BYTE, &st));
    CHECK(MPI_Get_count(&st, MPI_BYTE, &count));
    if ((size_t)count != len) {
        fprintf(stderr, "writer readback: rank %d: read_at(%llu, %zu) returned %d bytes\n", rank,
                (unsigned long long)off, len, count);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != want[i]) {
            fprintf(stderr,
                    "writer readback: rank %d: byte %llu (rank %d's block) is 0x%02x, want 0x%02x\n",
                    rank, (unsigned long long)(off + i), owner, buf[i], want[i]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    free(buf);
    free(want);
}

/* The WRITER_CRASH_AFTER_SYNC point (see the top of the file), checked after sync number n. */
static void crash_point(MPI_File fh, int n, size_t b) {
    const char *env = getenv("WRITER_CRASH_AFTER_SYNC");
    if (!env || atoi(env) != n) return;
    write_at(fh, (uint64_t)rank * b, b / 8, 9, 0);
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) fprintf(stderr, "writer %s: crashing after sync %d (WRITER_CRASH_AFTER_SYNC)\n", mode, n);
    fflush(NULL);
    raise(SIGKILL);
}

static size_t arg_size(int argc, char **argv, int i, size_t dflt) {
    return argc > i ? parse_size(argv[i]) : dflt;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (argc < 3) {
        if (rank == 0)
            fprintf(stderr, "usage: writer indep|coll|strided|strided-indep|overlap|fpp|multi|readback PATH "
                            "[SIZE ...]\n");
        MPI_Finalize();
        return 2;
    }
    mode = argv[1];
    const char *path = argv[2];
    const int wr = MPI_MODE_CREATE | MPI_MODE_WRONLY;
    const int n = nranks, r = rank;

    if (!strcmp(mode, "indep") || !strcmp(mode, "coll")) {
        size_t b = arg_size(argc, argv, 3, 1 << 20);
        int coll = !strcmp(mode, "coll");
        MPI_File fh = open_file(MPI_COMM_WORLD, path, wr);
        write_at(fh, (uint64_t)r * b, b / 2, 0, coll);
        write_at(fh, (uint64_t)r * b + b / 2, b - b / 2, 0, coll);
        CHECK(MPI_File_close(&fh));
    } else if (!strcmp(mode, "strided") || !strcmp(mode, "strided-indep")) {
        size_t unit = arg_size(argc, argv, 3, 64 << 10);
        size_t count = arg_size(argc, argv, 4, 8);
        size_t gap = arg_size(argc, argv, 5, 0);
        if (gap >= unit) fail("GAP must be smaller than UNIT%s", "");
        size_t blk = unit - gap;
        MPI_Datatype ftype, vec;
        CHECK(MPI_Type_vector((int)count, (int)blk, (int)(unit * n), MPI_BYTE, &vec));
        /* Extent = the whole file pattern, so a second write_all would continue after it. */
        CHECK(MPI_Type_create_resized(vec, 0, (MPI_Aint)(unit * n * count), &ftype));
        CHECK(MPI_Type_commit(&ftype));
        MPI_File fh = open_file(MPI_COMM_WORLD, path, wr);
        CHECK(MPI_File_set_view(fh, (MPI_Offset)(r * unit), MPI_BYTE, ftype, "native",
                                MPI_INFO_NULL));
        uint8_t *buf = xmalloc(blk * count);
        for (size_t j = 0; j < count; j++)
            fill(buf + j * blk, (uint64_t)(j * n + r) * unit, blk, r, 0);
        MPI_Status st;
        if (!strcmp(mode, "strided"))
            CHECK(MPI_File_write_all(fh, buf, (int)(blk * count), MPI_BYTE, &st));
        else
            CHECK(MPI_File_write(fh, buf, (int)(blk * count), MPI_BYTE, &st));
        CHECK(MPI_File_close(&fh));
        CHECK(MPI_Type_free(&ftype));
        CHECK(MPI_Type_free(&vec));
        free(buf);
    } else if (!strcmp(mode, "overlap")) {
        size_t b = arg_size(argc, argv, 3, 256 << 10);
        if (b < 128) fail("BLOCK must be at least 128 bytes%s", "");
        MPI_File fh = open_file(MPI_COMM_WORLD, path, wr);
        write_at(fh, (uint64_t)r * b, b, 0, 0);
        sync_barrier_sync(fh);
        write_at(fh, (uint64_t)((r + 1) % n) * b + b / 4, b / 2, 1, 0);
        sync_barrier_sync(fh);
        if (r == 0) {
            write_at(fh, 0, 64, 2, 0);
            write_at(fh, 0, 40, 3, 0); /* a shorter header: bytes 40..63 stay from epoch 2 */
        }
        CHECK(MPI_File_close(&fh));
    } else if (!strcmp(mode, "fpp")) {
        size_t b = arg_size(argc, argv, 3, 256 << 10) + (size_t)r * 1000;
        char *p = xmalloc(strlen(path) + 16);
        sprintf(p, "%s.%d", path, r);
        MPI_File fh = open_file(MPI_COMM_SELF, p, wr);
        size_t q = b / 4;
        for (int i = 0; i < 4; i++) write_at(fh, (uint64_t)i * q, i == 3 ? b - 3 * q : q, 0, 0);
        CHECK(MPI_File_close(&fh));
        free(p);
    } else if (!strcmp(mode, "multi")) {
        size_t b = arg_size(argc, argv, 3, 256 << 10);
        MPI_File fh = open_file(MPI_COMM_WORLD, path, wr);
        write_at(fh, (uint64_t)r * b, b, 0, 0);
        CHECK(MPI_File_sync(fh));
        crash_point(fh, 1, b);
        write_at(fh, (uint64_t)r * b, b / 4, 1, 0);
        write_at(fh, (uint64_t)n * b + (uint64_t)r * (b / 2), b / 2, 1, 0);
        CHECK(MPI_File_sync(fh));
        crash_point(fh, 2, b);
        CHECK(MPI_File_set_size(fh, (MPI_Offset)(n * b - b / 3)));
        CHECK(MPI_File_set_size(fh, (MPI_Offset)(n * b + b)));
        if (r == 0) write_at(fh, (uint64_t)(n * b + b - 100), 100, 2, 0);
        MPI_Offset size = 0;
        CHECK(MPI_File_sync(fh));
        CHECK(MPI_File_get_size(fh, &size));
        if (size != (MPI_Offset)(n * b + b)) fail("get_size after set_size is wrong%s", "");
        CHECK(MPI_File_close(&fh));
    } else if (!strcmp(mode, "readback")) {
        size_t b = arg_size(argc, argv, 3, 256 << 10);
        MPI_File fh = open_file(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR);
        write_at(fh, (uint64_t)r * b, b, 0, 0);
        sync_barrier_sync(fh);
        int other = (r + 1) % n;
        check_read(fh, (uint64_t)other * b, b, other, 0);
        check_read(fh, (uint64_t)r * b, b, r, 0);
        /* A read across EOF returns only the bytes that exist. */
        uint8_t tail[100];
        MPI_Status st;
        int count = -1;
        CHECK(MPI_File_read_at(fh, (MPI_Offset)(n * b - 40), tail, 100, MPI_BYTE, &st));
        CHECK(MPI_Get_count(&st, MPI_BYTE, &count));
        if (count != 40) {
            fprintf(stderr, "writer readback: rank %d: read across EOF returned %d bytes, want 40\n",
                    r, count);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        MPI_Offset size = 0;
        CHECK(MPI_File_get_size(fh, &size));
        if (size != (MPI_Offset)(n * b)) fail("get_size is wrong%s", "");
        CHECK(MPI_File_close(&fh));
    } else {
        fail("unknown mode %s", mode);
    }
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) printf("writer %s ok\n", mode);
    MPI_Finalize();
    return 0;
}
