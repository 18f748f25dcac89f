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

use crate::names;
use crate::{ctx, errno_of, guarded, set_errno};
use libc::{c_char, c_int, c_void, mode_t, DIR};
use pdcx_client::file::Kind;
use pdcx_client::{File, FileStat};
use std::collections::HashSet;
use std::ffi::CStr;
use std::io::SeekFrom;
use std::sync::Mutex;

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

/// The part after `pdcx://` of a C path, when it has the scheme.
fn ours(path: *const c_char) -> Option<&'static str> {
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
const PDCX_DEV: u64 = 0x7064_6378;

/// A file's inode number: a hash of its name (FNV-1a), never 0.
fn name_ino(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    }) | 1
}

/// Fills a `struct stat` for what `name` resolves to; -1 with errno otherwise.
fn stat_into(rest: &str, buf: *mut libc::stat) -> c_int {
    let name = names::lexical(rest);
    let c = match ctx() {
        Ok(c) => c,
        Err(_) => {
            set_errno(libc::EIO);
            return -1;
        }
    };
    let kind = match c.client.file_kind(&name) {
        Ok(Some(k)) => k,
        Ok(None) => {
            set_errno(libc::ENOENT);
            return -1;
        }
        Err(e) => {
            set_errno(errno_of(&e));
            return -1;
        }
    };
    // SAFETY: the caller's buffer; zeroed then filled field by field.
    let st = unsafe {
        std::ptr::write_bytes(buf, 0, 1);
        &mut *buf
    };
    st.st_dev = PDCX_DEV;
    st.st_ino = name_ino(&name);
    // SAFETY: no preconditions.
    st.st_uid = unsafe { libc::getuid() };
    st.st_gid = unsafe { libc::getgid() };
    st.st_blksize = 2880 * 4;
    match kind {
        Kind::Dir => {
            st.st_mode = libc::S_IFDIR | 0o755;
            st.st_nlink = 2;
            st.st_size = 4096;
        }
        Kind::File(FileStat {
            size, ctime, mtime, ..
        }) => {
            st.st_mode = libc::S_IFREG | 0o644;
            st.st_nlink = 1;
            st.st_size = size as i64;
            st.st_blocks = size.div_ceil(512) as i64;
            st.st_mtime = mtime as i64;
            st.st_mtime_nsec = ((mtime.fract()) * 1e9) as i64;
            st.st_ctime = ctime as i64;
            st.st_atime = mtime as i64;
        }
    }
    0
}

// On x86_64 and aarch64 glibc, `struct stat64` is `struct stat`.
const _: () = assert!(std::mem::size_of::<libc::stat>() == std::mem::size_of::<libc::stat64>());

macro_rules! stat_wrapper {
    ($name:ident, $st:ty) => {
        /// # Safety
        /// C `$name(path, buf)`.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, buf: *mut $st) -> c_int {
            match ours(path) {
                Some(rest) => guarded(stringify!($name), -1, || stat_into(rest, buf.cast())),
                None => pass!($name: unsafe extern "C" fn(*const c_char, *mut $st) -> c_int, -1, (path, buf)),
            }
        }
    };
}
stat_wrapper!(stat, libc::stat);
stat_wrapper!(stat64, libc::stat64);
stat_wrapper!(lstat, libc::stat);
stat_wrapper!(lstat64, libc::stat64);

macro_rules! xstat_wrapper {
    ($name:ident, $st:ty) => {
        /// Programs built against glibc < 2.33 call `stat` as this.
        ///
        /// # Safety
        /// C `$name(ver, path, buf)`.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(ver: c_int, path: *const c_char, buf: *mut $st) -> c_int {
            match ours(path) {
                Some(rest) => guarded(stringify!($name), -1, || stat_into(rest, buf.cast())),
                None => pass!($name: unsafe extern "C" fn(c_int, *const c_char, *mut $st) -> c_int, -1, (ver, path, buf)),
            }
        }
    };
}
xstat_wrapper!(__xstat, libc::stat);
xstat_wrapper!(__xstat64, libc::stat64);
xstat_wrapper!(__lxstat, libc::stat);
xstat_wrapper!(__lxstat64, libc::stat64);

macro_rules! statat_wrapper {
    ($name:ident, $st:ty) => {
        /// # Safety
        /// C `$name(dirfd, path, buf, flags)`.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, buf: *mut $st, flags: c_int) -> c_int {
            match ours(path) {
                Some(rest) => guarded(stringify!($name), -1, || stat_into(rest, buf.cast())),
                None => pass!($name: unsafe extern "C" fn(c_int, *const c_char, *mut $st, c_int) -> c_int, -1, (dirfd, path, buf, flags)),
            }
        }
    };
}
statat_wrapper!(fstatat, libc::stat);
statat_wrapper!(fstatat64, libc::stat64);

// `ls`, `stat(1)` and other recent tools ask with `statx`.
const _: () = assert!(std::mem::size_of::<libc::statx>() == 256);

/// # Safety
/// C `statx(dirfd, path, flags, mask, buf)`; a `pdcx://` path ignores `dirfd` and `flags`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: libc::c_uint,
    buf: *mut libc::statx,
) -> c_int {
    let Some(rest) = ours(path) else {
        return pass!(statx: unsafe extern "C" fn(c_int, *const c_char, c_int, libc::c_uint, *mut libc::statx) -> c_int, -1, (dirfd, path, flags, mask, buf));
    };
    guarded("statx", -1, || {
        // SAFETY: a plain C struct; all-zero is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if stat_into(rest, &mut st) != 0 {
            return -1;
        }
        // SAFETY: the caller's buffer of one `struct statx`; zeroed, then filled.
        let x = unsafe {
            std::ptr::write_bytes(buf, 0, 1);
            &mut *buf
        };
        let ts = |s: i64, ns: i64| {
            // SAFETY: a plain C struct; all-zero is a valid value.
            let mut t: libc::statx_timestamp = unsafe { std::mem::zeroed() };
            t.tv_sec = s;
            t.tv_nsec = ns as u32;
            t
        };
        x.stx_mask = libc::STATX_BASIC_STATS;
        x.stx_blksize = st.st_blksize as u32;
        x.stx_nlink = st.st_nlink as u32;
        x.stx_uid = st.st_uid;
        x.stx_gid = st.st_gid;
        x.stx_mode = st.st_mode as u16;
        x.stx_ino = st.st_ino;
        x.stx_size = st.st_size as u64;
        x.stx_blocks = st.st_blocks as u64;
        x.stx_atime = ts(st.st_atime, st.st_atime_nsec);
        x.stx_ctime = ts(st.st_ctime, st.st_ctime_nsec);
        x.stx_mtime = ts(st.st_mtime, st.st_mtime_nsec);
        x.stx_dev_major = (st.st_dev >> 8) as u32;
        x.stx_dev_minor = (st.st_dev & 0xff) as u32;
        0
    })
}

macro_rules! no_xattrs {
    ($name:ident, $ret:expr, ($($arg:ident: $ty:ty),*)) => {
        /// Extended attributes (`ls -l` asks for ACLs): a `pdcx://` file has none.
        ///
        /// # Safety
        /// C `$name`.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, $($arg: $ty),*) -> isize {
            if ours(path).is_some() {
                return $ret;
            }
            pass!($name: unsafe extern "C" fn(*const c_char, $($ty),*) -> isize, -1, (path, $($arg),*))
        }
    };
}
no_xattrs!(getxattr, { set_errno(libc::ENODATA); -1 }, (name: *const c_char, value: *mut c_void, size: usize));
no_xattrs!(lgetxattr, { set_errno(libc::ENODATA); -1 }, (name: *const c_char, value: *mut c_void, size: usize));
no_xattrs!(listxattr, 0, (list: *mut c_char, size: usize));
no_xattrs!(llistxattr, 0, (list: *mut c_char, size: usize));

/// # Safety
/// C `access(path, mode)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    match ours(path) {
        Some(rest) => guarded("access", -1, || {
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            stat_into(rest, &mut st)
        }),
        None => {
            pass!(access: unsafe extern "C" fn(*const c_char, c_int) -> c_int, -1, (path, mode))
        }
    }
}

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

/// Runs `f` with the process's client: 0, or -1 with errno set (EIO without a deployment).
fn with_client(f: impl FnOnce(&pdcx_client::Client) -> Result<(), c_int>) -> c_int {
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

/// # Safety
/// C `faccessat(dirfd, path, mode, flags)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    match ours(path) {
        Some(rest) => guarded("faccessat", -1, || {
            // SAFETY: a plain C struct; all-zero is a valid value.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            stat_into(rest, &mut st)
        }),
        None => {
            pass!(faccessat: unsafe extern "C" fn(c_int, *const c_char, c_int, c_int) -> c_int, -1, (dirfd, path, mode, flags))
        }
    }
}

/// A directory listing handed out as a `DIR *`.
struct Listing {
    entries: Vec<(Vec<u8>, bool)>,
    next: usize,
    ent: libc::dirent64,
}

/// Addresses of the listings this library handed out.
static LISTINGS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn is_listing(d: *mut DIR) -> bool {
    let l = LISTINGS.lock().unwrap_or_else(|p| p.into_inner());
    l.as_ref().is_some_and(|s| s.contains(&(d as usize)))
}

/// # Safety
/// C `opendir(path)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    let Some(rest) = ours(path) else {
        return pass!(opendir: unsafe extern "C" fn(*const c_char) -> *mut DIR, std::ptr::null_mut(), (path));
    };
    guarded("opendir", std::ptr::null_mut(), || {
        let name = names::lexical(rest);
        let c = match ctx() {
            Ok(c) => c,
            Err(_) => {
                set_errno(libc::EIO);
                return std::ptr::null_mut();
            }
        };
        let found = c.client.file_kind(&name).and_then(|k| match k {
            Some(Kind::Dir) => c.client.file_dir(&name).map(Some),
            Some(Kind::File(_)) => Ok(None),
            None => Err(pdcx_core::Error::new(pdcx_core::ErrorKind::NotFound, "")),
        });
        let children = match found {
            Ok(Some(ch)) => ch,
            Ok(None) => {
                set_errno(libc::ENOTDIR);
                return std::ptr::null_mut();
            }
            Err(e) => {
                set_errno(errno_of(&e));
                return std::ptr::null_mut();
            }
        };
        let mut entries = vec![(b".".to_vec(), true), (b"..".to_vec(), true)];
        entries.extend(
            children
                .into_iter()
                .map(|e| (e.name.into_bytes(), e.stat.is_none())),
        );
        let l = Box::new(Listing {
            entries,
            next: 0,
            // SAFETY: a plain C struct; all-zero is a valid value.
            ent: unsafe { std::mem::zeroed() },
        });
        let p = Box::into_raw(l) as *mut DIR;
        LISTINGS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(HashSet::new)
            .insert(p as usize);
        p
    })
}

fn next_entry(d: *mut DIR) -> *mut libc::dirent64 {
    // SAFETY: `d` is one of our listings (checked by the caller) and not freed.
    let l = unsafe { &mut *(d as *mut Listing) };
    let Some((name, dir)) = l.entries.get(l.next) else {
        return std::ptr::null_mut();
    };
    l.next += 1;
    let n = name.len().min(l.ent.d_name.len() - 1);
    l.ent.d_name.fill(0);
    for (dst, &src) in l.ent.d_name.iter_mut().zip(&name[..n]) {
        *dst = src as c_char;
    }
    l.ent.d_ino = name.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    }) | 1;
    l.ent.d_off = l.next as i64;
    l.ent.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
    l.ent.d_type = if *dir { libc::DT_DIR } else { libc::DT_REG };
    &mut l.ent
}

/// # Safety
/// C `readdir(dir)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn readdir(d: *mut DIR) -> *mut libc::dirent {
    if is_listing(d) {
        return next_entry(d).cast();
    }
    pass!(readdir: unsafe extern "C" fn(*mut DIR) -> *mut libc::dirent, std::ptr::null_mut(), (d))
}

/// # Safety
/// C `readdir64(dir)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn readdir64(d: *mut DIR) -> *mut libc::dirent64 {
    if is_listing(d) {
        return next_entry(d);
    }
    pass!(readdir64: unsafe extern "C" fn(*mut DIR) -> *mut libc::dirent64, std::ptr::null_mut(), (d))
}

/// # Safety
/// C `closedir(dir)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn closedir(d: *mut DIR) -> c_int {
    let ours = {
        let mut l = LISTINGS.lock().unwrap_or_else(|p| p.into_inner());
        l.as_mut().is_some_and(|s| s.remove(&(d as usize)))
    };
    if ours {
        // SAFETY: made by Box::into_raw in opendir, removed from the set just now.
        drop(unsafe { Box::from_raw(d as *mut Listing) });
        return 0;
    }
    pass!(closedir: unsafe extern "C" fn(*mut DIR) -> c_int, -1, (d))
}

/// # Safety
/// C `rewinddir(dir)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn rewinddir(d: *mut DIR) {
    if is_listing(d) {
        // SAFETY: one of our listings.
        unsafe { (*(d as *mut Listing)).next = 0 };
        return;
    }
    if let Some(f) = real!(rewinddir: unsafe extern "C" fn(*mut DIR)) {
        // SAFETY: the caller's handle.
        unsafe { f(d) }
    }
}

/// # Safety
/// C `dirfd(dir)`: our listings have no descriptor.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dirfd(d: *mut DIR) -> c_int {
    if is_listing(d) {
        set_errno(libc::ENOTSUP);
        return -1;
    }
    pass!(dirfd: unsafe extern "C" fn(*mut DIR) -> c_int, -1, (d))
}

// ---- fopen: a stdio stream over a pdcx file (glibc's fopencookie) ----

type CookieRead = unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> isize;
type CookieWrite = unsafe extern "C" fn(*mut c_void, *const c_char, usize) -> isize;
type CookieSeek = unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int;
type CookieClose = unsafe extern "C" fn(*mut c_void) -> c_int;

/// glibc's `cookie_io_functions_t` (`stdio.h`).
#[repr(C)]
struct CookieFns {
    read: Option<CookieRead>,
    write: Option<CookieWrite>,
    seek: Option<CookieSeek>,
    close: Option<CookieClose>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, funcs: CookieFns) -> *mut libc::FILE;
}

unsafe extern "C" fn cookie_read(c: *mut c_void, buf: *mut c_char, n: usize) -> isize {
    guarded("fread", -1, || {
        // SAFETY: the cookie is the File boxed in fopen; stdio passes a buffer of n bytes.
        let f = unsafe { &mut *(c as *mut File) };
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) };
        match f.read(out) {
            Ok(k) => k as isize,
            Err(e) => {
                set_errno(errno_of(&e));
                -1
            }
        }
    })
}

unsafe extern "C" fn cookie_write(c: *mut c_void, buf: *const c_char, n: usize) -> isize {
    guarded("fwrite", 0, || {
        // SAFETY: as in cookie_read.
        let f = unsafe { &mut *(c as *mut File) };
        let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) };
        match f.write(data) {
            Ok(k) => k as isize,
            Err(e) => {
                set_errno(errno_of(&e));
                0
            }
        }
    })
}

unsafe extern "C" fn cookie_seek(c: *mut c_void, off: *mut i64, whence: c_int) -> c_int {
    guarded("fseek", -1, || {
        // SAFETY: as in cookie_read; stdio passes a valid offset pointer.
        let f = unsafe { &mut *(c as *mut File) };
        let o = unsafe { *off };
        let to = match whence {
            libc::SEEK_SET if o >= 0 => SeekFrom::Start(o as u64),
            libc::SEEK_CUR => SeekFrom::Current(o),
            libc::SEEK_END => SeekFrom::End(o),
            _ => {
                set_errno(libc::EINVAL);
                return -1;
            }
        };
        match f.seek(to) {
            Ok(p) => {
                unsafe { *off = p as i64 };
                0
            }
            Err(e) => {
                set_errno(errno_of(&e));
                -1
            }
        }
    })
}

unsafe extern "C" fn cookie_close(c: *mut c_void) -> c_int {
    guarded("fclose", -1, || {
        // SAFETY: made by Box::into_raw in fopen; stdio closes a stream once.
        let mut f = unsafe { Box::from_raw(c as *mut File) };
        match f.close() {
            Ok(()) => 0,
            Err(e) => {
                set_errno(errno_of(&e));
                -1
            }
        }
    })
}

fn fopen_ours(rest: &str, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: the caller's NUL-terminated mode string.
    let m = if mode.is_null() {
        ""
    } else {
        unsafe { CStr::from_ptr(mode) }.to_str().unwrap_or("")
    };
    // stdio's extra flags (`e` close-on-exec, `m` mmap, `c`) mean nothing here.
    let m: String = m
        .chars()
        .filter(|c| !matches!(c, 'e' | 'm' | 'c'))
        .collect();
    if m == "r" || m == "rb" {
        // A stream with a descriptor (`fileno` works: `sort` fstat's its input).
        let fd = open_ours(rest, libc::O_RDONLY);
        if fd < 0 {
            return std::ptr::null_mut();
        }
        // SAFETY: our descriptor and a NUL-terminated mode.
        let fp = unsafe { libc::fdopen(fd, c"r".as_ptr()) };
        if fp.is_null() {
            // SAFETY: ours, not handed to stdio.
            unsafe { close(fd) };
        }
        return fp;
    }
    let c = match ctx() {
        Ok(c) => c,
        Err(_) => {
            set_errno(libc::EIO);
            return std::ptr::null_mut();
        }
    };
    let f = match c.client.file_open(rest, &m, c.opts) {
        Ok(f) => f,
        Err(e) => {
            set_errno(errno_of(&e));
            return std::ptr::null_mut();
        }
    };
    let cookie = Box::into_raw(Box::new(f)) as *mut c_void;
    let funcs = CookieFns {
        read: Some(cookie_read),
        write: Some(cookie_write),
        seek: Some(cookie_seek),
        close: Some(cookie_close),
    };
    // SAFETY: a valid cookie and mode; on failure the cookie is freed below.
    let fp = unsafe { fopencookie(cookie, mode, funcs) };
    if fp.is_null() {
        // SAFETY: not handed to stdio.
        drop(unsafe { Box::from_raw(cookie as *mut File) });
    }
    fp
}

/// # Safety
/// C `fopen(path, mode)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    match ours(path) {
        Some(rest) => guarded("fopen", std::ptr::null_mut(), || fopen_ours(rest, mode)),
        None => {
            pass!(fopen: unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE, std::ptr::null_mut(), (path, mode))
        }
    }
}

/// # Safety
/// C `fopen64(path, mode)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    match ours(path) {
        Some(rest) => guarded("fopen64", std::ptr::null_mut(), || fopen_ours(rest, mode)),
        None => {
            pass!(fopen64: unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE, std::ptr::null_mut(), (path, mode))
        }
    }
}

// ---- open(2): a pdcx file as a memfd (tools that read with open/read: cat, cp, Python) ----

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
fn open_ours(rest: &str, flags: c_int) -> c_int {
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
