/*
 * Consistency probe, parallel HDF5 baseline: K (default 100) writes of B
 * bytes (default 64 KiB) per rank into one 1-D uint8 dataset of DIR/consist.h5
 * (independent MPI-IO; rank r, op i writes slot i*R + r).
 *   strong:  every write followed by H5Fflush (MPI_File_sync = fsync): each
 *            write is durable and visible before the next one starts.
 *   session: K writes, then one H5Fflush at the end of the "session".
 * Prints both times (max over ranks) and ratio = strong / session.
 */
#include "h5common.h"

static double run(hid_t file, const char *name, int rank, int size, int ops, uint64_t xfer, int strong,
                  const unsigned char *data)
{
    hid_t   fspace, mspace, dset, dxpl;
    hsize_t dims[1] = {(hsize_t)size * (hsize_t)ops * (hsize_t)xfer}, cnt[1] = {(hsize_t)xfer}, off[1];
    double  t0;
    int     i;
    H5ID(fspace, H5Screate_simple(1, dims, NULL));
    H5ID(dset, H5Dcreate2(file, name, H5T_NATIVE_UCHAR, fspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5ID(mspace, H5Screate_simple(1, cnt, NULL));
    dxpl = h5_dxpl(0);
    t0   = phase_start();
    for (i = 0; i < ops; i++) {
        off[0] = ((hsize_t)i * (hsize_t)size + (hsize_t)rank) * (hsize_t)xfer;
        H5OK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, off, NULL, cnt, NULL));
        H5OK(H5Dwrite(dset, H5T_NATIVE_UCHAR, mspace, fspace, dxpl, data));
        if (strong)
            H5OK(H5Fflush(file, H5F_SCOPE_GLOBAL));
    }
    if (!strong)
        H5OK(H5Fflush(file, H5F_SCOPE_GLOBAL));
    t0 = max_all(now() - t0);
    H5OK(H5Pclose(dxpl));
    H5OK(H5Sclose(mspace));
    H5OK(H5Dclose(dset));
    H5OK(H5Sclose(fspace));
    return t0;
}

int main(int argc, char **argv)
{
    bench_opts_t   o;
    int            rank, size;
    hid_t          fapl, file;
    char           path[4096];
    unsigned char *data;
    double         ts, tn;
    uint64_t       bytes;

    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    opts_parse(argc, argv, &o, "consistency probe, parallel HDF5 (-k ops/rank, default 100; -b bytes, default 65536)\n");
    if (o.ops == 0)
        o.ops = 100;
    if (o.xfer == 0)
        o.xfer = 65536;
    data = (unsigned char *)xmalloc(o.xfer);
    memset(data, 0x5A ^ rank, o.xfer);
    h5_path(path, sizeof(path), o.dir, "consist.h5");

    fapl = h5_fapl_mpio();
    H5ID(file, H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
    ts = run(file, "strong", rank, size, o.ops, o.xfer, 1, data);
    tn = run(file, "session", rank, size, o.ops, o.xfer, 0, data);
    H5OK(H5Fclose(file));
    H5OK(H5Pclose(fapl));
    bytes = (uint64_t)size * (uint64_t)o.ops * o.xfer;
    report("consist", "hdf5", bytes, tn,
           "strong_s=%.6f session_s=%.6f ratio=%.2f ops=%d xfer=%" PRIu64
           " strong=write+H5Fflush session=writes+one-H5Fflush io=mpio-independent",
           ts, tn, tn > 0 ? ts / tn : 0.0, o.ops, o.xfer);
    free(data);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
