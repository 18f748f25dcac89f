/*
 * VPIC-IO write kernel, parallel HDF5 baseline.
 *
 * Each of R ranks holds N particles x 8 variables (x y z px py pz float32,
 * id1 id2 int32). Per step, /Step#s/<var> is a contiguous 1-D dataset of R*N
 * elements in one shared file DIR/vpic.h5; rank r writes [r*N, (r+1)*N) with
 * collective MPI-IO (H5FD_MPIO_COLLECTIVE), as the original VPIC-IO kernel.
 * HDF5 is synchronous: every step's write is visible to the application.
 *
 * Multi-step (-s S -c C): before each step after the first, C seconds of
 * emulated compute (sleep). Generating the step's particle values also counts
 * as compute, up to the slowest rank (compute_done). Reported time =
 * app-visible I/O = elapsed - compute (max over ranks), from before H5Fcreate
 * to after H5Fclose. H5Fclose does not fsync: fsync_s / mbps_fsync add an
 * fsync of the file (same durability as pdcx).
 */
#include "h5common.h"

int main(int argc, char **argv)
{
    bench_opts_t o;
    int          rank, size, s, v;
    uint64_t     total, start, bpp;
    void        *buf[VPIC_NVARS];
    hid_t        fapl, file, dxpl, grp;
    char         path[4096], gname[64];
    double       t0, t_end, compute = 0, tc, io, elapsed, fsync_s;

    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    opts_parse(argc, argv, &o, "VPIC-IO write, parallel HDF5 (file DIR/vpic.h5)\n");

    total = o.particles * (uint64_t)size;
    start = o.particles * (uint64_t)rank;
    bpp   = bytes_per_particle(vpic_types, VPIC_NVARS);
    for (v = 0; v < VPIC_NVARS; v++)
        buf[v] = xmalloc(vtype_size(vpic_types[v]) * o.particles);
    h5_path(path, sizeof(path), o.dir, "vpic.h5");

    t0 = phase_start();
    fapl = h5_fapl_mpio();
    H5ID(file, H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
    dxpl = h5_dxpl(1);
    for (s = 0; s < o.steps; s++) {
        tc = now();
        if (s > 0)
            sleep_seconds(o.compute);
        for (v = 0; v < VPIC_NVARS; v++)
            fill_var(buf[v], vpic_types[v], v, start, o.particles, s);
        compute_done();
        compute += now() - tc;

        snprintf(gname, sizeof(gname), "Step#%d", s);
        H5ID(grp, H5Gcreate2(file, gname, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        for (v = 0; v < VPIC_NVARS; v++)
            h5_write_1d(grp, vpic_names[v], vpic_types[v], total, start, o.particles, buf[v], dxpl);
        H5OK(H5Gclose(grp));
    }
    H5OK(H5Pclose(dxpl));
    H5OK(H5Fclose(file));
    H5OK(H5Pclose(fapl));
    t_end   = now();
    io      = max_all(t_end - t0 - compute);
    elapsed = max_all(t_end - t0);
    compute = max_all(compute);
    fsync_s = fsync_file(path);

    {
        uint64_t bytes = total * bpp * (uint64_t)o.steps;
        report("vpic", "hdf5", bytes, io,
               "steps=%d particles=%" PRIu64 " compute_s=%.3f elapsed_s=%.6f fsync_s=%.6f mbps_fsync=%.1f "
               "mode=mpio-collective",
               o.steps, o.particles, compute, elapsed, fsync_s, (double)bytes / (io + fsync_s) / 1e6);
    }
    for (v = 0; v < VPIC_NVARS; v++)
        free(buf[v]);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
