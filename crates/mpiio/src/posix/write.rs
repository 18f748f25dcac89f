//! The write calls (`write`, `pwrite`, `writev`, `pwritev2`, ...) on a tracked fd: the bytes
//! go to the file's byte stream, never to the placeholder.

use super::args::{bytes, iovecs, offset, rwf, slices};
use super::durability::commit;
use crate::fdtab::{self, Tracked};
use crate::guard::{self, Passthrough};
use crate::stats::{self, Op};
use crate::{ffi, pdcx_errno};
use libc::{c_int, c_void, iovec, off64_t, off_t, size_t, ssize_t};

/// Writes `bufs` at `off` into the stream; returns the byte count.
pub(crate) fn write_at(t: &Tracked, bufs: &[&[u8]], off: u64) -> Result<usize, c_int> {
    let total = bufs
        .iter()
        .try_fold(0usize, |a, b| a.checked_add(b.len()))
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or(libc::EINVAL)?;
    off.checked_add(total as u64).ok_or(libc::EFBIG)?;
    if total == 0 {
        return Ok(0);
    }
    let _g = Passthrough::enter();
    let r = match bufs {
        [one] => t.file.bs.pwrite(off, one),
        many => t.file.bs.pwritev(off, many),
    };
    r.map_err(|e| pdcx_errno("write", &t.file.name, &e))?;
    stats::add(Op::Write, total as u64);
    Ok(total)
}

/// Writes at `off`, or at the fd's offset (advancing it) when `off` is None.
fn write_common(t: &Tracked, bufs: &[&[u8]], off: Option<i64>) -> Result<ssize_t, c_int> {
    let n = match off {
        Some(off) => write_at(t, bufs, offset(off)?)?,
        None => {
            let mut pos = t.pos();
            let n = write_at(t, bufs, *pos)?;
            *pos += n as u64;
            n
        }
    };
    Ok(n as ssize_t)
}

/// # Safety
/// C `write(fd, buf, n)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    let t = tracked_or_real!(fd, call!(write(fd, buf, n)));
    ffi("write", -1, || write_common(&t, &[bytes(buf, n)?], None))
}

/// # Safety
/// C `writev(fd, iov, cnt)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    let t = tracked_or_real!(fd, call!(writev(fd, iov, cnt)));
    ffi("writev", -1, || {
        write_common(&t, &slices(iovecs(iov, cnt)?)?, None)
    })
}

/// # Safety
/// C `pwrite(fd, buf, n, off)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    let t = tracked_or_real!(fd, call!(pwrite(fd, buf, n, off)));
    ffi("pwrite", -1, || {
        write_common(&t, &[bytes(buf, n)?], Some(off))
    })
}

/// # Safety
/// C `pwrite64(fd, buf, n, off)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: off64_t,
) -> ssize_t {
    let t = tracked_or_real!(fd, call!(pwrite64(fd, buf, n, off)));
    ffi("pwrite64", -1, || {
        write_common(&t, &[bytes(buf, n)?], Some(off))
    })
}

/// # Safety
/// C `pwritev(fd, iov, cnt, off)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    let t = tracked_or_real!(fd, call!(pwritev(fd, iov, cnt, off)));
    ffi("pwritev", -1, || {
        write_common(&t, &slices(iovecs(iov, cnt)?)?, Some(off))
    })
}

/// # Safety
/// C `pwritev64(fd, iov, cnt, off)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
) -> ssize_t {
    let t = tracked_or_real!(fd, call!(pwritev64(fd, iov, cnt, off)));
    ffi("pwritev64", -1, || {
        write_common(&t, &slices(iovecs(iov, cnt)?)?, Some(off))
    })
}

/// `off == -1` writes at the fd's offset (as `writev`).
fn pwritev2_common(
    t: &Tracked,
    iov: *const iovec,
    cnt: c_int,
    off: i64,
    flags: c_int,
) -> Result<ssize_t, c_int> {
    let sync = rwf(flags)?;
    // SAFETY: the caller's iovec array.
    let bufs = unsafe { slices(iovecs(iov, cnt)?) }?;
    let n = write_common(t, &bufs, (off != -1).then_some(off))?;
    if sync {
        commit(t)?;
    }
    Ok(n)
}

/// # Safety
/// C `pwritev2(fd, iov, cnt, off, flags)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pwritev2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    let t = tracked_or_real!(fd, call!(pwritev2(fd, iov, cnt, off, flags)));
    ffi("pwritev2", -1, || pwritev2_common(&t, iov, cnt, off, flags))
}

/// # Safety
/// C `pwritev64v2(fd, iov, cnt, off, flags)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    let t = tracked_or_real!(fd, call!(pwritev64v2(fd, iov, cnt, off, flags)));
    ffi("pwritev64v2", -1, || {
        pwritev2_common(&t, iov, cnt, off, flags)
    })
}
