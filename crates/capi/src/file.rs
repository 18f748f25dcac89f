//! pdcx extension (`pdcx_file.h`): files as byte-stream objects from C, over
//! `pdcx_client::File`, with the deployment `PDCinit` connected to.

use crate::{client, cstr, err, ffi, R};
use libc::{c_char, c_int, c_void, size_t, ssize_t};
use pdcx_client::FileOptions;
use std::io::SeekFrom;
use std::sync::Mutex;

/// What a `PDCXfile *` points to.
pub struct PDCXfile {
    file: Mutex<pdcx_client::File>,
}

fn name_arg<'a>(p: *const c_char) -> R<&'a str> {
    // SAFETY: the caller passes a NUL-terminated string (checked for NULL).
    let s = unsafe { cstr(p, "name") }?;
    Ok(s.strip_prefix("pdcx://").unwrap_or(s))
}

/// Runs `f` on the file behind `f`.
fn with<T>(
    name: &str,
    fail: T,
    f: *mut PDCXfile,
    body: impl FnOnce(&mut pdcx_client::File) -> R<T>,
) -> T {
    ffi(name, fail, || {
        if f.is_null() {
            return Err("the file is NULL".into());
        }
        // SAFETY: a pointer PDCXfile_open returned and PDCXfile_close has not freed.
        let h = unsafe { &*f };
        let mut g = h.file.lock().unwrap_or_else(|p| p.into_inner());
        body(&mut g)
    })
}

/// # Safety
/// `name` and `mode` must be NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_open(name: *const c_char, mode: *const c_char) -> *mut PDCXfile {
    ffi("PDCXfile_open", std::ptr::null_mut(), || {
        let n = name_arg(name)?;
        // SAFETY: as documented.
        let m = unsafe { cstr(mode, "mode") }?;
        let opts = FileOptions::from_env().map_err(err)?;
        let file = client()?
            .file_open(n, m, opts)
            .map_err(|e| format!("{n}: {}", e.message))?;
        Ok(Box::into_raw(Box::new(PDCXfile {
            file: Mutex::new(file),
        })))
    })
}

fn count(n: usize) -> ssize_t {
    ssize_t::try_from(n).unwrap_or(ssize_t::MAX)
}

/// # Safety
/// `f` from `PDCXfile_open`; `buf` holds `n` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_read(f: *mut PDCXfile, buf: *mut c_void, n: size_t) -> ssize_t {
    with("PDCXfile_read", -1, f, |file| {
        if buf.is_null() && n > 0 {
            return Err("buf is NULL".into());
        }
        // SAFETY: as documented.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) };
        file.read(out).map(count).map_err(err)
    })
}

/// # Safety
/// `f` from `PDCXfile_open`; `buf` holds `n` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_write(
    f: *mut PDCXfile,
    buf: *const c_void,
    n: size_t,
) -> ssize_t {
    with("PDCXfile_write", -1, f, |file| {
        if buf.is_null() && n > 0 {
            return Err("buf is NULL".into());
        }
        // SAFETY: as documented.
        let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) };
        file.write(data).map(count).map_err(err)
    })
}

/// # Safety
/// As `PDCXfile_read`.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_pread(
    f: *mut PDCXfile,
    buf: *mut c_void,
    n: size_t,
    offset: u64,
) -> ssize_t {
    with("PDCXfile_pread", -1, f, |file| {
        if buf.is_null() && n > 0 {
            return Err("buf is NULL".into());
        }
        // SAFETY: as documented.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) };
        file.pread(offset, out).map(count).map_err(err)
    })
}

/// # Safety
/// As `PDCXfile_write`.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_pwrite(
    f: *mut PDCXfile,
    buf: *const c_void,
    n: size_t,
    offset: u64,
) -> ssize_t {
    with("PDCXfile_pwrite", -1, f, |file| {
        if buf.is_null() && n > 0 {
            return Err("buf is NULL".into());
        }
        // SAFETY: as documented.
        let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) };
        file.pwrite(offset, data).map(|_| count(n)).map_err(err)
    })
}

/// # Safety
/// `f` from `PDCXfile_open`.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_seek(f: *mut PDCXfile, offset: i64, whence: c_int) -> i64 {
    with("PDCXfile_seek", -1, f, |file| {
        let to = match whence {
            libc::SEEK_SET => SeekFrom::Start(
                u64::try_from(offset).map_err(|_| format!("negative offset {offset}"))?,
            ),
            libc::SEEK_CUR => SeekFrom::Current(offset),
            libc::SEEK_END => SeekFrom::End(offset),
            w => return Err(format!("whence {w} is not SEEK_SET, SEEK_CUR or SEEK_END")),
        };
        file.seek(to).map(|p| p as i64).map_err(err)
    })
}

/// # Safety
/// `f` from `PDCXfile_open`.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_tell(f: *mut PDCXfile) -> i64 {
    with("PDCXfile_tell", -1, f, |file| Ok(file.tell() as i64))
}

/// # Safety
/// `f` from `PDCXfile_open`.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_size(f: *mut PDCXfile) -> i64 {
    with("PDCXfile_size", -1, f, |file| Ok(file.size() as i64))
}

/// # Safety
/// `f` from `PDCXfile_open`.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_truncate(f: *mut PDCXfile, size: u64) -> c_int {
    with("PDCXfile_truncate", -1, f, |file| {
        file.set_len(size).map(|_| 0).map_err(err)
    })
}

/// # Safety
/// `f` from `PDCXfile_open`.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_flush(f: *mut PDCXfile) -> c_int {
    with("PDCXfile_flush", -1, f, |file| {
        file.flush().map(|_| 0).map_err(err)
    })
}

/// # Safety
/// `files` holds `n` pointers from `PDCXfile_open`, each once.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_flush_all(files: *const *mut PDCXfile, n: size_t) -> c_int {
    ffi("PDCXfile_flush_all", -1, || {
        if files.is_null() && n > 0 {
            return Err("files is NULL".into());
        }
        // SAFETY: as documented.
        let ptrs = unsafe { std::slice::from_raw_parts(files, n) };
        let mut seen = std::collections::HashSet::new();
        let mut guards = Vec::with_capacity(n);
        for &p in ptrs {
            if p.is_null() {
                return Err("a file is NULL".into());
            }
            if !seen.insert(p as usize) {
                return Err("a file is listed twice".into());
            }
            // SAFETY: a live handle (as documented).
            let h = unsafe { &*p };
            guards.push(h.file.lock().unwrap_or_else(|e| e.into_inner()));
        }
        let mut refs: Vec<&mut pdcx_client::File> = guards.iter_mut().map(|g| &mut **g).collect();
        pdcx_client::flush_all(&mut refs).map(|_| 0).map_err(err)
    })
}

/// # Safety
/// `f` from `PDCXfile_open`.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_sync(f: *mut PDCXfile) -> c_int {
    with("PDCXfile_sync", -1, f, |file| {
        file.sync().map(|_| 0).map_err(err)
    })
}

/// # Safety
/// `f` from `PDCXfile_open`, not used after this call.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_close(f: *mut PDCXfile) -> c_int {
    ffi("PDCXfile_close", -1, || {
        if f.is_null() {
            return Err("the file is NULL".into());
        }
        // SAFETY: from PDCXfile_open; the caller gives it up here.
        let h = unsafe { Box::from_raw(f) };
        let mut file = h.file.into_inner().unwrap_or_else(|p| p.into_inner());
        file.close()
            .map(|_| 0)
            .map_err(|e| format!("{}: {}", file.name(), e.message))
    })
}

/// # Safety
/// `name` NUL-terminated; `st` writable.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_stat(
    name: *const c_char,
    st: *mut crate::types::PdcxFileStat,
) -> c_int {
    ffi("PDCXfile_stat", -1, || {
        if st.is_null() {
            return Err("st is NULL".into());
        }
        let n = name_arg(name)?;
        let s = client()?
            .file_stat(n)
            .map_err(|e| format!("{n}: {}", e.message))?;
        // SAFETY: as documented.
        unsafe {
            *st = crate::types::PdcxFileStat {
                size: s.size,
                ctime: s.ctime,
                mtime: s.mtime,
            }
        };
        Ok(0)
    })
}

/// # Safety
/// `name` NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_remove(name: *const c_char) -> c_int {
    ffi("PDCXfile_remove", -1, || {
        let n = name_arg(name)?;
        client()?
            .file_remove(n)
            .map(|_| 0)
            .map_err(|e| format!("{n}: {}", e.message))
    })
}

/// # Safety
/// `from` and `to` NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_rename(from: *const c_char, to: *const c_char) -> c_int {
    ffi("PDCXfile_rename", -1, || {
        let (a, b) = (name_arg(from)?, name_arg(to)?);
        client()?
            .file_rename(a, b)
            .map(|_| 0)
            .map_err(|e| format!("{a} -> {b}: {}", e.message))
    })
}

/// # Safety
/// `prefix` NUL-terminated; `names` and `count` writable.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_list(
    prefix: *const c_char,
    names: *mut *mut *mut c_char,
    n: *mut size_t,
) -> c_int {
    ffi("PDCXfile_list", -1, || {
        if names.is_null() || n.is_null() {
            return Err("names or count is NULL".into());
        }
        let p = name_arg(prefix)?;
        let files: Vec<String> = client()?
            .file_list(p)
            .map_err(err)?
            .into_iter()
            .map(|s| s.name)
            .filter(|s| !s.ends_with('/'))
            .collect();
        // malloc'd, so C frees them as it frees anything (and PDCXfile_list_free does).
        // SAFETY: plain allocations of the sizes asked for; checked for NULL.
        let arr = unsafe { libc::malloc(files.len().max(1) * std::mem::size_of::<*mut c_char>()) }
            as *mut *mut c_char;
        if arr.is_null() {
            return Err("out of memory".into());
        }
        for (i, s) in files.iter().enumerate() {
            let c = std::ffi::CString::new(s.as_str()).map_err(|_| "a name holds a NUL")?;
            // SAFETY: `c` is NUL-terminated; strdup copies it into malloc'd memory.
            unsafe { *arr.add(i) = libc::strdup(c.as_ptr()) };
        }
        // SAFETY: as documented.
        unsafe {
            *names = arr;
            *n = files.len();
        }
        Ok(0)
    })
}

/// # Safety
/// `names`/`count` from `PDCXfile_list`.
#[no_mangle]
pub unsafe extern "C" fn PDCXfile_list_free(names: *mut *mut c_char, n: size_t) {
    if names.is_null() {
        return;
    }
    for i in 0..n {
        // SAFETY: each from strdup in PDCXfile_list.
        unsafe { libc::free(*names.add(i) as *mut c_void) };
    }
    // SAFETY: from malloc in PDCXfile_list.
    unsafe { libc::free(names as *mut c_void) };
}
