/* One write transfer restarted with new buffer contents after each wait; a read transfer
 * restarted to see each version; PDCobj_close waits for a transfer never waited; an
 * unlimited dimension grows with the writes. */
#include "pdc.h"
#include "check.h"
#include <string.h>

#define N 256

int main(void)
{
    pdcid_t pdc = PDCinit("pdc");
    CHECK_ID(pdc);
    pdcid_t cprop = PDCprop_create(PDC_CONT_CREATE, pdc);
    pdcid_t cont = PDCcont_create("restart", cprop);
    pdcid_t prop = PDCprop_create(PDC_OBJ_CREATE, pdc);
    uint64_t dims[1] = {N}, zero[1] = {0};
    CHECK_OK(PDCprop_set_obj_dims(prop, 1, dims));
    CHECK_OK(PDCprop_set_obj_type(prop, PDC_INT64));
    pdcid_t obj = PDCobj_create(cont, "restart/x", prop);
    CHECK_ID(obj);
    pdcid_t reg = PDCregion_create(1, zero, dims);
    int64_t w[N], r[N];
    pdcid_t tw = PDCregion_transfer_create(w, PDC_WRITE, obj, reg, reg);
    pdcid_t tr = PDCregion_transfer_create(r, PDC_READ, obj, reg, reg);
    CHECK_ID(tw);
    CHECK_ID(tr);
    pdc_transfer_status_t s;
    CHECK_OK(PDCregion_transfer_status(tw, &s));
    CHECK(s == PDC_TRANSFER_STATUS_NOT_FOUND); /* not started yet */
    for (int round = 0; round < 5; round++) {
        for (int i = 0; i < N; i++)
            w[i] = (int64_t)round * 100000 + i;
        CHECK_OK(PDCregion_transfer_start(tw));
        CHECK(PDCregion_transfer_start(tw) == FAIL); /* already in flight */
        CHECK_OK(PDCregion_transfer_wait(tw));
        memset(r, 0, sizeof r);
        CHECK_OK(PDCregion_transfer_start(tr));
        CHECK_OK(PDCregion_transfer_wait(tr));
        for (int i = 0; i < N; i++)
            CHECK(r[i] == (int64_t)round * 100000 + i);
    }
    /* Started but never waited: PDCobj_close must wait (commit) it. */
    for (int i = 0; i < N; i++)
        w[i] = -i;
    CHECK_OK(PDCregion_transfer_start(tw));
    CHECK_OK(PDCobj_close(obj));
    CHECK_OK(PDCregion_transfer_close(tw));
    CHECK_OK(PDCregion_transfer_close(tr));
    obj = PDCobj_open("restart/x", pdc);
    CHECK_ID(obj);
    CHECK_OK(PDCobj_get_data(obj, r, sizeof r));
    for (int i = 0; i < N; i++)
        CHECK(r[i] == -i);
    CHECK_OK(PDCobj_close(obj));

    /* Unlimited first dim: starts empty and grows with the writes. */
    uint64_t udims[2] = {PDC_SIZE_UNLIMITED, 4};
    CHECK_OK(PDCprop_set_obj_dims(prop, 2, udims));
    pdcid_t grow = PDCobj_create(cont, "restart/grow", prop);
    CHECK_ID(grow);
    int64_t rows[3][4];
    for (int i = 0; i < 12; i++)
        rows[i / 4][i % 4] = i;
    uint64_t lz[2] = {0, 0}, lsz[2] = {3, 4}, roff[2] = {5, 0};
    pdcid_t l = PDCregion_create(2, lz, lsz), rr = PDCregion_create(2, roff, lsz);
    pdcid_t t = PDCregion_transfer_create(rows, PDC_WRITE, grow, l, rr);
    CHECK_ID(t);
    CHECK_OK(PDCregion_transfer_start(t));
    CHECK_OK(PDCregion_transfer_wait(t));
    CHECK_OK(PDCregion_transfer_close(t));
    int nd;
    uint64_t *gd;
    CHECK_OK(PDCobj_get_dims(grow, &nd, &gd));
    CHECK(nd == 2 && gd[0] == 8 && gd[1] == 4);
    free(gd);
    CHECK_OK(PDCobj_close(grow));

    CHECK_OK(PDCregion_close(reg));
    CHECK_OK(PDCregion_close(l));
    CHECK_OK(PDCregion_close(rr));
    CHECK_OK(PDCprop_close(prop));
    CHECK_OK(PDCcont_close(cont));
    CHECK_OK(PDCclose(pdc));
    printf("transfer_restart: ok\n");
    return 0;
}
