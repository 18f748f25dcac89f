//! The admin family: server status, shutdown, and moving data between tiers.

use crate::model::ObjectId;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerStats {
    pub rank: u32,
    pub size: u32,
    pub pid: u32,
    pub addr: String,
    pub dir: String,
    pub uptime_s: f64,
    pub objects: u64,
    pub containers: u64,
    pub extents: u64,
    pub log_bytes: u64,
    pub cache_bytes: u64,
    pub cache_capacity: u64,
    pub connections: u64,
    /// Bytes of read replies this server has sent since it started.
    pub read_bytes: u64,
    /// Bytes staged from or read into clients' shared-memory arenas since it started.
    #[serde(default)]
    pub shm_bytes: u64,
    /// Object lookups (open by name, metadata by id) this server answered as the owner.
    #[serde(default)]
    pub lookups: u64,
    /// Of those, lookups other servers forwarded for their clients (`PeerRequest::Lookup`).
    #[serde(default)]
    pub lookups_forwarded: u64,
    /// Client requests those forwarded lookups stood for.
    #[serde(default)]
    pub lookups_forwarded_clients: u64,
    /// Lookups this server forwarded to other owners for its clients.
    #[serde(default)]
    pub lookups_relayed: u64,
    /// Client lookups answered by joining another client's forwarded lookup.
    #[serde(default)]
    pub lookups_coalesced: u64,
    /// Register requests (`PeerRequest::Register`) this server answered as owner, and the
    /// regions they carried.
    #[serde(default)]
    pub registers: u64,
    #[serde(default)]
    pub registered_regions: u64,
    /// Register requests this server sent to owners as a holder.
    #[serde(default)]
    pub registers_sent: u64,
    /// Relaxed writes held here: durable and acknowledged, not registered with the owner yet.
    #[serde(default)]
    pub unregistered: u64,
    /// The tiers behind the log (empty when none are configured).
    #[serde(default)]
    pub tiers: Vec<TierStat>,
    /// Committed extents the flusher has not placed on a tier yet (bytes, count): the flush queue.
    #[serde(default)]
    pub flush_pending_bytes: u64,
    #[serde(default)]
    pub flush_pending_extents: u64,
    /// Raw bytes the flusher has copied to tiers since start, and log bytes it retired.
    #[serde(default)]
    pub flushed_bytes: u64,
    #[serde(default)]
    pub retired_bytes: u64,
    /// The flusher's last tier error, if the last attempt failed.
    #[serde(default)]
    pub flush_error: Option<String>,
    /// Connections (clients, and other servers on its node) accepted on the server's
    /// Unix-domain listener since start.
    #[serde(default)]
    pub unix_connections: u64,
    /// Bytes of writes whose payload same-node clients wrote into this server's log
    /// themselves (`ReserveWrite`) since start.
    #[serde(default)]
    pub direct_write_bytes: u64,
    /// Parts of S3 home copies this server uploaded since start (as the leader of a
    /// version's upload, or for another leader).
    #[serde(default)]
    pub home_parts_uploaded: u64,
    /// Bytes of object data value queries read on this server since start, and bytes they
    /// skipped because per-extent statistics showed nothing there could match.
    #[serde(default)]
    pub query_scanned_bytes: u64,
    #[serde(default)]
    pub query_skipped_bytes: u64,
    /// Bytes of the log, and of them the bytes some read still needs (the rest is garbage
    /// compaction frees).
    #[serde(default)]
    pub log_live_bytes: u64,
    /// What compaction has done since start.
    #[serde(default)]
    pub compacted: CompactReport,
    /// The metadata shard's size on disk (database pages and WAL).
    #[serde(default)]
    pub meta_bytes: u64,
    /// Strided reads, and reads of many short rows, this server planned by extent for a
    /// same-node client, which gathered the selection from the mapped log itself
    /// (`PiecePlan`).
    #[serde(default)]
    pub piece_plans: u64,
}

/// What a flush did and what is left.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlushReport {
    pub extents: u64,
    /// Raw bytes homed, and the bytes stored for them (after codecs).
    pub bytes: u64,
    pub stored_bytes: u64,
    /// Extents not yet placed on a tier (and their raw bytes).
    pub pending_extents: u64,
    pub pending_bytes: u64,
    pub retired_segments: u64,
    /// Why something could not be flushed (a tier error); the data stays in the log.
    pub error: Option<String>,
}

/// One tier's usage and traffic, as a server sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierStat {
    pub name: String,
    pub kind: String,
    pub used: u64,
    pub capacity: Option<u64>,
    pub put_bytes: u64,
    pub get_bytes: u64,
    /// Measured write bandwidth (bytes/s), 0 until measured.
    pub put_bandwidth: f64,
    /// Stored bytes of this server's extents homed there (what `used` holds beyond the
    /// servers' live bytes is garbage: blobs or parts of packed blobs no extent needs).
    #[serde(default)]
    pub live: u64,
}

/// Extents moved or recorded, and the raw bytes they stand for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moved {
    pub extents: u64,
    pub bytes: u64,
}

/// What a compaction pass did (`pdcx compact`, the background compactor).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompactReport {
    /// Writes dropped because newer ones hide them (or their object was deleted).
    pub dropped_writes: u64,
    /// Segments chosen for compaction (live fraction below the threshold).
    pub victims: u64,
    /// Live extents copied out of them, and their bytes.
    pub moved_extents: u64,
    pub moved_bytes: u64,
    /// Segments retired, and their bytes (space given back to the file system).
    pub retired_segments: u64,
    pub freed_bytes: u64,
    /// The log's size and its live bytes after the pass.
    pub log_bytes: u64,
    pub live_bytes: u64,
    /// Rows other servers' tables forgot because this server no longer needs them (the region
    /// map rows of writes it dropped, settled deferred-write tokens).
    pub forgotten_rows: u64,
    /// Bytes the metadata shard gave back to the file system.
    pub meta_freed_bytes: u64,
    pub seconds: f64,
}

/// Replies of the admin family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AdminResponse {
    Done,
    Stats(Box<ServerStats>),
    Flushed(FlushReport),
    Migrated(Moved),
    Compacted(CompactReport),
}

family! {
    /// One server's status and maintenance.
    Admin: AdminRequest => AdminResponse;

    Stats {} => Stats(Box<ServerStats>);
    Shutdown {} => Done;
    /// Flushes committed extents to their home tiers now. With `wait`, returns after passes
    /// until nothing is pending or a tier fails; without, only wakes the background flusher
    /// (answered with the current queue).
    Flush { wait: bool } => Flushed(FlushReport);
    /// Moves every extent of `id` this server holds to tier `tier`.
    Migrate { id: ObjectId, tier: String } => Migrated(Moved);
    /// Runs a compaction pass now (`pdcx compact`): drops hidden writes, copies the live
    /// extents out of log segments whose live fraction is below `threshold` (the configured
    /// one when None; 1.0 compacts every segment with any garbage), retires what is left.
    Compact { threshold: Option<f64> } => Compacted(CompactReport);
}

impl AdminRequest {
    /// Whether only the admin role may send it: stopping a server, moving data between
    /// tiers and compacting (it copies data and takes disk bandwidth) change the deployment
    /// for everyone. Status and a flush (which moves committed
    /// data where the deployment's rules already send it) are for every client.
    pub fn needs_admin(&self) -> bool {
        matches!(
            self,
            AdminRequest::Shutdown(_) | AdminRequest::Migrate(_) | AdminRequest::Compact(_)
        )
    }
}
