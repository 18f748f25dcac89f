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

use crate::commit_record::{self, CommitEntry, COMMIT_OBJECT};
use crate::manifest::{self, Manifest, SegmentEntry, StoreError, MANIFEST_TMP};
use crate::record::{
    self, parse_segment_file_name, scan_tail, segment_file_name, Location, Scanned,
};
use pdcx_core::{Error, ErrorKind, Region, Result};
use pdcx_fsio::{crash, Fs, FsFile, LockGuard, OpenMode};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Records with payloads up to this size are written with one `pwrite` (header and payload
/// copied together); larger ones with two, straight from the caller's buffer.
const ONE_WRITE_MAX: usize = 16 << 10;

/// Small records are appended into zeros written ahead of them, up to this many bytes at a
/// time ([`zero_ahead`]): an fdatasync after a write that grows the file must also commit the
/// new size (a journal commit), one after a write into already-written blocks only flushes
/// data (~50 us less per small `local` commit on the test disk: `bench/RESULTS.md`, issue
/// 10). Large records are not: zeroing ahead of them would write their bytes twice.
/// Recovery's scan stops at the zeros (no record starts with them) and cuts them off.
const PREZERO: u64 = 1 << 20;
/// The least zeroed ahead at a time.
const PREZERO_MIN: u64 = 64 << 10;
/// Records up to this size get zeros written ahead of them.
const PREZERO_MAX_RECORD: u64 = 64 << 10;

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

/// What one sync makes durable; see [`SegmentLog::prepare_commit`].
pub struct CommitPlan {
    /// Segment, path, file, and its length when the plan was made.
    files: Vec<(u64, PathBuf, Arc<dyn FsFile>, u64)>,
}

impl CommitPlan {
    /// fdatasync every segment of the plan. Needs no lock on the log.
    pub fn sync(&self) -> Result<()> {
        for (_, path, file, _) in &self.files {
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

/// A MANIFEST computed under the log's lock, to be published ([`ManifestPublisher`]),
/// possibly after the lock is released.
pub struct PendingManifest {
    /// Its place in the order MANIFESTs were computed in.
    generation: u64,
    manifest: Manifest,
}

/// Writes MANIFESTs, one at a time and never an older one over a newer one: each is computed
/// under the log's lock from the log's state then, with the next generation number, and a
/// newer one lists everything an older one does (the checkpointed lengths only grow, and a
/// segment leaves only by retirement, which computes a newer one). So a checkpoint publishes
/// its MANIFEST (two fsyncs and a rename) after releasing the log's lock, and appends and
/// reservations go on meanwhile; creating and retiring segments publish theirs holding the
/// lock (they must be listed or unlisted before the log goes on). A failed fsync poisons the
/// log.
pub struct ManifestPublisher {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    poisoned: Arc<AtomicBool>,
    /// The generation of the newest MANIFEST written.
    published: std::sync::Mutex<u64>,
}

impl ManifestPublisher {
    /// Writes `m` unless a newer MANIFEST was written meanwhile (it lists all `m` does).
    pub fn publish(&self, m: PendingManifest) -> Result<()> {
        let mut published = self.published.lock().unwrap_or_else(|p| p.into_inner());
        if m.generation <= *published {
            return Ok(());
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::Io, POISONED));
        }
        match manifest::store_in(&*self.fs, &self.dir, &m.manifest) {
            Ok(()) => {
                *published = m.generation;
                Ok(())
            }
            Err(StoreError::Write(e)) => Err(e),
            Err(StoreError::Sync(what, e)) => {
                self.poisoned.store(true, Ordering::Release);
                Err(Error::new(
                    ErrorKind::Io,
                    format!("{what}: {e}; {POISONED}"),
                ))
            }
        }
    }
}

pub struct SegmentLog {
    dir: PathBuf,
    opts: LogOptions,
    fs: Arc<dyn Fs>,
    segments: BTreeMap<u64, Segment>,
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

/// The end of the last byte in `[from, to)` of `file` that is not zero (`from` if none).
/// How many zeros to write past a small record of `rec_len` bytes appended past the zeroed
/// end: room for about 64 more like it, within [`PREZERO_MIN`, `PREZERO`]. Sized by the
/// record, because a log that takes large one-copy writes (reserved, never zeroed) between
/// its small records (a commit record per file) zeroes anew after each large one:
/// a fixed 1 MiB was a quarter more bytes to write back for every 4 MiB file.
fn zero_ahead(rec_len: u64) -> u64 {
    rec_len.saturating_mul(64).clamp(PREZERO_MIN, PREZERO)
}

fn written_end(file: &dyn FsFile, from: u64, to: u64) -> io::Result<u64> {
    let mut buf = vec![0u8; (to - from).min(1 << 20) as usize];
    let (mut end, mut at) = (from, from);
    while at < to {
        let n = (to - at).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..n], at)?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b != 0) {
            end = at + i as u64 + 1;
        }
        at += n as u64;
    }
    Ok(end)
}

impl SegmentLog {
    /// Opens or creates the log in `dir`. Recovery: segments not in the MANIFEST are deleted;
    /// the last segment's checkpointed range is verified; every listed segment's tail past its
    /// checkpoint is scanned (see the module doc), its valid part made durable (fdatasync) and
    /// kept, the rest cut off; the commit records found there are returned
    /// ([`Recovery::commits`]). Missing checkpointed bytes or a torn header inside the
    /// checkpointed range are errors, never silently dropped. Nothing is changed on disk until
    /// every listed segment has passed those checks, so a failed open leaves the evidence.
    /// The MANIFEST is not rewritten here: the caller checkpoints once it has replayed the
    /// commits ([`checkpoint`](Self::checkpoint)).
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
        // (segment, valid end) of each listed segment, from its scanned tail.
        let mut valid_ends = Vec::with_capacity(listed.len());
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
            let ctx = |what: &str| format!("{what} {}", path.display());
            // Earlier segments were verified when they were the last one; re-reading every
            // segment at startup would cost a full pass over the data.
            if Some(entry.id) == listed.last().map(|l| l.id) {
                let (_, valid) = scan_tail(&*file, entry.id, 0, entry.committed_len)
                    .map_err(|e| Error::io(&ctx("scan"), &e))?;
                if valid != entry.committed_len {
                    return Err(Error::new(
                        ErrorKind::Io,
                        format!(
                            "{}: record at offset {valid} is corrupt (header) inside the checkpointed range of {} bytes",
                            path.display(),
                            entry.committed_len
                        ),
                    ));
                }
            }
            let (found, valid) = scan_tail(&*file, entry.id, entry.committed_len, len)
                .map_err(|e| Error::io(&ctx("scan the tail of"), &e))?;
            for s in found {
                match s {
                    Scanned::Record(r) if r.object == COMMIT_OBJECT => {
                        let mut payload = vec![0u8; r.location.len as usize];
                        file.read_exact_at(&mut payload, r.location.offset)
                            .map_err(|e| Error::io(&ctx("read a commit record of"), &e))?;
                        let entries = commit_record::decode(&payload).ok_or_else(|| {
                            Error::new(
                                ErrorKind::Io,
                                format!(
                                    "{}: the commit record at offset {} is of an unknown format (written by a newer pdcx?)",
                                    path.display(),
                                    r.location.offset
                                ),
                            )
                        })?;
                        rec.commits.extend(entries);
                    }
                    Scanned::Record(_) => {}
                    Scanned::Damaged(loc) => rec.damaged.push(loc),
                }
            }
            rec.tail_bytes += valid - entry.committed_len;
            valid_ends.push((entry.id, valid));
            let seg = Segment {
                file,
                len,
                synced: valid,
                checkpointed: entry.committed_len,
                zeroed: len,
            };
            segments.insert(entry.id, seg);
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
        for (id, valid) in valid_ends {
            let seg = segments
                .get_mut(&id)
                .ok_or_else(|| Error::internal(format!("segment {id} vanished")))?;
            let path = dir.join(segment_file_name(id));
            let torn = seg.len > valid;
            if torn {
                let ctx = format!("truncate the torn tail of {}", path.display());
                // Zeros written ahead of appends are not lost data: count up to the last
                // byte that is not zero.
                let written =
                    written_end(&*seg.file, valid, seg.len).map_err(|e| Error::io(&ctx, &e))?;
                seg.file.set_len(valid).map_err(|e| Error::io(&ctx, &e))?;
                rec.discarded_bytes += written - valid;
                seg.len = valid;
                seg.zeroed = valid;
            }
            if torn || valid > seg.checkpointed {
                // The valid tail may only be in the page cache (the process died, the machine
                // did not): make it durable before anything relies on it.
                let ctx = format!("fdatasync the tail of {}", path.display());
                seg.file.sync_data().map_err(|e| Error::io(&ctx, &e))?;
            }
            rec.committed_bytes += valid;
        }

        let poisoned = Arc::new(AtomicBool::new(false));
        let manifests = Arc::new(ManifestPublisher {
            fs: fs.clone(),
            dir: dir.to_path_buf(),
            poisoned: poisoned.clone(),
            published: std::sync::Mutex::new(0),
        });
        let log = SegmentLog {
            dir: dir.to_path_buf(),
            opts,
            fs,
            segments,
            dirty: BTreeSet::new(),
            poisoned,
            manifests,
            manifest_generation: 0,
            _lock: lock,
        };
        Ok((log, rec))
    }

    fn check_poisoned(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::Io, POISONED));
        }
        Ok(())
    }

    fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    /// The MANIFEST of the log's state now, less the segments `leaving`, as the next
    /// generation.
    fn next_manifest(&mut self, leaving: &[u64]) -> PendingManifest {
        self.manifest_generation += 1;
        PendingManifest {
            generation: self.manifest_generation,
            manifest: Manifest {
                version: manifest::VERSION,
                segments: self
                    .segments
                    .iter()
                    .filter(|(id, _)| !leaving.contains(id))
                    .map(|(&id, s)| SegmentEntry {
                        id,
                        committed_len: s.checkpointed,
                    })
                    .collect(),
            },
        }
    }

    /// Who publishes this log's MANIFESTs, usable without the log's lock.
    pub fn manifests(&self) -> Arc<ManifestPublisher> {
        self.manifests.clone()
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
            synced: 0,
            checkpointed: 0,
            zeroed: 0,
        };
        self.segments.insert(next, seg);
        // Listed before anything is appended to it (publishing the MANIFEST also fsyncs the
        // directory, making the new file's entry durable): recovery scans only listed segments,
        // and a sync of the file alone would not make its name durable. Once per segment.
        if let Err(e) = self.store_manifest() {
            self.segments.remove(&next);
            let _ = self.fs.remove_file(&path);
            return Err(e);
        }
        Ok(next)
    }

    /// Publishes the MANIFEST: every segment with its checkpointed length. A failed fsync
    /// poisons the log.
    fn store_manifest(&mut self) -> Result<()> {
        let m = self.next_manifest(&[]);
        self.manifests.publish(m)
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
    /// Returns where the payload goes and the segment file's (st_dev, st_ino), which the
    /// client checks so it never writes into another file at the same path. Fails with
    /// `Unavailable` when the log's files are not real files (a simulated disk).
    pub fn reserve(
        &mut self,
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
        let id = self.segment_for(rec_len)?;
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

    /// Everything appended so far made durable and checkpointed: a sync, then a MANIFEST
    /// naming every segment's synced length. For callers without metadata of their own to
    /// replay (tests, tools); the server syncs per commit and checkpoints on its own schedule
    /// ([`prepare_commit`](Self::prepare_commit), [`checkpoint`](Self::checkpoint)).
    pub fn commit(&mut self) -> Result<()> {
        if let Some(plan) = self.prepare_commit()? {
            let synced = plan.sync();
            self.finish_commit(plan, synced)?;
        }
        let lengths = self.checkpoint_lengths();
        self.checkpoint(&lengths)
    }

    /// First part of a sync, under the caller's lock: snapshots the segments written since
    /// the last sync and their lengths. The slow part, [`CommitPlan::sync`] (fdatasync), needs
    /// no access to the log, so appends go on meanwhile; [`finish_commit`](Self::finish_commit)
    /// then marks exactly the snapshotted lengths durable, never bytes appended later.
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
            files.push((id, self.segment_path(id), seg.file.clone(), seg.len));
        }
        self.dirty.clear();
        Ok(Some(CommitPlan { files }))
    }

    /// Last part of a sync, under the caller's lock again: poisons the log if the fdatasync
    /// failed (never retry an fsync), else marks the plan's lengths durable.
    pub fn finish_commit(&mut self, plan: CommitPlan, synced: Result<()>) -> Result<()> {
        if let Err(e) = synced {
            self.poison();
            return Err(e);
        }
        self.check_poisoned()?;
        for (id, _, _, len) in &plan.files {
            if let Some(seg) = self.segments.get_mut(id) {
                seg.synced = seg.synced.max(*len);
            }
        }
        Ok(())
    }

    /// Each segment's durable length where it is past its checkpoint (what a checkpoint now
    /// would record). Empty when there is nothing new to checkpoint.
    pub fn checkpoint_lengths(&self) -> Vec<(u64, u64)> {
        self.segments
            .iter()
            .filter(|(_, s)| s.synced > s.checkpointed)
            .map(|(&id, s)| (id, s.synced))
            .collect()
    }

    /// Publishes a MANIFEST recording `lengths` (from [`checkpoint_lengths`]) as checkpointed:
    /// write MANIFEST.tmp, fsync, rename, fsync the directory. The caller guarantees that
    /// whatever the commit records below those lengths describe is durable elsewhere (the
    /// server: its metadata WAL was fsynced after they were recorded), since recovery no
    /// longer replays them. Lengths of segments retired meanwhile are ignored. Under this
    /// log's lock throughout; a caller that can, publishes after releasing it
    /// ([`prepare_checkpoint`](Self::prepare_checkpoint)).
    ///
    /// [`checkpoint_lengths`]: Self::checkpoint_lengths
    pub fn checkpoint(&mut self, lengths: &[(u64, u64)]) -> Result<()> {
        match self.prepare_checkpoint(lengths)? {
            Some(m) => self.manifests.publish(m),
            None => Ok(()),
        }
    }

    /// [`checkpoint`](Self::checkpoint) in two steps: records `lengths` as checkpointed and
    /// returns the MANIFEST to publish with [`manifests`](Self::manifests), which may be done
    /// without this log's lock. Until it is written, recovery replays a little more than the
    /// log now counts as checkpointed: harmless, since the caller made what those commit
    /// records describe durable before (retirement, which relies on the count, publishes a
    /// newer MANIFEST of its own before unlinking anything). None: nothing to record.
    pub fn prepare_checkpoint(
        &mut self,
        lengths: &[(u64, u64)],
    ) -> Result<Option<PendingManifest>> {
        self.check_poisoned()?;
        if lengths.is_empty() {
            return Ok(None);
        }
        for &(id, len) in lengths {
            if let Some(seg) = self.segments.get_mut(&id) {
                seg.checkpointed = seg.checkpointed.max(len.min(seg.synced));
            }
        }
        Ok(Some(self.next_manifest(&[])))
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
            if Some(*id) == last || self.dirty.contains(id) || seg.len != seg.checkpointed {
                return Err(Error::invalid(format!(
                    "segment {id} is active or has uncommitted bytes; only sealed segments can be retired"
                )));
            }
        }
        let manifest = self.next_manifest(ids);
        crash::point("retire.before_manifest");
        self.manifests.publish(manifest)?;
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

    /// Ids of segments that no longer take appends and whose bytes are all synced and
    /// checkpointed.
    pub fn sealed_segments(&self) -> Vec<u64> {
        let last = self.segments.last_key_value().map(|(&id, _)| id);
        self.segments
            .iter()
            .filter(|(id, s)| {
                Some(**id) != last && !self.dirty.contains(id) && s.len == s.checkpointed
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
    use crate::record::{scan_segment, scan_segment_in, RecordInfo};
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
            ..Recovery::default()
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

    /// Writes `data` into a reserved payload the way a client does: through its own open of
    /// the segment file by path, after checking it is the file the log named.
    fn client_write(log: &SegmentLog, loc: &Location, ident: (u64, u64), data: &[u8]) {
        use std::os::unix::fs::MetadataExt;
        let f = fs::OpenOptions::new()
            .write(true)
            .open(log.segment_path(loc.segment))
            .unwrap();
        let m = f.metadata().unwrap();
        assert_eq!((m.dev(), m.ino()), ident);
        f.write_all_at(data, loc.offset).unwrap();
    }

    #[test]
    fn reserved_record_written_by_another_file_handle_survives_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let (mut log, _) = open(&dir);
        let before = payload(1, 100);
        log.append(1, 1, &r(&[0], &[100]), &before).unwrap();
        let big = payload(2, 300_000);
        let (loc, ident) = log
            .reserve(
                2,
                7,
                &r(&[0], &[300_000]),
                big.len() as u64,
                crc32c::crc32c(&big),
            )
            .unwrap();
        client_write(&log, &loc, ident, &big);
        let after = payload(3, 50);
        let after_loc = log.append(3, 9, &r(&[0], &[50]), &after).unwrap();
        log.commit().unwrap();
        assert_eq!(log.read_payload(&loc).unwrap(), big);
        drop(log);
        let (log, rec) = open(&dir);
        assert!(rec.damaged.is_empty());
        assert_eq!(objects(&log.segment_path(1)), vec![1, 2, 3]);
        assert_eq!(log.read_payload(&loc).unwrap(), big);
        assert_eq!(log.read_payload(&after_loc).unwrap(), after);
    }

    /// A record reserved before its writer knew the checksum (placeholder 0): with its
    /// checksum set before the commit it survives a reopen; one never given its checksum is
    /// damaged and loses only itself.
    #[test]
    fn a_reserved_record_gets_its_checksum_after_its_payload() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let (mut log, _) = open(&dir);
        let big = payload(2, 300_000);
        let region = r(&[0], &[300_000]);
        let (loc, ident) = log.reserve(2, 7, &region, big.len() as u64, 0).unwrap();
        client_write(&log, &loc, ident, &big);
        let crc = crc32c::crc32c(&big);
        log.set_reserved_crc(2, 7, &region, &loc, crc).unwrap();
        let loc = Location { crc, ..loc };
        let other = payload(4, 200_000);
        let (lost, ident) = log.reserve(4, 8, &region, other.len() as u64, 0).unwrap();
        client_write(&log, &lost, ident, &other);
        let after = payload(3, 50);
        let after_loc = log.append(3, 9, &r(&[0], &[50]), &after).unwrap();
        // Synced, not checkpointed: recovery scans (and checks) every record.
        let plan = log.prepare_commit().unwrap().unwrap();
        let synced = plan.sync();
        log.finish_commit(plan, synced).unwrap();
        assert_eq!(log.read_payload(&loc).unwrap(), big);
        drop(log);
        let (log, rec) = open(&dir);
        assert_eq!(rec.damaged.len(), 1, "{:?}", rec.damaged);
        assert_eq!(rec.damaged[0].offset, lost.offset);
        assert_eq!(log.read_payload(&loc).unwrap(), big);
        assert_eq!(log.read_payload(&after_loc).unwrap(), after);
        // Setting a checksum where nothing was reserved is refused.
        let nowhere = Location {
            offset: 1 << 40,
            ..loc
        };
        let mut log = log;
        assert!(log.set_reserved_crc(2, 7, &region, &nowhere, crc).is_err());
    }

    #[test]
    fn reserved_record_never_written_loses_only_itself() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let (mut log, _) = open(&dir);
        let big = payload(2, 200_000);
        let (loc, _) = log
            .reserve(
                2,
                7,
                &r(&[0], &[200_000]),
                big.len() as u64,
                crc32c::crc32c(&big),
            )
            .unwrap();
        // The file already spans the payload, so a checkpoint over it matches the file.
        assert_eq!(
            fs::metadata(log.segment_path(1)).unwrap().len(),
            loc.offset + loc.len
        );
        let after = payload(3, 70_000);
        let after_loc = log.append(3, 9, &r(&[0], &[70_000]), &after).unwrap();
        let plan = log.prepare_commit().unwrap().unwrap();
        let synced = plan.sync();
        log.finish_commit(plan, synced).unwrap();
        drop(log);
        // Recovery scans the unchecked tail: the hole fails its checksum, the record after it
        // is kept.
        let (mut log, rec) = open(&dir);
        assert_eq!(rec.damaged, vec![loc]);
        assert_eq!(log.read_payload(&after_loc).unwrap(), after);
        // A checkpoint over a reservation never written still reopens.
        let (loc2, _) = log
            .reserve(4, 1, &r(&[0], &[100_000]), 100_000, 12345)
            .unwrap();
        log.commit().unwrap();
        drop(log);
        let (log, _) = open(&dir);
        assert!(log.read_payload(&loc2).is_err());
        assert_eq!(log.read_payload(&after_loc).unwrap(), after);
    }

    #[test]
    fn a_voided_commit_record_is_skipped_by_recovery() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let (mut log, _) = open(&dir);
        let data = payload(1, 1000);
        let loc = log.append(5, 1, &r(&[0], &[1000]), &data).unwrap();
        let entry = |seq| CommitEntry {
            object: 5,
            seq,
            region: r(&[0], &[1000]),
            loc,
        };
        let kept = log.append_commit(&[entry(1)]).unwrap();
        let failed = log.append_commit(&[entry(2)]).unwrap();
        log.void_commit(&failed).unwrap();
        let after = log.append_commit(&[entry(3)]).unwrap();
        let plan = log.prepare_commit().unwrap().unwrap();
        let synced = plan.sync();
        log.finish_commit(plan, synced).unwrap();
        assert!(log.is_committed(&after) && log.is_committed(&kept));
        drop(log);
        let (_, rec) = open(&dir);
        let seqs: Vec<u64> = rec.commits.iter().map(|c| c.seq).collect();
        assert_eq!(seqs, vec![1, 3], "the voided commit is not replayed");
        assert_eq!(rec.damaged, vec![failed]);
    }

    #[test]
    fn reserve_refuses_simulated_files_and_commit_object() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut log, _) = open(tmp.path());
        let e = log
            .reserve(COMMIT_OBJECT, 1, &r(&[0], &[8]), 8, 0)
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        let mut log = sim_open(&pdcx_fsio::SimFs::new());
        let e = log.reserve(1, 1, &r(&[0], &[8]), 8, 0).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable);
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
        // The process died, the page cache kept the later append: a whole valid record past
        // the checkpoint is kept (it is garbage unless a commit record names it).
        let (log, rec) = open(tmp.path());
        assert_eq!(rec.discarded_bytes, 0);
        assert!(rec.tail_bytes > 0);
        assert_eq!(objects(&log.segment_path(1)), [1, 2]);
    }

    #[test]
    fn synced_tail_past_the_checkpoint_is_kept_and_a_torn_end_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut log, _) = open(tmp.path());
        log.append(1, 1, &r(&[0], &[4]), b"aaaa").unwrap();
        log.commit().unwrap();
        let checkpointed = log.total_bytes();
        let kept = log.append(2, 2, &r(&[4], &[4]), b"bbbb").unwrap();
        log.append(3, 2, &r(&[8], &[4]), b"cccc").unwrap();
        // A sync without a checkpoint: what a server commit does.
        let plan = log.prepare_commit().unwrap().unwrap();
        let synced = plan.sync();
        log.finish_commit(plan, synced).unwrap();
        assert!(log.is_committed(&kept));
        let durable = log.total_bytes();
        let torn = log.append(4, 3, &r(&[8], &[4]), b"dddd").unwrap();
        let path = log.segment_path(1);
        drop(log);
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(torn.offset + 2)
            .unwrap();
        let (log, rec) = open(tmp.path());
        assert_eq!(rec.committed_bytes, durable);
        assert_eq!(rec.tail_bytes, durable - checkpointed);
        assert_eq!(rec.discarded_bytes, torn.offset + 2 - durable);
        assert_eq!(objects(&log.segment_path(1)), [1, 2, 3]);
        assert_eq!(log.read_payload(&kept).unwrap(), b"bbbb");
    }

    #[test]
    fn a_damaged_payload_in_the_tail_loses_only_its_own_record() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut log, _) = open(tmp.path());
        log.commit().unwrap();
        let a = log.append(1, 1, &r(&[0], &[16]), &payload(1, 16)).unwrap();
        let b = log.append(2, 1, &r(&[16], &[16]), &payload(2, 16)).unwrap();
        let entry = CommitEntry {
            object: 3,
            seq: 7,
            region: r(&[32], &[16]),
            loc: log.append(3, 1, &r(&[32], &[16]), &payload(3, 16)).unwrap(),
        };
        log.append_commit(std::slice::from_ref(&entry)).unwrap();
        let plan = log.prepare_commit().unwrap().unwrap();
        let synced = plan.sync();
        log.finish_commit(plan, synced).unwrap();
        let path = log.segment_path(1);
        drop(log);
        // b's writer changed its bytes while they were written: only b is lost.
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .write_all_at(&[0xff], b.offset + 3)
            .unwrap();
        let (log, rec) = open(tmp.path());
        assert_eq!((rec.damaged, rec.discarded_bytes), (vec![b], 0));
        assert_eq!(rec.commits, vec![entry.clone()]);
        assert_eq!(log.read_payload(&a).unwrap(), payload(1, 16));
        assert!(log.read_payload(&b).is_err());
        assert_eq!(log.read_payload(&entry.loc).unwrap(), payload(3, 16));
        // The reserved id cannot be used by a data record.
        drop(log);
        let (mut log, _) = open(tmp.path());
        assert!(log.append(COMMIT_OBJECT, 1, &r(&[0], &[1]), b"x").is_err());
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
        // A damaged payload inside the checkpointed range costs only that record.
        let (log, _) = SegmentLog::open(tmp.path(), LogOptions::default()).unwrap();
        assert!(log.read_payload(&a).is_ok() && log.read_payload(&b).is_err());
        drop(log);
        // A damaged header there is refused, naming the place.
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .write_all_at(&[0xff], valid + 9)
            .unwrap();
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
        // A file no MANIFEST ever listed (a crash between its creation and its listing).
        let stray = log.segment_path(all[all.len() - 1] + 1);
        fs::write(&stray, payload(1, 300)).unwrap();
        drop(log);

        let (log, rec) = SegmentLog::open(tmp.path(), opts()).unwrap();
        // New segments are listed when created, so their valid records are found.
        assert_eq!((rec.segments, rec.removed_segments), (all.len(), 1));
        assert!(!stray.exists());
        assert_eq!(log.segment_ids(), all);
        for (i, loc) in locs.iter().enumerate() {
            let n = if i == 40 { 3000 } else { 100 };
            let seed = if i == 40 { 99 } else { i as u8 };
            assert_eq!(log.read_payload(loc).unwrap(), payload(seed, n));
        }
        let scanned: usize = all
            .iter()
            .map(|&id| scan_segment(&log.segment_path(id), None).unwrap().0.len())
            .sum();
        assert_eq!(scanned, 41 + 12);
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
    fn small_appends_go_into_zeros_written_ahead_and_recovery_cuts_them() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut log, _) = open(tmp.path());
        let a = log.append(1, 1, &r(&[0], &[4]), b"abcd").unwrap();
        let path = log.segment_path(1);
        let file_len = fs::metadata(&path).unwrap().len();
        assert!(
            file_len >= log.total_bytes() + PREZERO_MIN,
            "zeros ahead of the log's end: file {file_len}, log {}",
            log.total_bytes()
        );
        // Appends up to the zeroed end do not grow the file.
        let b = log.append(2, 1, &r(&[4], &[4]), b"efgh").unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), file_len);
        log.commit().unwrap();
        let end = log.total_bytes();
        drop(log);
        let (log, rec) = open(tmp.path());
        assert_eq!((rec.committed_bytes, rec.discarded_bytes), (end, 0));
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            end,
            "the zeros are cut off"
        );
        assert_eq!(log.read_payload(&a).unwrap(), b"abcd");
        assert_eq!(log.read_payload(&b).unwrap(), b"efgh");
    }

    #[test]
    fn a_small_record_after_a_large_one_zeroes_ahead_by_its_own_size() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut log, _) = open(tmp.path());
        let big = (PREZERO_MAX_RECORD + 1) as usize;
        log.append(1, 1, &r(&[0], &[big as u64]), &payload(1, big))
            .unwrap();
        let path = log.segment_path(1);
        assert_eq!(fs::metadata(&path).unwrap().len(), log.total_bytes());
        // A commit-record-sized append past the end: 64 KiB of zeros, not 1 MiB.
        log.append(2, 1, &r(&[0], &[100]), &payload(2, 100))
            .unwrap();
        let ahead = fs::metadata(&path).unwrap().len() - log.total_bytes();
        assert_eq!(ahead, PREZERO_MIN);
        // A 16 KiB record zeroes room for 64 like it (1 MiB).
        log.append(3, 1, &r(&[0], &[16 << 10]), &payload(3, 16 << 10))
            .unwrap();
        let len = fs::metadata(&path).unwrap().len();
        assert!(len - log.total_bytes() <= PREZERO, "zeroed {len}");
        assert_eq!(zero_ahead(16 << 10), PREZERO);
    }

    #[test]
    fn failed_append_is_rolled_back_and_log_stays_usable() {
        let disk = pdcx_fsio::SimFs::new();
        let mut log = sim_open(&disk);
        // Records too large for zeros written ahead (`PREZERO_MAX_RECORD`): the file ends
        // where the log does, so the next append must grow it.
        let big = (PREZERO_MAX_RECORD + 1) as usize;
        let first = log.append(1, 1, &r(&[0], &[4]), &payload(1, big)).unwrap();
        let end = log.total_bytes();
        // Room for the next record's prefix but not its payload: ENOSPC mid-record.
        disk.set_faults(pdcx_fsio::Faults {
            capacity: Some(end + first.offset + 2),
            ..Default::default()
        });
        let e = log
            .append(2, 1, &r(&[4], &[4]), &payload(2, big))
            .unwrap_err();
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
