//! Reading appended bytes back: spans of a segment readable without the log's lock, payloads
//! verified against their checksums, and what the log holds (committed, written, segments).

use super::SegmentLog;
use crate::record::Location;
use pdcx_core::{Error, ErrorKind, Result};
use pdcx_fsio::FsFile;
use std::path::PathBuf;
use std::sync::Arc;

/// Appended bytes of one segment, readable without the log's lock
/// ([`SegmentLog::span`]).
pub struct LogSpan {
    file: Arc<dyn FsFile>,
    path: PathBuf,
    offset: u64,
    len: u64,
}

impl LogSpan {
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the span starts in its segment file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The span's whole segment file mapped read-only (guarded: a file cut under the mapping
    /// reads as zeros and flags it, see [`crate::mapguard`]), for reading the span's bytes
    /// where they lie in the page cache. None when the file is simulated, too short for the
    /// span, or cannot be mapped: the caller reads it ([`Self::read_verified`]).
    pub fn map_segment(&self) -> Option<crate::MappedFile> {
        let file = self.file.os_file()?;
        let len = file.metadata().ok()?.len();
        if len < self.offset.checked_add(self.len)? {
            return None;
        }
        crate::MappedFile::map(file, len).ok()
    }

    /// Reads the whole span (a record's payload) and checks it against `crc`.
    pub fn read_verified(&self, crc: u32) -> Result<Vec<u8>> {
        let len = usize::try_from(self.len)
            .map_err(|_| Error::invalid(format!("payload of {} bytes is too large", self.len)))?;
        let mut buf = vec![0u8; len];
        self.read_into(&mut buf)?;
        let got = crc32c::crc32c(&buf);
        if got != crc {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "payload crc mismatch in {} at offset {} ({} bytes): stored {crc:#010x}, read {got:#010x}",
                    self.path.display(),
                    self.offset,
                    self.len,
                ),
            ));
        }
        Ok(buf)
    }

    /// Reads the span into `buf`, which must be exactly its length.
    pub fn read_into(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() as u64 != self.len {
            return Err(Error::internal(format!(
                "read of a {}-byte log span into {} bytes",
                self.len,
                buf.len()
            )));
        }
        self.file.read_exact_at(buf, self.offset).map_err(|e| {
            Error::io(
                &format!("read {} at {}", self.path.display(), self.offset),
                &e,
            )
        })
    }
}

/// Checks `bytes`, the whole payload of the record at `loc`, against its checksum: a read
/// that covers whole records returns an error rather than bytes changed after they were
/// written (by a one-copy writer outside its reservation, or by the device).
pub fn verify_payload(loc: &Location, bytes: &[u8]) -> Result<()> {
    if crate::record::payload_matches(bytes, loc.crc) {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Io,
        format!(
            "the record at offset {} of log segment {} ({} bytes) no longer matches its \
             checksum: it was changed after it was written (a one-copy writer wrote outside \
             its reservation, or the device corrupted it); this write is lost, others are not",
            loc.offset, loc.segment, loc.len
        ),
    ))
}

impl SegmentLog {
    /// True while `segment` is part of the log (not retired).
    pub fn has_segment(&self, segment: u64) -> bool {
        self.segments.contains_key(&segment)
    }

    /// Reads `buf.len()` bytes at `offset` of `segment`. Errors if that is past the log's end.
    pub fn read_at(&self, segment: u64, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.span(segment, offset, buf.len() as u64)?.read_into(buf)
    }

    /// `len` bytes at `offset` of `segment`, checked to lie within what was appended, to be
    /// read later without this log's lock ([`LogSpan::read_into`]): appended bytes are never
    /// rewritten and retirement only unlinks whole files, which the span keeps open. So a
    /// reader holding the log's lock only for this lookup never stalls appenders for the
    /// length of a large read.
    pub fn span(&self, segment: u64, offset: u64, len: u64) -> Result<LogSpan> {
        let path = self.segment_path(segment);
        let seg = self.segments.get(&segment).ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!("{} is not part of the log", path.display()),
            )
        })?;
        let end = offset.checked_add(len);
        if !matches!(end, Some(end) if end <= seg.len) {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "read of {len} bytes at {offset} is past the end of {} ({} bytes)",
                    path.display(),
                    seg.len
                ),
            ));
        }
        Ok(LogSpan {
            file: seg.file.clone(),
            path,
            offset,
            len,
        })
    }

    /// Reads a whole payload and verifies its crc.
    pub fn read_payload(&self, loc: &Location) -> Result<Vec<u8>> {
        self.span(loc.segment, loc.offset, loc.len)?
            .read_verified(loc.crc)
    }

    /// True when `loc` lies within durable (synced) bytes of the log.
    pub fn is_committed(&self, loc: &Location) -> bool {
        self.segments.get(&loc.segment).is_some_and(|s| {
            loc.offset
                .checked_add(loc.len)
                .is_some_and(|end| end <= s.synced)
        })
    }

    /// True when `loc` lies within the records appended to the log so far, synced or not.
    /// Nothing ever cuts the log below the end of a whole record: a failed append truncates
    /// back to the end of the last good one, and recovery cuts only a torn or garbage tail,
    /// which a record whose write completed is not part of when the server process died
    /// (the page cache keeps it); only losing the node loses it, and a client on that node
    /// with it. So a committed extent's bytes stay what they are, at the same offsets, for
    /// as long as the segment file exists (read plans rely on this, `docs/ARCHITECTURE.md`).
    pub fn is_written(&self, loc: &Location) -> bool {
        self.segments.get(&loc.segment).is_some_and(|s| {
            loc.offset
                .checked_add(loc.len)
                .is_some_and(|end| end <= s.len)
        })
    }

    /// Sum of segment lengths, committed or not.
    pub fn total_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.len).sum()
    }

    /// Ids of all segments, ascending (for rebuilding an index with [`scan_segment`]).
    pub fn segment_ids(&self) -> Vec<u64> {
        self.segments.keys().copied().collect()
    }
}
