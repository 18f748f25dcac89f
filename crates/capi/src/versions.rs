//! Versions of an object (pdcx-only, `pdcx_ext.h`): every write of an object is a version, the
//! object as of that write; its tags decide which compaction keeps (`pdcx.keep.last`,
//! `pdcx.keep.seconds`, and named ones, `pdcx.version.NAME`).

use crate::obj::typed_meta;
use crate::region::region_of;
use crate::{client, cstr, err, ffi_err, PdcId, Perr};
use libc::{c_char, c_void};
use pdcx_core::model::TagValue;
use pdcx_core::protocol::TagTarget;
use pdcx_core::Region;

/// `PDCXobj_read_version(obj_id, region_id, version, buf)`: the elements of region `region_id`
/// (0: the whole object) of the object as of `version`, into `buf` (dense, C order).
///
/// # Safety
/// `buf` must have room for the region's elements.
#[no_mangle]
pub unsafe extern "C" fn PDCXobj_read_version(
    obj_id: PdcId,
    region_id: PdcId,
    version: u64,
    buf: *mut c_void,
) -> Perr {
    ffi_err("PDCXobj_read_version", || {
        if buf.is_null() {
            return Err("buf is NULL".into());
        }
        let meta = typed_meta(obj_id)?;
        let region = if region_id == 0 {
            Region::whole(&meta.dims)
        } else {
            region_of(region_id)?
        };
        let len = region.byte_len(meta.dtype.size()).map_err(err)?;
        let len = usize::try_from(len).map_err(|_| format!("region {region} is too large"))?;
        // SAFETY: the caller promises room for the region's elements, `len` bytes.
        let out = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len) };
        client()?
            .read_version(meta.id, &region, version, out)
            .map_err(err)
    })
}

/// `PDCXobj_latest_version(obj_id, &version)`: the newest version of the object (FAIL when it
/// has no writes).
///
/// # Safety
/// `version` must point to a writable u64.
#[no_mangle]
pub unsafe extern "C" fn PDCXobj_latest_version(obj_id: PdcId, version: *mut u64) -> Perr {
    ffi_err("PDCXobj_latest_version", || {
        if version.is_null() {
            return Err("version is NULL".into());
        }
        let meta = typed_meta(obj_id)?;
        let list = client()?.versions(meta.id).map_err(err)?;
        let newest = *list
            .readable
            .last()
            .ok_or_else(|| format!("{} has no writes yet", meta.name))?;
        // SAFETY: checked non-NULL; the caller promises a writable u64.
        unsafe { *version = newest };
        Ok(())
    })
}

/// `PDCXobj_name_version(obj_id, name, version)`: names `version` (tag `pdcx.version.NAME`), so
/// compaction keeps it readable. A version already dropped is refused.
///
/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PDCXobj_name_version(
    obj_id: PdcId,
    name: *const c_char,
    version: u64,
) -> Perr {
    ffi_err("PDCXobj_name_version", || {
        // SAFETY: the caller passes a NUL-terminated string.
        let name = unsafe { cstr(name, "name")? };
        if name.is_empty() {
            return Err("a version name must not be empty".into());
        }
        let meta = typed_meta(obj_id)?;
        let v = i64::try_from(version).map_err(|_| format!("version {version} is too large"))?;
        client()?
            .put_tags(
                TagTarget::Object(meta.id),
                vec![(format!("pdcx.version.{name}"), TagValue::Int(v))],
            )
            .map_err(err)
    })
}
