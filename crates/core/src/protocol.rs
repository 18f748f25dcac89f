//! The wire protocol. Every frame is a fixed 32-byte header, a bincode body of at most
//! `MAX_BODY` bytes, then `payload_len` bytes of bulk data (array elements), so bulk data is
//! never re-encoded and a receiver can read it straight into its destination buffer.
//!
//! Header (little-endian): magic "PDCX" | version u16 | kind u16 | flags u32 | body_len u32 |
//! request_id u64 | payload_len u64. The first six bytes (magic and version) keep this place in
//! every version, so both sides can always tell which version the other speaks.
//!
//! Handshake: the server sends a `Challenge` frame (a random nonce); the connecting side
//! answers with a `Hello` frame: its role (a client, or the server of rank N) and
//! HMAC-SHA256(deployment secret, role and nonce); the server answers with a `Welcome` frame
//! (its rank and size, or why it refused). Anything else is refused.
//!
//! Two request families follow, one per role: a client sends `Request` frames (answered with
//! `Response`), a server sends the other servers `PeerRequest` frames (answered with
//! `PeerResponse`): registering regions with their owner, reading pieces, relayed lookups. A
//! connection serves only its own role's family; the other is refused with an error reply.

use crate::error::{Error, ErrorKind, Result};
use crate::model::{ContainerInfo, ObjectId, ObjectMeta, Tags};
use crate::query::Condition;
use crate::region::Region;
use crate::Dtype;
use bincode::Options;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

pub const MAGIC: [u8; 4] = *b"PDCX";
/// Changes with every change of the wire format (frames, handshake or any body).
/// 2: client and peer request families, role in the handshake, `Register` removed.
pub const VERSION: u16 = 2;
pub const HEADER_LEN: usize = 32;
pub const MAX_BODY: u32 = 64 << 20;
pub const NONCE_LEN: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum FrameKind {
    Challenge = 1,
    Hello = 2,
    Welcome = 3,
    Request = 4,
    Response = 5,
    PeerRequest = 6,
    PeerResponse = 7,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: FrameKind,
    pub flags: u32,
    pub body_len: u32,
    pub request_id: u64,
    pub payload_len: u64,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&(self.kind as u16).to_le_bytes());
        b[8..12].copy_from_slice(&self.flags.to_le_bytes());
        b[12..16].copy_from_slice(&self.body_len.to_le_bytes());
        b[16..24].copy_from_slice(&self.request_id.to_le_bytes());
        b[24..32].copy_from_slice(&self.payload_len.to_le_bytes());
        b
    }

    /// Parses and bounds-checks a header; `max_payload` is the receiver's limit on bulk data.
    pub fn decode(b: &[u8; HEADER_LEN], max_payload: u64) -> Result<Header> {
        if b[0..4] != MAGIC {
            return Err(Error::protocol(format!(
                "bad magic {:02x?}: not a pdcx peer",
                &b[0..4]
            )));
        }
        let version = header_version(b);
        if version != VERSION {
            return Err(Error::protocol(format!(
                "protocol version mismatch: the other side speaks pdcx protocol {version}, this one {VERSION}"
            )));
        }
        let kind = match u16::from_le_bytes([b[6], b[7]]) {
            1 => FrameKind::Challenge,
            2 => FrameKind::Hello,
            3 => FrameKind::Welcome,
            4 => FrameKind::Request,
            5 => FrameKind::Response,
            6 => FrameKind::PeerRequest,
            7 => FrameKind::PeerResponse,
            k => return Err(Error::protocol(format!("unknown frame kind {k}"))),
        };
        let le32 = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let le64 = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let h = Header {
            kind,
            flags: le32(8),
            body_len: le32(12),
            request_id: le64(16),
            payload_len: le64(24),
        };
        if h.body_len > MAX_BODY {
            return Err(Error::protocol(format!(
                "frame body of {} bytes exceeds {MAX_BODY}",
                h.body_len
            )));
        }
        if h.payload_len > max_payload {
            return Err(Error::protocol(format!(
                "frame payload of {} bytes exceeds this peer's limit of {max_payload}",
                h.payload_len
            )));
        }
        Ok(h)
    }
}

/// The protocol version a header (of any version) announces. Meaningful once the magic matched.
pub fn header_version(b: &[u8; HEADER_LEN]) -> u16 {
    u16::from_le_bytes([b[4], b[5]])
}

/// Whether `b` starts like a pdcx frame of any version.
pub fn has_magic(b: &[u8; HEADER_LEN]) -> bool {
    b[0..4] == MAGIC
}

fn codec() -> impl Options {
    bincode::DefaultOptions::new().with_limit(MAX_BODY as u64)
}

pub fn encode_body<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    codec()
        .serialize(value)
        .map_err(|e| Error::internal(format!("encode: {e}")))
}

pub fn decode_body<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T> {
    codec()
        .deserialize(body)
        .map_err(|e| Error::protocol(format!("malformed frame body: {e}")))
}

/// Writes one whole frame. `payload` parts are written back to back (gather, no concatenation).
pub fn write_frame<W: Write>(
    w: &mut W,
    kind: FrameKind,
    request_id: u64,
    body: &[u8],
    payload: &[&[u8]],
) -> std::io::Result<()> {
    let payload_len: usize = payload.iter().map(|p| p.len()).sum();
    let header = Header {
        kind,
        flags: 0,
        body_len: body.len() as u32,
        request_id,
        payload_len: payload_len as u64,
    };
    w.write_all(&header.encode())?;
    w.write_all(body)?;
    for p in payload {
        w.write_all(p)?;
    }
    w.flush()
}

/// Reads a header and its body; the caller then reads `payload_len` bytes of payload itself.
pub fn read_frame_head<R: Read>(r: &mut R, max_payload: u64) -> Result<(Header, Vec<u8>)> {
    read_frame_head_limited(r, MAX_BODY, max_payload)
}

/// Like `read_frame_head` with a tighter body limit, for peers not yet authenticated: they must
/// not make us buffer more than a handshake needs.
pub fn read_frame_head_limited<R: Read>(
    r: &mut R,
    max_body: u32,
    max_payload: u64,
) -> Result<(Header, Vec<u8>)> {
    let hb = read_header_bytes(r)?;
    finish_frame_head(r, &hb, max_body, max_payload)
}

/// Reads the 32 header bytes without interpreting them, so a handshake can look at the other
/// side's version before anything else (`header_version`).
pub fn read_header_bytes<R: Read>(r: &mut R) -> Result<[u8; HEADER_LEN]> {
    let mut hb = [0u8; HEADER_LEN];
    r.read_exact(&mut hb)
        .map_err(|e| read_error("frame header", &e))?;
    Ok(hb)
}

/// Decodes header bytes read by `read_header_bytes` and reads the body that follows.
pub fn finish_frame_head<R: Read>(
    r: &mut R,
    hb: &[u8; HEADER_LEN],
    max_body: u32,
    max_payload: u64,
) -> Result<(Header, Vec<u8>)> {
    let h = Header::decode(hb, max_payload)?;
    if h.body_len > max_body {
        return Err(Error::protocol(format!(
            "frame body of {} bytes exceeds {max_body} at this stage",
            h.body_len
        )));
    }
    let mut body = vec![0u8; h.body_len as usize];
    r.read_exact(&mut body)
        .map_err(|e| read_error("frame body", &e))?;
    Ok((h, body))
}

fn read_error(what: &str, e: &std::io::Error) -> Error {
    use std::io::ErrorKind as K;
    if matches!(
        e.kind(),
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe
    ) {
        // The peer died or dropped us: the same situation as a closed connection.
        Error::new(
            ErrorKind::Unavailable,
            format!("connection lost while reading {what}: {e}"),
        )
    } else if e.kind() == K::UnexpectedEof {
        Error::new(
            ErrorKind::Unavailable,
            format!("connection closed while reading {what}"),
        )
    } else {
        Error::io(&format!("reading {what}"), e)
    }
}

/// HMAC-SHA256 of `msg` under the deployment secret.
pub fn auth_tag(secret: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(msg);
    mac.finalize().into_bytes().to_vec()
}

/// Who opens a connection, said in its `Hello`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// An application, the CLI: sends `Request`s.
    Client,
    /// Server `rank` of the same deployment: sends `PeerRequest`s.
    Peer { rank: u32 },
}

/// The connecting side's answer to the challenge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub role: Role,
    /// `hello_tag(secret, nonce, role)`.
    pub tag: Vec<u8>,
}

/// What the server says about itself in its `Welcome` (whose body is
/// `Result<ServerInfo, Error>`: a refused handshake carries the reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    pub rank: u32,
    pub size: u32,
}

/// The proof in a `Hello`: HMAC-SHA256 under the deployment secret of a fixed label, the role
/// (and a peer's rank) and the server's nonce. Binding the role means a `Hello` cannot be
/// replayed or rewritten into another role (or another rank) without the secret.
pub fn hello_tag(secret: &[u8], nonce: &[u8], role: Role) -> Vec<u8> {
    hello_mac(secret, nonce, role)
        .finalize()
        .into_bytes()
        .to_vec()
}

/// Constant-time check of a `Hello`'s tag.
pub fn hello_verify(secret: &[u8], nonce: &[u8], role: Role, tag: &[u8]) -> bool {
    hello_mac(secret, nonce, role).verify_slice(tag).is_ok()
}

fn hello_mac(secret: &[u8], nonce: &[u8], role: Role) -> Hmac<sha2::Sha256> {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    let (kind, rank) = match role {
        Role::Client => (0u8, 0u32),
        Role::Peer { rank } => (1u8, rank),
    };
    mac.update(b"pdcx hello\0");
    mac.update(&[kind]);
    mac.update(&rank.to_le_bytes());
    mac.update(nonce);
    mac
}

/// Every shared-memory arena name of a deployment starts with this: `pdcx-` and 12 hex digits
/// derived from the deployment secret (an HMAC, so the name reveals nothing about the secret).
/// The server refuses arenas of other deployments, and anything that is not a pdcx arena.
pub fn arena_prefix(secret: &[u8]) -> String {
    let tag = auth_tag(secret, b"pdcx shm arena");
    let hex: String = tag[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("pdcx-{hex}-")
}

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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum TagTarget {
    Object(ObjectId),
    Container(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectSpec {
    pub name: String,
    pub dims: Vec<u64>,
    pub dtype: Dtype,
    pub fill: Option<Vec<u8>>,
    pub containers: Vec<String>,
    pub tags: Tags,
    pub creator: String,
}

/// One write in a `Stage` request; its `len` bytes follow in the payload, in request order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageItem {
    pub txn: u64,
    pub id: ObjectId,
    pub region: Region,
    pub len: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadItem {
    pub id: ObjectId,
    pub region: Region,
}

/// Where in which attached shared-memory arena one item's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShmLoc {
    pub arena: u32,
    pub offset: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    Ping,
    CreateContainer {
        name: String,
        tags: Tags,
        creator: String,
    },
    GetContainer {
        name: String,
    },
    ListContainers,
    CreateObject(ObjectSpec),
    OpenObject {
        name: String,
    },
    GetObject {
        id: ObjectId,
    },
    ListObjects {
        container: Option<String>,
    },
    SetDims {
        id: ObjectId,
        dims: Vec<u64>,
    },
    AddToContainer {
        id: ObjectId,
        container: String,
    },
    PutTags {
        target: TagTarget,
        tags: Tags,
    },
    DeleteTag {
        target: TagTarget,
        key: String,
    },
    Query {
        conditions: Vec<Condition>,
    },
    /// Ships write data; nothing becomes visible until a `Commit` names the txn.
    Stage {
        items: Vec<StageItem>,
    },
    /// The consistency point: makes the named staged writes visible, in this order.
    Commit {
        txns: Vec<u64>,
        durability: Durability,
    },
    Read {
        items: Vec<ReadItem>,
    },
    Extents {
        id: ObjectId,
    },
    Stats,
    Shutdown,
    // Appended variants (bincode encodes the variant index: never reorder the ones above).
    /// Removes an object: metadata, memberships, tags and extents. Its log bytes become
    /// unreferenced garbage (reclaimed by compaction, which does not exist yet).
    DeleteObject {
        id: ObjectId,
    },
    /// Removes a container and its tags at its owner. Memberships live with the objects'
    /// owners: the client follows up with `DropMemberships` on every server.
    DeleteContainer {
        name: String,
    },
    /// Removes one object from one container (the object itself stays).
    RemoveFromContainer {
        id: ObjectId,
        container: String,
    },
    /// Removes every membership in `container` held by this server's objects.
    DropMemberships {
        container: String,
    },
    /// Asks an object's owner which servers hold data of each region (read planning).
    Locate {
        items: Vec<ReadItem>,
    },
    /// A read sent to a data server the owner named as the only holder of the regions: it
    /// answers from its own extents (fill value elsewhere), like `Read`.
    ReadHeld {
        items: Vec<ReadItem>,
    },
    /// Creates many objects this server owns in one metadata transaction (one fsync). Answered
    /// with `ObjectsCreated`, one result per spec in order: a duplicate or invalid spec fails
    /// only itself.
    CreateObjects {
        specs: Vec<ObjectSpec>,
    },
    /// Flushes committed extents to their home tiers now. With `wait`, returns after passes
    /// until nothing is pending or a tier fails (answered with `Flushed`); without, only wakes
    /// the background flusher (answered with `Flushed` of the current queue).
    Flush {
        wait: bool,
    },
    /// Moves every extent of `id` this server holds to tier `tier` (answered with `Migrated`).
    Migrate {
        id: ObjectId,
        tier: String,
    },
    /// Client to its node-local server: the metadata of one object. The server answers if it
    /// owns the object; otherwise it forwards the lookup to the owner (`PeerRequest::Lookup`),
    /// and concurrent identical lookups from its clients share one forwarded request
    /// (per-node aggregation).
    LookupObject {
        key: ObjectKey,
    },
    /// `Commit` under relaxed consistency: the writes are durable and acknowledged without
    /// waiting for their owners; registering them in the owners' region maps (what makes them
    /// visible) is deferred and batched. The server registers an object's deferred writes once
    /// it holds `expected_writes` of them (0: no count), at `SyncObjects`, on its timer and at
    /// shutdown.
    CommitRelaxed {
        txns: Vec<u64>,
        durability: Durability,
        expected_writes: u64,
    },
    /// The consistency point of relaxed writes: this server registers its deferred writes of
    /// these objects (of every object when empty) with their owners before answering `Ok`.
    SyncObjects {
        ids: Vec<ObjectId>,
    },
    /// Shared-memory bulk path (same node only): the server maps the client's arena, a sealed
    /// memfd it opens as `/proc/{pid}/fd/{fd}` and checks (name, owner, seals, size) before
    /// mapping `len` bytes. Later `StageShm`/`ReadShm` on this connection name it by `arena`.
    AttachShm {
        arena: u32,
        pid: u32,
        fd: i32,
        name: String,
        len: u64,
    },
    /// `Stage` whose item `i` has its `len` bytes in the attached arena at `locs[i]` (the frame
    /// carries no payload). Answered with `Staged`.
    StageShm {
        items: Vec<StageItem>,
        locs: Vec<ShmLoc>,
    },
    /// `Read` (or with `held`, `ReadHeld`) whose item `i` is written into the attached arena at
    /// `locs[i]` instead of the reply payload. Answered with `Data` and no payload.
    ReadShm {
        items: Vec<ReadItem>,
        held: bool,
        locs: Vec<ShmLoc>,
    },
    // --- issue 10, part 4 (small operations): a small write in one round trip ---
    /// `Stage` of `items` (their bytes in the frame payload) and, in the same message, their
    /// `Commit` at `durability`, or with `relaxed: Some(expected_writes)` their
    /// `CommitRelaxed`. Answered with `Committed` once committed. If an item fails to stage,
    /// none of them stays staged and nothing is committed.
    StageCommit {
        items: Vec<StageItem>,
        durability: Durability,
        relaxed: Option<u64>,
    },
    /// `StageCommit` whose item `i` has its bytes in the attached arena at `locs[i]` (as in
    /// `StageShm`; the frame carries no payload).
    StageShmCommit {
        items: Vec<StageItem>,
        locs: Vec<ShmLoc>,
        durability: Durability,
        relaxed: Option<u64>,
    },
    // --- creates (issue 10, item 5): metadata answered at commit, made durable later ---
    /// `CreateObject` answered once the owner has created the object in its in-memory catalog:
    /// it is visible and usable (a duplicate or bad spec has failed) when the answer comes; its
    /// rows reach the owner's database with the next batch (the WAL syncer's, within about
    /// 5 ms plus one transaction, or before any other use of the database) and stable storage
    /// with that batch's background fsync or a `SyncMeta` to the owner, whichever comes first.
    /// Its id is never reused, even if a crash loses the object before that.
    CreateObjectLazy(ObjectSpec),
    /// `PutTags` answered at commit, with the durability of `CreateObjectLazy`.
    PutTagsLazy {
        target: TagTarget,
        tags: Tags,
    },
    /// Answered `Ok` once every metadata change this server committed before it is on stable
    /// storage (the consistency point of lazy creates and tags).
    SyncMeta,
    // ---- issue 10, part "reads": one-copy reads for same-node clients ----
    /// Where the bytes of each item's region are in this server's segment log, so a client on
    /// the same node can `pread` them straight into its own buffer (`Read` semantics, or with
    /// `held` those of `ReadHeld`). Answered with `ReadPlans`; an item the server cannot plan
    /// (other holders, extents on a tier, bytes not yet committed to the log) gets None and is
    /// read the usual way.
    ReadPlan {
        items: Vec<ReadItem>,
        held: bool,
    },
    // ---- creates2 (issue 10, creates session 2): batched creates with lazy durability ----
    /// `CreateObjects` with the durability of `CreateObjectLazy` (durable at the next
    /// `SyncMeta` to this owner): answered with `ObjectsCreated`, one result per spec in order.
    CreateObjectsLazy {
        specs: Vec<ObjectSpec>,
    },
    // ---- issue 10, session 2, part "direct writes" (lead): one-copy writes ----
    /// Like `Stage`, for a client on this server's node that writes each item's payload into
    /// the log itself: the server checks each item as a stage, writes its record header
    /// (`len` bytes with checksum `crcs[i]`) and reserves room for the payload, and answers
    /// `Reserved`. The client then `pwrite`s the payload there, straight from its buffer
    /// (the one copy), before it commits the items by their `txn` as usual. A payload that
    /// does not match its checksum ruins only its own write (reads and recovery refuse it).
    ReserveWrite {
        items: Vec<StageItem>,
        crcs: Vec<u32>,
    },
    // ---- issue 11: byte-stream objects and their versions ----
    /// Owner: grows the object's dims to at least `dims` (elementwise maximum; never shrinks,
    /// so racing writers that each grow a byte stream never fail). Answered with `Object`.
    ExtendDims {
        id: ObjectId,
        dims: Vec<u64>,
    },
    /// Owner: sets a byte-stream object's size to exactly `len` (truncate or grow).
    /// Answered with `Object`.
    SetSize {
        id: ObjectId,
        len: u64,
    },
    /// This server: makes every write committed here durable on its node (one fdatasync of
    /// the log and of the metadata WAL). A client's consistency point after `memory` writes.
    SyncLog,
    /// Owner: records the object's current content as its next version (epoch), to be copied
    /// to `home` (a directory path or `s3://bucket/key`) in the background. Answered with
    /// `Sealed`; a version with no writes since the previous one is not recorded again.
    Seal {
        id: ObjectId,
        home: String,
    },
    /// Owner: the versions of `id` (every byte stream it owns when None). Answered with
    /// `Versions`.
    Versions {
        id: Option<ObjectId>,
    },
    /// Owner: makes a byte stream's content its last version again, overwriting writes made
    /// after the last seal (a crashed run's incomplete version, which never becomes visible
    /// or reaches the home). Answered with `Discarded`.
    DiscardIncomplete {
        id: ObjectId,
    },
    /// Owner: `SyncLog` then `Seal` in one round trip, for a consistency point whose sealing
    /// process wrote to the owner's node (one fdatasync of the log; the seal's WAL fsync also
    /// covers every metadata change before it, e.g. the stream's create). Answered with
    /// `Sealed`.
    SyncSeal {
        id: ObjectId,
        home: String,
    },
    /// `CommitLate` of `txns` with `crcs` (this connection's one-copy writes, at `memory`),
    /// then `SyncSeal`, in one round trip: the consistency point of a byte stream whose
    /// sealing process wrote its large writes to the owner and had not committed them yet.
    /// If the commit fails, nothing is sealed. Answered with `Sealed`.
    CommitSyncSeal {
        txns: Vec<u64>,
        crcs: Vec<u32>,
        id: ObjectId,
        home: String,
    },
    /// `ReserveWrite` without the payloads' checksums: the client computes each as it writes
    /// the payload (piece by piece, while the device writes the pieces before) and sends it
    /// with the commit (`CommitLate`, `CommitSyncSeal`). Until then the record's header holds
    /// a placeholder, so a write never committed is skipped by recovery as damaged, and a
    /// plain `Commit` of it is refused.
    ReserveWriteLate {
        items: Vec<StageItem>,
    },
    /// `Commit` of `txns`, where `crcs[i]` is the payload checksum of `txns[i]` if it was
    /// reserved with `ReserveWriteLate` (ignored otherwise).
    CommitLate {
        txns: Vec<u64>,
        crcs: Vec<u32>,
        durability: Durability,
    },
    // ---- issue 12: analysis where the data lives ----
    /// Owner of the query's first object: evaluates a value query over `region` (the whole
    /// object when None) of objects of one shape, reading other owners' objects from them, and
    /// answers with `QueryAnswer` (payload: coordinates, then values, as `want` asks).
    ValueQuery {
        query: crate::valuequery::ValueExpr,
        region: Option<Region>,
        want: crate::valuequery::QueryWant,
    },
    /// Owner: the elements of `region` taken every `step[d]` in each dim (`region.count` is the
    /// bounding box), C order, so only the selected bytes travel. Answered with `Data`.
    ReadStrided {
        id: ObjectId,
        region: Region,
        step: Vec<u64>,
    },
    /// Owner: the elements at `coords` (ndim u64 per point, any order, repeats allowed), in
    /// the order given. Answered with `Data`.
    ReadPoints {
        id: ObjectId,
        coords: Vec<u64>,
    },
    /// Owner: makes each item's region of `id` an extent whose bytes stay in a file outside
    /// pdcx (an HDF5 chunk imported by reference), read and decoded on access. Durable when
    /// answered (`Imported`). The owner must be able to read the file.
    ImportRefs {
        id: ObjectId,
        items: Vec<RefItem>,
    },
    /// Owner: copies every extent of `id` read by reference into its log, under the same
    /// sequence numbers (so later writes stay later); afterwards the file is not needed.
    /// Answered with `Imported` (extents and bytes promoted).
    PromoteRefs {
        id: ObjectId,
    },
    /// Owner, for a client on its node that reads `region` every `step[d]` elements (as
    /// `ReadStrided`): where every extent under `region` of `id` lies whole in the log
    /// (`PiecePlans`), so the client gathers the selection from the mapped segments itself,
    /// touching only the selected bytes. When other servers hold parts of the region the
    /// answer names them all (`holders`) and the client asks each with `held` for its own
    /// pieces. `PiecePlans(None)` when the region cannot be read so (extents not in the
    /// committed log, a stream's base).
    PiecePlan {
        id: ObjectId,
        region: Region,
        step: Vec<u64>,
        held: bool,
    },
    /// At the owner of `id`: the object takes `name` (issue 14, renames; the order of a
    /// rename's three requests is in the server's `meta/rename.rs`). Answered with `Object`.
    RenameObject {
        id: ObjectId,
        name: String,
    },
    /// At the server `name` hashes to: `name` resolves to `id`, which another server owns.
    LinkName {
        name: String,
        id: ObjectId,
    },
    /// At the server `name` hashes to: drops the link `name` -> `id` (if it is that link).
    UnlinkName {
        name: String,
        id: ObjectId,
    },
}

/// A region whose bytes are `size` bytes at `offset` of the file `path` (absolute), stored
/// as a chunk of shape `chunk` (the region is the chunk clipped to the object's dims, at the
/// chunk's origin) after `filters` were applied in order (they are undone in reverse).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefItem {
    pub region: Region,
    pub path: String,
    pub offset: u64,
    pub size: u64,
    pub chunk: Vec<u64>,
    pub filters: Vec<RefFilter>,
}

/// The HDF5 filters pdcx undoes itself when reading a chunk by reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefFilter {
    /// HDF5's byte shuffle (filter 2) of elements of this many bytes.
    Shuffle { elem: u32 },
    /// Deflate (filter 1): a zlib stream.
    Deflate,
}

/// How a lookup names an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ObjectKey {
    Name(String),
    Id(ObjectId),
}

/// One region a holder registers with the object's owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegisterItem {
    pub id: ObjectId,
    pub region: Region,
    /// For a deferred write: where its bytes are in the holder's log (segment, offset), which
    /// never names another write, so the owner recognises a registration it already made.
    pub token: Option<(u64, u64)>,
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

/// One server's committed pieces of a region: (seq, piece) and their bytes back to back.
pub type Pieces = (Vec<(u64, Region)>, Vec<u8>);

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
    // --- issue 10, part 4 (small operations) ---
    /// Connections (clients, and other servers on its node) accepted on the server's
    /// Unix-domain listener since start.
    #[serde(default)]
    pub unix_connections: u64,
    // --- issue 10, session 2 (one-copy writes) ---
    /// Bytes of writes whose payload same-node clients wrote into this server's log
    /// themselves (`ReserveWrite`) since start.
    #[serde(default)]
    pub direct_write_bytes: u64,
    // --- issue 11 ---
    /// Parts of S3 home copies this server uploaded since start (as the leader of a
    /// version's upload, or for another leader).
    #[serde(default)]
    pub home_parts_uploaded: u64,
    // --- issue 12 ---
    /// Bytes of object data value queries read on this server since start, and bytes they
    /// skipped because per-extent statistics showed nothing there could match.
    #[serde(default)]
    pub query_scanned_bytes: u64,
    #[serde(default)]
    pub query_skipped_bytes: u64,
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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    Ok,
    Welcome {
        rank: u32,
        size: u32,
    },
    Container(ContainerInfo),
    Containers(Vec<ContainerInfo>),
    Object(ObjectMeta),
    Objects(Vec<ObjectMeta>),
    Matches(Vec<(ObjectId, String)>),
    Staged {
        count: u64,
    },
    Committed {
        count: u64,
    },
    /// Payload holds each item's bytes back to back, in request order.
    Data,
    Extents(Vec<ExtentInfo>),
    Stats(ServerStats),
    Error(Error),
    /// Answer to `Locate`: the holders of each item's region, in request order.
    Located(Vec<Vec<u32>>),
    /// Answer to `CreateObjects`: one result per spec, in request order.
    ObjectsCreated(Vec<std::result::Result<ObjectMeta, Error>>),
    Flushed(FlushReport),
    Migrated {
        extents: u64,
        bytes: u64,
    },
    // ---- issue 10, part "reads" ----
    /// Answer to `ReadPlan`.
    ReadPlans(ReadPlans),
    // ---- issue 10, session 2, part "direct writes" (lead) ----
    /// Answer to `ReserveWrite`.
    Reserved(Reservations),
    // ---- issue 11: byte-stream versions ----
    /// Answer to `Seal`: the version's epoch (the previous one's if nothing changed).
    Sealed {
        epoch: u64,
    },
    /// Answer to `Versions`.
    Versions(Vec<VersionInfo>),
    /// Answer to `DiscardIncomplete`: bytes of incomplete writes overwritten.
    Discarded {
        bytes: u64,
    },
    // ---- issue 12 ----
    /// Answer to `ValueQuery`.
    QueryAnswer(crate::valuequery::QueryAnswer),
    /// Answer to `ImportRefs`: extents recorded, and the raw bytes they stand for.
    Imported {
        extents: u64,
        bytes: u64,
    },
    /// Answer to `PiecePlan`.
    PiecePlans(Option<PiecePlans>),
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
/// `segment`, written by write `seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanPiece {
    pub seq: u64,
    pub segment: u64,
    pub offset: u64,
    pub region: Region,
}

/// One version of a byte-stream object (issue 11): the object's content as of a consistency
/// point, and where its copy at the home stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VersionInfo {
    pub id: ObjectId,
    pub name: String,
    pub epoch: u64,
    /// The version holds every write with a smaller sequence number.
    pub seal_seq: u64,
    pub size: u64,
    pub home: String,
    /// `sealed` (home copy not started), `writing`, `done`, `superseded` (a newer version
    /// was sealed before this one was copied), `failed`.
    pub state: String,
    pub sealed_at: f64,
    pub done_at: f64,
    pub error: String,
    /// The S3 multipart upload in progress for this version ("" when none): recorded before
    /// any part is sent, so a restart aborts it instead of leaving its parts billed.
    pub upload_id: String,
    /// The stream's base: the log no longer holds this version, its bytes are read from the
    /// home (with later writes over them).
    pub base: bool,
}

/// Answer to `ReserveWrite`: where each item's payload goes, in request order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reservations {
    /// Absolute path of the server's log directory; segment `n` is `seg-{n:08}.log` in it.
    pub dir: String,
    /// Per item: (segment, st_dev, st_ino, payload offset). The client writes only into a
    /// file that has this device and inode, so never into another file at the same path.
    pub spans: Vec<(u64, u64, u64, u64)>,
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
    /// Files outside the log that spans name (issue 12: objects imported by reference): (the
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
    // --- smallmem (issue 10): registrations of `memory`-durability writes ---
    /// `Register` of strong writes waited at `memory` durability (no item has a token): the
    /// owner records them as `Register` does (region map in its WAL, visible at once) but
    /// answers without waiting for its WAL fsync. Its numbers stay below a durable high-water
    /// mark (reserved in blocks, fsynced once per block), so none is reused after a crash.
    /// Items with a token are registered durably, as by `Register`. Answered with `Seqs`.
    RegisterMemory { items: Vec<RegisterItem> },
    // --- issue 11: byte-stream versions to S3 homes ---
    /// The leader of a version's S3 upload (the object's owner) asks the server holding most
    /// of part `part` to upload it: read `region` of the version (writes below `seq_below`;
    /// `holders` are the other servers holding parts of it) and put it as that part of
    /// multipart upload `upload_id` of `s3://bucket/key`. Answered with `PartUploaded`.
    UploadPart(UploadPart),
    /// The owner tells a holder that its extents `seqs` of `id` are shadowed in every version
    /// still to be read (issue 11): drop them and free their log space. Answered with
    /// `Dropped`.
    DropExtents { id: ObjectId, seqs: Vec<u64> },
    // --- shard: group shards (paper 003 strategy 1 and composite 3-5, `[shard] servers`) ---
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
    /// Which group shard blobs whose key starts with `prefix` this server's homes reference.
    /// Answered with `ShardRefs`.
    ShardRefs { prefix: String },
    /// A member's last reference to group shard `key` on tier `tier` went: the leader deletes
    /// the blob once no member references it. Answered with `ShardReleased`.
    ShardRelease { tier: String, key: String },
    /// The encoded bytes of these extents offered by the last `ShardCandidates` (without
    /// bytes), back to back in the payload. Answered with `ShardBytes`.
    ShardBytes { extents: Vec<(ObjectId, u64)> },
    /// Upload one part of the leader's multipart upload of a group shard on an S3 tier from
    /// this server's extents offered by the last `ShardCandidates`. Answered with
    /// `PartUploaded`.
    UploadShardPart(ShardPart),
    // ---- issue 12 ----
    /// The owner's whole answer for `region` of its object `id`, as a client's `Read` gets it
    /// (a value query over objects of several owners). Answered with `Pieces` holding one
    /// piece, the region.
    ReadOwned { id: ObjectId, region: Region },
    /// A holder's extents of `id` inside `region`: each one's part of the region and its
    /// (min, max) if known. Answered with `ExtentRanges`.
    ExtentRanges { id: ObjectId, region: Region },
}

/// See `PeerRequest::UploadShardPart`: part `part` of upload `upload_id` of `key` on tier
/// `tier` is bytes [`skip`, `skip + len`) of `extents`' encoded bytes back to back, zeros
/// past their end (padding up to S3's smallest part).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardPart {
    pub tier: String,
    pub key: String,
    pub upload_id: String,
    pub part: u32,
    pub extents: Vec<(ObjectId, u64)>,
    pub skip: u64,
    pub len: u64,
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
            PeerRequest::ShardBytes { .. } => "ShardBytes",
            PeerRequest::UploadShardPart(_) => "UploadShardPart",
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
    /// Answer to `ShardRefs`: (tier, key) of every referenced group shard under the prefix.
    ShardRefs(Vec<(String, String)>),
    /// Answer to `ShardRelease` (the check itself happens at the leader's next flush pass).
    ShardReleased,
    /// Answer to `ShardBytes`; the payload holds the bytes.
    ShardBytes,
    // ---- issue 12 ----
    /// Answer to `ExtentRanges`.
    ExtentRanges(Vec<(Region, Option<(f64, f64)>)>),
}

/// The error a reply carries, if it is one (both families end in an `Error` variant).
pub trait Reply: Sized {
    fn into_result(self) -> std::result::Result<Self, Error>;
    fn is_error(&self) -> bool;
}

impl Reply for Response {
    fn is_error(&self) -> bool {
        matches!(self, Response::Error(_))
    }
    fn into_result(self) -> std::result::Result<Self, Error> {
        match self {
            Response::Error(e) => Err(e),
            r => Ok(r),
        }
    }
}

impl Reply for PeerResponse {
    fn is_error(&self) -> bool {
        matches!(self, PeerResponse::Error(_))
    }
    fn into_result(self) -> std::result::Result<Self, Error> {
        match self {
            PeerResponse::Error(e) => Err(e),
            r => Ok(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TagValue;

    fn head(kind: FrameKind, body: usize, payload: u64) -> Header {
        Header {
            kind,
            flags: 0,
            body_len: body as u32,
            request_id: 99,
            payload_len: payload,
        }
    }

    #[test]
    fn header_round_trips() {
        let h = head(FrameKind::Request, 17, 1 << 33);
        assert_eq!(Header::decode(&h.encode(), u64::MAX).unwrap(), h);
    }

    #[test]
    fn header_rejects_garbage_versions_and_oversize() {
        let good = head(FrameKind::Request, 10, 10).encode();
        let mut b = good;
        b[0] = b'X';
        assert!(Header::decode(&b, 100)
            .unwrap_err()
            .message
            .contains("magic"));
        let mut b = good;
        b[4] = 9;
        let e = Header::decode(&b, 100).unwrap_err();
        assert!(
            e.message.contains("version mismatch")
                && e.message.contains("protocol 9")
                && e.message.contains(&format!("this one {VERSION}")),
            "{e}"
        );
        let mut b = good;
        b[6] = 77;
        assert!(Header::decode(&b, 100).is_err());
        assert!(Header::decode(&head(FrameKind::Request, 10, 101).encode(), 100).is_err());
        let huge = head(FrameKind::Request, MAX_BODY as usize + 1, 0).encode();
        assert!(Header::decode(&huge, 100).is_err());
    }

    #[test]
    fn requests_round_trip_through_a_frame() {
        let req = Request::Stage {
            items: vec![StageItem {
                txn: 5,
                id: 1 << 48 | 3,
                region: Region::new(vec![0, 4], vec![2, 2]).unwrap(),
                len: 32,
            }],
        };
        let body = encode_body(&req).unwrap();
        let data = [7u8; 32];
        let mut wire = Vec::new();
        write_frame(
            &mut wire,
            FrameKind::Request,
            42,
            &body,
            &[&data[..16], &data[16..]],
        )
        .unwrap();
        let mut r = &wire[..];
        let (h, b) = read_frame_head(&mut r, 1 << 20).unwrap();
        assert_eq!((h.request_id, h.payload_len), (42, 32));
        assert_eq!(decode_body::<Request>(&b).unwrap(), req);
        assert_eq!(r, &data[..]);

        let resp = Response::Objects(vec![]);
        assert_eq!(
            decode_body::<Response>(&encode_body(&resp).unwrap()).unwrap(),
            resp
        );
        let tags = Request::PutTags {
            target: TagTarget::Container("c".into()),
            tags: vec![("k".into(), TagValue::Float(1.5))],
        };
        assert_eq!(
            decode_body::<Request>(&encode_body(&tags).unwrap()).unwrap(),
            tags
        );
    }

    #[test]
    fn malformed_and_truncated_bodies_are_errors_not_panics() {
        let body = encode_body(&Request::OpenObject { name: "abc".into() }).unwrap();
        for cut in 0..body.len() {
            assert!(
                decode_body::<Request>(&body[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        // A length prefix that claims 2^60 elements must not allocate.
        let mut evil = vec![6u8]; // variant ListObjects? any variant with a Vec works below
        evil.extend_from_slice(&[0xff; 16]);
        assert!(decode_body::<Request>(&evil).is_err());
        let mut r: &[u8] = b"PD";
        assert_eq!(
            read_frame_head(&mut r, 10).unwrap_err().kind,
            ErrorKind::Unavailable
        );
    }

    #[test]
    fn hello_accepts_only_the_right_secret_role_and_rank() {
        let peer = Role::Peer { rank: 1 };
        let tag = hello_tag(b"secret", b"nonce", peer);
        assert!(hello_verify(b"secret", b"nonce", peer, &tag));
        assert!(!hello_verify(b"other", b"nonce", peer, &tag));
        assert!(!hello_verify(b"secret", b"nonce2", peer, &tag));
        assert!(!hello_verify(b"secret", b"nonce", peer, &tag[..31]));
        // A client's proof does not make it a peer, nor one peer's proof another rank.
        let client = hello_tag(b"secret", b"nonce", Role::Client);
        assert!(hello_verify(b"secret", b"nonce", Role::Client, &client));
        assert!(!hello_verify(b"secret", b"nonce", peer, &client));
        assert!(!hello_verify(
            b"secret",
            b"nonce",
            Role::Peer { rank: 2 },
            &tag
        ));
    }

    #[test]
    fn peer_requests_round_trip_and_are_not_client_requests() {
        let req = PeerRequest::Register {
            items: vec![RegisterItem {
                id: 3,
                region: Region::new(vec![0], vec![4]).unwrap(),
                token: Some((1, 2)),
            }],
        };
        let body = encode_body(&req).unwrap();
        assert_eq!(decode_body::<PeerRequest>(&body).unwrap(), req);
        let resp = PeerResponse::Seqs(vec![Some(7), None]);
        assert_eq!(
            decode_body::<PeerResponse>(&encode_body(&resp).unwrap()).unwrap(),
            resp
        );
        assert!(PeerResponse::Error(Error::internal("x"))
            .into_result()
            .is_err());
    }
}

/// Poor man's fuzzing without extra dependencies: random and mutated frames must decode to a
/// value or an error, never panic or allocate unboundedly.
#[cfg(test)]
mod fuzz {
    use super::*;

    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
    }

    #[test]
    fn random_and_mutated_bodies_never_panic() {
        let mut rng = Lcg(7);
        let seeds: Vec<Vec<u8>> = vec![
            encode_body(&Request::Stage {
                items: vec![StageItem {
                    txn: 1,
                    id: 2,
                    region: Region::new(vec![0, 0], vec![4, 4]).unwrap(),
                    len: 128,
                }],
            })
            .unwrap(),
            encode_body(&Request::Query {
                conditions: vec![Condition::parse("a>=1").unwrap()],
            })
            .unwrap(),
            encode_body(&Response::Objects(vec![])).unwrap(),
        ];
        for round in 0..20_000 {
            let mut b = if round % 4 == 0 {
                (0..rng.next() % 64).map(|_| rng.next() as u8).collect()
            } else {
                seeds[round % seeds.len()].clone()
            };
            for _ in 0..1 + rng.next() % 4 {
                if !b.is_empty() {
                    let i = (rng.next() as usize) % b.len();
                    b[i] = rng.next() as u8;
                }
            }
            let _ = decode_body::<Request>(&b);
            let _ = decode_body::<Response>(&b);
            let _ = decode_body::<PeerRequest>(&b);
            let _ = decode_body::<PeerResponse>(&b);
            let _ = decode_body::<Hello>(&b);
            let mut h = [0u8; HEADER_LEN];
            h.iter_mut()
                .zip(b.iter().chain(std::iter::repeat(&0)))
                .for_each(|(d, s)| *d = *s);
            h[0..4].copy_from_slice(&MAGIC);
            h[4..6].copy_from_slice(&VERSION.to_le_bytes());
            let _ = Header::decode(&h, 1 << 20);
        }
    }
}
