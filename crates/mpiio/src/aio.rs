//! POSIX AIO on our fds. OMPIO implements `MPI_File_iwrite*`/`iread*` (and fcoll's async
//! options) with `aio_write`/`aio_read` and polls `aio_error`/`aio_return`; glibc's AIO
//! threads then call its internal `pwrite`, which no preload can see, so without these
//! wrappers the bytes would go to the placeholder and be lost.
//!
//! A request on a tracked fd is done at once, synchronously, through the byte stream; its
//! outcome is kept, keyed by the `aiocb` address, until `aio_return` collects it. Requests on
//! other fds go to glibc untouched (one atomic load for the completion calls).

use crate::fdtab::{self, lock};
use crate::guard;
use crate::posix::{read_at, write_at};
use crate::{ffi, set_errno};
use libc::{aiocb, c_int, ssize_t, timespec};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Finished requests of ours: `aiocb` address → (error code, return value).
static DONE: Mutex<BTreeMap<usize, (c_int, ssize_t)>> = Mutex::new(BTreeMap::new());
/// `DONE.len()`, readable without the lock.
static PENDING: AtomicUsize = AtomicUsize::new(0);

fn finished(cb: *const aiocb) -> Option<(c_int, ssize_t)> {
    if PENDING.load(Ordering::Acquire) == 0 {
        return None;
    }
    lock(&DONE).get(&(cb as usize)).copied()
}

fn collect(cb: *const aiocb) -> Option<(c_int, ssize_t)> {
    if PENDING.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut d = lock(&DONE);
    let r = d.remove(&(cb as usize));
    PENDING.store(d.len(), Ordering::Release);
    r
}

/// Does the request now; false if it is not ours (the caller passes it to glibc).
///
/// # Safety
/// `cb` must be a valid `aiocb` whose buffer is valid for the request.
unsafe fn submit(cb: *mut aiocb, write: bool) -> Option<c_int> {
    if cb.is_null() {
        return None;
    }
    // SAFETY: the caller's control block.
    let c = unsafe { &*cb };
    if !fdtab::maybe_tracked(c.aio_fildes) || guard::inside() {
        return None;
    }
    let t = fdtab::get(c.aio_fildes)?;
    Some(ffi(
        if write { "aio_write" } else { "aio_read" },
        -1,
        || {
            // Notification by signal or thread is not done for our requests: refuse them rather
            // than let the program wait for a signal that never comes.
            if c.aio_sigevent.sigev_notify != libc::SIGEV_NONE {
                let _g = guard::Passthrough::enter();
                eprintln!("pdcx mpiio: aio request with a completion signal/thread on a logged file is not supported");
                return Err(libc::EINVAL);
            }
            let off = u64::try_from(c.aio_offset).map_err(|_| libc::EINVAL)?;
            let n = c.aio_nbytes;
            let r = if n == 0 {
                Ok(0)
            } else if c.aio_buf.is_null() {
                Err(libc::EFAULT)
            } else if write {
                // SAFETY: the request's buffer of n bytes.
                let b = unsafe { std::slice::from_raw_parts(c.aio_buf as *const u8, n) };
                write_at(&t, c.aio_fildes, &[b], off)
            } else {
                // SAFETY: as above, writable.
                let b = unsafe { std::slice::from_raw_parts_mut(c.aio_buf as *mut u8, n) };
                read_at(&t, &mut [b], off)
            };
            let outcome = match r {
                Ok(n) => (0, n as ssize_t),
                Err(e) => (e, -1),
            };
            let mut d = lock(&DONE);
            d.insert(cb as usize, outcome);
            PENDING.store(d.len(), Ordering::Release);
            Ok(0)
        },
    ))
}

/// The submit wrappers (`aio_write`, `aio_read` and their 64-bit twins, the same structure on
/// 64-bit Linux): a request on a logged fd is done at once through the stream; any other goes
/// to the real call.
macro_rules! submit_wrapper {
    ($name:ident, $write:expr) => {
        /// # Safety
        /// The C function of this name, with its control block.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(cb: *mut aiocb) -> c_int {
            match unsafe { submit(cb, $write) } {
                Some(r) => r,
                None => {
                    // A control block reused for another fd: our old outcome is not its.
                    collect(cb);
                    call!($name(cb))
                }
            }
        }
    };
}

submit_wrapper!(aio_write, true);
submit_wrapper!(aio_write64, true);
submit_wrapper!(aio_read, false);
submit_wrapper!(aio_read64, false);

/// # Safety
/// C `aio_error(cb)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn aio_error(cb: *const aiocb) -> c_int {
    match finished(cb) {
        Some((e, _)) => e,
        None => call!(aio_error(cb)),
    }
}

/// # Safety
/// C `aio_error64(cb)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn aio_error64(cb: *const aiocb) -> c_int {
    match finished(cb) {
        Some((e, _)) => e,
        None => call!(aio_error64(cb)),
    }
}

fn returned(r: (c_int, ssize_t)) -> ssize_t {
    if r.0 != 0 {
        set_errno(r.0);
    }
    r.1
}

/// # Safety
/// C `aio_return(cb)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn aio_return(cb: *mut aiocb) -> ssize_t {
    match collect(cb) {
        Some(r) => returned(r),
        None => call!(aio_return(cb)),
    }
}

/// # Safety
/// C `aio_return64(cb)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn aio_return64(cb: *mut aiocb) -> ssize_t {
    match collect(cb) {
        Some(r) => returned(r),
        None => call!(aio_return64(cb)),
    }
}

/// True if one of the `n` requests in `list` is ours (and so already finished).
///
/// # Safety
/// `list` must point to `n` entries (NULL entries are allowed).
unsafe fn any_finished(list: *const *const aiocb, n: c_int) -> bool {
    if PENDING.load(Ordering::Acquire) == 0 || list.is_null() || n <= 0 {
        return false;
    }
    // SAFETY: the caller's array of n entries.
    let l = unsafe { std::slice::from_raw_parts(list, n as usize) };
    l.iter().any(|&cb| !cb.is_null() && finished(cb).is_some())
}

/// # Safety
/// C `aio_suspend(list, n, timeout)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn aio_suspend(
    list: *const *const aiocb,
    n: c_int,
    timeout: *const timespec,
) -> c_int {
    if unsafe { any_finished(list, n) } {
        return 0;
    }
    call!(aio_suspend(list, n, timeout))
}

/// # Safety
/// C `aio_suspend64(list, n, timeout)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn aio_suspend64(
    list: *const *const aiocb,
    n: c_int,
    timeout: *const timespec,
) -> c_int {
    if unsafe { any_finished(list, n) } {
        return 0;
    }
    call!(aio_suspend64(list, n, timeout))
}

/// Our requests are always finished: nothing to cancel.
fn cancel_ours(fd: c_int, cb: *mut aiocb) -> Option<c_int> {
    if (cb.is_null() && fdtab::maybe_tracked(fd) && fdtab::get(fd).is_some())
        || finished(cb).is_some()
    {
        Some(libc::AIO_ALLDONE)
    } else {
        None
    }
}

/// # Safety
/// C `aio_cancel(fd, cb)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn aio_cancel(fd: c_int, cb: *mut aiocb) -> c_int {
    match cancel_ours(fd, cb) {
        Some(r) => r,
        None => call!(aio_cancel(fd, cb)),
    }
}

/// # Safety
/// C `aio_cancel64(fd, cb)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn aio_cancel64(fd: c_int, cb: *mut aiocb) -> c_int {
    match cancel_ours(fd, cb) {
        Some(r) => r,
        None => call!(aio_cancel64(fd, cb)),
    }
}
