//! Asynchronous transfers. `start` hands a copy of the data to a per-server worker thread and
//! returns; the worker ships it (`Stage`). `wait` queues a `Commit` behind it on the same
//! connection, so the server sees stage-then-commit in order, and blocks until it is applied.
//! Batched `start_all`/`wait_all` send one message per destination server. With a server on
//! this node the bytes travel through shared memory (`shm.rs`): `load` copies into an arena
//! block, and a read's result is the block the server wrote into.
//!
//! Small transfers (at most `ONE_MESSAGE_MAX` bytes) skip the worker: `start` only checks and
//! keeps them (a write's bytes are already the transfer's own copy, loaded before `start`),
//! and `wait`/`wait_all` sends each destination's small writes as one `Stage` carrying its commit (stage and
//! commit in one message, one round trip) and its small reads as one `Read`, on the calling
//! thread's pooled connection: no hand-off to another thread, whose two context switches would
//! cost more than the message itself. Their overlap with the caller's work is lost, which for
//! a few KiB is nothing; large transfers keep the worker path, where overlap matters.
//!
//! Status: `Pending` while in flight; `Complete` once the server holds the data (for reads: once
//! the data has arrived); `Failed` with the error. A write becomes visible to other clients
//! only when `wait` returns: that is the consistency point (under relaxed consistency `wait`
//! makes it durable, and `Client::sync` is the consistency point). A small transfer that was
//! started and not waited is `Pending`; asking its `status` sends it through the worker then
//! (a write as a plain stage, committed at `wait` as before), so a loop polling `status` until
//! `Complete` still ends.
//!
//! This module is the `Transfer` itself; by job: `state` (what it shares with its worker),
//! `job` (what the worker runs), `start` (`start_all`), `borrowed` (`start_all_from`: writes
//! started from the caller's bytes, which it may reuse on return), `wait` (`wait_all`, the
//! consistency point).

mod borrowed;
mod job;
mod start;
mod state;
mod wait;

pub use borrowed::start_all_from;
pub use start::start_all;
pub use state::Status;
pub use wait::wait_all;

use crate::client::Client;
use crate::shm::{Payload, UserBuf};
use crate::worker::Worker;
use job::{Job, Queued};
use pdcx_core::protocol::{Consistency, Durability, ReadItem, StageItem};
use pdcx_core::{Dtype, Error, ErrorKind, ObjectId, ObjectMeta, Region, Result};
use state::{Phase, ReadTarget, State};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// One region of one object moving in one direction.
pub struct Transfer {
    client: Client,
    pub id: ObjectId,
    pub region: Region,
    pub is_write: bool,
    pub durability: Durability,
    /// For writes: when other clients see them (from the client's setting for the object
    /// when the transfer is created).
    pub consistency: Consistency,
    /// The server this transfer talks to: the object's owner for reads; for writes the data
    /// server the placement chose at the last `start`.
    dest: u32,
    /// A read planned to go straight to the region's only data server (not the owner).
    held: bool,
    byte_len: usize,
    txn: u64,
    /// The loaded bytes: an arena block when shared memory is in use (see `shm.rs`).
    data: Option<Arc<Payload>>,
    /// For reads: the caller's memory the result may be read straight into.
    target: Option<ReadTarget>,
    state: Arc<State>,
}

impl Transfer {
    /// A transfer on object `id` whose current dims and dtype the caller already knows (the
    /// server re-checks both, so stale knowledge gives an error, never a wrong write).
    pub fn for_object(
        client: &Client,
        id: ObjectId,
        dtype: Dtype,
        dims: &[u64],
        region: Region,
        is_write: bool,
    ) -> Result<Transfer> {
        region.check_within(dims)?;
        let byte_len = region.byte_len(dtype.size())?;
        Ok(Transfer {
            client: client.clone(),
            id,
            dest: client.id_owner(id)?,
            held: false,
            byte_len: usize::try_from(byte_len)
                .map_err(|_| Error::invalid("region too large for this machine"))?,
            region,
            is_write,
            durability: Durability::default(),
            consistency: client.consistency(id),
            txn: 0,
            data: None,
            target: None,
            state: Arc::new(State {
                phase: Mutex::new((Phase::Idle, None)),
                cv: Condvar::new(),
                landed: AtomicBool::new(false),
            }),
        })
    }

    fn new(client: &Client, meta: &ObjectMeta, region: Region, is_write: bool) -> Result<Transfer> {
        Self::for_object(client, meta.id, meta.dtype, &meta.dims, region, is_write)
    }

    pub fn write(client: &Client, meta: &ObjectMeta, region: Region) -> Result<Transfer> {
        Self::new(client, meta, region, true)
    }

    pub fn read(client: &Client, meta: &ObjectMeta, region: Region) -> Result<Transfer> {
        Self::new(client, meta, region, false)
    }

    pub fn byte_len(&self) -> usize {
        self.byte_len
    }

    /// Gives a write transfer the bytes its next `start` sends (the caller's copy).
    pub fn load(&mut self, data: Vec<u8>) -> Result<()> {
        self.check_load(data.len())?;
        self.data = Some(Arc::new(Payload::Heap(data)));
        Ok(())
    }

    /// Copies `src` as the bytes the next `start` sends; the caller may reuse `src` at once.
    /// With shared memory in use this is the only user-space copy the data gets.
    pub fn load_from(&mut self, src: &[u8]) -> Result<()> {
        self.check_load(src.len())?;
        self.load_with(|dst| dst.copy_from_slice(src))
    }

    /// Like `load_from`, for callers that assemble the bytes themselves: `fill` must write
    /// all `byte_len()` bytes of the buffer it is given (an arena block or heap memory).
    pub fn load_with(&mut self, fill: impl FnOnce(&mut [u8])) -> Result<()> {
        self.check_load(self.byte_len)?;
        // Drop the previous bytes first so a reload can reuse their block.
        self.data = None;
        self.data = Some(Arc::new(self.client.payload_with(self.byte_len, fill)));
        Ok(())
    }

    /// Makes the caller's buffer the bytes the next `start` sends, without copying it: a
    /// large write to a server on this node is then written from it straight into the
    /// server's log (one copy; see `direct_write.rs`); to any other server it is copied at
    /// `start`, as `load_from` would.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes, and the bytes must not change, until this
    /// transfer has been waited for (the contract of PDC's `PDCregion_transfer_start`).
    pub unsafe fn set_write_source(&mut self, ptr: *const u8, len: usize) -> Result<()> {
        self.check_load(len)?;
        self.data = None;
        // SAFETY: forwarded from this function's contract.
        self.data = Some(Arc::new(Payload::User(unsafe { UserBuf::new(ptr, len) })));
        Ok(())
    }

    /// Whether [`set_write_source`](Self::set_write_source) can save this write a copy: a
    /// write large enough for one-copy writes, with some server on this node taking them.
    pub fn direct_write_possible(&self) -> bool {
        self.is_write && self.client.direct_transfers_possible(self.byte_len)
    }

    fn check_load(&self, len: usize) -> Result<()> {
        if !self.is_write {
            return Err(Error::invalid("load() is for write transfers"));
        }
        if len != self.byte_len {
            return Err(Error::new(
                ErrorKind::DtypeMismatch,
                format!(
                    "buffer has {len} bytes but region {} needs {}",
                    self.region, self.byte_len
                ),
            ));
        }
        Ok(())
    }

    pub fn start(&mut self) -> Result<()> {
        start_all(&mut [self])
    }

    pub fn wait(&mut self) -> Result<()> {
        wait_all(&mut [self])
    }

    pub fn status(&self) -> Status {
        let g = self.state.phase.lock().unwrap_or_else(|p| p.into_inner());
        match &g.0 {
            Phase::Idle => Status::Idle,
            Phase::Deferred => {
                drop(g);
                self.ship_deferred();
                Status::Pending
            }
            Phase::InFlight => Status::Pending,
            Phase::Delivered | Phase::Done => Status::Complete,
            Phase::Failed(e) => Status::Failed(e.clone()),
        }
    }

    /// Lets a read transfer put its result straight into `ptr` (`len` = `byte_len()` bytes,
    /// the region in C order) when it can: a one-copy read from the log of a server on this
    /// node. After `wait`, [`landed_in_target`](Self::landed_in_target) says whether it did;
    /// otherwise the result is in the payload as usual. Until the wait returns the memory may
    /// be written at any time (also partly, by a read that then falls back).
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `len` bytes, and not read or written by anyone else
    /// from the next `start` until its `wait` has returned (and the transfer must be waited
    /// for before the memory goes away).
    pub unsafe fn set_read_target(&mut self, ptr: *mut u8, len: usize) -> Result<()> {
        if self.is_write || len != self.byte_len {
            return Err(Error::invalid(
                "a read target is for read transfers, of exactly the region's size",
            ));
        }
        self.target = Some(ReadTarget {
            ptr: ptr as usize,
            len,
        });
        Ok(())
    }

    /// After `wait`: the result was read straight into the read target (no payload).
    pub fn landed_in_target(&self) -> bool {
        self.state.landed.load(Ordering::Relaxed)
    }

    /// The bytes a read transfer brought back (after `wait`); None before or for writes.
    pub fn take_result(&mut self) -> Option<Vec<u8>> {
        self.take_payload().map(|p| match p {
            Payload::Heap(v) => v,
            Payload::Shm(b) => b.as_slice().to_vec(),
            Payload::User(u) => u.as_slice().to_vec(),
        })
    }

    /// Like `take_result`, without a copy: a read through shared memory hands over the arena
    /// block the server wrote into (it returns to the arena when dropped).
    pub fn take_payload(&mut self) -> Option<Payload> {
        self.state
            .phase
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .take()
    }

    /// Sends a deferred transfer through its worker, as `start` does for large ones (the
    /// write is staged; `wait` commits it). Nothing if it is not deferred (any more).
    fn ship_deferred(&self) {
        {
            let mut g = self.state.phase.lock().unwrap_or_else(|p| p.into_inner());
            if !matches!(g.0, Phase::Deferred) {
                return;
            }
            g.0 = Phase::InFlight;
        }
        let states = vec![self.state.clone()];
        let job = if self.is_write {
            let Some(data) = self.data.clone() else {
                self.state.set(
                    Phase::Failed(Error::invalid("write transfer has no data loaded")),
                    None,
                );
                return;
            };
            self.client.inner.in_flight[self.dest as usize]
                .fetch_add(self.byte_len as u64, Ordering::Relaxed);
            Job::Stage {
                items: vec![self.stage_item()],
                data: vec![data],
                states,
                write_behind: self.durability != Durability::Memory,
            }
        } else {
            Job::Read {
                items: vec![self.read_item()],
                lens: vec![self.byte_len],
                states,
                held: self.held,
                targets: vec![self.target],
            }
        };
        self.submit(job);
    }

    fn stage_item(&self) -> StageItem {
        StageItem {
            txn: self.txn,
            id: self.id,
            region: self.region.clone(),
            len: self.byte_len as u64,
        }
    }

    fn read_item(&self) -> ReadItem {
        ReadItem {
            id: self.id,
            region: self.region.clone(),
        }
    }

    /// Queues `job` on the worker of this transfer's server (started on first use).
    fn submit(&self, job: Job) {
        let rank = self.dest;
        let worker = self.client.inner.workers[rank as usize]
            .get_or_init(|| Worker::spawn(format!("pdcx-xfer-{rank}")));
        worker.submit(Box::new(Queued {
            client: Arc::downgrade(&self.client.inner),
            rank,
            job,
        }));
    }
}

/// Transfers of at most this many bytes are sent by `wait` on the calling thread, a write as
/// one `Stage` carrying its commit (see the module comment); larger ones go through the worker at `start`.
pub const ONE_MESSAGE_MAX: usize = 64 << 10;

// A transfer `wait` sends with its commit in one message is never reserved (one-copy): the
// reservation would be a round trip of its own.
const _: () = assert!(crate::direct_write::DIRECT_TRANSFER_MIN >= ONE_MESSAGE_MAX);
