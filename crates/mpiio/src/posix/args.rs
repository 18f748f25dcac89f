//! C arguments as Rust values: buffers and iovecs as slices, offsets, `RWF_*` flags.

use libc::{c_int, c_void, iovec};

/// A C buffer as a slice (a NULL pointer is only valid with length 0).
///
/// # Safety
/// `p` must point to `n` readable bytes.
pub(super) unsafe fn bytes<'a>(p: *const c_void, n: usize) -> Result<&'a [u8], c_int> {
    match (p.is_null(), n) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(libc::EFAULT),
        // SAFETY: the caller's buffer of n bytes.
        (false, n) => Ok(unsafe { std::slice::from_raw_parts(p.cast(), n) }),
    }
}

/// # Safety
/// `p` must point to `n` writable bytes.
pub(super) unsafe fn bytes_mut<'a>(p: *mut c_void, n: usize) -> Result<&'a mut [u8], c_int> {
    match (p.is_null(), n) {
        (_, 0) => Ok(&mut []),
        (true, _) => Err(libc::EFAULT),
        // SAFETY: the caller's buffer of n bytes.
        (false, n) => Ok(unsafe { std::slice::from_raw_parts_mut(p.cast(), n) }),
    }
}

/// # Safety
/// `iov` must point to `cnt` iovecs describing readable (or, for reads, writable) memory.
pub(super) unsafe fn iovecs<'a>(iov: *const iovec, cnt: c_int) -> Result<&'a [iovec], c_int> {
    let n = usize::try_from(cnt).map_err(|_| libc::EINVAL)?;
    if n > libc::UIO_MAXIOV as usize {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's array of cnt iovecs.
    Ok(unsafe { std::slice::from_raw_parts(iov, n) })
}

pub(super) fn offset(off: i64) -> Result<u64, c_int> {
    u64::try_from(off).map_err(|_| libc::EINVAL)
}

/// # Safety
/// Each iovec must describe readable memory that outlives `'a`.
pub(super) unsafe fn slices<'a>(iov: &[iovec]) -> Result<Vec<&'a [u8]>, c_int> {
    iov.iter()
        // SAFETY: each iovec describes the caller's readable buffer.
        .map(|v| unsafe { bytes(v.iov_base, v.iov_len) })
        .collect()
}

/// # Safety
/// Each iovec must describe writable memory that outlives `'a`, none overlapping.
pub(super) unsafe fn slices_mut<'a>(iov: &[iovec]) -> Result<Vec<&'a mut [u8]>, c_int> {
    iov.iter()
        // SAFETY: each iovec describes the caller's writable buffer.
        .map(|v| unsafe { bytes_mut(v.iov_base, v.iov_len) })
        .collect()
}

/// `pwritev2`/`preadv2` flags: hints are ignored, `RWF_DSYNC`/`RWF_SYNC` commit after the
/// write, anything else (`RWF_APPEND`, unknown bits) is refused.
pub(super) fn rwf(flags: c_int) -> Result<bool, c_int> {
    let hints = libc::RWF_HIPRI | libc::RWF_NOWAIT;
    let sync = libc::RWF_DSYNC | libc::RWF_SYNC;
    if flags & !(hints | sync) != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(flags & sync != 0)
}
