/*
 * Metadata probe, PDC C API: M objects in total (-m, default 20000), split
 * over the ranks; each rank independently creates its share in one container
 * (PDCobj_create, 1-element int32 objects "<prefix>-meta-<i>"), tags each
 * with PDCobj_put_tag("step", i % 100, PDC_INT) and closes it.
 * Timed: first create .. last close (max over ranks); creates/s = M / time,
 * and per server = that / S (-S, the number of pdcx servers).
 * Check: rank 0 reopens a few objects and reads the tag back (PDCobj_get_tag).
 * Query: rank 0 asks for all objects with step == 42 (PDCobj_get_id, PDC's
 * public tag lookup), timed, and checks the count; if the library refuses
 * the call the query is reported as query=unsupported.
 * -M create: create + close only (no tag, no check, no query): the rate of bare
 * PDCobj_create calls, the figure of "creates/s from C" (run it with 1 rank for one
 * client's rate).
 * -M create-many: the same objects through the pdcx extension PDCXobj_create_many
 * (pdcx_ext.h), MANY_BATCH names per call, then a close of each handle; a library without
 * the extension reports mode=unsupported.
 * Both bare modes end with PDCcont_close (the consistency point that makes the creates
 * durable), inside the timed phase.
 */
#include "pdccommon.h"
#if defined(__has_include)
#if __has_include("pdcx_ext.h")
#include "pdcx_ext.h"
#endif
#endif

#define MANY_BATCH 1024

/*
 * Tag query through the public PDC call PDCobj_get_id(tag, value, size, &n, &ids):
 * ids of all objects whose tag equals the value. Returns seconds, or -1 if the
 * library refuses the call (then the query is reported as unsupported).
 */
static double tag_query(int want, uint64_t *n_out)
{
    int       n   = 0;
    uint64_t *ids = NULL;
    double    t0  = now();
    if (PDCobj_get_id("step", &want, (int)sizeof(int), &n, &ids) < 0)
        return -1;
    t0     = now() - t0;
    *n_out = (uint64_t)(n > 0 ? n : 0);
    free(ids);
    return t0;
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    int          rank, size;
    uint64_t     start, count, i, expect = 0, matches = 0;
    pdcid_t      pdc, cont, prop, obj;
    char         name[256];
    double       t0, t, tq = 0;
    const char  *query = "skipped";
    int          bare, many;

    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    opts_parse(argc, argv, &o, "metadata probe, PDC API (-m objects in total, default 20000; -S servers)\n");
    set_durability(&o);
    if (o.mode != NULL && strcmp(o.mode, "create") != 0 && strcmp(o.mode, "create-many") != 0)
        die("-M %s: the modes are 'create' and 'create-many'", o.mode);
    bare = o.mode != NULL;
    many = bare && strcmp(o.mode, "create-many") == 0;
    split_range(o.objects, size, rank, &start, &count);
    for (i = 0; i < o.objects; i++)
        if (i % 100 == 42)
            expect++;
    PDC_ID(pdc, PDCinit("pdc"));
    snprintf(name, sizeof(name), "%s-meta", o.prefix);
    cont = cont_create(pdc, name);
    prop = obj_prop_1d(pdc, VT_I32, 1, 0);

    if (many) {
#ifdef PDCX_EXT_H
        static char names[MANY_BATCH][96];
        const char *ptrs[MANY_BATCH];
        pdcid_t     ids[MANY_BATCH];
        uint64_t    k, b;
        t0 = phase_start();
        for (i = start; i < start + count; i += b) {
            b = start + count - i < MANY_BATCH ? start + count - i : MANY_BATCH;
            for (k = 0; k < b; k++) {
                snprintf(names[k], sizeof(names[k]), "%s-meta-%" PRIu64, o.prefix, i + k);
                ptrs[k] = names[k];
            }
            PDC_OK(PDCXobj_create_many(cont, (size_t)b, ptrs, prop, ids));
            for (k = 0; k < b; k++)
                PDC_OK(PDCobj_close(ids[k]));
        }
        PDC_OK(PDCcont_close(cont));
        t = max_all(now() - t0);
#else
        t = 0;
        printf("NOTE meta: this libpdcx has no pdcx_ext.h (PDCXobj_create_many): create-many skipped\n");
        report("meta", "pdc", 0, 1, "objects=0 creates_per_s=0 mode=unsupported");
        MPI_CHECK(MPI_Finalize());
        return 0;
#endif
    }
    else {
        t0 = phase_start();
        for (i = start; i < start + count; i++) {
            int step = (int)(i % 100);
            snprintf(name, sizeof(name), "%s-meta-%" PRIu64, o.prefix, i);
            PDC_ID(obj, PDCobj_create(cont, name, prop));
            if (!bare)
                PDC_OK(PDCobj_put_tag(obj, "step", &step, PDC_INT, sizeof(int)));
            PDC_OK(PDCobj_close(obj));
        }
        if (bare)
            PDC_OK(PDCcont_close(cont));
        t = max_all(now() - t0);
    }

    if (rank == 0 && !bare) { /* tags read back from a sample of objects */
        uint64_t probe[3] = {0, o.objects / 2, o.objects - 1};
        int      k;
        for (k = 0; k < 3; k++) {
            void          *val  = NULL;
            pdc_var_type_t type = PDC_UNKNOWN;
            psize_t        vsz  = 0;
            int            got;
            snprintf(name, sizeof(name), "%s-meta-%" PRIu64, o.prefix, probe[k]);
            PDC_ID(obj, PDCobj_open(name, pdc));
            PDC_OK(PDCobj_get_tag(obj, "step", &val, &type, &vsz));
            if (val == NULL || vsz != sizeof(int))
                die("tag 'step' of %s: size %llu", name, (unsigned long long)vsz);
            memcpy(&got, val, sizeof(int));
            if (got != (int)(probe[k] % 100))
                die("tag 'step' of %s is %d, expected %d", name, got, (int)(probe[k] % 100));
            if (type != PDC_INT && k == 0)
                printf("NOTE meta: PDCobj_get_tag returned type %d for a PDC_INT tag (value correct)\n", (int)type);
            free(val);
            PDC_OK(PDCobj_close(obj));
        }
        tq = tag_query(42, &matches);
        if (tq < 0) {
            tq    = 0;
            query = "unsupported";
            printf("NOTE meta: PDCobj_get_id (tag query) failed: query skipped\n");
        }
        else {
            query = "PDCobj_get_id";
            if (matches != expect)
                die("tag query step=42 found %" PRIu64 " objects, expected %" PRIu64, matches, expect);
        }
    }
    report("meta", "pdc", 0, t,
           "objects=%" PRIu64 " creates_per_s=%.0f creates_per_s_per_server=%.0f servers=%d query=%s query_s=%.6f "
           "query_matches=%" PRIu64 " expected_matches=%" PRIu64 " mode=%s",
           o.objects, (double)o.objects / t, (double)o.objects / t / o.servers, o.servers, query, tq, matches,
           expect, many ? "create-many" : bare ? "create" : "create+tag");

    PDC_OK(PDCprop_close(prop));
    if (!bare)
        PDC_OK(PDCcont_close(cont));
    PDC_OK(PDCclose(pdc));
    MPI_CHECK(MPI_Finalize());
    return 0;
}
