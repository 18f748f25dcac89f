/* Value queries through PDC's query API, written as a PDC program would:
 * two VPIC-like 1-d objects (energy: float, x: double) written with region transfers, and a
 * 2-d int object; single conditions, and/or, conditions on two objects, a region restriction,
 * hit counts, selections (coordinates), values at a selection, and freeing. Every result is
 * checked against the same arrays evaluated here. */
#include "pdc.h"
#include "check.h"
#include <string.h>

#define N 100000
#define R 300
#define C 200

static pdcid_t make_obj(pdcid_t pdc, pdcid_t cont, const char *name, pdc_var_type_t t, int ndim,
                        uint64_t *dims)
{
    pdcid_t prop = PDCprop_create(PDC_OBJ_CREATE, pdc);
    CHECK_OK(PDCprop_set_obj_dims(prop, ndim, dims));
    CHECK_OK(PDCprop_set_obj_type(prop, t));
    pdcid_t obj = PDCobj_create(cont, name, prop);
    CHECK_ID(obj);
    CHECK_OK(PDCprop_close(prop));
    return obj;
}

static void write_all(pdcid_t obj, void *buf, int ndim, uint64_t *dims)
{
    uint64_t zero[2] = {0, 0};
    pdcid_t local = PDCregion_create(ndim, zero, dims);
    pdcid_t global = PDCregion_create(ndim, zero, dims);
    pdcid_t t = PDCregion_transfer_create(buf, PDC_WRITE, obj, local, global);
    CHECK_ID(t);
    CHECK_OK(PDCregion_transfer_start(t));
    CHECK_OK(PDCregion_transfer_wait(t));
    CHECK_OK(PDCregion_transfer_close(t));
    CHECK_OK(PDCregion_close(local));
    CHECK_OK(PDCregion_close(global));
}

int main(void)
{
    pdcid_t pdc = PDCinit("pdc");
    CHECK_ID(pdc);
    pdcid_t cprop = PDCprop_create(PDC_CONT_CREATE, pdc);
    pdcid_t cont = PDCcont_create("vpic-query", cprop);
    CHECK_ID(cont);

    uint64_t n[1] = {N};
    float *energy = malloc(sizeof(float) * N);
    double *x = malloc(sizeof(double) * N);
    srand(12345);
    for (int i = 0; i < N; i++) {
        energy[i] = (float)rand() / (float)RAND_MAX * 3.0f;
        x[i] = (double)rand() / RAND_MAX * 300.0;
    }
    pdcid_t e_obj = make_obj(pdc, cont, "vpic-query/Energy", PDC_FLOAT, 1, n);
    pdcid_t x_obj = make_obj(pdc, cont, "vpic-query/x", PDC_DOUBLE, 1, n);
    write_all(e_obj, energy, 1, n);
    write_all(x_obj, x, 1, n);

    /* 1. energy > 2.9 */
    float e_lo = 2.9f;
    pdc_query_t *q = PDCquery_create(e_obj, PDC_GT, PDC_FLOAT, &e_lo);
    CHECK(q != NULL && q->constraint != NULL && q->constraint->op == PDC_GT);
    uint64_t nhits = 0, expect = 0;
    for (int i = 0; i < N; i++)
        expect += energy[i] > e_lo;
    CHECK_OK(PDCquery_get_nhits(q, &nhits));
    CHECK(nhits == expect && nhits > 0);
    PDCquery_free_all(q);

    /* 2. 1.0 <= energy < 1.01 AND x < 100, OR x > 299.9, restricted to [1000, 81000) */
    float lo = 1.0f, hi = 1.01f;
    double xa = 100.0, xb = 299.9;
    pdc_query_t *ql = PDCquery_create(e_obj, PDC_GTE, PDC_FLOAT, &lo);
    pdc_query_t *qh = PDCquery_create(e_obj, PDC_LT, PDC_FLOAT, &hi);
    pdc_query_t *qx = PDCquery_create(x_obj, PDC_LT, PDC_DOUBLE, &xa);
    pdc_query_t *qy = PDCquery_create(x_obj, PDC_GT, PDC_DOUBLE, &xb);
    pdc_query_t *qe = PDCquery_and(ql, qh);
    pdc_query_t *qa = PDCquery_and(qe, qx);
    pdc_query_t *qq = PDCquery_or(qa, qy);
    CHECK(qq != NULL && qq->left == qa && qq->right == qy && qq->combine_op == PDC_QUERY_OR);
    uint64_t roff[1] = {1000}, rsize[1] = {80000};
    struct pdc_region_info region;
    region.ndim = 1;
    region.offset = roff;
    region.size = rsize;
    CHECK_OK(PDCquery_sel_region(qq, &region));
    pdc_selection_t sel;
    CHECK_OK(PDCquery_get_selection(qq, &sel));
    uint64_t k = 0;
    for (uint64_t i = roff[0]; i < roff[0] + rsize[0]; i++) {
        int hit = (energy[i] >= lo && energy[i] < hi && x[i] < xa) || x[i] > xb;
        if (hit) {
            CHECK(k < sel.nhits && sel.coords[k] == i);
            k++;
        }
    }
    CHECK(k == sel.nhits && sel.nhits > 0 && sel.ndim == 1);
    PDCselection_print(&sel);

    /* values of both objects at the selection */
    float *ev = malloc(sizeof(float) * sel.nhits);
    double *xv = malloc(sizeof(double) * sel.nhits);
    CHECK_OK(PDCquery_get_data(e_obj, &sel, ev));
    CHECK_OK(PDCquery_get_data(x_obj, &sel, xv));
    for (uint64_t i = 0; i < sel.nhits; i++) {
        CHECK(ev[i] == energy[sel.coords[i]]);
        CHECK(xv[i] == x[sel.coords[i]]);
    }
    /* get_sel_data: the query's first object (energy) */
    memset(ev, 0, sizeof(float) * sel.nhits);
    CHECK_OK(PDCquery_get_sel_data(qq, &sel, ev));
    CHECK(ev[0] == energy[sel.coords[0]]);
    PDCselection_free(&sel);
    CHECK(sel.coords == NULL);
    PDCquery_free_all(qq);

    /* 3. a 2-d int object: coordinates are (row, col) per hit, in C order */
    uint64_t d2[2] = {R, C};
    int *m = malloc(sizeof(int) * R * C);
    for (int i = 0; i < R * C; i++)
        m[i] = (i * 7919) % 10007;
    pdcid_t m_obj = make_obj(pdc, cont, "vpic-query/m", PDC_INT, 2, d2);
    write_all(m_obj, m, 2, d2);
    int v = 10000;
    q = PDCquery_create(m_obj, PDC_GTE, PDC_INT, &v);
    CHECK_OK(PDCquery_get_selection(q, &sel));
    CHECK(sel.ndim == 2);
    k = 0;
    for (int i = 0; i < R * C; i++)
        if (m[i] >= v) {
            CHECK(sel.coords[2 * k] == (uint64_t)(i / C) && sel.coords[2 * k + 1] == (uint64_t)(i % C));
            k++;
        }
    CHECK(k == sel.nhits && k > 0);
    int *mv = malloc(sizeof(int) * sel.nhits);
    CHECK_OK(PDCquery_get_data(m_obj, &sel, mv));
    for (uint64_t i = 0; i < sel.nhits; i++)
        CHECK(mv[i] >= v);
    PDCselection_free(&sel);
    int eqv = m[5 * C + 7];
    pdc_query_t *qeq = PDCquery_create(m_obj, PDC_EQ, PDC_INT, &eqv);
    CHECK_OK(PDCquery_get_nhits(qeq, &nhits));
    expect = 0;
    for (int i = 0; i < R * C; i++)
        expect += m[i] == eqv;
    CHECK(nhits == expect && nhits >= 1);
    PDCquery_free(qeq);
    PDCquery_free(q);

    /* 4. errors: different shapes, bad op, NULL value, freed query */
    pdc_query_t *bad = PDCquery_and(PDCquery_create(e_obj, PDC_GT, PDC_FLOAT, &e_lo),
                                    PDCquery_create(m_obj, PDC_GT, PDC_INT, &v));
    CHECK(PDCquery_get_nhits(bad, &nhits) == FAIL);
    PDCquery_free_all(bad);
    CHECK(PDCquery_create(e_obj, (pdc_query_op_t)9, PDC_FLOAT, &e_lo) == NULL);
    CHECK(PDCquery_create(e_obj, PDC_GT, PDC_FLOAT, NULL) == NULL);
    CHECK(PDCquery_get_nhits(bad, &nhits) == FAIL); /* freed: refused, not dereferenced */
    CHECK_OK(PDCquery_get_histogram(e_obj));

    CHECK_OK(PDCobj_close(e_obj));
    CHECK_OK(PDCobj_close(x_obj));
    CHECK_OK(PDCobj_close(m_obj));
    CHECK_OK(PDCcont_close(cont));
    CHECK_OK(PDCclose(pdc));
    printf("pdc_query: ok\n");
    return 0;
}
