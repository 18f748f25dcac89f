/* pdcx: PDC-compatible container API. */
#ifndef PDC_CONT_H
#define PDC_CONT_H

#include "pdc_public.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Iterator position (opaque). */
typedef struct _pdc_id_info cont_handle;

struct pdc_cont_info {
    char    *name;
    pdcid_t  local_id;
    uint64_t meta_id;
};

/* Creates the container, or opens it if it exists (so all ranks may call it). */
pdcid_t PDCcont_create(const char *cont_name, pdcid_t cont_create_prop);
pdcid_t PDCcont_create_col(const char *cont_name, pdcid_t cont_prop_id);
pdcid_t PDCcont_open(const char *cont_name, pdcid_t pdc_id);
/* Collective over MPI_COMM_WORLD: rank 0 looks the name up and broadcasts it. */
pdcid_t PDCcont_open_col(const char *cont_name, pdcid_t pdc_id);
perr_t  PDCcont_close(pdcid_t cont_id);
/* Owned by the library, valid until PDCclose. */
struct pdc_cont_info *PDCcont_get_info(const char *cont_name);
/* Containers are always persistent: succeeds. */
perr_t  PDCcont_persist(pdcid_t cont_id);
perr_t  PDCprop_set_cont_lifetime(pdcid_t cont_create_prop, pdc_lifetime_t cont_lifetime);
pdcid_t PDCcont_get_id(const char *cont_name, pdcid_t pdc_id);

/* As in PDC's header: no prototype, so programs that pass the PDC id (as PDC's own
 * examples do) compile; the argument is not used. */
cont_handle          *PDCcont_iter_start();
pbool_t               PDCcont_iter_null(cont_handle *chandle);
cont_handle          *PDCcont_iter_next(cont_handle *chandle);
struct pdc_cont_info *PDCcont_iter_get_info(cont_handle *chandle);

/* Deletes the container and its tags; member objects stay. */
perr_t PDCcont_del(pdcid_t cont_id);

perr_t PDCcont_put_tag(pdcid_t cont_id, char *tag_name, void *tag_value, pdc_var_type_t value_type,
                       uint32_t value_size);
/* *tag_value is malloc'd; the caller frees it. */
perr_t PDCcont_get_tag(pdcid_t cont_id, char *tag_name, void **tag_value, pdc_var_type_t *value_type,
                       uint32_t *value_size);
perr_t PDCcont_del_tag(pdcid_t cont_id, char *tag_name);

/* Object ids may be handles or global ids (meta_id). get_objids returns global ids in a
 * malloc'd array the caller frees. */
perr_t PDCcont_put_objids(pdcid_t cont_id, int nobj, pdcid_t *obj_ids);
perr_t PDCcont_get_objids(pdcid_t cont_id, int *nobj, pdcid_t **obj_ids);
perr_t PDCcont_del_objids(pdcid_t cont_id, int nobj, pdcid_t *obj_ids);

#ifdef __cplusplus
}
#endif

#endif /* PDC_CONT_H */
