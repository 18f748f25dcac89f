//! The libc calls Montage-like workflows make on their files themselves ("Montage on PDC" §VI
//! "POSIX Support"): existence checks (`stat`, `lstat`, `access`), removing an output before
//! recreating it (`unlink`, `remove`), output directories (`mkdir`, `rmdir`), directory
//! listings (`opendir`/`readdir`) and small tables read or written with `fopen`. A path that
//! starts with `pdcx://` is answered from pdcx; every other path goes to libc untouched (one
//! prefix comparison).
//!
//! glibc ≥ 2.33 exports `stat` and friends as functions; older programs call `__xstat`.
//! Both are covered. Directory handles from `opendir` on a `pdcx://` path are this library's
//! own (a boxed listing), recognised by address in `readdir`/`closedir`/`dirfd`.
//!
//! This file holds what every wrapper shares: finding the real libc function (`real!`,
//! `pass!`), recognising a `pdcx://` path, a file's identity. One job per child:
//! - `stat.rs`: the `stat` family, `statx`, `access`, the xattr calls;
//! - `namespace.rs`: removing, renaming and making names (`unlink`, `rename`, `mkdir`, ...);
//! - `listing.rs`: directory listings (`opendir`/`readdir`/`closedir`);
//! - `stdio.rs`: `fopen` streams over a pdcx file (glibc's `fopencookie`);
//! - `memfd.rs`: `open(2)` of a pdcx file as a memory file, its descriptors (`close`, `dup`,
//!   `fstat`) and the write-back at the last close or at exit.

use crate::names;
use crate::{ctx, set_errno};
use libc::{c_char, c_int};
use std::ffi::CStr;

/// Looks `sym` up as the next definition after this library (glibc's), once.
macro_rules! real {
    ($name:ident : $ty:ty) => {{
        static CACHE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut p = CACHE.load(std::sync::atomic::Ordering::Relaxed);
        if p == 0 {
            // SAFETY: a NUL-terminated static name.
            p = unsafe {
                libc::dlsym(
                    libc::RTLD_NEXT,
                    concat!(stringify!($name), "\0").as_ptr().cast(),
                )
            } as usize;
            CACHE.store(p, std::sync::atomic::Ordering::Relaxed);
        }
        // SAFETY: glibc defines the symbol with this C type.
        (p != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(p) })
    }};
}

/// Calls the real libc function, or fails with ENOSYS when there is none.
macro_rules! pass {
    ($name:ident : $ty:ty, $fail:expr, ($($a:expr),*)) => {
        match real!($name: $ty) {
            // SAFETY: the caller's arguments, passed on unchanged.
            Some(f) => unsafe { f($($a),*) },
            None => {
                set_errno(libc::ENOSYS);
                $fail
            }
        }
    };
}

mod listing;
mod memfd;
mod namespace;
mod stat;
mod stdio;

// The wrappers keep their old paths (`posix::stat`, `posix::open`, ...).
pub use listing::*;
pub(crate) use memfd::write_back_all;
pub use memfd::*;
pub use namespace::*;
pub use stat::*;
pub use stdio::*;

/// The part after `pdcx://` of a C path, when it has the scheme.
pub(super) fn ours(path: *const c_char) -> Option<&'static str> {
    if path.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated C string from the caller, alive for the call (the 'static
    // is only for the borrow's convenience within this call).
    let b = unsafe { CStr::from_ptr(path) }.to_bytes();
    let r = names::strip(b);
    if r.is_some() {
        crate::stats::add(&crate::stats::POSIX_CALLS, 1);
    }
    r
}

/// The device number every `pdcx://` file reports ("pdcx").
pub(super) const PDCX_DEV: u64 = 0x7064_6378;

/// A file's inode number: a hash of its name (FNV-1a), never 0.
pub(super) fn name_ino(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    }) | 1
}

/// Runs `f` with the process's client: 0, or -1 with errno set (EIO without a deployment).
pub(super) fn with_client(f: impl FnOnce(&pdcx_client::Client) -> Result<(), c_int>) -> c_int {
    let r = match ctx() {
        Ok(c) => f(&c.client),
        Err(_) => Err(libc::EIO),
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}
