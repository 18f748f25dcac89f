/*
 * seg_create: segment creation (ParaLog §8.7.1, Fig. 13a). Every rank, for every SIZE:
 * REPS times { MPI_File_open(DIR/seg.SIZE.RANK.I, MPI_COMM_SELF) ; MPI_File_write_at(0, SIZE
 * bytes) ; [MPI_File_sync] ; MPI_File_close }, each a new file. REPS = TOTAL/SIZE clamped to
 * [MINREPS, MAXREPS], so every size moves about the same volume.
 *
 *   mpirun -n R ./seg_create [-b LABEL] [-S] [-t TOTAL_MIB] [-r MAXREPS] [-m MINREPS] DIR SIZE...
 *
 *   -S  MPI_File_sync before every close (the data is durable when close returns, as a pdcx
 *       consistency point makes it): compare like with like
 * Prints per size (time from the first open of any rank to the last close of all ranks):
 *   RESULT bench=seg_create label=LABEL sync=0|1 ranks=R size=B reps=N seconds=S mbps=M
 */
#include <getopt.h>
#include <unistd.h>

#include "common.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    prog = "seg_create";
    const char *label = "direct";
    int sync = 0, opt;
    size_t total = 128u << 20, maxreps = 200, minreps = 8;
    while ((opt = getopt(argc, argv, "b:St:r:m:")) != -1) {
        switch (opt) {
        case 'b': label = optarg; break;
        case 'S': sync = 1; break;
        case 't': total = parse_size(optarg) << 20; break;
        case 'r': maxreps = parse_size(optarg); break;
        case 'm': minreps = parse_size(optarg); break;
        default: die("usage: seg_create [-b LABEL] [-S] [-t TOTAL_MIB] [-r MAXREPS] [-m MINREPS] DIR SIZE...");
        }
    }
    if (argc - optind < 2) die("usage: seg_create [-b LABEL] [-S] [-t TOTAL_MIB] DIR SIZE...");
    const char *dir = argv[optind];
    char path[4096];
    for (int a = optind + 1; a < argc; a++) {
        size_t size = parse_size(argv[a]);
        if (size == 0 || size > (size_t)1 << 30) die("SIZE must be 1..1G");
        size_t reps = total / size;
        if (reps > maxreps) reps = maxreps;
        if (reps < minreps) reps = minreps;
        uint8_t *buf = make_buf(size, (int)a);
        CHECK(MPI_Barrier(MPI_COMM_WORLD));
        double t0 = now();
        for (size_t i = 0; i < reps; i++) {
            snprintf(path, sizeof path, "%s/seg.%zu.%d.%zu", dir, size, rank, i);
            MPI_File fh = open_w(MPI_COMM_SELF, path);
            MPI_Status st;
            CHECK(MPI_File_write_at(fh, 0, buf, (int)size, MPI_BYTE, &st));
            if (sync) CHECK(MPI_File_sync(fh));
            CHECK(MPI_File_close(&fh));
        }
        double t = max_all(now() - t0);
        if (rank == 0)
            printf("RESULT bench=seg_create label=%s sync=%d ranks=%d size=%zu reps=%zu seconds=%.6f "
                   "mbps=%.2f\n",
                   label, sync, nranks, size, reps, t, (double)size * reps * nranks / t / 1e6);
        fflush(stdout);
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
