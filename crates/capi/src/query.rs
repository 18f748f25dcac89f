//! PDCquery_*: value queries over object data, evaluated by the servers, with PDC's
//! structs and semantics:
//! - `PDCquery_create` takes an object handle or a pdcx object id, and keeps the constant's
//!   raw bytes in the constraint's `value` field as PDC does (a `double` holding the typed
//!   value's bytes);
//! - `PDCquery_and`/`or` build a tree (`left`, `right`, `combine_op`) whose region is the first
//!   operand's, else the second's; `PDCquery_sel_region` keeps the caller's region pointer,
//!   read when the query runs;
//! - `PDCquery_get_selection` fills a `pdc_selection_t` whose `coords` (ndim u64 per hit, C
//!   order) `PDCselection_free` frees; `PDCquery_get_data` reads an object's values at a
//!   selection's coordinates (picked by the object's owner);
//! - `PDCquery_free` frees one node, `PDCquery_free_all` the tree.
//!
//! Query nodes are allocated with `calloc` and remembered, so a pointer that is not a live
//! query is refused with a message instead of being dereferenced. (Tag queries:
//! PDCobj_get_id, PDCcont_get_objids.)

use crate::types::PdcRegionInfo;
use crate::{client, ffi, state, Handle, PdcId, Perr, FAIL, SUCCEED};
use libc::{c_int, c_void, size_t};
use pdcx_core::valuequery::{QueryWant, Scalar, ValueExpr, ValueOp};
use pdcx_core::{ObjectId, Region};
use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};

pub const PDC_QUERY_AND: c_int = 1;
pub const PDC_QUERY_OR: c_int = 2;

#[repr(C)]
pub struct PdcSelection {
    pub query_id: PdcId,
    pub ndim: size_t,
    pub nhits: u64,
    pub coords: *mut u64,
    pub coords_alloc: u64,
}

#[repr(C)]
pub struct PdcQueryConstraint {
    pub obj_id: PdcId,
    pub op: c_int,
    pub type_: c_int,
    /// The constant's bytes (PDC copies the typed value into this `double` field).
    pub value: [u8; 8],
    pub hist: *mut c_void,
    pub is_range: c_int,
    pub op2: c_int,
    pub value2: [u8; 8],
    pub storage_region_list_head: *mut c_void,
    pub origin_server: PdcId,
    pub n_sent: c_int,
    pub n_recv: c_int,
}

#[repr(C)]
pub struct PdcQuery {
    pub constraint: *mut PdcQueryConstraint,
    pub left: *mut PdcQuery,
    pub right: *mut PdcQuery,
    pub combine_op: c_int,
    pub region: *mut PdcRegionInfo,
    pub region_constraint: *mut c_void,
    pub sel: *mut PdcSelection,
}

/// Live query nodes (addresses), so stale or foreign pointers are refused.
static LIVE: LazyLock<Mutex<HashSet<usize>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

fn live() -> std::sync::MutexGuard<'static, HashSet<usize>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

fn check_live(q: *mut PdcQuery) -> Result<(), String> {
    if q.is_null() {
        return Err("the query is NULL".into());
    }
    if !live().contains(&(q as usize)) {
        return Err(format!(
            "{q:p} is not a live query (never created by PDCquery_*, or freed)"
        ));
    }
    Ok(())
}

fn alloc_query() -> *mut PdcQuery {
    // SAFETY: calloc of a plain-old-data struct; all-zero is a valid PdcQuery (null pointers).
    let q = unsafe { libc::calloc(1, std::mem::size_of::<PdcQuery>()) } as *mut PdcQuery;
    if !q.is_null() {
        live().insert(q as usize);
    }
    q
}

fn op_of(op: c_int) -> Result<ValueOp, String> {
    Ok(match op {
        1 => ValueOp::Gt,
        2 => ValueOp::Lt,
        3 => ValueOp::Ge,
        4 => ValueOp::Le,
        5 => ValueOp::Eq,
        _ => {
            return Err(format!(
                "unknown pdc_query_op_t {op} (PDC_GT, PDC_LT, PDC_GTE, PDC_LTE or PDC_EQ)"
            ))
        }
    })
}

/// Bytes of a constant of PDC type `t`, and its value.
fn scalar_of(t: c_int, raw: &[u8; 8]) -> Result<Scalar, String> {
    use crate::types::*;
    let b2 = [raw[0], raw[1]];
    let b4 = [raw[0], raw[1], raw[2], raw[3]];
    Ok(match t {
        PDC_SHORT | PDC_INT16 => Scalar::Int(i16::from_ne_bytes(b2) as i64),
        PDC_INT | PDC_INT32 => Scalar::Int(i32::from_ne_bytes(b4) as i64),
        PDC_UINT | PDC_UINT32 => Scalar::Int(u32::from_ne_bytes(b4) as i64),
        PDC_LONG | PDC_INT64 => Scalar::Int(i64::from_ne_bytes(*raw)),
        PDC_INT8 | PDC_CHAR => Scalar::Int(raw[0] as i8 as i64),
        PDC_UINT8 | PDC_BOOLEAN => Scalar::Int(raw[0] as i64),
        PDC_UINT16 => Scalar::Int(u16::from_ne_bytes(b2) as i64),
        PDC_UINT64 | PDC_SIZE_T => Scalar::UInt(u64::from_ne_bytes(*raw)),
        PDC_FLOAT => Scalar::Float(f32::from_ne_bytes(b4) as f64),
        PDC_DOUBLE => Scalar::Float(f64::from_ne_bytes(*raw)),
        _ => return Err(format!("pdc_var_type_t {t} cannot be a query constant")),
    })
}

fn type_size(t: c_int) -> Result<usize, String> {
    use crate::types::*;
    Ok(match t {
        PDC_INT8 | PDC_UINT8 | PDC_CHAR | PDC_BOOLEAN => 1,
        PDC_SHORT | PDC_INT16 | PDC_UINT16 => 2,
        PDC_INT | PDC_INT32 | PDC_UINT | PDC_UINT32 | PDC_FLOAT => 4,
        PDC_LONG | PDC_INT64 | PDC_UINT64 | PDC_SIZE_T | PDC_DOUBLE => 8,
        _ => return Err(format!("pdc_var_type_t {t} cannot be a query constant")),
    })
}

/// The pdcx object id of an object handle, or `id` itself taken as a pdcx object id (PDC
/// accepts both: a handle's `meta_id` is the global id).
fn object_id(id: PdcId) -> Result<ObjectId, String> {
    let st = state();
    match st.handles.get(&id) {
        Some(Handle::Obj(o)) => Ok(o.meta.id),
        Some(h) => Err(format!("id {id:#x} is a {}, not an object", h.kind())),
        None if id != 0 && id < crate::FIRST_HANDLE => Ok(id),
        None => Err(format!("unknown object id {id:#x}")),
    }
}

/// The query tree as a pdcx query. Each node is checked to be live.
fn expr_of(q: *mut PdcQuery, depth: usize) -> Result<ValueExpr, String> {
    check_live(q)?;
    if depth > 64 {
        return Err("the query is nested more than 64 levels (a cycle?)".into());
    }
    // SAFETY: q is a live node we allocated.
    let node = unsafe { &*q };
    if !node.constraint.is_null() {
        // SAFETY: constraints are allocated with their node and freed with it.
        let c = unsafe { &*node.constraint };
        let first = ValueExpr::Cond {
            obj: c.obj_id,
            op: op_of(c.op)?,
            value: scalar_of(c.type_, &c.value)?,
        };
        if c.is_range != 0 {
            let second = ValueExpr::Cond {
                obj: c.obj_id,
                op: op_of(c.op2)?,
                value: scalar_of(c.type_, &c.value2)?,
            };
            return Ok(ValueExpr::And(Box::new(first), Box::new(second)));
        }
        return Ok(first);
    }
    let left = expr_of(node.left, depth + 1)?;
    let right = expr_of(node.right, depth + 1)?;
    match node.combine_op {
        PDC_QUERY_AND => Ok(ValueExpr::And(Box::new(left), Box::new(right))),
        PDC_QUERY_OR => Ok(ValueExpr::Or(Box::new(left), Box::new(right))),
        op => Err(format!(
            "combine operation {op} is not supported (PDC_QUERY_AND or PDC_QUERY_OR)"
        )),
    }
}

/// The region set with `PDCquery_sel_region` (read from the caller's struct now).
fn region_of(q: *mut PdcQuery) -> Result<Option<Region>, String> {
    // SAFETY: q was checked live by expr_of.
    let r = unsafe { (*q).region };
    if r.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller keeps the region alive while the query uses it, as in PDC.
    let info = unsafe { &*r };
    if info.ndim == 0
        || info.ndim > pdcx_core::MAX_DIMS
        || info.offset.is_null()
        || info.size.is_null()
    {
        return Err(format!(
            "the query's region has ndim {} and offset/size pointers {:p}/{:p}",
            info.ndim, info.offset, info.size
        ));
    }
    // SAFETY: ndim entries each, as the struct promises.
    let (offset, count) = unsafe {
        (
            std::slice::from_raw_parts(info.offset, info.ndim).to_vec(),
            std::slice::from_raw_parts(info.size, info.ndim).to_vec(),
        )
    };
    Region::new(offset, count).map(Some).map_err(|e| e.message)
}

fn run(
    q: *mut PdcQuery,
    coords: bool,
) -> Result<(pdcx_core::valuequery::QueryAnswer, Vec<u8>), String> {
    let expr = expr_of(q, 0)?;
    let region = region_of(q)?;
    let want = QueryWant {
        coords,
        ..QueryWant::default()
    };
    client()?
        .value_query(expr, region, want)
        .map_err(|e| e.message)
}

///
/// # Safety
/// `value` must point to a value of type `type_`.
#[no_mangle]
pub unsafe extern "C" fn PDCquery_create(
    obj_id: PdcId,
    op: c_int,
    type_: c_int,
    value: *mut c_void,
) -> *mut PdcQuery {
    ffi("PDCquery_create", std::ptr::null_mut(), || {
        if value.is_null() {
            return Err("value is NULL".into());
        }
        op_of(op)?;
        let size = type_size(type_)?;
        let id = object_id(obj_id)?;
        let mut raw = [0u8; 8];
        // SAFETY: the caller passes a pointer to a value of `type_` (size bytes).
        unsafe { std::ptr::copy_nonoverlapping(value as *const u8, raw.as_mut_ptr(), size) };
        scalar_of(type_, &raw)?;
        let q = alloc_query();
        // SAFETY: calloc of a plain-old-data struct.
        let c = unsafe { libc::calloc(1, std::mem::size_of::<PdcQueryConstraint>()) }
            as *mut PdcQueryConstraint;
        if q.is_null() || c.is_null() {
            return Err("out of memory".into());
        }
        // SAFETY: both freshly allocated and zeroed.
        unsafe {
            (*c).obj_id = id;
            (*c).op = op;
            (*c).type_ = type_;
            (*c).value = raw;
            (*q).constraint = c;
        }
        Ok(q)
    })
}

fn combine(name: &str, q1: *mut PdcQuery, q2: *mut PdcQuery, how: c_int) -> *mut PdcQuery {
    ffi(name, std::ptr::null_mut(), || {
        check_live(q1)?;
        check_live(q2)?;
        if q1 == q2 {
            return Err("both operands are the same query (free_all would free it twice)".into());
        }
        let q = alloc_query();
        if q.is_null() {
            return Err("out of memory".into());
        }
        // SAFETY: all three are live nodes.
        unsafe {
            (*q).left = q1;
            (*q).right = q2;
            (*q).combine_op = how;
            (*q).region = if (*q1).region.is_null() {
                (*q2).region
            } else {
                (*q1).region
            };
        }
        Ok(q)
    })
}

#[no_mangle]
pub extern "C" fn PDCquery_and(q1: *mut PdcQuery, q2: *mut PdcQuery) -> *mut PdcQuery {
    combine("PDCquery_and", q1, q2, PDC_QUERY_AND)
}

#[no_mangle]
pub extern "C" fn PDCquery_or(q1: *mut PdcQuery, q2: *mut PdcQuery) -> *mut PdcQuery {
    combine("PDCquery_or", q1, q2, PDC_QUERY_OR)
}

///
/// # Safety
/// `q` must be a query from `PDCquery_*` (checked) and `region` a region info that stays valid while the query is used.
#[no_mangle]
pub unsafe extern "C" fn PDCquery_sel_region(q: *mut PdcQuery, region: *mut PdcRegionInfo) -> Perr {
    ffi("PDCquery_sel_region", FAIL, || {
        check_live(q)?;
        if region.is_null() {
            return Err("the region is NULL".into());
        }
        // SAFETY: live node.
        unsafe { (*q).region = region };
        Ok(SUCCEED)
    })
}

///
/// # Safety
/// `n` must point to a writable `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn PDCquery_get_nhits(q: *mut PdcQuery, n: *mut u64) -> Perr {
    ffi("PDCquery_get_nhits", FAIL, || {
        if n.is_null() {
            return Err("the output pointer is NULL".into());
        }
        let (answer, _) = run(q, false)?;
        // SAFETY: checked non-null; the caller's u64.
        unsafe { *n = answer.nhits };
        Ok(SUCCEED)
    })
}

///
/// # Safety
/// `sel` must point to a writable `pdc_selection_t`.
#[no_mangle]
pub unsafe extern "C" fn PDCquery_get_selection(q: *mut PdcQuery, sel: *mut PdcSelection) -> Perr {
    ffi("PDCquery_get_selection", FAIL, || {
        if sel.is_null() {
            return Err("the selection is NULL".into());
        }
        let (answer, bytes) = run(q, true)?;
        let n = bytes.len() / 8;
        let coords = if n == 0 {
            std::ptr::null_mut()
        } else {
            // SAFETY: malloc for the caller (PDCselection_free frees it with free()).
            let p = unsafe { libc::malloc(n * 8) } as *mut u64;
            if p.is_null() {
                return Err(format!("out of memory for {} hits", answer.nhits));
            }
            for (i, c) in bytes.chunks_exact(8).enumerate() {
                let v = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
                // SAFETY: i < n.
                unsafe { *p.add(i) = v };
            }
            p
        };
        // SAFETY: the caller's struct.
        unsafe {
            *sel = PdcSelection {
                query_id: q as usize as PdcId,
                ndim: answer.ndim as size_t,
                nhits: answer.nhits,
                coords,
                coords_alloc: n as u64,
            };
        }
        Ok(SUCCEED)
    })
}

/// The values of object `obj` at a selection's coordinates into `data`.
fn sel_data(obj: ObjectId, sel: *mut PdcSelection, data: *mut c_void) -> Result<Perr, String> {
    if sel.is_null() || data.is_null() {
        return Err("the selection or the data buffer is NULL".into());
    }
    // SAFETY: the caller's selection, filled by PDCquery_get_selection.
    let s = unsafe { &*sel };
    if s.nhits == 0 {
        return Ok(SUCCEED);
    }
    if s.coords.is_null() || s.ndim == 0 {
        return Err("the selection has hits but no coordinates".into());
    }
    let c = client()?;
    let meta = c.get_object(obj).map_err(|e| e.message)?;
    if meta.is_untyped() {
        return Err(meta.untyped_error().message);
    }
    if meta.dims.len() != s.ndim {
        return Err(format!(
            "the selection has {} dims, {} has {}",
            s.ndim,
            meta.name,
            meta.dims.len()
        ));
    }
    let n = (s.nhits as usize)
        .checked_mul(s.ndim)
        .ok_or("the selection's size overflows")?;
    // SAFETY: nhits * ndim coordinates, as the selection promises.
    let coords = unsafe { std::slice::from_raw_parts(s.coords, n) };
    let len = s.nhits as usize * meta.dtype.size();
    // SAFETY: the caller's buffer holds nhits elements of the object's type (PDC's contract).
    let out = unsafe { std::slice::from_raw_parts_mut(data as *mut u8, len) };
    c.read_points(obj, s.ndim, coords, out)
        .map_err(|e| e.message)?;
    Ok(SUCCEED)
}

///
/// # Safety
/// `sel` must be a selection filled by `PDCquery_get_selection` and `data` hold `nhits` elements of the object's type.
#[no_mangle]
pub unsafe extern "C" fn PDCquery_get_data(
    obj_id: PdcId,
    sel: *mut PdcSelection,
    data: *mut c_void,
) -> Perr {
    ffi("PDCquery_get_data", FAIL, || {
        sel_data(object_id(obj_id)?, sel, data)
    })
}

/// The values at the selection of the query's first object.
///
/// # Safety
/// as `PDCquery_get_data`, for the query's first object.
#[no_mangle]
pub unsafe extern "C" fn PDCquery_get_sel_data(
    q: *mut PdcQuery,
    sel: *mut PdcSelection,
    data: *mut c_void,
) -> Perr {
    ffi("PDCquery_get_sel_data", FAIL, || {
        let expr = expr_of(q, 0)?;
        let first = *expr.objects().first().ok_or("the query has no condition")?;
        sel_data(first, sel, data)
    })
}

/// PDC's own `PDCquery_get_histogram` computes nothing the caller can see: it succeeds for a
/// known object. So does this one (histograms: `pdcx query --values --bins`, Python).
#[no_mangle]
pub extern "C" fn PDCquery_get_histogram(obj_id: PdcId) -> Perr {
    ffi("PDCquery_get_histogram", FAIL, || {
        let id = object_id(obj_id)?;
        client()?.get_object(id).map_err(|e| e.message)?;
        Ok(SUCCEED)
    })
}

///
/// # Safety
/// `sel` must be a selection filled by `PDCquery_get_selection` (or zeroed).
#[no_mangle]
pub unsafe extern "C" fn PDCselection_free(sel: *mut PdcSelection) {
    ffi("PDCselection_free", (), || {
        if sel.is_null() {
            return Ok(());
        }
        // SAFETY: the caller's selection; coords were malloc'ed by get_selection.
        unsafe {
            if (*sel).coords_alloc > 0 && !(*sel).coords.is_null() {
                libc::free((*sel).coords as *mut c_void);
            }
            (*sel).coords = std::ptr::null_mut();
            (*sel).coords_alloc = 0;
        }
        Ok(())
    })
}

fn print_selection(sel: *mut PdcSelection, all: bool) {
    if sel.is_null() {
        println!("== NULL selection");
        return;
    }
    // SAFETY: the caller's selection.
    let s = unsafe { &*sel };
    println!(
        "== {} hits, {} coordinates allocated",
        s.nhits, s.coords_alloc
    );
    if s.coords.is_null() || s.ndim == 0 {
        return;
    }
    let shown = if all { s.nhits } else { s.nhits.min(10) } as usize;
    for i in 0..shown {
        // SAFETY: i < nhits, ndim coordinates each.
        let c = unsafe { std::slice::from_raw_parts(s.coords.add(i * s.ndim), s.ndim) };
        let text: Vec<String> = c.iter().map(u64::to_string).collect();
        println!("  ({})", text.join(", "));
    }
    if shown < s.nhits as usize {
        println!("  ... ({} more)", s.nhits as usize - shown);
    }
}

///
/// # Safety
/// `sel` must be a selection filled by `PDCquery_get_selection` (or NULL).
#[no_mangle]
pub unsafe extern "C" fn PDCselection_print(sel: *mut PdcSelection) {
    ffi("PDCselection_print", (), || {
        print_selection(sel, false);
        Ok(())
    })
}

///
/// # Safety
/// as `PDCselection_print`.
#[no_mangle]
pub unsafe extern "C" fn PDCselection_print_all(sel: *mut PdcSelection) {
    ffi("PDCselection_print_all", (), || {
        print_selection(sel, true);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn PDCquery_print(q: *mut PdcQuery) {
    ffi("PDCquery_print", (), || {
        let e = expr_of(q, 0)?;
        println!("{}", show(&e));
        Ok(())
    })
}

fn show(e: &ValueExpr) -> String {
    match e {
        ValueExpr::Cond { obj, op, value } => format!("{obj:#x} {} {value}", op.symbol()),
        ValueExpr::And(a, b) => format!("({} AND {})", show(a), show(b)),
        ValueExpr::Or(a, b) => format!("({} OR {})", show(a), show(b)),
    }
}

/// Frees one node (and its constraint), not its operands. Only live nodes are dereferenced.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
#[no_mangle]
pub extern "C" fn PDCquery_free(q: *mut PdcQuery) {
    ffi("PDCquery_free", (), || {
        if q.is_null() {
            return Ok(());
        }
        if !live().remove(&(q as usize)) {
            return Err(format!(
                "{q:p} is not a live query (never created, or already freed)"
            ));
        }
        // SAFETY: a live node we allocated; removed from the set, so freed once.
        unsafe {
            if !(*q).constraint.is_null() {
                libc::free((*q).constraint as *mut c_void);
            }
            libc::free(q as *mut c_void);
        }
        Ok(())
    })
}

/// Frees the whole tree.
#[no_mangle]
pub extern "C" fn PDCquery_free_all(q: *mut PdcQuery) {
    ffi("PDCquery_free_all", (), || {
        free_tree(q, 0);
        Ok(())
    })
}

fn free_tree(q: *mut PdcQuery, depth: usize) {
    if q.is_null() || depth > 64 || !live().contains(&(q as usize)) {
        return;
    }
    // SAFETY: live node.
    let (l, r) = unsafe { ((*q).left, (*q).right) };
    free_tree(l, depth + 1);
    free_tree(r, depth + 1);
    PDCquery_free(q);
}

/// Property queries (`PDCobj_prop_query`) are not implemented: object lookups by name or tag
/// are `PDCobj_get_id` and `PDCcont_get_objids`.
#[no_mangle]
pub extern "C" fn PDCobj_prop_query(
    cont_id: PdcId,
    prop_name: c_int,
    value: *mut c_void,
    out_ids: *mut c_void,
    n_out: *mut c_void,
) -> Perr {
    let _ = (cont_id, prop_name, value, out_ids, n_out);
    ffi("PDCobj_prop_query", FAIL, || {
        Err("not supported by pdcx; look objects up with PDCobj_get_id or by tag".into())
    })
}
