/* pdcx: PDC-compatible query declarations. Value queries are evaluated by the servers that
 * own the objects (conditions on several objects of one shape too); PDCquery_get_histogram
 * succeeds for a known object and computes nothing, as in PDC; PDCobj_prop_query and the
 * PDC_QUERY_NOT combination are not supported (they fail with a message). */
#ifndef PDC_QUERY_H
#define PDC_QUERY_H

#include "pdc_public.h"
#include "pdc_obj.h"

#ifdef __cplusplus
extern "C" {
#endif

enum pdc_prop_name_t { PDC_OBJ_NAME, PDC_CONT_NAME, PDC_APP_NAME, PDC_USER_ID };

typedef enum { PDC_OP_NONE = 0, PDC_GT = 1, PDC_LT = 2, PDC_GTE = 3, PDC_LTE = 4, PDC_EQ = 5 } pdc_query_op_t;

typedef enum {
    PDC_QUERY_NONE = 0,
    PDC_QUERY_AND  = 1,
    PDC_QUERY_OR   = 2,
    PDC_QUERY_NOT
} pdc_query_combine_op_t;

typedef enum {
    PDC_QUERY_GET_NONE  = 0,
    PDC_QUERY_GET_NHITS = 1,
    PDC_QUERY_GET_SEL   = 2,
    PDC_QUERY_GET_DATA  = 3
} pdc_query_get_op_t;

typedef struct pdcquery_selection_t {
    pdcid_t   query_id;
    size_t    ndim;
    uint64_t  nhits;
    uint64_t *coords;
    uint64_t  coords_alloc;
} pdc_selection_t;

typedef struct pdc_query_constraint_t {
    pdcid_t          obj_id;
    pdc_query_op_t   op;
    pdc_var_type_t   type;
    double           value;
    pdc_histogram_t *hist;
    int              is_range;
    pdc_query_op_t   op2;
    double           value2;
    void            *storage_region_list_head;
    pdcid_t          origin_server;
    int              n_sent;
    int              n_recv;
} pdc_query_constraint_t;

struct pdc_region_info;

typedef struct pdc_query_t {
    pdc_query_constraint_t *constraint;
    struct pdc_query_t     *left;
    struct pdc_query_t     *right;
    pdc_query_combine_op_t  combine_op;
    struct pdc_region_info *region;
    void                   *region_constraint;
    pdc_selection_t        *sel;
} pdc_query_t;

pdc_query_t *PDCquery_create(pdcid_t obj_id, pdc_query_op_t op, pdc_var_type_t type, void *value);
pdc_query_t *PDCquery_and(pdc_query_t *query1, pdc_query_t *query2);
pdc_query_t *PDCquery_or(pdc_query_t *query1, pdc_query_t *query2);
perr_t PDCobj_prop_query(pdcid_t cont_id, enum pdc_prop_name_t prop_name, void *prop_value, pdcid_t **out_ids,
                         size_t *n_out);
perr_t PDCquery_sel_region(pdc_query_t *query, struct pdc_region_info *obj_region);
perr_t PDCquery_get_selection(pdc_query_t *query, pdc_selection_t *sel);
perr_t PDCquery_get_nhits(pdc_query_t *query, uint64_t *n);
perr_t PDCquery_get_data(pdcid_t obj_id, pdc_selection_t *sel, void *obj_data);
perr_t PDCquery_get_histogram(pdcid_t obj_id);
perr_t PDCquery_get_sel_data(pdc_query_t *query, pdc_selection_t *sel, void *data);
void   PDCselection_free(pdc_selection_t *sel);
void   PDCquery_free(pdc_query_t *query);
void   PDCquery_free_all(pdc_query_t *query);
void   PDCquery_print(pdc_query_t *query);
void   PDCselection_print(pdc_selection_t *sel);
void   PDCselection_print_all(pdc_selection_t *sel);

#ifdef __cplusplus
}
#endif

#endif /* PDC_QUERY_H */
