//! Size and position of a tracked fd: `lseek` (`SEEK_END` is the stream's global size),
//! `ftruncate`, and `fstat` (the placeholder's `stat` with the stream's size).

use super::args::offset;
use crate::fdtab::{self, Tracked};
use crate::guard::{self, Passthrough};
use crate::stats::{self, Op};
use crate::{ffi, pdcx_errno};
use libc::{c_int, off64_t, off_t};

fn size(t: &Tracked) -> Result<u64, c_int> {
    let _g = Passthrough::enter();
    t.file
        .bs
        .size()
        .map_err(|e| pdcx_errno("size", &t.file.name, &e))
}

/// `lseek` on the fd's own offset; `SEEK_END` is the stream's global size (what HDF5 and
/// `MPI_File_get_size` ask for).
fn seek(t: &Tracked, off: i64, whence: c_int) -> Result<i64, c_int> {
    stats::add(Op::Seek, 0);
    let mut pos = t.pos();
    let base: i64 = match whence {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => i64::try_from(*pos).map_err(|_| libc::EOVERFLOW)?,
        libc::SEEK_END => i64::try_from(size(t)?).map_err(|_| libc::EOVERFLOW)?,
        libc::SEEK_DATA | libc::SEEK_HOLE => {
            // No holes are reported: data everywhere below the size, one hole at the end.
            let end = size(t)?;
            let o = offset(off)?;
            if o >= end {
                return Err(libc::ENXIO);
            }
            let to = if whence == libc::SEEK_DATA { o } else { end };
            *pos = to;
            return i64::try_from(to).map_err(|_| libc::EOVERFLOW);
        }
        _ => return Err(libc::EINVAL),
    };
    let new = base.checked_add(off).ok_or(libc::EOVERFLOW)?;
    *pos = offset(new)?;
    Ok(new)
}

/// # Safety
/// C `lseek(fd, off, whence)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t {
    let t = tracked_or_real!(fd, call!(lseek(fd, off, whence)));
    ffi("lseek", -1, || seek(&t, off, whence))
}

/// # Safety
/// C `lseek64(fd, off, whence)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
    let t = tracked_or_real!(fd, call!(lseek64(fd, off, whence)));
    ffi("lseek64", -1, || seek(&t, off, whence))
}

/// `MPI_File_set_size` truncates on rank 0 (ROMIO) or on every rank at once (OMPIO); the
/// owner zeroes what a shrink cuts, so a later growth reads zeros as after a POSIX truncate.
/// With write-through on, the file at its path is truncated too (first: its failure is the
/// call's).
fn truncate(t: &Tracked, fd: c_int, len: i64) -> Result<c_int, c_int> {
    let len = offset(len)?;
    let _g = Passthrough::enter();
    stats::add(Op::Truncate, 0);
    if t.file.write_through {
        let real_len = libc::off_t::try_from(len).map_err(|_| libc::EFBIG)?;
        if call!(ftruncate(fd, real_len)) != 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO));
        }
    }
    let mut r = t.file.bs.set_size(len);
    // Workaround: two shrinks of one stream at once race at the owner (one's zeroing finds the
    // stream already cut by the other and is refused as out of bounds). They set the same
    // size, so the other's has done the work: setting it again is then a no-op that succeeds.
    for _ in 0..3 {
        match &r {
            Err(e) if e.kind == pdcx_core::ErrorKind::OutOfBounds => r = t.file.bs.set_size(len),
            _ => break,
        }
    }
    r.map_err(|e| pdcx_errno("ftruncate", &t.file.name, &e))?;
    Ok(0)
}

/// # Safety
/// C `ftruncate(fd, len)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: off_t) -> c_int {
    let t = tracked_or_real!(fd, call!(ftruncate(fd, len)));
    ffi("ftruncate", -1, || truncate(&t, fd, len))
}

/// # Safety
/// C `ftruncate64(fd, len)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off64_t) -> c_int {
    let t = tracked_or_real!(fd, call!(ftruncate64(fd, len)));
    ffi("ftruncate64", -1, || truncate(&t, fd, len))
}

/// The placeholder's real `stat` with the stream's size: the file looks as it would have.
fn stat_fix(
    t: &Tracked,
    rc: c_int,
    st_size: &mut i64,
    st_blocks: &mut i64,
) -> Result<c_int, c_int> {
    if rc != 0 {
        return Ok(rc);
    }
    stats::add(Op::Stat, 0);
    let n = size(t)?;
    *st_size = i64::try_from(n).map_err(|_| libc::EOVERFLOW)?;
    *st_blocks = n.div_ceil(512) as i64;
    Ok(0)
}

/// # Safety
/// C `fstat(fd, buf)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    let t = tracked_or_real!(fd, call!(fstat(fd, buf)));
    ffi("fstat", -1, || {
        let rc = call!(fstat(fd, buf));
        // SAFETY: the real fstat filled the caller's struct (rc == 0).
        let st = unsafe { &mut *buf };
        stat_fix(&t, rc, &mut st.st_size, &mut st.st_blocks)
    })
}

/// # Safety
/// C `fstat64(fd, buf)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fstat64(fd: c_int, buf: *mut libc::stat64) -> c_int {
    let t = tracked_or_real!(fd, call!(fstat64(fd, buf)));
    ffi("fstat64", -1, || {
        let rc = call!(fstat64(fd, buf));
        // SAFETY: as in fstat.
        let st = unsafe { &mut *buf };
        stat_fix(&t, rc, &mut st.st_size, &mut st.st_blocks)
    })
}

/// Programs built against glibc < 2.33 call `fstat` as `__fxstat`.
///
/// # Safety
/// C `__fxstat(ver, fd, buf)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __fxstat(ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int {
    let t = tracked_or_real!(fd, call!(__fxstat(ver, fd, buf)));
    ffi("__fxstat", -1, || {
        let rc = call!(__fxstat(ver, fd, buf));
        // SAFETY: as in fstat.
        let st = unsafe { &mut *buf };
        stat_fix(&t, rc, &mut st.st_size, &mut st.st_blocks)
    })
}

/// # Safety
/// C `__fxstat64(ver, fd, buf)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __fxstat64(ver: c_int, fd: c_int, buf: *mut libc::stat64) -> c_int {
    let t = tracked_or_real!(fd, call!(__fxstat64(ver, fd, buf)));
    ffi("__fxstat64", -1, || {
        let rc = call!(__fxstat64(ver, fd, buf));
        // SAFETY: as in fstat.
        let st = unsafe { &mut *buf };
        stat_fix(&t, rc, &mut st.st_size, &mut st.st_blocks)
    })
}
