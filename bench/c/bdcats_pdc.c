/*
 * BD-CATS-IO read kernel, PDC C API: reads what vpic_pdc wrote (W writer
 * ranks x N particles, S steps, objects "<prefix>-vpic-s<step>-<var>").
 *
 * Load-balanced split: the R readers split the W*N particles of every
 * variable into R near-equal contiguous parts; reader r reads part (r+1) mod R,
 * so with R == W the data still crosses ranks. All objects are opened with
 * PDCobj_open, all S*8 read transfers created and started with one
 * start_all, then one wait_all. Timed: open .. close (max over ranks). After
 * timing every value is compared with what the writer generated; any
 * mismatch exits nonzero.
 */
#include "pdccommon.h"

int main(int argc, char **argv)
{
    bench_opts_t o;
    int          rank, size, s, v, n;
    uint64_t     total, start, count, bpp;
    void       **buf;
    xfer_t      *xf;
    pdcid_t     *objs, *ids, pdc;
    char         name[256];
    double       t0, t;

    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    opts_parse(argc, argv, &o, "BD-CATS-IO read of vpic_pdc's objects, PDC API (-w writer ranks, default = ranks)\n");
    set_durability(&o);
    if (o.writers == 0)
        o.writers = size;

    n     = o.steps * VPIC_NVARS;
    total = o.particles * (uint64_t)o.writers;
    split_range(total, size, (rank + 1) % size, &start, &count);
    if (count == 0)
        die("more readers than particles");
    bpp  = bytes_per_particle(vpic_types, VPIC_NVARS);
    buf  = (void **)xmalloc(sizeof(void *) * (size_t)n);
    xf   = (xfer_t *)xmalloc(sizeof(xfer_t) * (size_t)n);
    objs = (pdcid_t *)xmalloc(sizeof(pdcid_t) * (size_t)n);
    ids  = (pdcid_t *)xmalloc(sizeof(pdcid_t) * (size_t)n);
    for (s = 0; s < o.steps; s++)
        for (v = 0; v < VPIC_NVARS; v++)
            buf[s * VPIC_NVARS + v] = xmalloc(vtype_size(vpic_types[v]) * count);
    PDC_ID(pdc, PDCinit("pdc"));

    t0 = phase_start();
    for (s = 0; s < o.steps; s++)
        for (v = 0; v < VPIC_NVARS; v++) {
            int i = s * VPIC_NVARS + v;
            obj_name(name, sizeof(name), o.prefix, "vpic", s, vpic_names[v]);
            PDC_ID(objs[i], PDCobj_open(name, pdc));
            xfer_create(&xf[i], buf[i], PDC_READ, objs[i], start, count);
        }
    xfers_start_all(xf, n, ids);
    xfers_wait_all(xf, n, ids);
    for (s = 0; s < n; s++) {
        xfer_close(&xf[s]);
        PDC_OK(PDCobj_close(objs[s]));
    }
    t = max_all(now() - t0);

    verify_vpic_read(buf, o.steps, start, count);
    report("bdcats", "pdc", total * bpp * (uint64_t)o.steps, t,
           "steps=%d writers=%d particles=%" PRIu64 " servers=%d mode=start_all/wait_all", o.steps, o.writers,
           o.particles, o.servers);

    PDC_OK(PDCclose(pdc));
    for (s = 0; s < n; s++)
        free(buf[s]);
    free(buf);
    free(xf);
    free(objs);
    free(ids);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
