/* Containers, tags, object lists and iterators. argv[1] names an object created from
 * Python with str/int/float tags, whose values must come back as sensible bytes. */
#include "pdc.h"
#include "check.h"
#include <string.h>

static pdcid_t mkobj(pdcid_t pdc, pdcid_t cont, const char *name)
{
    pdcid_t prop = PDCprop_create(PDC_OBJ_CREATE, pdc);
    uint64_t dims[1] = {4};
    CHECK_OK(PDCprop_set_obj_dims(prop, 1, dims));
    CHECK_OK(PDCprop_set_obj_type(prop, PDC_FLOAT));
    pdcid_t o = PDCobj_create(cont, name, prop);
    CHECK_ID(o);
    CHECK_OK(PDCprop_close(prop));
    return o;
}

int main(int argc, char **argv)
{
    pdcid_t pdc = PDCinit("pdc");
    CHECK_ID(pdc);
    pdcid_t cprop = PDCprop_create(PDC_CONT_CREATE, pdc);
    CHECK_OK(PDCprop_set_cont_lifetime(cprop, PDC_PERSIST));
    pdcid_t c1 = PDCcont_create("ct/one", cprop), c2 = PDCcont_create("ct/two", cprop);
    CHECK_ID(c1);
    CHECK_ID(c2);
    CHECK_OK(PDCcont_persist(c1));
    /* creating an existing container opens it */
    pdcid_t again = PDCcont_create("ct/one", cprop);
    CHECK_ID(again);
    CHECK_OK(PDCcont_close(again));

    /* container tags: int, raw bytes, string */
    int ival = 42;
    CHECK_OK(PDCcont_put_tag(c1, "answer", &ival, PDC_INT, sizeof ival));
    unsigned char raw[5] = {0, 1, 2, 255, 7};
    CHECK_OK(PDCcont_put_tag(c1, "raw", raw, PDC_CHAR, 5));
    CHECK_OK(PDCcont_put_tag(c1, "label", "hello", PDC_STRING, 6));
    void *v;
    pdc_var_type_t t;
    uint32_t sz;
    CHECK_OK(PDCcont_get_tag(c1, "answer", &v, &t, &sz));
    CHECK(sz == 4 && *(int *)v == 42);
    free(v);
    CHECK_OK(PDCcont_get_tag(c1, "raw", &v, &t, &sz));
    CHECK(sz == 5 && memcmp(v, raw, 5) == 0 && t == PDC_CHAR);
    free(v);
    CHECK_OK(PDCcont_get_tag(c1, "label", &v, &t, &sz));
    CHECK(sz == 6 && strcmp(v, "hello") == 0 && t == PDC_STRING);
    free(v);
    CHECK_OK(PDCcont_del_tag(c1, "answer"));
    /* As in PDC: a deleted tag reads as NULL, size 0, and deleting it again succeeds. */
    CHECK_OK(PDCcont_get_tag(c1, "answer", &v, &t, &sz));
    CHECK(v == NULL && sz == 0);
    CHECK_OK(PDCcont_del_tag(c1, "answer"));
    CHECK_OK(PDCcont_del_tag(c1, "never-set"));

    /* container info */
    struct pdc_cont_info *ci = PDCcont_get_info("ct/one");
    CHECK(ci && strcmp(ci->name, "ct/one") == 0 && ci->local_id == c1 && ci->meta_id != 0);

    /* objects, object tags */
    pdcid_t a = mkobj(pdc, c1, "ct/a"), b = mkobj(pdc, c1, "ct/b"), c = mkobj(pdc, c1, "ct/c");
    double dv = 2.5;
    CHECK_OK(PDCobj_put_tag(a, "temp", &dv, PDC_DOUBLE, sizeof dv));
    psize_t psz;
    CHECK_OK(PDCobj_get_tag(a, "temp", &v, &t, &psz));
    CHECK(psz == 8 && *(double *)v == 2.5);
    free(v);
    CHECK_OK(PDCobj_del_tag(a, "temp"));
    CHECK_OK(PDCobj_get_tag(a, "temp", &v, &t, &psz));
    CHECK(v == NULL && psz == 0);
    CHECK_OK(PDCobj_del_tag(a, "temp"));
    int64_t step = 17;
    CHECK_OK(PDCobj_put_tag(b, "step", &step, PDC_INT64, sizeof step));
    int n = 0;
    uint64_t *hits = NULL;
    CHECK_OK(PDCobj_get_id("step", &step, sizeof step, &n, &hits));
    struct pdc_obj_info *binfo = PDCobj_get_info(b);
    CHECK(n == 1 && hits[0] == binfo->meta_id);
    free(hits);

    /* object lists: put a, b into two; get; del b; iterate */
    pdcid_t ids[2] = {a, b};
    CHECK_OK(PDCcont_put_objids(c2, 2, ids));
    pdcid_t *got = NULL;
    CHECK_OK(PDCcont_get_objids(c2, &n, &got));
    CHECK(n == 2);
    free(got);
    CHECK_OK(PDCcont_del_objids(c2, 1, &ids[1]));
    CHECK_OK(PDCcont_get_objids(c2, &n, &got));
    CHECK(n == 1 && got[0] == PDCobj_get_info(a)->meta_id);
    free(got);

    const char *want[3] = {"ct/a", "ct/b", "ct/c"};
    int k = 0;
    obj_handle *h = PDCobj_iter_start(c1);
    while (!PDCobj_iter_null(h)) {
        struct pdc_obj_info *oi = PDCobj_iter_get_info(h);
        CHECK(oi && k < 3 && strcmp(oi->name, want[k]) == 0 && oi->obj_pt->ndim == 1 && oi->obj_pt->dims[0] == 4);
        CHECK(oi->obj_pt->type == PDC_FLOAT);
        k++;
        h = PDCobj_iter_next(h, c1);
    }
    CHECK(k == 3);
    int seen = 0;
    cont_handle *ch = PDCcont_iter_start();
    while (!PDCcont_iter_null(ch)) {
        struct pdc_cont_info *info = PDCcont_iter_get_info(ch);
        CHECK(info);
        if (strcmp(info->name, "ct/one") == 0 || strcmp(info->name, "ct/two") == 0)
            seen++;
        ch = PDCcont_iter_next(ch);
    }
    CHECK(seen == 2);

    /* whole-object put/get */
    const char msg[] = "whole object payload";
    pdcid_t blob = PDCobj_put_data("ct/blob", (void *)msg, sizeof msg, c1);
    CHECK_ID(blob);
    char back[64] = {0};
    CHECK_OK(PDCobj_get_data(blob, back, sizeof msg));
    CHECK(strcmp(back, msg) == 0);
    CHECK(PDCobj_get_dtype(blob) == PDC_CHAR);

    /* delete an object; it leaves its containers and cannot be opened again */
    CHECK_OK(PDCobj_del(c));
    CHECK_OK(PDCobj_close(c));
    CHECK(PDCobj_open("ct/c", pdc) == 0);
    k = 0;
    for (h = PDCobj_iter_start(c1); !PDCobj_iter_null(h); h = PDCobj_iter_next(h, c1))
        k++;
    CHECK(k == 3); /* a, b, blob */

    /* delete a container: objects survive */
    CHECK_OK(PDCcont_del(c2));
    CHECK_OK(PDCcont_close(c2));
    CHECK(PDCcont_open("ct/two", pdc) == 0);
    CHECK(PDCobj_get_info(a) != NULL);

    /* tags written from Python: str / int / float / bytes */
    if (argc > 1) {
        pdcid_t py = PDCobj_open(argv[1], pdc);
        CHECK_ID(py);
        CHECK_OK(PDCobj_get_tag(py, "species", &v, &t, &psz));
        CHECK(t == PDC_STRING && psz == 9 && strcmp(v, "electron") == 0);
        free(v);
        CHECK_OK(PDCobj_get_tag(py, "step", &v, &t, &psz));
        CHECK(t == PDC_INT64 && psz == 8 && *(int64_t *)v == 7);
        free(v);
        CHECK_OK(PDCobj_get_tag(py, "dt", &v, &t, &psz));
        CHECK(t == PDC_DOUBLE && psz == 8 && *(double *)v == 0.125);
        free(v);
        CHECK_OK(PDCobj_get_tag(py, "blob", &v, &t, &psz));
        CHECK(t == PDC_CHAR && psz == 3 && memcmp(v, "\x01\x02\x03", 3) == 0);
        free(v);
        /* and a C tag the Python side will read */
        CHECK_OK(PDCobj_put_tag(py, "from_c", "yes", PDC_STRING, 4));
        int32_t i32 = -5;
        CHECK_OK(PDCobj_put_tag(py, "c_int", &i32, PDC_INT, 4));
        CHECK_OK(PDCobj_close(py));
    }

    CHECK_OK(PDCobj_close(a));
    CHECK_OK(PDCobj_close(b));
    CHECK_OK(PDCobj_close(blob));
    CHECK_OK(PDCcont_close(c1));
    CHECK_OK(PDCprop_close(cprop));
    CHECK_OK(PDCclose(pdc));
    printf("cont_tags_iter: ok\n");
    return 0;
}
