//! PDCregion_* and PDCregion_transfer_*, and PDCobj_close / PDCobj_del, which wait for an
//! object's transfers.
//!
//! A transfer moves the elements of the *local* region of the user buffer to or from the
//! *remote* region of the object. The buffer is a dense C-order array of shape
//! `local.offset + local.size` (for 1-D: the region starts `offset` elements into the buffer,
//! as in PDC); both regions must hold the same number of elements, which travel in C order.
//! Writes gather the buffer at `start` (it may be reused at once); reads scatter into it at
//! `wait`. A waited transfer may be started again.

use crate::obj::{obj_meta, obj_mut};
use crate::types::*;
use crate::{client, err, ffi, ffi_err, state, Handle, PdcId, Perr, R};
use libc::{c_int, c_void};
use pdcx_client::{Status, Transfer};
use pdcx_core::region::{copy_region, Layout};
use pdcx_core::Region;
use std::sync::{Arc, Mutex};

pub struct RegionHandle {
    pub region: Region,
    pub info: Box<PdcRegionInfo>,
    offset: Vec<u64>,
    size: Vec<u64>,
}

// SAFETY: the info's pointers point into this handle; only touched under the state lock.
unsafe impl Send for RegionHandle {}

pub struct Xfer {
    buf: usize,
    obj: PdcId,
    elem: usize,
    local: Region,
    local_shape: Region,
    t: Transfer,
    started: bool,
    /// `PDCregion_transfer_status` said complete: PDC then forgets the request, and later
    /// status calls report `PDC_TRANSFER_STATUS_NOT_FOUND`.
    reported_complete: bool,
}

pub(crate) fn region_of(id: PdcId) -> R<Region> {
    match state().get(id)? {
        Handle::Region(r) => Ok(r.region.clone()),
        h => Err(format!("id {id:#x} is a {}, not a region", h.kind())),
    }
}

fn xfer(id: PdcId) -> R<Arc<Mutex<Xfer>>> {
    match state().get(id)? {
        Handle::Transfer(x) => Ok(x.clone()),
        h => Err(format!(
            "id {id:#x} is a {}, not a transfer request",
            h.kind()
        )),
    }
}

/// # Safety
/// `offset` and `size` must point to `ndims` values.
#[no_mangle]
pub unsafe extern "C" fn PDCregion_create(ndims: u64, offset: *mut u64, size: *mut u64) -> PdcId {
    ffi("PDCregion_create", 0, || {
        if ndims == 0 || ndims as usize > pdcx_core::MAX_DIMS {
            return Err(format!(
                "ndims must be 1..={}, got {ndims}",
                pdcx_core::MAX_DIMS
            ));
        }
        // SAFETY: the caller promises `ndims` values in each array.
        let (off, cnt) = unsafe {
            (
                crate::u64s(offset, ndims as usize, "offset")?,
                crate::u64s(size, ndims as usize, "size")?,
            )
        };
        let region = Region::new(off.clone(), cnt.clone()).map_err(crate::err)?;
        let mut h = Box::new(RegionHandle {
            region,
            info: Box::new(PdcRegionInfo {
                local_id: 0,
                obj: std::ptr::null_mut(),
                ndim: ndims as usize,
                offset: std::ptr::null_mut(),
                size: std::ptr::null_mut(),
                mapping: false,
                registered_op: 0,
                buf: std::ptr::null_mut(),
                unit: 0,
            }),
            offset: off,
            size: cnt,
        });
        h.info.offset = h.offset.as_mut_ptr();
        h.info.size = h.size.as_mut_ptr();
        let mut st = state();
        let id = st.insert(Handle::Pdc);
        h.info.local_id = id;
        st.handles.insert(id, Handle::Region(h));
        Ok(id)
    })
}

#[no_mangle]
pub extern "C" fn PDCregion_close(id: PdcId) -> Perr {
    ffi_err("PDCregion_close", || {
        region_of(id)?;
        state().handles.remove(&id);
        Ok(())
    })
}

/// Region infos belong to their region handle (freed by PDCregion_close): nothing to do.
#[no_mangle]
pub extern "C" fn PDCregion_free(_region: *mut PdcRegionInfo) {}

#[no_mangle]
pub extern "C" fn PDCregion_get_info(id: PdcId) -> *mut PdcRegionInfo {
    ffi(
        "PDCregion_get_info",
        std::ptr::null_mut(),
        || match state().get_mut(id)? {
            Handle::Region(r) => Ok(&mut *r.info as *mut PdcRegionInfo),
            h => Err(format!("id {id:#x} is a {}, not a region", h.kind())),
        },
    )
}

/// # Safety
/// `buf` must stay valid, and large enough for the local region's shape (see the module
/// docs), until the transfer is waited or closed.
#[no_mangle]
pub unsafe extern "C" fn PDCregion_transfer_create(
    buf: *mut c_void,
    access: c_int,
    obj_id: PdcId,
    local_reg: PdcId,
    remote_reg: PdcId,
) -> PdcId {
    ffi("PDCregion_transfer_create", 0, || {
        if buf.is_null() {
            return Err("buf is NULL".into());
        }
        let is_write = match access {
            PDC_WRITE => true,
            PDC_READ => false,
            a => {
                return Err(format!(
                    "access_type must be PDC_READ or PDC_WRITE, got {a}"
                ))
            }
        };
        let local = region_of(local_reg)?;
        let remote = region_of(remote_reg)?;
        // An object created without a type gets it now, or the transfer is refused.
        let mut meta = crate::obj::typed_meta(obj_id)?;
        if local.num_elements() != remote.num_elements() {
            return Err(format!(
                "local region {local} has {} elements but remote region {remote} has {}",
                local.num_elements(),
                remote.num_elements()
            ));
        }
        if remote.ndim() != meta.dims.len() && meta.dims.iter().all(|&d| d == 0) {
            // An object created without dims (or emptied) takes its rank from its first
            // transfer; the server refuses if another process gave it data meanwhile.
            meta = crate::obj::refresh(obj_id)?;
            if remote.ndim() != meta.dims.len() && meta.dims.iter().all(|&d| d == 0) {
                meta = client()?
                    .set_dims(meta.id, vec![0; remote.ndim()])
                    .map_err(crate::err)?;
                let mut st = state();
                let o = obj_mut(&mut st, obj_id)?;
                o.info.prop.set_dims(&meta.dims);
                o.unlimited = vec![true; remote.ndim()];
                o.meta = meta.clone();
            }
        }
        if remote.ndim() != meta.dims.len() {
            return Err(format!(
                "remote region {remote} has {} dims but object {} has {}",
                remote.ndim(),
                meta.name,
                meta.dims.len()
            ));
        }
        if remote.check_within(&meta.dims).is_err() {
            // Another process may have grown it; or it has unlimited dims to grow here.
            let before = meta.dims.clone();
            meta = crate::obj::refresh(obj_id)?;
            // An object with no elements grows in every dim (its size was unknown at creation).
            let unlimited = if before.iter().all(|&d| d == 0) {
                vec![true; meta.dims.len()]
            } else {
                obj_mut(&mut state(), obj_id)?.unlimited.clone()
            };
            let mut want = meta.dims.clone();
            let mut grow = false;
            for (d, w) in want.iter_mut().enumerate() {
                if remote.end(d) > *w && unlimited.get(d).copied().unwrap_or(false) {
                    *w = remote.end(d);
                    grow = true;
                }
            }
            if grow {
                // An elementwise maximum: processes growing it at once never shrink it.
                meta = client()?.extend_dims(meta.id, want).map_err(crate::err)?;
                let mut st = state();
                let o = obj_mut(&mut st, obj_id)?;
                o.info.prop.set_dims(&meta.dims);
                o.meta = meta.clone();
            }
            remote.check_within(&meta.dims).map_err(crate::err)?;
        }
        let local_shape =
            Region::whole(&(0..local.ndim()).map(|d| local.end(d)).collect::<Vec<_>>());
        let mut t = Transfer::for_object(
            &client()?,
            meta.id,
            meta.dtype,
            &meta.dims,
            remote,
            is_write,
        )
        .map_err(crate::err)?;
        {
            let mut st = state();
            let o = obj_mut(&mut st, obj_id)?;
            t.consistency = o.consistency;
            t.durability = o.durability;
        }
        let x = Xfer {
            buf: buf as usize,
            obj: obj_id,
            elem: meta.dtype.size(),
            local,
            local_shape,
            t,
            started: false,
            reported_complete: false,
        };
        Ok(state().insert(Handle::Transfer(Arc::new(Mutex::new(x)))))
    })
}

impl Xfer {
    fn user_len(&self) -> usize {
        self.local_shape.num_elements() as usize * self.elem
    }

    /// Loads the transfer with the local region of the user buffer, gathered straight into the
    /// buffer the transfer sends (a shared-memory block when the server is on this node).
    fn load(&mut self) -> pdcx_core::Result<()> {
        let Xfer {
            buf,
            elem,
            local,
            local_shape,
            t,
            ..
        } = self;
        let len = local_shape.num_elements() as usize * *elem;
        // SAFETY: PDCregion_transfer_create's contract: `buf` holds the local shape.
        let user = unsafe { std::slice::from_raw_parts(*buf as *const u8, len) };
        t.load_with(|out| gather(*elem, local, local_shape, user, out))
    }

    /// Copies a read's contiguous result into the local region of the user buffer.
    fn scatter(&self, data: &[u8]) {
        // SAFETY: as in `load`; the buffer is writable for read transfers.
        let user = unsafe { std::slice::from_raw_parts_mut(self.buf as *mut u8, self.user_len()) };
        copy_region(
            self.elem,
            &self.local,
            (
                &Layout {
                    region: &self.local,
                    base: 0,
                },
                data,
            ),
            (
                &Layout {
                    region: &self.local_shape,
                    base: 0,
                },
                user,
            ),
        );
    }
}

/// Copies the `local` region of a user buffer of shape `shape` into `out` (contiguous).
fn gather(elem: usize, local: &Region, shape: &Region, user: &[u8], out: &mut [u8]) {
    copy_region(
        elem,
        local,
        (
            &Layout {
                region: shape,
                base: 0,
            },
            user,
        ),
        (
            &Layout {
                region: local,
                base: 0,
            },
            out,
        ),
    );
}

fn xfers(ids: &[PdcId]) -> R<Vec<Arc<Mutex<Xfer>>>> {
    let mut seen = std::collections::HashSet::new();
    for id in ids {
        if !seen.insert(*id) {
            return Err(format!("transfer {id:#x} is listed twice"));
        }
    }
    ids.iter().map(|id| xfer(*id)).collect()
}

fn start(ids: &[PdcId]) -> R<()> {
    let arcs = xfers(ids)?;
    let mut guards: Vec<_> = arcs
        .iter()
        .map(|a| a.lock().unwrap_or_else(|p| p.into_inner()))
        .collect();
    for g in guards.iter_mut() {
        if g.started {
            return Err("transfer already started; wait for it before starting it again".into());
        }
        if g.t.is_write && g.local == g.local_shape && g.t.direct_write_possible() {
            // The local region is the whole buffer, in C order: its bytes go from the buffer
            // straight into the log of a server on this node (a one-copy write).
            // PDC's contract: the buffer is the transfer's until it is waited for.
            let (buf, len) = (g.buf as *const u8, g.user_len());
            // SAFETY: PDCregion_transfer_create's contract (`buf` holds the local shape) and
            // PDC's (unchanged until the wait, which every path performs).
            unsafe { g.t.set_write_source(buf, len) }.map_err(crate::err)?;
        } else if g.t.is_write {
            g.load().map_err(crate::err)?;
        } else if g.local == g.local_shape {
            // The local region is the whole buffer, in C order: a read from a server on this
            // node may land straight in it (a one-copy read). PDC's contract: the
            // buffer is the transfer's until it is waited for (close waits too).
            let (buf, len) = (g.buf as *mut u8, g.user_len());
            // SAFETY: as in `scatter`; valid until the wait, which every path performs.
            unsafe { g.t.set_read_target(buf, len) }.map_err(crate::err)?;
        }
    }
    let mut ts: Vec<&mut Transfer> = guards.iter_mut().map(|g| &mut g.t).collect();
    pdcx_client::start_all(&mut ts).map_err(crate::err)?;
    let mut st = state();
    for (id, g) in ids.iter().zip(guards.iter_mut()) {
        g.started = true;
        g.reported_complete = false;
        if let Ok(o) = obj_mut(&mut st, g.obj) {
            o.pending.insert(*id);
        }
    }
    Ok(())
}

/// Waits for the started transfers among `ids` (others are skipped); scatters reads.
pub fn wait_ids(ids: &[PdcId]) -> R<()> {
    let arcs: Vec<Arc<Mutex<Xfer>>> = ids.iter().filter_map(|id| xfer(*id).ok()).collect();
    wait_arcs(ids, &arcs)
}

fn wait_arcs(ids: &[PdcId], arcs: &[Arc<Mutex<Xfer>>]) -> R<()> {
    let mut guards: Vec<_> = arcs
        .iter()
        .map(|a| a.lock().unwrap_or_else(|p| p.into_inner()))
        .collect();
    let mut active: Vec<_> = guards.iter_mut().filter(|g| g.started).collect();
    let r = {
        let mut ts: Vec<&mut Transfer> = active.iter_mut().map(|g| &mut g.t).collect();
        pdcx_client::wait_all(&mut ts)
    };
    let mut first_err = r.err().map(crate::err);
    for g in active.iter_mut() {
        g.started = false;
        if !g.t.is_write && first_err.is_none() && !g.t.landed_in_target() {
            match g.t.take_payload() {
                Some(data) => g.scatter(data.as_slice()),
                None => first_err = Some("read finished without data".into()),
            }
        }
    }
    let mut st = state();
    for (id, g) in ids.iter().zip(guards.iter()) {
        if let Ok(o) = obj_mut(&mut st, g.obj) {
            o.pending.remove(id);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// Waits for every started transfer of the process (PDCclose).
pub fn wait_everything() {
    let (ids, arcs): (Vec<PdcId>, Vec<Arc<Mutex<Xfer>>>) = state()
        .handles
        .iter()
        .filter_map(|(id, h)| match h {
            Handle::Transfer(x) => Some((*id, x.clone())),
            _ => None,
        })
        .unzip();
    if let Err(e) = wait_arcs(&ids, &arcs) {
        eprintln!("pdcx: PDCclose: a pending transfer failed: {e}");
    }
}

// PDCobj_close and PDCobj_del live here rather than in obj.rs: both first wait for the
// object's started transfers, and objects must not know about transfers.

fn wait_pending(id: PdcId) -> R<()> {
    let pending: Vec<PdcId> = obj_mut(&mut state(), id)?.pending.drain().collect();
    wait_ids(&pending)
}

/// Waits for the object's started transfers and makes this process's relaxed writes of it
/// visible (the consistency point; nothing to do for strong objects), then frees the handle.
#[no_mangle]
pub extern "C" fn PDCobj_close(id: PdcId) -> Perr {
    ffi_err("PDCobj_close", || {
        // PDC's close calls drop a reference to whatever the id is (`PDC_dec_ref`), and its
        // own vpicio.c closes its regions with PDCobj_close: a region closes here too.
        if matches!(state().handles.get(&id), Some(Handle::Region(_))) {
            state().handles.remove(&id);
            return Ok(());
        }
        let oid = obj_meta(&mut state(), id)?.id;
        let r = wait_pending(id).and_then(|()| client()?.sync(&[oid]).map_err(err));
        state().handles.remove(&id);
        r
    })
}

/// Deletes the object (metadata, tags, memberships, extents; its log bytes become garbage on
/// the server). The handle stays valid for PDCobj_close.
#[no_mangle]
pub extern "C" fn PDCobj_del(id: PdcId) -> Perr {
    ffi_err("PDCobj_del", || {
        let oid = obj_meta(&mut state(), id)?.id;
        wait_pending(id)?;
        client()?.delete_object(oid).map_err(err)
    })
}

unsafe fn id_list<'a>(ids: *mut PdcId, n: c_int) -> R<&'a [PdcId]> {
    if n < 0 {
        return Err(format!("size is negative ({n})"));
    }
    if n == 0 {
        return Ok(&[]);
    }
    if ids.is_null() {
        return Err("transfer id array is NULL".into());
    }
    // SAFETY: the caller promises `n` ids.
    Ok(unsafe { std::slice::from_raw_parts(ids, n as usize) })
}

#[no_mangle]
pub extern "C" fn PDCregion_transfer_start(id: PdcId) -> Perr {
    ffi_err("PDCregion_transfer_start", || start(&[id]))
}

/// # Safety
/// `ids` must point to `n` ids.
#[no_mangle]
pub unsafe extern "C" fn PDCregion_transfer_start_all(ids: *mut PdcId, n: c_int) -> Perr {
    // SAFETY: forwarded caller contract.
    ffi_err("PDCregion_transfer_start_all", || {
        start(unsafe { id_list(ids, n) }?)
    })
}

/// The communicator is not needed: every rank ships its own data.
#[no_mangle]
pub extern "C" fn PDCregion_transfer_start_mpi(id: PdcId, _comm: *mut c_void) -> Perr {
    ffi_err("PDCregion_transfer_start_mpi", || start(&[id]))
}

/// # Safety
/// `ids` must point to `n` ids.
#[no_mangle]
pub unsafe extern "C" fn PDCregion_transfer_start_all_mpi(
    ids: *mut PdcId,
    n: c_int,
    _comm: *mut c_void,
) -> Perr {
    // SAFETY: forwarded caller contract.
    ffi_err("PDCregion_transfer_start_all_mpi", || {
        start(unsafe { id_list(ids, n) }?)
    })
}

#[no_mangle]
pub extern "C" fn PDCregion_transfer_wait(id: PdcId) -> Perr {
    ffi_err("PDCregion_transfer_wait", || {
        let x = xfer(id)?;
        let (done, started) = {
            let g = x.lock().unwrap_or_else(|p| p.into_inner());
            (g.reported_complete, g.started)
        };
        // Finished by the status call that reported it complete: nothing left to wait for.
        if done {
            return Ok(());
        }
        if !started {
            return Err(format!("transfer {id:#x} was not started"));
        }
        wait_arcs(&[id], &[x])
    })
}

/// # Safety
/// `ids` must point to `n` ids.
#[no_mangle]
pub unsafe extern "C" fn PDCregion_transfer_wait_all(ids: *mut PdcId, n: c_int) -> Perr {
    ffi_err("PDCregion_transfer_wait_all", || {
        // SAFETY: forwarded caller contract.
        let ids = unsafe { id_list(ids, n) }?;
        let arcs = xfers(ids)?;
        wait_arcs(ids, &arcs)
    })
}

/// # Safety
/// `completed` must be writable.
#[no_mangle]
pub unsafe extern "C" fn PDCregion_transfer_status(id: PdcId, completed: *mut c_int) -> Perr {
    ffi_err("PDCregion_transfer_status", || {
        if completed.is_null() {
            return Err("completed is NULL".into());
        }
        let x = xfer(id)?;
        let status = {
            let g = x.lock().unwrap_or_else(|p| p.into_inner());
            if g.reported_complete {
                None
            } else {
                Some(g.t.status())
            }
        };
        let s = match status {
            None | Some(Status::Idle) => PDC_TRANSFER_STATUS_NOT_FOUND,
            Some(Status::Pending) => PDC_TRANSFER_STATUS_PENDING,
            // PDC forgets a request once it reported it complete (later calls: NOT_FOUND), and
            // a program may then use its buffer without a wait: finish it as a wait would (a
            // read lands in the user buffer).
            Some(Status::Complete) => {
                wait_arcs(&[id], std::slice::from_ref(&x))?;
                x.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .reported_complete = true;
                PDC_TRANSFER_STATUS_COMPLETE
            }
            Some(Status::Failed(e)) => return Err(format!("transfer failed: {}", e.message)),
        };
        // SAFETY: checked non-null.
        unsafe { *completed = s };
        Ok(())
    })
}

/// Waits for the transfer if it was started and not waited, then frees it.
#[no_mangle]
pub extern "C" fn PDCregion_transfer_close(id: PdcId) -> Perr {
    ffi_err("PDCregion_transfer_close", || {
        let x = xfer(id)?;
        let r = wait_arcs(&[id], &[x]);
        state().handles.remove(&id);
        r
    })
}

/// Buffer mapping (PDC's older API) is not supported; use region transfers.
#[no_mangle]
pub extern "C" fn PDCbuf_obj_map(
    _buf: *mut c_void,
    _t: c_int,
    _l: PdcId,
    _o: PdcId,
    _r: PdcId,
) -> Perr {
    ffi_err("PDCbuf_obj_map", || {
        Err("not supported by pdcx; use PDCregion_transfer_*".into())
    })
}

#[no_mangle]
pub extern "C" fn PDCbuf_obj_unmap(_o: PdcId, _r: PdcId) -> Perr {
    ffi_err("PDCbuf_obj_unmap", || {
        Err("not supported by pdcx; use PDCregion_transfer_*".into())
    })
}

/// Why region locks fail: pdcx has no region lock, and reporting one that excludes nothing
/// would let a program believe its ranks are serialized when they are not.
const NO_REGION_LOCKS: &str = "pdcx has no region locks (nothing would be excluded): \
     overlapping transfers are ordered by the servers, the last one waited wins; order \
     ranks with MPI (e.g. MPI_Barrier) where a program needs exclusion";

/// Fails with a message: see [`NO_REGION_LOCKS`].
#[no_mangle]
pub extern "C" fn PDCreg_obtain_lock(_o: PdcId, _r: PdcId, _a: c_int, _m: c_int) -> Perr {
    ffi_err("PDCreg_obtain_lock", || Err(NO_REGION_LOCKS.into()))
}

/// Fails with a message, as [`PDCreg_obtain_lock`] does (no lock was ever held).
#[no_mangle]
pub extern "C" fn PDCreg_release_lock(_o: PdcId, _r: PdcId, _a: c_int) -> Perr {
    ffi_err("PDCreg_release_lock", || Err(NO_REGION_LOCKS.into()))
}
