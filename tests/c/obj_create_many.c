/* pdcx extension PDCXobj_create_many (pdcx_ext.h): N objects in one call, spread over the
 * servers; a name taken before the call and a name repeated inside it fail alone (id 0, FAIL
 * returned, each failure on stderr); every other object is usable at once, and all of them are
 * durable after PDCclose (the test kills the servers afterwards and looks for them). */
#include "pdcx_ext.h"
#include "check.h"
#include <stdio.h>
#include <string.h>

#define N 300

int main(void)
{
    pdcid_t pdc = PDCinit("pdc");
    CHECK_ID(pdc);
    pdcid_t cprop = PDCprop_create(PDC_CONT_CREATE, pdc);
    pdcid_t cont = PDCcont_create("many", cprop);
    CHECK_ID(cont);
    pdcid_t prop = PDCprop_create(PDC_OBJ_CREATE, pdc);
    uint64_t dims[1] = {4};
    CHECK_OK(PDCprop_set_obj_dims(prop, 1, dims));
    CHECK_OK(PDCprop_set_obj_type(prop, PDC_INT));

    pdcid_t taken = PDCobj_create(cont, "many/taken", prop);
    CHECK_ID(taken);
    CHECK_OK(PDCobj_close(taken));

    static char buf[N][32];
    const char *names[N];
    pdcid_t ids[N];
    for (int i = 0; i < N; i++) {
        snprintf(buf[i], sizeof(buf[i]), "many/o%d", i);
        names[i] = buf[i];
    }
    names[7] = "many/taken";  /* exists already */
    names[200] = "many/o100"; /* the same name twice in one call: the second fails */
    CHECK(PDCXobj_create_many(cont, N, names, prop, ids) == FAIL);
    for (int i = 0; i < N; i++) {
        if (i == 7 || i == 200)
            CHECK(ids[i] == 0);
        else
            CHECK(ids[i] != 0);
    }
    /* Usable at once: write and read one back. */
    int out[4] = {1, 2, 3, 4}, in[4] = {0};
    uint64_t off[1] = {0}, sz[1] = {4};
    pdcid_t reg = PDCregion_create(1, off, sz);
    pdcid_t t = PDCregion_transfer_create(out, PDC_WRITE, ids[123], reg, reg);
    CHECK_OK(PDCregion_transfer_start(t));
    CHECK_OK(PDCregion_transfer_wait(t));
    CHECK_OK(PDCregion_transfer_close(t));
    pdcid_t again = PDCobj_open("many/o123", pdc);
    CHECK_ID(again);
    t = PDCregion_transfer_create(in, PDC_READ, again, reg, reg);
    CHECK_OK(PDCregion_transfer_start(t));
    CHECK_OK(PDCregion_transfer_wait(t));
    CHECK(memcmp(in, out, sizeof(in)) == 0);
    CHECK_OK(PDCregion_transfer_close(t));
    CHECK_OK(PDCregion_close(reg));
    CHECK_OK(PDCobj_close(again));
    for (int i = 0; i < N; i++)
        if (ids[i] != 0)
            CHECK_OK(PDCobj_close(ids[i]));
    /* Nothing to create is no error. */
    CHECK_OK(PDCXobj_create_many(cont, 0, NULL, prop, NULL));
    CHECK_OK(PDCprop_close(prop));
    CHECK_OK(PDCcont_close(cont));
    CHECK_OK(PDCprop_close(cprop));
    CHECK_OK(PDCclose(pdc)); /* consistency point: every created object is durable */
    printf("obj_create_many: ok\n");
    return 0;
}
