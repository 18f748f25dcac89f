//! The byte-stream family: streams grow, shrink and are sealed into versions copied to a
//! home in the background.

use crate::model::{ObjectId, ObjectMeta};
use serde::{Deserialize, Serialize};

/// One version of a byte-stream object: the object's content as of a consistency
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

/// Replies of the byte-stream family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StreamResponse {
    Object(ObjectMeta),
    Sealed(u64),
    Versions(Vec<VersionInfo>),
    Discarded(u64),
}

family! {
    /// Byte streams and their versions, at the stream's owner.
    Stream: StreamRequest => StreamResponse;

    /// Grows the object's dims to at least `dims` (elementwise maximum; never shrinks, so
    /// racing writers that each grow a byte stream never fail).
    ExtendDims { id: ObjectId, dims: Vec<u64> } => Object(ObjectMeta);
    /// Sets a byte-stream object's size to exactly `len` (truncate or grow).
    SetSize { id: ObjectId, len: u64 } => Object(ObjectMeta);
    /// Records the object's current content as its next version (epoch), to be copied to
    /// `home` (a directory path or `s3://bucket/key`) in the background. Answered with the
    /// version's epoch; a version with no writes since the previous one is not recorded
    /// again. With `sync_log`, the log is synced first (one fdatasync), for a consistency
    /// point whose sealing process wrote to the owner's node; the seal's WAL fsync also covers
    /// every metadata change before it, e.g. the stream's create.
    Seal { id: ObjectId, home: String, sync_log: bool } => Sealed(u64);
    /// The versions of `id` (every byte stream it owns when None).
    Versions { id: Option<ObjectId> } => Versions(Vec<VersionInfo>);
    /// Makes a byte stream's content its last version again, overwriting writes made after the
    /// last seal (a crashed run's incomplete version, which never becomes visible or reaches
    /// the home). Answered with the bytes of incomplete writes overwritten.
    DiscardIncomplete { id: ObjectId } => Discarded(u64);
}

impl StreamRequest {
    /// Every stream request changes the stream except listing its versions (a status poll).
    pub fn writes(&self) -> bool {
        !matches!(self, StreamRequest::Versions(_))
    }
}
