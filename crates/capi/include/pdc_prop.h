/* pdcx: PDC-compatible creation properties. */
#ifndef PDC_PROP_H
#define PDC_PROP_H

#include "pdc_public.h"
#include "pdc_obj.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Public view of an object property (PDCobj_prop_get_info); owned by the library. */
struct pdc_obj_prop {
    pdcid_t                obj_prop_id;
    size_t                 ndim;
    uint64_t              *dims;
    pdc_var_type_t         type;
    pdc_region_partition_t region_partition;
    pdc_consistency_t      consistency;
};

typedef enum {
    PDC_CONT_CREATE = 0,
    PDC_OBJ_CREATE
} pdc_prop_type_t;

struct _pdc_cont_prop;

pdcid_t PDCprop_create(pdc_prop_type_t type, pdcid_t pdc_id);
perr_t  PDCprop_close(pdcid_t id);
/* A copy of an object property (all settings). */
pdcid_t PDCprop_obj_dup(pdcid_t prop_id);
/* Not supported by pdcx: returns NULL. */
struct _pdc_cont_prop *PDCcont_prop_get_info(pdcid_t prop_id);
struct pdc_obj_prop   *PDCobj_prop_get_info(pdcid_t prop_id);

#ifdef __cplusplus
}
#endif

#endif /* PDC_PROP_H */
