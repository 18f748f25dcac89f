/*
 * Shared helpers of the C benchmark kernels (bench/c): options, timing, the
 * RESULT line, deterministic particle data and its verification.
 * Header-only (static inline) so each kernel is one translation unit.
 * Needs only MPI; no PDC or HDF5 symbols here.
 */
#ifndef PDCX_BENCH_COMMON_H
#define PDCX_BENCH_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* errors                                                              */
/* ------------------------------------------------------------------ */

/* Print "kernel: rank r: message" and abort the whole MPI job (exit code 1). */
static inline void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static inline void die(const char *fmt, ...)
{
    int     rank = -1;
    va_list ap;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "FATAL rank %d: ", rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1); /* not reached */
}

/* Check an MPI return code. */
#define MPI_CHECK(call)                                                                                      \
    do {                                                                                                     \
        int mpi_rc_ = (call);                                                                                \
        if (mpi_rc_ != MPI_SUCCESS)                                                                          \
            die("%s:%d: %s failed (%d)", __FILE__, __LINE__, #call, mpi_rc_);                                \
    } while (0)

static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        die("out of memory allocating %zu bytes", n);
    return p;
}

/* ------------------------------------------------------------------ */
/* options                                                             */
/* ------------------------------------------------------------------ */

typedef struct {
    uint64_t particles;   /* -n: particles per (writer) rank */
    int      steps;       /* -s: time steps */
    double   compute;     /* -c: emulated compute seconds between steps */
    int      writers;     /* -w: ranks that wrote (BDCATS), default = ranks */
    uint64_t objects;     /* -m: objects to create (metadata probe), total over ranks */
    int      ops;         /* -k: operations per rank (latency / consistency probes) */
    uint64_t xfer;        /* -b: bytes per transfer (latency / consistency probes) */
    const char *dir;      /* -d: directory for HDF5 files */
    const char *prefix;   /* -p: object name prefix (PDC) */
    int      servers;     /* -S: pdcx servers (only reported; creates/s per server) */
    int      drop;        /* -D: drop the page cache between write and read (HACC) */
    int      verbose;     /* -v */
    const char *durability; /* -y: memory|local|remote (PDC kernels; NULL = the library default) */
    const char *label;    /* -L: appended to every RESULT line as label=... (run variants apart) */
    const char *mode;     /* -M: kernel-specific variant (meta: "create" = create+close, no tags) */
} bench_opts_t;

/* -L of this process: report() appends it, so run.sh can tell variants of one kernel apart. */
static const char *bench_label_g = NULL;

static inline void opts_usage(const char *prog, const char *help)
{
    fprintf(stderr,
            "usage: %s [-n particles/rank] [-s steps] [-c compute_s] [-w writer_ranks]\n"
            "          [-m objects] [-k ops] [-b bytes] [-d dir] [-p prefix] [-S servers] [-D] [-v]\n"
            "          [-y memory|local|remote] [-L label] [-M mode]\n%s",
            prog, help);
}

static inline uint64_t parse_u64(const char *s, const char *what)
{
    char              *end = NULL;
    unsigned long long v;
    errno = 0;
    v     = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-')
        die("bad value for %s: '%s'", what, s);
    return (uint64_t)v;
}

static inline void opts_parse(int argc, char **argv, bench_opts_t *o, const char *help)
{
    int c;
    memset(o, 0, sizeof(*o));
    o->particles = 1048576;
    o->steps     = 1;
    o->compute   = 0.0;
    o->writers   = 0;
    o->objects   = 20000;
    o->ops       = 0;
    o->xfer      = 0;
    o->dir       = ".";
    o->prefix    = "bench";
    o->servers   = 1;
    while ((c = getopt(argc, argv, "n:s:c:w:m:k:b:d:p:S:Dvy:L:M:h")) != -1) {
        switch (c) {
            case 'n': o->particles = parse_u64(optarg, "-n"); break;
            case 's': o->steps = (int)parse_u64(optarg, "-s"); break;
            case 'c': {
                char *end = NULL;
                o->compute = strtod(optarg, &end);
                if (end == optarg || *end != '\0' || o->compute < 0)
                    die("bad value for -c: '%s'", optarg);
                break;
            }
            case 'w': o->writers = (int)parse_u64(optarg, "-w"); break;
            case 'm': o->objects = parse_u64(optarg, "-m"); break;
            case 'k': o->ops = (int)parse_u64(optarg, "-k"); break;
            case 'b': o->xfer = parse_u64(optarg, "-b"); break;
            case 'd': o->dir = optarg; break;
            case 'p': o->prefix = optarg; break;
            case 'S': o->servers = (int)parse_u64(optarg, "-S"); break;
            case 'D': o->drop = 1; break;
            case 'v': o->verbose = 1; break;
            case 'y':
                if (strcmp(optarg, "memory") != 0 && strcmp(optarg, "local") != 0 && strcmp(optarg, "remote") != 0)
                    die("bad value for -y: '%s' (memory, local or remote)", optarg);
                o->durability = optarg;
                break;
            case 'L': o->label = optarg; bench_label_g = optarg; break;
            case 'M': o->mode = optarg; break;
            case 'h': opts_usage(argv[0], help); MPI_Finalize(); exit(0);
            default: opts_usage(argv[0], help); die("bad command line");
        }
    }
    if (optind != argc)
        die("unexpected argument '%s'", argv[optind]);
    if (o->particles == 0 || o->steps <= 0 || o->servers <= 0)
        die("-n, -s and -S must be positive");
}

/* ------------------------------------------------------------------ */
/* timing and reporting                                                */
/* ------------------------------------------------------------------ */

static inline double now(void) { return MPI_Wtime(); }

/* Barrier, then the current time: the start of a timed phase. */
static inline double phase_start(void)
{
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    return now();
}

/* The end of a compute phase inside a timed one: every rank waits for the
 * slowest to finish computing. Call it inside the span counted as compute, so
 * one rank's wait for another's computation is not charged to I/O (a
 * collective create or write would otherwise absorb it). PDC's own vpicio
 * fills its particles before the barrier that starts its clock. */
static inline void compute_done(void) { MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }

/* Max over ranks of a per-rank value (result valid on every rank). */
static inline double max_all(double v)
{
    double m = 0;
    MPI_CHECK(MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return m;
}

static inline double sum_all(double v)
{
    double m = 0;
    MPI_CHECK(MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    return m;
}

/*
 * Rank 0 prints one machine-readable line:
 *   RESULT kernel=K backend=B ranks=R bytes=N seconds=S mbps=M <extra>
 * mbps = bytes / seconds / 1e6 (MB = 10^6 bytes); extra is "key=value ..." or "".
 */
static inline void report(const char *kernel, const char *backend, uint64_t bytes, double seconds,
                          const char *extra_fmt, ...) __attribute__((format(printf, 5, 6)));
static inline void report(const char *kernel, const char *backend, uint64_t bytes, double seconds,
                          const char *extra_fmt, ...)
{
    int     rank = 0, size = 1;
    char    extra[1024];
    va_list ap;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank != 0)
        return;
    va_start(ap, extra_fmt);
    vsnprintf(extra, sizeof(extra), extra_fmt, ap);
    va_end(ap);
    printf("RESULT kernel=%s backend=%s ranks=%d bytes=%" PRIu64 " seconds=%.6f mbps=%.1f%s%s%s%s\n", kernel,
           backend, size, bytes, seconds, seconds > 0 ? (double)bytes / seconds / 1e6 : 0.0,
           extra[0] ? " " : "", extra, bench_label_g ? " label=" : "", bench_label_g ? bench_label_g : "");
    fflush(stdout);
}

static inline void sleep_seconds(double s)
{
    struct timespec ts;
    if (s <= 0)
        return;
    ts.tv_sec  = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0) {
        if (errno != EINTR)
            die("nanosleep: %s", strerror(errno));
    }
}

/*
 * Best effort: write back dirty pages and drop the page cache
 * (echo 3 > /proc/sys/vm/drop_caches; needs root). Collective, untimed.
 * Returns 1 if the cache was dropped, 0 if not (reason printed by rank 0).
 */
static inline int drop_page_cache(void)
{
    int rank = 0, ok = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        int fd;
        sync();
        fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
        if (fd < 0) {
            printf("NOTE drop_caches: cannot open /proc/sys/vm/drop_caches: %s (reads may hit the page cache)\n",
                   strerror(errno));
        }
        else {
            if (write(fd, "3\n", 2) == 2)
                ok = 1;
            else
                printf("NOTE drop_caches: write failed: %s (reads may hit the page cache)\n", strerror(errno));
            if (close(fd) != 0)
                ok = 0;
        }
        fflush(stdout);
    }
    MPI_CHECK(MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD));
    return ok;
}

/* Percentile (0..100) of a sorted array, nearest-rank. */
static inline double percentile_sorted(const double *v, size_t n, double p)
{
    size_t idx;
    if (n == 0)
        return 0;
    idx = (size_t)((p / 100.0) * (double)n + 0.999999);
    if (idx < 1)
        idx = 1;
    if (idx > n)
        idx = n;
    return v[idx - 1];
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/*
 * Gather per-op latencies (seconds) of all ranks on rank 0 and compute
 * mean / p50 / p99 in microseconds (valid on rank 0 only).
 */
static inline void latency_stats(const double *lat, int n, double *mean_us, double *p50_us, double *p99_us)
{
    int     rank = 0, size = 1, i;
    double *all  = NULL, sum = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0)
        all = (double *)xmalloc(sizeof(double) * (size_t)n * (size_t)size);
    MPI_CHECK(MPI_Gather(lat, n, MPI_DOUBLE, all, n, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    *mean_us = *p50_us = *p99_us = 0;
    if (rank == 0) {
        size_t total = (size_t)n * (size_t)size;
        for (i = 0; i < (int)total; i++)
            sum += all[i];
        qsort(all, total, sizeof(double), cmp_double);
        *mean_us = total ? sum / (double)total * 1e6 : 0;
        *p50_us  = percentile_sorted(all, total, 50) * 1e6;
        *p99_us  = percentile_sorted(all, total, 99) * 1e6;
        free(all);
    }
}

/* ------------------------------------------------------------------ */
/* deterministic particle data                                         */
/* ------------------------------------------------------------------ */

/*
 * Every value depends only on (variable v, global particle index g, step s),
 * so a reader with any split can regenerate and check it. Floats stay exact
 * integers below 2^24.
 */
static inline float gen_f32(int v, uint64_t g, int s)
{
    return (float)((g + (uint64_t)v * 1000003u + (uint64_t)s * 7919u) & 0xFFFFFFu);
}
static inline int32_t gen_i32(int v, uint64_t g, int s)
{
    return (int32_t)((g * 2u + (uint64_t)v + (uint64_t)s * 31u) & 0x7FFFFFFFu);
}
static inline int64_t gen_i64(int v, uint64_t g, int s)
{
    return (int64_t)(g * 3u + (uint64_t)v + ((uint64_t)s << 40));
}
static inline uint16_t gen_u16(int v, uint64_t g, int s) { return (uint16_t)((g + (uint64_t)v + (uint64_t)s) & 0xFFFFu); }

typedef enum { VT_F32, VT_I32, VT_I64, VT_U16 } vtype_t;

static inline size_t vtype_size(vtype_t t)
{
    switch (t) {
        case VT_F32: return 4;
        case VT_I32: return 4;
        case VT_I64: return 8;
        case VT_U16: return 2;
    }
    return 0;
}

/* Fill buf with n values of variable v for global indices [g0, g0+n), step s. */
static inline void fill_var(void *buf, vtype_t t, int v, uint64_t g0, uint64_t n, int s)
{
    uint64_t i;
    switch (t) {
        case VT_F32:
            for (i = 0; i < n; i++)
                ((float *)buf)[i] = gen_f32(v, g0 + i, s);
            break;
        case VT_I32:
            for (i = 0; i < n; i++)
                ((int32_t *)buf)[i] = gen_i32(v, g0 + i, s);
            break;
        case VT_I64:
            for (i = 0; i < n; i++)
                ((int64_t *)buf)[i] = gen_i64(v, g0 + i, s);
            break;
        case VT_U16:
            for (i = 0; i < n; i++)
                ((uint16_t *)buf)[i] = gen_u16(v, g0 + i, s);
            break;
    }
}

/* Order-independent checksum contribution of one element: mixes value bits with the index. */
static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static inline uint64_t elem_bits(const void *buf, vtype_t t, uint64_t i)
{
    uint32_t u32;
    uint64_t u64;
    uint16_t u16;
    switch (t) {
        case VT_F32:
        case VT_I32: memcpy(&u32, (const char *)buf + i * 4, 4); return u32;
        case VT_I64: memcpy(&u64, (const char *)buf + i * 8, 8); return u64;
        case VT_U16: memcpy(&u16, (const char *)buf + i * 2, 2); return u16;
    }
    return 0;
}

/*
 * Checksum of n read values (global indices g0..) and of the values the
 * writer generated for them. Returns the index of the first mismatching
 * element, or UINT64_MAX if all match; got and want receive the checksums.
 */
static inline uint64_t verify_var(const void *buf, vtype_t t, int v, uint64_t g0, uint64_t n, int s,
                                  uint64_t *got, uint64_t *want)
{
    uint64_t i, first = UINT64_MAX;
    void    *ref = xmalloc(vtype_size(t) * (n ? n : 1));
    fill_var(ref, t, v, g0, n, s);
    *got = *want = 0;
    for (i = 0; i < n; i++) {
        uint64_t a = elem_bits(buf, t, i), b = elem_bits(ref, t, i);
        *got += mix64(a ^ ((g0 + i) << 20));
        *want += mix64(b ^ ((g0 + i) << 20));
        if (a != b && first == UINT64_MAX)
            first = i;
    }
    free(ref);
    return first;
}

/*
 * Sums the checksums over ranks and fails loudly (every rank exits nonzero)
 * if any rank saw a mismatch. Rank 0 prints the totals.
 */
static inline void verify_global(const char *kernel, uint64_t got, uint64_t want, uint64_t bad_elems)
{
    uint64_t in[3] = {got, want, bad_elems}, out[3] = {0, 0, 0};
    int      rank  = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_CHECK(MPI_Allreduce(in, out, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
    if (rank == 0) {
        printf("VERIFY kernel=%s checksum=%016" PRIx64 " expected=%016" PRIx64 " bad_elements=%" PRIu64 " %s\n",
               kernel, out[0], out[1], out[2], (out[0] == out[1] && out[2] == 0) ? "OK" : "MISMATCH");
        fflush(stdout);
    }
    if (out[0] != out[1] || out[2] != 0) {
        if (rank == 0)
            fprintf(stderr, "FATAL %s: read-back data does not match what was written\n", kernel);
        MPI_Finalize();
        exit(3);
    }
}

/* Load-balanced split of total elements over size ranks: [*start, *start + *count) for part. */
static inline void split_range(uint64_t total, int size, int part, uint64_t *start, uint64_t *count)
{
    uint64_t base = total / (uint64_t)size, rem = total % (uint64_t)size, p = (uint64_t)part;
    *start = p * base + (p < rem ? p : rem);
    *count = base + (p < rem ? 1 : 0);
}

/* VPIC-IO variables: x y z px py pz (float32), id1 id2 (int32). */
#define VPIC_NVARS 8
static const char *const vpic_names[VPIC_NVARS]  = {"x", "y", "z", "px", "py", "pz", "id1", "id2"};
static const vtype_t     vpic_types[VPIC_NVARS]  = {VT_F32, VT_F32, VT_F32, VT_F32, VT_F32, VT_F32, VT_I32, VT_I32};

/*
 * BDCATS check: buf[s * VPIC_NVARS + v] holds global particles [start, start + count) of
 * variable v at step s; every mismatch is reported, then verify_global fails the run.
 */
static inline void verify_vpic_read(void *const *buf, int steps, uint64_t start, uint64_t count)
{
    uint64_t got = 0, want = 0, bad = 0;
    int      rank = 0, s, v;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (s = 0; s < steps; s++)
        for (v = 0; v < VPIC_NVARS; v++) {
            uint64_t g, w, first;
            first = verify_var(buf[s * VPIC_NVARS + v], vpic_types[v], v, start, count, s, &g, &w);
            got += g;
            want += w;
            if (first != UINT64_MAX) {
                bad++;
                fprintf(stderr, "MISMATCH rank %d step %d var %s: first bad element at global index %" PRIu64 "\n",
                        rank, s, vpic_names[v], start + first);
            }
        }
    verify_global("bdcats", got, want, bad);
}

/* HACC-IO variables: xx yy zz vx vy vz phi (float32), pid (int64), mask (uint16): 38 bytes/particle. */
#define HACC_NVARS 9
static const char *const hacc_names[HACC_NVARS] = {"xx", "yy", "zz", "vx", "vy", "vz", "phi", "pid", "mask"};
static const vtype_t     hacc_types[HACC_NVARS] = {VT_F32, VT_F32, VT_F32, VT_F32, VT_F32,
                                                   VT_F32, VT_F32, VT_I64, VT_U16};

static inline uint64_t bytes_per_particle(const vtype_t *types, int nvars)
{
    uint64_t b = 0;
    int      v;
    for (v = 0; v < nvars; v++)
        b += vtype_size(types[v]);
    return b;
}

#endif /* PDCX_BENCH_COMMON_H */
