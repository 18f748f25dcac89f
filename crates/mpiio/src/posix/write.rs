//! The write calls (`write`, `pwrite`, `writev`, `pwritev2`, ...) on a tracked fd: the bytes
//! go to the file's byte stream and, with write-through on (the default), also to the file at
//! its path, so that any process on the node reads them there after the file is closed.

use super::args::{bytes, iovecs, offset, rwf, slices};
use super::durability::commit;
use crate::fdtab::{self, Tracked};
use crate::guard::{self, Passthrough};
use crate::stats::{self, Op};
use crate::{ffi, pdcx_errno};
use libc::{c_int, c_void, iovec, off64_t, off_t, size_t, ssize_t};
use std::io::IoSlice;

/// Writes `bufs` at `off` into the stream (and through `fd` into the file at its path, with
/// write-through on); returns the byte count.
pub(crate) fn write_at(t: &Tracked, fd: c_int, bufs: &[&[u8]], off: u64) -> Result<usize, c_int> {
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
    if t.file.write_through {
        // First, so that a failure there (a full file system under the prefix) fails the
        // call with the file system's errno before the stream has the bytes.
        write_through(t, fd, bufs, off)?;
    }
    let r = match bufs {
        [one] => t.file.bs.pwrite(off, one),
        many => t.file.bs.pwritev(off, many),
    };
    r.map_err(|e| pdcx_errno("write", &t.file.name, &e))?;
    stats::add(Op::Write, total as u64);
    Ok(total)
}

/// The write-through: the real `pwritev` of every byte of `bufs` at `off` on the tracked fd
/// (the file at its path). Not synced: the stream is the durable copy, as the file system's
/// page cache holds a direct run's bytes until its own sync.
fn write_through(t: &Tracked, fd: c_int, bufs: &[&[u8]], off: u64) -> Result<(), c_int> {
    /// At most this many buffers per call (Linux's `IOV_MAX`).
    const IOV_MAX: usize = 1024;
    let mut storage: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
    let mut left: &mut [IoSlice<'_>] = &mut storage;
    let mut at = off;
    while !left.is_empty() {
        let cnt = left.len().min(IOV_MAX);
        let pos = libc::off_t::try_from(at).map_err(|_| libc::EFBIG)?;
        // IoSlice is ABI-compatible with `struct iovec` on Unix.
        let n = call!(pwritev(
            fd,
            left.as_ptr().cast::<iovec>(),
            cnt as c_int,
            pos
        ));
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            eprintln!(
                "pdcx mpiio: write of {} at its path failed: {e} (PDCX_MPIIO_WRITE_THROUGH=off \
                 leaves that file empty)",
                t.file.name
            );
            return Err(e.raw_os_error().unwrap_or(libc::EIO));
        }
        if n == 0 {
            return Err(libc::EIO);
        }
        at += n as u64;
        IoSlice::advance_slices(&mut left, n as usize);
    }
    Ok(())
}

/// Writes at `off`, or at the fd's offset (advancing it) when `off` is None.
fn write_common(
    t: &Tracked,
    fd: c_int,
    bufs: &[&[u8]],
    off: Option<i64>,
) -> Result<ssize_t, c_int> {
    let n = match off {
        Some(off) => write_at(t, fd, bufs, offset(off)?)?,
        None => {
            let mut pos = t.pos();
            let n = write_at(t, fd, bufs, *pos)?;
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
    ffi("write", -1, || {
        write_common(&t, fd, &[bytes(buf, n)?], None)
    })
}

/// # Safety
/// C `writev(fd, iov, cnt)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    let t = tracked_or_real!(fd, call!(writev(fd, iov, cnt)));
    ffi("writev", -1, || {
        write_common(&t, fd, &slices(iovecs(iov, cnt)?)?, None)
    })
}

/// # Safety
/// C `pwrite(fd, buf, n, off)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    let t = tracked_or_real!(fd, call!(pwrite(fd, buf, n, off)));
    ffi("pwrite", -1, || {
        write_common(&t, fd, &[bytes(buf, n)?], Some(off))
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
        write_common(&t, fd, &[bytes(buf, n)?], Some(off))
    })
}

/// # Safety
/// C `pwritev(fd, iov, cnt, off)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    let t = tracked_or_real!(fd, call!(pwritev(fd, iov, cnt, off)));
    ffi("pwritev", -1, || {
        write_common(&t, fd, &slices(iovecs(iov, cnt)?)?, Some(off))
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
        write_common(&t, fd, &slices(iovecs(iov, cnt)?)?, Some(off))
    })
}

/// `off == -1` writes at the fd's offset (as `writev`).
fn pwritev2_common(
    t: &Tracked,
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: i64,
    flags: c_int,
) -> Result<ssize_t, c_int> {
    let sync = rwf(flags)?;
    // SAFETY: the caller's iovec array.
    let bufs = unsafe { slices(iovecs(iov, cnt)?) }?;
    let n = write_common(t, fd, &bufs, (off != -1).then_some(off))?;
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
    ffi("pwritev2", -1, || {
        pwritev2_common(&t, fd, iov, cnt, off, flags)
    })
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
        pwritev2_common(&t, fd, iov, cnt, off, flags)
    })
}
