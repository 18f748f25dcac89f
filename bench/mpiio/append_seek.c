/*
 * append_seek: appends vs seek-and-writes (ParaLog §8.7.2, Fig. 13b). Every rank, for
 * every SIZE, writes its own file twice:
 *   append: open DIR/app.SIZE.RANK, COUNT x MPI_File_write (the individual file pointer
 *           advances: each write appends), [sync], close
 *   seek:   open DIR/seek.SIZE.RANK, COUNT x { MPI_File_seek(slot(i)*SIZE) ; MPI_File_write },
 *           slot(i) = (37*i + 11) mod COUNT (a permutation: every slot once, out of order),
 *           [sync], close
 *
 *   mpirun -n R ./append_seek [-b LABEL] [-S] [-n COUNT] DIR SIZE...
 *
 * Prints per size and pattern (slowest rank, open to close):
 *   RESULT bench=append_seek label=LABEL sync=0|1 pattern=append|seek ranks=R size=B count=N
 *          seconds=S mbps=M
 */
#include <getopt.h>
#include <unistd.h>

#include "common.h"

static size_t gcd(size_t a, size_t b) { return b ? gcd(b, a % b) : a; }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    prog = "append_seek";
    const char *label = "direct";
    int sync = 0, opt;
    size_t count = 100;
    while ((opt = getopt(argc, argv, "b:Sn:")) != -1) {
        switch (opt) {
        case 'b': label = optarg; break;
        case 'S': sync = 1; break;
        case 'n': count = parse_size(optarg); break;
        default: die("usage: append_seek [-b LABEL] [-S] [-n COUNT] DIR SIZE...");
        }
    }
    if (argc - optind < 2 || count == 0) die("usage: append_seek [-b LABEL] [-S] [-n COUNT] DIR SIZE...");
    size_t mult = 37;
    while (gcd(mult, count) != 1) mult++; /* keeps slot() a permutation for any COUNT */
    const char *dir = argv[optind];
    char path[4096];
    for (int a = optind + 1; a < argc; a++) {
        size_t size = parse_size(argv[a]);
        if (size == 0 || size > (size_t)1 << 30) die("SIZE must be 1..1G");
        uint8_t *buf = make_buf(size, a);
        for (int seek = 0; seek < 2; seek++) {
            snprintf(path, sizeof path, "%s/%s.%zu.%d", dir, seek ? "seek" : "app", size, rank);
            CHECK(MPI_Barrier(MPI_COMM_WORLD));
            double t0 = now();
            MPI_File fh = open_w(MPI_COMM_SELF, path);
            for (size_t i = 0; i < count; i++) {
                MPI_Status st;
                if (seek)
                    CHECK(MPI_File_seek(fh, (MPI_Offset)(((mult * i + 11) % count) * size), MPI_SEEK_SET));
                CHECK(MPI_File_write(fh, buf, (int)size, MPI_BYTE, &st));
            }
            if (sync) CHECK(MPI_File_sync(fh));
            CHECK(MPI_File_close(&fh));
            double t = max_all(now() - t0);
            if (rank == 0)
                printf("RESULT bench=append_seek label=%s sync=%d pattern=%s ranks=%d size=%zu "
                       "count=%zu seconds=%.6f mbps=%.2f\n",
                       label, sync, seek ? "seek" : "append", nranks, size, count, t,
                       (double)size * count * nranks / t / 1e6);
            fflush(stdout);
        }
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
