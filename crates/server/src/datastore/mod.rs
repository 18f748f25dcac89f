//! The data store: the one owner of a server's durable data path.
//!
//! It holds the segment log, the payload cache, the in-memory extent index (what reads
//! consult), the pins that keep staged writes' segments alive, the deferred (relaxed,
//! unregistered) writes, the sequence counters, the tier homes of flushed extents and the
//! retirement of log segments. Everything else (the engine's request logic, the flusher's
//! placement policy) calls methods on it; none of its fields are visible outside this module.
//!
//! - [`commit`](DataStore::commit) (`commit.rs`) is THE commit: one function, its steps
//!   numbered there;
//! - [`retire_flushed`](DataStore::retire_flushed) (`retire.rs`) is segment retirement;
//! - [`compact`](DataStore::compact) (`compact.rs`) copies what is live out of segments
//!   that are mostly garbage, so they can be retired;
//! - `read.rs` is the read path below the index: cache → log (merged reads) → home tier;
//! - `homes.rs` records and publishes tier homes;
//! - `index.rs` holds the index types, staged writes, pins and deferred writes.
//!
//! # Lock order
//!
//! Outermost first; a lock may only be taken while holding locks above it:
//!
//! 1. `Tiering::moves` (the flusher, migrations: whatever puts blobs then records homes);
//! 2. the commit lock ([`CommitGuard`]): serialises commits and retirement. Functions that
//!    must run under it take `&CommitGuard` as an argument, so they cannot be called without;
//! 3. a register lock per owner ([`OwnerGuard`]): this server's registrations reach each owner
//!    one at a time, in commit order;
//! 4. the sequence counter, then the metadata connection (inside `Metadata`);
//! 5. the index (`RwLock`), then the deferred list;
//! 6. the log: a leaf, taken only inside this module's methods and never held while taking
//!    another lock except the pin table (appends pin under it, retirement checks pins under
//!    it), and never across a tier request;
//! 7. the cache, the pin table, the tiering's counters and shard references (leaves).

mod commit;
mod compact;
mod homes;
mod index;
mod read;
mod refs;
mod retire;
mod stats;

pub(crate) use index::PROVISIONAL_BASE as FIRST_PROVISIONAL_SEQ;
pub use refs::{ExternalRef, MAX_REF_CHUNK_BYTES, REF_SEGMENT};

pub use commit::{CommitGuard, Committed, OwnerGuard, OwnerLock, Registrar};
pub use compact::{CompactOptions, SegmentSpace};
pub use index::{unix_now, Extent, Staged};
pub use stats::ExtentRanges;

use crate::meta::{ExtentRow, Metadata, Registration};
use crate::tiering::Tiering;
use index::{Deferred, Index, Pins, PROVISIONAL_BASE};
use pdcx_core::protocol::ExtentInfo;
use pdcx_core::{Error, ObjectId, ObjectMeta, Region, Result};
use pdcx_store::{Cache, Location, LogOptions, LogSpan, Recovery, SegmentLog, WriterLease};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// Log segment numbers of extents whose bytes left the log for good start here (a log never
/// gets near it).
pub(crate) const OFF_LOG: u64 = 1 << 48;

/// Writes up to this size are also kept in the cache when staged from a borrowed buffer.
const CACHE_COPY_MAX: usize = 1 << 20;

/// A named point in the data path where a crash-test build kills the process
/// (`pdcx_fsio::crash`, listed in its `POINTS`); without the `crash-points` feature a no-op.
pub(crate) use pdcx_fsio::crash::point as crash_point;

pub struct DataStore {
    log: Mutex<SegmentLog>,
    cache: Cache,
    index: RwLock<Index>,
    /// Holder side of relaxed consistency: deferred writes in commit order. Added to under the
    /// commit lock, taken off under the owner's register lock.
    deferred: Mutex<Vec<Deferred>>,
    /// One lock per owner, held while registering with it (see [`OwnerGuard`]).
    register_locks: Mutex<HashMap<u32, Arc<Mutex<()>>>>,
    next_provisional: AtomicU64,
    /// Serialises commits (and retirement): see [`CommitGuard`].
    commit_lock: Mutex<()>,
    /// Next sequence number this server assigns (to its own objects' writes, wherever held).
    next_seq: Mutex<u64>,
    pins: Arc<Pins>,
    meta: Arc<Metadata>,
    tiering: Option<Arc<Tiering>>,
    rank: u32,
    /// Cache and log counters for the metrics exporter.
    io: crate::counters::EngineCounters,
    /// The log's incarnation (see `Metadata::log_incarnation`), part of deferred writes' tokens.
    incarnation: u64,
    /// Commits since the last checkpoint (see [`DataStore::checkpoint`]).
    commits_since_checkpoint: AtomicU64,
    /// Held by the commit that syncs the log for a group of commits (see `sync_through`).
    sync_lock: Mutex<()>,
    /// Extent statistics computed since they were last written to the metadata (`stats.rs`).
    pending_stats: Mutex<Vec<(ObjectId, u64, f64, f64)>>,
    /// Reads of reference extents, and objects read often enough to promote (`refs.rs`).
    ref_reads: Mutex<HashMap<(ObjectId, u64), u32>>,
    hot_refs: Mutex<HashSet<ObjectId>>,
    /// Device and inode of log segments, as read plans name them (`read.rs`): stat once per
    /// segment, not once per plan. Segment ids are never reused while the log lives.
    segment_files: Mutex<HashMap<u64, (u64, u64)>>,
    /// Held by a compaction pass (`compact.rs`): one at a time.
    compacting: Mutex<()>,
}

/// What [`DataStore::open`] found.
#[derive(Debug, Clone, Default)]
pub struct Opened {
    pub recovery: Recovery,
    /// Extents dropped because the log never made them durable (`memory` writes before a crash).
    pub dropped: usize,
}

/// Recovery's metadata half: the extent rows, plus those of commit records found past the
/// log's last checkpoint that the metadata lost (its WAL was not fsynced before the crash:
/// commits do not wait for it). An entry is replayed only if its bytes are whole in the log
/// (a record a writer damaged stays lost), its location has no row yet (a deferred write
/// renumbered since keeps its new number), and, for this server's own objects, the object
/// still exists (a delete after the commit wins). The replayed rows are fsynced before the
/// caller checkpoints past them.
fn replay(
    meta: &Metadata,
    log: &SegmentLog,
    commits: &[pdcx_store::CommitEntry],
) -> Result<Vec<ExtentRow>> {
    let mut rows = meta.load_extents()?;
    if commits.is_empty() {
        return Ok(rows);
    }
    let mut have: HashSet<(u64, u64)> =
        rows.iter().map(|r| (r.loc.segment, r.loc.offset)).collect();
    let mut keys: HashSet<(ObjectId, u64)> = rows.iter().map(|r| (r.id, r.seq)).collect();
    let mut missing = Vec::new();
    for e in commits {
        if have.contains(&(e.loc.segment, e.loc.offset)) || keys.contains(&(e.object, e.seq)) {
            continue;
        }
        if meta.owns(e.object) && meta.object(e.object).is_err() {
            continue;
        }
        if !log.is_committed(&e.loc) || log.read_payload(&e.loc).is_err() {
            continue;
        }
        have.insert((e.loc.segment, e.loc.offset));
        keys.insert((e.object, e.seq));
        missing.push(ExtentRow {
            id: e.object,
            seq: e.seq,
            region: e.region.clone(),
            loc: e.loc,
        });
    }
    if !missing.is_empty() {
        tracing::info!(
            replayed = missing.len(),
            "replayed commits the metadata had not made durable"
        );
        meta.insert_extents(&missing)?;
        meta.sync()?;
        rows.extend(missing);
        rows.sort_by_key(|r| (r.id, r.seq));
    }
    Ok(rows)
}

impl DataStore {
    /// Opens the log in `dir` and rebuilds the index from the extent map and the tier homes.
    /// `min_next_seq`: the owner's region map may hold higher numbers than any extent here.
    ///
    /// Recovery: extents of `memory`-durability commits that the log never made durable are
    /// dropped (never expose bytes that a crash may have torn); extents whose segment was
    /// retired live on through their durable home; extents under provisional numbers are
    /// deferred writes, registered again later.
    pub fn open(
        dir: &Path,
        meta: Arc<Metadata>,
        cache_bytes: u64,
        log_opts: LogOptions,
        tiering: Option<Arc<Tiering>>,
        min_next_seq: u64,
    ) -> Result<(DataStore, Opened)> {
        let (log, recovery) = SegmentLog::open(dir, log_opts)?;
        let rows = replay(&meta, &log, &recovery.commits)?;
        // A log with nothing committed while extents are recorded is a new log (the node lost
        // the old one): its locations start over, so its tokens get a new incarnation. (An
        // empty log holds no deferred write, so no pending token is orphaned.)
        let mut incarnation = meta.log_incarnation()?;
        if recovery.committed_bytes == 0 && !rows.is_empty() {
            incarnation += 1;
            if incarnation >= 1 << (64 - index::INCARNATION_SHIFT) {
                return Err(Error::internal("log incarnation overflow"));
            }
            meta.set_log_incarnation(incarnation)?;
        }
        let homes = homes::load(&meta, tiering.as_deref())?;
        let stats = meta.load_extent_stats()?;
        let refs: HashMap<(ObjectId, u64), Arc<ExternalRef>> = meta
            .load_refs()?
            .into_iter()
            .map(|(k, r)| Ok((k, Arc::new(ExternalRef::from_row(&r)?))))
            .collect::<Result<_>>()?;
        // A row naming a record recovery found damaged in a tail (a power cut tore it after
        // the metadata had recorded it: a `memory` write, or a commit whose sync never
        // finished) names bytes that were never acknowledged whole: dropped like a row naming
        // bytes past the log's end.
        let damaged: HashSet<(u64, u64)> = recovery
            .damaged
            .iter()
            .map(|l| (l.segment, l.offset))
            .collect();
        let (keep, lost): (Vec<ExtentRow>, Vec<ExtentRow>) = rows.into_iter().partition(|r| {
            (log.is_committed(&r.loc) && !damaged.contains(&(r.loc.segment, r.loc.offset)))
                || homes.contains_key(&(r.id, r.seq))
                || refs.contains_key(&(r.id, r.seq))
        });
        meta.delete_extents(&lost.iter().map(|r| (r.id, r.seq)).collect::<Vec<_>>())?;
        // Extents that live on only through their home (segment retired, or the whole log lost
        // with its node) get a log location no log can hold: a new log directory numbers its
        // segments from the start again, and must never seem to hold their bytes.
        let mut keep = keep;
        let off: Vec<(ObjectId, u64)> = keep
            .iter()
            .filter(|r| r.loc.segment < OFF_LOG && !log.is_committed(&r.loc))
            .map(|r| (r.id, r.seq))
            .collect();
        meta.mark_off_log(&off, OFF_LOG)?;
        for r in keep.iter_mut() {
            if r.loc.segment < OFF_LOG && !log.is_committed(&r.loc) {
                r.loc.segment += OFF_LOG;
            }
        }
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
        let mut next_seq = min_next_seq.max(1);
        for r in keep.iter().filter(|r| meta.owns(r.id)) {
            next_seq = next_seq.max(r.seq + 1);
        }
        let mut index: Index = HashMap::new();
        let started = index::unix_now();
        for r in keep {
            index.entry(r.id).or_default().push(Arc::new(Extent {
                seq: r.seq,
                in_log: log.is_committed(&r.loc),
                home: homes.get(&(r.id, r.seq)).cloned(),
                stats: stats.get(&(r.id, r.seq)).copied(),
                external: refs.get(&(r.id, r.seq)).cloned(),
                region: r.region,
                loc: r.loc,
                since: started,
            }));
        }
        let store = DataStore {
            log: Mutex::new(log),
            cache: Cache::new(cache_bytes),
            index: RwLock::new(index),
            deferred: Mutex::new(deferred),
            register_locks: Mutex::new(HashMap::new()),
            next_provisional: AtomicU64::new(next_provisional),
            commit_lock: Mutex::new(()),
            next_seq: Mutex::new(next_seq),
            pins: Arc::default(),
            meta,
            tiering,
            rank,
            io: Default::default(),
            incarnation,
            commits_since_checkpoint: AtomicU64::new(0),
            sync_lock: Mutex::new(()),
            pending_stats: Mutex::new(Vec::new()),
            ref_reads: Mutex::new(HashMap::new()),
            hot_refs: Mutex::new(HashSet::new()),
            segment_files: Mutex::new(HashMap::new()),
            compacting: Mutex::new(()),
        };
        // The replayed rows are durable now (`replay`), so the tails scanned need no replay
        // next time.
        store.checkpoint()?;
        Ok((
            store,
            Opened {
                recovery,
                dropped: lost.len(),
            },
        ))
    }

    pub(crate) fn log(&self) -> MutexGuard<'_, SegmentLog> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn index(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(|p| p.into_inner())
    }

    fn index_mut(&self) -> std::sync::RwLockWriteGuard<'_, Index> {
        self.index.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Cache and log counters (for `metrics`).
    pub fn io(&self) -> &crate::counters::EngineCounters {
        &self.io
    }

    pub fn tiering(&self) -> Option<&Arc<Tiering>> {
        self.tiering.as_ref()
    }

    /// Appends a checked write to the log; it stays invisible until committed. `payload` is
    /// borrowed (the connection's reused receive buffer, or the client's shared-memory
    /// block). With `cache`, small writes are copied into the cache; large ones never are,
    /// since copying them costs more than reading them back from the log, which the OS page
    /// cache still holds.
    pub fn stage(
        &self,
        txn: u64,
        id: ObjectId,
        region: &Region,
        payload: &[u8],
        cache: bool,
    ) -> Result<Staged> {
        // Pinned under the log lock: retirement checks pins under it too, so a sealed segment
        // is never retired between this append and its pin.
        let (loc, pin) = {
            let mut log = self.log();
            let loc = log.append(id, txn, region, payload)?;
            (loc, self.pins.pin(loc.segment))
        };
        if cache && payload.len() <= CACHE_COPY_MAX {
            self.cache.insert(loc, Arc::new(payload.to_vec()));
        }
        Ok(Staged {
            crc_late: false,
            txn,
            id,
            region: region.clone(),
            loc,
            _pin: pin,
        })
    }

    /// Like [`stage`](Self::stage) for a payload a same-node client writes into the log
    /// itself ([`SegmentLog::reserve`]): the record's header is written and room reserved;
    /// the write stays invisible until committed, as a staged one. Also returns the segment
    /// file's (st_dev, st_ino) for the client. The record goes to the segment of `lease`,
    /// the writer's own ([`WriterLease`]).
    pub fn reserve(
        &self,
        lease: &mut WriterLease,
        txn: u64,
        id: ObjectId,
        region: &Region,
        len: u64,
        crc: u32,
    ) -> Result<(Staged, (u64, u64))> {
        // Pinned under the log lock, as in `stage`.
        let (loc, ident, pin) = {
            let mut log = self.log();
            let (loc, ident) = log.reserve(lease, id, txn, region, len, crc)?;
            (loc, ident, self.pins.pin(loc.segment))
        };
        let staged = Staged {
            crc_late: false,
            txn,
            id,
            region: region.clone(),
            loc,
            _pin: pin,
        };
        Ok((staged, ident))
    }

    /// A lease for one writer's one-copy writes (one per client connection): a segment of
    /// its own, made on its first reservation, released when dropped.
    pub fn writer_lease(&self) -> WriterLease {
        self.log().writer_lease()
    }

    /// Makes empty log segments ahead for writers' leases, once writers use them
    /// (`SegmentLog::replenish_spares`): for the checkpoint thread.
    pub fn replenish_writer_segments(&self) -> Result<usize> {
        self.log().replenish_spares()
    }

    /// Gives a write reserved without its payload checksum (`crc_late`) its checksum `crc`:
    /// the record's header is written again with it (`SegmentLog::set_reserved_crc`).
    pub fn set_reserved_crc(&self, s: &mut Staged, crc: u32) -> Result<()> {
        self.log()
            .set_reserved_crc(s.id, s.txn, &s.region, &s.loc, crc)?;
        s.loc.crc = crc;
        s.crc_late = false;
        Ok(())
    }

    /// Makes every staged byte and every metadata change durable and checkpoints (shutdown,
    /// `memory` durability's sync).
    pub fn sync(&self) -> Result<()> {
        {
            let c = self.lock_commit();
            self.sync_log(&c)?;
        }
        self.checkpoint()?;
        self.meta.sync()
    }

    /// The log half of [`sync_committed`](Self::sync_committed): every record committed so
    /// far is on stable storage (the metadata WAL is the caller's to sync).
    /// a `Seal` with `sync_log`.
    pub fn sync_log_only(&self) -> Result<()> {
        let c = self.lock_commit();
        self.sync_log(&c)
    }

    /// Makes every commit made here durable on this node: one fdatasync of the dirty log
    /// segments (covering `memory` commits and their records), then of the metadata WAL
    /// (the region-map rows this server registered as an owner). `Request::SyncLog`.
    pub fn sync_committed(&self) -> Result<()> {
        {
            let c = self.lock_commit();
            self.sync_log(&c)?;
        }
        self.meta.sync()
    }

    /// The newest sequence number of this server's extents of `id`, if any.
    pub fn newest_seq(&self, id: ObjectId) -> Option<u64> {
        self.index()
            .get(&id)
            .and_then(|v| v.iter().map(|e| e.seq).max())
    }

    /// This server's visible extents of `id` that overlap `region`, with the overlap.
    pub fn local_pieces(&self, id: ObjectId, region: &Region) -> Vec<(Arc<Extent>, Region)> {
        self.index()
            .get(&id)
            .map(|v| {
                v.iter()
                    .filter_map(|e| e.region.intersect(region).map(|i| (e.clone(), i)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every visible extent of `id` held here, in seq order.
    pub fn extents_of(&self, id: ObjectId) -> Vec<Extent> {
        self.index()
            .get(&id)
            .map(|v| v.iter().map(|e| (**e).clone()).collect())
            .unwrap_or_default()
    }

    /// Extent `seq` of `id`, if it is (still) visible here.
    pub fn extent(&self, id: ObjectId, seq: u64) -> Option<Extent> {
        self.index()
            .get(&id)
            .and_then(|v| v.iter().find(|x| x.seq == seq))
            .map(|e| (**e).clone())
    }

    /// Forgets every visible extent of a deleted object and drops its tier copies; returns how
    /// many there were. Its log bytes become garbage.
    pub fn forget(&self, id: ObjectId) -> usize {
        let gone = self.index_mut().remove(&id).unwrap_or_default();
        self.drop_tier_copies(id, &gone);
        gone.len()
    }

    /// Drops extents `seqs` of `id` that no read needs any more (wholly shadowed by newer
    /// writes in every version still to be read): their rows first (durably), then
    /// the index; their log bytes become garbage that [`retire_flushed`](Self::retire_flushed)
    /// frees once a segment holds nothing else. A crash in between leaves rows for extents
    /// still in the log (replayed or not, they stay shadowed). Returns how many were dropped.
    pub fn drop_extents(&self, id: ObjectId, seqs: &HashSet<u64>) -> Result<usize> {
        if seqs.is_empty() {
            return Ok(0);
        }
        let _c = self.lock_commit();
        let keys: Vec<(ObjectId, u64)> = self
            .extents_of(id)
            .iter()
            .filter(|e| seqs.contains(&e.seq))
            .map(|e| (id, e.seq))
            .collect();
        // Not fsynced here (this runs under the commit lock): the caller's retirement
        // (`retire_flushed`) checkpoints next, whose WAL fsync covers it; a crash before that
        // brings back writes that are shadowed or below a stream's base, which reads leave
        // out and the copier drops again.
        self.meta.delete_extents_lazy(&keys)?;
        let gone: Vec<Arc<Extent>> = {
            let mut index = self.index_mut();
            let Some(list) = index.get_mut(&id) else {
                return Ok(0);
            };
            let (gone, keep): (Vec<Arc<Extent>>, Vec<Arc<Extent>>) =
                list.drain(..).partition(|e| seqs.contains(&e.seq));
            *list = keep;
            gone
        };
        self.drop_tier_copies(id, &gone);
        Ok(gone.len())
    }

    /// `pdcx show`: this server's extents of `id`, where each lives and how durable it is.
    pub fn extent_infos(&self, id: ObjectId) -> Vec<ExtentInfo> {
        let index = self.index();
        let Some(list) = index.get(&id) else {
            return Vec::new();
        };
        // Whether each extent's log bytes are under a committed manifest (fsynced).
        let synced: Vec<bool> = {
            let log = self.log();
            list.iter()
                .map(|e| e.in_log && log.is_committed(&e.loc))
                .collect()
        };
        list.iter()
            .zip(synced)
            .map(|(e, synced)| ExtentInfo {
                durability: self.durability_of(e, synced).to_string(),
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
            .collect()
    }

    /// The durability extent `e` has reached: "remote" once a tier surviving node loss holds
    /// it with its home recorded (homes are recorded durably before they are published),
    /// "local" once its log bytes are fsynced (`synced`) or a node-local tier holds it, else
    /// "memory".
    fn durability_of(&self, e: &Extent, synced: bool) -> &'static str {
        let home = match (&self.tiering, &e.home) {
            (Some(t), Some(h)) => Some((t.off_node(h.tier), t.is_durable(h.tier))),
            _ => None,
        };
        match home {
            Some((true, _)) => "remote",
            Some((false, true)) => "local",
            // Its bytes are the file's; its record is durable (`add_references`).
            None if e.external.is_some() => "local",
            _ if synced => "local",
            _ => "memory",
        }
    }

    /// "log", "log+TIER", "TIER" or, for an extent read by reference, "ref" for `pdcx show`.
    fn tier_label(&self, e: &Extent) -> String {
        match (&self.tiering, &e.home) {
            (_, None) if e.external.is_some() => "ref".to_string(),
            (Some(t), Some(h)) if e.in_log => format!("log+{}", t.name(h.tier)),
            (Some(t), Some(h)) => t.name(h.tier).to_string(),
            _ => "log".to_string(),
        }
    }

    /// How many visible extents each object has here.
    pub fn extent_counts(&self) -> Vec<(ObjectId, usize)> {
        self.index().iter().map(|(id, v)| (*id, v.len())).collect()
    }

    pub fn extent_count(&self) -> u64 {
        self.index().values().map(|v| v.len() as u64).sum()
    }

    /// Extents and raw bytes not yet copied to any tier (the flush queue).
    pub fn pending(&self) -> (u64, u64) {
        let mut out = (0, 0);
        for e in self.index().values().flatten() {
            if e.home.is_none() && e.external.is_none() {
                out.0 += 1;
                out.1 += e.loc.len;
            }
        }
        out
    }

    pub fn log_bytes(&self) -> u64 {
        self.log().total_bytes()
    }

    pub fn log_dir(&self) -> PathBuf {
        self.log().dir().to_path_buf()
    }

    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// How many deferred (relaxed, not yet registered) writes this server holds.
    pub fn deferred_count(&self) -> u64 {
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len() as u64
    }

    /// Objects among `ids` of which this server holds at least `expected` deferred writes.
    pub fn objects_due(&self, ids: &HashSet<ObjectId>, expected: u64) -> Vec<ObjectId> {
        if expected == 0 {
            return Vec::new();
        }
        let mut count: HashMap<ObjectId, u64> = HashMap::new();
        for d in self
            .deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            if ids.contains(&d.id) {
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

    /// Owner side of a registration: records where `holder`'s regions live (region map, one
    /// transaction, durable when `durable` or when it raised the reserved sequence mark; see
    /// `Metadata::register_regions`) and gives each its sequence number from this server's
    /// counter. Returns (seq, newly recorded) per item, and whether it waited for the fsync.
    pub fn record_registrations(
        &self,
        holder: u32,
        items: &[Registration<'_>],
        durable: bool,
    ) -> Result<(Vec<(u64, bool)>, bool)> {
        let mut next_seq = self.next_seq.lock().unwrap_or_else(|p| p.into_inner());
        let got = self
            .meta
            .register_regions(holder, items, &mut next_seq, durable)?;
        crash_point("register.after_region_map");
        Ok(got)
    }

    /// The number the next write of an object owned here will get.
    pub fn next_seq(&self) -> u64 {
        *self.next_seq.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tiers(&self) -> Result<&Arc<Tiering>> {
        self.tiering
            .as_ref()
            .ok_or_else(|| Error::invalid("this deployment has no tiers configured (pdcx.toml)"))
    }

    /// The whole raw payload of an extent, wherever it is (cache, log, home tier).
    pub fn extent_bytes(&self, obj: &ObjectMeta, e: &Extent) -> Result<Arc<Vec<u8>>> {
        if let Some(d) = self.cache.get(&e.loc) {
            return Ok(d);
        }
        if let (Some(r), None) = (&e.external, &e.home) {
            return self.read_reference(obj, e, r, (0, e.loc.len));
        }
        // Read without the log's lock (see `SegmentLog::span`).
        if let Some((span, loc)) = self.extent_span(obj.id, e)? {
            return Ok(Arc::new(span.read_verified(loc.crc)?));
        }
        let now = self.extent(obj.id, e.seq).filter(|n| n.loc != e.loc);
        self.read_home(obj, now.as_ref().unwrap_or(e), (0, e.loc.len))
    }

    /// Where extent `e`'s bytes lie in the log now, with the location its checksum is in:
    /// None when they are not in the log (on a tier only, or a reference to a file the
    /// extent was not copied from). Compaction may have moved it since the caller looked it
    /// up: this is where it is now.
    pub fn extent_span(&self, id: ObjectId, e: &Extent) -> Result<Option<(LogSpan, Location)>> {
        if let (Some(_), None) = (&e.external, &e.home) {
            return Ok(None);
        }
        let now = self.extent(id, e.seq).filter(|n| n.loc != e.loc);
        let e = now.as_ref().unwrap_or(e);
        let log = self.log();
        if e.in_log && log.has_segment(e.loc.segment) {
            let span = log.span(e.loc.segment, e.loc.offset, e.loc.len)?;
            return Ok(Some((span, e.loc)));
        }
        Ok(None)
    }

    /// An internal error for an extent found nowhere: compaction dropped it (newer writes
    /// hide it) or moved it after the reader looked it up. Reads that meet it start again
    /// ([`again_if_moved`]), and find the newer state.
    fn lost(id: ObjectId, seq: u64) -> Error {
        Error::internal(format!("extent {seq} of object {id:#x}{GONE}"))
    }
}

/// How [`DataStore::lost`]'s message ends.
const GONE: &str = " is neither in the log nor on a tier";

/// Whether `e` says an extent a reader looked up is gone (see [`DataStore::lost`]).
pub fn is_gone(e: &Error) -> bool {
    e.kind == pdcx_core::ErrorKind::Internal && e.message.ends_with(GONE)
}

/// Runs a read, again (a few times) while it meets extents that compaction moved or dropped
/// after the read looked them up: each attempt looks at the index afresh.
pub fn again_if_moved<T>(mut read: impl FnMut() -> Result<T>) -> Result<T> {
    let mut attempts = 0;
    loop {
        match read() {
            Err(e) if is_gone(&e) && attempts < 4 => attempts += 1,
            r => return r,
        }
    }
}
