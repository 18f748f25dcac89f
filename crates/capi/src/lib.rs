//! libpdcx: the Proactive Data Containers (PDC) C API implemented over the pdcx client.
//!
//! Every exported function goes through [`ffi`], which catches panics (nothing unwinds into
//! C), prints failures to stderr as `pdcx: FUNCTION: message`, and returns PDC's failure
//! value (`FAIL` = -1 for `perr_t`, 0 for ids, NULL for pointers).
//!
//! Ids handed to C live in one process-global handle table ([`state`]). Handle ids start at
//! 2^56, so they never collide with pdcx object ids (`server << 48 | local`), which are what
//! `meta_id` fields and `PDCcont_get_objids` report.

pub mod cont;
pub mod mpi;
pub mod obj;
pub mod prop;
pub mod query;
pub mod region;
pub mod types;

use pdcx_client::Client;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, CStr};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

pub type PdcId = u64;
pub type Perr = libc::c_int;
pub const SUCCEED: Perr = 0;
pub const FAIL: Perr = -1;

/// Result of an entry point's body: the message goes to stderr on failure.
pub type R<T> = Result<T, String>;

/// First handle id; pdcx object ids are below 2^56 for up to 256 servers.
const FIRST_HANDLE: u64 = 1 << 56;

pub enum Handle {
    Pdc,
    Prop(Box<prop::Prop>),
    Cont(Box<cont::Cont>),
    Obj(Box<obj::Obj>),
    Region(Box<region::RegionHandle>),
    Transfer(Arc<Mutex<region::Xfer>>),
}

impl Handle {
    pub fn kind(&self) -> &'static str {
        match self {
            Handle::Pdc => "PDC instance",
            Handle::Prop(_) => "property",
            Handle::Cont(_) => "container",
            Handle::Obj(_) => "object",
            Handle::Region(_) => "region",
            Handle::Transfer(_) => "transfer request",
        }
    }
}

#[derive(Default)]
pub struct State {
    pub client: Option<Client>,
    pub pdc_id: PdcId,
    pub handles: HashMap<PdcId, Handle>,
    next: u64,
    /// Infos returned by calls that have no handle to own them (PDCcont_get_info, iterators);
    /// freed at PDCclose.
    pub arena: Vec<Box<dyn std::any::Any + Send>>,
    /// Addresses of live iterator nodes, so a stale or foreign pointer is refused.
    pub iter_nodes: HashSet<usize>,
}

impl State {
    pub fn insert(&mut self, h: Handle) -> PdcId {
        if self.next < FIRST_HANDLE {
            self.next = FIRST_HANDLE;
        }
        self.next += 1;
        self.handles.insert(self.next, h);
        self.next
    }

    pub fn get(&self, id: PdcId) -> R<&Handle> {
        self.handles
            .get(&id)
            .ok_or_else(|| format!("unknown id {id:#x} (never created, or already closed)"))
    }

    pub fn get_mut(&mut self, id: PdcId) -> R<&mut Handle> {
        self.handles
            .get_mut(&id)
            .ok_or_else(|| format!("unknown id {id:#x} (never created, or already closed)"))
    }

    pub fn client(&self) -> R<Client> {
        self.client
            .clone()
            .ok_or_else(|| "PDCinit has not been called (or PDCclose already was)".to_string())
    }
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| Mutex::new(State::default()));

/// The handle table. Never hold it across a blocking wait on a transfer.
pub fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn client() -> R<Client> {
    state().client()
}

/// Runs one entry point: catches panics, reports errors on stderr, returns `fail` on error.
pub fn ffi<T>(name: &str, fail: T, body: impl FnOnce() -> R<T>) -> T {
    match std::panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(msg)) => {
            eprintln!("pdcx: {name}: {msg}");
            fail
        }
        Err(_) => {
            eprintln!("pdcx: {name}: internal error (a bug in libpdcx); the call failed");
            fail
        }
    }
}

/// Like [`ffi`] for `perr_t` functions.
pub fn ffi_err(name: &str, body: impl FnOnce() -> R<()>) -> Perr {
    ffi(name, FAIL, || body().map(|_| SUCCEED))
}

pub fn err(e: pdcx_core::Error) -> String {
    e.message
}

/// Reads a C string argument.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string.
pub unsafe fn cstr<'a>(p: *const c_char, what: &str) -> R<&'a str> {
    if p.is_null() {
        return Err(format!("{what} is NULL"));
    }
    // SAFETY: the caller promises a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| format!("{what} is not valid UTF-8"))
}

/// Reads `n` u64 values from a C array argument.
///
/// # Safety
/// `p` must be NULL or point to at least `n` readable u64 values.
pub unsafe fn u64s(p: *const u64, n: usize, what: &str) -> R<Vec<u64>> {
    if p.is_null() {
        return Err(format!("{what} is NULL"));
    }
    // SAFETY: the caller promises `n` readable values.
    Ok(unsafe { std::slice::from_raw_parts(p, n) }.to_vec())
}

/// Copies bytes into a fresh malloc'd block (C frees it with free()).
pub fn malloc_copy(bytes: &[u8]) -> R<*mut libc::c_void> {
    // SAFETY: malloc of at least one byte; the copy stays within the new block.
    unsafe {
        let p = libc::malloc(bytes.len().max(1));
        if p.is_null() {
            return Err("out of memory".into());
        }
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p as *mut u8, bytes.len());
        Ok(p)
    }
}

/// Initializes the library and joins the deployment named by `PDCX_ROOT`.
///
/// # Safety
/// `pdc_name` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PDCinit(pdc_name: *const c_char) -> PdcId {
    ffi("PDCinit", 0, || {
        let _name = if pdc_name.is_null() {
            "pdc"
        } else {
            // SAFETY: checked non-null; the caller promises a C string.
            unsafe { cstr(pdc_name, "pdc_name") }?
        };
        let mut st = state();
        if st.client.is_some() && st.pdc_id != 0 {
            return Ok(st.pdc_id);
        }
        let c = Client::connect(None).map_err(|e| {
            format!(
                "cannot join a pdcx deployment: {} (start one with `pdcx server start -n N --root DIR` and export PDCX_ROOT=DIR)",
                e.message
            )
        })?;
        st.client = Some(c);
        let id = st.insert(Handle::Pdc);
        st.pdc_id = id;
        Ok(id)
    })
}

/// Waits for every started transfer, frees every handle and leaves the deployment.
#[no_mangle]
pub extern "C" fn PDCclose(pdc_id: PdcId) -> Perr {
    ffi_err("PDCclose", || {
        {
            let st = state();
            match st.get(pdc_id)? {
                Handle::Pdc => {}
                h => {
                    return Err(format!(
                        "id {pdc_id:#x} is a {}, not a PDC instance",
                        h.kind()
                    ))
                }
            }
        }
        region::wait_everything();
        let mut st = state();
        st.handles.clear();
        st.arena.clear();
        st.iter_nodes.clear();
        st.client = None;
        st.pdc_id = 0;
        Ok(())
    })
}
