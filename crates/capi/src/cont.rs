//! PDCcont_*: containers, their tags and object lists, and the container iterator; plus the
//! tag conversions shared with objects.

use crate::types::*;
use crate::{
    client, cstr, err, ffi, ffi_err, give_u64_array, malloc_copy, state, Handle, PdcId, Perr,
    State, R,
};
use libc::{c_char, c_int, c_void};
use pdcx_core::protocol::TagTarget;
use pdcx_core::{ContainerInfo, ErrorKind, TagValue};

pub struct Cont {
    pub name: String,
    pub info: Box<ContInfoBlock>,
}

/// The container name behind handle `id`.
pub fn cont_name(st: &State, id: PdcId) -> R<String> {
    match st.get(id)? {
        Handle::Cont(c) => Ok(c.name.clone()),
        h => Err(format!("id {id:#x} is a {}, not a container", h.kind())),
    }
}

fn register(info: &ContainerInfo) -> PdcId {
    let mut st = state();
    let id = st.insert(Handle::Pdc); // placeholder, replaced below once the id is known
    st.handles.insert(
        id,
        Handle::Cont(Box::new(Cont {
            name: info.name.clone(),
            info: ContInfoBlock::new(&info.name, id, info.id),
        })),
    );
    id
}

fn check_prop(prop: PdcId) -> R<()> {
    let st = state();
    match st.get(prop)? {
        Handle::Prop(p) => match p.kind {
            crate::prop::PropKind::Cont { .. } => Ok(()),
            crate::prop::PropKind::Obj(_) => Err(format!(
                "property {prop:#x} is an object property; PDCcont_create needs PDC_CONT_CREATE"
            )),
        },
        h => Err(format!("id {prop:#x} is a {}, not a property", h.kind())),
    }
}

/// Creates `name`, or opens it if it exists already (so every rank may call it).
fn create_or_open(name: &str) -> R<PdcId> {
    Ok(register(&create_or_open_info(name)?))
}

fn create_or_open_info(name: &str) -> R<ContainerInfo> {
    let c = client()?;
    match c.create_container(name, vec![]) {
        Ok(i) => Ok(i),
        Err(e) if e.kind == ErrorKind::AlreadyExists => c.get_container(name).map_err(err),
        Err(e) => Err(err(e)),
    }
}

/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PDCcont_create(name: *const c_char, prop: PdcId) -> PdcId {
    ffi("PDCcont_create", 0, || {
        // SAFETY: the caller promises a C string.
        let name = unsafe { cstr(name, "container name") }?;
        check_prop(prop)?;
        create_or_open(name)
    })
}

/// Collective over MPI_COMM_WORLD, as in PDC (`PDC_Client_create_cont_id_mpi`): rank 0
/// creates the container (or opens it if it exists) and broadcasts it, so the servers see one
/// create however many ranks call it (each rank creating it raced the others at its owner and
/// the losers looked it up again). Without MPI this is `PDCcont_create`.
///
/// # Safety
/// `name` must be a NUL-terminated string (read on rank 0 only, under MPI).
#[no_mangle]
pub unsafe extern "C" fn PDCcont_create_col(name: *const c_char, prop: PdcId) -> PdcId {
    ffi("PDCcont_create_col", 0, || {
        // Checked on every rank, but only after the broadcast every rank must join.
        let prop_ok = check_prop(prop);
        if !crate::mpi::active() {
            prop_ok?;
            // SAFETY: the caller promises a C string.
            return create_or_open(unsafe { cstr(name, "container name") }?);
        }
        let body = crate::mpi::root_answers(|| {
            prop_ok.clone()?;
            // SAFETY: the caller promises a C string on rank 0.
            let name = unsafe { cstr(name, "container name") }?;
            pdcx_core::protocol::encode_body(&create_or_open_info(name)?).map_err(err)
        });
        prop_ok?;
        let info: ContainerInfo = pdcx_core::protocol::decode_body(&body?).map_err(err)?;
        Ok(register(&info))
    })
}

unsafe fn open(fname: &str, name: *const c_char, pdc: PdcId) -> PdcId {
    ffi(fname, 0, || {
        // SAFETY: the caller promises a C string.
        let name = unsafe { cstr(name, "container name") }?;
        let _ = pdc;
        let info = client()?.get_container(name).map_err(err)?;
        Ok(register(&info))
    })
}

/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PDCcont_open(name: *const c_char, pdc: PdcId) -> PdcId {
    // SAFETY: forwarded caller contract.
    unsafe { open("PDCcont_open", name, pdc) }
}

/// Collective over MPI_COMM_WORLD, as in PDC: rank 0 looks the container up and broadcasts
/// it (the other ranks' `name` is not read). Without MPI this is `PDCcont_open`.
///
/// # Safety
/// On rank 0 (or without MPI) `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PDCcont_open_col(name: *const c_char, pdc: PdcId) -> PdcId {
    if !crate::mpi::active() {
        // SAFETY: forwarded caller contract.
        return unsafe { open("PDCcont_open_col", name, pdc) };
    }
    ffi("PDCcont_open_col", 0, || {
        let body = crate::mpi::root_answers(|| {
            // SAFETY: the caller promises a C string on rank 0.
            let name = unsafe { cstr(name, "container name") }?;
            let info = client()?.get_container(name).map_err(err)?;
            pdcx_core::protocol::encode_body(&info).map_err(err)
        })?;
        let info: ContainerInfo = pdcx_core::protocol::decode_body(&body).map_err(err)?;
        Ok(register(&info))
    })
}

/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PDCcont_get_id(name: *const c_char, pdc: PdcId) -> PdcId {
    // SAFETY: forwarded caller contract.
    unsafe { open("PDCcont_get_id", name, pdc) }
}

#[no_mangle]
pub extern "C" fn PDCcont_close(id: PdcId) -> Perr {
    ffi_err("PDCcont_close", || {
        {
            let mut st = state();
            cont_name(&st, id)?;
            st.handles.remove(&id);
        }
        // A consistency point of this process's creates and tags (see ARCHITECTURE.md,
        // "Creates"); cheap when there are none.
        match client() {
            Ok(c) => c.sync_metadata().map_err(err),
            Err(_) => Ok(()),
        }
    })
}

/// Container info by name; the pointer stays valid until PDCclose.
///
/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PDCcont_get_info(name: *const c_char) -> *mut PdcContInfo {
    ffi("PDCcont_get_info", std::ptr::null_mut(), || {
        // SAFETY: the caller promises a C string.
        let name = unsafe { cstr(name, "container name") }?;
        let info = client()?.get_container(name).map_err(err)?;
        let mut st = state();
        let local = st
            .handles
            .iter()
            .find_map(|(id, h)| matches!(h, Handle::Cont(c) if c.name == name).then_some(*id))
            .unwrap_or(0);
        let mut block = ContInfoBlock::new(name, local, info.id);
        let p = &mut block.info as *mut PdcContInfo;
        st.arena.push(block);
        Ok(p)
    })
}

/// Containers are always persistent in pdcx.
#[no_mangle]
pub extern "C" fn PDCcont_persist(id: PdcId) -> Perr {
    ffi_err("PDCcont_persist", || cont_name(&state(), id).map(|_| ()))
}

/// Deletes the container and its tags; its objects stay (they only leave it). The handle
/// remains valid for PDCcont_close.
#[no_mangle]
pub extern "C" fn PDCcont_del(id: PdcId) -> Perr {
    ffi_err("PDCcont_del", || {
        let name = cont_name(&state(), id)?;
        client()?.delete_container(&name).map_err(err)
    })
}

// ---- tags --------------------------------------------------------------------------------

/// The pdcx tag a PDC tag value becomes: `PDC_STRING` values become strings (without the
/// terminating NUL), everything else the exact bytes given.
///
/// # Safety
/// `value` must point to `size` readable bytes.
pub unsafe fn tag_from_c(value: *const c_void, type_: c_int, size: u64) -> R<TagValue> {
    if value.is_null() {
        return Err("tag value is NULL".into());
    }
    let n = usize::try_from(size).map_err(|_| "tag value size too large".to_string())?;
    // SAFETY: the caller promises `size` readable bytes.
    let bytes = unsafe { std::slice::from_raw_parts(value as *const u8, n) };
    if type_ == PDC_STRING {
        let text = bytes.split(|b| *b == 0).next().unwrap_or(&[]);
        if let Ok(s) = std::str::from_utf8(text) {
            return Ok(TagValue::Str(s.to_string()));
        }
    }
    Ok(TagValue::Bytes(bytes.to_vec()))
}

/// A tag pdcx itself reads (`pdcx.*`: retention, durability, ...) given from C with a
/// numeric PDC type becomes a number, as from Python and the CLI; any other tag keeps PDC's
/// bytes (PDC programs read back exactly what they stored).
///
/// # Safety
/// As [`tag_from_c`].
pub unsafe fn pdcx_tag_from_c(
    key: &str,
    value: *const c_void,
    type_: c_int,
    size: u64,
) -> R<TagValue> {
    // SAFETY: forwarded caller contract.
    let v = unsafe { tag_from_c(value, type_, size)? };
    let TagValue::Bytes(b) = &v else { return Ok(v) };
    if !key.starts_with("pdcx.") {
        return Ok(v);
    }
    let int = |signed: bool| -> Option<i64> {
        Some(match (b.len(), signed) {
            (1, true) => i8::from_ne_bytes(b[..1].try_into().ok()?) as i64,
            (1, false) => b[0] as i64,
            (2, true) => i16::from_ne_bytes(b[..2].try_into().ok()?) as i64,
            (2, false) => u16::from_ne_bytes(b[..2].try_into().ok()?) as i64,
            (4, true) => i32::from_ne_bytes(b[..4].try_into().ok()?) as i64,
            (4, false) => u32::from_ne_bytes(b[..4].try_into().ok()?) as i64,
            (8, true) => i64::from_ne_bytes(b[..8].try_into().ok()?),
            (8, false) => i64::try_from(u64::from_ne_bytes(b[..8].try_into().ok()?)).ok()?,
            _ => return None,
        })
    };
    let typed = match type_ {
        PDC_SHORT | PDC_INT | PDC_LONG | PDC_INT8 | PDC_INT16 | PDC_INT32 | PDC_INT64 => {
            int(true).map(TagValue::Int)
        }
        PDC_UINT | PDC_UINT8 | PDC_UINT16 | PDC_UINT32 | PDC_UINT64 => {
            int(false).map(TagValue::Int)
        }
        PDC_FLOAT if b.len() == 4 => b[..4]
            .try_into()
            .ok()
            .map(|a| TagValue::Float(f32::from_ne_bytes(a) as f64)),
        PDC_DOUBLE if b.len() == 8 => b[..8]
            .try_into()
            .ok()
            .map(|a| TagValue::Float(f64::from_ne_bytes(a))),
        _ => None,
    };
    Ok(typed.unwrap_or(v))
}

/// The bytes and PDC type returned for a pdcx tag: bytes as stored (type `PDC_CHAR`, since
/// the writer's type is not recorded); strings NUL-terminated (`PDC_STRING`); integers as
/// int64 (`PDC_INT64`); floats as double (`PDC_DOUBLE`).
pub fn tag_to_c(v: &TagValue) -> (Vec<u8>, c_int) {
    match v {
        TagValue::Bytes(b) => (b.clone(), PDC_CHAR),
        TagValue::Str(s) => {
            let mut b = s.as_bytes().to_vec();
            b.push(0);
            (b, PDC_STRING)
        }
        TagValue::Int(i) => (i.to_ne_bytes().to_vec(), PDC_INT64),
        TagValue::Float(f) => (f.to_ne_bytes().to_vec(), PDC_DOUBLE),
    }
}

/// What a tag call on handle `id` addresses.
pub fn tag_target(st: &State, id: PdcId) -> R<TagTarget> {
    match st.get(id)? {
        Handle::Cont(c) => Ok(TagTarget::Container(c.name.clone())),
        Handle::Obj(o) => Ok(TagTarget::Object(o.meta.id)),
        h => Err(format!(
            "id {id:#x} is a {}; tags belong to containers and objects",
            h.kind()
        )),
    }
}

/// Tag `name` of `target`; None when it has no such tag (never set, or deleted).
pub fn get_tag_value(target: &TagTarget, name: &str) -> R<Option<TagValue>> {
    let c = client()?;
    let tags = match target {
        TagTarget::Container(n) => c.get_container(n).map_err(err)?.tags,
        TagTarget::Object(id) => c.get_object(*id).map_err(err)?.tags,
    };
    Ok(tags.into_iter().find(|(k, _)| k == name).map(|(_, v)| v))
}

/// # Safety
/// `name` must be a C string and `value` point to `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn PDCcont_put_tag(
    id: PdcId,
    name: *mut c_char,
    value: *mut c_void,
    type_: c_int,
    size: u32,
) -> Perr {
    ffi_err("PDCcont_put_tag", || {
        // SAFETY: forwarded caller contract.
        let (key, v) = unsafe {
            (
                cstr(name, "tag name")?,
                tag_from_c(value, type_, size as u64)?,
            )
        };
        let st = state();
        let name = cont_name(&st, id)?;
        drop(st);
        client()?
            .put_tags(TagTarget::Container(name), vec![(key.to_string(), v)])
            .map_err(err)
    })
}

/// Tag value in a malloc'd buffer the caller frees.
///
/// # Safety
/// `name` must be a C string; the out pointers must be writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn PDCcont_get_tag(
    id: PdcId,
    name: *mut c_char,
    value: *mut *mut c_void,
    type_: *mut c_int,
    size: *mut u32,
) -> Perr {
    ffi_err("PDCcont_get_tag", || {
        // SAFETY: the caller promises a C string.
        let key = unsafe { cstr(name, "tag name") }?;
        if value.is_null() || size.is_null() {
            return Err("tag_value and value_size must not be NULL".into());
        }
        let cname = cont_name(&state(), id)?;
        // A tag that is not there (deleted, or never set) is no error in PDC: NULL, size 0.
        let Some(v) = get_tag_value(&TagTarget::Container(cname), key)? else {
            // SAFETY: checked non-null above; the caller promises writable out pointers.
            unsafe {
                *value = std::ptr::null_mut();
                *size = 0;
            }
            return Ok(());
        };
        let (bytes, t) = tag_to_c(&v);
        let len =
            u32::try_from(bytes.len()).map_err(|_| "tag value larger than 4 GiB".to_string())?;
        let p = malloc_copy(&bytes)?;
        // SAFETY: checked non-null above; the caller promises writable out pointers.
        unsafe {
            *value = p;
            *size = len;
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
pub unsafe extern "C" fn PDCcont_del_tag(id: PdcId, name: *mut c_char) -> Perr {
    ffi_err("PDCcont_del_tag", || {
        // SAFETY: the caller promises a C string.
        let key = unsafe { cstr(name, "tag name") }?;
        let cname = cont_name(&state(), id)?;
        crate::tag_deleted(client()?.delete_tag(TagTarget::Container(cname), key))
    })
}

// ---- object lists ------------------------------------------------------------------------

/// pdcx object id of `id`: an object handle, or a pdcx object id itself (as reported by
/// `meta_id` and `PDCcont_get_objids`).
pub fn object_id_of(st: &State, id: PdcId) -> R<u64> {
    if id < (1 << 56) {
        return Ok(id);
    }
    match st.get(id)? {
        Handle::Obj(o) => Ok(o.meta.id),
        h => Err(format!("id {id:#x} is a {}, not an object", h.kind())),
    }
}

unsafe fn objids(name: &str, id: PdcId, nobj: c_int, ids: *mut PdcId, add: bool) -> Perr {
    ffi_err(name, || {
        if nobj < 0 {
            return Err(format!("nobj is negative ({nobj})"));
        }
        // SAFETY: the caller promises `nobj` ids.
        let ids = unsafe { crate::u64s(ids, nobj as usize, "obj_ids") }?;
        let (cname, oids) = {
            let st = state();
            let cname = cont_name(&st, id)?;
            let oids = ids
                .iter()
                .map(|i| object_id_of(&st, *i))
                .collect::<R<Vec<_>>>()?;
            (cname, oids)
        };
        let c = client()?;
        for o in oids {
            if add {
                c.add_to_container(o, &cname).map_err(err)?;
            } else {
                c.remove_from_container(o, &cname).map_err(err)?;
            }
        }
        Ok(())
    })
}

/// # Safety
/// `ids` must point to `nobj` ids.
#[no_mangle]
pub unsafe extern "C" fn PDCcont_put_objids(id: PdcId, nobj: c_int, ids: *mut PdcId) -> Perr {
    // SAFETY: forwarded caller contract.
    unsafe { objids("PDCcont_put_objids", id, nobj, ids, true) }
}

/// # Safety
/// `ids` must point to `nobj` ids.
#[no_mangle]
pub unsafe extern "C" fn PDCcont_del_objids(id: PdcId, nobj: c_int, ids: *mut PdcId) -> Perr {
    // SAFETY: forwarded caller contract.
    unsafe { objids("PDCcont_del_objids", id, nobj, ids, false) }
}

/// The pdcx object ids (`meta_id`s) of the container's objects, sorted by name, in a malloc'd
/// array the caller frees.
///
/// # Safety
/// `nobj` and `ids` must be writable.
#[no_mangle]
pub unsafe extern "C" fn PDCcont_get_objids(
    id: PdcId,
    nobj: *mut c_int,
    ids: *mut *mut PdcId,
) -> Perr {
    ffi_err("PDCcont_get_objids", || {
        if nobj.is_null() || ids.is_null() {
            return Err("nobj and obj_ids must not be NULL".into());
        }
        let cname = cont_name(&state(), id)?;
        let objs = client()?.list_objects(Some(&cname)).map_err(err)?;
        let list: Vec<u64> = objs.iter().map(|o| o.id).collect();
        // SAFETY: checked non-null; the caller promises writable out pointers.
        unsafe { give_u64_array(&list, nobj, ids) }
    })
}

// ---- iterator ----------------------------------------------------------------------------

/// One position of a container or object iterator (`cont_handle` / `obj_handle` in C).
pub struct IterNode {
    pub next: *mut IterNode,
    pub cont: Option<Box<ContInfoBlock>>,
    pub obj: Option<Box<ObjInfoBlock>>,
}

// SAFETY: nodes are only touched under the state lock.
unsafe impl Send for IterNode {}

/// Links `nodes` into a list kept alive until PDCclose; returns the head (NULL if empty).
pub fn link_nodes(st: &mut State, nodes: Vec<IterNode>) -> *mut IterNode {
    let mut boxes: Vec<Box<IterNode>> = nodes.into_iter().map(Box::new).collect();
    let mut next: *mut IterNode = std::ptr::null_mut();
    for b in boxes.iter_mut().rev() {
        b.next = next;
        next = &mut **b as *mut IterNode;
    }
    for b in boxes {
        st.iter_nodes.insert(&*b as *const IterNode as usize);
        st.arena.push(b);
    }
    next
}

pub fn check_node(st: &State, p: *mut IterNode) -> R<()> {
    if p.is_null() {
        return Err("iterator handle is NULL (the iteration has ended)".into());
    }
    if !st.iter_nodes.contains(&(p as usize)) {
        return Err("not an iterator handle from this library (or PDCclose freed it)".into());
    }
    Ok(())
}

/// Every container of the deployment, by name.
#[no_mangle]
pub extern "C" fn PDCcont_iter_start() -> *mut IterNode {
    ffi("PDCcont_iter_start", std::ptr::null_mut(), || {
        let all = client()?.list_containers().map_err(err)?;
        let mut st = state();
        let nodes = all
            .iter()
            .map(|c| IterNode {
                next: std::ptr::null_mut(),
                cont: Some(ContInfoBlock::new(&c.name, 0, c.id)),
                obj: None,
            })
            .collect();
        Ok(link_nodes(&mut st, nodes))
    })
}

#[no_mangle]
pub extern "C" fn PDCcont_iter_null(h: *mut IterNode) -> bool {
    h.is_null()
}

/// # Safety
/// `h` must be NULL or an iterator position from this library (others are refused).
#[no_mangle]
pub unsafe extern "C" fn PDCcont_iter_next(h: *mut IterNode) -> *mut IterNode {
    ffi("PDCcont_iter_next", std::ptr::null_mut(), || {
        let st = state();
        check_node(&st, h)?;
        // SAFETY: validated as a live node owned by the state.
        Ok(unsafe { (*h).next })
    })
}

/// # Safety
/// `h` must be NULL or an iterator position from this library (others are refused).
#[no_mangle]
pub unsafe extern "C" fn PDCcont_iter_get_info(h: *mut IterNode) -> *mut PdcContInfo {
    ffi("PDCcont_iter_get_info", std::ptr::null_mut(), || {
        let st = state();
        check_node(&st, h)?;
        // SAFETY: validated as a live node owned by the state.
        match unsafe { (*h).cont.as_mut() } {
            Some(c) => Ok(&mut c.info as *mut PdcContInfo),
            None => Err("this is an object iterator; use PDCobj_iter_get_info".into()),
        }
    })
}
