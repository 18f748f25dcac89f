//! Making a tracked file's writes visible (flush, at close) and durable (commit, at `fsync`,
//! `fdatasync` and `RWF_SYNC` writes); both wait for the consistency point inside
//! `MPI_File_sync`/`MPI_File_close`.

use crate::fdtab::{self, Tracked};
use crate::guard::{self, Passthrough};
use crate::stats::{self, Op};
use crate::{ffi, pdcx_errno};
use libc::c_int;

/// Makes this process's queued writes of `t`'s file visible (the last act on an fd).
/// Inside `MPI_File_sync`/`MPI_File_close` it does nothing: the consistency point that
/// follows the library's call commits them, the sealing rank's large writes in the same
/// round trip as its seal (a `Commit` with a `seal`).
pub(super) fn flush(t: &Tracked) -> Result<(), c_int> {
    if crate::guard::in_sync_or_close() {
        return Ok(());
    }
    let _g = Passthrough::enter();
    t.file
        .bs
        .flush()
        .map_err(|e| pdcx_errno("flush", &t.file.name, &e))
}

pub(super) fn commit(t: &Tracked) -> Result<(), c_int> {
    if crate::guard::in_sync_or_close() {
        // The consistency point right after commits and makes it durable.
        return Ok(());
    }
    let _g = Passthrough::enter();
    stats::add(Op::Sync, 0);
    t.file
        .bs
        .commit()
        .map_err(|e| pdcx_errno("fsync", &t.file.name, &e))
}

/// # Safety
/// C `fsync(fd)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    let t = tracked_or_real!(fd, call!(fsync(fd)));
    ffi("fsync", -1, || commit(&t).map(|()| 0))
}

/// # Safety
/// C `fdatasync(fd)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    let t = tracked_or_real!(fd, call!(fdatasync(fd)));
    ffi("fdatasync", -1, || commit(&t).map(|()| 0))
}
