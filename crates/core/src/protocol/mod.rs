//! The wire protocol. Every frame is a fixed 32-byte header, a bincode body of at most
//! `MAX_BODY` bytes, then `payload_len` bytes of bulk data (array elements), so bulk data is
//! never re-encoded and a receiver can read it straight into its destination buffer.
//!
//! Header (little-endian): magic "PDCX" | version u16 | kind u16 | flags u32 | body_len u32 |
//! request_id u64 | payload_len u64. The first six bytes (magic and version) keep this place in
//! every version, so both sides can always tell which version the other speaks.
//!
//! Handshake (`handshake`): the server sends a `Challenge` frame (a random nonce); the
//! connecting side answers with a `Hello` frame: its role (a client, or the server of rank N)
//! and HMAC-SHA256(deployment secret, role and nonce); the server answers with a `Welcome`
//! frame (its rank and size, or why it refused). Anything else is refused.
//!
//! A client sends `Request` frames, answered with `Response`; a server sends the other servers
//! `PeerRequest` frames (`peer`), answered with `PeerResponse`. A connection serves only its
//! own role's requests; the other kind is refused with an error reply.
//!
//! Client requests come in families, one module each: `handshake` (connection), `catalog`
//! (containers, objects, names, tags), `write`, `read`, `analysis`, `stream` (byte streams and
//! their versions) and `admin`. Each family has a request enum whose variants each wrap one
//! operation struct, and a response enum. Every operation struct implements [`Call`], which
//! names its reply type and takes it out of a [`Response`]: a caller gets the reply it asked
//! for or one typed protocol error, never a response of another operation to sort out.

use crate::error::{Error, ErrorKind, Result};
use bincode::Options;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

/// Declares a family's operations: one struct per operation (its fields are the request),
/// the family's request enum wrapping them, their conversion into a [`Request`], and their
/// [`Call`] impl naming the response variant that answers them (`=> Variant(ReplyType)`, or
/// `=> Variant` for a reply with nothing in it).
macro_rules! family {
    (
        $(#[$fam_meta:meta])*
        $Fam:ident: $Req:ident => $Resp:ident;
        $(
            $(#[$m:meta])*
            $Op:ident { $( $(#[$fm:meta])* $f:ident : $t:ty ),* $(,)? } => $V:ident $( ( $T:ty ) )? ;
        )*
    ) => {
        $(
            $(#[$m])*
            #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
            pub struct $Op { $( $(#[$fm])* pub $f: $t, )* }

            impl From<$Op> for $crate::protocol::Request {
                fn from(r: $Op) -> Self {
                    $crate::protocol::Request::$Fam($Req::$Op(r))
                }
            }

            call_impl!($Fam, $Resp, $Op, $V $(, $T)?);
        )*

        $(#[$fam_meta])*
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        pub enum $Req {
            $( $(#[$m])* $Op($Op), )*
        }

        impl $Req {
            /// The operation's name, for messages and metrics.
            pub fn name(&self) -> &'static str {
                match self {
                    $( $Req::$Op(_) => stringify!($Op), )*
                }
            }
        }
    };
}

macro_rules! call_impl {
    ($Fam:ident, $Resp:ident, $Op:ident, $V:ident) => {
        impl $crate::protocol::Call for $Op {
            type Reply = ();
            fn reply(resp: $crate::protocol::Response) -> $crate::Result<()> {
                match resp {
                    $crate::protocol::Response::$Fam($Resp::$V) => Ok(()),
                    other => Err($crate::protocol::mismatch(stringify!($Op), &other)),
                }
            }
        }
    };
    ($Fam:ident, $Resp:ident, $Op:ident, $V:ident, $T:ty) => {
        impl $crate::protocol::Call for $Op {
            type Reply = $T;
            fn reply(resp: $crate::protocol::Response) -> $crate::Result<$T> {
                match resp {
                    $crate::protocol::Response::$Fam($Resp::$V(x)) => Ok(x),
                    other => Err($crate::protocol::mismatch(stringify!($Op), &other)),
                }
            }
        }
    };
}

pub mod admin;
pub mod analysis;
pub mod catalog;
pub mod handshake;
pub mod peer;
pub mod read;
pub mod stream;
pub mod write;

pub use admin::{
    AdminRequest, AdminResponse, CompactReport, FlushReport, Moved, ServerStats, TierStat,
};
pub use analysis::{AnalysisRequest, AnalysisResponse, RefFilter, RefItem};
pub use catalog::{CatalogRequest, CatalogResponse, ObjectKey, ObjectSpec, TagTarget};
pub use handshake::{
    arena_prefix, auth_tag, tcp_binding, unix_binding, user_key, Credential, HandshakeRequest,
    HandshakeResponse, Hello, Role, ServerInfo, SessionKeys, ShmLoc, Welcome, Wire,
};
pub use peer::{
    PeerRequest, PeerResponse, Pieces, RegisterItem, ShardCandidate, ShardHome, ShardPart,
    UploadPart,
};
pub use read::{
    ExtentInfo, PiecePlans, PlanPiece, PlanSpan, ReadItem, ReadOpts, ReadPlan, ReadPlans,
    ReadRequest, ReadResponse, Selection, VersionList,
};
pub use stream::{StreamRequest, StreamResponse, VersionInfo};
pub use write::{
    CommitOpts, Committed, Consistency, Durability, Reservations, SealAt, StageItem, WriteRequest,
    WriteResponse,
};

/// A client request, by family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    Handshake(HandshakeRequest),
    Catalog(CatalogRequest),
    Write(WriteRequest),
    Read(ReadRequest),
    Analysis(AnalysisRequest),
    Stream(StreamRequest),
    Admin(AdminRequest),
}

impl Request {
    /// The operation's name, for messages and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Handshake(r) => r.name(),
            Request::Catalog(r) => r.name(),
            Request::Write(r) => r.name(),
            Request::Read(r) => r.name(),
            Request::Analysis(r) => r.name(),
            Request::Stream(r) => r.name(),
            Request::Admin(r) => r.name(),
        }
    }

    /// The request's name in metrics: the operation's, refined by the options that make a
    /// different path through the server (shared memory, a stage's commit, late checksums, a
    /// seal, lazy durability, held/strided/point reads). These are the request kinds metrics
    /// reported before requests were grouped by family, so dashboards and benchmark tables
    /// stay comparable.
    pub fn metric_name(&self) -> &'static str {
        match self {
            Request::Write(WriteRequest::Stage(r)) => match (r.shm.is_some(), r.commit.is_some()) {
                (false, false) => "Stage",
                (true, false) => "StageShm",
                (false, true) => "StageCommit",
                (true, true) => "StageShmCommit",
            },
            Request::Write(WriteRequest::Reserve(r)) if r.crcs.is_none() => "ReserveWriteLate",
            Request::Write(WriteRequest::Reserve(_)) => "ReserveWrite",
            Request::Write(WriteRequest::Commit(r)) if r.opts.seal.is_some() => "CommitSyncSeal",
            Request::Write(WriteRequest::Commit(r)) if !r.opts.checksums.is_empty() => "CommitLate",
            Request::Write(WriteRequest::Commit(r))
                if r.opts.consistency != Consistency::Strong =>
            {
                "CommitRelaxed"
            }
            Request::Stream(StreamRequest::Seal(r)) if r.sync_log => "SyncSeal",
            Request::Catalog(CatalogRequest::CreateObject(r)) if r.lazy => "CreateObjectLazy",
            Request::Catalog(CatalogRequest::CreateObjects(r)) if r.lazy => "CreateObjectsLazy",
            Request::Catalog(CatalogRequest::PutTags(r)) if r.lazy => "PutTagsLazy",
            Request::Read(ReadRequest::Read(r)) => match (&r.opts.select, &r.opts.shm) {
                (Selection::Strided(_), _) => "ReadStrided",
                (Selection::Points(_), _) => "ReadPoints",
                (_, Some(_)) => "ReadShm",
                _ if r.opts.held => "ReadHeld",
                _ => "Read",
            },
            Request::Read(ReadRequest::PlanRead(_)) => "ReadPlan",
            r => r.name(),
        }
    }

    /// Whether the request belongs to a program writing through the server (home copies
    /// wait while such requests come): every write, every byte-stream change, and the
    /// creates that precede writes. Lookups, status polls and reads do not count.
    pub fn writes(&self) -> bool {
        match self {
            Request::Write(_) => true,
            Request::Stream(r) => r.writes(),
            Request::Catalog(r) => r.creates(),
            Request::Handshake(_) | Request::Read(_) | Request::Analysis(_) | Request::Admin(_) => {
                false
            }
        }
    }
}

/// The reply to a client request, in the request's family, or the error it failed with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    Handshake(HandshakeResponse),
    Catalog(CatalogResponse),
    Write(WriteResponse),
    Read(ReadResponse),
    Analysis(AnalysisResponse),
    Stream(StreamResponse),
    Admin(AdminResponse),
    Error(Error),
}

/// One client operation: converts into its [`Request`] and names its reply type, which it
/// takes out of the server's [`Response`] (an error reply never gets here: it is returned as
/// `Err` before).
pub trait Call: Into<Request> {
    type Reply;
    fn reply(resp: Response) -> Result<Self::Reply>;
}

/// The one error for a reply that does not answer the request it came for.
pub(crate) fn mismatch(op: &str, got: &Response) -> Error {
    let mut shown = format!("{got:?}");
    if shown.len() > 200 {
        let cut = (0..=200)
            .rev()
            .find(|&i| shown.is_char_boundary(i))
            .unwrap_or(0);
        shown.truncate(cut);
        shown.push_str("...");
    }
    Error::protocol(format!("the reply to {op} is not its reply type: {shown}"))
}

pub const MAGIC: [u8; 4] = *b"PDCX";
/// Changes with every change of the wire format (frames, handshake or any body).
/// 2: client and peer request families, role in the handshake, `Register` removed.
/// 3: client requests and replies grouped by family; write and read variants merged into
/// one request each with options (`CommitOpts`, `ReadOpts`).
/// 4: `SetType` in the catalog family (objects created without an element type).
/// 5: mutual handshake (client nonce, channel binding, the server's proof in `Welcome`) and
/// protected frames between nodes.
/// 6: users besides the deployment's own (`Hello::user`, user keys, kernel credentials), the
/// admin role, objects' and containers' owners and grants; read plans name the records they
/// read from (with their checksums), which the client checks.
/// 7: `Compact` in the admin family; the log's live bytes and compaction totals in
/// `ServerStats`.
/// 8: the metadata's size in `ServerStats`; forgotten rows and metadata bytes freed in
/// `CompactReport`; `Released` in the peer family (an owner's tables stay bounded, the
/// versions a drop breaks); reads of a version (`ReadOpts::version`) and `Versions` in the
/// read family.
/// 9: `ContainerTags` in the peer family (a container's retention policy for its objects);
/// `VersionList.sizes` (the versions of byte streams); `ConfirmHeld` in the peer family (an
/// owner dropping writes another holder's newer writes hide).
/// 10: `ShardRefs` answers the stored bytes each server uses in a group shard; `RepackShards`
/// in the peer family (a leader compacting its group shards).
/// 11: `ShardPart.at`: the members of a group shard on a shared directory write their own
/// extents into it (`UploadShardPart`).
pub const VERSION: u16 = 11;
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

/// The first allocation [`read_payload`] makes for a buffer that is not yet large enough.
pub const PAYLOAD_STEP: usize = 1 << 20;

/// Reads a payload of `n` bytes into `buf[..n]` (`buf` ends at least `n` long), growing `buf`
/// only as the bytes arrive: the length a frame announces is a claim, and a peer that
/// announces 4 GiB and sends ten bytes must cost ten bytes, not 4 GiB. A buffer already long
/// enough (one reused between requests) is read into in one go. A shorter one starts at
/// [`PAYLOAD_STEP`] and doubles as it fills (`read_to_end`), so an honest large payload costs
/// a few reallocations (large blocks move by remapping pages, not by copying), and its bytes
/// are written once, never zeroed first.
pub fn read_payload<R: Read + ?Sized>(
    r: &mut R,
    buf: &mut Vec<u8>,
    n: usize,
) -> std::io::Result<()> {
    if buf.len() >= n {
        return r.read_exact(&mut buf[..n]);
    }
    // The old contents are of no use; the capacity is.
    buf.clear();
    buf.reserve(n.min(PAYLOAD_STEP));
    let got = r.take(n as u64).read_to_end(buf)?;
    if got < n {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("payload ended after {got} of {n} bytes"),
        ));
    }
    Ok(())
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
mod tests;
