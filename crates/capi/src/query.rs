//! PDCquery_*: value queries over object data are not implemented yet. The calls exist so
//! PDC programs link; each fails with a clear message. (Tag queries: PDCobj_get_id.)

use crate::{ffi, PdcId, Perr, FAIL};
use libc::{c_int, c_void};

const MSG: &str = "pdcx: value queries are not supported yet";

fn unsupported(name: &str) {
    eprintln!("{MSG} ({name})");
}

macro_rules! query_null {
    ($name:ident, $($arg:ident : $t:ty),*) => {
        #[no_mangle]
        pub extern "C" fn $name($($arg: $t),*) -> *mut c_void {
            $(let _ = $arg;)*
            ffi(stringify!($name), std::ptr::null_mut(), || {
                unsupported(stringify!($name));
                Ok(std::ptr::null_mut())
            })
        }
    };
}

macro_rules! query_fail {
    ($name:ident, $($arg:ident : $t:ty),*) => {
        #[no_mangle]
        pub extern "C" fn $name($($arg: $t),*) -> Perr {
            $(let _ = $arg;)*
            ffi(stringify!($name), FAIL, || {
                unsupported(stringify!($name));
                Ok(FAIL)
            })
        }
    };
}

macro_rules! query_void {
    ($name:ident, $($arg:ident : $t:ty),*) => {
        #[no_mangle]
        pub extern "C" fn $name($($arg: $t),*) {
            $(let _ = $arg;)*
            ffi(stringify!($name), (), || {
                unsupported(stringify!($name));
                Ok(())
            })
        }
    };
}

query_null!(PDCquery_create, obj_id: PdcId, op: c_int, type_: c_int, value: *mut c_void);
query_null!(PDCquery_and, q1: *mut c_void, q2: *mut c_void);
query_null!(PDCquery_or, q1: *mut c_void, q2: *mut c_void);
query_fail!(PDCquery_sel_region, q: *mut c_void, region: *mut c_void);
query_fail!(PDCquery_get_selection, q: *mut c_void, sel: *mut c_void);
query_fail!(PDCquery_get_nhits, q: *mut c_void, n: *mut u64);
query_fail!(PDCquery_get_data, obj_id: PdcId, sel: *mut c_void, data: *mut c_void);
query_fail!(PDCquery_get_histogram, obj_id: PdcId);
query_fail!(PDCquery_get_sel_data, q: *mut c_void, sel: *mut c_void, data: *mut c_void);
query_fail!(PDCobj_prop_query, cont_id: PdcId, prop_name: c_int, value: *mut c_void, out_ids: *mut c_void, n_out: *mut c_void);
query_void!(PDCselection_free, sel: *mut c_void);
query_void!(PDCselection_print, sel: *mut c_void);
query_void!(PDCselection_print_all, sel: *mut c_void);
query_void!(PDCquery_print, q: *mut c_void);

/// Queries are never created, so there is nothing to free (NULL is accepted silently).
#[no_mangle]
pub extern "C" fn PDCquery_free(_q: *mut c_void) {}

#[no_mangle]
pub extern "C" fn PDCquery_free_all(_q: *mut c_void) {}
