//! `libpdcx_mpiio.so`: an `LD_PRELOAD` library that logs the files an unmodified Open MPI
//! program writes through MPI-IO under `PDCX_MPIIO_PREFIX` into pdcx byte-stream objects, and
//! makes `MPI_File_sync`/`MPI_File_close` consistency points (durable on every node, sealed as
//! a version that the servers copy to the file's home in the background). See README.md.
//!
//! One job per file: `real.rs` (the real functions), `guard.rs` (recursion guard), `fdtab.rs`
//! (which fds are ours), `config.rs` (environment, paths, decisions), `posix/` (the libc
//! wrappers, one child per family of calls), `aio.rs` (POSIX AIO on our fds), `mpi.rs` (the MPI wrappers), `shared_fp.rs` (flushes
//! at barriers and shared-file-pointer calls). The bytes go
//! through `pdcx_client::ByteStream`.
//!
//! Exported wrappers carry `#[no_mangle]` only outside `cfg(test)`: the crate's unit tests
//! must not interpose libc in the test binary itself.

/// Calls the real `$f`, or fails with ENOSYS if libc has no such function.
macro_rules! call {
    ($f:ident($($a:expr),* $(,)?)) => {
        match crate::real::$f() {
            // SAFETY: the arguments are the caller's, passed on unchanged (or checked).
            Some(f) => unsafe { f($($a),*) },
            None => {
                crate::set_errno(libc::ENOSYS);
                -1
            }
        }
    };
}

pub mod aio;
pub mod config;
pub mod fdtab;
pub mod guard;
pub mod mpi;
pub mod posix;
pub mod real;
pub mod shared_fp;

use libc::c_int;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Runs the body of one wrapper: `Err(errno)` sets errno and returns `fail`; a panic prints
/// one line and returns `fail` with `EIO`, never unwinding into C.
pub(crate) fn ffi<T>(name: &str, fail: T, body: impl FnOnce() -> Result<T, c_int>) -> T {
    match std::panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_errno(e);
            fail
        }
        Err(_) => {
            let _g = guard::Passthrough::enter();
            eprintln!(
                "pdcx mpiio: {name}: internal error (a bug in libpdcx_mpiio); the call failed"
            );
            set_errno(libc::EIO);
            fail
        }
    }
}

/// Reports a pdcx error of `what` on the object `name` (one stderr line) and returns the errno
/// the program sees: ENOSPC for a full log, EIO otherwise.
pub(crate) fn pdcx_errno(what: &str, name: &str, e: &pdcx_core::Error) -> c_int {
    let _g = guard::Passthrough::enter();
    eprintln!("pdcx mpiio: {what} of {name} failed: {e}");
    match e.kind {
        pdcx_core::ErrorKind::NoSpace => libc::ENOSPC,
        _ => libc::EIO,
    }
}

/// Per-process counts of intercepted calls (printed with `PDCX_MPIIO_DEBUG=1`).
pub mod stats {
    use super::*;

    #[derive(Clone, Copy)]
    pub enum Op {
        Open,
        Write,
        Read,
        Seek,
        Truncate,
        Stat,
        Sync,
        Close,
        Dup,
    }
    const NAMES: [&str; 9] = [
        "open",
        "write",
        "read",
        "lseek",
        "ftruncate",
        "fstat",
        "fsync",
        "close",
        "dup",
    ];
    static CALLS: [AtomicU64; 9] = [const { AtomicU64::new(0) }; 9];
    static BYTES: [AtomicU64; 9] = [const { AtomicU64::new(0) }; 9];

    pub fn add(op: Op, bytes: u64) {
        CALLS[op as usize].fetch_add(1, Ordering::Relaxed);
        BYTES[op as usize].fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn calls(op: Op) -> u64 {
        CALLS[op as usize].load(Ordering::Relaxed)
    }

    /// One line: `write 12 (4194304 B), read 0, ...`.
    pub fn summary() -> String {
        NAMES
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let c = CALLS[i].load(Ordering::Relaxed);
                let b = BYTES[i].load(Ordering::Relaxed);
                if b > 0 {
                    format!("{n} {c} ({b} B)")
                } else {
                    format!("{n} {c}")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}
