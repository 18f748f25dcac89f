/* N ranks share an object created collectively with PDC's default property (no type, no
 * dims), as PDC's create_obj_coll does: every rank gets a handle of the same object, tags
 * it, and then each sets the type and the dims on its own property and writes its slice.
 * The first of those reaches the owner; the others find the same type there. Every rank
 * reads the whole object back. Written the way PDC's examples are. */
#include "pdc.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define PER_RANK 16

int main(int argc, char **argv)
{
    int      rank = 0, size = 1, ret_value = 0;
    pdcid_t  pdc, cont_prop, cont, obj_prop, obj;
    struct pdc_obj_info *info;
    char     tag[32];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    pdc       = PDCinit("pdc");
    cont_prop = PDCprop_create(PDC_CONT_CREATE, pdc);
    cont      = PDCcont_create_col("untyped_mpi", cont_prop);
    obj_prop  = PDCprop_create(PDC_OBJ_CREATE, pdc);
    obj       = PDCobj_create_mpi(cont, "untyped_mpi/shared", obj_prop, 0, MPI_COMM_WORLD);
    if (obj <= 0) {
        printf("[%d] Fail to create the object collectively @ line %d!\n", rank, __LINE__);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    info = PDCobj_get_info(obj);
    uint64_t mine = info->meta_id, root = mine;
    MPI_Bcast(&root, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (mine != root || info->obj_pt->type != PDC_UNKNOWN) {
        printf("[%d] ranks disagree on the object, or it has a type @ line %d!\n", rank, __LINE__);
        ret_value = 1;
    }
    snprintf(tag, sizeof tag, "rank%d", rank);
    if (PDCobj_put_tag(obj, tag, &rank, PDC_INT, sizeof rank) != SUCCEED) {
        printf("[%d] tagging the untyped object failed @ line %d!\n", rank, __LINE__);
        ret_value = 1;
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* Each rank: type and dims on its property, then its slice. */
    uint64_t dims[1] = {(uint64_t)size * PER_RANK}, off[1] = {(uint64_t)rank * PER_RANK};
    uint64_t cnt[1] = {PER_RANK}, zero[1] = {0};
    PDCprop_set_obj_type(info->obj_pt->obj_prop_id, PDC_FLOAT);
    PDCprop_set_obj_dims(info->obj_pt->obj_prop_id, 1, dims);
    float   mydata[PER_RANK];
    for (int i = 0; i < PER_RANK; i++)
        mydata[i] = rank * 1000.0f + i;
    pdcid_t local = PDCregion_create(1, zero, cnt), remote = PDCregion_create(1, off, cnt);
    pdcid_t t     = PDCregion_transfer_create(mydata, PDC_WRITE, obj, local, remote);
    if (t == 0 || PDCregion_transfer_start(t) != SUCCEED || PDCregion_transfer_wait(t) != SUCCEED) {
        printf("[%d] writing my slice failed @ line %d!\n", rank, __LINE__);
        ret_value = 1;
    }
    PDCregion_transfer_close(t);
    MPI_Barrier(MPI_COMM_WORLD);

    float  *all   = malloc(dims[0] * sizeof(float));
    pdcid_t whole = PDCregion_create(1, zero, dims);
    t             = PDCregion_transfer_create(all, PDC_READ, obj, whole, whole);
    PDCregion_transfer_start(t);
    if (PDCregion_transfer_wait(t) != SUCCEED) {
        printf("[%d] reading the object failed @ line %d!\n", rank, __LINE__);
        ret_value = 1;
    }
    PDCregion_transfer_close(t);
    for (uint64_t k = 0; k < dims[0]; k++)
        if (all[k] != (float)(k / PER_RANK) * 1000.0f + (float)(k % PER_RANK)) {
            printf("[%d] element %llu is %f @ line %d!\n", rank, (unsigned long long)k, all[k], __LINE__);
            ret_value = 1;
            break;
        }
    free(all);
    if (PDCobj_get_dtype(obj) != PDC_FLOAT) {
        printf("[%d] the object should be PDC_FLOAT now @ line %d!\n", rank, __LINE__);
        ret_value = 1;
    }
    PDCregion_close(local);
    PDCregion_close(remote);
    PDCregion_close(whole);
    PDCobj_close(obj);
    PDCprop_close(obj_prop);
    PDCcont_close(cont);
    PDCprop_close(cont_prop);
    PDCclose(pdc);
    if (ret_value == 0)
        printf("rank %d/%d: ok\n", rank, size);
    MPI_Finalize();
    return ret_value;
}
