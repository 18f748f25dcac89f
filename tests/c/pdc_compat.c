/* Behaviours of PDC that programs written for it rely on ("PDC compatibility
 * gaps"), written as a PDC program would:
 * - getting a deleted (or never set) container/object tag succeeds with a NULL value, size 0;
 * - PDCregion_transfer_status: once it reported a request complete, PDC forgets it (later
 *   calls report PDC_TRANSFER_STATUS_NOT_FOUND), and a read's data is in the buffer without
 *   a wait;
 * - PDCcont_iter_start is called with the PDC id, as PDC's header allows;
 * - PDC_timing_report(prefix) is part of pdc.h;
 * - an object may be created with no dims (its size unknown): its first transfer gives it
 *   its rank and size, and PDCobj_set_dims may set them;
 * - PDCobj_set_dims may also shrink an object;
 * - PDCobj_close closes a region id too (PDC's close calls are type-generic, and its own
 *   vpicio.c closes its regions that way). */
#include "pdc.h"
#include "check.h"
#include <string.h>
#include <unistd.h>

#define N 1024

/* Polls the status every 100 us for up to 30 s (a loaded machine may take a while). */
static pdc_transfer_status_t poll_until_done(pdcid_t t)
{
    pdc_transfer_status_t s = PDC_TRANSFER_STATUS_PENDING;
    for (int i = 0; i < 300000 && s == PDC_TRANSFER_STATUS_PENDING; i++) {
        CHECK_OK(PDCregion_transfer_status(t, &s));
        if (s == PDC_TRANSFER_STATUS_PENDING)
            usleep(100);
    }
    return s;
}

int main(void)
{
    pdcid_t pdc = PDCinit("pdc");
    CHECK_ID(pdc);
    pdcid_t cprop = PDCprop_create(PDC_CONT_CREATE, pdc);
    pdcid_t cont = PDCcont_create("compat", cprop);
    CHECK_ID(cont);
    pdcid_t prop = PDCprop_create(PDC_OBJ_CREATE, pdc);
    uint64_t dims[1] = {N}, zero[1] = {0};
    CHECK_OK(PDCprop_set_obj_dims(prop, 1, dims));
    CHECK_OK(PDCprop_set_obj_type(prop, PDC_INT32));
    pdcid_t obj = PDCobj_create(cont, "compat/x", prop);
    CHECK_ID(obj);

    /* Tags: a deleted one reads as NULL, size 0, and so does one never set. */
    int v = 42;
    CHECK_OK(PDCcont_put_tag(cont, "k", &v, PDC_INT, sizeof v));
    CHECK_OK(PDCobj_put_tag(obj, "k", &v, PDC_INT, sizeof v));
    void *got = NULL;
    pdc_var_type_t type;
    uint32_t csize = 0;
    psize_t osize = 0;
    CHECK_OK(PDCcont_get_tag(cont, "k", &got, &type, &csize));
    CHECK(got != NULL && csize == sizeof v && memcmp(got, &v, sizeof v) == 0);
    free(got);
    CHECK_OK(PDCcont_del_tag(cont, "k"));
    CHECK_OK(PDCobj_del_tag(obj, "k"));
    got = &v;
    CHECK_OK(PDCcont_get_tag(cont, "k", &got, &type, &csize));
    CHECK(got == NULL && csize == 0);
    got = &v;
    CHECK_OK(PDCobj_get_tag(obj, "k", &got, &type, &osize));
    CHECK(got == NULL && osize == 0);
    got = &v;
    CHECK_OK(PDCobj_get_tag(obj, "never-set", &got, &type, &osize));
    CHECK(got == NULL && osize == 0);

    /* Transfer status: complete once, then forgotten; a read's data is there without a wait. */
    int32_t w[N], r[N];
    for (int i = 0; i < N; i++)
        w[i] = 3 * i + 1;
    pdcid_t reg = PDCregion_create(1, zero, dims);
    pdcid_t tw = PDCregion_transfer_create(w, PDC_WRITE, obj, reg, reg);
    CHECK_ID(tw);
    CHECK_OK(PDCregion_transfer_start(tw));
    CHECK(poll_until_done(tw) == PDC_TRANSFER_STATUS_COMPLETE);
    pdc_transfer_status_t s;
    CHECK_OK(PDCregion_transfer_status(tw, &s));
    CHECK(s == PDC_TRANSFER_STATUS_NOT_FOUND);
    CHECK_OK(PDCregion_transfer_wait(tw)); /* waiting for a forgotten request is harmless */
    memset(r, 0, sizeof r);
    pdcid_t tr = PDCregion_transfer_create(r, PDC_READ, obj, reg, reg);
    CHECK_ID(tr);
    CHECK_OK(PDCregion_transfer_start(tr));
    CHECK(poll_until_done(tr) == PDC_TRANSFER_STATUS_COMPLETE);
    for (int i = 0; i < N; i++)
        CHECK(r[i] == 3 * i + 1);
    CHECK_OK(PDCregion_transfer_status(tr, &s));
    CHECK(s == PDC_TRANSFER_STATUS_NOT_FOUND);
    /* Started again, it is a request again. */
    memset(r, 0, sizeof r);
    CHECK_OK(PDCregion_transfer_start(tr));
    CHECK_OK(PDCregion_transfer_wait(tr));
    CHECK(r[N - 1] == 3 * (N - 1) + 1);
    CHECK_OK(PDCregion_transfer_close(tw));
    CHECK_OK(PDCregion_transfer_close(tr));
    CHECK_OK(PDCregion_close(reg));

    /* The container iterator, started the way PDC's examples do. */
    int found = 0;
    cont_handle *h = PDCcont_iter_start(pdc);
    while (!PDCcont_iter_null(h)) {
        struct pdc_cont_info *info = PDCcont_iter_get_info(h);
        if (info && strcmp(info->name, "compat") == 0)
            found = 1;
        h = PDCcont_iter_next(h);
    }
    CHECK(found);

    CHECK(PDC_timing_report("compat") == 0);

    /* An object created with no dims takes its rank and size from its first write. */
    pdcid_t nprop = PDCprop_create(PDC_OBJ_CREATE, pdc);
    CHECK_OK(PDCprop_set_obj_type(nprop, PDC_DOUBLE));
    pdcid_t nodims = PDCobj_create(cont, "compat/nodims", nprop);
    CHECK_ID(nodims);
    double grid[6 * 8], back[6 * 8];
    for (int i = 0; i < 48; i++)
        grid[i] = i * 0.5;
    uint64_t z2[2] = {0, 0}, g2[2] = {6, 8};
    pdcid_t gl = PDCregion_create(2, z2, g2), gr = PDCregion_create(2, z2, g2);
    pdcid_t tw2 = PDCregion_transfer_create(grid, PDC_WRITE, nodims, gl, gr);
    CHECK_ID(tw2);
    CHECK_OK(PDCregion_transfer_start(tw2));
    CHECK_OK(PDCregion_transfer_wait(tw2));
    CHECK_OK(PDCregion_transfer_close(tw2));
    int nd = 0;
    uint64_t *dd = NULL;
    CHECK_OK(PDCobj_get_dims(nodims, &nd, &dd));
    CHECK(nd == 2 && dd[0] == 6 && dd[1] == 8);
    free(dd);
    pdcid_t tr2 = PDCregion_transfer_create(back, PDC_READ, nodims, gl, gr);
    CHECK_OK(PDCregion_transfer_start(tr2));
    CHECK_OK(PDCregion_transfer_wait(tr2));
    CHECK_OK(PDCregion_transfer_close(tr2));
    CHECK(memcmp(grid, back, sizeof grid) == 0);

    /* PDCobj_set_dims shrinks it: elements past the new end are out of bounds. */
    uint64_t s2[2] = {3, 8};
    CHECK_OK(PDCobj_set_dims(nodims, 2, s2));
    CHECK_OK(PDCobj_get_dims(nodims, &nd, &dd));
    CHECK(nd == 2 && dd[0] == 3 && dd[1] == 8);
    free(dd);
    tr2 = PDCregion_transfer_create(back, PDC_READ, nodims, gl, gr);
    CHECK(tr2 == 0); /* rows 3..5 are past the end now */
    uint64_t h2[2] = {3, 8};
    pdcid_t hl = PDCregion_create(2, z2, h2), hr = PDCregion_create(2, z2, h2);
    tr2 = PDCregion_transfer_create(back, PDC_READ, nodims, hl, hr);
    CHECK_OK(PDCregion_transfer_start(tr2));
    CHECK_OK(PDCregion_transfer_wait(tr2));
    CHECK_OK(PDCregion_transfer_close(tr2));
    CHECK(memcmp(grid, back, sizeof(double) * 24) == 0);
    /* ... and an object with data keeps its number of dims. */
    uint64_t s3[3] = {3, 8, 1};
    CHECK(PDCobj_set_dims(nodims, 3, s3) == FAIL);

    /* An object with no dims given them by PDCobj_set_dims before any write. */
    pdcid_t later = PDCobj_create(cont, "compat/later", nprop);
    CHECK_ID(later);
    uint64_t l3[3] = {2, 3, 4};
    CHECK_OK(PDCobj_set_dims(later, 3, l3));
    CHECK_OK(PDCobj_get_dims(later, &nd, &dd));
    CHECK(nd == 3 && dd[0] == 2 && dd[1] == 3 && dd[2] == 4);
    free(dd);
    CHECK_OK(PDCregion_close(gl));
    CHECK_OK(PDCregion_close(gr));
    CHECK_OK(PDCregion_close(hl));
    CHECK_OK(PDCobj_close(hr)); /* as PDC's vpicio.c does */
    CHECK(PDCregion_close(hr) < 0); /* closed: the id is gone */
    CHECK_OK(PDCobj_close(later));
    CHECK_OK(PDCobj_close(nodims));
    CHECK_OK(PDCprop_close(nprop));
    CHECK_OK(PDCobj_close(obj));
    CHECK_OK(PDCcont_close(cont));
    CHECK_OK(PDCprop_close(prop));
    CHECK_OK(PDCprop_close(cprop));
    CHECK_OK(PDCclose(pdc));
    printf("pdc_compat: ok\n");
    return 0;
}
