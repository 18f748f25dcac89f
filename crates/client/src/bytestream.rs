//! Byte-stream objects: growable 1-D byte objects whose size need not be known at creation
//! ("Montage on PDC" §VI): MPI-IO programs run under `pdcx run` log their files into them, and the
//! file API (`file.rs`) is built on them.
//!
//! A byte stream is an ordinary object (`u8`, one dimension, tag `pdcx.kind =
//! "bytestream"`) whose dims are its size. Its writers grow it at the owner with
//! `ExtendDims` (an elementwise maximum, so any number of writers grow it in any order
//! without failing) before their bytes are committed past the known end; `SetSize` sets it
//! exactly (truncate). Writes of many processes to one stream are ordinary region writes:
//! each process's bytes go to the server its placement picks (its node's server by default)
//! and the owner numbers every commit, so overlapping writes resolve to the last committed
//! and one process sees its own writes in program order.
//!
//! Write path ([`ByteStream::pwrite`]):
//! - a write of at least [`DIRECT_MIN`] bytes to the owner, on this node, is a one-copy
//!   write into the owner's log (its writeback started as it is copied) left uncommitted
//!   until anything that must see it (as the queue below) or the seal, which commits it in
//!   its own round trip (`Commit` with a `seal`); any other write of that size is committed at once
//!   (`memory` durability), one-copy when its server is on this node;
//! - smaller writes are queued in program order (a write that continues the previous one
//!   extends it) and committed together when the queue passes [`QUEUE_MAX`], and before
//!   anything that must see them: a read, `size`, `set_size`, `flush`, `commit`.
//!
//! Durability is the caller's consistency point: [`ByteStream::commit`] commits the queue
//! and makes every write of this handle durable on the servers that took them (`SyncLog`),
//! and the stream's create before them (writes do not wait for it). [`ByteStream::seal`]
//! then records the stream's content as a version at its owner. The process that seals
//! runs [`ByteStream::prepare_seal`] instead of `commit`: what must become durable on the
//! owner's node is then done by the seal's round trip (`Seal` with `sync_log`), so a one-process file
//! on the owner's node costs, from create to version: create, write, seal (the owner grows
//! a stream as it takes a write past the end; writers elsewhere send `ExtendDims` first).

use crate::client::{Client, Uncommitted};
use crate::direct_write::WriteBehind;
use pdcx_core::model::{KIND_BYTE_STREAM, KIND_TAG};
use pdcx_core::protocol::{
    catalog, stream, write, CommitOpts, Durability, ObjectSpec, SealAt, VersionInfo,
};
use pdcx_core::{Dtype, Error, ErrorKind, ObjectId, ObjectMeta, Region, Result, TagValue};
use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};

/// Writes at least this large are committed at once (one-copy when on this node).
pub const DIRECT_MIN: usize = 256 << 10;
/// Queued small writes are committed once they hold this many bytes.
pub const QUEUE_MAX: usize = 8 << 20;
/// Large writes left uncommitted for the consistency point (see `State::uncommitted`) are
/// committed once there are this many.
const MAX_UNCOMMITTED: usize = 64;
/// The largest size a byte stream may reach (offsets are u64; this leaves headroom).
pub const MAX_LEN: u64 = 1 << 60;

/// An open byte stream. Safe to share between threads (calls are serialised per handle).
pub struct ByteStream {
    client: Client,
    meta: ObjectMeta,
    /// This open created the stream.
    created: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Large one-copy writes to the owner, in the owner's log but not committed yet, in
    /// program order (all before the queued small writes). Committed before anything that
    /// must see them, like the queue, or by the seal itself (`Commit` with a `seal`), which saves
    /// the commit's round trip for a file written and sealed by one process.
    uncommitted: Vec<Uncommitted>,
    /// Queued small writes, in program order: (offset, bytes).
    queue: Vec<(u64, Vec<u8>)>,
    queued: usize,
    /// A size the owner has confirmed (the stream is at least this long).
    known_size: u64,
    /// Servers that committed writes of this handle since the last `commit`.
    dirty: BTreeSet<u32>,
    /// The owner held a create (or tag put) of this client that `prepare_seal` left for the
    /// seal's WAL fsync to cover.
    owner_meta_unsynced: bool,
    /// Something changed through this handle (created, written, resized) since the last
    /// [`take_changed`](ByteStream::take_changed).
    changed: bool,
    /// Writes are made durable soon ([`set_syncs_soon`](ByteStream::set_syncs_soon)).
    no_sync_soon: bool,
}

impl Client {
    /// Opens byte stream `name`, creating it (empty) when `create` is set and it does not
    /// exist ([`ByteStream::created`] tells). Refuses an object that is not a byte stream.
    pub fn bs_open(&self, name: &str, create: bool) -> Result<ByteStream> {
        // Creating first: one round trip for a new file (the common case of a writer), two
        // for an existing one.
        let created = if create {
            match self.create_object(ObjectSpec {
                name: name.to_string(),
                dims: vec![0],
                dtype: Dtype::Bytes,
                fill: None,
                containers: Vec::new(),
                tags: vec![(KIND_TAG.into(), TagValue::Str(KIND_BYTE_STREAM.into()))],
                creator: String::new(),
            }) {
                Ok(m) => Some(m),
                Err(e) if e.kind == ErrorKind::AlreadyExists => None,
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        let (meta, created) = match created {
            Some(m) => (m, true),
            None => (self.open_object(name)?, false),
        };
        if !meta.is_byte_stream() {
            return Err(Error::invalid(format!(
                "object {name:?} is not a byte stream (it is a {:?} array of dims {:?})",
                meta.dtype, meta.dims
            )));
        }
        Ok(ByteStream {
            client: self.clone(),
            created,
            state: Mutex::new(State {
                known_size: meta.dims[0],
                changed: created,
                ..State::default()
            }),
            meta,
        })
    }

    /// Byte streams whose names start with `prefix`.
    pub fn bs_list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        Ok(self
            .list_objects(None)?
            .into_iter()
            .filter(|m| m.name.starts_with(prefix) && m.is_byte_stream())
            .collect())
    }

    /// The versions of byte stream `id`, oldest first.
    pub fn bs_versions(&self, id: ObjectId) -> Result<Vec<VersionInfo>> {
        let owner = self.id_owner(id)?;
        self.call(owner, stream::Versions { id: Some(id) })
    }

    /// Every version recorded by every server (for `pdcx flush` and `pdcx ls`).
    pub fn all_versions(&self) -> Result<Vec<VersionInfo>> {
        let mut all = Vec::new();
        for rank in 0..self.size() {
            all.extend(self.call(rank, stream::Versions { id: None })?);
        }
        Ok(all)
    }
}

fn range(off: u64, len: u64) -> Result<Region> {
    off.checked_add(len)
        .filter(|&e| e <= MAX_LEN)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::OutOfBounds,
                format!("byte range {off}+{len} passes the largest byte stream ({MAX_LEN} bytes)"),
            )
        })?;
    Region::new(vec![off], vec![len])
}

impl Drop for ByteStream {
    fn drop(&mut self) {
        let mut st = self.lock();
        // Large writes left for a seal that never came are committed (visible, at `memory`),
        // as they were before they could wait for the seal: otherwise their reservations
        // would keep log segments pinned in the server session for the connection's life.
        // Nobody is left to tell of a failure: the writes were never made durable anyway.
        if let Err(e) = self.commit_uncommitted(&mut st) {
            crate::shm::debug(&format!(
                "{}: writes not committed when the handle was dropped: {e}",
                self.meta.name
            ));
        }
        // A create left for a seal that never came: the client's next consistency point
        // makes it durable.
        if st.owner_meta_unsynced {
            self.client.note_lazy(self.meta.owner);
        }
    }
}

impl ByteStream {
    pub fn id(&self) -> ObjectId {
        self.meta.id
    }

    /// The stream's metadata as of the open.
    pub fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    /// The client this handle uses.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The size this handle last learned from the owner (at open, or after a write, `size`
    /// or `set_size`); no round trip.
    pub fn known_size(&self) -> u64 {
        self.lock().known_size
    }

    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// Whether this open created the stream (so it is empty and has no versions).
    pub fn created(&self) -> bool {
        self.created
    }

    /// Whether anything changed through this handle (its create, a write, a resize, a
    /// discard) since the last call; clears the mark. A consistency point whose processes all
    /// say no has nothing to seal.
    pub fn take_changed(&self) -> bool {
        std::mem::take(&mut self.lock().changed)
    }

    /// Sets the mark [`take_changed`](Self::take_changed) reads (a seal that failed must be
    /// tried again at the next consistency point).
    pub fn mark_changed(&self) {
        self.lock().changed = true;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `data` at byte `off` (the stream grows as needed). Visible to other readers
    /// once committed: at the next flush point, or at once for large writes that are not
    /// one-copy writes to the owner (see the module doc).
    pub fn pwrite(&self, off: u64, data: &[u8]) -> Result<()> {
        self.pwritev(off, &[data])
    }

    /// [`pwrite`](Self::pwrite) of the buffers back to back.
    pub fn pwritev(&self, off: u64, bufs: &[&[u8]]) -> Result<()> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if len == 0 {
            return Ok(());
        }
        range(off, len as u64)?;
        let mut st = self.lock();
        st.changed = true;
        if len >= DIRECT_MIN {
            // Queued writes come before this one; uncommitted large ones may stay so.
            if !st.queue.is_empty() {
                self.drain(&mut st)?;
            }
            let region = range(off, len as u64)?;
            self.grow_for(&mut st, &region)?;
            let joined;
            let data: &[u8] = if let [one] = bufs {
                one
            } else {
                joined = bufs.concat();
                &joined
            };
            let dest = self.write_one(&mut st, &region, data)?;
            st.dirty.insert(dest);
            return Ok(());
        }
        match st.queue.last_mut() {
            // Continues the previous write: extend it (ParaLog's "active segment").
            Some((o, b)) if *o + b.len() as u64 == off => {
                for x in bufs {
                    b.extend_from_slice(x);
                }
            }
            _ => st.queue.push((off, bufs.concat())),
        }
        st.queued += len;
        if st.queued >= QUEUE_MAX {
            self.drain(&mut st)?;
        }
        Ok(())
    }

    /// Writes one large write; returns the server that took it. To the owner on this node it
    /// is left uncommitted for the consistency point (`State::uncommitted`), otherwise it is
    /// committed at once (`memory`). Another handle may have shrunk the stream since this
    /// one last grew it: then the server refuses the write as out of bounds, and it is
    /// retried once after growing the stream again.
    fn write_one(&self, st: &mut State, region: &Region, data: &[u8]) -> Result<u32> {
        let dest = self
            .client
            .data_server(self.meta.id, region, data.len() as u64)?;
        match self.write_now_or_later(st, region, data) {
            Err(e) if e.kind == ErrorKind::OutOfBounds => {
                st.known_size = 0;
                self.grow(st, region.end(0))?;
                self.write_now_or_later(st, region, data)?;
            }
            r => r?,
        }
        Ok(dest)
    }

    fn write_now_or_later(&self, st: &mut State, region: &Region, data: &[u8]) -> Result<()> {
        let id = self.meta.id;
        let write_behind = self.write_behind(st);
        match self
            .client
            .write_uncommitted(id, region, data, write_behind)?
        {
            Some(u) => {
                st.uncommitted.push(u);
                if st.uncommitted.len() >= MAX_UNCOMMITTED {
                    self.commit_uncommitted(st)?;
                }
                Ok(())
            }
            None => {
                // Committed now, so the uncommitted ones before it go first.
                self.commit_uncommitted(st)?;
                // Creates are made durable at the consistency point (`commit`, `seal`).
                self.client.write_creates_unsynced(
                    id,
                    region,
                    data,
                    Durability::Memory,
                    write_behind,
                )
            }
        }
    }

    /// Commits the uncommitted large writes (`State::uncommitted`), in order, at `memory`.
    /// They leave the list whatever happens: a failed commit loses them (their connection
    /// closed, or the server refused), and says so.
    fn commit_uncommitted(&self, st: &mut State) -> Result<()> {
        let list = std::mem::take(&mut st.uncommitted);
        for group in list.chunk_by(|a, b| (a.dest, a.conn) == (b.dest, b.conn)) {
            let commit = write::Commit {
                txns: group.iter().map(|u| u.txn).collect(),
                opts: CommitOpts {
                    checksums: group.iter().map(|u| u.crc).collect(),
                    ..CommitOpts::at(Durability::Memory)
                },
            };
            self.client.call_on(group[0].dest, group[0].conn, commit)?;
            st.dirty.insert(group[0].dest);
        }
        Ok(())
    }

    /// Before a write of `region`: makes sure the owner's size reaches its end, unless the
    /// write goes to the owner itself, which grows the stream as it takes the write (one
    /// round trip less).
    fn grow_for(&self, st: &mut State, region: &Region) -> Result<()> {
        let len = region.count.first().copied().unwrap_or(0);
        if self.client.data_server(self.meta.id, region, len)? == self.meta.owner {
            return Ok(());
        }
        self.grow(st, region.end(0))
    }

    /// Makes sure the owner's size is at least `end`.
    fn grow(&self, st: &mut State, end: u64) -> Result<()> {
        if end <= st.known_size {
            return Ok(());
        }
        let m = self.client.call(
            self.meta.owner,
            stream::ExtendDims {
                id: self.meta.id,
                dims: vec![end],
            },
        )?;
        st.known_size = m.dims[0];
        Ok(())
    }

    /// Commits the uncommitted large writes, then the queued writes, in order (each a commit
    /// of its own, so overlapping ones keep program order).
    fn drain(&self, st: &mut State) -> Result<()> {
        self.commit_uncommitted(st)?;
        if st.queue.is_empty() {
            return Ok(());
        }
        let end = st
            .queue
            .iter()
            .map(|(o, b)| o + b.len() as u64)
            .max()
            .unwrap_or(0);
        // The batch goes where its first write goes, placed by the batch's size (`write_batch`).
        let (o, b) = &st.queue[0];
        let first = range(*o, b.len() as u64)?;
        let total: u64 = st.queue.iter().map(|(_, b)| b.len() as u64).sum();
        if self.client.data_server(self.meta.id, &first, total)? != self.meta.owner {
            self.grow(st, end)?;
        }
        // One round trip for the whole queue, numbered in program order. Refused as out of
        // bounds: another handle shrank the stream meanwhile; grow it again and retry once.
        let dest = match self.write_queue(st) {
            Err(e) if e.kind == ErrorKind::OutOfBounds => {
                st.known_size = 0;
                self.grow(st, end)?;
                self.write_queue(st)?
            }
            r => r?,
        };
        // Committed: only now leave the queue (a failure keeps it for the next attempt).
        st.queue.clear();
        st.queued = 0;
        st.dirty.insert(dest);
        Ok(())
    }

    /// Commits the queue as one batch (`Client::write_batch`); the server that took it.
    fn write_queue(&self, st: &State) -> Result<u32> {
        let items: Vec<(Region, &[u8])> = st
            .queue
            .iter()
            .map(|(off, bytes)| Ok((range(*off, bytes.len() as u64)?, bytes.as_slice())))
            .collect::<Result<_>>()?;
        self.client
            .write_batch_creates_unsynced(self.meta.id, &items, Durability::Memory)
    }

    /// Commits every queued write of this handle (visible to every reader when it returns).
    pub fn flush(&self) -> Result<()> {
        let mut st = self.lock();
        self.drain(&mut st)
    }

    /// Whether a consistency point ([`commit`](Self::commit)) usually follows this handle's
    /// writes soon (the default, as for MPI-IO's consistency points): then each write's
    /// writeback starts as it is copied, so the commit's fdatasync finds little left. A file
    /// closed without `fsync` says no: starting writeback per MiB blocks the
    /// writer whenever the device queue is busy (Montage's mAdd: its 64 MiB of output took
    /// 14-136 ms in `pwrite`), and the kernel writes the pages back later anyway.
    pub fn set_syncs_soon(&self, soon: bool) {
        self.lock().no_sync_soon = !soon;
    }

    fn write_behind(&self, st: &State) -> WriteBehind {
        if st.no_sync_soon {
            WriteBehind::Never
        } else {
            // The consistency point syncs this write: its writeback starts as it is copied.
            WriteBehind::Pipelined
        }
    }

    /// The consistency point of this handle: [`flush`](Self::flush), then every write it
    /// committed is made durable on the servers that hold it (`local` durability).
    pub fn commit(&self) -> Result<()> {
        let mut st = self.lock();
        self.drain(&mut st)?;
        // The create first: writes of a stream whose create is lost are lost with it.
        if std::mem::take(&mut st.owner_meta_unsynced) {
            self.client.note_lazy(self.meta.owner);
        }
        self.client.sync_metadata()?;
        self.sync_logs(&mut st, None)
    }

    /// `SyncLog` on every server this handle wrote to since the last consistency point but
    /// `except`; a failure keeps the servers not synced for the next attempt.
    fn sync_logs(&self, st: &mut State, except: Option<u32>) -> Result<()> {
        let todo: Vec<u32> = st
            .dirty
            .iter()
            .copied()
            .filter(|r| Some(*r) != except)
            .collect();
        for rank in todo {
            self.client.call(rank, write::SyncLog {})?;
            st.dirty.remove(&rank);
        }
        Ok(())
    }

    /// The consistency point of the process that will [`seal`](Self::seal) right after
    /// (every other writer has run [`commit`](Self::commit)): like `commit`, except that
    /// what must become durable on the owner's node is left to the seal (`Seal` with `sync_log`: one
    /// round trip and one WAL fsync fewer per version).
    pub fn prepare_seal(&self) -> Result<()> {
        let mut st = self.lock();
        // Uncommitted large writes are left for the seal to commit, unless queued writes
        // must be committed after them.
        if !st.queue.is_empty() {
            self.drain(&mut st)?;
        }
        if self.client.sync_metadata_but(self.meta.owner)? {
            st.owner_meta_unsynced = true;
        }
        self.sync_logs(&mut st, Some(self.meta.owner))
    }

    /// The stream's size: the end of the furthest byte any writer committed (or the size
    /// last set), after this handle's queued writes are committed.
    pub fn size(&self) -> Result<u64> {
        let mut st = self.lock();
        self.drain(&mut st)?;
        // From the owner itself: a relayed lookup could answer from before the last growth.
        let m = self
            .client
            .call(self.meta.owner, catalog::GetObject { id: self.meta.id })?;
        st.known_size = m.dims[0];
        Ok(m.dims[0])
    }

    /// Sets the size to exactly `len` (truncate or grow; grown bytes read as zeros).
    pub fn set_size(&self, len: u64) -> Result<()> {
        if len > MAX_LEN {
            return Err(Error::new(
                ErrorKind::OutOfBounds,
                format!("size {len} passes the largest byte stream ({MAX_LEN} bytes)"),
            ));
        }
        let mut st = self.lock();
        self.drain(&mut st)?;
        st.changed = true;
        let req = stream::SetSize {
            id: self.meta.id,
            len,
        };
        let m = self.client.call(self.meta.owner, req)?;
        st.known_size = m.dims[0];
        Ok(())
    }

    /// Reads up to `out.len()` bytes at `off` (fewer at the end of the stream, 0 past it),
    /// with every committed write of every writer and this handle's queued ones.
    pub fn pread(&self, off: u64, out: &mut [u8]) -> Result<usize> {
        let size = self.size()?;
        if off >= size || out.is_empty() {
            return Ok(0);
        }
        let n = (size - off).min(out.len() as u64);
        let region = range(off, n)?;
        self.client
            .read_into(self.meta.id, &region, &mut out[..n as usize])?;
        Ok(n as usize)
    }

    /// Records the stream's current content as its next version, to be copied to `home` (an
    /// absolute file path or `s3://bucket/key`) by the servers in the background. Call after
    /// every writer's [`commit`](Self::commit) returned. Returns the version's epoch.
    pub fn seal(&self, home: &str) -> Result<u64> {
        let mut st = self.lock();
        let owner = self.meta.owner;
        let (id, home) = (self.meta.id, home.to_string());
        if !st.queue.is_empty() {
            self.drain(&mut st)?;
        }
        // One connection's uncommitted writes are committed by the seal itself.
        let fold = match st.uncommitted.as_slice() {
            [first, ..] if st.uncommitted.iter().all(|u| u.conn == first.conn) => Some(first.conn),
            [] => None,
            _ => {
                self.commit_uncommitted(&mut st)?;
                None
            }
        };
        // What `prepare_seal` left for the owner is made durable by the seal itself.
        let with_sync = fold.is_some() || st.owner_meta_unsynced || st.dirty.contains(&owner);
        let answer = match fold {
            Some(conn) => {
                let list = std::mem::take(&mut st.uncommitted);
                let req = write::Commit {
                    txns: list.iter().map(|u| u.txn).collect(),
                    opts: CommitOpts {
                        checksums: list.iter().map(|u| u.crc).collect(),
                        seal: Some(SealAt { id, home }),
                        ..CommitOpts::at(Durability::Memory)
                    },
                };
                self.client.call_on(owner, conn, req).and_then(|c| {
                    c.epoch.ok_or_else(|| {
                        Error::protocol("a sealing commit answered without an epoch")
                    })
                })
            }
            None => {
                let req = stream::Seal {
                    id,
                    home,
                    sync_log: with_sync,
                };
                self.client.call(owner, req)
            }
        };
        let epoch = answer?;
        if with_sync {
            st.dirty.remove(&owner);
            st.owner_meta_unsynced = false;
        }
        Ok(epoch)
    }

    /// Makes the stream's content its last sealed version again (empty if none): writes
    /// made after the last seal, e.g. by a run that crashed before its consistency point,
    /// stop being visible and never reach the home. For a writer re-opening a stream (rank 0
    /// of `MPI_File_open` under `pdcx run`), before anyone writes. Returns the bytes
    /// discarded.
    pub fn discard_incomplete(&self) -> Result<u64> {
        let mut st = self.lock();
        self.drain(&mut st)?;
        st.changed = true;
        let req = stream::DiscardIncomplete { id: self.meta.id };
        let r = self.client.call(self.meta.owner, req)?;
        st.known_size = 0;
        Ok(r)
    }

    /// The versions recorded so far, oldest first.
    pub fn versions(&self) -> Result<Vec<VersionInfo>> {
        self.client.bs_versions(self.meta.id)
    }
}
