/* pdcx: PDC-compatible collective object creation. */
#ifndef PDC_MPI_H
#define PDC_MPI_H

#include "pdc_public.h"

#ifdef ENABLE_MPI
#include <mpi.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Rank rank_id of comm creates the object, the others receive its id. Without MPI in the
 * process this is PDCobj_create. */
#ifdef ENABLE_MPI
pdcid_t PDCobj_create_mpi(pdcid_t cont_id, const char *obj_name, pdcid_t obj_create_prop, int rank_id,
                          MPI_Comm comm);
pdcid_t PDCobj_create_coll(pdcid_t cont_id, const char *obj_name, pdcid_t obj_create_prop, int rank_id,
                           MPI_Comm comm);
#else
pdcid_t PDCobj_create_mpi(pdcid_t cont_id, const char *obj_name, pdcid_t obj_create_prop, int rank_id,
                          int comm);
pdcid_t PDCobj_create_coll(pdcid_t cont_id, const char *obj_name, pdcid_t obj_create_prop, int rank_id,
                           int comm);
#endif

#ifdef __cplusplus
}
#endif

#endif /* PDC_MPI_H */
