//! `libpdcx_fits.so`: unmodified CFITSIO programs (Debian's Montage tools among
//! them) read and write FITS files stored as pdcx byte-stream objects, named `pdcx://NAME`,
//! in the deployment `PDCX_ROOT` names. See README.md.
//!
//! One job per file:
//! - `names.rs`: what a `pdcx://` path names (a file, a directory prefix, nothing), pure;
//! - `driver.rs`: the CFITSIO I/O driver ("Montage on PDC" §IV-A) over `pdcx_client::File`,
//!   and the constructor that registers it in CFITSIO's driver table;
//! - `posix/`: the libc calls the workflow makes on those paths itself (`stat`, `access`,
//!   `unlink`, `mkdir`, `opendir`/`readdir`, `fopen`, `open`), answered from pdcx; every other
//!   path goes to libc untouched (one child module per family of calls, see `posix/mod.rs`);
//! - `stats.rs`: per-process counts (opens, round trips, bytes), appended as one JSON line to
//!   `PDCX_FITS_STATS` at exit, for the benchmark.
//!
//! Exported wrappers carry `#[no_mangle]` only outside `cfg(test)`, so the unit tests do not
//! interpose libc in the test binary.

pub mod driver;
pub mod names;
pub mod posix;
pub mod stats;

use pdcx_client::{Client, FileOptions};
use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;

/// The deployment's client and the file options, set up at the first call that needs them
/// (never in the constructor: a program that never touches `pdcx://` never connects).
struct Ctx {
    client: Client,
    opts: FileOptions,
}

static CTX: OnceLock<Result<Ctx, String>> = OnceLock::new();

/// The process's client, or the one-line reason there is none (printed once).
fn ctx() -> Result<&'static Ctx, &'static str> {
    let r = CTX.get_or_init(|| {
        let opts = FileOptions::from_env().map_err(|e| e.message)?;
        let client = Client::connect(None)
            .map_err(|e| format!("cannot reach the deployment (PDCX_ROOT): {}", e.message))?;
        Ok(Ctx { client, opts })
    });
    match r {
        Ok(c) => Ok(c),
        Err(e) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("pdcx fits: {e}"));
            Err(e.as_str())
        }
    }
}

#[cfg_attr(test, allow(dead_code))]
extern "C" fn at_exit() {
    posix::write_back_all();
    stats::write_out();
}

/// Runs when the program exits (after `main` returns or `exit`): files still open for
/// writing through `open(2)` are written back, then the counts are written. It lives here
/// rather than in stats.rs so that the counters need not know the POSIX wrappers.
#[cfg(not(test))]
#[used]
#[link_section = ".fini_array"]
static AT_EXIT: extern "C" fn() = at_exit;

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: libc::c_int) {
    // SAFETY: `__errno_location` returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Runs a wrapper's body with panics caught: a panic prints one line and returns `fail`,
/// never unwinding into C.
pub(crate) fn guarded<T>(name: &str, fail: T, body: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(_) => {
            eprintln!("pdcx fits: {name}: internal error (a bug in libpdcx_fits); the call failed");
            set_errno(libc::EIO);
            fail
        }
    }
}

/// The errno closest to a pdcx error.
pub(crate) fn errno_of(e: &pdcx_core::Error) -> libc::c_int {
    use pdcx_core::ErrorKind as K;
    match e.kind {
        K::NotFound => libc::ENOENT,
        K::AlreadyExists => libc::EEXIST,
        K::InvalidArgument | K::DtypeMismatch => libc::EINVAL,
        K::OutOfBounds => libc::EFBIG,
        K::NoSpace => libc::ENOSPC,
        K::Auth => libc::EACCES,
        K::Unavailable => libc::EAGAIN,
        _ => libc::EIO,
    }
}
