/* Relaxed consistency through the PDC API: PDC_CONSISTENCY_EVENTUAL writes are durable at
 * wait but invisible (reads go to the owner) until PDCobj_flush_start; with the pdcx extension
 * PDCXprop_set_obj_expected_writes the last expected write makes the batch visible; PDCobj_close
 * is a consistency point. Run with the data server != the owner and a long server timer. */
#include "pdc.h"
#include "check.h"
#include <string.h>

#define N 64
#define STEP 8

/* Blocks first..first+count-1 of STEP elements, element i of the object = base + i; each
 * block its own transfer, started and waited. */
static void write_blocks(pdcid_t obj, int *buf, int first, int count, int base)
{
    uint64_t lz[1] = {0}, sz[1] = {STEP};
    pdcid_t local = PDCregion_create(1, lz, sz);
    for (int k = first; k < first + count; k++) {
        uint64_t off[1] = {(uint64_t)k * STEP};
        for (int i = 0; i < STEP; i++)
            buf[i] = base + k * STEP + i;
        pdcid_t remote = PDCregion_create(1, off, sz);
        pdcid_t t = PDCregion_transfer_create(buf, PDC_WRITE, obj, local, remote);
        CHECK_ID(t);
        CHECK_OK(PDCregion_transfer_start(t));
        CHECK_OK(PDCregion_transfer_wait(t));
        CHECK_OK(PDCregion_transfer_close(t));
        CHECK_OK(PDCregion_close(remote));
    }
    CHECK_OK(PDCregion_close(local));
}

static void read_all(pdcid_t obj, int *out)
{
    uint64_t lz[1] = {0}, dims[1] = {N};
    pdcid_t whole = PDCregion_create(1, lz, dims);
    pdcid_t t = PDCregion_transfer_create(out, PDC_READ, obj, whole, whole);
    CHECK_OK(PDCregion_transfer_start(t));
    CHECK_OK(PDCregion_transfer_wait(t));
    CHECK_OK(PDCregion_transfer_close(t));
    CHECK_OK(PDCregion_close(whole));
}

static int all_equal(const int *v, int base)
{
    for (int i = 0; i < N; i++)
        if (v[i] != base + i)
            return 0;
    return 1;
}

static int all_zero(const int *v)
{
    for (int i = 0; i < N; i++)
        if (v[i] != 0)
            return 0;
    return 1;
}

int main(int argc, char **argv)
{
    CHECK(argc == 3); /* names of two objects owned by a server other than this one's */
    pdcid_t pdc = PDCinit("pdc");
    CHECK_ID(pdc);
    pdcid_t cprop = PDCprop_create(PDC_CONT_CREATE, pdc);
    pdcid_t cont = PDCcont_create("capi_lazy", cprop);
    pdcid_t prop = PDCprop_create(PDC_OBJ_CREATE, pdc);
    uint64_t dims[1] = {N};
    CHECK_OK(PDCprop_set_obj_dims(prop, 1, dims));
    CHECK_OK(PDCprop_set_obj_type(prop, PDC_INT));
    CHECK_OK(PDCprop_set_obj_consistency_semantics(prop, PDC_CONSISTENCY_EVENTUAL));
    int buf[STEP], got[N];

    pdcid_t a = PDCobj_create(cont, argv[1], prop);
    CHECK_ID(a);
    write_blocks(a, buf, 0, N / STEP, 1000);
    read_all(a, got);
    CHECK(all_zero(got)); /* waited and durable, not registered with the owner yet */
    CHECK_OK(PDCobj_flush_start(a));
    read_all(a, got);
    CHECK(all_equal(got, 1000));
    write_blocks(a, buf, 0, N / STEP, 2000);
    CHECK_OK(PDCobj_close(a)); /* consistency point */
    a = PDCobj_open(argv[1], pdc);
    read_all(a, got);
    CHECK(all_equal(got, 2000));
    CHECK_OK(PDCobj_close(a));

    CHECK_OK(PDCXprop_set_obj_expected_writes(prop, N / STEP));
    pdcid_t b = PDCobj_create(cont, argv[2], prop);
    CHECK_ID(b);
    write_blocks(b, buf, 0, N / STEP - 1, 3000);
    read_all(b, got);
    CHECK(all_zero(got));
    write_blocks(b, buf, N / STEP - 1, 1, 3000); /* the expected 8th write registers all 8 */
    read_all(b, got);
    CHECK(all_equal(got, 3000));
    CHECK_OK(PDCobj_close(b));
    CHECK_OK(PDCprop_close(prop));
    CHECK_OK(PDCcont_close(cont));
    CHECK_OK(PDCprop_close(cprop));
    CHECK_OK(PDCclose(pdc));
    printf("obj_lazy: ok\n");
    return 0;
}
