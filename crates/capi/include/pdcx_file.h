/* pdcx files: byte-stream objects used like stdio/POSIX files, with the deployment
 * PDCinit connected to. Not in PDC; guard their use with #ifdef PDCX_FILE_H.
 * Build: cc prog.c $(pkg-config --cflags --libs pdcx)
 *
 * Names are object names ("proj/img_1.fits"; a leading "pdcx://" is accepted and dropped;
 * ".." is refused). Semantics are close-to-open: writes stay in this process until
 * PDCXfile_flush or PDCXfile_close (one commit for all of them), then every reader sees
 * them; PDCXfile_sync also makes them durable on the servers (as fsync). Reads are
 * prefetched adaptively. PDCX_FILE_AGGREGATE=0 and PDCX_FILE_PREFETCH=off|SIZE change that.
 * Every call returns -1 (or NULL) on failure with the reason on stderr. */
#ifndef PDCX_FILE_H
#define PDCX_FILE_H

#include "pdc.h"
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct PDCXfile PDCXfile;

typedef struct {
    uint64_t size;
    double ctime; /* seconds since the epoch */
    double mtime;
} PDCXfile_stat_t;

/* mode as fopen's: "r", "w", "a", "x", each optionally with "+" (and "b", ignored). */
PDCXfile *PDCXfile_open(const char *name, const char *mode);
/* Reads up to n bytes at the position; returns the count, 0 at the end. */
ssize_t PDCXfile_read(PDCXfile *f, void *buf, size_t n);
ssize_t PDCXfile_write(PDCXfile *f, const void *buf, size_t n);
ssize_t PDCXfile_pread(PDCXfile *f, void *buf, size_t n, uint64_t offset);
ssize_t PDCXfile_pwrite(PDCXfile *f, const void *buf, size_t n, uint64_t offset);
/* whence: SEEK_SET, SEEK_CUR, SEEK_END; returns the new position. */
int64_t PDCXfile_seek(PDCXfile *f, int64_t offset, int whence);
int64_t PDCXfile_tell(PDCXfile *f);
/* The size this handle sees (its unflushed writes included). */
int64_t PDCXfile_size(PDCXfile *f);
int PDCXfile_truncate(PDCXfile *f, uint64_t size);
int PDCXfile_flush(PDCXfile *f);
/* Flushes n files at one consistency point (their writes started together and waited for
 * together: one commit per server for all, as PDC's transfer_all/wait_all). */
int PDCXfile_flush_all(PDCXfile *const *files, size_t n);
int PDCXfile_sync(PDCXfile *f);
/* Flushes and frees f (also when the flush fails: then -1). */
int PDCXfile_close(PDCXfile *f);

int PDCXfile_stat(const char *name, PDCXfile_stat_t *st);
int PDCXfile_remove(const char *name);
/* Renames a file, replacing a file at `to` (as rename(2); not atomic when it replaces). */
int PDCXfile_rename(const char *from, const char *to);
/* The names of the files starting with prefix, sorted: *names is a malloc'd array of
 * *count malloc'd strings; free it with PDCXfile_list_free. */
int PDCXfile_list(const char *prefix, char ***names, size_t *count);
void PDCXfile_list_free(char **names, size_t count);

#ifdef __cplusplus
}
#endif

#endif /* PDCX_FILE_H */
