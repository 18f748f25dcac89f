//! Writing records: appends (zeros written ahead of small ones, write-behind for large ones),
//! commit records, reservations for one-copy writes and their headers, voiding a failed
//! commit's record, and the segment each record goes to.

use super::{Segment, SegmentLog, POISONED};
use crate::commit_record::{self, CommitEntry, COMMIT_OBJECT};
use crate::record::{self, Location};
use pdcx_core::{Error, ErrorKind, Region, Result};
use pdcx_fsio::OpenMode;

/// Records with payloads up to this size are written with one `pwrite` (header and payload
/// copied together); larger ones with two, straight from the caller's buffer.
const ONE_WRITE_MAX: usize = 16 << 10;

/// Small records are appended into zeros written ahead of them ([`zero_ahead`]): an
/// fdatasync after a write that grows the file must also commit the new size (a journal
/// commit), one after a write into already-written blocks only flushes data (~50 us less per
/// small `local` commit on the test disk: `bench/RESULTS.md`). Large records are not: zeroing
/// ahead of them would write their bytes twice. Recovery's scan stops at the zeros (no record
/// starts with them) and cuts them off.
///
/// The commit whose fdatasync carries the zeros pays for writing them and for the journal
/// commit, so how far to zero ahead trades how often a commit pays against how much: room for
/// [`ZERO_AHEAD_RECORDS`] records, which keeps that commit's extra write about as long as the
/// journal commit it pays anyway. 4 KiB records at `local`, 8 fresh deployments each,
/// alternated (`bench/RESULTS.md`): room for 64 (256 KiB) put one commit in 64 at ~4x the
/// median, and those 1.6 % were the whole p99 (p99 / p50 4.1x); room for 16, 2.9x; room for
/// 8, 2.5x, with the mean and the median unchanged (the p90 carries the journal commits).
pub(super) const PREZERO: u64 = 1 << 20;
/// The least zeroed ahead at a time.
pub(super) const PREZERO_MIN: u64 = 32 << 10;
/// Records up to this size get zeros written ahead of them.
pub(super) const PREZERO_MAX_RECORD: u64 = 64 << 10;
/// How many records like the one being appended the zeros written ahead of it make room for.
pub(super) const ZERO_AHEAD_RECORDS: u64 = 8;

/// Records at least this large start their writeback as soon as they are appended.
const WRITE_BEHIND_MIN: u64 = 256 << 10;

/// How many zeros to write past a small record of `rec_len` bytes appended past the zeroed
/// end: room for [`ZERO_AHEAD_RECORDS`] more like it, within [`PREZERO_MIN`, `PREZERO`].
/// Sized by the record, because a log that takes large one-copy writes (reserved, never zeroed)
/// between its small records (a commit record per file) zeroes anew after each large one.
pub(super) fn zero_ahead(rec_len: u64) -> u64 {
    rec_len
        .saturating_mul(ZERO_AHEAD_RECORDS)
        .clamp(PREZERO_MIN, PREZERO)
}

impl SegmentLog {
    /// The shared segment a record of `rec_len` bytes goes to, creating the next one if
    /// needed. Segments leased to one-copy writers ([`WriterLease`](super::WriterLease)) never
    /// take shared records.
    fn segment_for(&mut self, rec_len: u64) -> Result<u64> {
        if let Some(id) = self.active {
            if let Some(seg) = self.segments.get(&id) {
                if seg.len == 0 || seg.len.saturating_add(rec_len) <= self.opts.segment_bytes {
                    return Ok(id);
                }
            }
            // A rollover: the next one is a spare made ahead when there is one (no MANIFEST
            // publish on the write path), and spares are kept from now on.
            self.wants_spares = true;
        }
        let id = match self.take_fresh_spare() {
            Some(id) => id,
            None => self.create_segment()?,
        };
        self.active = Some(id);
        Ok(id)
    }

    /// Creates and lists the next segment (ids only grow, so never a retired one's id).
    pub(super) fn create_segment(&mut self) -> Result<u64> {
        let ids = self.create_segments(1)?;
        ids.first()
            .copied()
            .ok_or_else(|| Error::internal("no segment was created"))
    }

    /// Creates the next `n` segments and lists them with one MANIFEST.
    pub(super) fn create_segments(&mut self, n: usize) -> Result<Vec<u64>> {
        let first = self.segments.last_key_value().map_or(1, |(&id, _)| id + 1);
        let mut made = Vec::with_capacity(n);
        let mut failed = None;
        for next in (first..).take(n) {
            let path = self.segment_path(next);
            match self.fs.open(&path, OpenMode::CreateNew) {
                Ok(file) => {
                    let seg = Segment {
                        file,
                        len: 0,
                        synced: 0,
                        checkpointed: 0,
                        zeroed: 0,
                    };
                    self.segments.insert(next, seg);
                    made.push(next);
                }
                Err(e) => {
                    failed = Some(Error::io(&format!("create {}", path.display()), &e));
                    break;
                }
            }
        }
        // Listed before anything is appended to them (publishing the MANIFEST also fsyncs the
        // directory, making the new files' entries durable): recovery scans only listed
        // segments, and a sync of a file alone would not make its name durable.
        let listed = match failed {
            Some(e) => Err(e),
            None => self.store_manifest(),
        };
        if let Err(e) = listed {
            for id in made {
                self.segments.remove(&id);
                let _ = self.fs.remove_file(&self.segment_path(id));
            }
            return Err(e);
        }
        Ok(made)
    }

    /// Appends one record (a buffered write through the OS, no fsync) and returns where its
    /// payload sits. On a failed write the segment is truncated back to its previous end and
    /// the error returned (NoSpace for ENOSPC); the log stays usable.
    pub fn append(
        &mut self,
        object: u64,
        txn: u64,
        region: &Region,
        payload: &[u8],
    ) -> Result<Location> {
        if object == COMMIT_OBJECT {
            return Err(Error::invalid(format!(
                "object id {object:#x} is reserved for commit records"
            )));
        }
        self.append_record(object, txn, region, payload)
    }

    /// Appends a commit record naming `entries` (see `commit_record`): once a sync covers it,
    /// recovery finds these extents even if the metadata never recorded them.
    pub fn append_commit(&mut self, entries: &[CommitEntry]) -> Result<Location> {
        let payload = commit_record::encode(entries);
        let region = Region::new(vec![0], vec![entries.len().max(1) as u64])?;
        self.append_record(COMMIT_OBJECT, 0, &region, &payload)
    }

    /// Reserves room for a record of `len` payload bytes with checksum `crc` whose payload a
    /// same-node client writes itself, straight from its buffer into the segment file (issue
    /// 10, one-copy writes; `docs/ARCHITECTURE.md`, "One write"). The header is written now
    /// and the file extended over the payload (a hole until the client writes it), so:
    /// - the file is never shorter than the log's length: a checkpoint covering the range
    ///   stays consistent with the file even if the client never writes;
    /// - recovery's scan reads a valid header here and, should the payload not match `crc`
    ///   (never written, torn, or changed by its writer), skips only this record
    ///   ([`Scanned::Damaged`](crate::record::Scanned)) and goes on to the records after it.
    ///
    /// The record goes into the segment leased to this writer (`lease`, one per client
    /// connection), never into a segment holding anyone else's records: the file the client
    /// opens can reach only its own writes (see [`WriterLease`](super::WriterLease)).
    ///
    /// Returns where the payload goes and the segment file's (st_dev, st_ino), which the
    /// client checks so it never writes into another file at the same path. Fails with
    /// `Unavailable` when the log's files are not real files (a simulated disk).
    pub fn reserve(
        &mut self,
        lease: &mut super::WriterLease,
        object: u64,
        txn: u64,
        region: &Region,
        len: u64,
        crc: u32,
    ) -> Result<(Location, (u64, u64))> {
        self.check_poisoned()?;
        if object == COMMIT_OBJECT {
            return Err(Error::invalid(format!(
                "object id {object:#x} is reserved for commit records"
            )));
        }
        region.validate()?;
        let prefix = record::encode_prefix(object, txn, region, len, crc);
        let rec_len = (prefix.len() as u64)
            .checked_add(len)
            .ok_or_else(|| Error::invalid(format!("a record of {len} bytes is too large")))?;
        let id = self.leased_segment_for(lease, rec_len)?;
        let path = self.segment_path(id);
        let seg = self
            .segments
            .get_mut(&id)
            .ok_or_else(|| Error::internal(format!("segment {id} vanished")))?;
        let identity = seg.file.identity().ok_or_else(|| {
            Error::new(
                ErrorKind::Unavailable,
                "this log's segments are not files a client can write (simulated disk)",
            )
        })?;
        let start = seg.len;
        let end = start + rec_len;
        let written = seg.file.write_all_at(&prefix, start).and_then(|()| {
            if end > seg.zeroed {
                seg.file.set_len(end)
            } else {
                Ok(())
            }
        });
        if let Err(e) = written {
            // As in `append_record`: `seg.len` is authoritative, the truncate keeps the file
            // tidy.
            let _ = seg.file.set_len(start);
            seg.zeroed = start;
            return Err(Error::io(&format!("reserve in {}", path.display()), &e));
        }
        seg.len = end;
        seg.zeroed = seg.zeroed.max(end);
        self.dirty.insert(id);
        Ok((
            Location {
                segment: id,
                offset: start + prefix.len() as u64,
                len,
                crc,
            },
            identity,
        ))
    }

    /// Voids a commit record whose commit failed after it was appended (its metadata could
    /// not be written, e.g. a full device): its payload is overwritten with zeros in place
    /// (no new space needed), so it no longer matches its checksum and recovery skips it as
    /// damaged instead of replaying a commit its caller was told failed. A failure to do so
    /// poisons the log (fail-stop), since the record might otherwise be replayed.
    pub fn void_commit(&mut self, record: &Location) -> Result<()> {
        let seg = self
            .segments
            .get(&record.segment)
            .ok_or_else(|| Error::internal(format!("segment {} vanished", record.segment)))?;
        let zeros = vec![0u8; record.len as usize];
        if let Err(e) = seg.file.write_all_at(&zeros, record.offset) {
            self.poison();
            return Err(Error::new(
                ErrorKind::Io,
                format!("void a failed commit's record: {e}; {POISONED}"),
            ));
        }
        self.dirty.insert(record.segment);
        Ok(())
    }

    fn append_record(
        &mut self,
        object: u64,
        txn: u64,
        region: &Region,
        payload: &[u8],
    ) -> Result<Location> {
        self.check_poisoned()?;
        region.validate()?;
        let crc = crc32c::crc32c(payload);
        let prefix = record::encode_prefix(object, txn, region, payload.len() as u64, crc);
        let rec_len = (prefix.len() + payload.len()) as u64;
        let id = self.segment_for(rec_len)?;
        let path = self.segment_path(id);
        let seg = self
            .segments
            .get_mut(&id)
            .ok_or_else(|| Error::internal(format!("segment {id} vanished")))?;
        let start = seg.len;
        let payload_at = start + prefix.len() as u64;
        if rec_len <= PREZERO_MAX_RECORD && start + rec_len > seg.zeroed {
            let from = seg.zeroed.max(start);
            let to = (start + rec_len + zero_ahead(rec_len))
                .min(self.opts.segment_bytes.max(start + rec_len));
            // Best effort: on failure (a full device) the record is simply appended.
            if seg
                .file
                .write_all_at(&vec![0u8; (to - from) as usize], from)
                .is_ok()
            {
                seg.zeroed = to;
            }
        }
        let written = if payload.len() <= ONE_WRITE_MAX {
            // One syscall instead of two: for a small record copying the payload behind its
            // header costs less than a second pwrite.
            let mut rec = prefix;
            rec.extend_from_slice(payload);
            seg.file.write_all_at(&rec, start)
        } else {
            seg.file
                .write_all_at(&prefix, start)
                .and_then(|()| seg.file.write_all_at(payload, payload_at))
        };
        if let Err(e) = written {
            // `seg.len` is authoritative, so even if this truncate fails the partial record is
            // overwritten by the next append or cut off by recovery; truncating just keeps the
            // file well-formed and stops commit from flushing garbage.
            let _ = seg.file.set_len(start);
            seg.zeroed = start;
            return Err(Error::io(&format!("append to {}", path.display()), &e));
        }
        seg.len = start + rec_len;
        seg.zeroed = seg.zeroed.max(seg.len);
        self.dirty.insert(id);
        // Write-behind: start writeback of this record now (asynchronous, does not wait), so
        // the fdatasync at the next commit finds little left to write and the disk works
        // while the network still delivers the rest of the batch.
        if rec_len >= WRITE_BEHIND_MIN {
            seg.file.write_behind(start, rec_len);
        }
        Ok(Location {
            segment: id,
            offset: payload_at,
            len: payload.len() as u64,
            crc,
        })
    }

    /// Writes the header of the record reserved at `loc` (object, txn, region as reserved)
    /// again with payload checksum `crc`: for a record reserved before its writer knew the
    /// checksum (a client that checksums its payload as it writes it into the log, issue
    /// 11), before the record's commit, whose sync then covers the new header. Until then the
    /// header's checksum is a placeholder, so a crash leaves a record that recovery skips as
    /// damaged, like any reservation never committed.
    pub fn set_reserved_crc(
        &mut self,
        object: u64,
        txn: u64,
        region: &Region,
        loc: &Location,
        crc: u32,
    ) -> Result<()> {
        self.check_poisoned()?;
        let prefix = record::encode_prefix(object, txn, region, loc.len, crc);
        let path = self.segment_path(loc.segment);
        let seg = self
            .segments
            .get(&loc.segment)
            .ok_or_else(|| Error::invalid(format!("{} is not part of the log", path.display())))?;
        let start = loc.offset.checked_sub(prefix.len() as u64);
        let (Some(start), true) = (start, loc.offset.saturating_add(loc.len) <= seg.len) else {
            return Err(Error::invalid(format!(
                "no record reserved at {} of {}",
                loc.offset,
                path.display()
            )));
        };
        seg.file
            .write_all_at(&prefix, start)
            .map_err(|e| Error::io(&format!("rewrite a header in {}", path.display()), &e))?;
        self.dirty.insert(loc.segment);
        Ok(())
    }
}
