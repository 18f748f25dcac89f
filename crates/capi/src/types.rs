//! C-visible structs and enum values, laid out exactly as `include/pdc_*.h` declares them
//! (which follow PDC's public headers).

use crate::{PdcId, R};
use libc::{c_char, c_int, c_void, size_t};
use pdcx_core::Dtype;

// pdc_var_type_t (PDC's pdc_generic.h numbering).
pub const PDC_UNKNOWN: c_int = 0;
pub const PDC_SHORT: c_int = 1;
pub const PDC_INT: c_int = 2;
pub const PDC_UINT: c_int = 3;
pub const PDC_LONG: c_int = 4;
pub const PDC_INT8: c_int = 5;
pub const PDC_UINT8: c_int = 6;
pub const PDC_INT16: c_int = 7;
pub const PDC_UINT16: c_int = 8;
pub const PDC_INT32: c_int = 9;
pub const PDC_UINT32: c_int = 10;
pub const PDC_INT64: c_int = 11;
pub const PDC_UINT64: c_int = 12;
pub const PDC_FLOAT: c_int = 13;
pub const PDC_DOUBLE: c_int = 14;
pub const PDC_CHAR: c_int = 15;
pub const PDC_STRING: c_int = 16;
pub const PDC_BOOLEAN: c_int = 17;
pub const PDC_VOID_PTR: c_int = 18;
pub const PDC_SIZE_T: c_int = 19;

// pdc_access_t
pub const PDC_READ: c_int = 1;
pub const PDC_WRITE: c_int = 2;

// pdc_prop_type_t
pub const PDC_CONT_CREATE: c_int = 0;
pub const PDC_OBJ_CREATE: c_int = 1;

// pdc_transfer_status_t
pub const PDC_TRANSFER_STATUS_COMPLETE: c_int = 0;
pub const PDC_TRANSFER_STATUS_PENDING: c_int = 1;
pub const PDC_TRANSFER_STATUS_NOT_FOUND: c_int = 2;

// pdc_consistency_t (the relaxed ones; the others are strong)
pub const PDC_CONSISTENCY_SESSION: c_int = 3;

// pdcx durability levels (PDCXprop_set_obj_durability)
pub const PDCX_DURABILITY_MEMORY: c_int = 0;
pub const PDCX_DURABILITY_LOCAL: c_int = 1;
pub const PDCX_DURABILITY_REMOTE: c_int = 2;
pub const PDC_CONSISTENCY_EVENTUAL: c_int = 4;

// pdc_lifetime_t
pub const PDC_PERSIST: c_int = 0;
pub const PDC_TRANSIENT: c_int = 1;

/// `PDC_SIZE_UNLIMITED`: a dimension that grows with the writes into it.
pub const PDC_SIZE_UNLIMITED: u64 = u64::MAX;

/// The pdcx element type of a PDC variable type.
pub fn dtype_of(t: c_int) -> R<Dtype> {
    Ok(match t {
        PDC_SHORT | PDC_INT16 => Dtype::Int16,
        PDC_INT | PDC_INT32 => Dtype::Int32,
        PDC_UINT | PDC_UINT32 => Dtype::UInt32,
        PDC_LONG | PDC_INT64 => Dtype::Int64,
        PDC_INT8 => Dtype::Int8,
        PDC_UINT8 | PDC_BOOLEAN => Dtype::UInt8,
        PDC_UINT16 => Dtype::UInt16,
        PDC_UINT64 | PDC_SIZE_T | PDC_VOID_PTR => Dtype::UInt64,
        PDC_FLOAT => Dtype::Float32,
        PDC_DOUBLE => Dtype::Float64,
        PDC_CHAR => Dtype::Bytes,
        PDC_STRING => return Err("PDC_STRING is not an array element type; use PDC_CHAR".into()),
        _ => return Err(format!("unsupported pdc_var_type_t {t}")),
    })
}

/// The PDC variable type reported for a pdcx element type.
pub fn var_type_of(d: Dtype) -> c_int {
    match d {
        Dtype::Int8 => PDC_INT8,
        Dtype::Int16 => PDC_INT16,
        Dtype::Int32 => PDC_INT,
        Dtype::Int64 => PDC_INT64,
        Dtype::UInt8 => PDC_UINT8,
        Dtype::UInt16 => PDC_UINT16,
        Dtype::UInt32 => PDC_UINT,
        Dtype::UInt64 => PDC_UINT64,
        Dtype::Float32 => PDC_FLOAT,
        Dtype::Float64 => PDC_DOUBLE,
        Dtype::Bytes => PDC_CHAR,
    }
}

#[repr(C)]
pub struct PdcObjProp {
    pub obj_prop_id: PdcId,
    pub ndim: size_t,
    pub dims: *mut u64,
    pub type_: c_int,
    pub region_partition: c_int,
    pub consistency: c_int,
}

#[repr(C)]
pub struct PdcObjInfo {
    pub name: *mut c_char,
    pub meta_id: PdcId,
    pub local_id: PdcId,
    pub server_id: c_int,
    pub metadata_server_id: u32,
    pub obj_pt: *mut PdcObjProp,
}

#[repr(C)]
pub struct PdcContInfo {
    pub name: *mut c_char,
    pub local_id: PdcId,
    pub meta_id: u64,
}

#[repr(C)]
pub struct PdcRegionInfo {
    pub local_id: PdcId,
    pub obj: *mut c_void,
    pub ndim: size_t,
    pub offset: *mut u64,
    pub size: *mut u64,
    pub mapping: bool,
    pub registered_op: c_int,
    pub buf: *mut c_void,
    pub unit: size_t,
}

/// A public property block whose pointers stay valid while it is boxed and unchanged.
pub struct ObjPropBlock {
    pub prop: PdcObjProp,
    pub dims: Vec<u64>,
}

impl ObjPropBlock {
    pub fn new(
        prop_id: PdcId,
        dims: &[u64],
        type_: c_int,
        partition: c_int,
        consistency: c_int,
    ) -> Box<Self> {
        let mut b = Box::new(ObjPropBlock {
            prop: PdcObjProp {
                obj_prop_id: prop_id,
                ndim: dims.len(),
                dims: std::ptr::null_mut(),
                type_,
                region_partition: partition,
                consistency,
            },
            dims: dims.to_vec(),
        });
        b.prop.dims = b.dims.as_mut_ptr();
        b
    }

    pub fn set_dims(&mut self, dims: &[u64]) {
        self.dims = dims.to_vec();
        self.prop.ndim = dims.len();
        self.prop.dims = self.dims.as_mut_ptr();
    }
}

/// `struct pdc_obj_info` with everything it points to.
pub struct ObjInfoBlock {
    pub info: PdcObjInfo,
    pub name: std::ffi::CString,
    pub prop: Box<ObjPropBlock>,
}

// SAFETY: the raw pointers point into the block itself; it is only touched under the state lock.
unsafe impl Send for ObjInfoBlock {}
unsafe impl Send for ObjPropBlock {}
unsafe impl Send for ContInfoBlock {}

/// PDC's type of an object: `PDC_UNKNOWN` while it has none.
pub fn c_type_of(meta: &pdcx_core::ObjectMeta) -> c_int {
    if meta.is_untyped() {
        PDC_UNKNOWN
    } else {
        var_type_of(meta.dtype)
    }
}

impl ObjInfoBlock {
    pub fn new(
        meta: &pdcx_core::ObjectMeta,
        local_id: PdcId,
        prop_id: PdcId,
        partition: c_int,
        consistency: c_int,
    ) -> Box<Self> {
        let name = std::ffi::CString::new(meta.name.replace('\0', "")).unwrap_or_default();
        let mut b = Box::new(ObjInfoBlock {
            info: PdcObjInfo {
                name: std::ptr::null_mut(),
                meta_id: meta.id,
                local_id,
                server_id: meta.owner as c_int,
                metadata_server_id: meta.owner,
                obj_pt: std::ptr::null_mut(),
            },
            name,
            prop: ObjPropBlock::new(prop_id, &meta.dims, c_type_of(meta), partition, consistency),
        });
        b.info.name = b.name.as_ptr() as *mut c_char;
        b.info.obj_pt = &mut b.prop.prop;
        b
    }
}

/// `struct pdc_cont_info` with its name.
pub struct ContInfoBlock {
    pub info: PdcContInfo,
    pub name: std::ffi::CString,
}

impl ContInfoBlock {
    pub fn new(name: &str, local_id: PdcId, meta_id: u64) -> Box<Self> {
        let name = std::ffi::CString::new(name.replace('\0', "")).unwrap_or_default();
        let mut b = Box::new(ContInfoBlock {
            info: PdcContInfo {
                name: std::ptr::null_mut(),
                local_id,
                meta_id,
            },
            name,
        });
        b.info.name = b.name.as_ptr() as *mut c_char;
        b
    }
}

/// `PDCXfile_stat_t` (`pdcx_file.h`).
#[repr(C)]
pub struct PdcxFileStat {
    pub size: u64,
    pub ctime: f64,
    pub mtime: f64,
}
