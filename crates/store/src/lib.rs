//! pdcx-store: the storage engine under a pdcx server.
//!
//! Data lives in an append-only log of checksummed records split into segment files, with a
//! MANIFEST that is replaced atomically at each commit (ParaLog-style crash consistency):
//! appends are cheap buffered writes, [`SegmentLog::commit`] is the one durability point, and
//! recovery keeps exactly what the last commit covered. [`Cache`] keeps hot payloads in
//! memory under a byte budget. See [`record`] for the on-disk format.

pub mod cache;
pub mod commit_record;
pub mod log;
pub mod manifest;
pub mod mapguard;
pub mod record;

pub use cache::Cache;
pub use commit_record::{CommitEntry, COMMIT_OBJECT};
pub use log::{
    verify_payload, CommitPlan, LogOptions, LogSpan, ManifestPublisher, PendingManifest, Recovery,
    SegmentLog, WriterLease,
};
pub use mapguard::MappedFile;
pub use record::{
    parse_segment_file_name, payload_matches, scan_segment, scan_segment_in, segment_file_name,
    segment_path, Location, RecordInfo, Scanned,
};
