//! The peer family: requests only servers send each other.

use super::catalog::ObjectKey;
use crate::error::Error;
use crate::model::ObjectId;
use crate::model::ObjectMeta;
use crate::region::Region;
use serde::{Deserialize, Serialize};

/// One region a holder registers with the object's owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegisterItem {
    pub id: ObjectId,
    pub region: Region,
    /// For a deferred write: where its bytes are in the holder's log (segment, offset), which
    /// never names another write, so the owner recognises a registration it already made.
    pub token: Option<(u64, u64)>,
}

/// One server's committed pieces of a region: (seq, piece) and their bytes back to back.
pub type Pieces = (Vec<(u64, Region)>, Vec<u8>);

/// Requests only servers send each other, on a connection whose `Hello` named the sender's
/// rank (`Role::Peer`). The sender's rank is the connection's, never a field a request could
/// get wrong. Answered with `PeerResponse`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PeerRequest {
    /// The metadata of an object this server owns (a holder checking a write against it).
    /// Answered with `Object`.
    Object { id: ObjectId },
    /// A lookup a node-local server forwards to the object's owner for `riders` (> 0) of its
    /// clients' `LookupObject`s. The owner answers it itself (`Object`), never forwards it.
    Lookup { key: ObjectKey, riders: u32 },
    /// The sender (a holder) committed these regions of objects this server owns: record them
    /// in the region map and answer with each item's sequence number (`Seqs`), which orders it
    /// against every other write of the same object. Items with a `token` are deferred
    /// (relaxed) writes: registering one twice returns its first number, and one whose object
    /// no longer exists is answered with None.
    Register { items: Vec<RegisterItem> },
    /// This server's committed pieces of `region` of an object another server owns, each with
    /// its sequence number, so the owner can merge several holders' data. Answered with
    /// `Pieces`.
    ReadPieces { id: ObjectId, region: Region },
    /// `Register` of strong writes waited at `memory` durability (no item has a token): the
    /// owner records them as `Register` does (region map in its WAL, visible at once) but
    /// answers without waiting for its WAL fsync. Its numbers stay below a durable high-water
    /// mark (reserved in blocks, fsynced once per block), so none is reused after a crash.
    /// Items with a token are registered durably, as by `Register`. Answered with `Seqs`.
    RegisterMemory { items: Vec<RegisterItem> },
    /// The leader of a version's S3 upload (the object's owner) asks the server holding most
    /// of part `part` to upload it: read `region` of the version (writes below `seq_below`;
    /// `holders` are the other servers holding parts of it) and put it as that part of
    /// multipart upload `upload_id` of `s3://bucket/key`. Answered with `PartUploaded`.
    UploadPart(UploadPart),
    /// The owner tells a holder that its extents `seqs` of `id` are shadowed in every version
    /// still to be read: drop them and free their log space. Answered with
    /// `Dropped`.
    DropExtents { id: ObjectId, seqs: Vec<u64> },
    // Group shards (`[shard] servers`), after "object sharding across storage layers".
    /// The leader of the sender's shard group asks for this server's extents that wait for a
    /// group shard (no home yet; first placement choice a tier every member reaches), up to
    /// about `max_bytes` stored bytes, each encoded as this server would store it. Answered with
    /// `ShardCandidates`: with `bytes`, the encoded bytes back to back in the payload; without,
    /// this server keeps them for `ShardBytes` / `UploadShardPart` of the same pass.
    ShardCandidates { max_bytes: u64, bytes: bool },
    /// The leader put a group shard holding these extents of this server: record their homes
    /// durably and publish them (then their log segments can retire). Answered with
    /// `ShardRecorded`.
    RecordShardHomes { homes: Vec<ShardHome> },
    /// Which group shard blobs whose key starts with `prefix` this server's homes reference,
    /// with the stored bytes they use in each. Answered with `ShardRefs`.
    ShardRefs { prefix: String },
    /// The sender leads these group shards ((tier, key)), now mostly garbage: move this
    /// server's extents out of them, each to a blob of its own on the same tier (the shard
    /// goes with its last reference). Answered with `ShardsRepacked`.
    RepackShards { shards: Vec<(String, String)> },
    /// A member's last reference to group shard `key` on tier `tier` went: the leader deletes
    /// the blob once no member references it. Answered with `ShardReleased`.
    ShardRelease { tier: String, key: String },
    /// The encoded bytes of these extents offered by the last `ShardCandidates` (without
    /// bytes), back to back in the payload. Answered with `ShardBytes`.
    ShardBytes { extents: Vec<(ObjectId, u64)> },
    /// Write one part of the leader's group shard from this server's extents offered by the
    /// last `ShardCandidates`: on an S3 tier a part of the leader's multipart upload, on a
    /// shared directory the bytes at their place in the leader's temporary blob, made
    /// durable. Answered with `PartUploaded`.
    UploadShardPart(ShardPart),
    /// The owner's whole answer for `region` of its object `id`, as a client's `Read` gets it
    /// (a value query over objects of several owners). Answered with `Pieces` holding one
    /// piece, the region.
    ReadOwned { id: ObjectId, region: Region },
    /// A holder's extents of `id` inside `region`: each one's part of the region and its
    /// (min, max) if known. Answered with `ExtentRanges`.
    ExtentRanges { id: ObjectId, region: Region },
    /// The sender (a holder) is about to drop `writes` ((object, seqs) of objects this server
    /// owns; newer writes of its own hide them): record `gone` ((object, from, to): versions
    /// `from <= v < to` may miss one of them) durably before answering, so a read of such a
    /// version is refused; their region-map rows go. Every deferred-write token of the sender
    /// whose segment field is below `tokens_below` can never be registered again (that log
    /// segment is gone, or belongs to an older incarnation of its log), so those go too.
    /// Answered with `Dropped` (rows forgotten).
    Released {
        writes: Vec<(ObjectId, Vec<u64>)>,
        gone: Vec<(ObjectId, u64, u64)>,
        tokens_below: u64,
    },
    /// The tags of these containers, which hash to this server (a holder reading their
    /// retention policy, `engine/retention.rs`). Answered with `ContainerTags`.
    ContainerTags { names: Vec<String> },
    /// The owner is about to drop writes of `id` that these writes (`seqs`, held here) hide:
    /// make them durable (a log sync) and answer with those held here (`Held`).
    ConfirmHeld { id: ObjectId, seqs: Vec<u64> },
}

/// See `PeerRequest::UploadShardPart`: bytes [`skip`, `skip + len`) of `extents`' encoded
/// bytes back to back, zeros past their end (padding up to S3's smallest part), for group
/// shard `key` on tier `tier`. On S3 they are part `part` of multipart upload `upload_id`; on
/// a shared directory they are written at byte `at` of the leader's temporary blob
/// `upload_id` (a name `PartWriter::begin` gave).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardPart {
    pub tier: String,
    pub key: String,
    pub upload_id: String,
    pub part: u32,
    pub extents: Vec<(ObjectId, u64)>,
    pub skip: u64,
    pub len: u64,
    pub at: u64,
}

/// One extent a member offers its group's leader (`PeerRequest::ShardCandidates`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardCandidate {
    pub id: ObjectId,
    pub seq: u64,
    /// The extent's raw bytes (quota accounting) and its stored (encoded) length in the payload.
    pub raw_len: u64,
    pub stored_len: u64,
    /// The codec the stored bytes carry.
    pub codec: String,
    /// Tier names to try in order: the member's placement choice, then spill targets.
    pub order: Vec<String>,
}

/// A member extent's place in a group shard (`PeerRequest::RecordShardHomes`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardHome {
    pub id: ObjectId,
    pub seq: u64,
    pub tier: String,
    pub key: String,
    pub offset: u64,
    pub stored_len: u64,
    pub codec: String,
}

/// See `PeerRequest::UploadPart`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UploadPart {
    pub id: ObjectId,
    pub seq_below: u64,
    pub region: Region,
    pub holders: Vec<u32>,
    pub bucket: String,
    pub key: String,
    pub upload_id: String,
    pub part: u32,
}

impl PeerRequest {
    /// The request's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            PeerRequest::Object { .. } => "Object",
            PeerRequest::Lookup { .. } => "Lookup",
            PeerRequest::Register { .. } => "Register",
            PeerRequest::ReadPieces { .. } => "ReadPieces",
            PeerRequest::ReadOwned { .. } => "ReadOwned",
            PeerRequest::ExtentRanges { .. } => "ExtentRanges",
            PeerRequest::RegisterMemory { .. } => "RegisterMemory",
            PeerRequest::UploadPart(_) => "UploadPart",
            PeerRequest::DropExtents { .. } => "DropExtents",
            PeerRequest::ShardCandidates { .. } => "ShardCandidates",
            PeerRequest::RecordShardHomes { .. } => "RecordShardHomes",
            PeerRequest::ShardRefs { .. } => "ShardRefs",
            PeerRequest::ShardRelease { .. } => "ShardRelease",
            PeerRequest::RepackShards { .. } => "RepackShards",
            PeerRequest::ShardBytes { .. } => "ShardBytes",
            PeerRequest::UploadShardPart(_) => "UploadShardPart",
            PeerRequest::Released { .. } => "Released",
            PeerRequest::ContainerTags { .. } => "ContainerTags",
            PeerRequest::ConfirmHeld { .. } => "ConfirmHeld",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PeerResponse {
    Object(ObjectMeta),
    /// Answer to `Register`: each item's sequence number, in request order.
    Seqs(Vec<Option<u64>>),
    /// Answer to `ReadPieces`: the payload holds each piece's elements back to back.
    Pieces(Vec<(u64, Region)>),
    Error(Error),
    /// Answer to `UploadPart`: the part's ETag, for completing the upload.
    PartUploaded {
        etag: String,
    },
    /// Answer to `DropExtents`: how many were dropped.
    Dropped {
        count: u64,
    },
    /// Answer to `ShardCandidates`; the payload holds their stored bytes back to back. `more`:
    /// extents still waiting beyond `max_bytes`.
    ShardCandidates {
        list: Vec<ShardCandidate>,
        more: u64,
    },
    /// Answer to `RecordShardHomes`: how many homes were recorded (extents gone or homed
    /// meanwhile are skipped).
    ShardRecorded {
        count: u64,
    },
    /// Answer to `ShardRefs`: (tier, key, stored bytes of this server's extents in it) of
    /// every referenced group shard under the prefix.
    ShardRefs(Vec<(String, String, u64)>),
    /// Answer to `RepackShards`: extents moved out, and their stored bytes.
    ShardsRepacked {
        extents: u64,
        bytes: u64,
    },
    /// Answer to `ShardRelease` (the check itself happens at the leader's next flush pass).
    ShardReleased,
    /// Answer to `ShardBytes`; the payload holds the bytes.
    ShardBytes,
    /// Answer to `ExtentRanges`.
    ExtentRanges(Vec<(Region, Option<(f64, f64)>)>),
    /// Answer to `ContainerTags`: each container's tags in request order (None: no such
    /// container).
    ContainerTags(Vec<Option<crate::model::Tags>>),
    /// Answer to `ConfirmHeld`: the writes held here, durably.
    Held(Vec<u64>),
}
