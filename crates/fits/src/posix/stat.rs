//! What a `pdcx://` path looks like to the `stat` family (`stat`, `lstat`, `__xstat`,
//! `fstatat`, `statx`), to `access`/`faccessat`, and to the extended-attribute calls.

use super::{name_ino, ours, PDCX_DEV};
use crate::names;
use crate::{ctx, errno_of, guarded, set_errno};
use libc::{c_char, c_int, c_void};
use pdcx_client::file::Kind;
use pdcx_client::FileStat;

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
