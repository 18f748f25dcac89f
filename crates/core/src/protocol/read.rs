//! The read family: reads of regions (whole, strided or by points; over TCP or into shared
//! memory), and the plans same-node clients use to read the server's log themselves.

use super::handshake::ShmLoc;
use crate::model::ObjectId;
use crate::region::Region;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadItem {
    pub id: ObjectId,
    pub region: Region,
}

/// How a `Read` is answered.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ReadOpts {
    /// Sent to a data server the owner named as the only holder of the regions: it answers
    /// from its own extents (fill value elsewhere). Without, the read goes to the owner, which
    /// merges every holder's data.
    pub held: bool,
    /// Item `i` is written into the attached arena at `shm[i]` instead of the reply payload.
    pub shm: Option<Vec<ShmLoc>>,
    /// Which elements of the items' regions are read.
    pub select: Selection,
    /// Read the objects as of this version (their writes numbered up to it) instead of their
    /// latest data; at the owner, whole regions only. Refused for a version compaction
    /// dropped (its retention did not keep it).
    #[serde(default)]
    pub version: Option<u64>,
}

/// Which elements a read selects.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Selection {
    /// Every element of each item's region, C order.
    #[default]
    Region,
    /// One item, at its owner: the elements of its region taken every `step[d]` in each dim
    /// (the region is the bounding box), C order, so only the selected bytes travel.
    Strided(Vec<u64>),
    /// One item, at its owner: the elements at these coordinates (ndim u64 per point, any
    /// order, repeats allowed), in the order given. The item's region is not used.
    Points(Vec<u64>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtentInfo {
    pub seq: u64,
    pub region: Region,
    pub segment: u64,
    pub offset: u64,
    pub len: u64,
    pub cached: bool,
    /// Server rank whose log holds the bytes. `segment`/`offset`/`len` are only known to
    /// that server; the owner lists other holders' extents with them set to 0.
    #[serde(default)]
    pub holder: u32,
    /// Where the holder keeps it: "log", a tier name, or "log+TIER" while both hold a copy.
    #[serde(default)]
    pub tier: String,
    /// Bytes as stored on the tier (after the codec); `len` is the raw size.
    #[serde(default)]
    pub stored_len: u64,
    #[serde(default)]
    pub codec: String,
    /// The shard blob holding this extent with others (`[shard]` config); empty when the
    /// extent has its own blob or none yet.
    #[serde(default)]
    pub shard: String,
    /// The durability this extent has reached at its holder: "memory" (visible, not yet
    /// fsynced), "local" (log fsynced, or a copy on a node-local tier), "remote" (on a tier
    /// that survives the loss of the node, its home recorded durably).
    #[serde(default)]
    pub durability: String,
}

/// Answer to `PiecePlan`: like [`ReadPlans`] for one region, by whole extent instead of span.
/// Fill first when `fill` is set, then paint each piece in order (sequence order: where
/// writes overlap the later one wins).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PiecePlans {
    /// Absolute path of the server's log directory.
    pub dir: String,
    /// (segment, st_dev, st_ino) of each segment file a piece names.
    pub segments: Vec<(u64, u64, u64)>,
    /// Bytes per element of the object.
    pub elem: u64,
    pub fill: Option<Vec<u8>>,
    pub pieces: Vec<PlanPiece>,
    /// At the owner, when other servers hold parts of the region: every server holding some
    /// (the owner too when it does); `pieces` is then empty.
    pub holders: Vec<u32>,
}

/// One extent whole: the elements of `region` in C order at byte `offset` of log segment
/// `segment`, written by write `seq`; `crc`: the crc32c of those bytes (the record's payload
/// checksum), which a client checks before it returns any of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanPiece {
    pub seq: u64,
    pub segment: u64,
    pub offset: u64,
    pub region: Region,
    pub crc: u32,
}

/// Answer to `ReadPlan`: the server's log directory, the identity of every segment file a
/// plan names (so a client never reads a different file that came to have the same path), and
/// one plan per item in request order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadPlans {
    /// Absolute path of the server's log directory; segment `n` is `seg-{n:08}.log` in it.
    pub dir: String,
    /// (segment, st_dev, st_ino) of each segment file named below.
    pub segments: Vec<(u64, u64, u64)>,
    pub plans: Vec<Option<ReadPlan>>,
    /// Per item without a plan at the owner because other servers hold parts of it: every
    /// server holding committed data of the region (the owner too when it does), so a client
    /// on their node can ask each for its part (`held`) and merge the spans by `seq`. Empty
    /// otherwise.
    pub holders: Vec<Vec<u32>>,
    /// Files outside the log that spans name (objects imported by reference): (the
    /// `segment` key spans use for it, absolute path, st_dev, st_ino).
    pub files: Vec<(u64, String, u64, u64)>,
}

/// How to assemble one item's region (`len` bytes, C order) from the log: fill first when
/// `fill` is set (element bytes, repeated), then copy each span in order. Spans are in the
/// writes' sequence order, so where writes overlap the later span wins, exactly as in the
/// server's own read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadPlan {
    pub len: u64,
    pub fill: Option<Vec<u8>>,
    pub spans: Vec<PlanSpan>,
    /// (segment, payload offset, payload length, payload crc32c) of every log record a span
    /// reads from (spans of files outside the log excepted): a client checks each one whole
    /// before it returns bytes of it.
    pub records: Vec<(u64, u64, u64, u32)>,
}

/// `len` bytes at byte `offset` of log segment `segment`, to byte `dest` of the item's output;
/// `seq`: the sequence number of the write it comes from (orders spans of several holders).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanSpan {
    pub seq: u64,
    pub segment: u64,
    pub offset: u64,
    pub len: u64,
    pub dest: u64,
}

/// Replies of the read family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReadResponse {
    /// The payload holds each item's bytes back to back, in request order (nothing when they
    /// went into shared memory).
    Data,
    Plans(ReadPlans),
    PiecePlans(Option<PiecePlans>),
    Located(Vec<Vec<u32>>),
    Extents(Vec<ExtentInfo>),
    Versions(VersionList),
}

/// Answer to `Versions`: an object's readable versions (the write numbers still held, not
/// inside a dropped range: each reads exactly as it did) and the ranges compaction dropped
/// (`from <= v < to`, a read refused). Named versions are its `pdcx.version.*` tags.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct VersionList {
    pub readable: Vec<u64>,
    pub dropped: Vec<(u64, u64)>,
    /// For a byte stream: each readable version's size in bytes (a version of a stream is
    /// one of its sealed versions, numbered by the newest write it holds). Empty otherwise.
    pub sizes: Vec<u64>,
}

family! {
    /// Reads and read planning.
    Read: ReadRequest => ReadResponse;

    /// The items' bytes (at the owner, or with `opts.held` at a holder), as `opts` asks.
    Read { items: Vec<ReadItem>, opts: ReadOpts } => Data;
    /// Where the bytes of each item's region are in this server's segment log, so a client on
    /// the same node can `pread` them straight into its own buffer (`Read` semantics, or with
    /// `held` those of a held read). An item the server cannot plan (other holders, extents
    /// on a tier, bytes not yet committed to the log) gets None and is read the usual way.
    PlanRead { items: Vec<ReadItem>, held: bool } => Plans(ReadPlans);
    /// Owner, for a client on its node that reads `region` every `step[d]` elements: where
    /// every extent under `region` of `id` lies whole in the log, so the client gathers the
    /// selection from the mapped segments itself, touching only the selected bytes. When
    /// other servers hold parts of the region the answer names them all (`holders`) and the
    /// client asks each with `held` for its own pieces. None when the region cannot be read
    /// so (extents not in the committed log, a stream's base).
    PiecePlan { id: ObjectId, region: Region, step: Vec<u64>, held: bool } => PiecePlans(Option<PiecePlans>);
    /// Asks an object's owner which servers hold data of each region (read planning).
    Locate { items: Vec<ReadItem> } => Located(Vec<Vec<u32>>);
    /// The extents of `id` this server knows.
    Extents { id: ObjectId } => Extents(Vec<ExtentInfo>);
    /// The owner's list of the versions of `id` a `Read` with `opts.version` can read.
    Versions { id: ObjectId } => Versions(VersionList);
}
