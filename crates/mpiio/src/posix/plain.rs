//! Files under the prefix written outside MPI-IO: a program that opens one with `open` or
//! `fopen` for writing (its own notes, a header patched after the MPI-IO close) gets a plain
//! file that is neither logged nor copied to the home. That is allowed, never silent: one
//! stderr line per path and process. The MPI library's own files next to the program's (made
//! inside the MPI calls this library wraps) and the logged files' own opens are not such files.

use crate::config::{self, Mode};
use crate::fdtab;
use crate::guard::{self, Passthrough};
use libc::{c_char, c_int};
use std::collections::BTreeSet;
use std::ffi::CStr;
use std::path::PathBuf;
use std::sync::Mutex;

/// Paths already reported by this process.
static SAID: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// Whether open flags ask for write access.
pub(crate) fn writes(flags: c_int) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY
}

/// Whether an `fopen` mode (`"r"`, `"w+"`, `"ab"`, ...) asks for write access.
fn fopen_writes(mode: &[u8]) -> bool {
    matches!(mode.first(), Some(b'w' | b'a')) || mode.contains(&b'+')
}

/// Reports `path` (opened for writing relative to `dirfd`) once if it lies under the prefix
/// and is not a logged file. Costs nothing until a first `MPI_File_open` has read the
/// configuration, and only runs for opens that write.
pub(crate) fn check(dirfd: c_int, path: *const c_char) {
    if path.is_null() || guard::inside() || guard::in_mpi() || fdtab::forked() {
        return;
    }
    let Some(cfg) = config::loaded() else { return };
    if cfg.mode != Mode::Log {
        return;
    }
    let _g = Passthrough::enter();
    // SAFETY: open's path argument is a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    if bytes.first() != Some(&b'/') && dirfd != libc::AT_FDCWD {
        return;
    }
    let Ok(cwd) = std::env::current_dir() else {
        return;
    };
    let norm = config::normalise(bytes, &cwd);
    let Some(rel) = config::relative(cfg, &norm) else {
        return;
    };
    if fdtab::opening_match(&norm).is_some() {
        return;
    }
    let mut said = fdtab::lock(&SAID);
    if !said.insert(norm.clone()) {
        return;
    }
    let home = cfg
        .home
        .as_ref()
        .map_or_else(|| "a home".to_string(), |h| h.of(&rel));
    eprintln!(
        "pdcx mpiio: {} is written outside MPI-IO: a plain file, not logged and not copied to {home}",
        norm.display()
    );
}

type FopenFn = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE;

/// Looks, then calls glibc's `real` with the caller's arguments.
///
/// # Safety
/// C `fopen(path, mode)`.
unsafe fn fopen_via(
    real: Option<FopenFn>,
    path: *const c_char,
    mode: *const c_char,
) -> *mut libc::FILE {
    fopen_common(path, mode);
    match real {
        // SAFETY: the caller's arguments, passed on.
        Some(f) => unsafe { f(path, mode) },
        None => {
            crate::set_errno(libc::ENOSYS);
            std::ptr::null_mut()
        }
    }
}

/// # Safety
/// C `fopen(path, mode)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: the caller's arguments.
    unsafe { fopen_via(crate::real::fopen(), path, mode) }
}

/// # Safety
/// C `fopen64(path, mode)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: the caller's arguments.
    unsafe { fopen_via(crate::real::fopen64(), path, mode) }
}

fn fopen_common(path: *const c_char, mode: *const c_char) {
    if mode.is_null() || config::loaded().is_none() {
        return;
    }
    // SAFETY: fopen's mode argument is a NUL-terminated string.
    if fopen_writes(unsafe { CStr::from_ptr(mode) }.to_bytes()) {
        check(libc::AT_FDCWD, path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_modes_write() {
        for m in ["w", "wb", "a", "a+", "r+", "rb+", "w+x"] {
            assert!(fopen_writes(m.as_bytes()), "{m}");
        }
        for m in ["r", "rb", "re", ""] {
            assert!(!fopen_writes(m.as_bytes()), "{m}");
        }
        assert!(writes(libc::O_WRONLY | libc::O_CREAT));
        assert!(writes(libc::O_RDWR));
        assert!(!writes(libc::O_RDONLY | libc::O_CLOEXEC));
    }
}
