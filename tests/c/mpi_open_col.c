/* PDCobj_open_col / PDCcont_open_col as in PDC: only rank 0 names the object (the others pass
 * NULL), rank 0 looks it up and broadcasts, every rank gets a handle with the same global id.
 * The test counts the servers' lookups around this program: a fixed number, however many
 * ranks. */
#include "pdc.h"
#include "check.h"
#include <mpi.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(argc == 3); /* container name, object name (created beforehand) */
    pdcid_t pdc = PDCinit("pdc");
    CHECK_ID(pdc);
    pdcid_t cont = PDCcont_open_col(rank == 0 ? argv[1] : NULL, pdc);
    CHECK_ID(cont);
    pdcid_t obj = PDCobj_open_col(rank == 0 ? argv[2] : NULL, pdc);
    CHECK_ID(obj);
    /* PDCobj_get_info refreshes the metadata (one lookup): on rank 0 only, so the servers
     * still see a fixed number of lookups; the other ranks' handles carry the broadcast. */
    CHECK(PDCobj_get_dtype(obj) == PDC_INT);
    if (rank == 0) {
        struct pdc_obj_info *info = PDCobj_get_info(obj);
        CHECK(info && strcmp(info->name, argv[2]) == 0);
    }
    /* A name that does not exist fails on every rank, with rank 0's reason. */
    CHECK(PDCobj_open_col(rank == 0 ? "no/such/object" : NULL, pdc) == 0);
    CHECK_OK(PDCobj_close(obj));
    CHECK_OK(PDCcont_close(cont));
    CHECK_OK(PDCclose(pdc));
    printf("rank %d/%d: ok\n", rank, size);
    MPI_Finalize();
    return 0;
}
