//! The segment log: appends go to the OS page cache, `commit` makes them durable and visible
//! to recovery by atomically replacing the MANIFEST. Anything not covered by the MANIFEST at
//! open time is discarded, so a crash at any point leaves exactly the last commit.

use crate::manifest::{self, Manifest, SegmentEntry, StoreError, MANIFEST_TMP};
use crate::record::{self, parse_segment_file_name, scan_segment_in, segment_file_name, Location};
use pdcx_core::{Error, ErrorKind, Region, Result};
use pdcx_fsio::{crash, Fs, FsFile, LockGuard, OpenMode};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Records at least this large start their writeback as soon as they are appended.
const WRITE_BEHIND_MIN: u64 = 256 << 10;

/// Why a poisoned log refuses writes. Never retry an fsync and call the data safe: after a
/// failed fsync Linux may have dropped the dirty pages and reports success next time.
pub const POISONED: &str =
    "the log's device failed an fsync, so this server no longer accepts writes \
(fail-stop: data committed before the failure is still served); check the device, then restart \
the server, which recovers the last durable commit";

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
            segment_bytes: 1 << 30,
            fs: pdcx_fsio::os(),
        }
    }
}

/// What [`SegmentLog::open`] found and cleaned up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    pub segments: usize,
    pub committed_bytes: u64,
    /// Uncommitted bytes dropped: tails truncated off listed segments plus the whole size of
    /// removed unlisted segments.
    pub discarded_bytes: u64,
    pub removed_segments: usize,
}

struct Segment {
    file: Arc<dyn FsFile>,
    len: u64,
    committed: u64,
}

/// What one commit makes durable; see [`SegmentLog::prepare_commit`].
pub struct CommitPlan {
    files: Vec<(u64, PathBuf, Arc<dyn FsFile>)>,
    manifest: Manifest,
}

impl CommitPlan {
    /// fdatasync every segment of the plan. Needs no lock on the log.
    pub fn sync(&self) -> Result<()> {
        for (_, path, file) in &self.files {
            if let Err(e) = file.sync_data() {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("fdatasync {}: {e}; {POISONED}", path.display()),
                ));
            }
        }
        crash::point("log.after_segment_sync");
        Ok(())
    }
}

pub struct SegmentLog {
    dir: PathBuf,
    opts: LogOptions,
    fs: Arc<dyn Fs>,
    segments: BTreeMap<u64, Segment>,
    /// Segments written or created since the last commit.
    dirty: BTreeSet<u64>,
    poisoned: bool,
    /// Held for the life of the log so a second process cannot delete our uncommitted tail.
    _lock: LockGuard,
}

fn lock_dir(fs: &dyn Fs, dir: &Path) -> Result<LockGuard> {
    let path = dir.join("LOCK");
    match fs.lock(&path) {
        Ok(g) => Ok(g),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(Error::new(
            ErrorKind::Unavailable,
            format!("log {} is already open in another process", dir.display()),
        )),
        Err(e) => Err(Error::io(&format!("lock {}", path.display()), &e)),
    }
}

fn missing(path: &Path, committed: u64, what: &str) -> Error {
    Error::new(
        ErrorKind::Io,
        format!(
            "{} {what} but MANIFEST says {committed} bytes of it are committed: committed data is missing",
            path.display()
        ),
    )
}

impl SegmentLog {
    /// Opens or creates the log in `dir`. Recovery: segments not in the MANIFEST are deleted,
    /// listed segments are truncated to their committed length, and the records of the last
    /// segment are verified. Missing committed bytes or a bad checksum inside the committed
    /// range are errors, never silently dropped. Nothing is changed on disk until every listed
    /// segment has passed those checks, so a failed open leaves the evidence in place.
    pub fn open(dir: &Path, opts: LogOptions) -> Result<(SegmentLog, Recovery)> {
        let fs = opts.fs.clone();
        fs.create_dir_all(dir)
            .map_err(|e| Error::io(&format!("create {}", dir.display()), &e))?;
        let lock = lock_dir(&*fs, dir)?;
        let listed = manifest::load_in(&*fs, dir)?.map_or_else(Vec::new, |m| m.segments);
        let mut rec = Recovery {
            segments: listed.len(),
            ..Recovery::default()
        };

        let mut segments = BTreeMap::new();
        for entry in &listed {
            let path = dir.join(segment_file_name(entry.id));
            let file = match fs.open(&path, OpenMode::ReadWrite) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(missing(&path, entry.committed_len, "does not exist"))
                }
                Err(e) => return Err(Error::io(&format!("open {}", path.display()), &e)),
            };
            let len = file
                .size()
                .map_err(|e| Error::io(&format!("stat {}", path.display()), &e))?;
            if len < entry.committed_len {
                return Err(missing(
                    &path,
                    entry.committed_len,
                    &format!("is {len} bytes"),
                ));
            }
            let seg = Segment {
                file,
                len,
                committed: entry.committed_len,
            };
            segments.insert(entry.id, seg);
        }
        // Earlier segments were verified when they were the last one; re-reading every
        // segment at startup would cost a full pass over the data.
        if let Some(last) = listed.last() {
            let path = dir.join(segment_file_name(last.id));
            let (_, valid) = scan_segment_in(&*fs, &path, Some(last.committed_len))?;
            if valid != last.committed_len {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "{}: record at offset {valid} is corrupt (checksum or header) inside the committed range of {} bytes",
                        path.display(),
                        last.committed_len
                    ),
                ));
            }
        }

        let names = fs
            .list_dir(dir)
            .map_err(|e| Error::io(&format!("list {}", dir.display()), &e))?;
        for name in names {
            let Some(id) = parse_segment_file_name(&name) else {
                continue;
            };
            if segments.contains_key(&id) {
                continue;
            }
            let path = dir.join(&name);
            let len = fs.size(&path).ok().flatten().unwrap_or(0);
            fs.remove_file(&path)
                .map_err(|e| Error::io(&format!("remove {}", path.display()), &e))?;
            rec.removed_segments += 1;
            rec.discarded_bytes += len;
        }
        fs.remove_if_exists(&dir.join(MANIFEST_TMP))
            .map_err(|e| Error::io("remove leftover MANIFEST.tmp", &e))?;
        for (&id, seg) in segments.iter_mut() {
            if seg.len > seg.committed {
                let path = dir.join(segment_file_name(id));
                let ctx = format!("truncate uncommitted tail of {}", path.display());
                seg.file
                    .set_len(seg.committed)
                    .and_then(|()| seg.file.sync_data())
                    .map_err(|e| Error::io(&ctx, &e))?;
                rec.discarded_bytes += seg.len - seg.committed;
                seg.len = seg.committed;
            }
            rec.committed_bytes += seg.committed;
        }

        let log = SegmentLog {
            dir: dir.to_path_buf(),
            opts,
            fs,
            segments,
            dirty: BTreeSet::new(),
            poisoned: false,
            _lock: lock,
        };
        Ok((log, rec))
    }

    fn check_poisoned(&self) -> Result<()> {
        if self.poisoned {
            return Err(Error::new(ErrorKind::Io, POISONED));
        }
        Ok(())
    }

    /// The segment a record of `rec_len` bytes goes to, creating the next one if needed.
    fn segment_for(&mut self, rec_len: u64) -> Result<u64> {
        let next = match self.segments.last_key_value() {
            Some((&id, seg))
                if seg.len == 0 || seg.len.saturating_add(rec_len) <= self.opts.segment_bytes =>
            {
                return Ok(id)
            }
            Some((&id, _)) => id + 1,
            None => 1,
        };
        let path = self.segment_path(next);
        let file = self
            .fs
            .open(&path, OpenMode::CreateNew)
            .map_err(|e| Error::io(&format!("create {}", path.display()), &e))?;
        let seg = Segment {
            file,
            len: 0,
            committed: 0,
        };
        self.segments.insert(next, seg);
        // Dirty even while empty: its directory entry must be made durable by the next commit.
        self.dirty.insert(next);
        Ok(next)
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
        let written = seg
            .file
            .write_all_at(&prefix, start)
            .and_then(|()| seg.file.write_all_at(payload, payload_at));
        if let Err(e) = written {
            // `seg.len` is authoritative, so even if this truncate fails the partial record is
            // overwritten by the next append or cut off by recovery; truncating just keeps the
            // file well-formed and stops commit from flushing garbage.
            let _ = seg.file.set_len(start);
            return Err(Error::io(&format!("append to {}", path.display()), &e));
        }
        seg.len = start + rec_len;
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

    /// The consistency point. In this exact order:
    /// 1. fdatasync every segment written (or created) since the last commit;
    /// 2. write MANIFEST.tmp with the current segment lengths and fsync it;
    /// 3. rename MANIFEST.tmp over MANIFEST;
    /// 4. fsync the directory (making the rename and any new segment files durable).
    ///
    /// The manifest must never name bytes that are not yet on disk, hence data before
    /// manifest. If any fsync fails the log is poisoned: this and every later append/commit
    /// fail, because after a failed fsync the kernel may have dropped the dirty pages and a
    /// retried fsync would report success for data that is gone. A failed write or rename
    /// leaves the old MANIFEST in place and may simply be retried. Nothing appended since the
    /// last commit makes this a no-op.
    pub fn commit(&mut self) -> Result<()> {
        match self.prepare_commit()? {
            None => Ok(()),
            Some(plan) => {
                let synced = plan.sync();
                self.finish_commit(plan, synced)
            }
        }
    }

    /// First part of [`commit`](Self::commit), under the caller's lock: snapshots what the
    /// commit covers (the dirty segments and every segment's current length). The slow part,
    /// [`CommitPlan::sync`], needs no access to the log, so appends can go on meanwhile; the
    /// manifest then names exactly the snapshotted lengths, never bytes appended later.
    pub fn prepare_commit(&mut self) -> Result<Option<CommitPlan>> {
        self.check_poisoned()?;
        if self.dirty.is_empty() {
            return Ok(None);
        }
        let mut files = Vec::with_capacity(self.dirty.len());
        for &id in &self.dirty {
            let seg = self
                .segments
                .get(&id)
                .ok_or_else(|| Error::internal(format!("segment {id} vanished")))?;
            files.push((id, self.segment_path(id), seg.file.clone()));
        }
        let manifest = Manifest {
            version: manifest::VERSION,
            segments: self
                .segments
                .iter()
                .map(|(&id, s)| SegmentEntry {
                    id,
                    committed_len: s.len,
                })
                .collect(),
        };
        self.dirty.clear();
        Ok(Some(CommitPlan { files, manifest }))
    }

    /// Last part of [`commit`](Self::commit), under the caller's lock again: poisons the log
    /// if the sync failed, else publishes the manifest of the plan.
    pub fn finish_commit(&mut self, plan: CommitPlan, synced: Result<()>) -> Result<()> {
        let retry = |log: &mut Self| {
            for (id, _, _) in &plan.files {
                if log.segments.contains_key(id) {
                    log.dirty.insert(*id);
                }
            }
        };
        if let Err(e) = synced {
            self.poisoned = true;
            return Err(e);
        }
        self.check_poisoned()?;
        // A segment retired while this plan synced must not be listed again.
        let mut listed = plan.manifest.clone();
        listed
            .segments
            .retain(|e| self.segments.contains_key(&e.id));
        match manifest::store_in(&*self.fs, &self.dir, &listed) {
            Ok(()) => {}
            Err(StoreError::Write(e)) => {
                retry(self);
                return Err(e);
            }
            Err(StoreError::Sync(what, e)) => {
                self.poisoned = true;
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("{what}: {e}; {POISONED}"),
                ));
            }
        }
        for entry in &plan.manifest.segments {
            if let Some(seg) = self.segments.get_mut(&entry.id) {
                seg.committed = seg.committed.max(entry.committed_len);
            }
        }
        Ok(())
    }

    /// Removes sealed, fully committed segments whose every record now lives elsewhere (the
    /// caller has made copies durable on a storage tier). The MANIFEST is replaced first
    /// (fsynced, renamed, directory fsynced), then the files are unlinked; a crash in between
    /// leaves unlisted files, which the next open deletes. The active (last) segment and
    /// segments with uncommitted or unsynced bytes are refused. Returns the bytes freed.
    pub fn retire(&mut self, ids: &[u64]) -> Result<u64> {
        self.check_poisoned()?;
        let last = self.segments.last_key_value().map(|(&id, _)| id);
        for id in ids {
            let seg = self
                .segments
                .get(id)
                .ok_or_else(|| Error::invalid(format!("segment {id} is not part of the log")))?;
            if Some(*id) == last || self.dirty.contains(id) || seg.len != seg.committed {
                return Err(Error::invalid(format!(
                    "segment {id} is active or has uncommitted bytes; only sealed segments can be retired"
                )));
            }
        }
        let manifest = Manifest {
            version: manifest::VERSION,
            segments: self
                .segments
                .iter()
                .filter(|(id, _)| !ids.contains(id))
                .map(|(&id, s)| SegmentEntry {
                    id,
                    committed_len: s.committed,
                })
                .collect(),
        };
        crash::point("retire.before_manifest");
        match manifest::store_in(&*self.fs, &self.dir, &manifest) {
            Ok(()) => {}
            Err(StoreError::Write(e)) => return Err(e),
            Err(StoreError::Sync(what, e)) => {
                self.poisoned = true;
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("{what}: {e}; {POISONED}"),
                ));
            }
        }
        crash::point("retire.after_manifest");
        let mut freed = 0;
        for id in ids {
            if let Some(seg) = self.segments.remove(id) {
                freed += seg.len;
                // Already unlisted: if the unlink fails, the next open removes the file.
                let _ = self.fs.remove_file(&self.segment_path(*id));
            }
        }
        Ok(freed)
    }

    /// Ids of segments that no longer take appends and whose bytes are all committed.
    pub fn sealed_segments(&self) -> Vec<u64> {
        let last = self.segments.last_key_value().map(|(&id, _)| id);
        self.segments
            .iter()
            .filter(|(id, s)| {
                Some(**id) != last && !self.dirty.contains(id) && s.len == s.committed
            })
            .map(|(&id, _)| id)
            .collect()
    }

    /// True while `segment` is part of the log (not retired).
    pub fn has_segment(&self, segment: u64) -> bool {
        self.segments.contains_key(&segment)
    }

    /// Reads `buf.len()` bytes at `offset` of `segment`. Errors if that is past the log's end.
    pub fn read_at(&self, segment: u64, offset: u64, buf: &mut [u8]) -> Result<()> {
        let path = self.segment_path(segment);
        let seg = self.segments.get(&segment).ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!("{} is not part of the log", path.display()),
            )
        })?;
        let end = offset.checked_add(buf.len() as u64);
        if !matches!(end, Some(end) if end <= seg.len) {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "read of {} bytes at {offset} is past the end of {} ({} bytes)",
                    buf.len(),
                    path.display(),
                    seg.len
                ),
            ));
        }
        seg.file
            .read_exact_at(buf, offset)
            .map_err(|e| Error::io(&format!("read {} at {offset}", path.display()), &e))
    }

    /// Reads a whole payload and verifies its crc.
    pub fn read_payload(&self, loc: &Location) -> Result<Vec<u8>> {
        let len = usize::try_from(loc.len)
            .map_err(|_| Error::invalid(format!("payload of {} bytes is too large", loc.len)))?;
        let mut buf = vec![0u8; len];
        self.read_at(loc.segment, loc.offset, &mut buf)?;
        let crc = crc32c::crc32c(&buf);
        if crc != loc.crc {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "payload crc mismatch in {} at offset {} ({} bytes): stored {:#010x}, read {crc:#010x}",
                    self.segment_path(loc.segment).display(),
                    loc.offset,
                    loc.len,
                    loc.crc
                ),
            ));
        }
        Ok(buf)
    }

    /// True when `loc` lies within committed (MANIFEST-covered) bytes.
    pub fn is_committed(&self, loc: &Location) -> bool {
        self.segments.get(&loc.segment).is_some_and(|s| {
            loc.offset
                .checked_add(loc.len)
                .is_some_and(|end| end <= s.committed)
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

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn segment_path(&self, segment: u64) -> PathBuf {
        self.dir.join(segment_file_name(segment))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{scan_segment, RecordInfo};
    use std::fs::{self, File};
    use std::os::unix::fs::FileExt;

    fn r(o: &[u64], c: &[u64]) -> Region {
        Region::new(o.to_vec(), c.to_vec()).unwrap()
    }

    fn open(dir: &Path) -> (SegmentLog, Recovery) {
        SegmentLog::open(dir, LogOptions::default()).unwrap()
    }

    fn payload(seed: u8, n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| seed.wrapping_mul(31).wrapping_add(i as u8))
            .collect()
    }

    fn objects(path: &Path) -> Vec<u64> {
        let (recs, _) = scan_segment(path, None).unwrap();
        recs.iter().map(|r| r.object).collect()
    }

    #[test]
    fn records_survive_commit_and_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let (mut log, rec) = open(&dir);
        assert_eq!(rec, Recovery::default());
        assert_eq!(log.total_bytes(), 0);
        log.commit().unwrap();
        assert!(
            !log.segment_path(1).exists(),
            "an empty log needs no segment"
        );

        let regions = [r(&[0], &[10]), r(&[1, 2, 3], &[2, 3, 4]), r(&[5], &[1])];
        let mut written = Vec::new();
        for (i, region) in regions.iter().enumerate() {
            let data = payload(i as u8, 100 + 37 * i);
            let location = log
                .append(i as u64 + 1, 50 + i as u64, region, &data)
                .unwrap();
            assert!(!log.is_committed(&location));
            let info = RecordInfo {
                object: i as u64 + 1,
                txn: 50 + i as u64,
                region: region.clone(),
                location,
            };
            written.push((info, data));
        }
        log.commit().unwrap();
        assert!(written.iter().all(|(i, _)| log.is_committed(&i.location)));
        let total = log.total_bytes();
        drop(log);

        let (log, rec) = open(&dir);
        let want = Recovery {
            segments: 1,
            committed_bytes: total,
            discarded_bytes: 0,
            removed_segments: 0,
        };
        assert_eq!(rec, want);
        let (recs, valid) = scan_segment(&log.segment_path(1), None).unwrap();
        assert_eq!(valid, total);
        assert_eq!(
            recs,
            written.iter().map(|(i, _)| i.clone()).collect::<Vec<_>>()
        );
        for (info, data) in &written {
            assert_eq!(&log.read_payload(&info.location).unwrap(), data);
        }
        let mut four = [0u8; 4];
        let loc = written[1].0.location;
        log.read_at(1, loc.offset + 2, &mut four).unwrap();
        assert_eq!(&four[..], &written[1].1[2..6]);
        assert!(log.read_at(1, total - 2, &mut four).is_err());
        assert!(log.read_at(9, 0, &mut four).is_err());
    }

    #[test]
    fn torn_uncommitted_record_is_discarded_and_log_continues() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut log, _) = open(tmp.path());
        log.append(1, 1, &r(&[0], &[8]), &payload(1, 64)).unwrap();
        log.append(2, 1, &r(&[0, 0], &[2, 4]), &payload(2, 64))
            .unwrap();
        log.commit().unwrap();
        let end2 = log.total_bytes();
        let loc3 = log.append(3, 2, &r(&[8], &[8]), &payload(3, 200)).unwrap();
        let path = log.segment_path(1);
        drop(log);
        // A crash in the middle of writing record 3's payload.
        let torn_len = loc3.offset + 50;
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(torn_len)
            .unwrap();

        let (mut log, rec) = open(tmp.path());
        assert_eq!(log.total_bytes(), end2);
        assert_eq!(rec.discarded_bytes, torn_len - end2);
        assert_eq!(fs::metadata(&path).unwrap().len(), end2);
        let loc4 = log.append(4, 3, &r(&[8], &[8]), &payload(4, 64)).unwrap();
        log.commit().unwrap();
        drop(log);
        let (log, rec) = open(tmp.path());
        assert_eq!(rec.discarded_bytes, 0);
        assert_eq!(objects(&path), [1, 2, 4]);
        assert_eq!(log.read_payload(&loc4).unwrap(), payload(4, 64));
    }

    #[test]
    fn split_commit_covers_only_what_was_appended_before_prepare() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut log, _) = open(tmp.path());
        let first = log.append(1, 1, &r(&[0], &[4]), b"aaaa").unwrap();
        let plan = log.prepare_commit().unwrap().expect("something to commit");
        // Appended while the sync of the plan runs without the log lock.
        let during = log.append(2, 2, &r(&[4], &[4]), b"bbbb").unwrap();
        let synced = plan.sync();
        log.finish_commit(plan, synced).unwrap();
        assert!(log.is_committed(&first));
        assert!(
            !log.is_committed(&during),
            "bytes after the snapshot stay uncommitted"
        );
        assert!(
            log.prepare_commit().unwrap().is_some(),
            "the later append is still dirty"
        );
        drop(log);
        let (log, rec) = open(tmp.path());
        assert!(rec.discarded_bytes > 0);
        assert_eq!(objects(&log.segment_path(1)), [1]);
    }

    #[test]
    fn uncommitted_tail_is_dropped_on_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut log, _) = open(tmp.path());
        log.append(1, 1, &r(&[0], &[4]), b"aaaa").unwrap();
        log.commit().unwrap();
        let committed = log.total_bytes();
        let kept = log.append(2, 2, &r(&[4], &[4]), b"bbbb").unwrap();
        log.append(3, 2, &r(&[8], &[4]), b"cccc").unwrap();
        let appended = log.total_bytes() - committed;
        log.commit().unwrap();
        log.append(4, 3, &r(&[8], &[4]), b"dddd").unwrap();
        let tail = log.total_bytes() - committed - appended;
        drop(log);
        let (log, rec) = open(tmp.path());
        assert_eq!(rec.committed_bytes, committed + appended);
        assert_eq!(rec.discarded_bytes, tail);
        assert_eq!(objects(&log.segment_path(1)), [1, 2, 3]);
        assert_eq!(log.read_payload(&kept).unwrap(), b"bbbb");
    }

    #[test]
    fn corrupt_payload_fails_read_scan_and_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut log, _) = open(tmp.path());
        let a = log.append(1, 1, &r(&[0], &[16]), &payload(1, 16)).unwrap();
        let b = log.append(2, 1, &r(&[16], &[16]), &payload(2, 16)).unwrap();
        log.commit().unwrap();
        let path = log.segment_path(1);
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .write_all_at(&[0xff], b.offset + 3)
            .unwrap();
        assert!(log.read_payload(&a).is_ok());
        let e = log.read_payload(&b).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io);
        assert!(e.message.contains("crc mismatch") && e.message.contains("seg-00000001.log"));
        let (recs, valid) = scan_segment(&path, None).unwrap();
        assert_eq!((recs.len(), valid), (1, a.offset + a.len));
        drop(log);
        let e = SegmentLog::open(tmp.path(), LogOptions::default())
            .err()
            .unwrap();
        assert!(e.message.contains("seg-00000001.log"), "{e}");
        assert!(e.message.contains(&format!("offset {valid}")), "{e}");
    }

    #[test]
    fn retired_segments_leave_the_manifest_and_stay_gone_after_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        let opts = || LogOptions {
            segment_bytes: 1000,
            ..LogOptions::default()
        };
        let (mut log, _) = SegmentLog::open(tmp.path(), opts()).unwrap();
        let region = r(&[0], &[100]);
        let locs: Vec<Location> = (0..30u64)
            .map(|i| log.append(i, i, &region, &payload(i as u8, 100)).unwrap())
            .collect();
        // Uncommitted segments cannot be retired.
        let first = locs[0].segment;
        assert!(log.retire(&[first]).is_err());
        log.commit().unwrap();
        let sealed = log.sealed_segments();
        let last = *log.segment_ids().last().unwrap();
        assert!(
            !sealed.contains(&last),
            "the active segment is never sealed"
        );
        assert!(log.retire(&[last]).is_err());
        // A commit prepared before the retirement must not list the retired segment again.
        log.append(99, 99, &region, &payload(9, 100)).unwrap();
        let plan = log.prepare_commit().unwrap().unwrap();
        let freed = log.retire(&sealed[..2]).unwrap();
        assert!(freed > 0);
        let synced = plan.sync();
        log.finish_commit(plan, synced).unwrap();
        assert!(!log.has_segment(sealed[0]) && !log.segment_path(sealed[0]).exists());
        drop(log);
        let (log, rec) = SegmentLog::open(tmp.path(), opts()).unwrap();
        assert_eq!(rec.removed_segments, 0);
        assert!(!log.has_segment(sealed[1]));
        for loc in locs.iter().filter(|l| !sealed[..2].contains(&l.segment)) {
            assert!(log.is_committed(loc));
            log.read_payload(loc).unwrap();
        }
    }

    #[test]
    fn segments_roll_over_and_unlisted_segments_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let opts = || LogOptions {
            segment_bytes: 1000,
            ..LogOptions::default()
        };
        let (mut log, _) = SegmentLog::open(tmp.path(), opts()).unwrap();
        let region = r(&[0], &[100]);
        let mut locs = Vec::new();
        for i in 0..40u64 {
            locs.push(log.append(i, i, &region, &payload(i as u8, 100)).unwrap());
        }
        // Bigger than a segment: gets one of its own instead of failing.
        locs.push(log.append(99, 99, &region, &payload(99, 3000)).unwrap());
        log.commit().unwrap();
        let committed = log.segment_ids();
        assert!(committed.len() >= 6, "{committed:?}");
        assert!(log.segments.values().all(|s| s.len <= 1000 || s.len > 3000));
        for _ in 0..12 {
            log.append(7, 7, &region, &payload(7, 100)).unwrap();
        }
        let all = log.segment_ids();
        assert_eq!(all.len(), committed.len() + 2);
        let extra: Vec<PathBuf> = all[committed.len()..]
            .iter()
            .map(|&i| log.segment_path(i))
            .collect();
        drop(log);

        let (log, rec) = SegmentLog::open(tmp.path(), opts()).unwrap();
        assert_eq!((rec.segments, rec.removed_segments), (committed.len(), 2));
        assert!(extra.iter().all(|p| !p.exists()));
        assert_eq!(log.segment_ids(), committed);
        for (i, loc) in locs.iter().enumerate() {
            let n = if i == 40 { 3000 } else { 100 };
            let seed = if i == 40 { 99 } else { i as u8 };
            assert_eq!(log.read_payload(loc).unwrap(), payload(seed, n));
        }
        let scanned: usize = committed
            .iter()
            .map(|&id| scan_segment(&log.segment_path(id), None).unwrap().0.len())
            .sum();
        assert_eq!(scanned, 41);
    }

    #[test]
    fn missing_committed_data_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut log, _) = open(tmp.path());
        log.append(1, 1, &r(&[0], &[64]), &payload(1, 64)).unwrap();
        log.commit().unwrap();
        let path = log.segment_path(1);
        let len = log.total_bytes();
        drop(log);
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 10)
            .unwrap();
        let e = SegmentLog::open(tmp.path(), LogOptions::default())
            .err()
            .unwrap();
        assert_eq!(e.kind, ErrorKind::Io);
        assert!(
            e.message.contains("seg-00000001.log") && e.message.contains("missing"),
            "{e}"
        );
        fs::remove_file(&path).unwrap();
        let e = SegmentLog::open(tmp.path(), LogOptions::default())
            .err()
            .unwrap();
        assert!(
            e.message.contains("seg-00000001.log") && e.message.contains("missing"),
            "{e}"
        );
    }

    #[test]
    fn corrupt_manifest_is_an_error_not_a_reset() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut log, _) = open(tmp.path());
        log.append(1, 1, &r(&[0], &[4]), b"abcd").unwrap();
        log.commit().unwrap();
        let seg = log.segment_path(1);
        drop(log);
        fs::write(tmp.path().join("MANIFEST"), b"\x00garbage{").unwrap();
        let e = SegmentLog::open(tmp.path(), LogOptions::default())
            .err()
            .unwrap();
        assert!(e.message.contains("MANIFEST"), "{e}");
        assert!(seg.exists());
        assert_eq!(
            fs::read(tmp.path().join("MANIFEST")).unwrap(),
            b"\x00garbage{"
        );
    }

    fn sim_open(fs: &pdcx_fsio::SimFs) -> SegmentLog {
        let opts = LogOptions {
            fs: Arc::new(fs.clone()),
            ..LogOptions::default()
        };
        SegmentLog::open(Path::new("/log"), opts).unwrap().0
    }

    #[test]
    fn failed_append_is_rolled_back_and_log_stays_usable() {
        let disk = pdcx_fsio::SimFs::new();
        let mut log = sim_open(&disk);
        let first = log.append(1, 1, &r(&[0], &[4]), b"abcd").unwrap();
        let end = log.total_bytes();
        // Room for the next record's prefix but not its payload: ENOSPC mid-record.
        disk.set_faults(pdcx_fsio::Faults {
            capacity: Some(end + first.offset + 2),
            ..Default::default()
        });
        let e = log.append(2, 1, &r(&[4], &[4]), b"efgh").unwrap_err();
        assert_eq!(e.kind, ErrorKind::NoSpace);
        assert_eq!(log.total_bytes(), end);
        assert_eq!(disk.size(&log.segment_path(1)).unwrap(), Some(end));
        disk.set_faults(pdcx_fsio::Faults::default());
        let loc = log.append(3, 2, &r(&[4], &[4]), b"ijkl").unwrap();
        log.commit().unwrap();
        drop(log);
        let log = sim_open(&disk.power_cut(None));
        let (recs, _) = scan_segment_in(&disk, &log.segment_path(1), None).unwrap();
        assert_eq!(recs.iter().map(|r| r.object).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(log.read_payload(&loc).unwrap(), b"ijkl");
    }

    #[test]
    fn failed_sync_fails_stop_serves_committed_data_and_restart_recovers() {
        let disk = pdcx_fsio::SimFs::new();
        let mut log = sim_open(&disk);
        let kept = log.append(1, 1, &r(&[0], &[4]), b"abcd").unwrap();
        log.commit().unwrap();
        log.append(2, 1, &r(&[0], &[4]), b"efgh").unwrap();
        disk.set_faults(pdcx_fsio::Faults {
            sync_eio: true,
            ..Default::default()
        });
        let e = log.commit().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io);
        assert!(e.message.contains("device failed"), "{e}");
        // Even once the disk "recovers", nothing may be trusted again: no retry calls it safe.
        disk.set_faults(pdcx_fsio::Faults::default());
        assert!(log.commit().unwrap_err().message.contains("device failed"));
        let e = log.append(3, 1, &r(&[0], &[4]), b"ijkl").unwrap_err();
        assert!(e.message.contains("device failed"));
        // What was durable before the failure is still served.
        assert_eq!(log.read_payload(&kept).unwrap(), b"abcd");
        drop(log);
        // A restart (after a power cut, the worst case) recovers the last durable commit.
        let mut log = sim_open(&disk.power_cut(None));
        assert!(log.is_committed(&kept));
        assert_eq!(log.read_payload(&kept).unwrap(), b"abcd");
        assert_eq!(log.total_bytes(), kept.offset + kept.len);
        log.append(4, 2, &r(&[0], &[4]), b"mnop").unwrap();
        log.commit().unwrap();
    }

    #[test]
    fn second_open_of_same_dir_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let (_log, _) = open(tmp.path());
        let e = SegmentLog::open(tmp.path(), LogOptions::default())
            .err()
            .unwrap();
        assert_eq!(e.kind, ErrorKind::Unavailable);
    }
}
