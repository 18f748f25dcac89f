/*
 * HACC-IO kernel, parallel HDF5 baseline: 9 variables per particle
 * (xx yy zz vx vy vz phi float32, pid int64, mask uint16 = 38 bytes), one
 * contiguous 1-D dataset of R*N elements per variable in DIR/hacc.h5.
 * Write: rank r writes [r*N, (r+1)*N), collective MPI-IO, timed from H5Fcreate
 * to H5Fclose (no fsync; fsync_s reported separately). Then (-D) the page
 * cache is dropped if possible. Read: rank r reads part (r+1) mod R of a
 * load-balanced split, collective MPI-IO, timed H5Fopen..H5Fclose; then every
 * value is verified.
 */
#include "h5common.h"

int main(int argc, char **argv)
{
    bench_opts_t o;
    int          rank, size, v, dropped = 0;
    uint64_t     total, start, rstart, rcount, bpp, got = 0, want = 0, bad = 0;
    void        *buf[HACC_NVARS], *rbuf[HACC_NVARS];
    hid_t        fapl, file, dxpl;
    char         path[4096];
    double       t0, tw, tr, fsync_s;

    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    opts_parse(argc, argv, &o, "HACC-IO write + read, parallel HDF5 (file DIR/hacc.h5); -D drops the page cache\n");

    total = o.particles * (uint64_t)size;
    start = o.particles * (uint64_t)rank;
    split_range(total, size, (rank + 1) % size, &rstart, &rcount);
    bpp = bytes_per_particle(hacc_types, HACC_NVARS);
    for (v = 0; v < HACC_NVARS; v++) {
        buf[v]  = xmalloc(vtype_size(hacc_types[v]) * o.particles);
        rbuf[v] = xmalloc(vtype_size(hacc_types[v]) * (rcount ? rcount : 1));
        fill_var(buf[v], hacc_types[v], v, start, o.particles, 0);
    }
    h5_path(path, sizeof(path), o.dir, "hacc.h5");

    t0 = phase_start();
    fapl = h5_fapl_mpio();
    H5ID(file, H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
    dxpl = h5_dxpl(1);
    for (v = 0; v < HACC_NVARS; v++)
        h5_write_1d(file, hacc_names[v], hacc_types[v], total, start, o.particles, buf[v], dxpl);
    H5OK(H5Fclose(file));
    tw      = max_all(now() - t0);
    fsync_s = fsync_file(path);
    report("hacc-write", "hdf5", total * bpp, tw,
           "particles=%" PRIu64 " fsync_s=%.6f mbps_fsync=%.1f mode=mpio-collective", o.particles, fsync_s,
           (double)(total * bpp) / (tw + fsync_s) / 1e6);

    if (o.drop)
        dropped = drop_page_cache();

    t0 = phase_start();
    H5ID(file, H5Fopen(path, H5F_ACC_RDONLY, fapl));
    for (v = 0; v < HACC_NVARS; v++)
        h5_read_1d(file, hacc_names[v], hacc_types[v], total, rstart, rcount, rbuf[v], dxpl);
    H5OK(H5Fclose(file));
    tr = max_all(now() - t0);
    H5OK(H5Pclose(dxpl));
    H5OK(H5Pclose(fapl));

    for (v = 0; v < HACC_NVARS; v++) {
        uint64_t g, w, first = verify_var(rbuf[v], hacc_types[v], v, rstart, rcount, 0, &g, &w);
        got += g;
        want += w;
        if (first != UINT64_MAX) {
            bad++;
            fprintf(stderr, "MISMATCH rank %d var %s: first bad element at global index %" PRIu64 "\n", rank,
                    hacc_names[v], rstart + first);
        }
    }
    verify_global("hacc", got, want, bad);
    report("hacc-read", "hdf5", total * bpp, tr, "particles=%" PRIu64 " cache_dropped=%d mode=mpio-collective",
           o.particles, dropped);

    for (v = 0; v < HACC_NVARS; v++) {
        free(buf[v]);
        free(rbuf[v]);
    }
    MPI_CHECK(MPI_Finalize());
    return 0;
}
