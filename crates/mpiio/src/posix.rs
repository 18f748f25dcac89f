//! The libc wrappers. Each one first asks whether the call can concern a logged file (for fd
//! calls: one atomic load in [`fdtab::maybe_tracked`]; for `open`: one atomic load in
//! [`fdtab::opening_active`], false while no logged file is open) and otherwise calls the real
//! function at once. On a tracked fd
//! the data goes to the file's byte stream, never to the (empty) placeholder file.
//!
//! ## Variadic entry points
//! `open`, `openat` (and their 64 forms) and `fcntl` are variadic in C; defining a C variadic
//! function needs nightly Rust. They are defined here with a fixed extra argument instead
//! (`mode` as `mode_t`, fcntl's `arg` as `usize`): on x86-64 and aarch64 Linux (SysV ABIs)
//! variadic integer/pointer arguments travel in the same registers as fixed ones, so the
//! callee sees the caller's value when one was passed, and an unspecified register value when
//! none was. Like glibc, `mode` is only used with `O_CREAT`/`O_TMPFILE` (otherwise 0 is
//! passed on), and fcntl's `arg` is handed on unchanged for the command to interpret.

use crate::fdtab::{self, Tracked};
use crate::guard::{self, Passthrough};
use crate::stats::{self, Op};
use crate::{config, ffi, pdcx_errno};
use libc::{c_char, c_int, c_uint, c_void, iovec, off64_t, off_t, size_t, ssize_t};
use std::ffi::CStr;
use std::sync::Arc;

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the fixed-arity definitions of open/fcntl assume the x86-64 or aarch64 SysV ABI");

// ---------------------------------------------------------------------------------------------
// open

/// `open(2)` reads its mode only with `O_CREAT` or `O_TMPFILE`; otherwise our `mode` parameter
/// holds whatever the register held.
fn mode_arg(flags: c_int, mode: c_uint) -> c_uint {
    if flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE {
        mode
    } else {
        0
    }
}

/// The open logged file `path` names.
fn opening_file(dirfd: c_int, path: *const c_char) -> Option<Arc<fdtab::FileState>> {
    if path.is_null() {
        return None;
    }
    // SAFETY: open's path argument is a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    if bytes.first() != Some(&b'/') && dirfd != libc::AT_FDCWD {
        // Relative to a directory fd: the MPI libraries never open their files this way.
        return None;
    }
    let cwd = {
        let _g = Passthrough::enter();
        std::env::current_dir().ok()?
    };
    fdtab::opening_match(&config::normalise(bytes, &cwd))
}

/// Every open variant: `real(flags)` performs the real call.
fn open_common(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    real: impl Fn(c_int) -> c_int,
) -> c_int {
    if !fdtab::opening_active() || guard::inside() {
        let fd = real(flags);
        fdtab::fresh_foreign(fd);
        return fd;
    }
    ffi("open", -1, || {
        let Some(file) = opening_file(dirfd, path) else {
            let fd = real(flags);
            fdtab::fresh_foreign(fd);
            return Ok(fd);
        };
        // O_DIRECT would impose alignment on a file that never receives data (tmpfs refuses it).
        let fd = real(flags & !libc::O_DIRECT);
        if fd >= 0 {
            fdtab::insert(fd, Tracked::new(file));
            stats::add(Op::Open, 0);
        }
        Ok(fd)
    })
}

/// # Safety
/// C `open(path, flags, ...)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let mode = mode_arg(flags, mode);
    open_common(libc::AT_FDCWD, path, flags, |f| call!(open(path, f, mode)))
}

/// # Safety
/// C `open64(path, flags, ...)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let mode = mode_arg(flags, mode);
    open_common(libc::AT_FDCWD, path, flags, |f| {
        call!(open64(path, f, mode))
    })
}

/// # Safety
/// C `openat(dirfd, path, flags, ...)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    let mode = mode_arg(flags, mode);
    open_common(dirfd, path, flags, |f| call!(openat(dirfd, path, f, mode)))
}

/// # Safety
/// C `openat64(dirfd, path, flags, ...)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    let mode = mode_arg(flags, mode);
    open_common(dirfd, path, flags, |f| {
        call!(openat64(dirfd, path, f, mode))
    })
}

/// `_FORTIFY_SOURCE` builds call these for opens without a mode.
///
/// # Safety
/// C `__open_2(path, flags)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    open_common(libc::AT_FDCWD, path, flags, |f| call!(__open_2(path, f)))
}

/// # Safety
/// C `__open64_2(path, flags)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    open_common(libc::AT_FDCWD, path, flags, |f| call!(__open64_2(path, f)))
}

/// # Safety
/// C `__openat_2(dirfd, path, flags)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    open_common(dirfd, path, flags, |f| call!(__openat_2(dirfd, path, f)))
}

/// # Safety
/// C `__openat64_2(dirfd, path, flags)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    open_common(dirfd, path, flags, |f| call!(__openat64_2(dirfd, path, f)))
}

// ---------------------------------------------------------------------------------------------
// close, dup

/// # Safety
/// C `close(fd)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if !fdtab::maybe_tracked(fd) || guard::inside() {
        return call!(close(fd));
    }
    ffi("close", -1, || {
        let flushed = match fdtab::remove(fd) {
            Some(t) => {
                stats::add(Op::Close, 0);
                flush(&t)
            }
            None => Ok(()),
        };
        let rc = call!(close(fd));
        // The fd is gone either way; a failed flush is what the program must hear about.
        flushed.map(|()| rc)
    })
}

/// Makes this process's queued writes of `t`'s file visible (the last act on an fd).
/// Inside `MPI_File_sync`/`MPI_File_close` it does nothing: the consistency point that
/// follows the library's call commits them, the sealing rank's large writes in the same
/// round trip as its seal (a `Commit` with a `seal`).
fn flush(t: &Tracked) -> Result<(), c_int> {
    if crate::guard::in_sync_or_close() {
        return Ok(());
    }
    let _g = Passthrough::enter();
    t.file
        .bs
        .flush()
        .map_err(|e| pdcx_errno("flush", &t.file.name, &e))
}

/// After a successful dup onto `new`: `new` shares `old`'s state if `old` is ours.
fn after_dup(old: c_int, new: c_int) {
    if new < 0 {
        return;
    }
    match fdtab::get(old) {
        Some(t) => {
            fdtab::insert(new, t);
            stats::add(Op::Dup, 0);
        }
        None => fdtab::fresh_foreign(new),
    }
}

/// `dup2`/`dup3` onto an fd of ours closes it implicitly: flush it first.
fn before_dup_onto(old: c_int, new: c_int) -> Result<(), c_int> {
    if old != new && fdtab::maybe_tracked(new) {
        if let Some(t) = fdtab::remove(new) {
            flush(&t)?;
        }
    }
    Ok(())
}

/// # Safety
/// C `dup(fd)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let new = call!(dup(fd));
    if fdtab::maybe_tracked(fd) || fdtab::maybe_tracked(new) {
        ffi("dup", new, || {
            after_dup(fd, new);
            Ok(new)
        })
    } else {
        new
    }
}

/// # Safety
/// C `dup2(old, new)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if !fdtab::maybe_tracked(old) && !fdtab::maybe_tracked(new) {
        return call!(dup2(old, new));
    }
    ffi("dup2", -1, || {
        before_dup_onto(old, new)?;
        let r = call!(dup2(old, new));
        after_dup(old, r);
        Ok(r)
    })
}

/// # Safety
/// C `dup3(old, new, flags)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if !fdtab::maybe_tracked(old) && !fdtab::maybe_tracked(new) {
        return call!(dup3(old, new, flags));
    }
    ffi("dup3", -1, || {
        before_dup_onto(old, new)?;
        let r = call!(dup3(old, new, flags));
        after_dup(old, r);
        Ok(r)
    })
}

fn fcntl_common(fd: c_int, cmd: c_int, arg: usize, real: impl Fn() -> c_int) -> c_int {
    const SETLK: [c_int; 4] = [
        libc::F_SETLK,
        libc::F_SETLKW,
        libc::F_OFD_SETLK,
        libc::F_OFD_SETLKW,
    ];
    let dup = cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC;
    // Locks and flags act on the placeholder (node-local serialisation, as on a local file
    // system); new fds and unlocks need our attention.
    if !(dup || SETLK.contains(&cmd)) || !fdtab::maybe_tracked(fd) || guard::inside() {
        return real();
    }
    ffi("fcntl", -1, || {
        if dup {
            let new = real();
            after_dup(fd, new);
            return Ok(new);
        }
        // ROMIO's read-modify-write (data sieving) locks a range, reads it, writes it back and
        // unlocks: this process's queued writes must be visible before the next locker reads.
        // SAFETY: the lock commands take a `struct flock *`.
        let unlock = arg != 0
            && unsafe { (*(arg as *const libc::flock)).l_type } == libc::F_UNLCK as libc::c_short;
        if unlock {
            if let Some(t) = fdtab::get(fd) {
                flush(&t)?;
            }
        }
        Ok(real())
    })
}

/// # Safety
/// C `fcntl(fd, cmd, ...)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    fcntl_common(fd, cmd, arg, || call!(fcntl(fd, cmd, arg)))
}

/// # Safety
/// C `fcntl64(fd, cmd, ...)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    fcntl_common(fd, cmd, arg, || call!(fcntl64(fd, cmd, arg)))
}

// ---------------------------------------------------------------------------------------------
// writes

/// A C buffer as a slice (a NULL pointer is only valid with length 0).
///
/// # Safety
/// `p` must point to `n` readable bytes.
unsafe fn bytes<'a>(p: *const c_void, n: usize) -> Result<&'a [u8], c_int> {
    match (p.is_null(), n) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(libc::EFAULT),
        // SAFETY: the caller's buffer of n bytes.
        (false, n) => Ok(unsafe { std::slice::from_raw_parts(p.cast(), n) }),
    }
}

/// # Safety
/// `p` must point to `n` writable bytes.
unsafe fn bytes_mut<'a>(p: *mut c_void, n: usize) -> Result<&'a mut [u8], c_int> {
    match (p.is_null(), n) {
        (_, 0) => Ok(&mut []),
        (true, _) => Err(libc::EFAULT),
        // SAFETY: the caller's buffer of n bytes.
        (false, n) => Ok(unsafe { std::slice::from_raw_parts_mut(p.cast(), n) }),
    }
}

/// # Safety
/// `iov` must point to `cnt` iovecs describing readable (or, for reads, writable) memory.
unsafe fn iovecs<'a>(iov: *const iovec, cnt: c_int) -> Result<&'a [iovec], c_int> {
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

fn offset(off: i64) -> Result<u64, c_int> {
    u64::try_from(off).map_err(|_| libc::EINVAL)
}

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
/// Each iovec must describe readable memory that outlives `'a`.
unsafe fn slices<'a>(iov: &[iovec]) -> Result<Vec<&'a [u8]>, c_int> {
    iov.iter()
        // SAFETY: each iovec describes the caller's readable buffer.
        .map(|v| unsafe { bytes(v.iov_base, v.iov_len) })
        .collect()
}

/// `pwritev2`/`preadv2` flags: hints are ignored, `RWF_DSYNC`/`RWF_SYNC` commit after the
/// write, anything else (`RWF_APPEND`, unknown bits) is refused.
fn rwf(flags: c_int) -> Result<bool, c_int> {
    let hints = libc::RWF_HIPRI | libc::RWF_NOWAIT;
    let sync = libc::RWF_DSYNC | libc::RWF_SYNC;
    if flags & !(hints | sync) != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(flags & sync != 0)
}

fn commit(t: &Tracked) -> Result<(), c_int> {
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

macro_rules! tracked_or_real {
    ($fd:expr, $real:expr) => {{
        if !fdtab::maybe_tracked($fd) || guard::inside() {
            return $real;
        }
        match fdtab::get($fd) {
            Some(t) => t,
            None => return $real,
        }
    }};
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

// ---------------------------------------------------------------------------------------------
// reads (MPI-IO's data sieving and read-modify-write read what was logged)

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
/// Each iovec must describe writable memory that outlives `'a`, none overlapping.
unsafe fn slices_mut<'a>(iov: &[iovec]) -> Result<Vec<&'a mut [u8]>, c_int> {
    iov.iter()
        // SAFETY: each iovec describes the caller's writable buffer.
        .map(|v| unsafe { bytes_mut(v.iov_base, v.iov_len) })
        .collect()
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

// ---------------------------------------------------------------------------------------------
// size, position, durability

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
fn truncate(t: &Tracked, len: i64) -> Result<c_int, c_int> {
    let len = offset(len)?;
    let _g = Passthrough::enter();
    stats::add(Op::Truncate, 0);
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
    ffi("ftruncate", -1, || truncate(&t, len))
}

/// # Safety
/// C `ftruncate64(fd, len)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off64_t) -> c_int {
    let t = tracked_or_real!(fd, call!(ftruncate64(fd, len)));
    ffi("ftruncate64", -1, || truncate(&t, len))
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
