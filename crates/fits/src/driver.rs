//! The CFITSIO I/O driver for `pdcx://` ("Montage on PDC" §IV-A), registered by this library's
//! constructor. CFITSIO parses `pdcx://NAME[ext][filter]` itself and hands the driver the
//! part after the scheme; the driver maps each CFITSIO handle to one `pdcx_client::File`.
//! Writes are aggregated until flush/close and reads prefetched as `PDCX_FILE_AGGREGATE` /
//! `PDCX_FILE_PREFETCH` say (on and adaptive by default).
//!
//! CFITSIO has room for 31 drivers and registers 30 of its own (some only when built with
//! network support), so registration takes its last free slot; when it is full (a program
//! that registers its own driver), one line says so and `pdcx://` names fail to open.

use crate::{ctx, guarded, names};
use libc::{c_char, c_int, c_long, c_void};
use pdcx_client::File;
use std::ffi::CStr;
use std::io::SeekFrom;
use std::sync::{Mutex, MutexGuard};

/// CFITSIO's status codes (`fitsio.h`).
pub mod status {
    pub const TOO_MANY_FILES: i32 = 103;
    pub const FILE_NOT_OPENED: i32 = 104;
    pub const FILE_NOT_CREATED: i32 = 105;
    pub const WRITE_ERROR: i32 = 106;
    pub const END_OF_FILE: i32 = 107;
    pub const READ_ERROR: i32 = 108;
    pub const FILE_NOT_CLOSED: i32 = 110;
    pub const SEEK_ERROR: i32 = 116;
    pub const URL_PARSE_ERROR: i32 = 125;
}
use status::*;

/// `READONLY` / `READWRITE` of `fitsio.h`.
const READWRITE: c_int = 1;
/// CFITSIO's own limit on open files (`NMAXFILES`, 10000 in 4.2): more handles are useless.
const MAX_HANDLES: usize = 10_000;

static FILES: Mutex<Vec<Option<File>>> = Mutex::new(Vec::new());

fn files() -> MutexGuard<'static, Vec<Option<File>>> {
    FILES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Puts a message on CFITSIO's error stack (shown by `fits_report_error`), when the program
/// has CFITSIO (it always has, when CFITSIO calls us).
fn say(msg: &str) {
    type Ffpmsg = unsafe extern "C" fn(*const c_char);
    static SYM: &[u8] = b"ffpmsg\0";
    // SAFETY: dlsym with a NUL-terminated name; ffpmsg has this C type in CFITSIO 4.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, SYM.as_ptr().cast()) };
    if p.is_null() {
        return;
    }
    // CFITSIO keeps 80 characters per message: split longer ones.
    let text = format!("pdcx: {msg}");
    for chunk in text.as_bytes().chunks(79) {
        let mut c = chunk.to_vec();
        c.retain(|&b| b != 0);
        c.push(0);
        // SAFETY: `c` is NUL-terminated; CFITSIO copies it.
        unsafe { std::mem::transmute::<*mut c_void, Ffpmsg>(p)(c.as_ptr().cast()) };
    }
}

/// The object name CFITSIO gave (with or without the scheme).
fn name_of(filename: *const c_char) -> Result<String, String> {
    if filename.is_null() {
        return Err("no file name".into());
    }
    // SAFETY: CFITSIO passes a NUL-terminated string.
    let raw = unsafe { CStr::from_ptr(filename) }.to_bytes();
    let rest = names::strip(raw).unwrap_or_else(|| std::str::from_utf8(raw).unwrap_or(""));
    names::file_name(rest).map_err(|e| e.message)
}

fn insert(f: File) -> Result<c_int, c_int> {
    let mut t = files();
    let slot = match t.iter().position(Option::is_none) {
        Some(i) => i,
        None if t.len() < MAX_HANDLES => {
            t.push(None);
            t.len() - 1
        }
        None => return Err(TOO_MANY_FILES),
    };
    t[slot] = Some(f);
    Ok(slot as c_int)
}

/// Runs `f` on open handle `h`; `fail` when there is none or `f` fails.
fn with(
    h: c_int,
    what: &str,
    fail: c_int,
    f: impl FnOnce(&mut File) -> Result<c_int, String>,
) -> c_int {
    guarded(what, fail, || {
        let mut t = files();
        let Some(Some(file)) = usize::try_from(h).ok().and_then(|i| t.get_mut(i)) else {
            say(&format!("{what}: no open file has handle {h}"));
            return fail;
        };
        match f(file) {
            Ok(v) => v,
            Err(m) => {
                say(&format!("{what} {}: {m}", file.name()));
                fail
            }
        }
    })
}

extern "C" fn drv_init() -> c_int {
    0
}
extern "C" fn drv_shutdown() -> c_int {
    0
}
extern "C" fn drv_setoptions(_o: c_int) -> c_int {
    0
}
extern "C" fn drv_getoptions(o: *mut c_int) -> c_int {
    if !o.is_null() {
        // SAFETY: CFITSIO passes a valid pointer.
        unsafe { *o = 0 };
    }
    0
}
extern "C" fn drv_getversion(v: *mut c_int) -> c_int {
    if !v.is_null() {
        // SAFETY: as above.
        unsafe { *v = 10 };
    }
    0
}

/// Called before an open with the parsed input and output names: refuses a name that
/// would leave its prefix before anything is opened.
extern "C" fn drv_checkfile(
    _urltype: *mut c_char,
    infile: *mut c_char,
    _outfile: *mut c_char,
) -> c_int {
    guarded("checkfile", URL_PARSE_ERROR, || match name_of(infile) {
        Ok(_) => 0,
        Err(m) => {
            say(&m);
            URL_PARSE_ERROR
        }
    })
}

fn open_with(filename: *const c_char, mode: &str, handle: *mut c_int, fail: c_int) -> c_int {
    guarded("open", fail, || {
        let name = match name_of(filename) {
            Ok(n) => n,
            Err(m) => {
                say(&m);
                return fail;
            }
        };
        let c = match ctx() {
            Ok(c) => c,
            Err(m) => {
                say(m);
                return fail;
            }
        };
        let f = match c.client.file_open(&name, mode, c.opts) {
            Ok(f) => f,
            Err(e) => {
                say(&format!("{name}: {}", e.message));
                return fail;
            }
        };
        crate::stats::add(
            if mode.starts_with('x') {
                &crate::stats::CREATES
            } else {
                &crate::stats::OPENS
            },
            1,
        );
        match insert(f) {
            Ok(h) => {
                // SAFETY: CFITSIO passes a valid pointer.
                unsafe { *handle = h };
                0
            }
            Err(s) => s,
        }
    })
}

extern "C" fn drv_open(filename: *mut c_char, rwmode: c_int, handle: *mut c_int) -> c_int {
    let mode = if rwmode == READWRITE { "r+b" } else { "rb" };
    open_with(filename, mode, handle, FILE_NOT_OPENED)
}

/// CFITSIO creates only files that do not exist (`!name` removes first): `x` mode.
extern "C" fn drv_create(filename: *mut c_char, handle: *mut c_int) -> c_int {
    open_with(filename, "x+b", handle, FILE_NOT_CREATED)
}

extern "C" fn drv_truncate(h: c_int, size: i64) -> c_int {
    with(h, "truncate", WRITE_ERROR, |f| {
        let len = u64::try_from(size).map_err(|_| format!("negative size {size}"))?;
        f.set_len(len).map(|_| 0).map_err(|e| e.message)
    })
}

extern "C" fn drv_close(h: c_int) -> c_int {
    guarded("close", FILE_NOT_CLOSED, || {
        let taken = usize::try_from(h)
            .ok()
            .and_then(|i| files().get_mut(i).and_then(Option::take));
        let Some(mut f) = taken else {
            say(&format!("close: no open file has handle {h}"));
            return FILE_NOT_CLOSED;
        };
        crate::stats::add(&crate::stats::READ_FETCHES, f.fetches());
        match f.close() {
            Ok(()) => 0,
            Err(e) => {
                say(&format!("close {}: {}", f.name(), e.message));
                FILE_NOT_CLOSED
            }
        }
    })
}

extern "C" fn drv_remove(filename: *mut c_char) -> c_int {
    guarded("remove", FILE_NOT_OPENED, || {
        let r = name_of(filename).and_then(|n| {
            let c = ctx().map_err(str::to_string)?;
            c.client
                .file_remove(&n)
                .map_err(|e| format!("{n}: {}", e.message))
        });
        match r {
            Ok(()) => 0,
            Err(m) => {
                say(&format!("remove: {m}"));
                FILE_NOT_OPENED
            }
        }
    })
}

extern "C" fn drv_size(h: c_int, size: *mut i64) -> c_int {
    with(h, "size", READ_ERROR, |f| {
        // SAFETY: CFITSIO passes a valid pointer.
        unsafe { *size = f.size() as i64 };
        Ok(0)
    })
}

extern "C" fn drv_flush(h: c_int) -> c_int {
    with(h, "flush", WRITE_ERROR, |f| {
        f.flush().map(|_| 0).map_err(|e| e.message)
    })
}

extern "C" fn drv_seek(h: c_int, offset: i64) -> c_int {
    with(h, "seek", SEEK_ERROR, |f| {
        let off = u64::try_from(offset).map_err(|_| format!("negative offset {offset}"))?;
        f.seek(SeekFrom::Start(off))
            .map(|_| 0)
            .map_err(|e| e.message)
    })
}

extern "C" fn drv_read(h: c_int, buffer: *mut c_void, nbytes: c_long) -> c_int {
    let Ok(n) = usize::try_from(nbytes) else {
        return READ_ERROR;
    };
    with(h, "read", READ_ERROR, |f| {
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: CFITSIO passes a buffer of `nbytes` bytes.
        let out = unsafe { std::slice::from_raw_parts_mut(buffer.cast::<u8>(), n) };
        let got = f.read_full(out).map_err(|e| e.message)?;
        crate::stats::add(&crate::stats::BYTES_READ, got as u64);
        // As CFITSIO's own file driver: reading past the end is END_OF_FILE, which CFITSIO
        // expects when it probes for more HDUs.
        Ok(if got == n { 0 } else { END_OF_FILE })
    })
}

extern "C" fn drv_write(h: c_int, buffer: *mut c_void, nbytes: c_long) -> c_int {
    let Ok(n) = usize::try_from(nbytes) else {
        return WRITE_ERROR;
    };
    with(h, "write", WRITE_ERROR, |f| {
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: CFITSIO passes a buffer of `nbytes` bytes.
        let data = unsafe { std::slice::from_raw_parts(buffer.cast::<u8>(), n) };
        crate::stats::add(&crate::stats::BYTES_WRITTEN, n as u64);
        f.write(data).map(|_| 0).map_err(|e| e.message)
    })
}

type Register = unsafe extern "C" fn(
    *const c_char,
    extern "C" fn() -> c_int,
    extern "C" fn() -> c_int,
    extern "C" fn(c_int) -> c_int,
    extern "C" fn(*mut c_int) -> c_int,
    extern "C" fn(*mut c_int) -> c_int,
    extern "C" fn(*mut c_char, *mut c_char, *mut c_char) -> c_int,
    extern "C" fn(*mut c_char, c_int, *mut c_int) -> c_int,
    extern "C" fn(*mut c_char, *mut c_int) -> c_int,
    extern "C" fn(c_int, i64) -> c_int,
    extern "C" fn(c_int) -> c_int,
    extern "C" fn(*mut c_char) -> c_int,
    extern "C" fn(c_int, *mut i64) -> c_int,
    extern "C" fn(c_int) -> c_int,
    extern "C" fn(c_int, i64) -> c_int,
    extern "C" fn(c_int, *mut c_void, c_long) -> c_int,
    extern "C" fn(c_int, *mut c_void, c_long) -> c_int,
) -> c_int;

/// Registers the driver when the program has CFITSIO; returns CFITSIO's status (or None
/// when the program has no CFITSIO).
pub fn register() -> Option<c_int> {
    // SAFETY: dlsym with NUL-terminated names; the symbols have these C types in CFITSIO 4.
    unsafe {
        let reg = libc::dlsym(libc::RTLD_DEFAULT, c"fits_register_driver".as_ptr());
        let init = libc::dlsym(libc::RTLD_DEFAULT, c"fits_init_cfitsio".as_ptr());
        if reg.is_null() || init.is_null() {
            return None;
        }
        // CFITSIO's own drivers first (it registers them once, at its first open, and would
        // otherwise take the slot after ours).
        let init: unsafe extern "C" fn() -> c_int = std::mem::transmute(init);
        let s = init();
        if s != 0 {
            return Some(s);
        }
        let reg: Register = std::mem::transmute(reg);
        Some(reg(
            c"pdcx://".as_ptr(),
            drv_init,
            drv_shutdown,
            drv_setoptions,
            drv_getoptions,
            drv_getversion,
            drv_checkfile,
            drv_open,
            drv_create,
            drv_truncate,
            drv_close,
            drv_remove,
            drv_size,
            drv_flush,
            drv_seek,
            drv_read,
            drv_write,
        ))
    }
}

#[cfg_attr(test, allow(dead_code))]
extern "C" fn constructor() {
    if !pdcx_core::config::FITS.switch_or_default() {
        return;
    }
    match register() {
        None | Some(0) => {}
        Some(s) => eprintln!(
            "pdcx fits: CFITSIO refused the pdcx:// driver (status {s}: its driver table is full?); pdcx:// files will not open"
        ),
    }
}

/// Runs at load (`LD_PRELOAD`), after the libraries the program links (CFITSIO) are loaded.
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;
