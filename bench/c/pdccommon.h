/*
 * PDC C API helpers of the pdcx kernels (the _pdc.c files in bench/c).
 * Written against the public PDC API (pdc.h: PDCinit, PDCprop_*, PDCcont_*,
 * PDCobj_*, PDCregion_*), so the same sources build against libpdcx or the
 * original PDC library.
 *
 * Conventions of that API: calls returning pdcid_t return 0 on failure,
 * calls returning perr_t return a negative value on failure.
 */
#ifndef PDCX_BENCH_PDCCOMMON_H
#define PDCX_BENCH_PDCCOMMON_H

#include "common.h"
#include <pdc.h>

/* PDC type used for the HACC "mask" (uint16) variable; override with -DPDCX_BENCH_U16=... */
#ifndef PDCX_BENCH_U16
#define PDCX_BENCH_U16 PDC_UINT16
#endif

#define PDC_OK(call)                                                                                         \
    do {                                                                                                     \
        if ((call) < 0)                                                                                      \
            die("%s:%d: %s failed", __FILE__, __LINE__, #call);                                              \
    } while (0)

#define PDC_ID(var, call)                                                                                    \
    do {                                                                                                     \
        (var) = (call);                                                                                      \
        if ((var) == 0)                                                                                      \
            die("%s:%d: %s returned 0 (failure)", __FILE__, __LINE__, #call);                                \
    } while (0)

static inline pdc_var_type_t pdc_type_of(vtype_t t)
{
    switch (t) {
        case VT_F32: return PDC_FLOAT;
        case VT_I32: return PDC_INT;
        case VT_I64: return PDC_INT64;
        case VT_U16: return PDCX_BENCH_U16;
    }
    return PDC_UNKNOWN;
}

/*
 * Durability of the objects the kernel creates (-y; NULL = the library's default, local).
 * A pdcx extension: building against the original PDC (-DPDCX_BENCH_NO_DURABILITY) makes -y
 * an error instead of a silently ignored flag.
 */
static const char *bench_durability_g = NULL;

static inline void set_durability(const bench_opts_t *o) { bench_durability_g = o->durability; }

static inline void prop_apply_durability(pdcid_t prop)
{
    if (bench_durability_g == NULL)
        return;
#ifdef PDCX_BENCH_NO_DURABILITY
    (void)prop;
    die("-y %s: this build has no PDCXprop_set_obj_durability", bench_durability_g);
#else
    {
        pdcx_durability_t d = PDCX_DURABILITY_LOCAL;
        if (strcmp(bench_durability_g, "memory") == 0)
            d = PDCX_DURABILITY_MEMORY;
        else if (strcmp(bench_durability_g, "remote") == 0)
            d = PDCX_DURABILITY_REMOTE;
        PDC_OK(PDCXprop_set_obj_durability(prop, d));
    }
#endif
}

/* The durability a RESULT line reports: what -y asked for, else the library default. */
static inline const char *durability_name(void) { return bench_durability_g ? bench_durability_g : "local"; }

/* Object-create property: 1-D, `total` elements of type t, time step `step`, durability of -y. */
static inline pdcid_t obj_prop_1d(pdcid_t pdc, vtype_t t, uint64_t total, uint32_t step)
{
    pdcid_t  prop;
    uint64_t dims[1] = {total};
    PDC_ID(prop, PDCprop_create(PDC_OBJ_CREATE, pdc));
    PDC_OK(PDCprop_set_obj_dims(prop, 1, dims));
    PDC_OK(PDCprop_set_obj_type(prop, pdc_type_of(t)));
    PDC_OK(PDCprop_set_obj_time_step(prop, step));
    prop_apply_durability(prop);
    return prop;
}

/* Collective container creation (every rank gets the id). */
static inline pdcid_t cont_create(pdcid_t pdc, const char *name)
{
    pdcid_t prop, cont;
    PDC_ID(prop, PDCprop_create(PDC_CONT_CREATE, pdc));
    PDC_ID(cont, PDCcont_create_col(name, prop));
    PDC_OK(PDCprop_close(prop));
    return cont;
}

/* One region transfer with its two regions (local: [0,count) of buf; remote: [remote_off, +count)). */
typedef struct {
    pdcid_t req, local, remote;
} xfer_t;

static inline void xfer_create(xfer_t *x, void *buf, pdc_access_t access, pdcid_t obj, uint64_t remote_off,
                               uint64_t count)
{
    uint64_t zero[1] = {0}, off[1] = {remote_off}, cnt[1] = {count};
    PDC_ID(x->local, PDCregion_create(1, zero, cnt));
    PDC_ID(x->remote, PDCregion_create(1, off, cnt));
    PDC_ID(x->req, PDCregion_transfer_create(buf, access, obj, x->local, x->remote));
}

static inline void xfer_close(xfer_t *x)
{
    PDC_OK(PDCregion_transfer_close(x->req));
    PDC_OK(PDCregion_close(x->local));
    PDC_OK(PDCregion_close(x->remote));
    x->req = x->local = x->remote = 0;
}

/* Start / wait a batch of transfers with the batched calls. */
static inline void xfers_start_all(xfer_t *x, int n, pdcid_t *ids)
{
    int i;
    for (i = 0; i < n; i++)
        ids[i] = x[i].req;
    PDC_OK(PDCregion_transfer_start_all(ids, n));
}

static inline void xfers_wait_all(xfer_t *x, int n, pdcid_t *ids)
{
    int i;
    for (i = 0; i < n; i++)
        ids[i] = x[i].req;
    PDC_OK(PDCregion_transfer_wait_all(ids, n));
}

/* name = "<prefix>-<kernel>-s<step>-<var>" (object names are global in PDC). */
static inline void obj_name(char *out, size_t n, const char *prefix, const char *kernel, int step, const char *var)
{
    int w = snprintf(out, n, "%s-%s-s%d-%s", prefix, kernel, step, var);
    if (w < 0 || (size_t)w >= n)
        die("object name too long");
}

#endif /* PDCX_BENCH_PDCCOMMON_H */
