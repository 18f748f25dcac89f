/*
 * VPIC-IO write kernel, PDC C API (libpdcx).
 *
 * Each of R ranks holds N particles x 8 variables (x y z px py pz float32,
 * id1 id2 int32). Per step, each variable is one PDC object of R*N elements
 * ("<prefix>-vpic-s<step>-<var>", created collectively with
 * PDCobj_create_mpi); rank r transfers its region [r*N, (r+1)*N).
 *
 * Single step: create container + objects, transfer_create x8, start_all,
 * wait_all. Multi-step (-s S -c C), asynchronous as in the PDC paper: step s
 * starts its 8 transfers and returns to the application; step s+1 first
 * computes for C seconds (sleep) while step s's data moves, then waits for
 * step s's transfers (wait_all) and starts its own. After the last step the
 * application waits once more, so only the last step's I/O is exposed.
 * Particle buffers alternate between two sets, so a buffer is only refilled
 * after its transfers completed. Generating values counts as compute, up
 * to the slowest rank (compute_done).
 * Reported: app-visible I/O time = elapsed - compute (max over ranks).
 */
#include "pdccommon.h"

int main(int argc, char **argv)
{
    bench_opts_t o;
    int          rank, size, s, v, b, prev = -1;
    uint64_t     total, start, bpp;
    void        *buf[2][VPIC_NVARS];
    xfer_t       xf[2][VPIC_NVARS];
    pdcid_t      objs[2][VPIC_NVARS], props[VPIC_NVARS], ids[VPIC_NVARS], pdc, cont;
    char         name[256];
    double       t0, t_end, compute = 0, tc, io, elapsed, create = 0, tcr;

    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    opts_parse(argc, argv, &o, "VPIC-IO write, PDC API (objects <prefix>-vpic-s<step>-<var>)\n");
    set_durability(&o);

    total = o.particles * (uint64_t)size;
    start = o.particles * (uint64_t)rank;
    bpp   = bytes_per_particle(vpic_types, VPIC_NVARS);
    for (b = 0; b < 2; b++)
        for (v = 0; v < VPIC_NVARS; v++)
            buf[b][v] = xmalloc(vtype_size(vpic_types[v]) * o.particles);
    PDC_ID(pdc, PDCinit("pdc"));

    t0 = phase_start();
    snprintf(name, sizeof(name), "%s-vpic", o.prefix);
    tcr  = now();
    cont = cont_create(pdc, name);
    create += now() - tcr;
    for (s = 0; s < o.steps; s++) {
        b  = s % 2;
        tc = now();
        if (s > 0)
            sleep_seconds(o.compute); /* the simulation computes while step s-1 moves */
        compute += now() - tc;
        if (prev >= 0) { /* consistency point of the previous step */
            xfers_wait_all(xf[prev], VPIC_NVARS, ids);
            for (v = 0; v < VPIC_NVARS; v++) {
                xfer_close(&xf[prev][v]);
                PDC_OK(PDCobj_close(objs[prev][v]));
            }
            prev = -1;
        }
        tc = now();
        for (v = 0; v < VPIC_NVARS; v++)
            fill_var(buf[b][v], vpic_types[v], v, start, o.particles, s);
        compute_done();
        compute += now() - tc;

        for (v = 0; v < VPIC_NVARS; v++) {
            tcr      = now();
            props[v] = obj_prop_1d(pdc, vpic_types[v], total, (uint32_t)s);
            obj_name(name, sizeof(name), o.prefix, "vpic", s, vpic_names[v]);
            PDC_ID(objs[b][v], PDCobj_create_mpi(cont, name, props[v], 0, MPI_COMM_WORLD));
            PDC_OK(PDCprop_close(props[v]));
            create += now() - tcr;
            xfer_create(&xf[b][v], buf[b][v], PDC_WRITE, objs[b][v], start, o.particles);
        }
        xfers_start_all(xf[b], VPIC_NVARS, ids);
        prev = b;
    }
    xfers_wait_all(xf[prev], VPIC_NVARS, ids);
    for (v = 0; v < VPIC_NVARS; v++) {
        xfer_close(&xf[prev][v]);
        PDC_OK(PDCobj_close(objs[prev][v]));
    }
    PDC_OK(PDCcont_close(cont));
    t_end   = now();
    io      = max_all(t_end - t0 - compute);
    elapsed = max_all(t_end - t0);
    compute = max_all(compute);
    create  = max_all(create);

    report("vpic", "pdc", total * bpp * (uint64_t)o.steps, io,
           "steps=%d particles=%" PRIu64 " compute_s=%.3f elapsed_s=%.6f create_s=%.6f servers=%d "
           "mode=async-start_all/wait_all durability=%s",
           o.steps, o.particles, compute, elapsed, create, o.servers, durability_name());

    PDC_OK(PDCclose(pdc));
    for (b = 0; b < 2; b++)
        for (v = 0; v < VPIC_NVARS; v++)
            free(buf[b][v]);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
