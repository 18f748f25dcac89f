//! The write family: stages (payload or shared memory), reservations for one-copy writes,
//! commits (and a stage's commit in the same message), consistency points.

use super::{drain, no_payload, Reader, Session, GONE_MID_TRANSFER, RECV_KEEP};
use crate::engine::Staged;
use crate::Server;
use pdcx_core::protocol::{
    self, CommitOpts, Committed, Reservations, ShmLoc, StageItem, WriteRequest as Q,
    WriteResponse as A,
};
use pdcx_core::{Error, ErrorKind, Result};
use std::collections::HashMap;
use std::sync::atomic::Ordering;

pub(super) fn handle(
    server: &Server,
    req: Q,
    payload_len: u64,
    reader: &mut Reader,
    sess: &mut Session,
) -> Result<A> {
    Ok(match req {
        Q::Stage(r) => stage(server, r, payload_len, reader, sess)?,
        Q::Reserve(r) => A::Reserved(reserve(server, r.items, r.crcs.as_deref(), sess)?),
        Q::Commit(r) => {
            // Refused before anything is committed: the seal's home is the client's choice.
            if let Some(s) = &r.opts.seal {
                server.allowed.check_home(&s.home, sess.deployment_user())?;
            }
            A::Committed(commit(server, &mut sess.pending, &r.txns, &r.opts)?)
        }
        Q::SyncObjects(r) => {
            let ids = (!r.ids.is_empty()).then_some(r.ids);
            server.engine.register_deferred(ids.as_deref())?;
            A::Done
        }
        Q::SyncLog(_) => {
            server.engine.store().sync_committed()?;
            A::Done
        }
    })
}

/// `Stage`: the items' bytes from the frame payload or an attached arena, staged on this
/// connection; with `commit`, committed on this thread right away (no other thread is
/// involved: the reply goes out once the commit is done). If the stage fails, none of the
/// items stays staged.
fn stage(
    server: &Server,
    req: protocol::write::Stage,
    payload_len: u64,
    reader: &mut Reader,
    sess: &mut Session,
) -> Result<A> {
    if let Some(opts) = &req.commit {
        if !opts.checksums.is_empty() || opts.seal.is_some() {
            drain(reader, payload_len)?;
            return Err(Error::invalid(
                "a stage's commit takes no checksums and seals nothing: commit separately",
            ));
        }
    }
    let count = req.items.len() as u64;
    let txns: Vec<u64> = match &req.commit {
        Some(_) => req.items.iter().map(|i| i.txn).collect(),
        None => Vec::new(),
    };
    let staged = match &req.shm {
        Some(locs) => {
            no_payload(reader, payload_len).and_then(|()| stage_shm(server, req.items, locs, sess))
        }
        None => {
            let r = stage_payload(server, req.items, payload_len, reader, sess);
            if sess.recv.capacity() > crate::limits::keep_limit(server, RECV_KEEP) {
                sess.recv = Vec::new();
            }
            r
        }
    };
    let Some(opts) = req.commit else {
        return staged.map(|()| A::Staged(count));
    };
    if let Err(e) = staged {
        for t in &txns {
            sess.pending.remove(t);
        }
        return Err(e);
    }
    commit(server, &mut sess.pending, &txns, &opts)?;
    Ok(A::Staged(count))
}

fn stage_payload(
    server: &Server,
    items: Vec<StageItem>,
    payload_len: u64,
    reader: &mut Reader,
    sess: &mut Session,
) -> Result<()> {
    let recv = &mut sess.recv;
    let total = items.iter().try_fold(0u64, |a, i| a.checked_add(i.len));
    if total != Some(payload_len) {
        drain(reader, payload_len)?;
        return Err(Error::protocol(format!(
            "stage items declare {total:?} bytes but the frame carries {payload_len}"
        )));
    }
    // Read every item first so the stream stays framed even if one item is rejected. The
    // buffer is reused, so a steady stream of writes does not page-fault fresh memory; it
    // grows only as bytes arrive, so a client that announces far more than it sends costs
    // what it sent until the frame timeout drops it.
    let n = payload_len as usize;
    protocol::read_payload(reader, recv, n).map_err(|e| {
        if crate::limits::stalled_or_gone(&e) {
            Error::new(ErrorKind::Unavailable, GONE_MID_TRANSFER)
        } else {
            Error::io("reading write payload", &e)
        }
    })?;
    stage_received(server, items, sess)
}

/// Stages `items`, whose bytes are back to back at the start of `sess.recv`.
fn stage_received(server: &Server, items: Vec<StageItem>, sess: &mut Session) -> Result<()> {
    let mut at = 0usize;
    for item in items {
        let len = item.len as usize;
        let body = &sess.recv[at..at + len];
        at += len;
        let staged = server.engine.stage(item.txn, item.id, &item.region, body)?;
        sess.pending.insert(item.txn, staged);
    }
    // metrics hook (ops): staged bytes, over TCP or shared memory alike.
    server
        .metrics
        .staged
        .fetch_add(at as u64, Ordering::Relaxed);
    Ok(())
}

/// A `Stage` with each item's bytes in an attached arena. Every location is
/// checked before anything is staged. The bytes are checksummed and written to the log
/// straight from the arena: one copy (into the page cache) on the server. A client that keeps
/// writing into a block it handed over ruins only its own record (see `ShmArenas::slice`).
fn stage_shm(
    server: &Server,
    items: Vec<StageItem>,
    locs: &[ShmLoc],
    sess: &mut Session,
) -> Result<()> {
    if items.len() != locs.len() {
        return Err(Error::protocol(format!(
            "a shared-memory stage has {} items but {} locations",
            items.len(),
            locs.len()
        )));
    }
    let mut total = 0u64;
    for (item, loc) in items.iter().zip(locs) {
        sess.shm.check(*loc, item.len)?;
        total = total.saturating_add(item.len);
    }
    if total > server.config.max_payload {
        return Err(Error::invalid(format!(
            "stage of {total} bytes exceeds the server's limit of {}",
            server.config.max_payload
        )));
    }
    for (item, loc) in items.into_iter().zip(locs) {
        let body = sess.shm.slice(*loc, item.len)?;
        let staged = server
            .engine
            .stage_shared(item.txn, item.id, &item.region, body)?;
        sess.pending.insert(item.txn, staged);
    }
    server.shm_bytes.fetch_add(total, Ordering::Relaxed);
    server.metrics.staged.fetch_add(total, Ordering::Relaxed);
    Ok(())
}

/// `Reserve` (one-copy writes): every item is checked before anything is
/// reserved; each reserved item is pending in this session like a staged one, under its txn.
/// `crcs`: each item's payload checksum, or None: the checksums come with the commit (the
/// headers hold a placeholder until then).
fn reserve(
    server: &Server,
    items: Vec<StageItem>,
    crcs: Option<&[u32]>,
    sess: &mut Session,
) -> Result<Reservations> {
    if let Some(crcs) = crcs.filter(|c| c.len() != items.len()) {
        return Err(Error::protocol(format!(
            "Reserve has {} items but {} checksums",
            items.len(),
            crcs.len()
        )));
    }
    let mut total = 0u64;
    for item in &items {
        server
            .engine
            .check_stage_len(item.id, &item.region, item.len)?;
        total = total.saturating_add(item.len);
    }
    let mut spans = Vec::with_capacity(items.len());
    let lease = sess
        .writer
        .get_or_insert_with(|| server.engine.store().writer_lease());
    for (i, item) in items.into_iter().enumerate() {
        let crc = crcs.map_or(0, |c| c[i]);
        let (mut staged, (dev, ino)) =
            server
                .engine
                .reserve(lease, item.txn, item.id, &item.region, item.len, crc)?;
        staged.crc_late = crcs.is_none();
        spans.push((staged.loc.segment, dev, ino, staged.loc.offset));
        sess.pending.insert(item.txn, staged);
    }
    server.metrics.staged.fetch_add(total, Ordering::Relaxed);
    server
        .metrics
        .direct_written
        .fetch_add(total, Ordering::Relaxed);
    Ok(Reservations {
        dir: server.engine.log_dir().to_string_lossy().into_owned(),
        spans,
    })
}

/// `Commit`: the named writes staged on this connection, in this order. Writes reserved
/// without their checksums get `opts.checksums` (one per txn) first; with `opts.seal`, the log
/// is synced and the stream sealed after the commit.
fn commit(
    server: &Server,
    pending: &mut HashMap<u64, Staged>,
    txns: &[u64],
    opts: &CommitOpts,
) -> Result<Committed> {
    if !opts.checksums.is_empty() {
        if opts.checksums.len() != txns.len() {
            return Err(Error::protocol(format!(
                "a commit of {} writes carries {} checksums",
                txns.len(),
                opts.checksums.len()
            )));
        }
        for (t, &crc) in txns.iter().zip(&opts.checksums) {
            if let Some(s) = pending.get_mut(t).filter(|s| s.crc_late) {
                server.engine.store().set_reserved_crc(s, crc)?;
            }
        }
    }
    if let Some(t) = txns
        .iter()
        .find(|t| pending.get(t).is_some_and(|s| s.crc_late))
    {
        return Err(Error::protocol(format!(
            "transfer {t:#x} was reserved without its checksum and committed without one"
        )));
    }
    let mut staged = Vec::with_capacity(txns.len());
    for t in txns {
        match pending.remove(t) {
            Some(s) => staged.push(s),
            None => {
                return Err(Error::not_found(format!(
                    "transfer {t:#x} was not staged on this connection (lost connection or already waited?)"
                )))
            }
        }
    }
    server
        .engine
        .commit_with(&staged, opts.durability, opts.consistency)?;
    let epoch = match &opts.seal {
        Some(s) => Some(super::stream::sync_seal(server, s.id, &s.home)?),
        None => None,
    };
    Ok(Committed {
        count: staged.len() as u64,
        epoch,
    })
}
