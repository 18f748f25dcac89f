/* Shared helpers of the bench/mpiio programs: ordinary MPI-IO programs that know nothing
 * about pdcx, so the same binary runs directly and under `pdcx run`. Every MPI call is
 * checked; a failure prints the call and aborts (exit status 1). */
#ifndef BENCH_MPIIO_COMMON_H
#define BENCH_MPIIO_COMMON_H
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int rank, nranks;
static const char *prog = "bench";

#define CHECK(call)                                                                         \
    do {                                                                                    \
        int rc_ = (call);                                                                   \
        if (rc_ != MPI_SUCCESS) fail_mpi(#call, rc_, __LINE__);                             \
    } while (0)

static void fail_mpi(const char *what, int rc, int line) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "%s: rank %d: line %d: %s failed: %s\n", prog, rank, line, what, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static void die(const char *msg) {
    fprintf(stderr, "%s: rank %d: %s\n", prog, rank, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t parse_size(const char *s) {
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s) die("bad size argument");
    if (*end == 'K' || *end == 'k') v <<= 10, end++;
    else if (*end == 'M' || *end == 'm') v <<= 20, end++;
    else if (*end == 'G' || *end == 'g') v <<= 30, end++;
    if (*end != '\0') die("bad size argument");
    return (size_t)v;
}

/* A buffer of non-zero, non-repeating bytes (compressible data would flatter nobody here,
 * but zeros could be special-cased by a file system). */
static uint8_t *make_buf(size_t n, int salt) {
    uint8_t *b = malloc(n ? n : 1);
    if (!b) die("out of memory");
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(rank + 1) + (uint64_t)salt;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b[i] = (uint8_t)x;
    }
    return b;
}

static MPI_File open_w(MPI_Comm comm, const char *path) {
    MPI_File fh;
    CHECK(MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN));
    CHECK(MPI_File_open(comm, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh));
    return fh;
}

/* Slowest rank's value: a phase ends when the last rank is done. */
static double max_all(double v) {
    double m = 0;
    CHECK(MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return m;
}
#endif
