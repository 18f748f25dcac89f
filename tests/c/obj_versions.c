/* pdcx_ext.h versions: four whole writes of an object, each a version; the object keeps the
 * last two (tag pdcx.keep.last) and the first (named); each reads as it was written. After a
 * compaction pass (`pdcx compact`, run by the test between `obj_versions write` and
 * `obj_versions read V1 V2 V3 V4`, the numbers the first printed) the second is refused and
 * the others still read as written. */
#include "pdc.h"
#include "pdcx_ext.h"
#include "check.h"
#include <string.h>

#define N 1000

static void write_all(pdcid_t obj, int v)
{
    int *w = malloc(sizeof(int) * N);
    for (int i = 0; i < N; i++)
        w[i] = v * 10000 + i;
    uint64_t zero[1] = {0}, dims[1] = {N};
    pdcid_t l = PDCregion_create(1, zero, dims), r = PDCregion_create(1, zero, dims);
    pdcid_t t = PDCregion_transfer_create(w, PDC_WRITE, obj, l, r);
    CHECK_ID(t);
    CHECK_OK(PDCregion_transfer_start(t));
    CHECK_OK(PDCregion_transfer_wait(t));
    CHECK_OK(PDCregion_transfer_close(t));
    CHECK_OK(PDCregion_close(l));
    CHECK_OK(PDCregion_close(r));
    free(w);
}

static int read_is(pdcid_t obj, uint64_t version, int v)
{
    int *r = calloc(N, sizeof(int));
    uint64_t off[1] = {100}, cnt[1] = {10};
    pdcid_t reg = PDCregion_create(1, off, cnt);
    CHECK_ID(reg);
    int ok = PDCXobj_read_version(obj, reg, version, r) == SUCCEED;
    for (int i = 0; ok && i < 10; i++)
        ok = r[i] == v * 10000 + 100 + i;
    CHECK_OK(PDCregion_close(reg));
    if (ok) {
        CHECK_OK(PDCXobj_read_version(obj, 0, version, r));
        ok = r[N - 1] == v * 10000 + N - 1;
    }
    free(r);
    return ok;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2 || argc == 6);
    pdcid_t pdc = PDCinit("pdc");
    CHECK_ID(pdc);
    uint64_t v[4];
    if (strcmp(argv[1], "write") == 0) {
        pdcid_t cprop = PDCprop_create(PDC_CONT_CREATE, pdc);
        pdcid_t cont = PDCcont_create("ver", cprop);
        CHECK_ID(cont);
        pdcid_t prop = PDCprop_create(PDC_OBJ_CREATE, pdc);
        uint64_t dims[1] = {N};
        CHECK_OK(PDCprop_set_obj_dims(prop, 1, dims));
        CHECK_OK(PDCprop_set_obj_type(prop, PDC_INT));
        pdcid_t obj = PDCobj_create(cont, "ver/x", prop);
        CHECK_ID(obj);
        int64_t keep = 2;
        CHECK_OK(PDCobj_put_tag(obj, "pdcx.keep.last", &keep, PDC_INT64, sizeof keep));
        for (int i = 0; i < 4; i++) {
            write_all(obj, i + 1);
            CHECK_OK(PDCXobj_latest_version(obj, &v[i]));
            CHECK(i == 0 || v[i] > v[i - 1]);
        }
        CHECK_OK(PDCXobj_name_version(obj, "first", v[0]));
        for (int i = 0; i < 4; i++)
            CHECK(read_is(obj, v[i], i + 1));
        printf("versions %llu %llu %llu %llu\n", (unsigned long long)v[0], (unsigned long long)v[1],
               (unsigned long long)v[2], (unsigned long long)v[3]);
        CHECK_OK(PDCobj_close(obj));
        CHECK_OK(PDCcont_close(cont));
    } else {
        pdcid_t obj = PDCobj_open("ver/x", pdc);
        CHECK_ID(obj);
        for (int i = 0; i < 4; i++)
            v[i] = strtoull(argv[2 + i], NULL, 10);
        uint64_t newest;
        CHECK_OK(PDCXobj_latest_version(obj, &newest));
        CHECK(newest == v[3]);
        CHECK(read_is(obj, v[0], 1));  /* named: kept */
        CHECK(!read_is(obj, v[1], 2)); /* dropped: refused */
        CHECK(read_is(obj, v[2], 3));  /* the last two: kept */
        CHECK(read_is(obj, v[3], 4));
        CHECK_OK(PDCobj_close(obj));
    }
    CHECK_OK(PDCclose(pdc));
    printf("obj_versions %s: ok\n", argv[1]);
    return 0;
}
