//! The read calls (`read`, `pread`, `readv`, `preadv2`, ...) on a tracked fd: MPI-IO's data
//! sieving and read-modify-write read what was logged, from the byte stream.

use super::args::{bytes_mut, iovecs, offset, rwf, slices_mut};
use crate::fdtab::{self, Tracked};
use crate::guard::{self, Passthrough};
use crate::stats::{self, Op};
use crate::{ffi, pdcx_errno};
use libc::{c_int, c_void, iovec, off64_t, off_t, size_t, ssize_t};

/// Reads into `bufs` from `off`, stopping at the stream's end; returns the byte count.
pub(crate) fn read_at(t: &Tracked, bufs: &mut [&mut [u8]], off: u64) -> Result<usize, c_int> {
    let _g = Passthrough::enter();
    let mut done = 0usize;
    for b in bufs.iter_mut() {
        if b.is_empty() {
            continue;
        }
        let n = t
            .file
            .bs
            .pread(off + done as u64, b)
            .map_err(|e| pdcx_errno("read", &t.file.name, &e))?;
        done += n;
        if n < b.len() {
            break;
        }
    }
    stats::add(Op::Read, done as u64);
    Ok(done)
}

fn read_common(t: &Tracked, bufs: &mut [&mut [u8]], off: Option<i64>) -> Result<ssize_t, c_int> {
    let n = match off {
        Some(off) => read_at(t, bufs, offset(off)?)?,
        None => {
            let mut pos = t.pos();
            let n = read_at(t, bufs, *pos)?;
            *pos += n as u64;
            n
        }
    };
    Ok(n as ssize_t)
}

/// # Safety
/// C `read(fd, buf, n)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    let t = tracked_or_real!(fd, call!(read(fd, buf, n)));
    ffi("read", -1, || {
        read_common(&t, &mut [bytes_mut(buf, n)?], None)
    })
}

/// # Safety
/// C `readv(fd, iov, cnt)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    let t = tracked_or_real!(fd, call!(readv(fd, iov, cnt)));
    ffi("readv", -1, || {
        read_common(&t, &mut slices_mut(iovecs(iov, cnt)?)?, None)
    })
}

/// # Safety
/// C `pread(fd, buf, n, off)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    let t = tracked_or_real!(fd, call!(pread(fd, buf, n, off)));
    ffi("pread", -1, || {
        read_common(&t, &mut [bytes_mut(buf, n)?], Some(off))
    })
}

/// # Safety
/// C `pread64(fd, buf, n, off)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t {
    let t = tracked_or_real!(fd, call!(pread64(fd, buf, n, off)));
    ffi("pread64", -1, || {
        read_common(&t, &mut [bytes_mut(buf, n)?], Some(off))
    })
}

/// # Safety
/// C `preadv(fd, iov, cnt, off)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    let t = tracked_or_real!(fd, call!(preadv(fd, iov, cnt, off)));
    ffi("preadv", -1, || {
        read_common(&t, &mut slices_mut(iovecs(iov, cnt)?)?, Some(off))
    })
}

/// # Safety
/// C `preadv64(fd, iov, cnt, off)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn preadv64(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
) -> ssize_t {
    let t = tracked_or_real!(fd, call!(preadv64(fd, iov, cnt, off)));
    ffi("preadv64", -1, || {
        read_common(&t, &mut slices_mut(iovecs(iov, cnt)?)?, Some(off))
    })
}

fn preadv2_common(
    t: &Tracked,
    iov: *const iovec,
    cnt: c_int,
    off: i64,
    flags: c_int,
) -> Result<ssize_t, c_int> {
    rwf(flags)?;
    // SAFETY: the caller's iovec array.
    let mut bufs = unsafe { slices_mut(iovecs(iov, cnt)?) }?;
    read_common(t, &mut bufs, (off != -1).then_some(off))
}

/// # Safety
/// C `preadv2(fd, iov, cnt, off, flags)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn preadv2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    let t = tracked_or_real!(fd, call!(preadv2(fd, iov, cnt, off, flags)));
    ffi("preadv2", -1, || preadv2_common(&t, iov, cnt, off, flags))
}

/// # Safety
/// C `preadv64v2(fd, iov, cnt, off, flags)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn preadv64v2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    let t = tracked_or_real!(fd, call!(preadv64v2(fd, iov, cnt, off, flags)));
    ffi("preadv64v2", -1, || {
        preadv2_common(&t, iov, cnt, off, flags)
    })
}
