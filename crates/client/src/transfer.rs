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

use crate::client::{commit_opts, read_plans};
use crate::client::{Client, LOCATE_MIN_BYTES};
use crate::conn::Conn;
use crate::shm::{Payload, UserBuf};
use crate::worker::{Task, Worker};
use pdcx_core::model::owner_of_id;
use pdcx_core::protocol::{write, Consistency, Durability, ReadItem, StageItem};
use pdcx_core::{Dtype, Error, ErrorKind, ObjectId, ObjectMeta, Region, Result};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// Created, not started yet.
    Idle,
    Pending,
    Complete,
    Failed(Error),
}

#[derive(Debug)]
enum Phase {
    Idle,
    /// Started, small: kept here until `wait` sends it (or `status` ships it to the worker).
    Deferred,
    InFlight,
    Delivered,
    Done,
    Failed(Error),
}

struct State {
    /// The phase, and a finished read's bytes (an arena block when they came through shared
    /// memory: handed on to the caller without another copy).
    phase: Mutex<(Phase, Option<Payload>)>,
    cv: Condvar,
    /// A finished read was read straight into the transfer's read target (no payload).
    landed: AtomicBool,
}

impl State {
    fn set(&self, phase: Phase, data: Option<Payload>) {
        let mut g = self.phase.lock().unwrap_or_else(|p| p.into_inner());
        // A failure is final for this round; later news about it must not hide the error.
        if !matches!(g.0, Phase::Failed(_)) {
            *g = (phase, data.or(g.1.take()));
        }
        self.cv.notify_all();
    }

    /// `set` for a transfer nobody else can be waiting on (it is being waited by the calling
    /// thread, which holds it `&mut`): no wake-up, which would cost a futex syscall.
    fn set_here(&self, phase: Phase, data: Option<Payload>) {
        let mut g = self.phase.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(g.0, Phase::Failed(_)) {
            *g = (phase, data.or(g.1.take()));
        }
    }
}

enum Job {
    Stage {
        items: Vec<StageItem>,
        data: Vec<Arc<Payload>>,
        states: Vec<Arc<State>>,
        /// Some write of the job will be committed at `local` or `remote`: one-copy writes
        /// then start their writeback once all are written (see `DirectWrites::write`).
        write_behind: bool,
    },
    Commit {
        request: write::Commit,
        states: Vec<Arc<State>>,
    },
    Read {
        items: Vec<ReadItem>,
        lens: Vec<usize>,
        /// Where each item may be read straight into (see `Transfer::set_read_target`).
        targets: Vec<Option<ReadTarget>>,
        states: Vec<Arc<State>>,
        /// Sent to the regions' only holder (`Read` with `held`) rather than the owner (`Read`).
        held: bool,
    },
}

/// A job queued on a server's worker. It holds only a weak handle to the client, so a
/// worker never keeps a dropped client alive.
struct Queued {
    client: std::sync::Weak<crate::client::Inner>,
    rank: u32,
    job: Job,
}

impl Task for Queued {
    fn run(self: Box<Self>, conn: &mut Option<Conn>) {
        if let Some(inner) = self.client.upgrade() {
            run_job(&Client { inner }, self.rank, conn, self.job);
        }
    }

    fn abandon(self: Box<Self>) {
        let err = Error::internal("transfer worker has stopped");
        for s in job_states(&self.job) {
            s.set(Phase::Failed(err.clone()), None);
        }
    }
}

fn job_states(job: &Job) -> &[Arc<State>] {
    match job {
        Job::Stage { states, .. } | Job::Commit { states, .. } | Job::Read { states, .. } => states,
    }
}

fn run_job(client: &Client, rank: u32, conn: &mut Option<Conn>, job: Job) {
    if let Job::Stage { data, .. } = &job {
        let bytes: u64 = data.iter().map(|d| d.len() as u64).sum();
        let _done = InFlightGuard {
            counter: &client.inner.in_flight[rank as usize],
            bytes,
        };
        return run_job_inner(client, rank, conn, &job);
    }
    run_job_inner(client, rank, conn, &job)
}

/// Takes a stage's bytes off its server's in-flight count however the job ends.
struct InFlightGuard<'a> {
    counter: &'a AtomicU64,
    bytes: u64,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

fn run_job_inner(client: &Client, rank: u32, conn: &mut Option<Conn>, job: &Job) {
    let pooled = conn.is_some();
    if conn.is_none() {
        match client.open_conn(rank) {
            Ok(c) => *conn = Some(c),
            Err(e) => {
                job_states(job)
                    .iter()
                    .for_each(|s| s.set(Phase::Failed(e.clone()), None));
                return;
            }
        }
    }
    let c = conn.as_mut().expect("connection just opened");
    let mut result = execute(client, rank, c, job);
    // A pooled connection may have died with a server restart. A stage or a read is safe to
    // send once more on a new connection; a commit is not (its writes were staged on the dead
    // connection and are gone, which the original error says).
    if let Err(e) = &result {
        if pooled && e.kind == ErrorKind::Unavailable && !matches!(job, Job::Commit { .. }) {
            result = client.open_conn(rank).and_then(|c| {
                let c = conn.insert(c);
                execute(client, rank, c, job)
            });
        }
    }
    if let Err(e) = result {
        if matches!(
            e.kind,
            ErrorKind::Unavailable | ErrorKind::Io | ErrorKind::Protocol
        ) {
            *conn = None;
        }
        job_states(job)
            .iter()
            .for_each(|s| s.set(Phase::Failed(e.clone()), None));
    }
}

fn execute(client: &Client, rank: u32, c: &mut Conn, job: &Job) -> Result<()> {
    match job {
        Job::Stage {
            items,
            data,
            states,
            write_behind,
        } => {
            stage(client, rank, c, items, data, *write_behind)?;
            states.iter().for_each(|s| s.set(Phase::Delivered, None));
            Ok(())
        }
        Job::Commit { request, states } => c.ask(request.clone(), &[]).map(|_| {
            states.iter().for_each(|s| s.set(Phase::Done, None));
        }),
        Job::Read {
            items,
            lens,
            targets,
            states,
            held,
        } => read_job(client, rank, c, items, *held, lens, targets).map(|parts| {
            for (s, data) in states.iter().zip(parts) {
                s.landed.store(data.is_none(), Ordering::Relaxed);
                s.set(Phase::Done, data);
            }
        }),
    }
}

/// Stages `items` on `c`: the large ones a server on this node lets this client write into
/// its log itself are reserved and written (one copy, `direct_write.rs`), the others (all of
/// them if the server turns that down) are staged the usual way.
fn stage(
    client: &Client,
    rank: u32,
    c: &mut Conn,
    items: &[StageItem],
    data: &[Arc<Payload>],
    write_behind: bool,
) -> Result<()> {
    let (mut direct, mut usual): (Vec<usize>, Vec<usize>) =
        (0..items.len()).partition(|&i| client.direct_writes(rank, items[i].len as usize));
    if let (false, Some(dw)) = (direct.is_empty(), client.inner.direct_write.as_ref()) {
        let d_items: Vec<StageItem> = direct.iter().map(|&i| items[i].clone()).collect();
        let d_parts: Vec<&[u8]> = direct.iter().map(|&i| data[i].as_slice()).collect();
        let write_behind = if write_behind {
            crate::direct_write::WriteBehind::AfterAll
        } else {
            crate::direct_write::WriteBehind::Never
        };
        if dw.write(c, rank, &d_items, &d_parts, write_behind, false)?
            == crate::direct_write::Outcome::Fallback
        {
            usual.append(&mut direct);
            usual.sort_unstable();
        }
    }
    if usual.is_empty() {
        return Ok(());
    }
    let u_items: Vec<StageItem> = usual.iter().map(|&i| items[i].clone()).collect();
    let u_parts: Vec<&Payload> = usual.iter().map(|&i| &*data[i]).collect();
    c.stage(&u_items, &u_parts, None).map(|_| ())
}

/// A read job: with the server on this node, one-copy reads of its log for every item it can
/// plan (see `direct.rs`), the rest (and any whose plan went stale) read
/// through the server. An item read straight into its read target has no payload (None).
fn read_job(
    client: &Client,
    rank: u32,
    c: &mut Conn,
    items: &[ReadItem],
    held: bool,
    lens: &[usize],
    targets: &[Option<ReadTarget>],
) -> Result<Vec<Option<Payload>>> {
    if !client.direct_reads(rank) {
        return Ok(c.read(items, held, lens)?.into_iter().map(Some).collect());
    }
    let plans = read_plans(client, c, items, held)?;
    let mut out: Vec<Option<Payload>> = (0..items.len()).map(|_| None).collect();
    let mut rest: Vec<usize> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if client.direct_possible(&plans, i) {
            match targets
                .get(i)
                .copied()
                .flatten()
                .filter(|t| t.len == lens[i])
            {
                Some(t) => {
                    // SAFETY: `set_read_target`'s contract: the memory is the caller's, valid
                    // and not otherwise accessed until the transfer is waited for.
                    let dst = unsafe { std::slice::from_raw_parts_mut(t.ptr as *mut u8, t.len) };
                    if client.direct_read(rank, &plans, i, item, dst)? {
                        continue;
                    }
                }
                None => {
                    // An arena block when there is an arena: its pages are recycled, already
                    // faulted in (fresh heap pages cost the kernel a fault and a zeroing each,
                    // about as much as the copy itself). The caller gets the block as is.
                    let mut p = match client.inner.shm.as_ref().and_then(|s| s.alloc(lens[i])) {
                        Some(b) => Payload::Shm(b),
                        None => Payload::Heap(vec![0u8; lens[i]]),
                    };
                    if client.direct_read(rank, &plans, i, item, p.as_mut_slice())? {
                        out[i] = Some(p);
                        continue;
                    }
                }
            }
        }
        rest.push(i);
    }
    if !rest.is_empty() {
        let its: Vec<ReadItem> = rest.iter().map(|&i| items[i].clone()).collect();
        let ls: Vec<usize> = rest.iter().map(|&i| lens[i]).collect();
        for (&i, p) in rest.iter().zip(c.read(&its, held, &ls)?) {
            out[i] = Some(p);
        }
    }
    Ok(out)
}

/// Memory a read transfer may be read straight into (see [`Transfer::set_read_target`]).
#[derive(Debug, Clone, Copy)]
struct ReadTarget {
    ptr: usize,
    len: usize,
}

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
        self.is_write && self.client.direct_writes_possible(self.byte_len)
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

/// Starts every transfer, sending one `Stage` and one `Read` message per destination server.
pub fn start_all(transfers: &mut [&mut Transfer]) -> Result<()> {
    for t in transfers.iter() {
        let g = t.state.phase.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(g.0, Phase::Deferred | Phase::InFlight | Phase::Delivered) {
            return Err(Error::invalid(format!(
                "transfer on region {} is already started; wait() before restarting",
                t.region
            )));
        }
        drop(g);
        if t.is_write && t.data.is_none() {
            return Err(Error::invalid("write transfer has no data loaded"));
        }
    }
    for t in transfers.iter_mut() {
        if t.is_write {
            t.dest = t.client.data_server(t.id, &t.region, t.byte_len as u64)?;
            // The caller's own buffer goes straight into the log of a server on this node;
            // for any other destination it is copied now, as `load_from` would have.
            if t.data.as_ref().is_some_and(|d| d.is_user())
                && !t.client.direct_writes(t.dest, t.byte_len)
            {
                let src = t.data.take().expect("checked above");
                t.data =
                    Some(Arc::new(t.client.payload_with(t.byte_len, |dst| {
                        dst.copy_from_slice(src.as_slice())
                    })));
            }
        }
    }
    plan_reads(transfers)?;
    let mut per_server: BTreeMap<u32, Batch> = BTreeMap::new();
    for t in transfers.iter_mut() {
        if t.is_write {
            t.txn = t.client.next_txn();
        }
        // Whether the previous run landed in the read target says nothing about this one
        // (a deferred read shipped by `status` may land there, one sent by `wait` may not).
        t.state.landed.store(false, Ordering::Relaxed);
        if t.byte_len <= ONE_MESSAGE_MAX && !t.held {
            // Sent by `wait` on the calling thread (see the module comment).
            *t.state.phase.lock().unwrap_or_else(|p| p.into_inner()) = (Phase::Deferred, None);
            continue;
        }
        *t.state.phase.lock().unwrap_or_else(|p| p.into_inner()) = (Phase::InFlight, None);
        let b = per_server.entry(t.dest).or_default();
        if t.is_write {
            t.client.inner.in_flight[t.dest as usize]
                .fetch_add(t.byte_len as u64, Ordering::Relaxed);
            b.stage_items.push(t.stage_item());
            b.stage_data.push(t.data.clone().expect("checked above"));
            b.stage_states.push(t.state.clone());
            b.write_behind |= t.durability != Durability::Memory;
        } else {
            let r = &mut b.reads[t.held as usize];
            r.0.push(t.read_item());
            r.1.push(t.byte_len);
            r.2.push(t.state.clone());
            r.3.push(t.target);
        }
    }
    for (dest, batch) in per_server {
        let t = transfers
            .iter()
            .find(|t| t.dest == dest)
            .expect("destination from a transfer");
        if !batch.stage_items.is_empty() {
            t.submit(Job::Stage {
                items: batch.stage_items,
                data: batch.stage_data,
                states: batch.stage_states,
                write_behind: batch.write_behind,
            });
        }
        for (held, (items, lens, states, targets)) in batch.reads.into_iter().enumerate() {
            if !items.is_empty() {
                t.submit(Job::Read {
                    items,
                    lens,
                    targets,
                    states,
                    held: held == 1,
                });
            }
        }
    }
    Ok(())
}

/// What one `start_all` sends to one server: stages, and reads via the owner ([0]) or
/// straight to the only holder ([1]).
#[derive(Default)]
struct Batch {
    stage_items: Vec<StageItem>,
    stage_data: Vec<Arc<Payload>>,
    stage_states: Vec<Arc<State>>,
    write_behind: bool,
    reads: [ReadBatch; 2],
}

/// Read items, their byte lengths, the transfers waiting for them and their read targets.
type ReadBatch = (
    Vec<ReadItem>,
    Vec<usize>,
    Vec<Arc<State>>,
    Vec<Option<ReadTarget>>,
);

/// Transfers of at most this many bytes are sent by `wait` on the calling thread, a write as
/// one `Stage` carrying its commit (see the module comment); larger ones go through the worker at `start`.
pub const ONE_MESSAGE_MAX: usize = 64 << 10;

/// Routes each read: to the only server holding its region when the owner says there is one,
/// else to the owner.
fn plan_reads(transfers: &mut [&mut Transfer]) -> Result<()> {
    let mut by_owner: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, t) in transfers.iter_mut().enumerate() {
        if t.is_write {
            continue;
        }
        t.dest = t.client.id_owner(t.id)?;
        t.held = false;
        if t.byte_len >= LOCATE_MIN_BYTES && t.client.size() > 1 {
            by_owner.entry(t.dest).or_default().push(i);
        }
    }
    for (owner, idx) in by_owner {
        let items: Vec<ReadItem> = idx
            .iter()
            .map(|&i| ReadItem {
                id: transfers[i].id,
                region: transfers[i].region.clone(),
            })
            .collect();
        let holders = transfers[idx[0]].client.locate(owner, items)?;
        for (&i, h) in idx.iter().zip(holders) {
            if let [only] = h[..] {
                if only != owner {
                    transfers[i].dest = only;
                    transfers[i].held = true;
                }
            }
        }
    }
    Ok(())
}

/// Commits grouped by (server, local durability?, relaxed with this expected count?): txns,
/// the transfers waiting on them and their objects.
type Commits = BTreeMap<(u32, u8, Option<u64>), (Vec<u64>, Vec<Arc<State>>, Vec<ObjectId>)>;

/// A durability as a map key (memory < local < remote).
fn durability_code(d: Durability) -> u8 {
    match d {
        Durability::Memory => 0,
        Durability::Local => 1,
        Durability::Remote => 2,
    }
}

fn durability_of_code(c: u8) -> Durability {
    match c {
        0 => Durability::Memory,
        1 => Durability::Local,
        _ => Durability::Remote,
    }
}

/// The consistency point for a batch: one `Commit` per server for the started writes, then
/// blocks until every transfer is done. Small transfers `start` kept are sent here on this
/// thread: a server's small writes as one committing `Stage`, its small reads as one `Read`;
/// small writes that share a commit with large ones in the worker join the worker's queue
/// instead, so one commit still covers them all. Returns the first failure (all are still
/// waited for).
pub fn wait_all(transfers: &mut [&mut Transfer]) -> Result<()> {
    let mut commits: Commits = BTreeMap::new();
    // Per commit group: the transfers (indices) still kept by `start`.
    let mut kept: BTreeMap<(u32, u8, Option<u64>), Vec<usize>> = BTreeMap::new();
    let mut kept_reads: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, t) in transfers.iter().enumerate() {
        let g = t.state.phase.lock().unwrap_or_else(|p| p.into_inner());
        let deferred = matches!(g.0, Phase::Deferred);
        if t.is_write && (deferred || matches!(g.0, Phase::InFlight | Phase::Delivered)) {
            let relaxed = match t.consistency {
                Consistency::Relaxed { expected_writes } => Some(expected_writes),
                Consistency::Strong => None,
            };
            let key = (t.dest, durability_code(t.durability), relaxed);
            let c = commits.entry(key).or_default();
            c.0.push(t.txn);
            c.1.push(t.state.clone());
            c.2.push(t.id);
            if deferred {
                kept.entry(key).or_default().push(i);
            }
        } else if deferred {
            kept_reads.entry(t.dest).or_default().push(i);
        }
    }
    // One message per group of small writes alone, sent after the worker's jobs are queued.
    let mut one_message = Vec::new();
    for (key, (txns, states, ids)) in commits {
        let (dest, durability, relaxed) = key;
        let t = transfers
            .iter()
            .find(|t| t.dest == dest)
            .expect("destination from a transfer");
        let durability = durability_of_code(durability);
        let foreign: Vec<ObjectId> = ids
            .into_iter()
            .filter(|&id| owner_of_id(id) != dest)
            .collect();
        let consistency = relaxed.map_or(Consistency::Strong, |expected_writes| {
            Consistency::Relaxed { expected_writes }
        });
        let opts = commit_opts(durability, consistency, !foreign.is_empty());
        if opts.consistency != Consistency::Strong {
            // Noted before the outcome is known: a sync sent for a write that failed costs
            // one request and changes nothing.
            for id in foreign {
                t.client.note_relaxed(id, dest);
            }
        }
        let small = kept.remove(&key).unwrap_or_default();
        if small.len() == states.len() {
            one_message.push((dest, opts, small));
            continue;
        }
        // Mixed with writes already in the worker: stage the small ones there too, ahead of
        // the commit in the same queue.
        for &i in &small {
            transfers[i].ship_deferred();
        }
        let request = write::Commit { txns, opts };
        t.submit(Job::Commit { request, states });
    }
    for (dest, opts, small) in one_message {
        let items: Vec<StageItem> = small.iter().map(|&i| transfers[i].stage_item()).collect();
        let mut data: Vec<Arc<Payload>> = Vec::with_capacity(small.len());
        for &i in &small {
            match transfers[i].data.clone() {
                Some(d) => data.push(d),
                None => {
                    let e = Error::invalid("write transfer has no data loaded");
                    small
                        .iter()
                        .for_each(|&i| transfers[i].state.set(Phase::Failed(e.clone()), None));
                    continue;
                }
            }
        }
        if data.len() != small.len() {
            continue;
        }
        let parts: Vec<&Payload> = data.iter().map(|d| &**d).collect();
        let client = transfers[small[0]].client.clone();
        let r = client.with_conn(dest, &mut |c| c.stage(&items, &parts, Some(opts.clone())));
        for &i in &small {
            let phase = match &r {
                Ok(_) => Phase::Done,
                Err(e) => Phase::Failed(e.clone()),
            };
            transfers[i].state.set_here(phase, None);
        }
    }
    for (dest, idx) in kept_reads {
        let items: Vec<ReadItem> = idx.iter().map(|&i| transfers[i].read_item()).collect();
        let lens: Vec<usize> = idx.iter().map(|&i| transfers[i].byte_len).collect();
        let client = transfers[idx[0]].client.clone();
        match client.with_conn(dest, &mut |c| c.read(&items, false, &lens)) {
            Ok(parts) => {
                for (&i, data) in idx.iter().zip(parts) {
                    transfers[i].state.set_here(Phase::Done, Some(data));
                }
            }
            Err(e) => idx
                .iter()
                .for_each(|&i| transfers[i].state.set_here(Phase::Failed(e.clone()), None)),
        }
    }
    // Creates: a write acknowledged here must not outlive the create of its
    // object in a power loss, so this client's creates and tags answered at commit are made
    // durable before the wait returns (nothing to send when there are none). Done here, not at
    // start: start never blocks on a server.
    let mut first_err = transfers
        .iter()
        .find(|t| t.is_write)
        .and_then(|t| t.client.sync_metadata().err());
    for t in transfers.iter_mut() {
        let mut g = t.state.phase.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match &g.0 {
                Phase::InFlight | Phase::Delivered => {
                    g = t.state.cv.wait(g).unwrap_or_else(|p| p.into_inner())
                }
                Phase::Failed(e) => {
                    first_err.get_or_insert_with(|| e.clone());
                    break;
                }
                // Not started (or kept and then not sent, which cannot happen here).
                Phase::Done | Phase::Idle | Phase::Deferred => break,
            }
        }
    }
    // The caller's buffer is the transfer's only until this wait: never keep a pointer to it.
    for t in transfers.iter_mut() {
        if t.data.as_ref().is_some_and(|d| d.is_user()) {
            t.data = None;
        }
    }
    first_err.map_or(Ok(()), Err)
}
