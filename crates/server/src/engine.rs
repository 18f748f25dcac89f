//! The data engine: staged writes go to the segment log (buffered) and the cache; a commit
//! makes them durable and visible; reads assemble a region from every visible extent that
//! overlaps it, newest last, fetching from the cache or with merged log reads.
//!
//! A server holds the bytes of any object its clients placed here (region-local placement),
//! not only of the objects it owns. For a foreign object the owner assigns the sequence
//! numbers at commit (`Peers::register`) and keeps a region map of which server holds what;
//! a read at the owner merges its own extents with the pieces of every other holder.
//!
//! Under relaxed consistency (`commit_with`, `Consistency::Relaxed`) a foreign write is made
//! durable and acknowledged without the owner: it is stored under a provisional sequence
//! number and kept off the index (invisible) until `register_deferred` registers it, batched
//! with the others, and renumbers it with the owner's answer.

use crate::metadata::{ExtentRow, Metadata, Registration};
use crate::tiering::{Home, Tiering};
use pdcx_core::model::owner_of_id;
use pdcx_core::protocol::{Consistency, Durability, ExtentInfo, RegisterItem};
use pdcx_core::region::{copy_region, Layout};
use pdcx_core::{Error, ErrorKind, ObjectId, ObjectMeta, Region, Result};
use pdcx_store::{Cache, Location, LogOptions, Recovery, SegmentLog};
use std::collections::BTreeMap;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// What the engine needs from the other servers of the deployment.
pub trait Peers: Send + Sync {
    /// Metadata of an object another server owns; `fresh` bypasses any cached copy (its
    /// dims may have grown).
    fn object(&self, id: ObjectId, fresh: bool) -> Result<ObjectMeta>;
    /// Tells `owner` that this server committed these regions of its objects; returns the
    /// sequence number the owner assigned each (None: a deferred write of a deleted object).
    fn register(&self, owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>>;
    /// `holder`'s committed pieces of `region` (seq, piece) and their bytes back to back.
    fn pieces(&self, holder: u32, id: ObjectId, region: &Region) -> Result<Pieces>;
}

pub use pdcx_core::protocol::Pieces;

/// An owner's record that another server holds a region of one of its objects.
#[derive(Debug, Clone)]
struct RemoteExtent {
    seq: u64,
    holder: u32,
    region: Region,
}

/// A write that reached the log but is not visible until committed.
#[derive(Debug, Clone)]
pub struct Staged {
    pub txn: u64,
    pub id: ObjectId,
    pub region: Region,
    pub loc: Location,
    /// Keeps the segment from being retired until the write is committed or dropped.
    _pin: Arc<SegmentPin>,
}

/// Counts staged-but-uncommitted writes per log segment: a segment with any is not retired.
#[derive(Debug, Default)]
pub(crate) struct Pins(Mutex<HashMap<u64, usize>>);

#[derive(Debug)]
struct SegmentPin {
    pins: Arc<Pins>,
    segment: u64,
}

impl Pins {
    fn pin(self: &Arc<Self>, segment: u64) -> Arc<SegmentPin> {
        *self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(segment)
            .or_default() += 1;
        Arc::new(SegmentPin {
            pins: self.clone(),
            segment,
        })
    }

    pub(crate) fn pinned(&self, segment: u64) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&segment)
            .is_some_and(|&n| n > 0)
    }
}

impl Drop for SegmentPin {
    fn drop(&mut self) {
        let mut m = self.pins.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.segment) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.segment);
            }
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Extent {
    pub(crate) seq: u64,
    pub(crate) region: Region,
    pub(crate) loc: Location,
    /// The tier copy made by the flusher, if any.
    pub(crate) home: Option<Home>,
    /// False once the log segment holding it was retired (then `home` is durable).
    pub(crate) in_log: bool,
}

/// A relaxed write of a foreign object: committed (durable per its durability, stored under
/// a provisional sequence number) but not registered with the owner yet, so invisible.
#[derive(Debug, Clone)]
struct Deferred {
    id: ObjectId,
    region: Region,
    loc: Location,
    provisional: u64,
}

impl Deferred {
    fn item(&self) -> RegisterItem {
        RegisterItem {
            id: self.id,
            region: self.region.clone(),
            token: Some((self.loc.segment, self.loc.offset)),
        }
    }
}

/// Provisional sequence numbers (of deferred writes, in `extent_map`) start here; the owners'
/// real numbers never get near it.
const PROVISIONAL_BASE: u64 = 1 << 62;

/// Items per `RegisterBatch` request when registering deferred writes (far below the body limit).
const REGISTER_CHUNK: usize = 65536;

/// Registration counters, for `Stats`.
#[derive(Debug, Default)]
pub struct RegisterCounters {
    /// Register requests answered as owner, and the regions they carried.
    pub received: AtomicU64,
    pub regions: AtomicU64,
    /// Register requests sent to owners as a holder.
    pub sent: AtomicU64,
}

pub struct Engine {
    pub(crate) log: Mutex<SegmentLog>,
    pub(crate) cache: Cache,
    /// Visible extents per object whose bytes this server holds (log or tiers), in seq order.
    pub(crate) index: RwLock<HashMap<ObjectId, Vec<Extent>>>,
    /// Owner side: regions of this server's objects held by other servers, in seq order.
    remote: RwLock<HashMap<ObjectId, Vec<RemoteExtent>>>,
    /// Holder side of relaxed consistency: deferred writes in commit order. Added to under
    /// `commit_lock`, taken off under the owner's `register_lock`.
    deferred: Mutex<Vec<Deferred>>,
    /// One lock per owner, held while registering with it: this server's registrations reach
    /// each owner one at a time, in commit order (order: `commit_lock`, then these).
    register_locks: Mutex<HashMap<u32, Arc<Mutex<()>>>>,
    next_provisional: AtomicU64,
    pub counters: RegisterCounters,
    /// Cache and log counters for the metrics exporter (hook added by ops).
    pub io: crate::metrics::EngineCounters,
    /// Serialises commits, so a holder's commit order is also the order of its registrations
    /// (with the register locks, also for deferred writes registered later).
    pub(crate) commit_lock: Mutex<()>,
    /// Next sequence number this server assigns (to its own objects' writes, wherever held).
    next_seq: Mutex<u64>,
    pub(crate) meta: Arc<Metadata>,
    pub(crate) rank: u32,
    peers: OnceLock<Arc<dyn Peers>>,
    /// The storage hierarchy behind the log; None when the config declares no tiers.
    pub(crate) tiering: Option<Arc<Tiering>>,
    pub(crate) pins: Arc<Pins>,
}

/// Reads within this many bytes of each other are merged into one log read.
const MERGE_GAP: u64 = 64 << 10;

/// Writes up to this size are also kept in the cache when staged from a borrowed buffer.
const CACHE_COPY_MAX: usize = 1 << 20;

impl Engine {
    pub fn open(
        dir: &Path,
        meta: Arc<Metadata>,
        cache_bytes: u64,
    ) -> Result<(Engine, Recovery, usize)> {
        Self::open_with(dir, meta, cache_bytes, LogOptions::default(), None)
    }

    /// [`open`](Self::open) with log options and the tiers behind the log.
    pub fn open_with(
        dir: &Path,
        meta: Arc<Metadata>,
        cache_bytes: u64,
        log_opts: LogOptions,
        tiering: Option<Tiering>,
    ) -> Result<(Engine, Recovery, usize)> {
        let (log, recovery) = SegmentLog::open(dir, log_opts)?;
        let rows = meta.load_extents()?;
        let homes = crate::tiering::load_homes(&meta, tiering.as_ref())?;
        // Extents of `memory`-durability commits that the log never made durable are dropped:
        // never expose bytes that a crash may have torn. Extents whose segment was retired
        // live on through their durable home.
        let (keep, lost): (Vec<ExtentRow>, Vec<ExtentRow>) = rows
            .into_iter()
            .partition(|r| log.is_committed(&r.loc) || homes.contains_key(&(r.id, r.seq)));
        meta.delete_extents(&lost.iter().map(|r| (r.id, r.seq)).collect::<Vec<_>>())?;
        let rank = meta.rank;
        let (pending, keep): (Vec<ExtentRow>, Vec<ExtentRow>) =
            keep.into_iter().partition(|r| r.seq >= PROVISIONAL_BASE);
        let mut deferred: Vec<Deferred> = pending
            .into_iter()
            .map(|r| Deferred {
                id: r.id,
                region: r.region,
                loc: r.loc,
                provisional: r.seq,
            })
            .collect();
        deferred.sort_by_key(|d| d.provisional);
        let next_provisional = deferred
            .last()
            .map_or(PROVISIONAL_BASE, |d| d.provisional + 1);
        let mut remote: HashMap<ObjectId, Vec<RemoteExtent>> = HashMap::new();
        let mut max_seq = 0;
        for (id, seq, holder, region) in meta.load_region_map()? {
            max_seq = max_seq.max(seq);
            remote.entry(id).or_default().push(RemoteExtent {
                seq,
                holder,
                region,
            });
        }
        for r in keep.iter().filter(|r| owner_of_id(r.id) == rank) {
            max_seq = max_seq.max(r.seq);
        }
        let mut index: HashMap<ObjectId, Vec<Extent>> = HashMap::new();
        for r in keep {
            index.entry(r.id).or_default().push(Extent {
                seq: r.seq,
                in_log: log.is_committed(&r.loc),
                home: homes.get(&(r.id, r.seq)).cloned(),
                region: r.region,
                loc: r.loc,
            });
        }
        let engine = Engine {
            log: Mutex::new(log),
            cache: Cache::new(cache_bytes),
            index: RwLock::new(index),
            remote: RwLock::new(remote),
            deferred: Mutex::new(deferred),
            register_locks: Mutex::new(HashMap::new()),
            next_provisional: AtomicU64::new(next_provisional),
            counters: RegisterCounters::default(),
            io: Default::default(),
            commit_lock: Mutex::new(()),
            next_seq: Mutex::new(max_seq + 1),
            meta,
            rank,
            peers: OnceLock::new(),
            tiering: tiering.map(Arc::new),
            pins: Arc::default(),
        };
        Ok((engine, recovery, lost.len()))
    }

    /// Connects the engine to the rest of the deployment (once; later calls are ignored).
    pub fn set_peers(&self, peers: Arc<dyn Peers>) {
        let _ = self.peers.set(peers);
    }

    fn peers(&self) -> Result<&Arc<dyn Peers>> {
        self.peers.get().ok_or_else(|| {
            Error::new(
                ErrorKind::Unavailable,
                "this server cannot reach the other servers yet (no cluster file)",
            )
        })
    }

    /// Metadata of any object: from the local shard if this server owns it, else its owner's.
    pub fn object_meta(&self, id: ObjectId, fresh: bool) -> Result<ObjectMeta> {
        if owner_of_id(id) == self.rank {
            self.meta.object(id)
        } else {
            self.peers()?.object(id, fresh)
        }
    }

    /// Checks `region` against the object's dims; a foreign object's cached dims are
    /// refreshed once before a region is refused (it may have grown since).
    pub fn checked_meta(&self, id: ObjectId, region: &Region) -> Result<ObjectMeta> {
        let obj = self.object_meta(id, false)?;
        match region.check_within(&obj.dims) {
            Ok(()) => Ok(obj),
            Err(_) if owner_of_id(id) != self.rank => {
                let obj = self.object_meta(id, true)?;
                region.check_within(&obj.dims)?;
                Ok(obj)
            }
            Err(e) => Err(e),
        }
    }

    /// Checks a write against the object and appends it to the log; it stays invisible until
    /// committed. `payload` is borrowed (the connection's reused receive buffer). Small writes
    /// are copied into the cache; large ones are not, since copying them costs more than
    /// reading them back from the log, which the OS page cache still holds.
    pub fn stage(&self, txn: u64, id: ObjectId, region: &Region, payload: &[u8]) -> Result<Staged> {
        let staged = self.append_checked(txn, id, region, payload)?;
        if payload.len() <= CACHE_COPY_MAX {
            self.cache.insert(staged.loc, Arc::new(payload.to_vec()));
        }
        Ok(staged)
    }

    fn append_checked(
        &self,
        txn: u64,
        id: ObjectId,
        region: &Region,
        payload: &[u8],
    ) -> Result<Staged> {
        let obj = self.checked_meta(id, region)?;
        let want = region.byte_len(obj.dtype.size())?;
        if payload.len() as u64 != want {
            return Err(Error::new(
                ErrorKind::DtypeMismatch,
                format!(
                    "write to {} region {region} carries {} bytes but {} {} elements need {want}",
                    obj.name,
                    payload.len(),
                    region.num_elements(),
                    obj.dtype
                ),
            ));
        }
        // Pinned under the log lock: the flusher checks pins under it too, so a sealed
        // segment is never retired between this append and its pin.
        let (loc, pin) = {
            let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
            let loc = log.append(id, txn, region, payload)?;
            (loc, self.pins.pin(loc.segment))
        };
        Ok(Staged {
            txn,
            id,
            region: region.clone(),
            loc,
            _pin: pin,
        })
    }

    /// The consistency point of strong writes: `commit_with(.., Consistency::Strong)`.
    pub fn commit(&self, staged: &[Staged], durability: Durability) -> Result<()> {
        self.commit_with(staged, durability, Consistency::Strong)
    }

    /// The consistency point. Order (a crash between any two steps loses nothing acknowledged
    /// and exposes nothing torn):
    /// 1. `local` durability: fdatasync the log and publish its manifest (SegmentLog::commit);
    /// 2. record the extents in the metadata shard (one SQLite transaction in the WAL);
    /// 3. publish them in the in-memory index, which is what reads consult;
    /// 4. `local` durability: wait until a (shared) fsync of the metadata WAL covers step 2.
    ///
    /// A crash after 1 leaves unreferenced log bytes (garbage); after 2 the write is complete.
    ///
    /// Writes of objects owned elsewhere get their sequence numbers from the owner between 1
    /// and 2 (`Peers::register`, under the commit lock, so this server's order of commits is
    /// the order the owner sees; this server's deferred writes for that owner go first in the
    /// same request). A crash after the owner recorded them but before 2 leaves a region-map
    /// entry naming no extent here, which reads skip.
    ///
    /// Relaxed: foreign writes skip the owner. Step 2 stores them under provisional sequence
    /// numbers and step 3 puts them on the deferred list instead of the index, so they are
    /// durable (per `durability`) and acknowledged but invisible until `register_deferred`.
    /// If `expected_writes` > 0 and this server now holds that many deferred writes of an
    /// object, they are registered before this returns (a failure there leaves them deferred
    /// for the timer and does not fail the commit: the data is safe).
    pub fn commit_with(
        &self,
        staged: &[Staged],
        durability: Durability,
        consistency: Consistency,
    ) -> Result<()> {
        let relaxed = matches!(consistency, Consistency::Relaxed { .. });
        let commit = self.commit_lock.lock().unwrap_or_else(|p| p.into_inner());
        if durability == Durability::Local {
            // The fdatasync runs without the log lock, so other connections keep appending;
            // commits stay serialised by the commit lock.
            let plan = self
                .log
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .prepare_commit()?;
            if let Some(plan) = plan {
                let synced = plan.sync();
                self.log
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .finish_commit(plan, synced)?;
                self.io.log_syncs.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.io.log_commits.fetch_add(1, Ordering::Relaxed);
        let mut seqs = vec![0u64; staged.len()];
        let mut deferred = vec![false; staged.len()];
        let mut foreign: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        {
            let mut next_seq = self.next_seq.lock().unwrap_or_else(|p| p.into_inner());
            for (i, s) in staged.iter().enumerate() {
                let owner = owner_of_id(s.id);
                if owner == self.rank {
                    seqs[i] = *next_seq;
                    *next_seq += 1;
                } else if relaxed {
                    seqs[i] = self.next_provisional.fetch_add(1, Ordering::Relaxed);
                    deferred[i] = true;
                } else {
                    foreign.entry(owner).or_default().push(i);
                }
            }
        }
        for (owner, idx) in &foreign {
            let lock = self.register_lock(*owner);
            let _registering = lock.lock().unwrap_or_else(|p| p.into_inner());
            let earlier = self.deferred_where(|d| owner_of_id(d.id) == *owner);
            let mut items: Vec<RegisterItem> = earlier.iter().map(Deferred::item).collect();
            items.extend(idx.iter().map(|&i| RegisterItem {
                id: staged[i].id,
                region: staged[i].region.clone(),
                token: None,
            }));
            let got = self.send_register(*owner, &items)?;
            let (early, mine) = got.split_at(earlier.len());
            self.publish_registered(&earlier, early)?;
            for (&i, seq) in idx.iter().zip(mine) {
                seqs[i] = seq.ok_or_else(|| {
                    Error::protocol(format!(
                        "server {owner} gave no sequence number to a write of object {:#x}",
                        staged[i].id
                    ))
                })?;
            }
        }
        let rows: Vec<ExtentRow> = staged
            .iter()
            .zip(&seqs)
            .map(|(s, &seq)| ExtentRow {
                id: s.id,
                seq,
                region: s.region.clone(),
                loc: s.loc,
            })
            .collect();
        let ticket = self.meta.insert_extents(&rows)?;
        {
            let mut index = self.index.write().unwrap_or_else(|p| p.into_inner());
            let mut later = self.deferred.lock().unwrap_or_else(|p| p.into_inner());
            for (r, d) in rows.into_iter().zip(&deferred) {
                if *d {
                    later.push(Deferred {
                        id: r.id,
                        region: r.region,
                        loc: r.loc,
                        provisional: r.seq,
                    });
                } else {
                    insert_by_seq(index.entry(r.id).or_default(), r.seq, r.region, r.loc);
                }
            }
        }
        drop(commit);
        // `local`: the extent rows must be on stable storage before the ack. The wait runs
        // outside the commit lock, so commits of other connections share this WAL fsync.
        // `memory`: the rows are in the WAL (they survive kill -9, but recovery keeps them only
        // if the log bytes were committed too); the next sync makes them durable.
        if durability == Durability::Local {
            self.meta.wait_durable(ticket)?;
        }
        if let Consistency::Relaxed { expected_writes } = consistency {
            let due = self.objects_due(staged, expected_writes);
            if !due.is_empty() {
                if let Err(e) = self.register_deferred(Some(&due)) {
                    eprintln!(
                        "pdcx server {}: deferred writes stay deferred (retried on the timer): {}",
                        self.rank, e.message
                    );
                }
            }
        }
        Ok(())
    }

    /// Objects of `staged` of which this server holds at least `expected` deferred writes.
    fn objects_due(&self, staged: &[Staged], expected: u64) -> Vec<ObjectId> {
        if expected == 0 {
            return Vec::new();
        }
        let mine: HashSet<ObjectId> = staged.iter().map(|s| s.id).collect();
        let mut count: HashMap<ObjectId, u64> = HashMap::new();
        for d in self
            .deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            if mine.contains(&d.id) {
                *count.entry(d.id).or_default() += 1;
            }
        }
        let mut due: Vec<ObjectId> = count
            .into_iter()
            .filter(|&(_, n)| n >= expected)
            .map(|(id, _)| id)
            .collect();
        due.sort_unstable();
        due
    }

    fn register_lock(&self, owner: u32) -> Arc<Mutex<()>> {
        self.register_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(owner)
            .or_default()
            .clone()
    }

    /// Copies of the deferred writes matching `f`, in commit order.
    fn deferred_where(&self, f: impl Fn(&Deferred) -> bool) -> Vec<Deferred> {
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|d| f(d))
            .cloned()
            .collect()
    }

    /// Log segments holding deferred writes (they must not be retired).
    pub(crate) fn deferred_segments(&self) -> std::collections::HashSet<u64> {
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|d| d.loc.segment)
            .collect()
    }

    /// How many deferred (relaxed, not yet registered) writes this server holds.
    pub fn deferred_count(&self) -> u64 {
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len() as u64
    }

    fn send_register(&self, owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        self.counters.sent.fetch_add(1, Ordering::Relaxed);
        let got = self.peers()?.register(owner, items)?;
        if got.len() != items.len() {
            return Err(Error::protocol(format!(
                "server {owner} answered {} of {} registrations",
                got.len(),
                items.len()
            )));
        }
        Ok(got)
    }

    /// Applies the owners' answer to registered deferred writes: renumbers their rows, makes
    /// them visible (index), drops those whose object is gone, and takes them off the list.
    /// Caller holds the owner's register lock.
    fn publish_registered(&self, done: &[Deferred], seqs: &[Option<u64>]) -> Result<()> {
        if done.is_empty() {
            return Ok(());
        }
        let updates: Vec<(ObjectId, u64, Option<u64>)> = done
            .iter()
            .zip(seqs)
            .map(|(d, s)| (d.id, d.provisional, *s))
            .collect();
        self.meta.assign_seqs(&updates)?;
        let gone: HashSet<u64> = done.iter().map(|d| d.provisional).collect();
        let mut index = self.index.write().unwrap_or_else(|p| p.into_inner());
        for (d, seq) in done.iter().zip(seqs) {
            if let Some(seq) = seq {
                insert_by_seq(
                    index.entry(d.id).or_default(),
                    *seq,
                    d.region.clone(),
                    d.loc,
                );
            }
        }
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|d| !gone.contains(&d.provisional));
        Ok(())
    }

    /// Registers this server's deferred writes of `ids` (all of them when None) with their
    /// owners: one `RegisterBatch` per owner (per 65536 writes), in commit order. Returns how
    /// many were registered; on an owner's failure its writes stay deferred (the others are
    /// still registered) and the first error is returned. Commits go on meanwhile, except
    /// strong ones that must register with an owner this is waiting for.
    pub fn register_deferred(&self, ids: Option<&[ObjectId]>) -> Result<usize> {
        let wanted: Option<HashSet<ObjectId>> = ids.map(|v| v.iter().copied().collect());
        let mut owners: Vec<u32> = self
            .deferred_where(|d| wanted.as_ref().is_none_or(|w| w.contains(&d.id)))
            .iter()
            .map(|d| owner_of_id(d.id))
            .collect();
        owners.sort_unstable();
        owners.dedup();
        let mut done = 0;
        let mut first_err = None;
        for owner in owners {
            let lock = self.register_lock(owner);
            let _registering = lock.lock().unwrap_or_else(|p| p.into_inner());
            // Under the owner's lock: a strong commit may have registered some meanwhile.
            let list = self.deferred_where(|d| {
                owner_of_id(d.id) == owner && wanted.as_ref().is_none_or(|w| w.contains(&d.id))
            });
            for chunk in list.chunks(REGISTER_CHUNK) {
                let items: Vec<RegisterItem> = chunk.iter().map(Deferred::item).collect();
                let r = self
                    .send_register(owner, &items)
                    .and_then(|seqs| self.publish_registered(chunk, &seqs));
                match r {
                    Ok(()) => done += chunk.len(),
                    Err(e) => {
                        first_err.get_or_insert(e);
                        // Later chunks must not overtake this one at the owner.
                        break;
                    }
                }
            }
        }
        first_err.map_or(Ok(done), Err)
    }

    /// Makes every staged byte durable (used at shutdown).
    pub fn sync(&self) -> Result<()> {
        {
            let _g = self.commit_lock.lock().unwrap_or_else(|p| p.into_inner());
            self.log
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .commit()?;
        }
        self.meta.sync()
    }

    /// Fills `out` with `region` of object `id`: fill value where nothing was written, else the
    /// last committed write covering each element, wherever it is held. Reads are served by the
    /// owner, which knows every holder from its region map.
    pub fn read(&self, id: ObjectId, region: &Region, out: &mut [u8]) -> Result<()> {
        let owner = owner_of_id(id);
        if owner != self.rank {
            return Err(Error::invalid(format!(
                "object {id:#x} is owned by server {owner}, not {}: read it there",
                self.rank
            )));
        }
        let obj = self.meta.object(id)?;
        region.check_within(&obj.dims)?;
        let holders = self.remote_holders(id, region);
        self.read_here(&obj, region, out, &holders)
    }

    /// Read of a region the client learned (from the owner's `locate`) is held by this server
    /// alone: fill value plus this server's extents, also for objects owned elsewhere.
    pub fn read_held(&self, id: ObjectId, region: &Region, out: &mut [u8]) -> Result<()> {
        let obj = self.checked_meta(id, region)?;
        self.read_here(&obj, region, out, &[])
    }

    /// Owner side of a client's read planning: the servers holding committed data of each
    /// region (this one included when it does), so a region with one holder is read there
    /// directly.
    pub fn locate(&self, id: ObjectId, region: &Region) -> Result<Vec<u32>> {
        let owner = owner_of_id(id);
        if owner != self.rank {
            return Err(Error::invalid(format!(
                "object {id:#x} is owned by server {owner}, not {}: locate it there",
                self.rank
            )));
        }
        region.check_within(&self.meta.object(id)?.dims)?;
        let mut holders = self.remote_holders(id, region);
        if !self.local_pieces(id, region).is_empty() {
            holders.push(self.rank);
            holders.sort_unstable();
        }
        Ok(holders)
    }

    fn read_here(
        &self,
        obj: &ObjectMeta,
        region: &Region,
        out: &mut [u8],
        holders: &[u32],
    ) -> Result<()> {
        let elem = obj.dtype.size();
        if out.len() as u64 != region.byte_len(elem)? {
            return Err(Error::internal("read buffer size does not match region"));
        }
        let pieces = self.local_pieces(obj.id, region);
        let spans = piece_spans(&pieces, elem);
        if !holders.is_empty() {
            return self.read_merged(obj, region, out, &pieces, &spans, holders);
        }
        let covered = pieces.iter().any(|(_, i)| i == region);
        if !covered || pieces.len() > 1 {
            fill(out, &obj.fill);
        }
        let out_layout = Layout { region, base: 0 };
        let fetched = self.fetch(obj, Some(region), &pieces, &spans, out)?;
        for (i, (e, inter)) in pieces.iter().enumerate() {
            let Some(bytes) = &fetched[i] else { continue }; // read directly into `out`
            let src_layout = Layout {
                region: &e.region,
                base: spans[i].0 / elem as u64,
            };
            copy_region(elem, inter, (&src_layout, &bytes[..]), (&out_layout, out));
        }
        Ok(())
    }

    /// Read of a region that other servers hold parts of: gathers every holder's pieces and
    /// paints them with the local ones in sequence order (newest last).
    fn read_merged(
        &self,
        obj: &ObjectMeta,
        region: &Region,
        out: &mut [u8],
        pieces: &[(Extent, Region)],
        spans: &[(u64, u64)],
        holders: &[u32],
    ) -> Result<()> {
        let elem = obj.dtype.size();
        fill(out, &obj.fill);
        let fetched = self.fetch(obj, None, pieces, spans, out)?;
        let remote: Vec<Pieces> = holders
            .iter()
            .map(|&h| self.peers()?.pieces(h, obj.id, region))
            .collect::<Result<_>>()?;
        // (seq, bytes, layout region, base element of the piece within its bytes, piece)
        let mut paint: Vec<(u64, &[u8], &Region, u64, &Region)> = Vec::new();
        for (i, (e, inter)) in pieces.iter().enumerate() {
            let bytes = fetched[i]
                .as_deref()
                .ok_or_else(|| Error::internal("merged read fetched no bytes"))?;
            paint.push((e.seq, bytes, &e.region, spans[i].0 / elem as u64, inter));
        }
        for (h, (list, bytes)) in holders.iter().zip(&remote) {
            let mut at = 0usize;
            for (seq, piece) in list {
                let n = piece.byte_len(elem)? as usize;
                let inside = piece.intersect(region).as_ref() == Some(piece);
                if !inside || at + n > bytes.len() {
                    return Err(Error::protocol(format!(
                        "server {h} sent a piece {piece} that does not fit the read of {region}"
                    )));
                }
                paint.push((*seq, &bytes[at..at + n], piece, 0, piece));
                at += n;
            }
        }
        paint.sort_by_key(|p| p.0);
        let out_layout = Layout { region, base: 0 };
        for (_, bytes, src_region, base, piece) in paint {
            let src = Layout {
                region: src_region,
                base,
            };
            copy_region(elem, piece, (&src, bytes), (&out_layout, out));
        }
        Ok(())
    }

    /// Holder side of a merged read: this server's committed pieces of `region` of `id`,
    /// each with its sequence number, bytes back to back.
    pub fn pieces(&self, id: ObjectId, region: &Region) -> Result<Pieces> {
        let obj = self.object_meta(id, false)?;
        let elem = obj.dtype.size();
        let pieces = self.local_pieces(id, region);
        let spans = piece_spans(&pieces, elem);
        let fetched = self.fetch(&obj, None, &pieces, &spans, &mut [])?;
        let mut out = Vec::new();
        let mut list = Vec::with_capacity(pieces.len());
        for (i, (e, inter)) in pieces.iter().enumerate() {
            let bytes = fetched[i]
                .as_deref()
                .ok_or_else(|| Error::internal("piece read fetched no bytes"))?;
            let at = out.len();
            out.resize(at + inter.byte_len(elem)? as usize, 0);
            let src = Layout {
                region: &e.region,
                base: spans[i].0 / elem as u64,
            };
            let dst = Layout {
                region: inter,
                base: 0,
            };
            copy_region(elem, inter, (&src, bytes), (&dst, &mut out[at..]));
            list.push((e.seq, inter.clone()));
        }
        Ok((list, out))
    }

    /// Owner side of a holder's commit (`Register`): records where the regions live and
    /// assigns them consecutive sequence numbers, returning the first.
    pub fn register(&self, holder: u32, items: &[(ObjectId, Region)]) -> Result<u64> {
        let items: Vec<RegisterItem> = items
            .iter()
            .map(|(id, region)| RegisterItem {
                id: *id,
                region: region.clone(),
                token: None,
            })
            .collect();
        let seqs = self.register_batch(holder, &items)?;
        match seqs.first() {
            Some(first) => first.ok_or_else(|| Error::internal("registration without a number")),
            None => Ok(*self.next_seq.lock().unwrap_or_else(|p| p.into_inner())),
        }
    }

    /// Owner side of `RegisterBatch`: records where the regions live and gives each its
    /// sequence number (new items consecutive, in request order). A deferred write (with a
    /// token) registered before gets its number back; one whose object is gone gets None.
    /// Anything wrong with a strong item (not ours, unknown, out of bounds) fails the request.
    pub fn register_batch(&self, holder: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        self.counters.received.fetch_add(1, Ordering::Relaxed);
        self.counters
            .regions
            .fetch_add(items.len() as u64, Ordering::Relaxed);
        let mut live: Vec<Registration<'_>> = Vec::new();
        let mut at: Vec<usize> = Vec::new();
        for (k, item) in items.iter().enumerate() {
            if owner_of_id(item.id) != self.rank {
                return Err(Error::invalid(format!(
                    "server {holder} registered object {:#x} with server {}, which does not own it",
                    item.id, self.rank
                )));
            }
            match self.meta.object(item.id) {
                Ok(obj) => item.region.check_within(&obj.dims)?,
                // A deferred write may outlive its object: answer None, the holder drops it.
                Err(e) if e.kind == ErrorKind::NotFound && item.token.is_some() => continue,
                Err(e) => return Err(e),
            }
            live.push((item.id, &item.region, item.token));
            at.push(k);
        }
        let mut out = vec![None; items.len()];
        if live.is_empty() {
            return Ok(out);
        }
        let mut next_seq = self.next_seq.lock().unwrap_or_else(|p| p.into_inner());
        let got = self.meta.register_regions(holder, &live, &mut next_seq)?;
        let mut remote = self.remote.write().unwrap_or_else(|p| p.into_inner());
        for ((&k, (id, region, _)), (seq, new)) in at.iter().zip(&live).zip(got) {
            out[k] = Some(seq);
            if new {
                remote.entry(*id).or_default().push(RemoteExtent {
                    seq,
                    holder,
                    region: (*region).clone(),
                });
            }
        }
        Ok(out)
    }

    /// This server's visible extents of `id` that overlap `region`, with the overlap.
    fn local_pieces(&self, id: ObjectId, region: &Region) -> Vec<(Extent, Region)> {
        let index = self.index.read().unwrap_or_else(|p| p.into_inner());
        index
            .get(&id)
            .map(|v| {
                v.iter()
                    .filter_map(|e| e.region.intersect(region).map(|i| (e.clone(), i)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Other servers holding committed data of `id` inside `region`.
    fn remote_holders(&self, id: ObjectId, region: &Region) -> Vec<u32> {
        let remote = self.remote.read().unwrap_or_else(|p| p.into_inner());
        let mut holders: Vec<u32> = remote
            .get(&id)
            .map(|v| {
                v.iter()
                    .filter(|r| r.holder != self.rank && r.region.intersect(region).is_some())
                    .map(|r| r.holder)
                    .collect()
            })
            .unwrap_or_default();
        holders.sort_unstable();
        holders.dedup();
        holders
    }

    /// Gets each piece's span from the cache or the log. Uncached spans are sorted by location
    /// and merged so the log sees few large reads. With `direct` (the requested region), a lone
    /// piece that is exactly that region and contiguous in its extent is read straight into
    /// `out` (returned as None).
    fn fetch(
        &self,
        obj: &ObjectMeta,
        direct: Option<&Region>,
        pieces: &[(Extent, Region)],
        spans: &[(u64, u64)],
        out: &mut [u8],
    ) -> Result<Vec<Option<Arc<Vec<u8>>>>> {
        let mut fetched: Vec<Option<Arc<Vec<u8>>>> = vec![None; pieces.len()];
        let mut misses: Vec<usize> = Vec::new();
        for (i, (e, _)) in pieces.iter().enumerate() {
            match self.cache.get(&e.loc) {
                Some(data) => {
                    let (lo, hi) = spans[i];
                    fetched[i] = Some(if lo == 0 && hi == data.len() as u64 {
                        data
                    } else {
                        Arc::new(data[lo as usize..hi as usize].to_vec())
                    });
                }
                None => misses.push(i),
            }
        }
        self.io
            .cache_lookups(pieces.len() - misses.len(), misses.len());
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        // Extents whose segment was retired are read from their home tier, after the log
        // lock is released (a tier read may be a slow network request).
        let mut from_tier: Vec<(usize, Home)> = Vec::new();
        if self.tiering.is_some() {
            let mut in_log = Vec::with_capacity(misses.len());
            for i in misses {
                let e = &pieces[i].0;
                if e.in_log && log.has_segment(e.loc.segment) {
                    in_log.push(i);
                } else {
                    from_tier.push((i, self.current_home(obj.id, e)?));
                }
            }
            misses = in_log;
        }
        if !from_tier.is_empty() {
            drop(log);
            for (i, home) in &from_tier {
                fetched[*i] = Some(self.read_from_tier(obj, &pieces[*i].0, home, spans[*i])?);
            }
            log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        }
        if let (Some(region), 1, 1, true) =
            (direct, pieces.len(), misses.len(), from_tier.is_empty())
        {
            let (e, inter) = &pieces[0];
            let (lo, hi) = spans[0];
            if inter == region && hi - lo == out.len() as u64 {
                log.read_at(e.loc.segment, e.loc.offset + lo, out)?;
                return Ok(fetched);
            }
        }
        misses.sort_by_key(|&i| (pieces[i].0.loc.segment, pieces[i].0.loc.offset + spans[i].0));
        let mut k = 0;
        while k < misses.len() {
            let first = misses[k];
            let seg = pieces[first].0.loc.segment;
            let start = pieces[first].0.loc.offset + spans[first].0;
            let mut end = pieces[first].0.loc.offset + spans[first].1;
            let mut j = k + 1;
            while j < misses.len() {
                let m = misses[j];
                let (s, e) = (
                    pieces[m].0.loc.offset + spans[m].0,
                    pieces[m].0.loc.offset + spans[m].1,
                );
                if pieces[m].0.loc.segment != seg || s > end + MERGE_GAP {
                    break;
                }
                end = end.max(e);
                j += 1;
            }
            let mut buf = vec![0u8; (end - start) as usize];
            log.read_at(seg, start, &mut buf)?;
            for &m in &misses[k..j] {
                let s = (pieces[m].0.loc.offset + spans[m].0 - start) as usize;
                let e = (pieces[m].0.loc.offset + spans[m].1 - start) as usize;
                fetched[m] = Some(Arc::new(buf[s..e].to_vec()));
            }
            k = j;
        }
        Ok(fetched)
    }

    /// Forgets every visible extent of a deleted object, here and in the region map (log
    /// bytes become garbage, also on other holders, which keep their index entries until
    /// compaction exists).
    pub fn forget(&self, id: ObjectId) -> usize {
        self.remote
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        let gone = self
            .index
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
            .unwrap_or_default();
        self.drop_tier_copies(id, &gone);
        gone.len()
    }

    /// Where the bytes of `id` are: this server's extents, and at the owner also the regions
    /// other servers hold.
    pub fn extents(&self, id: ObjectId) -> Vec<ExtentInfo> {
        let index = self.index.read().unwrap_or_else(|p| p.into_inner());
        let mut out = index
            .get(&id)
            .map(|v| {
                v.iter()
                    .map(|e| ExtentInfo {
                        seq: e.seq,
                        region: e.region.clone(),
                        segment: e.loc.segment,
                        offset: e.loc.offset,
                        len: e.loc.len,
                        cached: self.cache.contains(&e.loc),
                        holder: self.rank,
                        tier: self.tier_label(e),
                        stored_len: e.home.as_ref().map_or(e.loc.len, |h| h.stored_len),
                        codec: e
                            .home
                            .as_ref()
                            .map_or_else(|| "none".into(), |h| h.codec.clone()),
                        shard: e
                            .home
                            .as_ref()
                            .and_then(|h| h.shard.as_deref())
                            .and_then(|k| k.rsplit('/').next())
                            .unwrap_or_default()
                            .to_string(),
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let remote = self.remote.read().unwrap_or_else(|p| p.into_inner());
        for r in remote.get(&id).into_iter().flatten() {
            out.push(ExtentInfo {
                seq: r.seq,
                region: r.region.clone(),
                segment: 0,
                offset: 0,
                len: 0,
                cached: false,
                holder: r.holder,
                tier: String::new(),
                stored_len: 0,
                codec: String::new(),
                shard: String::new(),
            });
        }
        out.sort_by_key(|e| e.seq);
        out
    }

    pub fn extent_count(&self) -> u64 {
        self.index
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|v| v.len() as u64)
            .sum()
    }

    pub fn log_bytes(&self) -> u64 {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .total_bytes()
    }

    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    pub fn log_dir(&self) -> std::path::PathBuf {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .dir()
            .to_path_buf()
    }
}

/// Bytes [lo, hi) of its extent's payload that each piece needs.
fn piece_spans(pieces: &[(Extent, Region)], elem: usize) -> Vec<(u64, u64)> {
    pieces
        .iter()
        .map(|(e, inter)| {
            let (lo, hi) = e.region.span_of(inter);
            (lo * elem as u64, hi * elem as u64)
        })
        .collect()
}

fn fill(out: &mut [u8], pattern: &[u8]) {
    if pattern.iter().all(|&b| b == 0) {
        out.fill(0);
    } else {
        for chunk in out.chunks_exact_mut(pattern.len()) {
            chunk.copy_from_slice(pattern);
        }
    }
}

/// Inserts an extent into an object's index list, which is kept in sequence order (reads paint
/// in that order). Usually an append: numbers grow; a deferred write registered again after a
/// crash may get back an older number.
fn insert_by_seq(list: &mut Vec<Extent>, seq: u64, region: Region, loc: Location) {
    let at = list.partition_point(|e| e.seq < seq);
    list.insert(
        at,
        Extent {
            seq,
            region,
            loc,
            home: None,
            in_log: true,
        },
    );
}
