//! The `open` family (`open`, `openat`, their 64 and `_FORTIFY_SOURCE` forms): an open of a
//! logged file's path opens the (empty) placeholder and tracks the fd; any other goes to libc.

use crate::fdtab::{self, Tracked};
use crate::guard::{self, Passthrough};
use crate::stats::{self, Op};
use crate::{config, ffi};
use libc::{c_char, c_int, c_uint};
use std::ffi::CStr;
use std::sync::Arc;

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
    if super::plain::writes(flags) {
        super::plain::check(dirfd, path);
    }
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
