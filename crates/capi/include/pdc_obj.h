/* pdcx: PDC-compatible object API. */
#ifndef PDC_OBJ_H
#define PDC_OBJ_H

#include "pdc_public.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { PDC_NA = 0, PDC_READ = 1, PDC_WRITE = 2 } pdc_access_t;

typedef enum {
    PDC_OBJ_STATIC     = 0,
    PDC_REGION_STATIC  = 1,
    PDC_REGION_DYNAMIC = 2,
    PDC_REGION_LOCAL   = 3
} pdc_region_partition_t;

typedef enum { PDC_BLOCK = 0, PDC_NOBLOCK = 1 } pdc_lock_mode_t;

typedef enum {
    PDC_CONSISTENCY_DEFAULT  = 0,
    PDC_CONSISTENCY_POSIX    = 1,
    PDC_CONSISTENCY_COMMIT   = 2,
    PDC_CONSISTENCY_SESSION  = 3,
    PDC_CONSISTENCY_EVENTUAL = 4
} pdc_consistency_t;

/* Iterator position (opaque). */
typedef struct _pdc_id_info obj_handle;

struct pdc_obj_prop;

/* Returned by PDCobj_get_info / PDCobj_iter_get_info; owned by the library. */
struct pdc_obj_info {
    char                *name;
    pdcid_t              meta_id;            /* global pdcx object id */
    pdcid_t              local_id;           /* this process's handle (0 from iterators) */
    int                  server_id;          /* server holding the data */
    uint32_t             metadata_server_id; /* server owning the metadata */
    struct pdc_obj_prop *obj_pt;
};

/* Create object obj_name in container cont_id with property obj_create_prop (PDC_OBJ_CREATE,
 * dims and type set). Returns the object id, 0 on failure. */
pdcid_t PDCobj_create(pdcid_t cont_id, const char *obj_name, pdcid_t obj_create_prop);

pdcid_t PDCobj_open(const char *obj_name, pdcid_t pdc_id);
/* Collective over MPI_COMM_WORLD: rank 0 looks the name up (other ranks may pass NULL) and
 * broadcasts the metadata, so one request reaches the servers. */
pdcid_t PDCobj_open_col(const char *obj_name, pdcid_t pdc_id);

/* Data is durable when a transfer is waited. For objects with relaxed consistency
 * (PDC_CONSISTENCY_SESSION / _EVENTUAL) these are the consistency point: this process's
 * waited writes become visible to every reader before they return. */
perr_t PDCobj_flush_start(pdcid_t obj_id);
perr_t PDCobj_flush_all_start(void);

/* Waits for the object's started transfers (and, under relaxed consistency, makes this
 * process's writes of it visible), then frees the handle. */
perr_t PDCobj_close(pdcid_t obj_id);

/* Owned by the library, valid until PDCobj_close. */
struct pdc_obj_info *PDCobj_get_info(pdcid_t obj_id);

/* Objects whose tag tag_name equals the value: global ids in a malloc'd array (free it). */
perr_t PDCobj_get_id(const char *tag_name, void *tag_value, int value_size, int *n_res, uint64_t **pdc_ids);

perr_t PDCprop_set_obj_user_id(pdcid_t obj_prop, uint32_t user_id);
perr_t PDCprop_set_obj_data_loc(pdcid_t obj_prop, char *app_name);
perr_t PDCprop_set_obj_app_name(pdcid_t obj_prop, char *app_name);
perr_t PDCprop_set_obj_time_step(pdcid_t obj_prop, uint32_t time_step);
perr_t PDCprop_set_obj_tags(pdcid_t obj_prop, char *tags);
/* A dimension may be PDC_SIZE_UNLIMITED: it starts at 0 and grows with the transfers. */
perr_t PDCprop_set_obj_dims(pdcid_t obj_prop, PDC_int_t ndim, uint64_t *dims);
perr_t PDCprop_set_obj_type(pdcid_t obj_prop, pdc_var_type_t type);
perr_t PDCprop_set_obj_transfer_region_type(pdcid_t obj_prop, pdc_region_partition_t region_partition);
/* PDC_CONSISTENCY_SESSION and _EVENTUAL select relaxed consistency: a waited write is durable,
 * and becomes visible once its data server registers it with the object's owner (batched:
 * after the expected number of writes, at PDCobj_flush_start / PDCobj_close, or on the
 * server's timer). The others are strong: visible when the wait returns. */
perr_t PDCprop_set_obj_consistency_semantics(pdcid_t obj_prop, pdc_consistency_t consistency);
/* pdcx extension (not in PDC): under relaxed consistency, a data server registers an object's
 * writes as soon as it holds this many of them (0, the default: no count). */
perr_t PDCXprop_set_obj_expected_writes(pdcid_t obj_prop, uint64_t expected_writes);
/* pdcx extension (not in PDC): what a wait on the object's transfers guarantees.
 * MEMORY: visible; lost if the data server dies before its next sync.
 * LOCAL (default): also fsynced in the data server's log; survives a server crash.
 * REMOTE: also on a tier that survives the loss of the node (shared directory or S3 in
 * pdcx.toml) with its home recorded durably; the wait fails if the deployment has none.
 * An object's pdcx.durability tag ("memory", "local", "remote") raises it for every writer. */
typedef enum {
    PDCX_DURABILITY_MEMORY = 0,
    PDCX_DURABILITY_LOCAL  = 1,
    PDCX_DURABILITY_REMOTE = 2,
} pdcx_durability_t;
perr_t PDCXprop_set_obj_durability(pdcid_t obj_prop, pdcx_durability_t durability);
perr_t PDCprop_set_obj_buf(pdcid_t obj_prop, void *buf);

/* Grows the object (pdcx refuses to shrink one). */
perr_t PDCobj_set_dims(pdcid_t obj_id, int ndim, uint64_t *dims);
/* *dims is malloc'd; the caller frees it. */
perr_t PDCobj_get_dims(pdcid_t obj_id, int *ndim, uint64_t **dims);

void **PDCobj_buf_retrieve(pdcid_t obj_id);

obj_handle          *PDCobj_iter_start(pdcid_t cont_id);
pbool_t              PDCobj_iter_null(obj_handle *ohandle);
obj_handle          *PDCobj_iter_next(obj_handle *ohandle, pdcid_t cont_id);
struct pdc_obj_info *PDCobj_iter_get_info(obj_handle *ohandle);

/* Creates a byte object holding data[0..size) in cont_id; returns its id. */
pdcid_t PDCobj_put_data(const char *obj_name, void *data, uint64_t size, pdcid_t cont_id);
/* Reads up to size bytes of the object from its start. */
perr_t PDCobj_get_data(pdcid_t obj_id, void *data, uint64_t size);

/* Deletes the object everywhere; the handle stays valid for PDCobj_close. */
perr_t PDCobj_del(pdcid_t obj_id);

/* Tags: values are byte strings of value_size bytes; PDC_STRING values are stored as text.
 * PDCobj_get_tag returns a malloc'd copy (free it). */
perr_t PDCobj_put_tag(pdcid_t obj_id, char *tag_name, void *tag_value, pdc_var_type_t value_type,
                      psize_t value_size);
perr_t PDCobj_get_tag(pdcid_t obj_id, char *tag_name, void **tag_value, pdc_var_type_t *value_type,
                      psize_t *value_size);
perr_t PDCobj_del_tag(pdcid_t obj_id, char *tag_name);

pdc_var_type_t PDCobj_get_dtype(pdcid_t obj_id);

#ifdef __cplusplus
}
#endif

#endif /* PDC_OBJ_H */
