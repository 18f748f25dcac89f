/* Bad input must fail with FAIL / 0 / NULL and a message, never crash. */
#include "pdc.h"
#include "check.h"

int main(void)
{
    pdcid_t pdc = PDCinit("pdc");
    CHECK_ID(pdc);
    pdcid_t cprop = PDCprop_create(PDC_CONT_CREATE, pdc);
    pdcid_t cont = PDCcont_create("bad", cprop);
    pdcid_t oprop = PDCprop_create(PDC_OBJ_CREATE, pdc);
    CHECK_ID(cont);
    CHECK_ID(oprop);

    /* NULL pointers */
    CHECK(PDCcont_create(NULL, cprop) == 0);
    CHECK(PDCobj_create(cont, NULL, oprop) == 0);
    CHECK(PDCprop_set_obj_dims(oprop, 2, NULL) == FAIL);
    CHECK(PDCregion_create(2, NULL, NULL) == 0);
    CHECK(PDCobj_get_info(0) == NULL);
    /* unknown ids */
    CHECK(PDCobj_close(12345) == FAIL);
    CHECK(PDCregion_transfer_wait(999) == FAIL);
    CHECK(PDCprop_close((pdcid_t)1 << 60) == FAIL);
    /* wrong kinds */
    CHECK(PDCprop_set_obj_type(cprop, PDC_INT) == FAIL); /* container property */
    CHECK(PDCobj_create(cont, "bad/x", cprop) == 0);
    CHECK(PDCcont_create("bad2", oprop) == 0);
    CHECK(PDCcont_close(oprop) == FAIL);
    CHECK(PDCprop_create(PDC_OBJ_CREATE, cont) == 0);
    CHECK(PDCprop_create(7, pdc) == 0);
    /* no type yet: an object with metadata only, not an error (obj_untyped.c) */
    pdcid_t notype = PDCobj_create(cont, "bad/notype", oprop);
    CHECK_ID(notype);
    CHECK_OK(PDCobj_close(notype));
    uint64_t dims[2] = {4, 4};
    CHECK_OK(PDCprop_set_obj_dims(oprop, 2, dims));
    CHECK(PDCprop_set_obj_type(oprop, (pdc_var_type_t)99) == FAIL);
    CHECK_OK(PDCprop_set_obj_type(oprop, PDC_INT));
    pdcid_t obj = PDCobj_create(cont, "bad/ok", oprop);
    CHECK_ID(obj);
    CHECK(PDCobj_create(cont, "bad/ok", oprop) == 0); /* duplicate */
    /* regions out of bounds / mismatched */
    int buf[64];
    uint64_t zero[2] = {0, 0}, big[2] = {3, 5}, off[2] = {2, 0}, sz[2] = {3, 4}, one[1] = {0}, n16[1] = {16};
    pdcid_t rbig = PDCregion_create(2, zero, big), roob = PDCregion_create(2, off, sz);
    pdcid_t r1 = PDCregion_create(1, one, n16), rok = PDCregion_create(2, zero, sz);
    CHECK(PDCregion_transfer_create(buf, PDC_WRITE, obj, rbig, rbig) == 0);  /* 5 > 4 columns */
    CHECK(PDCregion_transfer_create(buf, PDC_WRITE, obj, roob, roob) == 0);  /* rows 2..5 > 4 */
    CHECK(PDCregion_transfer_create(buf, PDC_WRITE, obj, r1, r1) == 0);      /* 1-D on 2-D */
    CHECK(PDCregion_transfer_create(buf, PDC_WRITE, obj, rbig, rok) == 0);   /* 15 vs 12 elements */
    CHECK(PDCregion_transfer_create(NULL, PDC_WRITE, obj, rok, rok) == 0);   /* NULL buffer */
    CHECK(PDCregion_transfer_create(buf, (pdc_access_t)5, obj, rok, rok) == 0);
    CHECK(PDCregion_transfer_create(buf, PDC_READ, rok, rok, rok) == 0);     /* region as object */
    uint64_t zsz[2] = {0, 4};
    CHECK(PDCregion_create(2, zero, zsz) == 0);                              /* empty region */
    CHECK(PDCregion_create(0, zero, sz) == 0);
    pdcid_t t = PDCregion_transfer_create(buf, PDC_WRITE, obj, rok, rok);
    CHECK_ID(t);
    CHECK(PDCregion_transfer_wait(t) == FAIL); /* not started */
    pdcid_t dup[2] = {t, t};
    CHECK(PDCregion_transfer_start_all(dup, 2) == FAIL);
    CHECK(PDCregion_transfer_start_all(NULL, 3) == FAIL);
    CHECK_OK(PDCregion_transfer_close(t));
    /* the number of dims of an object with elements cannot change; ndim must be 1..MAX */
    uint64_t small[3] = {2, 2, 2};
    CHECK(PDCobj_set_dims(obj, 3, small) == FAIL);
    CHECK(PDCobj_set_dims(obj, 0, small) == FAIL);
    CHECK(PDCobj_set_dims(obj, 2, NULL) == FAIL);
    /* iterators */
    CHECK(PDCobj_iter_get_info(NULL) == NULL);
    CHECK(PDCobj_iter_next((obj_handle *)buf, cont) == NULL);
    CHECK(PDCobj_iter_null(NULL));
    /* value queries: bad constants, operators, ids and pointers are refused */
    int v = 3;
    CHECK(PDCquery_create(obj, PDC_GT, PDC_INT, NULL) == NULL);
    CHECK(PDCquery_create(obj, PDC_OP_NONE, PDC_INT, &v) == NULL);
    CHECK(PDCquery_create(obj, PDC_GT, PDC_STRING, &v) == NULL);
    CHECK(PDCquery_create(cont, PDC_GT, PDC_INT, &v) == NULL);
    uint64_t nh;
    CHECK(PDCquery_get_nhits(NULL, &nh) == FAIL);
    CHECK(PDCquery_get_nhits((pdc_query_t *)buf, &nh) == FAIL);
    pdc_query_t *q = PDCquery_create(obj, PDC_GT, PDC_INT, &v);
    CHECK(q != NULL);
    CHECK(PDCquery_get_nhits(q, NULL) == FAIL);
    CHECK(PDCquery_get_selection(q, NULL) == FAIL);
    CHECK(PDCquery_and(q, q) == NULL);
    PDCquery_free(q);
    PDCquery_free(NULL);
    /* deleted object */
    CHECK_OK(PDCobj_del(obj));
    pdcid_t t2 = PDCregion_transfer_create(buf, PDC_WRITE, obj, rok, rok);
    if (t2 != 0) {
        CHECK_OK(PDCregion_transfer_start(t2));
        CHECK(PDCregion_transfer_wait(t2) == FAIL);
    }
    CHECK_OK(PDCobj_close(obj));
    CHECK(PDCclose(cont) == FAIL);
    CHECK_OK(PDCclose(pdc));
    CHECK(PDCcont_open("bad", pdc) == 0); /* after close */
    printf("bad_input: ok\n");
    return 0;
}
