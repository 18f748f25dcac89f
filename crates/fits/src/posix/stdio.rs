//! `fopen` of a `pdcx://` file: a stdio stream over a pdcx file (glibc's `fopencookie`), or,
//! for reading, a stream over the descriptor `open` makes.

use super::memfd::{close, open_ours};
use super::ours;
use crate::{ctx, errno_of, guarded, set_errno};
use libc::{c_char, c_int, c_void};
use pdcx_client::File;
use std::ffi::CStr;
use std::io::SeekFrom;

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
