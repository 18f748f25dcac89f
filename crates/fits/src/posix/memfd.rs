//! `open(2)` of a `pdcx://` file (tools that read with open/read: cat, cp, Python): the file
//! as an anonymous memory file, the table of such descriptors (`close`, `dup`, `fstat`), and
//! the write-back of a file opened for writing at its last close or at exit.

use super::{name_ino, ours, with_client, PDCX_DEV};
use crate::names;
use crate::{ctx, errno_of, guarded, set_errno};
use libc::{c_char, c_int};
use pdcx_client::file::Kind;
use std::sync::Mutex;

/// A descriptor `open` made for a `pdcx://` file: the file's name, and whether it is written
/// back at its last `close` (opened for writing).
#[derive(Clone)]
struct Opened {
    name: String,
    write: bool,
}

/// Descriptors of `pdcx://` files opened with `open` (their `dup`s too).
static OPENED: Mutex<Option<std::collections::HashMap<c_int, Opened>>> = Mutex::new(None);
/// Whether `OPENED` may hold anything (so every other descriptor call skips the lock).
static ANY_OPENED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn opened(fd: c_int) -> Option<Opened> {
    if !ANY_OPENED.load(std::sync::atomic::Ordering::Acquire) {
        return None;
    }
    OPENED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .and_then(|m| m.get(&fd).cloned())
}

fn track(fd: c_int, o: Opened) {
    OPENED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(Default::default)
        .insert(fd, o);
    ANY_OPENED.store(true, std::sync::atomic::Ordering::Release);
}

/// Forgets `fd`; writes the file back when it was written and no other descriptor of the
/// same file is open for writing (0, or -1 with errno).
fn untrack(fd: c_int) -> c_int {
    let (o, last) = {
        let mut g = OPENED.lock().unwrap_or_else(|p| p.into_inner());
        let Some(m) = g.as_mut() else { return 0 };
        let Some(o) = m.remove(&fd) else { return 0 };
        let last = !m.values().any(|x| x.write && x.name == o.name);
        (o, last)
    };
    if o.write && last {
        return guarded("close", -1, || write_back(fd, &o.name));
    }
    0
}

/// Opens `rest` as an anonymous memory file holding its content (none when truncated or
/// new); a file opened for writing is written back at its last `close` (or at exit). The
/// whole file is in memory.
pub(super) fn open_ours(rest: &str, flags: c_int) -> c_int {
    let acc = flags & libc::O_ACCMODE;
    let write = acc != libc::O_RDONLY;
    let name = match names::file_name(rest) {
        Ok(n) => n,
        Err(_) => {
            set_errno(libc::EINVAL);
            return -1;
        }
    };
    let c = match ctx() {
        Ok(c) => c,
        Err(_) => {
            set_errno(libc::EIO);
            return -1;
        }
    };
    let exists = match c.client.file_kind(&name) {
        Ok(Some(Kind::File(_))) => true,
        Ok(Some(Kind::Dir)) => {
            set_errno(if write { libc::EISDIR } else { libc::ENOTSUP });
            return -1;
        }
        Ok(None) => false,
        Err(e) => {
            set_errno(errno_of(&e));
            return -1;
        }
    };
    if !exists && flags & libc::O_CREAT == 0 {
        set_errno(libc::ENOENT);
        return -1;
    }
    if exists && flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0 {
        set_errno(libc::EEXIST);
        return -1;
    }
    // SAFETY: a NUL-terminated name; memfd_create has no other precondition.
    let fd = unsafe { libc::memfd_create(c"pdcx-file".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return -1;
    }
    let fail = |e: c_int| {
        // SAFETY: our own descriptor.
        unsafe { libc::close(fd) };
        set_errno(e);
        -1
    };
    if exists && flags & libc::O_TRUNC == 0 {
        let r = c.client.file_open(&name, "rb", c.opts).and_then(|mut f| {
            let mut buf = vec![0u8; f.size() as usize];
            let n = f.read_full(&mut buf)?;
            buf.truncate(n);
            Ok(buf)
        });
        let data = match r {
            Ok(d) => d,
            Err(e) => return fail(errno_of(&e)),
        };
        let mut off = 0;
        while off < data.len() {
            // SAFETY: writing our buffer to our descriptor.
            let n = unsafe { libc::write(fd, data[off..].as_ptr().cast(), data.len() - off) };
            if n <= 0 {
                return fail(libc::EIO);
            }
            off += n as usize;
        }
        // SAFETY: our descriptor.
        unsafe { libc::lseek(fd, 0, libc::SEEK_SET) };
    }
    if write {
        if !exists {
            // Created now, so it exists for others (empty) as with a real open.
            if let Err(e) = c
                .client
                .file_open(&name, "wb", c.opts)
                .and_then(|mut f| f.close())
            {
                return fail(errno_of(&e));
            }
        }
        if flags & libc::O_APPEND != 0 {
            // SAFETY: our descriptor.
            unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_APPEND) };
        }
    }
    if flags & libc::O_CLOEXEC == 0 && !write {
        // SAFETY: our descriptor (memfd_create set close-on-exec; the caller did not ask).
        // A file open for reading survives an exec (`sort < pdcx://f`); one open for
        // writing does not, since the new program could not write it back: its writes fail
        // (EBADF) instead of being lost.
        unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
    }
    track(fd, Opened { name, write });
    fd
}

/// Writes a written memfd's content back to its file; the caller closes the descriptor.
fn write_back(fd: c_int, name: &str) -> c_int {
    // SAFETY: a plain C struct, filled by fstat of our descriptor.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return -1;
    }
    let mut data = vec![0u8; st.st_size as usize];
    let mut off = 0;
    while off < data.len() {
        // SAFETY: reading our descriptor into our buffer.
        let n = unsafe {
            libc::pread(
                fd,
                data[off..].as_mut_ptr().cast(),
                data.len() - off,
                off as i64,
            )
        };
        if n <= 0 {
            set_errno(libc::EIO);
            return -1;
        }
        off += n as usize;
    }
    with_client(|c| {
        let opts = ctx().map(|x| x.opts).unwrap_or_default();
        c.file_open(name, "wb", opts)
            .and_then(|mut f| {
                f.write(&data)?;
                f.close()
            })
            .map_err(|e| errno_of(&e))
    })
}

macro_rules! open_wrapper {
    ($name:ident) => {
        /// # Safety
        /// C `$name(path, flags, mode)`.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int, mode: libc::c_uint) -> c_int {
            match ours(path) {
                Some(rest) => guarded(stringify!($name), -1, || open_ours(rest, flags)),
                None => pass!($name: unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int, -1, (path, flags, mode)),
            }
        }
    };
}
open_wrapper!(open);
open_wrapper!(open64);

macro_rules! openat_wrapper {
    ($name:ident) => {
        /// # Safety
        /// C `$name(dirfd, path, flags, mode)`; a `pdcx://` path ignores `dirfd`.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, flags: c_int, mode: libc::c_uint) -> c_int {
            match ours(path) {
                Some(rest) => guarded(stringify!($name), -1, || open_ours(rest, flags)),
                None => pass!($name: unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int, -1, (dirfd, path, flags, mode)),
            }
        }
    };
}
openat_wrapper!(openat);
openat_wrapper!(openat64);

macro_rules! open2_wrapper {
    ($name:ident) => {
        /// `_FORTIFY_SOURCE` builds call this for opens without a mode.
        ///
        /// # Safety
        /// C `$name(path, flags)`.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int) -> c_int {
            match ours(path) {
                Some(rest) => guarded(stringify!($name), -1, || open_ours(rest, flags)),
                None => pass!($name: unsafe extern "C" fn(*const c_char, c_int) -> c_int, -1, (path, flags)),
            }
        }
    };
}
open2_wrapper!(__open_2);
open2_wrapper!(__open64_2);

/// # Safety
/// C `close(fd)`: the last descriptor of a `pdcx://` file opened for writing writes it back
/// first (a failure is reported here, as NFS reports write-back errors at close).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let w = untrack(fd);
    let r = pass!(close: unsafe extern "C" fn(c_int) -> c_int, -1, (fd));
    if w != 0 {
        -1
    } else {
        r
    }
}

/// # Safety
/// C `dup(fd)`: a copy of a `pdcx://` descriptor is one too.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let n = pass!(dup: unsafe extern "C" fn(c_int) -> c_int, -1, (fd));
    if n >= 0 {
        if let Some(o) = opened(fd) {
            track(n, o);
        }
    }
    n
}

fn dup_onto(old: c_int, new: c_int, real: impl FnOnce() -> c_int) -> c_int {
    if old == new {
        return real();
    }
    // `new` is closed by the call: a pdcx file open on it is written back first.
    let w = untrack(new);
    let r = real();
    if r >= 0 {
        if let Some(o) = opened(old) {
            if o.write {
                // As in `open_ours`: a copy open for writing does not survive an exec.
                // SAFETY: the descriptor the call just made.
                unsafe { libc::fcntl(r, libc::F_SETFD, libc::FD_CLOEXEC) };
            }
            track(r, o);
        }
    }
    if w != 0 {
        -1
    } else {
        r
    }
}

/// # Safety
/// C `dup2(old, new)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    dup_onto(
        old,
        new,
        || pass!(dup2: unsafe extern "C" fn(c_int, c_int) -> c_int, -1, (old, new)),
    )
}

/// # Safety
/// C `dup3(old, new, flags)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    dup_onto(
        old,
        new,
        || pass!(dup3: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int, -1, (old, new, flags)),
    )
}

/// Writes back every `pdcx://` file still open for writing when the program exits (a
/// program that never closes its output, or a shell's redirected stdout).
pub(crate) fn write_back_all() {
    if !ANY_OPENED.load(std::sync::atomic::Ordering::Acquire) {
        return;
    }
    // exit() flushes stdio after the destructors: flush now, or `prog > pdcx://f` would
    // write back before the program's last buffered output reached the descriptor.
    // SAFETY: fflush(NULL) flushes every open stdio stream.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    let left: Vec<c_int> = {
        let g = OPENED.lock().unwrap_or_else(|p| p.into_inner());
        g.as_ref()
            .map(|m| {
                m.iter()
                    .filter(|(_, o)| o.write)
                    .map(|(fd, _)| *fd)
                    .collect()
            })
            .unwrap_or_default()
    };
    for fd in left {
        if untrack(fd) != 0 {
            eprintln!("pdcx fits: writing back a pdcx:// file at exit failed");
        }
    }
}

macro_rules! fstat_wrapper {
    ($name:ident, $st:ty) => {
        /// A `pdcx://` descriptor looks like its file (`cp` compares `fstat` with `stat`).
        ///
        /// # Safety
        /// C `$name(fd, buf)`.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, buf: *mut $st) -> c_int {
            let r = pass!($name: unsafe extern "C" fn(c_int, *mut $st) -> c_int, -1, (fd, buf));
            if r == 0 {
                if let Some(o) = opened(fd) {
                    fix_fstat(&o.name, buf.cast());
                }
            }
            r
        }
    };
}
fstat_wrapper!(fstat, libc::stat);
fstat_wrapper!(fstat64, libc::stat64);

/// Gives the memfd's `stat` its file's identity (device, inode, mode) and keeps its size.
fn fix_fstat(name: &str, buf: *mut libc::stat) {
    // SAFETY: the caller's buffer, filled by the real fstat.
    let st = unsafe { &mut *buf };
    st.st_dev = PDCX_DEV;
    st.st_ino = name_ino(name);
    st.st_mode = libc::S_IFREG | 0o644;
}
