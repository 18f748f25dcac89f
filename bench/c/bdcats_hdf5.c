/*
 * BD-CATS-IO read kernel, parallel HDF5 baseline: reads what vpic_hdf5 wrote
 * (DIR/vpic.h5, W writer ranks x N particles, S steps).
 *
 * Load-balanced split: the R readers split the W*N particles of every
 * variable into R near-equal contiguous parts; reader r reads part (r+1) mod R,
 * so with R == W the data still crosses ranks. Reads are collective MPI-IO.
 * Timed: H5Fopen .. H5Fclose (max over ranks). After timing every value is
 * compared with what the writer generated; any mismatch exits nonzero.
 */
#include "h5common.h"

int main(int argc, char **argv)
{
    bench_opts_t o;
    int          rank, size, s, v;
    uint64_t     total, start, count, bpp;
    void       **buf;
    hid_t        fapl, file, dxpl, grp;
    char         path[4096], gname[64];
    double       t0, t;

    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    opts_parse(argc, argv, &o, "BD-CATS-IO read of DIR/vpic.h5, parallel HDF5 (-w writer ranks, default = ranks)\n");
    if (o.writers == 0)
        o.writers = size;

    total = o.particles * (uint64_t)o.writers;
    split_range(total, size, (rank + 1) % size, &start, &count);
    bpp = bytes_per_particle(vpic_types, VPIC_NVARS);
    buf = (void **)xmalloc(sizeof(void *) * (size_t)o.steps * VPIC_NVARS);
    for (s = 0; s < o.steps; s++)
        for (v = 0; v < VPIC_NVARS; v++)
            buf[s * VPIC_NVARS + v] = xmalloc(vtype_size(vpic_types[v]) * (count ? count : 1));
    h5_path(path, sizeof(path), o.dir, "vpic.h5");

    t0 = phase_start();
    fapl = h5_fapl_mpio();
    H5ID(file, H5Fopen(path, H5F_ACC_RDONLY, fapl));
    dxpl = h5_dxpl(1);
    for (s = 0; s < o.steps; s++) {
        snprintf(gname, sizeof(gname), "Step#%d", s);
        H5ID(grp, H5Gopen2(file, gname, H5P_DEFAULT));
        for (v = 0; v < VPIC_NVARS; v++)
            h5_read_1d(grp, vpic_names[v], vpic_types[v], total, start, count, buf[s * VPIC_NVARS + v], dxpl);
        H5OK(H5Gclose(grp));
    }
    H5OK(H5Pclose(dxpl));
    H5OK(H5Fclose(file));
    H5OK(H5Pclose(fapl));
    t = max_all(now() - t0);

    verify_vpic_read(buf, o.steps, start, count);
    report("bdcats", "hdf5", total * bpp * (uint64_t)o.steps, t,
           "steps=%d writers=%d particles=%" PRIu64 " mode=mpio-collective", o.steps, o.writers, o.particles);

    for (s = 0; s < o.steps * VPIC_NVARS; s++)
        free(buf[s]);
    free(buf);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
