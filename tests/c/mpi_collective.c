/* N MPI ranks: rank 0 creates the container (PDCcont_create_col, twice: the second call
 * finds it) and the object (PDCobj_create_mpi) and broadcasts them, every rank writes its own
 * rows of a 2-D double object, then every rank reads the whole object back and checks all. */
#include "pdc.h"
#include "check.h"
#include <mpi.h>

#define ROWS_PER_RANK 8
#define COLS 33

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    pdcid_t pdc = PDCinit("pdc");
    CHECK_ID(pdc);
    pdcid_t cprop = PDCprop_create(PDC_CONT_CREATE, pdc);
    pdcid_t first = PDCcont_create_col("mpi", cprop);
    CHECK_ID(first);
    pdcid_t cont = PDCcont_create_col("mpi", cprop);
    CHECK_ID(cont);
    CHECK_OK(PDCcont_close(first));
    pdcid_t prop = PDCprop_create(PDC_OBJ_CREATE, pdc);
    uint64_t dims[2] = {(uint64_t)size * ROWS_PER_RANK, COLS};
    CHECK_OK(PDCprop_set_obj_dims(prop, 2, dims));
    CHECK_OK(PDCprop_set_obj_type(prop, PDC_DOUBLE));
    pdcid_t obj = PDCobj_create_mpi(cont, "mpi/field", prop, 0, MPI_COMM_WORLD);
    CHECK_ID(obj);
    struct pdc_obj_info *info = PDCobj_get_info(obj);
    CHECK(info && info->obj_pt->dims[0] == dims[0]);

    /* every rank agrees on the global id */
    uint64_t mine = info->meta_id, root = mine;
    MPI_Bcast(&root, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    CHECK(mine == root);

    double mydata[ROWS_PER_RANK][COLS];
    for (int i = 0; i < ROWS_PER_RANK; i++)
        for (int j = 0; j < COLS; j++)
            mydata[i][j] = (rank * ROWS_PER_RANK + i) * 1000.0 + j;
    uint64_t lz[2] = {0, 0}, sz[2] = {ROWS_PER_RANK, COLS}, off[2] = {(uint64_t)rank * ROWS_PER_RANK, 0};
    pdcid_t l = PDCregion_create(2, lz, sz), r = PDCregion_create(2, off, sz);
    pdcid_t t = PDCregion_transfer_create(mydata, PDC_WRITE, obj, l, r);
    CHECK_ID(t);
    CHECK_OK(PDCregion_transfer_start_all(&t, 1));
    CHECK_OK(PDCregion_transfer_wait_all(&t, 1));
    CHECK_OK(PDCregion_transfer_close(t));
    MPI_Barrier(MPI_COMM_WORLD);

    size_t n = (size_t)dims[0] * COLS;
    double *all = malloc(n * sizeof(double));
    pdcid_t whole = PDCregion_create(2, lz, dims);
    pdcid_t rt = PDCregion_transfer_create(all, PDC_READ, obj, whole, whole);
    CHECK_OK(PDCregion_transfer_start(rt));
    CHECK_OK(PDCregion_transfer_wait(rt));
    CHECK_OK(PDCregion_transfer_close(rt));
    for (size_t k = 0; k < n; k++)
        CHECK(all[k] == (double)(k / COLS) * 1000.0 + (double)(k % COLS));
    free(all);

    CHECK_OK(PDCregion_close(l));
    CHECK_OK(PDCregion_close(r));
    CHECK_OK(PDCregion_close(whole));
    CHECK_OK(PDCobj_close(obj));
    /* collective open by name */
    pdcid_t again = PDCobj_open_col("mpi/field", pdc);
    CHECK_ID(again);
    CHECK_OK(PDCobj_close(again));
    CHECK_OK(PDCprop_close(prop));
    CHECK_OK(PDCcont_close(cont));
    CHECK_OK(PDCprop_close(cprop));
    CHECK_OK(PDCclose(pdc));
    printf("rank %d/%d: ok\n", rank, size);
    MPI_Finalize();
    return 0;
}
