//! The segment log: appends go to the OS page cache; a sync (one fdatasync per written
//! segment) makes them durable; a checkpoint atomically replaces the MANIFEST, which lists the
//! segments and how far each was checkpointed.
//!
//! Recovery trusts the MANIFEST up to each segment's checkpointed length and scans past it:
//! every whole record whose checksums match is kept (the valid tail), the first torn or garbage
//! header ends the segment and everything after it is cut off. A record whose header is intact
//! but whose payload does not match its checksum is skipped, never ending the scan (a writer
//! that damaged its own bytes loses only its own record). So a commit needs no MANIFEST write:
//! its records, including the commit record naming its extents (`commit_record`), are durable
//! once the sync returns, and recovery finds them in the tail. Checkpoints only bound how much
//! recovery scans (and are what the server's metadata replay starts from).
//!
//! By job: `recover` opens the log (recovery), `append` writes records, `commit` makes
//! them durable and checkpoints them, `lease` gives one-copy writers segments of their own,
//! `publish` writes MANIFESTs, `compact` lets compaction seal segments, `retire` removes
//! segments whose records live elsewhere, `read` reads appended bytes back.

mod append;
mod commit;
mod compact;
mod lease;
mod publish;
mod read;
mod recover;
mod retire;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_lease;

pub use commit::CommitPlan;
pub use lease::WriterLease;
pub use publish::{ManifestPublisher, PendingManifest};
pub use read::{verify_payload, LogSpan};

use crate::commit_record::CommitEntry;
use crate::record::{segment_file_name, Location};
use pdcx_core::{Error, ErrorKind, Result};
use pdcx_fsio::{Fs, FsFile, LockGuard};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Why a poisoned log refuses writes. Never retry an fsync and call the data safe: after a
/// failed fsync Linux may have dropped the dirty pages and reports success next time.
pub const POISONED: &str =
    "the log's device failed an fsync, so this server no longer accepts writes \
(fail-stop: data committed before the failure is still served); check the device, then restart \
the server, which recovers the last durable commit";

/// Segments roll over at this size by default (`log.segment_bytes`). Space comes back a
/// whole segment at a time (retirement, compaction): a checkpoint overwritten in place frees
/// every segment of its previous version without copying anything once segments are small
/// next to it (measured in `bench/reclaim`: with 1 GiB segments a 128 MiB checkpoint stayed at
/// 2.25x its size on disk, with 64 MiB at 1.0x). Rolling over costs nothing on the write
/// path: the next segment is one made ahead (`spares`).
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

#[derive(Clone)]
pub struct LogOptions {
    /// Roll to a new segment when the active one would exceed this many bytes. A record larger
    /// than this gets a segment of its own.
    pub segment_bytes: u64,
    /// The file system under the log: the real one, or a simulated disk in crash tests.
    pub fs: Arc<dyn Fs>,
}

impl std::fmt::Debug for LogOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogOptions")
            .field("segment_bytes", &self.segment_bytes)
            .finish_non_exhaustive()
    }
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            fs: pdcx_fsio::os(),
        }
    }
}

/// What [`SegmentLog::open`] found and cleaned up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    pub segments: usize,
    /// Valid bytes kept: checkpointed ones plus the valid tails found past the checkpoint.
    pub committed_bytes: u64,
    /// Bytes dropped: torn or garbage tails cut off listed segments plus the whole size of
    /// removed unlisted segments.
    pub discarded_bytes: u64,
    pub removed_segments: usize,
    /// Valid tail bytes found past the checkpoint (durable commits not checkpointed yet).
    pub tail_bytes: u64,
    /// Records in the tails skipped because their payload did not match its checksum (torn
    /// by a power cut, or changed by their writer while logged): where their payloads were.
    /// Metadata naming one of them must not be trusted (the server drops such rows).
    pub damaged: Vec<Location>,
    /// The entries of every commit record in the tails, in log order: commits the metadata
    /// may not have made durable yet (the server replays them).
    pub commits: Vec<CommitEntry>,
}

struct Segment {
    file: Arc<dyn FsFile>,
    len: u64,
    /// Bytes made durable by an fdatasync (a sync, or recovery).
    synced: u64,
    /// Bytes the MANIFEST lists (the last checkpoint that covered this segment).
    checkpointed: u64,
    /// The file's length: `len` plus zeros written ahead of the appends (see `PREZERO`).
    zeroed: u64,
}

pub struct SegmentLog {
    dir: PathBuf,
    opts: LogOptions,
    fs: Arc<dyn Fs>,
    segments: BTreeMap<u64, Segment>,
    /// The segment shared appends go to (staged writes, commit records). None after open:
    /// the first append makes a new one rather than appending to a segment a one-copy
    /// writer of the last incarnation may still hold open.
    active: Option<u64>,
    /// Segments leased to one-copy writers (`lease.rs`).
    leased: lease::Leased,
    /// Empty, listed segments kept for new leases (`lease.rs`), the next one last.
    spares: Vec<u64>,
    /// The first segment id this process made: older segments (a spare found empty at open
    /// included) may still be open in a one-copy writer of the last incarnation, so shared
    /// appends never go to one.
    made_here_from: u64,
    /// Whether to keep spares: a writer has leased a segment, or the last incarnation's
    /// spares were found empty at open.
    wants_spares: bool,
    /// Segments written since the last sync.
    dirty: BTreeSet<u64>,
    /// Shared with `manifests`, which may poison the log without its lock.
    poisoned: Arc<AtomicBool>,
    manifests: Arc<ManifestPublisher>,
    /// The generation of the newest MANIFEST computed ([`PendingManifest`]).
    manifest_generation: u64,
    /// Held for the life of the log so a second process cannot delete our uncommitted tail.
    _lock: LockGuard,
}

impl SegmentLog {
    fn check_poisoned(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::Io, POISONED));
        }
        Ok(())
    }

    fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn segment_path(&self, segment: u64) -> PathBuf {
        self.dir.join(segment_file_name(segment))
    }
}
