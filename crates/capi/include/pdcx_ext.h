/* pdcx-only extensions of the PDC C API (not in PDC; guard their use with
 * #ifdef PDCX_EXT_H). Build: cc prog.c $(pkg-config --cflags --libs pdcx) */
#ifndef PDCX_EXT_H
#define PDCX_EXT_H

#include "pdc.h"
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Creates n objects named names[0..n-1] in container cont_id, all with the object property
 * prop_id, in one request per owning server and batch of up to 4096 objects. obj_ids[i]
 * receives the handle of object i (close it with PDCobj_close), or 0 if that object failed
 * (a name already taken, an invalid name: each failure is printed on stderr); returns FAIL if
 * any failed, SUCCEED otherwise. As with PDCobj_create, every object this returns is visible
 * to all clients and usable at once, and is on stable storage at this process's next
 * consistency point (a transfer wait, PDCcont_close, PDCclose, PDCobj_flush_all_start). */
perr_t PDCXobj_create_many(pdcid_t cont_id, size_t n, const char *const *names, pdcid_t prop_id,
                           pdcid_t *obj_ids);

/* Across sites, as `pdcx pull` and `pdcx push` do, with the deployment PDCinit
 * connected to (its root holds the linked sites: `pdcx remote add`).
 * PDCXsite_pull: source is "SITE:OBJECT" (or "s3://BUCKET/KEY" of a bundle); region is NULL
 * (the whole object) or one item per dim, "START:END", ":" or "INDEX", comma-separated;
 * as_name is NULL (the same name) or the name the copy gets here. Moves only the region, in
 * checksummed chunks; an interrupted pull resumes; the object is visible once complete.
 * PDCXsite_push: to is a linked site (or "s3://BUCKET/PREFIX"); region as above. The other
 * site files the copy under this site's name, "SITE/NAME", unless it granted the name
 * (`pdcx remote grant SITE NAME` there).
 * Both return SUCCEED, or FAIL with the reason on stderr. */
perr_t PDCXsite_pull(const char *source, const char *region, const char *as_name);
perr_t PDCXsite_push(const char *name, const char *to, const char *region);

/* Versions: every write of an object is a version, the object as of that write (numbers
 * grow with each write). Compaction keeps only the latest unless the object's tags ask for
 * more: "pdcx.keep.last" (int N), "pdcx.keep.seconds" (int D), or a named version.
 * PDCXobj_read_version: the elements of region_id (0: the whole object) as of version, into
 * buf (dense, C order); FAIL (reason on stderr) for a version compaction dropped.
 * PDCXobj_latest_version: the newest version's number.
 * PDCXobj_name_version: names version (tag "pdcx.version.NAME") so compaction keeps it;
 * FAIL for a version already dropped. */
perr_t PDCXobj_read_version(pdcid_t obj_id, pdcid_t region_id, uint64_t version, void *buf);
perr_t PDCXobj_latest_version(pdcid_t obj_id, uint64_t *version);
perr_t PDCXobj_name_version(pdcid_t obj_id, const char *name, uint64_t version);

#ifdef __cplusplus
}
#endif

#endif /* PDCX_EXT_H */
