/* Objects whose type or size is not known at creation, as PDC's own programs make them: the
 * default object property has no type and no dims. Such an object exists with its metadata
 * only (open, tags, info, buffer, dims, delete), refuses data with a message until a type
 * is set on its property, and then takes data like any other. Region locks fail with a
 * message instead of pretending to lock. Written the way PDC's examples are: each step
 * prints what it did, a failure sets ret_value. Leaves "untyped/left" without a type for the
 * Python side of the test. */
#include "pdc.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    int      ret_value = 0;
    pdcid_t  pdc, cont_prop, cont, obj_prop, obj1, obj2, obj3, reg, t;
    int      data[8], back[8], mybuf[4] = {42, 1, 2, 3};
    uint64_t zero[2] = {0, 0}, n8[1] = {8}, d2[2] = {10, 20}, d2small[2] = {4, 5};
    struct pdc_obj_info *info;

    pdc       = PDCinit("pdc");
    cont_prop = PDCprop_create(PDC_CONT_CREATE, pdc);
    cont      = PDCcont_create("untyped", cont_prop);

    /* 1. The default object property: no type, no dims. */
    obj_prop = PDCprop_create(PDC_OBJ_CREATE, pdc);
    PDCprop_set_obj_buf(obj_prop, mybuf);
    obj1 = PDCobj_create(cont, "untyped/a", obj_prop);
    if (obj1 > 0) {
        printf("Create an object without type and dims\n");
    }
    else {
        printf("Fail to create object without a type @ line %d!\n", __LINE__);
        return 1;
    }
    info = PDCobj_get_info(obj1);
    if (info == NULL || info->obj_pt->type != PDC_UNKNOWN) {
        printf("an untyped object should report PDC_UNKNOWN @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    if (PDCobj_get_dtype(obj1) != PDC_UNKNOWN) {
        printf("PDCobj_get_dtype should be PDC_UNKNOWN @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    void **rbuf = PDCobj_buf_retrieve(obj1);
    if (rbuf == NULL || *(int *)*rbuf != 42) {
        printf("PDCobj_buf_retrieve did not return the property's buffer @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    int   tagv = 7;
    void *got  = NULL;
    psize_t gsz = 0;
    if (PDCobj_put_tag(obj1, "step", &tagv, PDC_INT, sizeof tagv) != SUCCEED ||
        PDCobj_get_tag(obj1, "step", &got, NULL, &gsz) != SUCCEED || gsz != sizeof tagv ||
        *(int *)got != 7) {
        printf("tags of an untyped object failed @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    free(got);

    /* No type yet: data is refused, with a message, and nothing is created. */
    reg = PDCregion_create(1, zero, n8);
    t   = PDCregion_transfer_create(data, PDC_WRITE, obj1, reg, reg);
    if (t != 0) {
        printf("a transfer on an untyped object should be refused @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    if (PDCobj_get_data(obj1, back, sizeof back) != FAIL) {
        printf("PDCobj_get_data of an untyped object should fail @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    /* Closed and opened again: still there, still untyped. */
    PDCobj_close(obj1);
    obj1 = PDCobj_open("untyped/a", pdc);
    if (obj1 == 0 || PDCobj_get_dtype(obj1) != PDC_UNKNOWN) {
        printf("reopening the untyped object failed @ line %d!\n", __LINE__);
        return 1;
    }
    PDCobj_close(obj1);

    /* 2. A handle made from the property: the type and dims set on it later reach the object
     * at its first transfer (PDC programs set them on PDCobj_get_info(obj)->obj_pt). */
    obj1 = PDCobj_open("untyped/a", pdc);
    obj2 = PDCobj_create(cont, "untyped/typed-later", obj_prop);
    info = PDCobj_get_info(obj2);
    PDCprop_set_obj_type(info->obj_pt->obj_prop_id, PDC_INT);
    PDCprop_set_obj_dims(info->obj_pt->obj_prop_id, 1, n8);
    for (int i = 0; i < 8; i++)
        data[i] = 100 + i;
    t = PDCregion_transfer_create(data, PDC_WRITE, obj2, reg, reg);
    if (t == 0 || PDCregion_transfer_start(t) != SUCCEED || PDCregion_transfer_wait(t) != SUCCEED) {
        printf("writing after the type was set failed @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    PDCregion_transfer_close(t);
    memset(back, 0, sizeof back);
    t = PDCregion_transfer_create(back, PDC_READ, obj2, reg, reg);
    PDCregion_transfer_start(t);
    PDCregion_transfer_wait(t);
    PDCregion_transfer_close(t);
    for (int i = 0; i < 8; i++)
        if (back[i] != 100 + i) {
            printf("read back %d at %d, wrote %d @ line %d!\n", back[i], i, 100 + i, __LINE__);
            ret_value = 1;
            break;
        }
    if (PDCobj_get_dtype(obj2) != PDC_INT || PDCobj_get_info(obj2)->obj_pt->dims[0] != 8) {
        printf("the typed object should be PDC_INT [8] @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    /* An opened handle of the other object has no property to take a type from. */
    if (PDCregion_transfer_create(data, PDC_WRITE, obj1, reg, reg) != 0) {
        printf("an opened untyped object should still refuse data @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    /* Another handle of the typed object sees the type the owner recorded. */
    obj3 = PDCobj_open("untyped/typed-later", pdc);
    if (obj3 == 0 || PDCobj_get_dtype(obj3) != PDC_INT) {
        printf("the type did not reach the owner @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    PDCobj_close(obj3);
    PDCobj_close(obj2);
    PDCobj_close(obj1);
    PDCregion_close(reg);
    PDCprop_close(obj_prop);

    /* 3. Dims but no type (PDC's obj_dim); dims change while it has no data. */
    obj_prop = PDCprop_create(PDC_OBJ_CREATE, pdc);
    PDCprop_set_obj_dims(obj_prop, 2, d2);
    obj1 = PDCobj_create(cont, "untyped/dims", obj_prop);
    info = PDCobj_get_info(obj1);
    if (obj1 == 0 || info->obj_pt->ndim != 2 || info->obj_pt->dims[1] != 20 ||
        info->obj_pt->type != PDC_UNKNOWN) {
        printf("an untyped object with dims should report them @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    if (PDCobj_set_dims(obj1, 2, d2small) != SUCCEED) {
        printf("PDCobj_set_dims on an untyped object failed @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    PDCprop_set_obj_type(obj_prop, PDC_DOUBLE);
    double m[4][5], mb[4][5];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++)
            m[i][j] = i * 10 + j + 0.5;
    reg = PDCregion_create(2, zero, d2small);
    t   = PDCregion_transfer_create(m, PDC_WRITE, obj1, reg, reg);
    PDCregion_transfer_start(t);
    if (PDCregion_transfer_wait(t) != SUCCEED) {
        printf("writing the 4x5 doubles failed @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    PDCregion_transfer_close(t);
    if (PDCobj_get_data(obj1, mb, sizeof mb) != SUCCEED || memcmp(m, mb, sizeof m) != 0) {
        printf("PDCobj_get_data returned other values @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    PDCregion_close(reg);
    PDCobj_close(obj1);
    PDCprop_close(obj_prop);

    /* 4. Delete an untyped object; its name is free again. Leave one for the Python side. */
    obj_prop = PDCprop_create(PDC_OBJ_CREATE, pdc);
    obj1     = PDCobj_create(cont, "untyped/gone", obj_prop);
    if (PDCobj_del(obj1) != SUCCEED) {
        printf("deleting an untyped object failed @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    PDCobj_close(obj1);
    obj1 = PDCobj_create(cont, "untyped/gone", obj_prop);
    if (obj1 == 0) {
        printf("the deleted object's name is not free @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    PDCobj_close(obj1);
    obj1 = PDCobj_create(cont, "untyped/left", obj_prop);

    /* 5. Region locks fail (pdcx has none); they never claim a lock that excludes nothing. */
    reg = PDCregion_create(1, zero, n8);
    if (PDCreg_obtain_lock(obj1, reg, PDC_WRITE, PDC_BLOCK) != FAIL ||
        PDCreg_release_lock(obj1, reg, PDC_WRITE) != FAIL) {
        printf("region locks should fail @ line %d!\n", __LINE__);
        ret_value = 1;
    }
    PDCregion_close(reg);
    PDCobj_close(obj1);
    PDCprop_close(obj_prop);
    PDCcont_close(cont);
    PDCprop_close(cont_prop);
    if (PDCclose(pdc) < 0) {
        printf("fail to close PDC\n");
        ret_value = 1;
    }
    if (ret_value == 0)
        printf("obj_untyped: ok\n");
    return ret_value;
}
