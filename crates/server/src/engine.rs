//! The request-level data logic of a server: checks writes against their objects, commits
//! through the data store (`crate::datastore`, which owns the log, the index, the homes and
//! retirement), registers writes with their owners, and assembles reads from this server's
//! extents and the pieces other servers hold.
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

use crate::datastore::{DataStore, Extent, Registrar};
use crate::meta::{Metadata, Registration};
use crate::streambase::{Base, StreamBases};
use crate::tiering::Tiering;
use pdcx_core::model::owner_of_id;
use pdcx_core::protocol::{
    Consistency, Durability, ExtentInfo, PiecePlans, PlanPiece, PlanSpan, ReadPlan, RegisterItem,
};
use pdcx_core::region::{copy_region, gather_pieces, Layout};
use pdcx_core::{Error, ErrorKind, ObjectId, ObjectMeta, Region, Result};
use pdcx_store::{Cache, LogOptions, Recovery};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

pub use crate::datastore::{ExtentRanges, Staged};

/// What the engine needs from the other servers of the deployment.
pub trait Peers: Send + Sync {
    /// Metadata of an object another server owns; `fresh` bypasses any cached copy (its
    /// dims may have grown).
    fn object(&self, id: ObjectId, fresh: bool) -> Result<ObjectMeta>;
    /// Tells `owner` that this server committed these regions of its objects; returns the
    /// sequence number the owner assigned each (None: a deferred write of a deleted object).
    fn register(&self, owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>>;
    /// [`register`](Self::register) of the strong writes of a `memory` commit: the owner
    /// answers before its metadata WAL fsync (`PeerRequest::RegisterMemory`).
    fn register_memory(&self, owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        self.register(owner, items)
    }
    /// `holder`'s committed pieces of `region` (seq, piece) and their bytes back to back.
    fn pieces(&self, holder: u32, id: ObjectId, region: &Region) -> Result<Pieces>;
    /// `owner`'s read of `region` of its object `id` (a value query over objects of
    /// several owners).
    fn read_owned(&self, owner: u32, id: ObjectId, region: &Region) -> Result<Vec<u8>> {
        let _ = (id, region);
        Err(Error::invalid(format!(
            "server {owner} cannot be asked for object data here (no peer connections)"
        )))
    }
    /// `holder`'s extents of `id` inside `region`: each one's part of the region and its
    /// statistics (which extents a value query may skip).
    fn extent_ranges(&self, holder: u32, id: ObjectId, region: &Region) -> Result<ExtentRanges> {
        let _ = (id, region);
        Err(Error::invalid(format!(
            "server {holder} cannot be asked for extent statistics here (no peer connections)"
        )))
    }
    /// Has `holder` drop its extents `seqs` of `id`; how many it dropped.
    fn drop_extents(&self, holder: u32, id: ObjectId, seqs: &[u64]) -> Result<u64> {
        let _ = (id, seqs);
        Err(Error::invalid(format!(
            "server {holder} cannot be asked to drop extents here (no peer connections)"
        )))
    }
    /// Sends a group-shard request (`PeerRequest::Shard*`, `tiering::group`) to server `to`.
    fn shard_call(
        &self,
        to: u32,
        req: &pdcx_core::protocol::PeerRequest,
    ) -> Result<(pdcx_core::protocol::PeerResponse, Vec<u8>)> {
        Err(Error::invalid(format!(
            "server {to} cannot be sent {} here (no peer connections)",
            req.name()
        )))
    }
    /// Has `holder` upload one part of a version's S3 multipart upload; its ETag.
    fn upload_part(&self, holder: u32, part: &pdcx_core::protocol::UploadPart) -> Result<String> {
        let _ = part;
        Err(Error::invalid(format!(
            "server {holder} cannot be asked to upload parts here (no peer connections)"
        )))
    }
}

pub use pdcx_core::protocol::Pieces;

/// An owner's record that another server holds a region of one of its objects.
#[derive(Debug, Clone)]
struct RemoteExtent {
    seq: u64,
    holder: u32,
    region: Region,
}

/// Which writes a read counts: numbered below `below` (a version) and at or after `from` (a
/// base's seal), and the base to read first where the region meets it.
struct Window {
    below: Option<u64>,
    from: u64,
    base: Option<Base>,
}

impl Window {
    fn counts(&self, seq: u64) -> bool {
        seq >= self.from && self.below.is_none_or(|b| seq < b)
    }
}

/// Registration counters, for `Stats`.
#[derive(Debug, Default)]
pub struct RegisterCounters {
    /// Register requests answered as owner, and the regions they carried.
    pub received: AtomicU64,
    pub regions: AtomicU64,
    /// Register requests sent to owners as a holder.
    pub sent: AtomicU64,
    /// Of the requests answered as owner, those answered before their metadata WAL fsync
    /// (`RegisterMemory` within the reserved sequence block).
    pub unsynced: AtomicU64,
}

pub struct Engine {
    /// The durable data path: log, cache, extent index, homes, retirement.
    store: DataStore,
    /// Owner side: regions of this server's objects held by other servers, in seq order.
    remote: RwLock<HashMap<ObjectId, Vec<RemoteExtent>>>,
    pub counters: RegisterCounters,
    pub(crate) meta: Arc<Metadata>,
    pub(crate) rank: u32,
    peers: OnceLock<Arc<dyn Peers>>,
    /// The storage hierarchy behind the log; None when the config declares no tiers.
    pub(crate) tiering: Option<Arc<Tiering>>,
    /// The log directory as an absolute path, for read plans (resolved once).
    plan_dir: OnceLock<String>,
    /// Byte streams (owned here) whose older bytes are read from their home.
    pub bases: StreamBases,
    /// Log segments mapped for gathered reads.
    mapped: crate::mapped::MappedSegments,
}

/// The engine's side of registration: sends a holder's items to their owner.
struct PeerRegistrar<'a>(&'a Engine);

impl Registrar for PeerRegistrar<'_> {
    fn register(&self, owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        self.0.counters.sent.fetch_add(1, Ordering::Relaxed);
        self.0.peers()?.register(owner, items)
    }

    fn register_memory(&self, owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        self.0.counters.sent.fetch_add(1, Ordering::Relaxed);
        self.0.peers()?.register_memory(owner, items)
    }
}

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
        let tiering = tiering.map(Arc::new);
        let mut remote: HashMap<ObjectId, Vec<RemoteExtent>> = HashMap::new();
        // Numbers up to the reserved mark may have been handed out by registrations answered
        // before their rows were fsynced (`memory`), so the counter resumes above it.
        let mut max_seq = meta.seq_reserved().saturating_sub(1);
        for (id, seq, holder, region) in meta.load_region_map()? {
            max_seq = max_seq.max(seq);
            remote.entry(id).or_default().push(RemoteExtent {
                seq,
                holder,
                region,
            });
        }
        let (store, opened) = DataStore::open(
            dir,
            meta.clone(),
            cache_bytes,
            log_opts,
            tiering.clone(),
            max_seq + 1,
        )?;
        let bases = StreamBases::default();
        for (id, base) in meta.stream_bases()? {
            bases.set(id, base);
        }
        let engine = Engine {
            store,
            remote: RwLock::new(remote),
            counters: RegisterCounters::default(),
            rank: meta.rank,
            meta,
            peers: OnceLock::new(),
            tiering,
            plan_dir: OnceLock::new(),
            mapped: Default::default(),
            bases,
        };
        Ok((engine, opened.recovery, opened.dropped))
    }

    /// The data store under this engine (the flusher's policy works through it).
    pub fn store(&self) -> &DataStore {
        &self.store
    }

    /// Connects the engine to the rest of the deployment (once; later calls are ignored).
    pub fn set_peers(&self, peers: Arc<dyn Peers>) {
        let _ = self.peers.set(peers);
    }

    pub(crate) fn peers(&self) -> Result<&Arc<dyn Peers>> {
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
    /// refreshed once before a region is refused (it may have grown since). A write past the
    /// end of a byte stream owned here grows it (the writer need not send
    /// `ExtendDims` first; a write that then fails leaves the stream longer, as a failed
    /// POSIX write past the end may).
    pub fn checked_meta(&self, id: ObjectId, region: &Region) -> Result<ObjectMeta> {
        let obj = self.object_meta(id, false)?;
        match region.check_within(&obj.dims) {
            Ok(()) => Ok(obj),
            Err(_) if owner_of_id(id) != self.rank => {
                let obj = self.object_meta(id, true)?;
                region.check_within(&obj.dims)?;
                Ok(obj)
            }
            Err(_) if obj.is_byte_stream() && region.ndim() == 1 => {
                region.validate()?;
                let obj = self.meta.extend_dims(id, &[region.end(0)])?;
                region.check_within(&obj.dims)?;
                Ok(obj)
            }
            Err(e) => Err(e),
        }
    }

    /// Checks a write against the object and stages it in the data store (appended to the
    /// log, invisible until committed).
    pub fn stage(&self, txn: u64, id: ObjectId, region: &Region, payload: &[u8]) -> Result<Staged> {
        self.stage_with(txn, id, region, payload, true)
    }

    /// [`stage`](Self::stage) straight from a client's shared-memory block: logged from
    /// there, never copied into the cache (the page cache holds it; the client may reuse the
    /// block once the stage is answered).
    pub fn stage_shared(
        &self,
        txn: u64,
        id: ObjectId,
        region: &Region,
        payload: &[u8],
    ) -> Result<Staged> {
        self.stage_with(txn, id, region, payload, false)
    }

    /// A write whose payload (`len` bytes, checksum `crc`) a same-node client writes into
    /// the log itself: checked like a stage, then reserved ([`DataStore::reserve`]).
    pub fn reserve(
        &self,
        txn: u64,
        id: ObjectId,
        region: &Region,
        len: u64,
        crc: u32,
    ) -> Result<(Staged, (u64, u64))> {
        self.check_stage_len(id, region, len)?;
        self.store.reserve(txn, id, region, len, crc)
    }

    /// Fails unless a write of `len` bytes to `region` of object `id` has the right size.
    pub(crate) fn check_stage_len(&self, id: ObjectId, region: &Region, len: u64) -> Result<()> {
        let obj = self.checked_meta(id, region)?;
        let want = region.byte_len(obj.dtype.size())?;
        if len != want {
            return Err(Error::new(
                ErrorKind::DtypeMismatch,
                format!(
                    "write to {} region {region} carries {len} bytes but {} {} elements need {want}",
                    obj.name,
                    region.num_elements(),
                    obj.dtype
                ),
            ));
        }
        Ok(())
    }

    fn stage_with(
        &self,
        txn: u64,
        id: ObjectId,
        region: &Region,
        payload: &[u8],
        cache: bool,
    ) -> Result<Staged> {
        self.check_stage_len(id, region, payload.len() as u64)?;
        self.store.stage(txn, id, region, payload, cache)
    }

    /// The consistency point of strong writes: `commit_with(.., Consistency::Strong)`.
    pub fn commit(&self, staged: &[Staged], durability: Durability) -> Result<()> {
        self.commit_with(staged, durability, Consistency::Strong)
    }

    /// The consistency point: [`DataStore::commit`] (its doc lists the steps), with this
    /// engine's peers registering strong writes of foreign objects with their owners.
    ///
    /// Relaxed: foreign writes skip the owner and stay invisible until `register_deferred`.
    /// If `expected_writes` > 0 and this server now holds that many deferred writes of an
    /// object, they are registered before this returns (a failure there leaves them deferred
    /// for the timer and does not fail the commit: the data is safe).
    ///
    /// Durability is at least what each object's `pdcx.durability` tag asks for. `remote`
    /// commits as `local`, then puts exactly these extents on their home tier (the first tier
    /// of their placement that survives node loss) and records their homes durably before
    /// returning ([`Flusher::make_remote`](crate::flusher::Flusher::make_remote)). Its writes are registered with their
    /// owners at once (strong), whatever the consistency: a home is recorded under the
    /// owner's number. Refused, before anything is committed, when no tier survives node loss.
    pub fn commit_with(
        &self,
        staged: &[Staged],
        durability: Durability,
        consistency: Consistency,
    ) -> Result<()> {
        let durability = self.effective_durability(staged, durability)?;
        let remote = durability == Durability::Remote;
        if remote {
            match &self.tiering {
                Some(t) => t.check_remote()?,
                None => return Err(crate::tiering::no_remote_tier(None)),
            }
        }
        let relaxed = matches!(consistency, Consistency::Relaxed { .. }) && !remote;
        let committed = self
            .store
            .commit(staged, durability, relaxed, &PeerRegistrar(self))?;
        if remote {
            self.flusher().make_remote(&committed.visible)?;
        }
        if let Consistency::Relaxed { expected_writes } = consistency {
            let mine: HashSet<ObjectId> = staged.iter().map(|s| s.id).collect();
            let due = self.store.objects_due(&mine, expected_writes);
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

    /// `durability`, raised to the `pdcx.durability` tag of any object of `staged`.
    fn effective_durability(
        &self,
        staged: &[Staged],
        durability: Durability,
    ) -> Result<Durability> {
        use crate::tiering::{durability_rank, parse_durability, DURABILITY_TAG};
        let mut best = durability;
        let mut seen: HashSet<ObjectId> = HashSet::new();
        for s in staged {
            if best == Durability::Remote {
                break;
            }
            if !seen.insert(s.id) {
                continue;
            }
            // An object deleted since its write was staged has no say (the commit goes on as
            // before; its extents are garbage). Own objects: no copy of the metadata.
            let tag = if owner_of_id(s.id) == self.rank {
                self.meta.object_tag(s.id, DURABILITY_TAG)
            } else {
                let Ok(obj) = self.object_meta(s.id, false) else {
                    continue;
                };
                obj.tags
                    .into_iter()
                    .find(|(k, _)| k == DURABILITY_TAG)
                    .map(|(_, v)| v)
            };
            if let Some(pdcx_core::TagValue::Str(v)) = tag {
                let d = parse_durability(&v)?;
                if durability_rank(d) > durability_rank(best) {
                    best = d;
                }
            }
        }
        Ok(best)
    }

    /// How many deferred (relaxed, not yet registered) writes this server holds.
    pub fn deferred_count(&self) -> u64 {
        self.store.deferred_count()
    }

    /// Registers this server's deferred writes of `ids` (all of them when None) with their
    /// owners ([`DataStore::register_deferred`]). Returns how many were registered.
    pub fn register_deferred(&self, ids: Option<&[ObjectId]>) -> Result<usize> {
        self.store.register_deferred(ids, &PeerRegistrar(self))
    }

    /// Makes every staged byte durable (used at shutdown).
    pub fn sync(&self) -> Result<()> {
        self.store.sync()
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
        if pdcx_core::region::short_rows(region, out.len())
            && self.read_gathered(id, region, &vec![1; region.ndim()], out)?
        {
            return Ok(());
        }
        let obj = self.meta.object(id)?;
        region.check_within(&obj.dims)?;
        let holders = self.remote_holders(id, region);
        self.read_here(&obj, region, out, &holders, None)
    }

    /// Reads `region` of object `id` (owned here) as of a version: only writes with a
    /// sequence number below `seq_below` count (a byte stream's sealed version,
    /// whatever was written after it). The caller checks the region against the version's
    /// size, which the object's current dims may be smaller than after a truncate.
    pub fn read_version(
        &self,
        id: ObjectId,
        region: &Region,
        seq_below: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let obj = self.meta.object(id)?;
        region.validate()?;
        let holders = self.remote_holders(id, region);
        self.read_here(&obj, region, out, &holders, Some(seq_below))
    }

    /// For version `seq_below` of object `id` (owned here): every server holding writes of
    /// `region` below that number, with how many bytes of the region it holds (overlaps
    /// counted), this server included. Picks the server that uploads a part.
    pub fn version_holders(
        &self,
        id: ObjectId,
        region: &Region,
        seq_below: u64,
    ) -> Vec<(u32, u64)> {
        let mut bytes: HashMap<u32, u64> = HashMap::new();
        // Writes below a base are not part of any version after it.
        let from = self.bases.get(id).map_or(0, |b| b.seal_seq);
        let seq_below_base = |seq: u64| seq < from;
        for (e, inter) in self.store.local_pieces(id, region) {
            if e.seq < seq_below && !seq_below_base(e.seq) {
                *bytes.entry(self.rank).or_default() += inter.num_elements();
            }
        }
        let remote = self.remote.read().unwrap_or_else(|p| p.into_inner());
        for r in remote.get(&id).into_iter().flatten() {
            if r.seq < seq_below && !seq_below_base(r.seq) && r.holder != self.rank {
                if let Some(i) = r.region.intersect(region) {
                    *bytes.entry(r.holder).or_default() += i.num_elements();
                }
            }
        }
        let mut v: Vec<(u32, u64)> = bytes.into_iter().collect();
        v.sort_unstable();
        v
    }

    /// Issue 11: once version `seq_below` of byte stream `id` (owned here) is at its home, no
    /// read ever needs an older version again. Drops every write numbered below it that newer
    /// writes below it cover entirely (an epoch rewritten by the next: the checkpoint
    /// pattern) — here, in the region map and on the servers holding them — and frees the log
    /// segments left holding nothing. Returns how many were dropped. A holder that cannot be
    /// reached keeps its shadowed extents (harmless: they stay shadowed).
    pub fn drop_shadowed(&self, id: ObjectId, seq_below: u64) -> Result<usize> {
        self.drop_writes_below(id, seq_below, false)
    }

    /// Issue 11: once version `seq_below` of byte stream `id` (owned here) is its base (read
    /// from its home, see `streambase.rs`), drops every write numbered below it, here, in the
    /// region map and on its holders, and frees the log segments left holding nothing.
    /// Returns how many were dropped; a holder that cannot be reached keeps its writes (reads
    /// leave them out) and the next call (at the next start) tries again.
    pub fn drop_below(&self, id: ObjectId, seq_below: u64) -> Result<usize> {
        self.drop_writes_below(id, seq_below, true)
    }

    /// The base of `obj` if it is a byte stream owned here that has one.
    fn base_of(&self, obj: &ObjectMeta) -> Option<Base> {
        if self.bases.is_empty() || owner_of_id(obj.id) != self.rank || !obj.is_byte_stream() {
            return None;
        }
        self.bases.get(obj.id)
    }

    /// [`drop_shadowed`](Self::drop_shadowed) (only writes newer ones cover) or
    /// [`drop_below`](Self::drop_below) (`all`).
    fn drop_writes_below(&self, id: ObjectId, seq_below: u64, all: bool) -> Result<usize> {
        let everything = all;
        // (seq, holder, start, end), newest first.
        let mut writes: Vec<(u64, u32, u64, u64)> = self
            .store
            .extents_of(id)
            .iter()
            .filter(|e| e.seq < seq_below && e.region.ndim() == 1)
            .map(|e| (e.seq, self.rank, e.region.offset[0], e.region.end(0)))
            .collect();
        {
            let remote = self.remote.read().unwrap_or_else(|p| p.into_inner());
            writes.extend(
                remote
                    .get(&id)
                    .into_iter()
                    .flatten()
                    .filter(|r| r.seq < seq_below && r.region.ndim() == 1)
                    .map(|r| (r.seq, r.holder, r.region.offset[0], r.region.end(0))),
            );
        }
        writes.sort_unstable_by_key(|x| std::cmp::Reverse(x.0));
        let mut covered = Coverage::default();
        let mut dead: HashMap<u32, Vec<u64>> = HashMap::new();
        for (seq, holder, start, end) in writes {
            if everything || covered.contains(start, end) {
                dead.entry(holder).or_default().push(seq);
            } else {
                covered.insert(start, end);
            }
        }
        let mut dropped = 0;
        if let Some(mine) = dead.remove(&self.rank) {
            dropped += self.store.drop_extents(id, &mine.into_iter().collect())?;
        }
        let mut rows = Vec::new();
        let mut unreached = None;
        for (holder, seqs) in dead {
            match self.peers().and_then(|p| p.drop_extents(holder, id, &seqs)) {
                Ok(n) => dropped += n as usize,
                Err(e) => {
                    tracing::warn!(
                        "server {holder} keeps {} writes of {id:#x}: {}",
                        seqs.len(),
                        e.message
                    );
                    unreached.get_or_insert(e);
                    continue;
                }
            }
            rows.extend(seqs.iter().map(|&s| (id, s)));
            let gone: HashSet<u64> = seqs.into_iter().collect();
            if let Some(v) = self
                .remote
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .get_mut(&id)
            {
                v.retain(|r| r.holder != holder || !gone.contains(&r.seq));
            }
        }
        if !rows.is_empty() {
            self.meta.delete_region_rows(&rows)?;
        }
        if dropped > 0 {
            self.store.retire_flushed()?;
        }
        match unreached {
            // Below a base they are garbage to be dropped later: say so.
            Some(e) if everything => Err(e),
            _ => Ok(dropped),
        }
    }

    /// The 1-D ranges `[start, end)` of every write of object `id` (owned here) numbered
    /// `seq_from` or later, wherever it is held, merged (a crashed run's writes after
    /// its last version).
    pub fn ranges_since(&self, id: ObjectId, seq_from: u64) -> Vec<(u64, u64)> {
        let mut r: Vec<(u64, u64)> = self
            .store
            .extents_of(id)
            .iter()
            .filter(|e| e.seq >= seq_from && e.region.ndim() == 1)
            .map(|e| (e.region.offset[0], e.region.end(0)))
            .collect();
        let remote = self.remote.read().unwrap_or_else(|p| p.into_inner());
        r.extend(
            remote
                .get(&id)
                .into_iter()
                .flatten()
                .filter(|x| x.seq >= seq_from && x.region.ndim() == 1)
                .map(|x| (x.region.offset[0], x.region.end(0))),
        );
        r.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (a, b) in r {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        merged
    }

    /// [`read_version`](Self::read_version) on any server (not only the owner), given the
    /// other servers holding writes of the region (`holders`, from the owner's
    /// [`version_holders`](Self::version_holders)). A server uploading a part reads it so.
    pub fn read_version_from(
        &self,
        id: ObjectId,
        region: &Region,
        seq_below: u64,
        holders: &[u32],
        out: &mut [u8],
    ) -> Result<()> {
        let obj = self.object_meta(id, false)?;
        region.validate()?;
        let others: Vec<u32> = holders
            .iter()
            .copied()
            .filter(|&h| h != self.rank)
            .collect();
        self.read_here(&obj, region, out, &others, Some(seq_below))
    }

    /// Read of a region the client learned (from the owner's `locate`) is held by this server
    /// alone: fill value plus this server's extents, also for objects owned elsewhere.
    pub fn read_held(&self, id: ObjectId, region: &Region, out: &mut [u8]) -> Result<()> {
        let obj = self.checked_meta(id, region)?;
        self.read_here(&obj, region, out, &[], None)
    }

    /// Owner side of a client's read planning: the servers holding committed data of each
    /// region (this one included when it does), so a region with one holder is read there
    /// directly.
    pub fn locate(&self, id: ObjectId, region: &Region) -> Result<Vec<u32>> {
        let obj = self.owned_meta(id, region)?;
        let mut holders = self.remote_holders(id, region);
        // A byte stream owned here is always read here: its base, if any, is read
        // here, only this server knows which writes are below it, and a base may be set
        // (and the writes below it dropped on their holders) between a locate and a read at
        // a holder.
        let stream = obj.is_byte_stream();
        if stream || !self.store.local_pieces(id, region).is_empty() {
            holders.push(self.rank);
            holders.sort_unstable();
        }
        Ok(holders)
    }

    /// The metadata of object `id`, which this server must own, with `region` checked
    /// against its dims (reads and read plans at the owner).
    fn owned_meta(&self, id: ObjectId, region: &Region) -> Result<ObjectMeta> {
        let owner = owner_of_id(id);
        if owner != self.rank {
            return Err(Error::invalid(format!(
                "object {id:#x} is owned by server {owner}, not {}: read it there",
                self.rank
            )));
        }
        let obj = self.meta.object(id)?;
        region.check_within(&obj.dims)?;
        Ok(obj)
    }

    /// Issue 10, "reads": the one-copy read plan of `region` of `id` for a client on this
    /// node (see `protocol::ReadPlan`), with `Read` semantics at the owner or, with `held`,
    /// `ReadHeld` semantics (this server's pieces only, each span with its write's sequence
    /// number so a client can merge several holders' plans). See [`PlanOutcome`].
    pub fn read_plan(&self, id: ObjectId, region: &Region, held: bool) -> Result<PlanOutcome> {
        let obj = if held {
            self.checked_meta(id, region)?
        } else {
            let obj = self.owned_meta(id, region)?;
            let mut holders = self.remote_holders(id, region);
            if obj.is_byte_stream() && (self.base_of(&obj).is_some() || !holders.is_empty()) {
                // Part of it is at the home, or a base may drop the holders' writes before
                // the client reads them: read through the server.
                return Ok(PlanOutcome::None);
            }
            if !holders.is_empty() {
                if !self.store.local_pieces(id, region).is_empty() {
                    holders.push(self.rank);
                    holders.sort_unstable();
                }
                return Ok(PlanOutcome::Holders(holders));
            }
            obj
        };
        let elem = obj.dtype.size() as u64;
        let len = region.byte_len(elem as usize)?;
        let pieces = self.store.local_pieces(id, region);
        // Pieces read by reference are planned as spans of their files when their
        // stored chunk is exactly their raw bytes; the rest must be committed log bytes.
        let (refs, in_log): (Vec<_>, Vec<_>) = pieces
            .iter()
            .cloned()
            .partition(|(e, _)| e.external.is_some() && e.home.is_none());
        let Some(segments) = self.store.committed_segments(&in_log) else {
            return Ok(PlanOutcome::None);
        };
        let Some((files, remap)) = ref_files(&refs) else {
            return Ok(PlanOutcome::None);
        };
        let mut spans: Vec<PlanSpan> = Vec::new();
        for (e, inter) in &pieces {
            if !plan_piece(e, inter, region, elem, &mut spans) {
                return Ok(PlanOutcome::None);
            }
        }
        // A file read by reference in many small spans (a box cutting across chunk rows) is
        // better read by the server, one read per chunk (`read_reference`), than by the client
        // in thousands of small preads.
        let ref_spans: Vec<&PlanSpan> = spans
            .iter()
            .filter(|s| remap.contains_key(&s.seq))
            .collect();
        if ref_spans.len() > 8
            && ref_spans.iter().map(|s| s.len).sum::<u64>() / (ref_spans.len() as u64)
                < DIRECT_MIN_SPAN
        {
            return Ok(PlanOutcome::None);
        }
        for seq in remap.keys() {
            self.store.note_ref_read(id, *seq);
        }
        for s in &mut spans {
            if let Some(&(key, base, start)) = remap.get(&s.seq) {
                s.segment = key;
                s.offset = base + (s.offset - start);
            }
        }
        let fill = (!covers(region, &pieces)).then(|| obj.fill.clone());
        Ok(PlanOutcome::Plan(
            ReadPlan { len, fill, spans },
            segments,
            files,
        ))
    }

    /// `Request::PiecePlan`: every extent under `region` of `id`, whole, with
    /// where it lies in the committed log, for a same-node client that gathers a strided
    /// selection itself. At the owner (`held` false) the holders instead, when other servers
    /// hold parts; at a holder (`held`) its own extents. None where
    /// [`read_plan`](Self::read_plan) would not plan the region (a stream's base, extents
    /// not in the committed log) and for extents read by reference (their file is not a log
    /// segment).
    pub fn piece_plan(
        &self,
        id: ObjectId,
        region: &Region,
        held: bool,
    ) -> Result<Option<PiecePlans>> {
        let obj = if held {
            self.checked_meta(id, region)?
        } else {
            self.owned_meta(id, region)?
        };
        if obj.is_byte_stream() && !held && self.base_of(&obj).is_some() {
            // Part of it may be at the home, and the copier drops writes below a base: the
            // owner reads. Without a base (a file) its holders are asked as for any
            // object; a holder is asked only after the owner answered without a base.
            return Ok(None);
        }
        if !held {
            let mut holders = self.remote_holders(id, region);
            if !holders.is_empty() {
                if !self.store.local_pieces(id, region).is_empty() {
                    holders.push(self.rank);
                    holders.sort_unstable();
                }
                return Ok(Some(PiecePlans {
                    dir: String::new(),
                    segments: Vec::new(),
                    elem: obj.dtype.size() as u64,
                    fill: None,
                    pieces: Vec::new(),
                    holders,
                }));
            }
        }
        let pieces = self.store.local_pieces(id, region);
        if pieces.iter().any(|(e, _)| e.external.is_some()) || pieces.len() > PLAN_MAX_SPANS {
            return Ok(None);
        }
        let Some(segments) = self.store.committed_segments(&pieces) else {
            return Ok(None);
        };
        let dir = if segments.is_empty() {
            String::new()
        } else {
            self.plan_dir()?.to_owned()
        };
        Ok(Some(PiecePlans {
            dir,
            segments,
            elem: obj.dtype.size() as u64,
            fill: (!covers(region, &pieces)).then(|| obj.fill.clone()),
            pieces: pieces
                .iter()
                .map(|(e, _)| PlanPiece {
                    seq: e.seq,
                    segment: e.loc.segment,
                    offset: e.loc.offset,
                    region: e.region.clone(),
                })
                .collect(),
            holders: Vec::new(),
        }))
    }

    /// Issue 12: `region` of `id` (owned here) taken every `step[d]` into `out` (C order),
    /// copied by extent from the mapped log, so only the selected elements are touched.
    /// False when the region cannot be read so (other holders, extents not in the committed
    /// log, a segment retired meanwhile): the caller reads the usual way (`out` may be
    /// partly written).
    pub fn read_gathered(
        &self,
        id: ObjectId,
        region: &Region,
        step: &[u64],
        out: &mut [u8],
    ) -> Result<bool> {
        let Some(plan) = self.piece_plan(id, region, false)? else {
            return Ok(false);
        };
        let elem = plan.elem as usize;
        let selected = (0..region.ndim())
            .map(|d| region.count[d].div_ceil(step[d]))
            .fold(1u64, u64::saturating_mul);
        if !plan.holders.is_empty() || selected.saturating_mul(plan.elem) != out.len() as u64 {
            return Ok(false);
        }
        let mut maps = Vec::with_capacity(plan.pieces.len());
        for p in &plan.pieces {
            let Some(&(_, dev, ino)) = plan.segments.iter().find(|s| s.0 == p.segment) else {
                return Ok(false);
            };
            let len = p.region.byte_len(elem)?;
            match self
                .mapped
                .get(&plan.dir, p.segment, dev, ino, p.offset + len)
            {
                Some(m) => maps.push((m, p.offset as usize, len as usize)),
                None => return Ok(false),
            }
        }
        if let Some(f) = &plan.fill {
            fill(out, f);
        }
        let srcs: Vec<(&[u8], &Region)> = plan
            .pieces
            .iter()
            .zip(&maps)
            .map(|(p, (m, at, len))| (&m[*at..at + len], &p.region))
            .collect();
        gather_pieces(&srcs, region, step, elem, out);
        Ok(true)
    }

    fn read_here(
        &self,
        obj: &ObjectMeta,
        region: &Region,
        out: &mut [u8],
        holders: &[u32],
        seq_below: Option<u64>,
    ) -> Result<()> {
        let elem = obj.dtype.size();
        if out.len() as u64 != region.byte_len(elem)? {
            return Err(Error::internal("read buffer size does not match region"));
        }
        // A base is not set (and writes below it not dropped) while a stream read runs.
        let _no_base_change = obj
            .is_byte_stream()
            .then(|| self.bases.change.read().unwrap_or_else(|p| p.into_inner()));
        // Issue 11: a stream whose base is at its home: writes below the base's seal are not
        // part of it any more (dropped, or about to be), and the base is read where the
        // region meets it.
        let base = self.base_of(obj);
        let window = Window {
            below: seq_below,
            from: base.as_ref().map_or(0, |b| b.seal_seq),
            base: base.filter(|b| region.offset[0] < b.size),
        };
        let mut pieces = self.store.local_pieces(obj.id, region);
        pieces.retain(|(e, _)| window.counts(e.seq));
        let spans = piece_spans(&pieces, elem);
        if !holders.is_empty() || (window.base.is_some() && !covers(region, &pieces)) {
            return self.read_merged(obj, region, out, &pieces, &spans, holders, &window);
        }
        // One copy: log → `out` (the reply buffer or the client's arena), span by span, when
        // the spans are few or large (many small extents are better served by the merged
        // reads of `fetch`, one large pread for many of them).
        if !pieces.is_empty() {
            let mut spans = Vec::new();
            let planned = pieces
                .iter()
                .all(|(e, i)| plan_piece(e, i, region, elem as u64, &mut spans));
            let bytes: u64 = spans.iter().map(|s| s.len).sum();
            if planned && (spans.len() <= 8 || bytes / spans.len() as u64 >= DIRECT_MIN_SPAN) {
                if !covers(region, &pieces) {
                    fill(out, &obj.fill);
                }
                if self.store.read_spans_into(obj.id, &pieces, &spans, out)? {
                    return Ok(());
                }
            }
        }
        if !covers(region, &pieces) {
            fill(out, &obj.fill);
        }
        let out_layout = Layout { region, base: 0 };
        let fetched = self.store.fetch(obj, Some(region), &pieces, &spans, out)?;
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
    #[allow(clippy::too_many_arguments)]
    fn read_merged(
        &self,
        obj: &ObjectMeta,
        region: &Region,
        out: &mut [u8],
        pieces: &[(Arc<Extent>, Region)],
        spans: &[(u64, u64)],
        holders: &[u32],
        window: &Window,
    ) -> Result<()> {
        let elem = obj.dtype.size();
        fill(out, &obj.fill);
        if let Some(b) = &window.base {
            // 1-D bytes: the region is a byte range.
            self.bases.read(b, region.offset[0], out)?;
        }
        let fetched = self.store.fetch(obj, None, pieces, spans, out)?;
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
                if window.counts(*seq) {
                    paint.push((*seq, &bytes[at..at + n], piece, 0, piece));
                }
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
        let pieces = self.store.local_pieces(id, region);
        let list: Vec<(u64, Region)> = pieces.iter().map(|(e, i)| (e.seq, i.clone())).collect();
        // One copy (log → reply) when the pieces' spans are few or large, as in `read_here`.
        let mut direct = Vec::new();
        let mut at = 0u64;
        let mut planned = true;
        for (e, inter) in &pieces {
            let first = direct.len();
            planned &= plan_piece(e, inter, inter, elem as u64, &mut direct);
            for s in &mut direct[first..] {
                s.dest += at;
            }
            at += inter.byte_len(elem)?;
        }
        let avg = at / (direct.len() as u64).max(1);
        if planned && !pieces.is_empty() && (direct.len() <= 8 || avg >= DIRECT_MIN_SPAN) {
            let mut out = vec![0u8; at as usize];
            if self.store.read_spans_into(id, &pieces, &direct, &mut out)? {
                return Ok((list, out));
            }
        }
        let spans = piece_spans(&pieces, elem);
        let fetched = self.store.fetch(&obj, None, &pieces, &spans, &mut [])?;
        let mut out = Vec::new();
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
        }
        Ok((list, out))
    }

    /// Owner side of a peer's `Register`: records where the regions live and gives each its
    /// sequence number (new items consecutive, in request order). A deferred write (with a
    /// token) registered before gets its number back; one whose object is gone gets None.
    /// Anything wrong with a strong item (not ours, unknown, out of bounds) fails the request.
    pub fn register_batch(&self, holder: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        self.register_batch_with(holder, items, true)
    }

    /// [`register_batch`](Self::register_batch); with `durable` false (the strong writes of a
    /// `memory` commit, `PeerRequest::RegisterMemory`) the answer does not wait for the WAL
    /// fsync that makes the region-map rows durable: they are written (visible, and kept by a
    /// kill -9) and fsynced in the background; the numbers stay below the durable high-water
    /// mark (`Metadata::register_regions`), so a crash never reuses one. Items with a token
    /// (deferred writes) always make the registration durable.
    pub fn register_batch_with(
        &self,
        holder: u32,
        items: &[RegisterItem],
        durable: bool,
    ) -> Result<Vec<Option<u64>>> {
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
        let durable = durable || live.iter().any(|(_, _, token)| token.is_some());
        let (got, synced) = self.store.record_registrations(holder, &live, durable)?;
        if !synced {
            // Durable within about one background fsync (and 5 ms), off this request's path.
            self.meta.kick_syncer();
            self.counters.unsynced.fetch_add(1, Ordering::Relaxed);
        }
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

    /// Whether any committed data of `id` (owned here) exists, here or on other holders.
    pub(crate) fn has_data(&self, id: ObjectId) -> bool {
        self.store.holds_any(id)
            || self
                .remote
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(&id)
                .is_some_and(|v| !v.is_empty())
    }

    /// Other servers holding committed data of `id` inside `region`.
    pub(crate) fn remote_holders(&self, id: ObjectId, region: &Region) -> Vec<u32> {
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

    /// Forgets every visible extent of a deleted object, here and in the region map (log
    /// bytes become garbage, also on other holders, which keep their index entries until
    /// compaction exists).
    pub fn forget(&self, id: ObjectId) -> usize {
        self.remote
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        self.store.forget(id)
    }

    /// Where the bytes of `id` are: this server's extents, and at the owner also the regions
    /// other servers hold.
    pub fn extents(&self, id: ObjectId) -> Vec<ExtentInfo> {
        let mut out = self.store.extent_infos(id);
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
                // Known to the holder (`pdcx show` asks it).
                durability: String::new(),
            });
        }
        out.sort_by_key(|e| e.seq);
        out
    }

    pub fn extent_count(&self) -> u64 {
        self.store.extent_count()
    }

    pub fn log_bytes(&self) -> u64 {
        self.store.log_bytes()
    }

    pub fn cache(&self) -> &Cache {
        self.store.cache()
    }

    pub fn log_dir(&self) -> std::path::PathBuf {
        self.store.log_dir()
    }

    /// The log directory as clients on this node open it: absolute (their working directory
    /// is not this server's), without symlinks.
    pub fn plan_dir(&self) -> Result<&str> {
        if let Some(d) = self.plan_dir.get() {
            return Ok(d);
        }
        let dir = self.store.log_dir();
        let abs = std::fs::canonicalize(&dir)
            .map_err(|e| Error::io(&format!("resolve {}", dir.display()), &e))?;
        let s = abs
            .to_str()
            .ok_or_else(|| {
                Error::internal(format!("log directory {} is not UTF-8", abs.display()))
            })?
            .to_owned();
        Ok(self.plan_dir.get_or_init(|| s))
    }
}

/// Bytes [lo, hi) of its extent's payload that each piece needs.
fn piece_spans(pieces: &[(Arc<Extent>, Region)], elem: usize) -> Vec<(u64, u64)> {
    pieces
        .iter()
        .map(|(e, inter)| {
            let (lo, hi) = e.region.span_of(inter);
            (lo * elem as u64, hi * elem as u64)
        })
        .collect()
}

/// What [`Engine::read_plan`] found.
#[derive(Debug)]
pub enum PlanOutcome {
    /// The plan, (segment, st_dev, st_ino) of every segment it names, and (key, path, st_dev,
    /// st_ino) of every file outside the log it names (`ReadPlans::files`).
    Plan(ReadPlan, Vec<(u64, u64, u64)>, Vec<(u64, String, u64, u64)>),
    /// At the owner: other servers hold parts of the region; these all hold some of it.
    Holders(Vec<u32>),
    /// Not plannable (extents on a tier, bytes not committed to the log, too many spans).
    None,
}

/// Average span size from which the server reads a region span by span straight into the
/// output rather than with `DataStore::fetch`'s merged reads and a copy.
const DIRECT_MIN_SPAN: u64 = 64 << 10;

/// Most spans one read plan may have (an N-D read crossing many rows of many extents is
/// served by the server instead: one request per span would cost more than the copy).
const PLAN_MAX_SPANS: usize = 1 << 16;

/// Row-major element index of global point `p` inside box `r` (which contains it).
fn linear_index(r: &Region, p: &[u64]) -> u64 {
    (0..r.ndim()).fold(0u64, |idx, d| idx * r.count[d] + (p[d] - r.offset[d]))
}

/// Appends the log spans copying piece `inter` of extent `e` into the layout of `region`:
/// one per row of the piece, rows contiguous in both the log and the output merged. False
/// when the plan would exceed [`PLAN_MAX_SPANS`].
/// For pieces read by reference: each one's file as a plan names it (key `REF_SEGMENT +
/// seq`, path, st_dev, st_ino) and, by seq, (key, the chunk's file offset, its log location's
/// offset) to rewrite its spans with; None when one cannot be planned (a filtered or edge
/// chunk must be decoded by the server, or the file cannot be stat'ed).
#[allow(clippy::type_complexity)]
fn ref_files(
    refs: &[(Arc<Extent>, Region)],
) -> Option<(Vec<(u64, String, u64, u64)>, HashMap<u64, (u64, u64, u64)>)> {
    use std::os::unix::fs::MetadataExt;
    let mut files = Vec::new();
    let mut remap = HashMap::new();
    for (e, _) in refs {
        let r = e.external.as_ref()?;
        if !r.filters.is_empty() || r.chunk != e.region.count {
            return None;
        }
        let m = std::fs::metadata(&r.path).ok()?;
        let key = crate::datastore::REF_SEGMENT + e.seq;
        files.push((key, r.path.clone(), m.dev(), m.ino()));
        remap.insert(e.seq, (key, r.offset, e.loc.offset));
    }
    Some((files, remap))
}

fn plan_piece(
    e: &Extent,
    inter: &Region,
    region: &Region,
    elem: u64,
    spans: &mut Vec<PlanSpan>,
) -> bool {
    let n = inter.ndim();
    let run = inter.count[n - 1] * elem;
    let mut point = inter.offset.clone();
    loop {
        let src = e.loc.offset + linear_index(&e.region, &point) * elem;
        let dst = linear_index(region, &point) * elem;
        match spans.last_mut() {
            Some(last)
                if last.seq == e.seq
                    && last.segment == e.loc.segment
                    && last.offset + last.len == src
                    && last.dest + last.len == dst =>
            {
                last.len += run
            }
            _ => {
                if spans.len() >= PLAN_MAX_SPANS {
                    return false;
                }
                spans.push(PlanSpan {
                    seq: e.seq,
                    segment: e.loc.segment,
                    offset: src,
                    len: run,
                    dest: dst,
                });
            }
        }
        let mut d = n - 1;
        loop {
            if d == 0 {
                return true;
            }
            d -= 1;
            point[d] += 1;
            if point[d] < inter.end(d) {
                break;
            }
            point[d] = inter.offset[d];
        }
    }
}

/// Whether the pieces together cover every element of `region` (then no fill is needed):
/// exactly for 1-D (the union of intervals); in more dims when one piece is the whole
/// region or the pieces tile it without overlapping ([`tiles`](pdcx_core::region::tiles)).
fn covers(region: &Region, pieces: &[(Arc<Extent>, Region)]) -> bool {
    if pieces.iter().any(|(_, i)| i == region) {
        return true;
    }
    if region.ndim() != 1 {
        return pdcx_core::region::tiles(region, pieces.iter().map(|(_, i)| i));
    }
    let mut iv: Vec<(u64, u64)> = pieces
        .iter()
        .map(|(_, i)| (i.offset[0], i.end(0)))
        .collect();
    iv.sort_unstable();
    let mut reached = region.offset[0];
    for (lo, hi) in iv {
        if lo > reached {
            return false;
        }
        reached = reached.max(hi);
    }
    reached >= region.end(0)
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

/// A set of disjoint 1-D intervals `[start, end)` (start → end), merged on insert.
#[derive(Default)]
struct Coverage(std::collections::BTreeMap<u64, u64>);

impl Coverage {
    /// Whether `[start, end)` lies inside one interval of the set.
    fn contains(&self, start: u64, end: u64) -> bool {
        self.0
            .range(..=start)
            .next_back()
            .is_some_and(|(_, &e)| e >= end)
    }

    fn insert(&mut self, mut start: u64, mut end: u64) {
        if let Some((&s, &e)) = self.0.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
            }
        }
        let overlapping: Vec<u64> = self.0.range(start..=end).map(|(&s, _)| s).collect();
        for s in overlapping {
            if let Some(e) = self.0.remove(&s) {
                end = end.max(e);
            }
        }
        self.0.insert(start, end);
    }
}

#[cfg(test)]
mod coverage_tests {
    use super::Coverage;

    #[test]
    fn intervals_merge_and_cover() {
        let mut c = Coverage::default();
        c.insert(10, 20);
        c.insert(30, 40);
        assert!(c.contains(12, 20) && !c.contains(15, 25) && !c.contains(0, 5));
        c.insert(20, 30);
        assert!(c.contains(10, 40), "adjacent intervals merge");
        c.insert(0, 100);
        assert!(c.contains(0, 100) && c.0.len() == 1);
        c.insert(200, 300);
        c.insert(150, 250);
        assert!(c.contains(150, 300) && !c.contains(90, 160));
    }
}
