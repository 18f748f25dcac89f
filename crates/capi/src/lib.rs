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
pub mod file;
pub mod mpi;
pub mod obj;
pub mod prop;
pub mod query;
pub mod region;
pub mod types;
pub mod versions;
pub mod xsite;

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
pub(crate) const FIRST_HANDLE: u64 = 1 << 56;

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

/// The outcome of a tag delete as PDC reports it: deleting a tag that is not there succeeds
/// (PDC's server removes it from the list if present and answers SUCCEED either way; its
/// `cont_tags` test, run by 6 ranks on shared containers, relies on it). Any other error, a
/// container or object that does not exist included, stays an error.
pub fn tag_deleted(r: pdcx_core::Result<()>) -> R<()> {
    match r {
        Err(e) if e.is_no_tag() => Ok(()),
        r => r.map_err(err),
    }
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

/// Hands a malloc'd array of `values` and its length to a C caller (who frees it), the way
/// PDC returns dims and id lists.
///
/// # Safety
/// `len_out` and `array_out` must be non-NULL and writable.
pub unsafe fn give_u64_array(
    values: &[u64],
    len_out: *mut libc::c_int,
    array_out: *mut *mut u64,
) -> R<()> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let len = libc::c_int::try_from(values.len()).map_err(|_| "too many values for a C int")?;
    let p = malloc_copy(&bytes)?;
    // SAFETY: the caller promises writable out pointers.
    unsafe {
        *len_out = len;
        *array_out = p as *mut u64;
    }
    Ok(())
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

/// PDC's timing report: 0 and nothing printed, as in PDC builds without `PDC_TIMING` (pdcx's
/// timings are its servers' metrics). Lets programs written for PDC link unchanged.
#[no_mangle]
pub extern "C" fn PDC_timing_report(_prefix: *const std::ffi::c_char) -> std::ffi::c_int {
    0
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
        // The consistency point of every relaxed write left (PDCclose ends the session).
        let synced = client().and_then(|c| c.sync_all().map_err(err));
        let mut st = state();
        st.handles.clear();
        st.arena.clear();
        st.iter_nodes.clear();
        st.client = None;
        st.pdc_id = 0;
        synced
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::*;
    use pdcx_core::{Dtype, TagValue};

    #[test]
    fn panics_and_errors_become_failure_values() {
        assert_eq!(ffi("t", 7, || -> R<i32> { panic!("boom") }), 7);
        assert_eq!(ffi_err("t", || Err("bad".into())), FAIL);
        assert_eq!(ffi_err("t", || Ok(())), SUCCEED);
    }

    #[test]
    fn handle_ids_are_never_zero_and_never_look_like_object_ids() {
        let mut st = State::default();
        let a = st.insert(Handle::Pdc);
        let b = st.insert(Handle::Pdc);
        assert!(a >= FIRST_HANDLE && b > a);
        assert!(st.get(0).is_err());
        assert!(st.get(pdcx_core::model::make_object_id(255, 1)).is_err());
    }

    #[test]
    fn var_types_round_trip_through_dtypes() {
        for d in pdcx_core::dtype::ALL_DTYPES {
            assert_eq!(dtype_of(var_type_of(d)).unwrap(), d);
        }
        assert_eq!(dtype_of(PDC_LONG).unwrap(), Dtype::Int64);
        assert_eq!(dtype_of(PDC_INT).unwrap().size(), 4);
        assert!(dtype_of(PDC_UNKNOWN).is_err());
        assert!(dtype_of(PDC_STRING).is_err());
        assert!(dtype_of(99).is_err());
    }

    #[test]
    fn tags_convert_both_ways() {
        let s = b"abc\0";
        // SAFETY: pointers into live local arrays of the given sizes.
        let v = unsafe { cont::tag_from_c(s.as_ptr() as *const _, PDC_STRING, 4) }.unwrap();
        assert_eq!(v, TagValue::Str("abc".into()));
        assert_eq!(cont::tag_to_c(&v), (s.to_vec(), PDC_STRING));
        let i = 5i32.to_ne_bytes();
        let v = unsafe { cont::tag_from_c(i.as_ptr() as *const _, PDC_INT, 4) }.unwrap();
        assert_eq!(v, TagValue::Bytes(i.to_vec()));
        assert_eq!(
            cont::tag_to_c(&TagValue::Int(-2)),
            ((-2i64).to_ne_bytes().to_vec(), PDC_INT64)
        );
        assert_eq!(cont::tag_to_c(&TagValue::Float(0.5)).1, PDC_DOUBLE);
        assert!(unsafe { cont::tag_from_c(std::ptr::null(), PDC_INT, 4) }.is_err());
    }

    /// End to end through the exported functions against an in-process server.
    #[test]
    fn write_and_read_back_through_the_c_entry_points() {
        let dir = tempfile::tempdir().unwrap();
        let h =
            pdcx_server::Server::start(pdcx_server::ServerConfig::new(dir.path(), 0, 1)).unwrap();
        h.server.publish_rank_file().unwrap();
        pdcx_server::launch::assemble_cluster(dir.path(), 1, std::time::Duration::from_secs(30))
            .unwrap();
        std::env::set_var("PDCX_ROOT", dir.path());
        // SAFETY: valid C strings and arrays that outlive each call.
        unsafe {
            let pdc = PDCinit(c"t".as_ptr());
            assert_ne!(pdc, 0);
            let cp = prop::PDCprop_create(PDC_CONT_CREATE, pdc);
            let cont = cont::PDCcont_create(c"c".as_ptr(), cp);
            assert_ne!(cont, 0);
            let op = prop::PDCprop_create(PDC_OBJ_CREATE, pdc);
            let mut dims = [3u64, 4];
            assert_eq!(
                prop::PDCprop_set_obj_dims(op, 2, dims.as_mut_ptr()),
                SUCCEED
            );
            assert_eq!(prop::PDCprop_set_obj_type(op, PDC_INT16), SUCCEED);
            let obj = obj::PDCobj_create(cont, c"c/o".as_ptr(), op);
            assert_ne!(obj, 0);
            let mut zero = [0u64, 0];
            let all = region::PDCregion_create(2, zero.as_mut_ptr(), dims.as_mut_ptr());
            let mut w: Vec<i16> = (0..12).collect();
            let t = region::PDCregion_transfer_create(
                w.as_mut_ptr() as *mut _,
                PDC_WRITE,
                obj,
                all,
                all,
            );
            assert_eq!(region::PDCregion_transfer_start(t), SUCCEED);
            assert_eq!(region::PDCregion_transfer_wait(t), SUCCEED);
            let (mut off, mut cnt) = ([1u64, 1], [2u64, 2]);
            let sub = region::PDCregion_create(2, off.as_mut_ptr(), cnt.as_mut_ptr());
            let mut lz = [0u64, 0];
            let local = region::PDCregion_create(2, lz.as_mut_ptr(), cnt.as_mut_ptr());
            let mut r = [0i16; 4];
            let t2 = region::PDCregion_transfer_create(
                r.as_mut_ptr() as *mut _,
                PDC_READ,
                obj,
                local,
                sub,
            );
            assert_eq!(region::PDCregion_transfer_start(t2), SUCCEED);
            assert_eq!(region::PDCregion_transfer_wait(t2), SUCCEED);
            assert_eq!(r, [5, 6, 9, 10]);
            assert_eq!(region::PDCobj_close(obj), SUCCEED);
            assert_eq!(PDCclose(pdc), SUCCEED);
        }
        h.shutdown().unwrap();
    }
}
