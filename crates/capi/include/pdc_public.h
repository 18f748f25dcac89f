/* pdcx: Proactive Data Containers (PDC) compatible C API -- basic types.
 * Values match PDC's public headers so PDC programs build and run unchanged. */
#ifndef PDC_PUBLIC_H
#define PDC_PUBLIC_H

#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stddef.h>

/* Programs built with mpicc see the MPI prototypes (PDCobj_create_mpi with an MPI_Comm).
 * Define PDCX_NO_MPI to opt out, or ENABLE_MPI to opt in explicitly. */
#if !defined(ENABLE_MPI) && !defined(PDCX_NO_MPI) && defined(__has_include)
#if __has_include(<mpi.h>)
#define ENABLE_MPI 1
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef int                perr_t;   /* SUCCEED (0) or FAIL (-1) */
typedef uint64_t           pdcid_t;  /* 0 means failure */
typedef unsigned long long psize_t;
typedef bool               pbool_t;

typedef int    PDC_int_t;
typedef float  PDC_float_t;
typedef double PDC_double_t;

#define SUCCEED 0
#define FAIL    (-1)

/* A dimension that grows with the writes into it. */
#define PDC_SIZE_UNLIMITED UINT64_MAX

typedef enum pdc_c_var_type_t {
    PDC_UNKNOWN    = 0,
    PDC_SHORT      = 1,
    PDC_INT        = 2,
    PDC_UINT       = 3,
    PDC_LONG       = 4,
    PDC_INT8       = 5,
    PDC_UINT8      = 6,
    PDC_INT16      = 7,
    PDC_UINT16     = 8,
    PDC_INT32      = 9,
    PDC_UINT32     = 10,
    PDC_INT64      = 11,
    PDC_UINT64     = 12,
    PDC_FLOAT      = 13,
    PDC_DOUBLE     = 14,
    PDC_CHAR       = 15,
    PDC_STRING     = 16,
    PDC_BOOLEAN    = 17,
    PDC_VOID_PTR   = 18,
    PDC_SIZE_T     = 19,
    PDC_BULKI      = 20,
    PDC_BULKI_ENT  = 21,
    PDC_TYPE_COUNT = 22
} pdc_c_var_type_t;

typedef pdc_c_var_type_t pdc_var_type_t;

typedef struct pdc_kvtag_t {
    char          *name;
    uint32_t       size;
    pdc_var_type_t type;
    void          *value;
} pdc_kvtag_t;

typedef enum { PDC_PERSIST, PDC_TRANSIENT } pdc_lifetime_t;

typedef enum { PDC_SERVER_DEFAULT = 0, PDC_SERVER_PER_CLIENT = 1 } pdc_server_selection_t;

typedef struct pdc_histogram_t {
    pdc_var_type_t dtype;
    int            nbin;
    double         incr;
    double        *range;
    uint64_t      *bin;
} pdc_histogram_t;

#ifdef __cplusplus
}
#endif

#endif /* PDC_PUBLIC_H */
