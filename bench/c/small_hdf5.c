/*
 * Small-transfer latency probe, parallel HDF5 baseline.
 *
 * One 1-D uint8 dataset of R*K*B bytes in DIR/small.h5 (MPI-IO driver).
 * Each rank does K writes of B bytes (default 4096) to its own slots with
 * INDEPENDENT MPI-IO (one small write is not a collective pattern), timing
 * every operation. Two modes, each printed as its own RESULT line:
 *   mode=write        H5Dwrite of a B-byte hyperslab only (lands in the page cache)
 *   mode=write+flush  H5Dwrite + H5Fflush(H5F_SCOPE_GLOBAL), which makes the
 *                     MPI-IO driver call MPI_File_sync (fsync): the same
 *                     guarantee as a pdcx transfer_wait with local durability.
 *                     H5Fflush is collective, so ranks advance in lockstep.
 *   mode=read         H5Dread of the B-byte slots of the plain dataset just written
 *                     (page cache: a warm small read), each checked
 *   mode=pwrite+fdatasync  no HDF5: pwrite of B bytes + fdatasync on a file of
 *                     each rank's own (DIR/small-sync-r<rank>.bin), fresh blocks each op:
 *                     the device's cost of one durable small write, the floor a
 *                     `local` small write + wait is measured against
 * Reported: mean, p50, p99 microseconds per operation over all ranks' ops.
 */
#include "h5common.h"

/* K reads of the rank's own slots of dset (written with data), timed and checked. */
static void read_mode(hid_t dset, int rank, int ops, uint64_t xfer, const unsigned char *data, double *lat)
{
    hid_t          fspace, mspace, dxpl;
    hsize_t        cnt[1] = {(hsize_t)xfer}, off[1];
    unsigned char *back   = (unsigned char *)xmalloc(xfer);
    int            i;
    H5ID(fspace, H5Dget_space(dset));
    H5ID(mspace, H5Screate_simple(1, cnt, NULL));
    dxpl = h5_dxpl(0);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    for (i = 0; i < ops; i++) {
        double t0 = now();
        off[0]    = ((hsize_t)rank * (hsize_t)ops + (hsize_t)i) * (hsize_t)xfer;
        H5OK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, off, NULL, cnt, NULL));
        H5OK(H5Dread(dset, H5T_NATIVE_UCHAR, mspace, fspace, dxpl, back));
        lat[i] = now() - t0;
        if (memcmp(back, data, xfer) != 0)
            die("small read %d: the data read back differs from what was written", i);
    }
    H5OK(H5Pclose(dxpl));
    H5OK(H5Sclose(mspace));
    H5OK(H5Sclose(fspace));
    free(back);
}

/* The device floor: K x (pwrite of B bytes at a fresh offset + fdatasync), no HDF5. */
static void sync_probe(const char *dir, int rank, int ops, uint64_t xfer, const unsigned char *data, double *lat)
{
    char path[4096];
    int  fd, i, w;
    w = snprintf(path, sizeof(path), "%s/small-sync-r%d.bin", dir, rank);
    if (w < 0 || (size_t)w >= sizeof(path))
        die("path too long: %s", dir);
    fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0)
        die("open %s: %s", path, strerror(errno));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    for (i = 0; i < ops; i++) {
        double t0 = now();
        if (pwrite(fd, data, xfer, (off_t)((uint64_t)i * xfer)) != (ssize_t)xfer)
            die("pwrite %s: %s", path, strerror(errno));
        if (fdatasync(fd) != 0)
            die("fdatasync %s: %s", path, strerror(errno));
        lat[i] = now() - t0;
    }
    if (close(fd) != 0 || unlink(path) != 0)
        die("close/unlink %s: %s", path, strerror(errno));
}

static void report_lat(const char *mode, int size, int ops, uint64_t xfer, const double *lat, const char *io)
{
    double mean, p50, p99, tot = 0;
    int    i;
    latency_stats(lat, ops, &mean, &p50, &p99);
    for (i = 0; i < ops; i++)
        tot += lat[i];
    tot = max_all(tot);
    report("small", "hdf5", (uint64_t)size * (uint64_t)ops * xfer, tot,
           "mode=%s xfer=%" PRIu64 " ops=%d mean_us=%.1f p50_us=%.1f p99_us=%.1f io=%s", mode, xfer, ops, mean, p50,
           p99, io);
}

static void run_mode(hid_t dset, int rank, int ops, uint64_t xfer, int flush, const unsigned char *data,
                     double *lat)
{
    hid_t   fspace, mspace, dxpl, file;
    hsize_t cnt[1] = {(hsize_t)xfer}, off[1];
    int     i;
    H5ID(fspace, H5Dget_space(dset));
    H5ID(mspace, H5Screate_simple(1, cnt, NULL));
    H5ID(file, H5Iget_file_id(dset));
    dxpl = h5_dxpl(0);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    for (i = 0; i < ops; i++) {
        double t0 = now();
        off[0]    = ((hsize_t)rank * (hsize_t)ops + (hsize_t)i) * (hsize_t)xfer;
        H5OK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, off, NULL, cnt, NULL));
        H5OK(H5Dwrite(dset, H5T_NATIVE_UCHAR, mspace, fspace, dxpl, data));
        if (flush)
            H5OK(H5Fflush(file, H5F_SCOPE_GLOBAL));
        lat[i] = now() - t0;
    }
    H5OK(H5Pclose(dxpl));
    H5OK(H5Fclose(file));
    H5OK(H5Sclose(mspace));
    H5OK(H5Sclose(fspace));
}

int main(int argc, char **argv)
{
    bench_opts_t   o;
    int            rank, size, flush;
    hid_t          fapl, file, fspace, dset;
    hsize_t        dims[1];
    char           path[4096];
    unsigned char *data;
    double        *lat;

    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    opts_parse(argc, argv, &o, "small-transfer latency, parallel HDF5 (-k ops/rank, default 1000; -b bytes, default 4096)\n");
    if (o.ops == 0)
        o.ops = 1000;
    if (o.xfer == 0)
        o.xfer = 4096;
    data = (unsigned char *)xmalloc(o.xfer);
    memset(data, 0xA5 ^ rank, o.xfer);
    lat = (double *)xmalloc(sizeof(double) * (size_t)o.ops);
    h5_path(path, sizeof(path), o.dir, "small.h5");

    fapl = h5_fapl_mpio();
    H5ID(file, H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
    /* Two datasets so the flushed mode writes fresh blocks too. */
    for (flush = 0; flush <= 1; flush++) {
        dims[0] = (hsize_t)size * (hsize_t)o.ops * (hsize_t)o.xfer;
        H5ID(fspace, H5Screate_simple(1, dims, NULL));
        H5ID(dset, H5Dcreate2(file, flush ? "flushed" : "plain", H5T_NATIVE_UCHAR, fspace, H5P_DEFAULT,
                              H5P_DEFAULT, H5P_DEFAULT));
        run_mode(dset, rank, o.ops, o.xfer, flush, data, lat);
        report_lat(flush ? "write+flush" : "write", size, o.ops, o.xfer, lat, "mpio-independent");
        if (!flush) {
            read_mode(dset, rank, o.ops, o.xfer, data, lat);
            report_lat("read", size, o.ops, o.xfer, lat, "mpio-independent");
        }
        H5OK(H5Dclose(dset));
        H5OK(H5Sclose(fspace));
    }
    H5OK(H5Fclose(file));
    H5OK(H5Pclose(fapl));
    sync_probe(o.dir, rank, o.ops, o.xfer, data, lat);
    report_lat("pwrite+fdatasync", size, o.ops, o.xfer, lat, "posix");
    free(lat);
    free(data);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
