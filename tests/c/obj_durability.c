/* pdcx durability through the C API: PDCXprop_set_obj_durability(prop, PDCX_DURABILITY_REMOTE)
 * makes every wait on the object's transfers return only once the data is on a tier that
 * survives the node. argv[1] "ok": the deployment has such a tier and the waits succeed;
 * "refused": it has none and the wait fails (the error names what is missing). */
#include "pdc.h"
#include "check.h"
#include <string.h>

#define N 32

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    int expect_ok = strcmp(argv[1], "ok") == 0;
    pdcid_t pdc = PDCinit("pdc");
    CHECK_ID(pdc);
    pdcid_t cprop = PDCprop_create(PDC_CONT_CREATE, pdc);
    pdcid_t cont = PDCcont_create("dur", cprop);
    pdcid_t prop = PDCprop_create(PDC_OBJ_CREATE, pdc);
    uint64_t dims[1] = {N};
    CHECK_OK(PDCprop_set_obj_dims(prop, 1, dims));
    CHECK_OK(PDCprop_set_obj_type(prop, PDC_DOUBLE));
    CHECK(PDCXprop_set_obj_durability(prop, (pdcx_durability_t)7) != SUCCEED);
    CHECK_OK(PDCXprop_set_obj_durability(prop, PDCX_DURABILITY_REMOTE));
    pdcid_t obj = PDCobj_create(cont, "dur/x", prop);
    CHECK_ID(obj);
    double buf[N];
    for (int i = 0; i < N; i++)
        buf[i] = i * 0.5;
    uint64_t zero[1] = {0};
    pdcid_t whole = PDCregion_create(1, zero, dims);
    pdcid_t t = PDCregion_transfer_create(buf, PDC_WRITE, obj, whole, whole);
    CHECK_ID(t);
    CHECK_OK(PDCregion_transfer_start(t));
    perr_t waited = PDCregion_transfer_wait(t);
    CHECK(expect_ok ? waited == SUCCEED : waited != SUCCEED);
    CHECK_OK(PDCregion_transfer_close(t));
    CHECK_OK(PDCregion_close(whole));
    CHECK_OK(PDCobj_close(obj));
    CHECK_OK(PDCprop_close(prop));
    CHECK_OK(PDCcont_close(cont));
    CHECK_OK(PDCprop_close(cprop));
    CHECK_OK(PDCclose(pdc));
    printf("obj_durability: ok\n");
    return 0;
}
