/* pdcx: PDC-compatible regions and region transfers. */
#ifndef PDC_REGION_H
#define PDC_REGION_H

#include "pdc_public.h"
#include "pdc_obj.h"

#ifdef ENABLE_MPI
#include <mpi.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define DIM_MAX 4

/* Owned by the region handle (PDCregion_get_info); freed by PDCregion_close. */
struct pdc_region_info {
    pdcid_t               local_id;
    struct _pdc_obj_info *obj;
    size_t                ndim;
    uint64_t             *offset;
    uint64_t             *size;
    bool                  mapping;
    int                   registered_op;
    void                 *buf;
    size_t                unit;
};

typedef struct region_info_transfer_t {
    size_t   ndim;
    uint64_t start[DIM_MAX];
    uint64_t count[DIM_MAX];
} region_info_transfer_t;

typedef enum {
    PDC_TRANSFER_STATUS_COMPLETE  = 0,
    PDC_TRANSFER_STATUS_PENDING   = 1,
    PDC_TRANSFER_STATUS_NOT_FOUND = 2
} pdc_transfer_status_t;

/* A box of ndims (1..8) dimensions. */
pdcid_t PDCregion_create(psize_t ndims, uint64_t *offset, uint64_t *size);
perr_t  PDCregion_close(pdcid_t region_id);
/* No-op: region infos belong to their region handle. */
void    PDCregion_free(struct pdc_region_info *region);
struct pdc_region_info *PDCregion_get_info(pdcid_t reg_id);

/* Moves local_reg of buf to/from remote_reg of the object. buf is a dense C-order array of
 * shape local.offset + local.size; both regions hold the same number of elements. Writes
 * copy buf at start; reads fill buf at wait. A waited transfer may be started again. */
pdcid_t PDCregion_transfer_create(void *buf, pdc_access_t access_type, pdcid_t obj_id, pdcid_t local_reg,
                                  pdcid_t remote_reg);
perr_t  PDCregion_transfer_start(pdcid_t transfer_request_id);
perr_t  PDCregion_transfer_start_all(pdcid_t *transfer_request_id, int size);
#ifdef ENABLE_MPI
perr_t PDCregion_transfer_start_mpi(pdcid_t transfer_request_id, MPI_Comm comm);
perr_t PDCregion_transfer_start_all_mpi(pdcid_t *transfer_request_id, int size, MPI_Comm comm);
#endif
perr_t PDCregion_transfer_status(pdcid_t transfer_request_id, pdc_transfer_status_t *completed);
/* The consistency point: the write is visible to every later reader. Last waited wins. */
perr_t PDCregion_transfer_wait(pdcid_t transfer_request_id);
perr_t PDCregion_transfer_wait_all(pdcid_t *transfer_request_id, int size);
/* Waits first if the transfer is still in flight. */
perr_t PDCregion_transfer_close(pdcid_t transfer_request_id);

/* Older mapping API: not supported (returns FAIL). */
perr_t PDCbuf_obj_map(void *buf, pdc_var_type_t local_type, pdcid_t local_reg, pdcid_t remote_obj,
                      pdcid_t remote_reg);
perr_t PDCbuf_obj_unmap(pdcid_t remote_obj_id, pdcid_t remote_reg_id);
/* Accepted and ignored: the servers order commits. */
perr_t PDCreg_obtain_lock(pdcid_t obj_id, pdcid_t reg_id, pdc_access_t access_type, pdc_lock_mode_t lock_mode);
perr_t PDCreg_release_lock(pdcid_t obj_id, pdcid_t reg_id, pdc_access_t access_type);

#ifdef __cplusplus
}
#endif

#endif /* PDC_REGION_H */
