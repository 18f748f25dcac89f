//! PDCprop_*: container and object creation properties.

use crate::types::*;
use crate::{cstr, ffi, ffi_err, state, u64s, Handle, PdcId, Perr, State, R};
use libc::{c_char, c_int, c_void};
use pdcx_core::protocol::Durability;

pub struct ObjProp {
    pub dims: Vec<u64>,
    pub dtype: Option<c_int>,
    pub time_step: Option<u32>,
    pub user_id: Option<u32>,
    pub app_name: Option<String>,
    pub data_loc: Option<String>,
    pub tags: Option<String>,
    pub partition: c_int,
    pub consistency: c_int,
    /// pdcx extension: relaxed writes a data server collects before registering them.
    pub expected_writes: u64,
    /// pdcx extension: what a wait on this object's transfers guarantees.
    pub durability: Durability,
    pub buf: usize,
    /// What PDCobj_prop_get_info points to.
    pub public: Box<ObjPropBlock>,
}

impl ObjProp {
    fn new(id: PdcId) -> ObjProp {
        ObjProp {
            dims: Vec::new(),
            dtype: None,
            time_step: None,
            user_id: None,
            app_name: None,
            data_loc: None,
            tags: None,
            partition: 0,
            consistency: 0,
            expected_writes: 0,
            durability: Durability::Local,
            buf: 0,
            public: ObjPropBlock::new(id, &[], PDC_UNKNOWN, 0, 0),
        }
    }

    fn sync_public(&mut self) {
        self.public.set_dims(&self.dims);
        self.public.prop.type_ = self.dtype.unwrap_or(PDC_UNKNOWN);
        self.public.prop.region_partition = self.partition;
        self.public.prop.consistency = self.consistency;
    }
}

pub enum PropKind {
    Cont { lifetime: c_int },
    Obj(ObjProp),
}

pub struct Prop {
    pub kind: PropKind,
}

/// The object property `id`, mutably.
pub fn obj_prop_mut(st: &mut State, id: PdcId) -> R<&mut ObjProp> {
    match st.get_mut(id)? {
        Handle::Prop(p) => match &mut p.kind {
            PropKind::Obj(o) => Ok(o),
            PropKind::Cont { .. } => Err(format!(
                "property {id:#x} is a container property (PDC_CONT_CREATE); this call needs an object property (PDC_OBJ_CREATE)"
            )),
        },
        h => Err(format!("id {id:#x} is a {}, not a property", h.kind())),
    }
}

fn set_obj(name: &str, id: PdcId, f: impl FnOnce(&mut ObjProp) -> R<()>) -> Perr {
    ffi_err(name, || {
        let mut st = state();
        let p = obj_prop_mut(&mut st, id)?;
        f(p)?;
        p.sync_public();
        Ok(())
    })
}

/// Creates a container (`PDC_CONT_CREATE`) or object (`PDC_OBJ_CREATE`) property.
#[no_mangle]
pub extern "C" fn PDCprop_create(type_: c_int, pdc_id: PdcId) -> PdcId {
    ffi("PDCprop_create", 0, || {
        let mut st = state();
        match st.get(pdc_id)? {
            Handle::Pdc => {}
            h => {
                return Err(format!(
                    "id {pdc_id:#x} is a {}, not the id PDCinit returned",
                    h.kind()
                ))
            }
        }
        let kind = match type_ {
            PDC_CONT_CREATE => PropKind::Cont {
                lifetime: PDC_PERSIST,
            },
            PDC_OBJ_CREATE => PropKind::Obj(ObjProp::new(0)),
            t => {
                return Err(format!(
                    "unknown pdc_prop_type_t {t} (expected PDC_CONT_CREATE or PDC_OBJ_CREATE)"
                ))
            }
        };
        let id = st.insert(Handle::Prop(Box::new(Prop { kind })));
        if let Ok(o) = obj_prop_mut(&mut st, id) {
            o.public.prop.obj_prop_id = id;
        }
        Ok(id)
    })
}

#[no_mangle]
pub extern "C" fn PDCprop_close(id: PdcId) -> Perr {
    ffi_err("PDCprop_close", || {
        let mut st = state();
        match st.get(id)? {
            Handle::Prop(_) => {
                st.handles.remove(&id);
                Ok(())
            }
            h => Err(format!("id {id:#x} is a {}, not a property", h.kind())),
        }
    })
}

/// A new object property with the same settings.
#[no_mangle]
pub extern "C" fn PDCprop_obj_dup(prop_id: PdcId) -> PdcId {
    ffi("PDCprop_obj_dup", 0, || {
        let mut st = state();
        let src = obj_prop_mut(&mut st, prop_id)?;
        let mut copy = ObjProp::new(0);
        copy.dims = src.dims.clone();
        copy.dtype = src.dtype;
        copy.time_step = src.time_step;
        copy.user_id = src.user_id;
        copy.app_name = src.app_name.clone();
        copy.data_loc = src.data_loc.clone();
        copy.tags = src.tags.clone();
        copy.partition = src.partition;
        copy.consistency = src.consistency;
        copy.expected_writes = src.expected_writes;
        copy.durability = src.durability;
        copy.buf = src.buf;
        let id = st.insert(Handle::Prop(Box::new(Prop {
            kind: PropKind::Obj(copy),
        })));
        let p = obj_prop_mut(&mut st, id)?;
        p.public.prop.obj_prop_id = id;
        p.sync_public();
        Ok(id)
    })
}

/// Pointer to the property's public view; valid until PDCprop_close.
#[no_mangle]
pub extern "C" fn PDCobj_prop_get_info(prop_id: PdcId) -> *mut PdcObjProp {
    ffi("PDCobj_prop_get_info", std::ptr::null_mut(), || {
        let mut st = state();
        let p = obj_prop_mut(&mut st, prop_id)?;
        Ok(&mut p.public.prop as *mut PdcObjProp)
    })
}

/// Container property details are not exposed (pdcx containers have no settings to show).
#[no_mangle]
pub extern "C" fn PDCcont_prop_get_info(prop_id: PdcId) -> *mut c_void {
    ffi("PDCcont_prop_get_info", std::ptr::null_mut(), || {
        Err(format!("not supported by pdcx (property {prop_id:#x})"))
    })
}

#[no_mangle]
pub extern "C" fn PDCprop_set_cont_lifetime(prop_id: PdcId, lifetime: c_int) -> Perr {
    ffi_err("PDCprop_set_cont_lifetime", || {
        if lifetime != PDC_PERSIST && lifetime != PDC_TRANSIENT {
            return Err(format!("unknown pdc_lifetime_t {lifetime}"));
        }
        let mut st = state();
        match st.get_mut(prop_id)? {
            Handle::Prop(p) => match &mut p.kind {
                PropKind::Cont { lifetime: l } => {
                    *l = lifetime;
                    Ok(())
                }
                PropKind::Obj(_) => Err(format!(
                    "property {prop_id:#x} is an object property, not a container property"
                )),
            },
            h => Err(format!("id {prop_id:#x} is a {}, not a property", h.kind())),
        }
    })
}

/// # Safety
/// `dims` must point to `ndim` values.
#[no_mangle]
pub unsafe extern "C" fn PDCprop_set_obj_dims(prop_id: PdcId, ndim: c_int, dims: *mut u64) -> Perr {
    set_obj("PDCprop_set_obj_dims", prop_id, |p| {
        if ndim < 1 || ndim as usize > pdcx_core::MAX_DIMS {
            return Err(format!(
                "ndim must be 1..={}, got {ndim}",
                pdcx_core::MAX_DIMS
            ));
        }
        // SAFETY: the caller promises `ndim` values.
        p.dims = unsafe { u64s(dims, ndim as usize, "dims") }?;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn PDCprop_set_obj_type(prop_id: PdcId, type_: c_int) -> Perr {
    set_obj("PDCprop_set_obj_type", prop_id, |p| {
        dtype_of(type_)?;
        p.dtype = Some(type_);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn PDCprop_set_obj_time_step(prop_id: PdcId, time_step: u32) -> Perr {
    set_obj("PDCprop_set_obj_time_step", prop_id, |p| {
        p.time_step = Some(time_step);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn PDCprop_set_obj_user_id(prop_id: PdcId, user_id: u32) -> Perr {
    set_obj("PDCprop_set_obj_user_id", prop_id, |p| {
        p.user_id = Some(user_id);
        Ok(())
    })
}

/// # Safety
/// `app_name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PDCprop_set_obj_app_name(prop_id: PdcId, app_name: *mut c_char) -> Perr {
    set_obj("PDCprop_set_obj_app_name", prop_id, |p| {
        // SAFETY: the caller promises a C string.
        p.app_name = Some(unsafe { cstr(app_name, "app_name") }?.to_string());
        Ok(())
    })
}

/// # Safety
/// `loc` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PDCprop_set_obj_data_loc(prop_id: PdcId, loc: *mut c_char) -> Perr {
    set_obj("PDCprop_set_obj_data_loc", prop_id, |p| {
        // SAFETY: the caller promises a C string.
        p.data_loc = Some(unsafe { cstr(loc, "data_loc") }?.to_string());
        Ok(())
    })
}

/// # Safety
/// `tags` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PDCprop_set_obj_tags(prop_id: PdcId, tags: *mut c_char) -> Perr {
    set_obj("PDCprop_set_obj_tags", prop_id, |p| {
        // SAFETY: the caller promises a C string.
        p.tags = Some(unsafe { cstr(tags, "tags") }?.to_string());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn PDCprop_set_obj_transfer_region_type(prop_id: PdcId, partition: c_int) -> Perr {
    set_obj("PDCprop_set_obj_transfer_region_type", prop_id, |p| {
        if !(0..=3).contains(&partition) {
            return Err(format!("unknown pdc_region_partition_t {partition}"));
        }
        p.partition = partition;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn PDCprop_set_obj_consistency_semantics(
    prop_id: PdcId,
    consistency: c_int,
) -> Perr {
    set_obj("PDCprop_set_obj_consistency_semantics", prop_id, |p| {
        if !(0..=4).contains(&consistency) {
            return Err(format!("unknown pdc_consistency_t {consistency}"));
        }
        p.consistency = consistency;
        Ok(())
    })
}

/// pdcx extension: under relaxed consistency, the data server registers the object's writes
/// once it holds this many (0: no count; registered at flush/close or on the server's timer).
#[no_mangle]
pub extern "C" fn PDCXprop_set_obj_expected_writes(prop_id: PdcId, expected_writes: u64) -> Perr {
    set_obj("PDCXprop_set_obj_expected_writes", prop_id, |p| {
        p.expected_writes = expected_writes;
        Ok(())
    })
}

/// pdcx extension: what a wait on the object's transfers guarantees: PDCX_DURABILITY_MEMORY
/// (0), _LOCAL (1, the default) or _REMOTE (2: on a tier that survives the loss of the node,
/// its home recorded; refused at the wait when the deployment has no such tier). An object's
/// `pdcx.durability` tag raises it for every writer.
#[no_mangle]
pub extern "C" fn PDCXprop_set_obj_durability(prop_id: PdcId, durability: c_int) -> Perr {
    set_obj("PDCXprop_set_obj_durability", prop_id, |p| {
        p.durability = match durability {
            PDCX_DURABILITY_MEMORY => Durability::Memory,
            PDCX_DURABILITY_LOCAL => Durability::Local,
            PDCX_DURABILITY_REMOTE => Durability::Remote,
            d => {
                return Err(format!(
                    "unknown pdcx durability {d} (0 memory, 1 local, 2 remote)"
                ))
            }
        };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn PDCprop_set_obj_buf(prop_id: PdcId, buf: *mut c_void) -> Perr {
    set_obj("PDCprop_set_obj_buf", prop_id, |p| {
        p.buf = buf as usize;
        Ok(())
    })
}
