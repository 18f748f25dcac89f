/*
 * e2e: end-to-end time of a simulation-like MPI program (ParaLog §8.1-8.4). STEPS steps,
 * each a compute phase of COMPUTE seconds (a busy loop calibrated at start, so it is CPU work
 * that background I/O competes with, not a sleep); every EVERY steps an output: all ranks
 * open DIR/ckpt.NNNN (one shared file per output), write MIB MiB each at rank*MIB MiB with
 * MPI_File_write_at_all, MPI_File_sync, close.
 *
 *   mpirun -n R ./e2e [-b LABEL] [-s STEPS] [-k EVERY] [-m MIB] [-c COMPUTE_SEC] [-r RATE]
 *                     [-u REQ_FIFO -a ACK_FIFO] DIR
 *   mpirun -n R ./e2e -P            (calibrate only: prints "CALIBRATE rate=RATE")
 *
 * -r RATE uses RATE loop iterations per second instead of calibrating, so runs that are
 * compared do the same amount of compute work (run.sh calibrates once and passes it on).
 *
 * -u/-a: the "stage + copy" baseline of an S3 home (what a program without pdcx does): after
 * each output is closed, rank 0 writes the file's path as one line to REQ_FIFO and waits for
 * one line back on ACK_FIFO ("ok ..." once an uploader, bench/mpiio/s3tool.py serve, has
 * copied the file to S3); every rank waits for it (a barrier) before the next compute phase.
 * A resident uploader, so no process start or Python import is paid per output.
 *
 * Prints one line (seconds: first step start to last close on all ranks; io_seconds: the
 * slowest rank's time inside open..close summed over outputs, plus the uploads with -u;
 * upload_seconds: the uploads alone):
 *   RESULT bench=e2e label=LABEL ranks=R steps=S every=K mib=M compute=C outputs=O
 *          seconds=T io_seconds=I compute_seconds=C upload_seconds=U
 */
#include <getopt.h>
#include <unistd.h>

#include "common.h"

#define USAGE                                                                               \
    "usage: e2e [-b LABEL] [-s STEPS] [-k EVERY] [-m MIB] [-c SEC] [-r RATE] [-u REQ -a ACK] DIR | -P"

static volatile double sink;

/* Runs `iters` iterations of a dependent floating-point chain (not vectorisable). */
static void spin(uint64_t iters) {
    double x = 1.0;
    for (uint64_t i = 0; i < iters; i++) x = x * 1.0000001 + 1e-9;
    sink = x;
}

/* Iterations per second of spin() on this rank: the best of 3 trials of >= 0.2 s, so a
 * moment of contention from other processes during calibration does not shorten every
 * compute phase of the run. */
static double calibrate(void) {
    uint64_t n = 1u << 20;
    double best = 0;
    for (int trial = 0; trial < 3;) {
        double t0 = now();
        spin(n);
        double t = now() - t0;
        if (t < 0.2) {
            n *= 2;
            continue;
        }
        if ((double)n / t > best) best = (double)n / t;
        trial++;
    }
    return best;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    prog = "e2e";
    const char *label = "direct";
    int steps = 20, every = 1, opt;
    size_t mib = 32;
    double compute = 0.5, given_rate = 0;
    int calibrate_only = 0;
    const char *req_path = NULL, *ack_path = NULL;
    while ((opt = getopt(argc, argv, "b:s:k:m:c:r:u:a:P")) != -1) {
        switch (opt) {
        case 'b': label = optarg; break;
        case 's': steps = atoi(optarg); break;
        case 'k': every = atoi(optarg); break;
        case 'm': mib = parse_size(optarg); break;
        case 'c': compute = atof(optarg); break;
        case 'r': given_rate = atof(optarg); break;
        case 'u': req_path = optarg; break;
        case 'a': ack_path = optarg; break;
        case 'P': calibrate_only = 1; break;
        default: die(USAGE);
        }
    }
    if (calibrate_only) {
        double r = calibrate(), sum = 0;
        CHECK(MPI_Allreduce(&r, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        if (rank == 0) printf("CALIBRATE rate=%.0f\n", sum / nranks);
        MPI_Finalize();
        return 0;
    }
    if (argc - optind != 1 || steps < 1 || every < 1 || mib < 1 || compute < 0 ||
        !req_path != !ack_path)
        die(USAGE);
    const char *dir = argv[optind];
    /* Both ends open the request FIFO first, then the acknowledgement FIFO (the uploader in
     * the same order), so neither open blocks forever. */
    FILE *req = NULL, *ack = NULL;
    if (req_path && rank == 0) {
        if (!(req = fopen(req_path, "w")) || !(ack = fopen(ack_path, "r")))
            die("cannot open the uploader's FIFOs (-u/-a)");
    }
    size_t bytes = mib << 20;
    /* Every rank calibrates at once, as they will compute (calibrating one rank while the
     * others busy-wait in MPI would measure a contended core); all spin the mean count. */
    double rate = given_rate > 0 ? given_rate : calibrate(), sum = 0;
    CHECK(MPI_Allreduce(&rate, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    rate = sum / nranks;
    uint64_t iters = (uint64_t)(rate * compute);
    uint8_t *buf = make_buf(bytes, 0);
    char path[4096];
    double io = 0, busy = 0, upload = 0;
    int outputs = 0;
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = now();
    for (int s = 1; s <= steps; s++) {
        double c0 = now();
        spin(iters);
        busy += now() - c0;
        if (s % every) continue;
        memcpy(buf, &s, sizeof s); /* each output's bytes differ */
        snprintf(path, sizeof path, "%s/ckpt.%04d", dir, s);
        double o0 = now();
        MPI_File fh = open_w(MPI_COMM_WORLD, path);
        MPI_Status st;
        /* write_at_all takes an int count: write in pieces of at most 1 GiB. */
        for (size_t done = 0; done < bytes;) {
            size_t n = bytes - done < (1u << 30) ? bytes - done : (1u << 30);
            CHECK(MPI_File_write_at_all(fh, (MPI_Offset)(rank * bytes + done), buf + done, (int)n,
                                        MPI_BYTE, &st));
            done += n;
        }
        CHECK(MPI_File_sync(fh));
        CHECK(MPI_File_close(&fh));
        if (req_path) {
            if (rank == 0) {
                double u0 = now();
                char line[4200];
                if (fprintf(req, "%s\n", path) < 0 || fflush(req) != 0) die("uploader gone (write)");
                if (!fgets(line, sizeof line, ack)) die("uploader gone (no acknowledgement)");
                if (strncmp(line, "ok", 2) != 0) {
                    fprintf(stderr, "e2e: upload of %s failed: %s", path, line);
                    die("upload failed");
                }
                upload += now() - u0;
            }
            CHECK(MPI_Barrier(MPI_COMM_WORLD));
        }
        io += now() - o0;
        outputs++;
    }
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double t = now() - t0;
    double io_max = max_all(io), busy_max = max_all(busy), upload_max = max_all(upload);
    if (req) fclose(req); /* EOF: the uploader exits */
    if (ack) fclose(ack);
    if (rank == 0)
        printf("RESULT bench=e2e label=%s ranks=%d steps=%d every=%d mib=%zu compute=%.3f outputs=%d "
               "seconds=%.3f io_seconds=%.3f compute_seconds=%.3f upload_seconds=%.3f\n",
               label, nranks, steps, every, mib, compute, outputs, t, io_max, busy_max, upload_max);
    free(buf);
    MPI_Finalize();
    return 0;
}
