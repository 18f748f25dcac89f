//! An fd's life: `close` (the last act flushes), `dup`/`dup2`/`dup3` and `fcntl`'s
//! `F_DUPFD` (a copy shares the state), and `fcntl`'s unlocks (ROMIO's data sieving).

use super::durability::flush;
use crate::fdtab;
use crate::ffi;
use crate::guard;
use crate::stats::{self, Op};
use libc::c_int;

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
