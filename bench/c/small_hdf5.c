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
 * Reported: mean, p50, p99 microseconds per operation over all ranks' ops.
 */
#include "h5common.h"

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
        double mean, p50, p99;
        dims[0] = (hsize_t)size * (hsize_t)o.ops * (hsize_t)o.xfer;
        H5ID(fspace, H5Screate_simple(1, dims, NULL));
        H5ID(dset, H5Dcreate2(file, flush ? "flushed" : "plain", H5T_NATIVE_UCHAR, fspace, H5P_DEFAULT,
                              H5P_DEFAULT, H5P_DEFAULT));
        run_mode(dset, rank, o.ops, o.xfer, flush, data, lat);
        latency_stats(lat, o.ops, &mean, &p50, &p99);
        {
            double tot = 0;
            int    i;
            for (i = 0; i < o.ops; i++)
                tot += lat[i];
            tot = max_all(tot);
            report("small", "hdf5", (uint64_t)size * (uint64_t)o.ops * o.xfer, tot,
                   "mode=%s xfer=%" PRIu64 " ops=%d mean_us=%.1f p50_us=%.1f p99_us=%.1f io=mpio-independent",
                   flush ? "write+flush" : "write", o.xfer, o.ops, mean, p50, p99);
        }
        H5OK(H5Dclose(dset));
        H5OK(H5Sclose(fspace));
    }
    H5OK(H5Fclose(file));
    H5OK(H5Pclose(fapl));
    free(lat);
    free(data);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
