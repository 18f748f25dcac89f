/*
 * Small-transfer latency probe, PDC C API.
 *
 * Each rank creates its own object ("<prefix>-small-r<rank>", PDCobj_create)
 * of K*B bytes (int32 elements) and performs K write transfers of B bytes
 * (default 4096) to consecutive slots. One operation, timed on its own:
 *   PDCregion_create x2, PDCregion_transfer_create, _start, _wait, _close,
 *   PDCregion_close x2
 * i.e. the full cost an application pays for one synchronous small write.
 * Then K reads of B bytes of the slots just written, the same calls with PDC_READ
 * (the data is in the servers' memory or page cache: a warm small read), each checked.
 * -y memory|local|remote sets the objects' durability (what a wait guarantees).
 * Reported: mean, p50, p99 microseconds per operation over all ranks' ops; one RESULT
 * line per mode (mode=write, mode=read).
 * -M write: the writes only. -M read: the reads only, of the objects an earlier
 * `-M write` run with the same -p, -k and -b left (opened by name): bench/profile counts
 * each phase in a process of its own.
 */
#include "pdccommon.h"

int main(int argc, char **argv)
{
    bench_opts_t o;
    int          rank, size, i;
    uint64_t     elems;
    int32_t     *data, *back;
    double      *lat, mean, p50, p99, tot = 0;
    pdcid_t      pdc, cont = 0, prop = 0, obj;
    xfer_t       x;
    char         name[256];
    int          do_write = 1, do_read = 1;

    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    opts_parse(argc, argv, &o, "small-transfer latency, PDC API (-k ops/rank, default 1000; -b bytes, default 4096)\n");
    set_durability(&o);
    if (o.mode != NULL) {
        if (strcmp(o.mode, "write") == 0)
            do_read = 0;
        else if (strcmp(o.mode, "read") == 0)
            do_write = 0;
        else
            die("-M %s: the modes are 'write' and 'read'", o.mode);
    }
    if (o.ops == 0)
        o.ops = 1000;
    if (o.xfer == 0)
        o.xfer = 4096;
    if (o.xfer % 4 != 0)
        die("-b must be a multiple of 4");
    elems = o.xfer / 4;
    data  = (int32_t *)xmalloc(o.xfer);
    back  = (int32_t *)xmalloc(o.xfer);
    for (i = 0; i < (int)elems; i++)
        data[i] = rank * 1000 + i;
    lat = (double *)xmalloc(sizeof(double) * (size_t)o.ops);
    PDC_ID(pdc, PDCinit("pdc"));
    if (do_write) {
        snprintf(name, sizeof(name), "%s-small", o.prefix);
        cont = cont_create(pdc, name);
        prop = obj_prop_1d(pdc, VT_I32, elems * (uint64_t)o.ops, 0);
        snprintf(name, sizeof(name), "%s-small-r%d", o.prefix, rank);
        PDC_ID(obj, PDCobj_create(cont, name, prop));
    }
    else {
        snprintf(name, sizeof(name), "%s-small-r%d", o.prefix, rank);
        PDC_ID(obj, PDCobj_open(name, pdc));
    }

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    for (i = 0; do_write && i < o.ops; i++) {
        double t0 = now();
        xfer_create(&x, data, PDC_WRITE, obj, (uint64_t)i * elems, elems);
        PDC_OK(PDCregion_transfer_start(x.req));
        PDC_OK(PDCregion_transfer_wait(x.req));
        xfer_close(&x);
        lat[i] = now() - t0;
        tot += lat[i];
    }
    tot = max_all(tot);
    latency_stats(lat, o.ops, &mean, &p50, &p99);
    if (do_write)
        report("small", "pdc", (uint64_t)size * (uint64_t)o.ops * o.xfer, tot,
               "mode=write calls=create+start+wait+close xfer=%" PRIu64
               " ops=%d mean_us=%.1f p50_us=%.1f p99_us=%.1f servers=%d durability=%s",
               o.xfer, o.ops, mean, p50, p99, o.servers, durability_name());

    /* Reads of the slots just written: each op the same calls as a write, then a check. */
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    tot = 0;
    for (i = 0; do_read && i < o.ops; i++) {
        double t0 = now();
        memset(back, 0, o.xfer);
        xfer_create(&x, back, PDC_READ, obj, (uint64_t)i * elems, elems);
        PDC_OK(PDCregion_transfer_start(x.req));
        PDC_OK(PDCregion_transfer_wait(x.req));
        xfer_close(&x);
        lat[i] = now() - t0;
        tot += lat[i];
        if (memcmp(back, data, o.xfer) != 0)
            die("small read %d: the data read back differs from what was written", i);
    }
    tot = max_all(tot);
    latency_stats(lat, o.ops, &mean, &p50, &p99);
    if (do_read)
        report("small", "pdc", (uint64_t)size * (uint64_t)o.ops * o.xfer, tot,
               "mode=read calls=create+start+wait+close xfer=%" PRIu64
               " ops=%d mean_us=%.1f p50_us=%.1f p99_us=%.1f servers=%d",
               o.xfer, o.ops, mean, p50, p99, o.servers);

    PDC_OK(PDCobj_close(obj));
    if (do_write) {
        PDC_OK(PDCprop_close(prop));
        PDC_OK(PDCcont_close(cont));
    }
    PDC_OK(PDCclose(pdc));
    free(lat);
    free(data);
    free(back);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
