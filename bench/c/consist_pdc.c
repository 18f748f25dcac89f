/*
 * Consistency probe, PDC C API: K (default 100) write transfers of B bytes
 * (default 64 KiB) per rank into one shared object per mode (R*K*B bytes of
 * int32, PDCobj_create_mpi; rank r, op i writes slot i*R + r).
 *   strong:  per op transfer_create, start, wait, close: every write is
 *            complete (visible to all readers) before the next starts.
 *   session: K transfer_create, one start_all, one wait_all (the session's
 *            single consistency point), K close.
 * Prints both times (max over ranks) and ratio = strong / session.
 */
#include "pdccommon.h"

static double run(pdcid_t pdc, pdcid_t cont, const char *prefix, const char *mode, int rank, int size, int ops,
                  uint64_t elems, int32_t *data)
{
    pdcid_t  prop, obj, *ids;
    xfer_t  *xf;
    char     name[256];
    double   t0;
    int      i;
    prop = obj_prop_1d(pdc, VT_I32, elems * (uint64_t)ops * (uint64_t)size, 0);
    snprintf(name, sizeof(name), "%s-consist-%s", prefix, mode);
    PDC_ID(obj, PDCobj_create_mpi(cont, name, prop, 0, MPI_COMM_WORLD));
    xf  = (xfer_t *)xmalloc(sizeof(xfer_t) * (size_t)ops);
    ids = (pdcid_t *)xmalloc(sizeof(pdcid_t) * (size_t)ops);
    t0  = phase_start();
    if (strcmp(mode, "strong") == 0) {
        for (i = 0; i < ops; i++) {
            xfer_create(&xf[i], data, PDC_WRITE, obj, ((uint64_t)i * (uint64_t)size + (uint64_t)rank) * elems, elems);
            PDC_OK(PDCregion_transfer_start(xf[i].req));
            PDC_OK(PDCregion_transfer_wait(xf[i].req));
            xfer_close(&xf[i]);
        }
    }
    else {
        for (i = 0; i < ops; i++)
            xfer_create(&xf[i], data, PDC_WRITE, obj, ((uint64_t)i * (uint64_t)size + (uint64_t)rank) * elems, elems);
        xfers_start_all(xf, ops, ids);
        xfers_wait_all(xf, ops, ids);
        for (i = 0; i < ops; i++)
            xfer_close(&xf[i]);
    }
    t0 = max_all(now() - t0);
    PDC_OK(PDCobj_close(obj));
    PDC_OK(PDCprop_close(prop));
    free(xf);
    free(ids);
    return t0;
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    int          rank, size;
    uint64_t     elems, i, bytes;
    int32_t     *data;
    pdcid_t      pdc, cont;
    char         name[256];
    double       ts, tn;

    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    opts_parse(argc, argv, &o, "consistency probe, PDC API (-k ops/rank, default 100; -b bytes, default 65536)\n");
    set_durability(&o);
    if (o.ops == 0)
        o.ops = 100;
    if (o.xfer == 0)
        o.xfer = 65536;
    if (o.xfer % 4 != 0)
        die("-b must be a multiple of 4");
    elems = o.xfer / 4;
    data  = (int32_t *)xmalloc(o.xfer);
    for (i = 0; i < elems; i++)
        data[i] = (int32_t)(rank * 100000 + (int)i);
    PDC_ID(pdc, PDCinit("pdc"));
    snprintf(name, sizeof(name), "%s-consist", o.prefix);
    cont = cont_create(pdc, name);

    ts    = run(pdc, cont, o.prefix, "strong", rank, size, o.ops, elems, data);
    tn    = run(pdc, cont, o.prefix, "session", rank, size, o.ops, elems, data);
    bytes = (uint64_t)size * (uint64_t)o.ops * o.xfer;
    report("consist", "pdc", bytes, tn,
           "strong_s=%.6f session_s=%.6f ratio=%.2f ops=%d xfer=%" PRIu64
           " strong=start+wait-per-op session=start_all+one-wait_all servers=%d",
           ts, tn, tn > 0 ? ts / tn : 0.0, o.ops, o.xfer, o.servers);

    PDC_OK(PDCcont_close(cont));
    PDC_OK(PDCclose(pdc));
    free(data);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
