/* pdcx: the Proactive Data Containers (PDC) C API, implemented by libpdcx over a pdcx
 * deployment. Build: cc prog.c $(pkg-config --cflags --libs pdcx)
 * Run:   PDCX_ROOT=DIR ./prog   (servers: pdcx server start -n N --root DIR)
 * Errors print "pdcx: FUNCTION: reason" on stderr and return FAIL (-1), 0 or NULL. */
#ifndef PDC_H
#define PDC_H

#include "pdc_public.h"
#include "pdc_prop.h"
#include "pdc_cont.h"
#include "pdc_mpi.h"
#include "pdc_obj.h"
#include "pdc_region.h"
#include "pdc_query.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Joins the deployment named by $PDCX_ROOT; returns the PDC id, 0 on failure. */
pdcid_t PDCinit(const char *pdc_name);
/* Waits for every started transfer and frees every handle. */
perr_t PDCclose(pdcid_t pdcid);

/* PDC's timing report (PDC builds with PDC_TIMING print per-call timings; its other builds
 * return 0, as pdcx does: pdcx's own figures are its servers' metrics and `pdcx server
 * status`). Present so programs written for PDC, e.g. its vpicio/bdcats examples, link. */
int PDC_timing_report(const char *prefix);

#ifdef __cplusplus
}
#endif

#endif /* PDC_H */
