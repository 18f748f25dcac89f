//! Removing, renaming and making `pdcx://` names: `unlink`, `remove`, `rename` (and their `at`
//! forms), `mkdir`, `rmdir`.

use super::{ours, with_client};
use crate::names;
use crate::{ctx, errno_of, guarded, set_errno};
use libc::{c_char, c_int, mode_t};
use pdcx_client::file::Kind;

/// Removes file `rest`, or (`dir`) the empty directory's marker.
fn remove_name(rest: &str, dir: bool) -> c_int {
    let c = match ctx() {
        Ok(c) => c,
        Err(_) => {
            set_errno(libc::EIO);
            return -1;
        }
    };
    let name = names::lexical(rest);
    if !dir {
        // The common case (a tool removing its output before recreating it): one lookup.
        return match c.client.file_remove(&name) {
            Ok(()) => 0,
            Err(e) if e.kind == pdcx_core::ErrorKind::NotFound => {
                // Also for a directory (POSIX says EISDIR): telling them apart would cost
                // every missing-file unlink a second lookup.
                set_errno(libc::ENOENT);
                -1
            }
            Err(e) => {
                set_errno(errno_of(&e));
                -1
            }
        };
    }
    let r = match c.client.file_kind(&name) {
        Ok(Some(Kind::File(_))) if dir => Err(libc::ENOTDIR),
        Ok(Some(Kind::File(_))) => c.client.file_remove(&name).map_err(|e| errno_of(&e)),
        Ok(Some(Kind::Dir)) if !dir => Err(libc::EISDIR),
        Ok(Some(Kind::Dir)) => c.client.file_rmdir(&name).map_err(|e| match e.kind {
            pdcx_core::ErrorKind::InvalidArgument => libc::ENOTEMPTY,
            _ => errno_of(&e),
        }),
        Ok(None) => Err(libc::ENOENT),
        Err(e) => Err(errno_of(&e)),
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// # Safety
/// C `unlink(path)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    match ours(path) {
        Some(rest) => guarded("unlink", -1, || remove_name(rest, false)),
        None => pass!(unlink: unsafe extern "C" fn(*const c_char) -> c_int, -1, (path)),
    }
}

/// # Safety
/// C `remove(path)` (a file, or an empty directory).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn remove(path: *const c_char) -> c_int {
    match ours(path) {
        Some(rest) => guarded("remove", -1, || {
            let r = remove_name(rest, false);
            // SAFETY: reading this thread's errno.
            if r != 0 && unsafe { *libc::__errno_location() } == libc::EISDIR {
                return remove_name(rest, true);
            }
            r
        }),
        None => pass!(remove: unsafe extern "C" fn(*const c_char) -> c_int, -1, (path)),
    }
}

/// Renames between two `pdcx://` names (`Client::file_rename`); EXDEV between pdcx and a
/// local path (so `mv` copies instead).
fn rename_ours(from: Option<&str>, to: Option<&str>) -> c_int {
    let (Some(from), Some(to)) = (from, to) else {
        set_errno(libc::EXDEV);
        return -1;
    };
    with_client(|c| {
        c.file_rename(&names::lexical(from), &names::lexical(to))
            .map_err(|e| errno_of(&e))
    })
}

/// # Safety
/// C `rename(from, to)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn rename(from: *const c_char, to: *const c_char) -> c_int {
    let (a, b) = (ours(from), ours(to));
    if a.is_none() && b.is_none() {
        return pass!(rename: unsafe extern "C" fn(*const c_char, *const c_char) -> c_int, -1, (from, to));
    }
    guarded("rename", -1, || rename_ours(a, b))
}

/// # Safety
/// C `renameat(dirfd, from, dirfd2, to)`; `pdcx://` paths ignore the directory fds.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn renameat(
    fd1: c_int,
    from: *const c_char,
    fd2: c_int,
    to: *const c_char,
) -> c_int {
    let (a, b) = (ours(from), ours(to));
    if a.is_none() && b.is_none() {
        return pass!(renameat: unsafe extern "C" fn(c_int, *const c_char, c_int, *const c_char) -> c_int, -1, (fd1, from, fd2, to));
    }
    guarded("renameat", -1, || rename_ours(a, b))
}

/// # Safety
/// C `renameat2(dirfd, from, dirfd2, to, flags)` (`mv` uses it); flags (RENAME_NOREPLACE,
/// ...) are refused with EINVAL for `pdcx://` paths.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn renameat2(
    fd1: c_int,
    from: *const c_char,
    fd2: c_int,
    to: *const c_char,
    flags: libc::c_uint,
) -> c_int {
    let (a, b) = (ours(from), ours(to));
    if a.is_none() && b.is_none() {
        return pass!(renameat2: unsafe extern "C" fn(c_int, *const c_char, c_int, *const c_char, libc::c_uint) -> c_int, -1, (fd1, from, fd2, to, flags));
    }
    if flags != 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    guarded("renameat2", -1, || rename_ours(a, b))
}

/// # Safety
/// C `rmdir(path)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    match ours(path) {
        Some(rest) => guarded("rmdir", -1, || remove_name(rest, true)),
        None => pass!(rmdir: unsafe extern "C" fn(*const c_char) -> c_int, -1, (path)),
    }
}

fn make_dir(rest: &str) -> c_int {
    with_client(|c| {
        c.file_mkdir(&names::lexical(rest))
            .map_err(|e| errno_of(&e))
    })
}

/// # Safety
/// C `mkdir(path, mode)`: a directory is a marker object (`Client::file_mkdir`).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    match ours(path) {
        Some(rest) => guarded("mkdir", -1, || make_dir(rest)),
        None => {
            pass!(mkdir: unsafe extern "C" fn(*const c_char, mode_t) -> c_int, -1, (path, mode))
        }
    }
}

/// # Safety
/// C `mkdirat(dirfd, path, mode)`; a `pdcx://` path ignores `dirfd`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    match ours(path) {
        Some(rest) => guarded("mkdirat", -1, || make_dir(rest)),
        None => {
            pass!(mkdirat: unsafe extern "C" fn(c_int, *const c_char, mode_t) -> c_int, -1, (dirfd, path, mode))
        }
    }
}

/// # Safety
/// C `unlinkat(dirfd, path, flags)` (`rm` uses it); a `pdcx://` path ignores `dirfd`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    match ours(path) {
        Some(rest) => guarded("unlinkat", -1, || {
            remove_name(rest, flags & libc::AT_REMOVEDIR != 0)
        }),
        None => {
            pass!(unlinkat: unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int, -1, (dirfd, path, flags))
        }
    }
}
