//! The write family: a write is staged (its bytes shipped, or reserved in the log for the
//! client to write itself), then committed; nothing is visible before its commit.

use super::handshake::ShmLoc;
use crate::model::ObjectId;
use crate::region::Region;
use serde::{Deserialize, Serialize};

/// How durable a waited write is when `wait` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Durability {
    /// Visible, held by the server; lost if the server process dies before its next sync.
    Memory,
    /// Also fsynced in the server's node-local log under a committed manifest.
    #[default]
    Local,
    /// Also on the object's home tier (a shared directory or S3, a durable tier the
    /// placement picks) with its home recorded durably: survives the loss of the node.
    Remote,
}

/// When the writes of an object become visible to other clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum Consistency {
    /// Visible when `wait` returns (the data server registers the write with the owner first).
    #[default]
    Strong,
    /// Durable when `wait` returns; visible once the data server has registered it with the
    /// object's owner: after `expected_writes` writes of the object (0: no count), at the
    /// next sync (object close / flush), or on the server's timer.
    Relaxed { expected_writes: u64 },
}

/// One write in a `Stage` request; its `len` bytes follow in the payload, in request order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageItem {
    pub txn: u64,
    pub id: ObjectId,
    pub region: Region,
    pub len: u64,
}

/// How a commit makes its writes visible and durable.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CommitOpts {
    pub durability: Durability,
    /// `Relaxed`: the writes are durable and acknowledged without waiting for their owners;
    /// registering them in the owners' region maps (what makes them visible) is deferred and
    /// batched. The server registers an object's deferred writes once it holds
    /// `expected_writes` of them (0: no count), at `SyncObjects`, on its timer and at
    /// shutdown.
    pub consistency: Consistency,
    /// Empty, or one per txn: the payload checksum of a write reserved without one
    /// (`Reserve` with `crcs: None`; ignored for the others). Such a write committed without
    /// its checksum is refused.
    pub checksums: Vec<u32>,
    /// After the commit: the log synced, then a version of a byte stream sealed (`Seal`
    /// with `sync_log`), in the same round trip. If the commit fails, nothing is sealed.
    pub seal: Option<SealAt>,
}

impl CommitOpts {
    /// A strong commit at `durability`.
    pub fn at(durability: Durability) -> CommitOpts {
        CommitOpts {
            durability,
            ..CommitOpts::default()
        }
    }
}

/// The byte stream to seal and where its version goes (see `stream::Seal`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealAt {
    pub id: ObjectId,
    pub home: String,
}

/// Answer to `Reserve`: where each item's payload goes, in request order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reservations {
    /// Absolute path of the server's log directory; segment `n` is `seg-{n:08}.log` in it.
    pub dir: String,
    /// Per item: (segment, st_dev, st_ino, payload offset). The client writes only into a
    /// file that has this device and inode, so never into another file at the same path.
    pub spans: Vec<(u64, u64, u64, u64)>,
}

/// Answer to `Commit`: writes committed, and with `CommitOpts::seal` the version's epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Committed {
    pub count: u64,
    pub epoch: Option<u64>,
}

/// Replies of the write family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum WriteResponse {
    Done,
    Staged(u64),
    Reserved(Reservations),
    Committed(Committed),
}

family! {
    /// Writes and their consistency points.
    Write: WriteRequest => WriteResponse;

    /// Ships write data: item `i`'s `len` bytes are in the frame payload (in item order) or,
    /// with `shm`, in the attached arena at `shm[i]` (the frame then carries no payload).
    /// Nothing becomes visible until a commit names the txn; with `commit` (no checksums, no
    /// seal) the items are committed in the same message, before the answer. If an item fails
    /// to stage, none of them stays staged and nothing is committed. Answered with the number
    /// of items staged.
    Stage {
        items: Vec<StageItem>,
        shm: Option<Vec<ShmLoc>>,
        commit: Option<CommitOpts>,
    } => Staged(u64);
    /// For a client on this server's node that writes each item's payload into the log
    /// itself: the server checks each item as a stage, writes its record header (`len` bytes
    /// with checksum `crcs[i]`) and reserves room for the payload. The client then `pwrite`s
    /// the payload there, straight from its buffer (the one copy), before it commits the
    /// items by their `txn` as usual. A payload that does not match its checksum ruins only
    /// its own write (reads and recovery refuse it). Without `crcs` the client computes each
    /// checksum as it writes and sends them with the commit (`CommitOpts::checksums`); until
    /// then the record's header holds a placeholder, so a write never committed is skipped
    /// by recovery as damaged.
    Reserve {
        items: Vec<StageItem>,
        crcs: Option<Vec<u32>>,
    } => Reserved(Reservations);
    /// The consistency point: makes the named staged writes visible, in this order.
    Commit { txns: Vec<u64>, opts: CommitOpts } => Committed(Committed);
    /// The consistency point of relaxed writes: this server registers its deferred writes of
    /// these objects (of every object when empty) with their owners before answering.
    SyncObjects { ids: Vec<ObjectId> } => Done;
    /// This server: makes every write committed here durable on its node (one fdatasync of
    /// the log and of the metadata WAL). A client's consistency point after `memory` writes.
    SyncLog {} => Done;
}
