//! PDCobj_*: objects, their tags and dims, whole-object put/get, and the object iterator.

use crate::cont::{cont_name, get_tag_value, link_nodes, tag_from_c, tag_to_c, IterNode};
use crate::mpi;
use crate::prop::{obj_prop_mut, ObjProp};
use crate::types::*;
use crate::{
    client, cstr, err, ffi, ffi_err, give_u64_array, malloc_copy, state, Handle, PdcId, Perr,
    State, R,
};
use libc::{c_char, c_int, c_void};
use pdcx_core::model::{KIND_TAG, KIND_UNTYPED};
use pdcx_core::protocol::{self, Consistency, Durability, ObjectSpec, TagTarget};
use pdcx_core::{Condition, Dtype, ObjectMeta, Region, TagValue};

/// The stored element type of an object created without one; never used for data (the
/// servers refuse data until the real type is set).
const UNTYPED_PLACEHOLDER: Dtype = Dtype::Bytes;
use std::collections::HashSet;

pub struct Obj {
    pub meta: ObjectMeta,
    /// Dims declared `PDC_SIZE_UNLIMITED` at creation here: transfers beyond them grow the object.
    pub unlimited: Vec<bool>,
    pub info: Box<ObjInfoBlock>,
    /// Started transfers not waited yet (PDCobj_close waits for them).
    pub pending: HashSet<PdcId>,
    pub buf: usize,
    /// When this handle's writes become visible (from the property's consistency semantics).
    pub consistency: Consistency,
    /// What a wait on this handle's transfers guarantees (`PDCXprop_set_obj_durability`).
    pub durability: Durability,
    /// The property the object was created with (0 when opened): an object created without a
    /// type takes the one a program sets on it later (see [`typed_meta`]).
    pub prop: PdcId,
    /// That property's dims at creation: dims set on it later go to the object with its type.
    pub prop_dims: Vec<u64>,
}

/// pdcx's consistency for a PDC `pdc_consistency_t`: SESSION (visible at the end of the
/// session, i.e. at close) and EVENTUAL are relaxed; DEFAULT, POSIX and COMMIT are strong
/// (visible at wait).
pub fn consistency_of(c: c_int, expected_writes: u64) -> Consistency {
    if c == PDC_CONSISTENCY_SESSION || c == PDC_CONSISTENCY_EVENTUAL {
        Consistency::Relaxed { expected_writes }
    } else {
        Consistency::Strong
    }
}

pub fn obj_mut(st: &mut State, id: PdcId) -> R<&mut Obj> {
    match st.get_mut(id)? {
        Handle::Obj(o) => Ok(o),
        h => Err(format!("id {id:#x} is a {}, not an object", h.kind())),
    }
}

pub fn obj_meta(st: &mut State, id: PdcId) -> R<ObjectMeta> {
    obj_mut(st, id).map(|o| o.meta.clone())
}

/// Registers an object handle; `prop` gives the public property fields when known.
/// What an object handle takes from the object property it was created with.
#[derive(Clone)]
struct Settings {
    unlimited: Vec<bool>,
    partition: c_int,
    consistency: c_int,
    expected_writes: u64,
    durability: Durability,
    buf: usize,
    prop_dims: Vec<u64>,
}

impl Settings {
    /// An object without a creation property here (opened, or made by put_data): PDC's
    /// defaults.
    fn opened(meta: &ObjectMeta) -> Settings {
        Settings {
            unlimited: vec![false; meta.dims.len()],
            partition: 0,
            consistency: 0,
            expected_writes: 0,
            durability: Durability::Local,
            buf: 0,
            prop_dims: Vec::new(),
        }
    }

    fn of_prop(p: &ObjProp) -> Settings {
        Settings {
            unlimited: p.dims.iter().map(|&d| d == PDC_SIZE_UNLIMITED).collect(),
            partition: p.partition,
            consistency: p.consistency,
            expected_writes: p.expected_writes,
            durability: p.durability,
            buf: p.buf,
            prop_dims: p.dims.clone(),
        }
    }
}

fn register(meta: ObjectMeta, prop: PdcId, s: Settings) -> PdcId {
    let mut st = state();
    let id = st.insert(Handle::Pdc); // placeholder until the handle is built with its own id
    let info = ObjInfoBlock::new(&meta, id, prop, s.partition, s.consistency);
    st.handles.insert(
        id,
        Handle::Obj(Box::new(Obj {
            meta,
            unlimited: s.unlimited,
            info,
            pending: HashSet::new(),
            buf: s.buf,
            consistency: consistency_of(s.consistency, s.expected_writes),
            durability: s.durability,
            prop,
            prop_dims: s.prop_dims,
        })),
    );
    id
}

/// Refreshes the cached metadata (dims may have been grown elsewhere).
pub fn refresh(id: PdcId) -> R<ObjectMeta> {
    let oid = obj_meta(&mut state(), id)?.id;
    let meta = client()?.get_object(oid).map_err(err)?;
    let mut st = state();
    let o = obj_mut(&mut st, id)?;
    o.info.prop.set_dims(&meta.dims);
    o.info.prop.prop.type_ = c_type_of(&meta);
    o.meta = meta.clone();
    Ok(meta)
}

/// The object's metadata for a data request (transfers, put/get, queries). An object created
/// without a type gets one here, once, from the property it was created with: PDC programs
/// set it there after the create (`PDCprop_set_obj_type` on `PDCobj_get_info(obj)->obj_pt->
/// obj_prop_id`, which is that property), with dims too if they changed on it. The owner
/// makes the change durable; every other process sees it from then on. With no type to
/// give it, the request fails naming the object and the call that gives one.
pub fn typed_meta(id: PdcId) -> R<ObjectMeta> {
    let meta = obj_meta(&mut state(), id)?;
    if !meta.is_untyped() {
        return Ok(meta);
    }
    let meta = refresh(id)?; // another process may have typed it since
    if !meta.is_untyped() {
        return Ok(meta);
    }
    let wanted = {
        let mut st = state();
        let o = obj_mut(&mut st, id)?;
        let (prop, created) = (o.prop, o.prop_dims.clone());
        match obj_prop_mut(&mut st, prop) {
            Ok(p) => p.dtype.map(|t| {
                let dims = if p.dims == created {
                    Vec::new()
                } else {
                    p.dims.clone()
                };
                (t, dims)
            }),
            Err(_) => None,
        }
    };
    let Some((t, dims)) = wanted else {
        return Err(format!(
            "object {:?} has no type yet, so it holds no data: call PDCprop_set_obj_type on \
             its property (PDCobj_get_info(obj)->obj_pt->obj_prop_id) first",
            meta.name
        ));
    };
    let unlimited: Vec<bool> = dims.iter().map(|&d| d == PDC_SIZE_UNLIMITED).collect();
    let dims: Vec<u64> = dims
        .iter()
        .map(|&d| if d == PDC_SIZE_UNLIMITED { 0 } else { d })
        .collect();
    let new = client()?
        .set_type(meta.id, dtype_of(t)?, dims)
        .map_err(err)?;
    let mut st = state();
    let o = obj_mut(&mut st, id)?;
    if !unlimited.is_empty() {
        o.unlimited = unlimited;
    }
    o.info.prop.set_dims(&new.dims);
    o.info.prop.prop.type_ = c_type_of(&new);
    o.meta = new.clone();
    Ok(new)
}

struct Plan {
    spec: ObjectSpec,
    settings: Settings,
}

fn plan(cont_id: PdcId, name: &str, prop_id: PdcId) -> R<Plan> {
    let mut st = state();
    let cont = cont_name(&st, cont_id)?;
    let p = obj_prop_mut(&mut st, prop_id)?;
    // No dims: the size is unknown at creation, as PDC allows. The object starts 1-d with no
    // elements; its first write or PDCobj_set_dims gives it its rank and size.
    let shapeless = p.dims.is_empty();
    let mut tags = Vec::new();
    // No type: PDC's default object property has none. The object exists with its metadata
    // only (the servers refuse data for it) until a type is set (`typed_meta`).
    let dtype = match p.dtype {
        Some(t) => dtype_of(t)?,
        None => {
            tags.push((
                KIND_TAG.to_string(),
                TagValue::Str(KIND_UNTYPED.to_string()),
            ));
            UNTYPED_PLACEHOLDER
        }
    };
    if let Some(v) = p.time_step {
        tags.push(("time_step".to_string(), TagValue::Int(v as i64)));
    }
    if let Some(v) = p.user_id {
        tags.push(("user_id".to_string(), TagValue::Int(v as i64)));
    }
    for (k, v) in [
        ("app_name", &p.app_name),
        ("data_loc", &p.data_loc),
        ("tags", &p.tags),
    ] {
        if let Some(v) = v {
            tags.push((k.to_string(), TagValue::Str(v.clone())));
        }
    }
    let mut settings = Settings::of_prop(p);
    let dims = if shapeless {
        settings.unlimited = vec![true];
        vec![0]
    } else {
        p.dims
            .iter()
            .map(|&d| if d == PDC_SIZE_UNLIMITED { 0 } else { d })
            .collect()
    };
    Ok(Plan {
        spec: ObjectSpec {
            name: name.to_string(),
            dims,
            dtype,
            fill: None,
            containers: vec![cont],
            tags,
            creator: String::new(),
        },
        settings,
    })
}

fn create(cont_id: PdcId, name: &str, prop_id: PdcId) -> R<PdcId> {
    let p = plan(cont_id, name, prop_id)?;
    let meta = client()?.create_object(p.spec).map_err(err)?;
    Ok(register(meta, prop_id, p.settings))
}

/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PDCobj_create(
    cont_id: PdcId,
    name: *const c_char,
    prop_id: PdcId,
) -> PdcId {
    ffi("PDCobj_create", 0, || {
        // SAFETY: the caller promises a C string.
        let name = unsafe { cstr(name, "object name") }?;
        create(cont_id, name, prop_id)
    })
}

/// pdcx extension (`pdcx_ext.h`): creates `n` objects named `names[0..n]` in container
/// `cont_id`, all with object property `prop_id`, in one request per owning server and batch
/// (creates). `obj_ids[i]` gets the handle of object `i`, or 0 when it failed (a
/// duplicate name, a bad name); the call returns FAIL when any failed, after printing each
/// failure. Visibility and durability are those of `PDCobj_create`: each object exists at its
/// owner when this returns and is on stable storage at the next consistency point.
///
/// # Safety
/// `names` must point to `n` NUL-terminated strings and `obj_ids` to room for `n` ids.
#[no_mangle]
pub unsafe extern "C" fn PDCXobj_create_many(
    cont_id: PdcId,
    n: usize,
    names: *const *const c_char,
    prop_id: PdcId,
    obj_ids: *mut PdcId,
) -> Perr {
    ffi_err("PDCXobj_create_many", || {
        if n == 0 {
            return Ok(());
        }
        if names.is_null() || obj_ids.is_null() {
            return Err("names and obj_ids must not be NULL".into());
        }
        // SAFETY: the caller promises `n` entries in each array.
        let (names, out) = unsafe {
            (
                std::slice::from_raw_parts(names, n),
                std::slice::from_raw_parts_mut(obj_ids, n),
            )
        };
        out.fill(0);
        let mut specs = Vec::with_capacity(n);
        let template = plan(cont_id, "", prop_id)?;
        for (i, &p) in names.iter().enumerate() {
            // SAFETY: the caller promises C strings.
            let name = unsafe { cstr(p, &format!("names[{i}]")) }?;
            let mut spec = template.spec.clone();
            spec.name = name.to_string();
            specs.push(spec);
        }
        let results = client()?.create_objects_lazy(specs);
        let mut failed = 0usize;
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(meta) => out[i] = register(meta, prop_id, template.settings.clone()),
                Err(e) => {
                    failed += 1;
                    eprintln!("pdcx: PDCXobj_create_many: object {i}: {}", e.message);
                }
            }
        }
        match failed {
            0 => Ok(()),
            k => Err(format!("{k} of {n} objects were not created")),
        }
    })
}

/// Rank `rank_id` of `comm` creates the object and broadcasts its metadata, which the others
/// register as it is: no rank asks a server for it (a lookup at the owner, through the node's
/// lookup relay and its aggregation window, per rank and object).
///
/// # Safety
/// `name` must be a NUL-terminated string; `comm` an MPI communicator (or anything when the
/// process has no MPI).
#[no_mangle]
pub unsafe extern "C" fn PDCobj_create_mpi(
    cont_id: PdcId,
    name: *const c_char,
    prop_id: PdcId,
    rank_id: c_int,
    comm: *mut c_void,
) -> PdcId {
    ffi("PDCobj_create_mpi", 0, || {
        // SAFETY: the caller promises a C string.
        let name = unsafe { cstr(name, "object name") }?;
        if !mpi::active() {
            return create(cont_id, name, prop_id);
        }
        let comm = mpi::Comm(comm);
        let me = mpi::rank(comm)?;
        // The creator's own outcome, and what it tells the others (the encoded metadata, or
        // its error, so every rank fails with the creator's reason).
        let (mine, msg) = if me == rank_id {
            match plan(cont_id, name, prop_id).and_then(|p| {
                let meta = client()?.create_object(p.spec.clone()).map_err(err)?;
                Ok((meta, p))
            }) {
                Ok((meta, p)) => {
                    let body = protocol::encode_body(&meta).map_err(err);
                    (Some(Ok((meta, p))), body)
                }
                Err(e) => (Some(Err(e.clone())), Err(e)),
            }
        } else {
            (None, Ok(Vec::new()))
        };
        let told = mpi::bcast_result(msg, rank_id, comm)?;
        match mine {
            Some(Ok((meta, p))) => return Ok(register(meta, prop_id, p.settings)),
            Some(Err(e)) => return Err(e),
            None => {}
        }
        let body =
            told.map_err(|e| format!("rank {rank_id} failed to create object {name:?}: {e}"))?;
        let meta: ObjectMeta = protocol::decode_body(&body).map_err(err)?;
        let settings = {
            let mut st = state();
            match obj_prop_mut(&mut st, prop_id) {
                Ok(p) => Settings::of_prop(p),
                Err(_) => Settings::opened(&meta),
            }
        };
        Ok(register(meta, prop_id, settings))
    })
}

/// PDC's later name for [`PDCobj_create_mpi`].
///
/// # Safety
/// As for [`PDCobj_create_mpi`].
#[no_mangle]
pub unsafe extern "C" fn PDCobj_create_coll(
    cont_id: PdcId,
    name: *const c_char,
    prop_id: PdcId,
    rank_id: c_int,
    comm: *mut c_void,
) -> PdcId {
    // SAFETY: forwarded caller contract.
    unsafe { PDCobj_create_mpi(cont_id, name, prop_id, rank_id, comm) }
}

unsafe fn open(fname: &str, name: *const c_char, pdc: PdcId) -> PdcId {
    ffi(fname, 0, || {
        // SAFETY: the caller promises a C string.
        let name = unsafe { cstr(name, "object name") }?;
        let _ = pdc;
        let meta = client()?.open_object(name).map_err(err)?;
        let settings = Settings::opened(&meta);
        Ok(register(meta, 0, settings))
    })
}

/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PDCobj_open(name: *const c_char, pdc: PdcId) -> PdcId {
    // SAFETY: forwarded caller contract.
    unsafe { open("PDCobj_open", name, pdc) }
}

/// Collective over MPI_COMM_WORLD, as in PDC: rank 0 looks the name up and broadcasts the
/// metadata, so the servers see one request however many ranks open (the other ranks' `name`
/// is not read and may be NULL). Without MPI in the process this is `PDCobj_open`.
///
/// # Safety
/// On rank 0 (or without MPI) `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PDCobj_open_col(name: *const c_char, pdc: PdcId) -> PdcId {
    if !mpi::active() {
        // SAFETY: forwarded caller contract.
        return unsafe { open("PDCobj_open_col", name, pdc) };
    }
    ffi("PDCobj_open_col", 0, || {
        let body = mpi::root_answers(|| {
            // SAFETY: the caller promises a C string on rank 0.
            let name = unsafe { cstr(name, "object name") }?;
            let meta = client()?.open_object(name).map_err(err)?;
            protocol::encode_body(&meta).map_err(err)
        })?;
        let meta: ObjectMeta = protocol::decode_body(&body).map_err(err)?;
        let settings = Settings::opened(&meta);
        Ok(register(meta, 0, settings))
    })
}

/// Data is durable at each transfer's wait. For relaxed objects this is the consistency
/// point: this process's waited writes of the object are visible when it returns.
#[no_mangle]
pub extern "C" fn PDCobj_flush_start(id: PdcId) -> Perr {
    ffi_err("PDCobj_flush_start", || {
        let oid = obj_meta(&mut state(), id)?.id;
        client()?.sync(&[oid]).map_err(err)
    })
}

/// [`PDCobj_flush_start`] of every object this process wrote with relaxed consistency.
#[no_mangle]
pub extern "C" fn PDCobj_flush_all_start() -> Perr {
    ffi_err("PDCobj_flush_all_start", || {
        client()?.sync_all().map_err(err)
    })
}

/// Grows the object's dims (pdcx never shrinks an object: that would hide written data).
///
/// # Safety
/// `dims` must point to `ndim` values.
#[no_mangle]
pub unsafe extern "C" fn PDCobj_set_dims(id: PdcId, ndim: c_int, dims: *mut u64) -> Perr {
    ffi_err("PDCobj_set_dims", || {
        let meta = obj_meta(&mut state(), id)?;
        if ndim <= 0 || ndim as usize > pdcx_core::MAX_DIMS {
            return Err(format!(
                "ndim must be 1..={}, got {ndim}",
                pdcx_core::MAX_DIMS
            ));
        }
        // SAFETY: the caller promises `ndim` values.
        let dims = unsafe { crate::u64s(dims, ndim as usize, "dims") }?;
        // As in PDC the dims may grow or shrink; the number of dims may change only while the
        // object has no elements and no data (the server checks). PDC_SIZE_UNLIMITED: that
        // dim starts at 0 and grows with the writes into it.
        let unlimited: Vec<bool> = dims.iter().map(|&d| d == PDC_SIZE_UNLIMITED).collect();
        let dims: Vec<u64> = dims
            .iter()
            .map(|&d| if d == PDC_SIZE_UNLIMITED { 0 } else { d })
            .collect();
        let new = client()?.set_dims(meta.id, dims).map_err(err)?;
        let mut st = state();
        let o = obj_mut(&mut st, id)?;
        o.info.prop.set_dims(&new.dims);
        o.unlimited = unlimited;
        o.meta = new;
        Ok(())
    })
}

/// Current dims in a malloc'd array the caller frees.
///
/// # Safety
/// `ndim` and `dims` must be writable.
#[no_mangle]
pub unsafe extern "C" fn PDCobj_get_dims(id: PdcId, ndim: *mut c_int, dims: *mut *mut u64) -> Perr {
    ffi_err("PDCobj_get_dims", || {
        if ndim.is_null() || dims.is_null() {
            return Err("ndim and dims must not be NULL".into());
        }
        let meta = refresh(id)?;
        // SAFETY: checked non-null; the caller promises writable out pointers.
        unsafe { give_u64_array(&meta.dims, ndim, dims) }
    })
}

/// Pointer to the object's info; valid until PDCobj_close.
#[no_mangle]
pub extern "C" fn PDCobj_get_info(id: PdcId) -> *mut PdcObjInfo {
    ffi("PDCobj_get_info", std::ptr::null_mut(), || {
        refresh(id)?;
        let mut st = state();
        let o = obj_mut(&mut st, id)?;
        Ok(&mut o.info.info as *mut PdcObjInfo)
    })
}

#[no_mangle]
pub extern "C" fn PDCobj_get_dtype(id: PdcId) -> c_int {
    ffi("PDCobj_get_dtype", PDC_UNKNOWN, || {
        Ok(c_type_of(&obj_meta(&mut state(), id)?))
    })
}

/// Address of the buffer set with PDCprop_set_obj_buf (a pointer to the stored pointer).
#[no_mangle]
pub extern "C" fn PDCobj_buf_retrieve(id: PdcId) -> *mut *mut c_void {
    ffi("PDCobj_buf_retrieve", std::ptr::null_mut(), || {
        let mut st = state();
        let o = obj_mut(&mut st, id)?;
        Ok(&mut o.buf as *mut usize as *mut *mut c_void)
    })
}

/// Creates object `name` (bytes, `size` long) in the container, writes `data`, and returns
/// its handle.
///
/// # Safety
/// `name` must be a C string and `data` point to `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn PDCobj_put_data(
    name: *const c_char,
    data: *mut c_void,
    size: u64,
    cont_id: PdcId,
) -> PdcId {
    ffi("PDCobj_put_data", 0, || {
        // SAFETY: the caller promises a C string.
        let name = unsafe { cstr(name, "object name") }?;
        if data.is_null() {
            return Err("data is NULL".into());
        }
        if size == 0 {
            return Err("size is 0".into());
        }
        let cont = cont_name(&state(), cont_id)?;
        let n = usize::try_from(size).map_err(|_| "size too large".to_string())?;
        // SAFETY: the caller promises `size` readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(data as *const u8, n) };
        let c = client()?;
        let meta = c
            .create_object(ObjectSpec {
                name: name.to_string(),
                dims: vec![size],
                dtype: Dtype::Bytes,
                fill: None,
                containers: vec![cont],
                tags: vec![],
                creator: String::new(),
            })
            .map_err(err)?;
        c.write(meta.id, &Region::whole(&[size]), bytes, Durability::Local)
            .map_err(err)?;
        let settings = Settings::opened(&meta);
        Ok(register(meta, 0, settings))
    })
}

/// Reads the first `size` bytes of the object (or all of it, if smaller) into `data`.
///
/// # Safety
/// `data` must point to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn PDCobj_get_data(id: PdcId, data: *mut c_void, size: u64) -> Perr {
    ffi_err("PDCobj_get_data", || {
        if data.is_null() {
            return Err("data is NULL".into());
        }
        let meta = typed_meta(id)?;
        if meta.dims.contains(&0) {
            return Ok(());
        }
        let mut all = vec![0u8; meta.size_bytes() as usize];
        client()?
            .read_into(meta.id, &Region::whole(&meta.dims), &mut all)
            .map_err(err)?;
        let n = all.len().min(usize::try_from(size).unwrap_or(usize::MAX));
        // SAFETY: the caller promises `size` writable bytes; n <= size.
        unsafe { std::ptr::copy_nonoverlapping(all.as_ptr(), data as *mut u8, n) };
        Ok(())
    })
}

// ---- tags --------------------------------------------------------------------------------

fn obj_target(id: PdcId) -> R<TagTarget> {
    Ok(TagTarget::Object(obj_meta(&mut state(), id)?.id))
}

/// # Safety
/// `name` must be a C string and `value` point to `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn PDCobj_put_tag(
    id: PdcId,
    name: *mut c_char,
    value: *mut c_void,
    type_: c_int,
    size: u64,
) -> Perr {
    ffi_err("PDCobj_put_tag", || {
        // SAFETY: forwarded caller contract.
        let key = unsafe { cstr(name, "tag name")? };
        // SAFETY: forwarded caller contract.
        let v = unsafe { crate::cont::pdcx_tag_from_c(key, value, type_, size)? };
        client()?
            .put_tags(obj_target(id)?, vec![(key.to_string(), v)])
            .map_err(err)
    })
}

/// Tag value in a malloc'd buffer the caller frees.
///
/// # Safety
/// `name` must be a C string; the out pointers must be writable (`type_` may be NULL).
#[no_mangle]
pub unsafe extern "C" fn PDCobj_get_tag(
    id: PdcId,
    name: *mut c_char,
    value: *mut *mut c_void,
    type_: *mut c_int,
    size: *mut u64,
) -> Perr {
    ffi_err("PDCobj_get_tag", || {
        // SAFETY: the caller promises a C string.
        let key = unsafe { cstr(name, "tag name") }?;
        if value.is_null() || size.is_null() {
            return Err("tag_value and value_size must not be NULL".into());
        }
        // A tag that is not there (deleted, or never set) is no error in PDC: NULL, size 0.
        let Some(v) = get_tag_value(&obj_target(id)?, key)? else {
            // SAFETY: checked non-null above; the caller promises writable out pointers.
            unsafe {
                *value = std::ptr::null_mut();
                *size = 0;
            }
            return Ok(());
        };
        let (bytes, t) = tag_to_c(&v);
        let p = malloc_copy(&bytes)?;
        // SAFETY: checked non-null; the caller promises writable out pointers.
        unsafe {
            *value = p;
            *size = bytes.len() as u64;
            if !type_.is_null() {
                *type_ = t;
            }
        }
        Ok(())
    })
}

/// # Safety
/// `name` must be a C string.
#[no_mangle]
pub unsafe extern "C" fn PDCobj_del_tag(id: PdcId, name: *mut c_char) -> Perr {
    ffi_err("PDCobj_del_tag", || {
        // SAFETY: the caller promises a C string.
        let key = unsafe { cstr(name, "tag name") }?;
        crate::tag_deleted(client()?.delete_tag(obj_target(id)?, key))
    })
}

/// Objects whose tag `tag_name` equals the given bytes (or, for text, the string): their
/// pdcx object ids in a malloc'd array the caller frees.
///
/// # Safety
/// `tag_name` must be a C string, `tag_value` point to `value_size` bytes, the outs writable.
#[no_mangle]
pub unsafe extern "C" fn PDCobj_get_id(
    tag_name: *const c_char,
    tag_value: *mut c_void,
    value_size: c_int,
    n_res: *mut c_int,
    pdc_ids: *mut *mut u64,
) -> Perr {
    ffi_err("PDCobj_get_id", || {
        // SAFETY: the caller promises a C string.
        let key = unsafe { cstr(tag_name, "tag name") }?;
        if n_res.is_null() || pdc_ids.is_null() || value_size < 0 {
            return Err("n_res and pdc_ids must not be NULL, value_size not negative".into());
        }
        // SAFETY: the caller promises `value_size` bytes.
        let v = unsafe { tag_from_c(tag_value, PDC_CHAR, value_size as u64) }?;
        let c = client()?;
        let mut hits = c
            .query(vec![Condition::Eq(key.to_string(), v.clone())])
            .map_err(err)?;
        if let TagValue::Bytes(b) = &v {
            let text = b.split(|x| *x == 0).next().unwrap_or(&[]);
            if let Ok(s) = std::str::from_utf8(text) {
                hits.extend(
                    c.query(vec![Condition::Eq(
                        key.to_string(),
                        TagValue::Str(s.to_string()),
                    )])
                    .map_err(err)?,
                );
            }
        }
        let list: Vec<u64> = hits.iter().map(|(id, _)| *id).collect();
        // SAFETY: checked non-null; the caller promises writable out pointers.
        unsafe { give_u64_array(&list, n_res, pdc_ids) }
    })
}

// ---- iterator ----------------------------------------------------------------------------

/// The objects of a container (all objects for id 0), by name.
#[no_mangle]
pub extern "C" fn PDCobj_iter_start(cont_id: PdcId) -> *mut IterNode {
    ffi("PDCobj_iter_start", std::ptr::null_mut(), || {
        let cont = if cont_id == 0 {
            None
        } else {
            Some(cont_name(&state(), cont_id)?)
        };
        let objs = client()?.list_objects(cont.as_deref()).map_err(err)?;
        let mut st = state();
        let nodes = objs
            .iter()
            .map(|m| IterNode {
                next: std::ptr::null_mut(),
                cont: None,
                obj: Some(ObjInfoBlock::new(m, 0, 0, 0, 0)),
            })
            .collect();
        Ok(link_nodes(&mut st, nodes))
    })
}

#[no_mangle]
pub extern "C" fn PDCobj_iter_null(h: *mut IterNode) -> bool {
    h.is_null()
}

/// # Safety
/// `h` must be NULL or an iterator position from this library (others are refused).
#[no_mangle]
pub unsafe extern "C" fn PDCobj_iter_next(h: *mut IterNode, cont_id: PdcId) -> *mut IterNode {
    let _ = cont_id;
    ffi("PDCobj_iter_next", std::ptr::null_mut(), || {
        let st = state();
        crate::cont::check_node(&st, h)?;
        // SAFETY: validated as a live node owned by the state.
        Ok(unsafe { (*h).next })
    })
}

/// # Safety
/// `h` must be NULL or an iterator position from this library (others are refused).
#[no_mangle]
pub unsafe extern "C" fn PDCobj_iter_get_info(h: *mut IterNode) -> *mut PdcObjInfo {
    ffi("PDCobj_iter_get_info", std::ptr::null_mut(), || {
        let st = state();
        crate::cont::check_node(&st, h)?;
        // SAFETY: validated as a live node owned by the state.
        match unsafe { (*h).obj.as_mut() } {
            Some(o) => Ok(&mut o.info as *mut PdcObjInfo),
            None => Err("this is a container iterator; use PDCcont_iter_get_info".into()),
        }
    })
}
