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

mod adopted;
pub mod analysis;
mod crossdrop;
mod drop;
mod orphans;
mod owner;
mod plan;
mod read;
mod release;
pub mod retention;
mod streamversions;
mod write;

pub use crate::datastore::{ExtentRanges, Staged};
pub use plan::PlanOutcome;

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
    /// Which of writes `seqs` of `id` `holder` holds, made durable there first.
    fn confirm_held(&self, holder: u32, id: ObjectId, seqs: &[u64]) -> Result<Vec<u64>> {
        let _ = (id, seqs);
        Err(Error::invalid(format!(
            "server {holder} cannot be asked about its writes here (no peer connections)"
        )))
    }
    /// The tags of containers `names`, which hash to server `owner` (None: no such
    /// container); their retention policy applies to their objects.
    fn container_tags(
        &self,
        owner: u32,
        names: &[String],
    ) -> Result<Vec<Option<pdcx_core::model::Tags>>> {
        let _ = names;
        Err(Error::invalid(format!(
            "server {owner} cannot be asked for container tags here (no peer connections)"
        )))
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
    /// Tells `owner` this server is dropping `writes` of its objects, which breaks the
    /// versions `gone`, and that its deferred-write tokens below `tokens_below` are settled;
    /// how many rows the owner forgot.
    fn released(
        &self,
        owner: u32,
        writes: &[(ObjectId, Vec<u64>)],
        gone: &[(ObjectId, u64, u64)],
        tokens_below: u64,
    ) -> Result<u64> {
        let _ = (writes, gone, tokens_below);
        Err(Error::invalid(format!(
            "server {owner} cannot be told of released writes here (no peer connections)"
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
    /// Objects that got a write held here since compaction last looked for hidden ones
    /// (`drop.rs`); None: every object (nothing looked yet since start).
    touched: std::sync::Mutex<Option<HashSet<ObjectId>>>,
    /// Holder side: what the owners are yet to be told they may forget (`release.rs`).
    releases: std::sync::Mutex<release::Releases>,
    /// Holder side: where the last pass stopped asking owners about their objects
    /// (`orphans.rs`).
    orphan_cursor: std::sync::Mutex<ObjectId>,
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

impl crate::flusher::FlushHost for Engine {
    fn store(&self) -> &DataStore {
        &self.store
    }

    fn rank(&self) -> u32 {
        self.rank
    }

    fn owns(&self, id: ObjectId) -> bool {
        self.meta.owns(id)
    }

    fn tiering(&self) -> Option<&Arc<Tiering>> {
        self.tiering.as_ref()
    }

    fn object_meta(&self, id: ObjectId, fresh: bool) -> Result<ObjectMeta> {
        Engine::object_meta(self, id, fresh)
    }

    fn shard_call(
        &self,
        to: u32,
        req: &pdcx_core::protocol::PeerRequest,
    ) -> Result<(pdcx_core::protocol::PeerResponse, Vec<u8>)> {
        self.peers()?.shard_call(to, req)
    }
}

impl Engine {
    /// This engine's flusher (flush passes, migration, `remote` commits, tier statistics).
    pub fn flusher(&self) -> crate::flusher::Flusher<'_> {
        crate::flusher::Flusher::new(self)
    }
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
            touched: std::sync::Mutex::new(None),
            releases: Default::default(),
            orphan_cursor: Default::default(),
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
        if self.meta.owner_of(id) == self.rank {
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
        let mut obj = self.object_meta(id, false)?;
        // An object created without a type holds no data until its owner gives it one; a
        // foreign object's cached copy may predate that, so it is asked once more.
        if obj.is_untyped() && self.meta.owner_of(id) != self.rank {
            obj = self.object_meta(id, true)?;
        }
        if obj.is_untyped() {
            return Err(obj.untyped_error());
        }
        match region.check_within(&obj.dims) {
            Ok(()) => Ok(obj),
            Err(_) if self.meta.owner_of(id) != self.rank => {
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
