/*
 * HACC-IO kernel, PDC C API: 9 variables per particle (xx yy zz vx vy vz phi
 * float32, pid int64, mask uint16 = 38 bytes), one PDC object of R*N
 * elements per variable ("<prefix>-hacc-s0-<var>", PDCobj_create_mpi).
 * Write: rank r transfers [r*N, (r+1)*N) of all 9 (start_all, wait_all),
 * timed from container creation to the last close. Then (-D) the page cache
 * is dropped if possible. Read: the objects are reopened (PDCobj_open); rank r
 * reads part (r+1) mod R of a load-balanced split (start_all, wait_all);
 * then every value is verified.
 */
#include "pdccommon.h"

int main(int argc, char **argv)
{
    bench_opts_t o;
    int          rank, size, v, dropped = 0;
    uint64_t     total, start, rstart, rcount, bpp, got = 0, want = 0, bad = 0;
    void        *buf[HACC_NVARS], *rbuf[HACC_NVARS];
    xfer_t       xf[HACC_NVARS];
    pdcid_t      objs[HACC_NVARS], ids[HACC_NVARS], pdc, cont, prop;
    char         name[256];
    double       t0, tw, tr;

    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    opts_parse(argc, argv, &o, "HACC-IO write + read, PDC API; -D drops the page cache between them\n");
    set_durability(&o);

    total = o.particles * (uint64_t)size;
    start = o.particles * (uint64_t)rank;
    split_range(total, size, (rank + 1) % size, &rstart, &rcount);
    bpp = bytes_per_particle(hacc_types, HACC_NVARS);
    for (v = 0; v < HACC_NVARS; v++) {
        buf[v]  = xmalloc(vtype_size(hacc_types[v]) * o.particles);
        rbuf[v] = xmalloc(vtype_size(hacc_types[v]) * (rcount ? rcount : 1));
        fill_var(buf[v], hacc_types[v], v, start, o.particles, 0);
    }
    PDC_ID(pdc, PDCinit("pdc"));

    t0 = phase_start();
    snprintf(name, sizeof(name), "%s-hacc", o.prefix);
    cont = cont_create(pdc, name);
    for (v = 0; v < HACC_NVARS; v++) {
        prop = obj_prop_1d(pdc, hacc_types[v], total, 0);
        obj_name(name, sizeof(name), o.prefix, "hacc", 0, hacc_names[v]);
        PDC_ID(objs[v], PDCobj_create_mpi(cont, name, prop, 0, MPI_COMM_WORLD));
        PDC_OK(PDCprop_close(prop));
        xfer_create(&xf[v], buf[v], PDC_WRITE, objs[v], start, o.particles);
    }
    xfers_start_all(xf, HACC_NVARS, ids);
    xfers_wait_all(xf, HACC_NVARS, ids);
    for (v = 0; v < HACC_NVARS; v++) {
        xfer_close(&xf[v]);
        PDC_OK(PDCobj_close(objs[v]));
    }
    PDC_OK(PDCcont_close(cont));
    tw = max_all(now() - t0);
    report("hacc-write", "pdc", total * bpp, tw, "particles=%" PRIu64 " servers=%d durability=%s", o.particles,
           o.servers, durability_name());

    if (o.drop)
        dropped = drop_page_cache();

    t0 = phase_start();
    for (v = 0; v < HACC_NVARS; v++) {
        obj_name(name, sizeof(name), o.prefix, "hacc", 0, hacc_names[v]);
        PDC_ID(objs[v], PDCobj_open(name, pdc));
        xfer_create(&xf[v], rbuf[v], PDC_READ, objs[v], rstart, rcount);
    }
    xfers_start_all(xf, HACC_NVARS, ids);
    xfers_wait_all(xf, HACC_NVARS, ids);
    for (v = 0; v < HACC_NVARS; v++) {
        xfer_close(&xf[v]);
        PDC_OK(PDCobj_close(objs[v]));
    }
    tr = max_all(now() - t0);

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
    report("hacc-read", "pdc", total * bpp, tr, "particles=%" PRIu64 " cache_dropped=%d servers=%d", o.particles,
           dropped, o.servers);

    PDC_OK(PDCclose(pdc));
    for (v = 0; v < HACC_NVARS; v++) {
        free(buf[v]);
        free(rbuf[v]);
    }
    MPI_CHECK(MPI_Finalize());
    return 0;
}
