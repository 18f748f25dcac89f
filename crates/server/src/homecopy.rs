//! Home copies of byte-stream versions (ParaLog's background checkpoint).
//!
//! A program's consistency point (`MPI_File_sync`/`close` under `libpdcx_mpiio`) seals a
//! version of its byte stream at the object's owner ([`seal`]). This server's `pdcx-home`
//! thread ([`run`]) then writes each sealed version to its home while the program computes:
//!
//! 1. state `writing`; create `DIR/.NAME.pdcx-e<epoch>` next to the home file, sized to the
//!    version (never-written ranges stay holes: zeros, as in a direct run);
//! 2. read the version chunk by chunk (`Engine::read_version`: writes below the seal's
//!    sequence number, from every holder) and write the non-zero chunks into it;
//! 3. fsync it, rename it over `DIR/NAME`, fsync `DIR` — a reader of the home file sees the
//!    previous complete version or this one, never a mix;
//! 4. state `done`, durable.
//!
//! The copier yields to bursts of writes: while programs write through this server (a
//! request of the write path within the last [`QUIET`]), it waits, up to
//! `ServerConfig::home_defer` (`PDCX_HOME_DEFER_MS`, default 1000 ms) at a time, so a burst
//! of output (a checkpoint, a file per rank) is logged at the speed of the node's device and
//! CPUs, and copied in the program's next compute phase. On a 2-core node a copy running
//! during the burst took the CPU the writers needed (memory copies of the version in and
//! out): on a RAM disk, 16 MiB files were logged 30-40 % slower than written directly, and
//! 15-20 % faster with the copy after the burst (bench/RESULTS.md, "MPI-IO: segment creation
//! meets its target", 2026-11-24).
//!
//! A crash anywhere replays from step 1 at the next start (the tmp name carries the epoch;
//! the rename is atomic), so recovery is idempotent. Versions are copied in epoch order; a
//! version sealed before the previous one started is `superseded` (the home needs the
//! newest only).

use crate::meta::versions::{self, Sealed};
use crate::streambase::Base;
pub use crate::streambase::Home;
use crate::Server;
use pdcx_core::protocol::{UploadPart, VersionInfo};
use pdcx_core::{Error, ErrorKind, ObjectId, Region, Result};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex, Weak};
use std::time::Duration;

/// Bytes read and written per step of a copy.
const CHUNK: u64 = 16 << 20;
/// How long the copier waits before retrying a failed copy.
const RETRY: Duration = Duration::from_secs(2);
/// Copies start once no write-path request came for this long (see the module doc).
const QUIET: Duration = Duration::from_millis(20);

/// Milliseconds since this process's first call (a clock an atomic can hold).
fn now_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// Wakes the copier thread; tells it to stop; keeps one S3 client per home bucket.
#[derive(Default)]
pub struct HomeCopier {
    state: Mutex<(bool, bool)>, // (kicked, stop)
    cv: Condvar,
    /// Parts of S3 home copies this server uploaded (as leader or for one), since start.
    pub parts_uploaded: std::sync::atomic::AtomicU64,
    /// Extents dropped (here and on holders) because a copied version shadows them.
    pub extents_dropped: std::sync::atomic::AtomicU64,
    /// Some writes below a base may still be in a log (after a start, or a holder that did
    /// not answer): the copier drops them once every holder answers.
    below_base_left: std::sync::atomic::AtomicBool,
    /// When the last write-path request came (`now_ms`; 0: none yet).
    last_write_ms: std::sync::atomic::AtomicU64,
}

impl HomeCopier {
    /// Parts of one upload in flight at once (`PDCX_HOME_PART_JOBS`, default 8).
    fn concurrency(&self) -> usize {
        jobs(&pdcx_core::config::HOME_PART_JOBS)
    }

    /// A program wrote through this server just now (the copier yields to it).
    pub fn note_write(&self) {
        self.last_write_ms.store(now_ms().max(1), Ordering::Relaxed);
    }

    /// Waits until no write-path request came for [`QUIET`], at most `limit`; true if
    /// stopping.
    fn wait_for_quiet(&self, limit: Duration) -> bool {
        let start = std::time::Instant::now();
        loop {
            let last = self.last_write_ms.load(Ordering::Relaxed);
            let quiet = Duration::from_millis(now_ms().saturating_sub(last));
            let waited = start.elapsed();
            if last == 0 || quiet >= QUIET || waited >= limit {
                return false;
            }
            // A kick (another seal) wakes it early: the loop looks again.
            if self.wait((QUIET - quiet).min(limit - waited)) {
                return true;
            }
        }
    }

    pub fn kick(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 = true;
        self.cv.notify_all();
    }

    pub fn stop(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.1 = true;
        self.cv.notify_all();
    }

    /// Waits for a kick or `d`; true if stopping.
    fn wait(&self, d: Duration) -> bool {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (mut s, _) = self
            .cv
            .wait_timeout_while(s, d, |s| !s.0 && !s.1)
            .unwrap_or_else(|p| p.into_inner());
        s.0 = false;
        s.1
    }
}

/// `Request::Seal` at the owner: records the current content of byte stream `id` as its next
/// version for `home` and wakes the copier. Returns the epoch (the previous one when nothing
/// changed since it).
pub fn seal(server: &Server, id: ObjectId, home: &str) -> Result<u64> {
    Home::parse(home)?;
    let obj = server.meta.object(id)?;
    if !obj.is_byte_stream() {
        return Err(Error::invalid(format!(
            "object {} is not a byte stream: only byte streams have versions",
            obj.name
        )));
    }
    let store = server.engine.store();
    // Every write committed before this call has a smaller number (the owner numbers them
    // all), and the sealing client waited for all of them first.
    let seal_seq = store.next_seq();
    let newest = store.newest_seq(id).max(server.meta.newest_region_seq(id)?);
    match server
        .meta
        .seal_version(id, seal_seq, newest, obj.dims[0], home)?
    {
        Sealed::New(epoch) => {
            pdcx_fsio::crash::point("seal.after_row");
            server.homecopy.kick();
            Ok(epoch)
        }
        Sealed::Unchanged(epoch) => Ok(epoch),
    }
}

/// The `pdcx-home` thread: copies sealed versions to their homes until the server stops.
/// It runs at a lower CPU priority (nice +10): the copy is background work that must not
/// slow down the requests of the program it overlaps with (its writes and consistency
/// points), which matters on nodes whose cores the program keeps busy.
pub fn run(server: Weak<Server>) {
    // SAFETY: setpriority(2) on this thread's own id (Linux: per-thread nice value).
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 10);
    }
    let mut delay = Duration::from_millis(0);
    if let Some(s) = server.upgrade() {
        s.homecopy.below_base_left.store(true, Ordering::Relaxed);
    }
    loop {
        {
            let Some(s) = server.upgrade() else { return };
            if !delay.is_zero() && s.homecopy.wait(delay) {
                return;
            }
            if s.homecopy.wait_for_quiet(s.config.home_defer) {
                return;
            }
        }
        let Some(s) = server.upgrade() else { return };
        delay = match copy_pending(&s) {
            Ok(()) => {
                // Leftovers below bases, once every holder answers (at start the deployment
                // may still be assembling).
                if s.homecopy.below_base_left.swap(false, Ordering::Relaxed)
                    && !drop_below_bases(&s)
                {
                    s.homecopy.below_base_left.store(true, Ordering::Relaxed);
                    RETRY
                } else {
                    Duration::from_secs(3600)
                }
            }
            Err(e) => {
                tracing::warn!(rank = s.config.rank, "home copy: {}", e.message);
                RETRY
            }
        };
    }
}

/// Files copied at once (`PDCX_HOME_JOBS`, default 4): many small files (a checkpoint per
/// rank, segment creation) would otherwise wait for each other's fsyncs and renames.
fn file_jobs() -> usize {
    jobs(&pdcx_core::config::HOME_JOBS)
}

/// A job count: 0 (or a malformed value) means the default; above the cap, the cap.
fn jobs(setting: &pdcx_core::config::Setting) -> usize {
    match setting.count_or_default() {
        0 => setting.default_count() as usize,
        n => n as usize,
    }
}

/// Copies every version waiting for its home: the versions of one stream in epoch order,
/// several streams at once ([`file_jobs`]). A stream whose copy fails stops there (the
/// failure is recorded in the version's row; retried later); the others go on. Returns the
/// first failure.
fn copy_pending(server: &Server) -> Result<()> {
    let mut by_stream: std::collections::BTreeMap<ObjectId, Vec<VersionInfo>> = Default::default();
    for v in server.meta.versions_to_copy()? {
        by_stream.entry(v.id).or_default().push(v);
    }
    let queue = Mutex::new(by_stream.into_values().collect::<Vec<_>>());
    let first_err: Mutex<Option<Error>> = Mutex::new(None);
    let workers = file_jobs().min(queue.lock().map_or(0, |q| q.len()));
    let work = || loop {
        let Some(versions) = queue.lock().unwrap_or_else(|p| p.into_inner()).pop() else {
            return;
        };
        for v in versions {
            if server.stopping() {
                return;
            }
            if let Err(e) = copy_version(server, &v) {
                // Still to be copied: a later attempt (or the next start) tries again.
                let _ = server
                    .meta
                    .set_version_state(v.id, v.epoch, versions::SEALED, &e.message);
                first_err
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(e);
                break;
            }
        }
    };
    if workers <= 1 {
        work();
    } else {
        // Scoped threads inherit this thread's lower priority (nice +10).
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(work);
            }
        });
    }
    first_err
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .map_or(Ok(()), Err)
}

fn copy_version(server: &Server, v: &VersionInfo) -> Result<()> {
    // Checked again now that the copy starts: a symlink planted since the seal, or a version
    // sealed before `access.homes` listed places, is held to what they allow. (Unlisted, only
    // the deployment's user could have sealed it, so as that user.)
    server.allowed.check_home(&v.home, true)?;
    server
        .meta
        .set_version_state(v.id, v.epoch, versions::WRITING, "")?;
    match Home::parse(&v.home)? {
        Home::File(path) => copy_to_file(server, v, &path)?,
        Home::S3 { bucket, key } => copy_to_s3(server, v, &bucket, &key)?,
    }
    // The stream's retention tags may keep an older version readable: then the log keeps
    // every write (`engine/streamversions.rs`).
    let keeps_older = server
        .engine
        .stream_keeps_older(v.id, v.seal_seq.saturating_sub(1))?;
    if server.config.home_keep_log || keeps_older {
        server
            .meta
            .set_version_state(v.id, v.epoch, versions::DONE, "")?;
    } else {
        // `done` and "the stream's base" in one durable transaction (one WAL fsync).
        server.meta.set_version_done_base(v.id, v.epoch)?;
    }
    if !keeps_older {
        // Every older version's writes may go now: reads of them are refused from here on
        // (recorded durably before anything is dropped).
        server
            .meta
            .add_dropped_versions(&[(v.id, 0, v.seal_seq.saturating_sub(1))])?;
        free_log_space(server, v);
    }
    Ok(())
}

/// After version `v` reached its home: no older version is read again. By default `v`
/// becomes the stream's base (`streambase.rs`: durably, then in memory) and every write
/// below its seal leaves the logs; with `home_keep_log` (config), only the writes it
/// shadows do. A
/// failure keeps the writes (reads leave out those below a base) and is retried at the
/// next start.
fn free_log_space(server: &Server, v: &VersionInfo) {
    let r = if server.config.home_keep_log {
        server.engine.drop_shadowed(v.id, v.seal_seq)
    } else {
        // Recorded durably with `done` (`copy_version`); now in memory, then the drop, with
        // no stream read in between.
        let _change = server
            .engine
            .bases
            .change
            .write()
            .unwrap_or_else(|p| p.into_inner());
        server.engine.bases.set(
            v.id,
            Base {
                epoch: v.epoch,
                seal_seq: v.seal_seq,
                size: v.size,
                home: v.home.clone(),
            },
        );
        pdcx_fsio::crash::point("home.after_base");
        server.engine.drop_below(v.id, v.seal_seq)
    };
    match r {
        Ok(n) => {
            server
                .homecopy
                .extents_dropped
                .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        }
        Err(e) => {
            tracing::warn!(
                "{} e{}: keeping its writes in the log for now: {}",
                v.name,
                v.epoch,
                e.message
            );
            server
                .homecopy
                .below_base_left
                .store(true, Ordering::Relaxed);
        }
    }
}

/// At start: drops the writes below each base again (a crash or an unreachable holder may
/// have kept some). False if some holder could not be reached (try again later).
fn drop_below_bases(server: &Server) -> bool {
    let mut all = true;
    for (id, b) in server.engine.bases.all() {
        if let Err(e) = server.engine.drop_below(id, b.seal_seq) {
            tracing::debug!(
                "{id:#x} e{}: keeping writes below its base: {}",
                b.epoch,
                e.message
            );
            all = false;
        }
    }
    all
}

/// S3's limit on the parts of one upload.
const MAX_PARTS: u64 = 10_000;

/// One S3 object (ParaLog §6.3). Smaller than a part: one PUT by this server (the owner).
/// Else a multipart upload that this server leads: it starts the upload and records its id
/// durably (so a restart aborts it rather than leaving parts billed), cuts the version into
/// parts of at least the part size (contiguous; never-written bytes are zeros, as in a
/// direct run), gives each part to the server holding most of its bytes, which reads it
/// (its own bytes locally, the rest from the other holders) and uploads it, several parts in
/// flight, then completes the upload with the ETags in part order. Any failure aborts it.
fn copy_to_s3(server: &Server, v: &VersionInfo, bucket: &str, key: &str) -> Result<()> {
    let dest = server.engine.bases.s3(bucket)?;
    if !v.upload_id.is_empty() {
        // A crash or failure interrupted an earlier attempt: its parts are never completed.
        dest.abort_upload(key, &v.upload_id)?;
        server.meta.set_upload_id(v.id, v.epoch, "")?;
    }
    let part_size = (dest.part_size() as u64).max(v.size.div_ceil(MAX_PARTS));
    if v.size < part_size {
        return dest.put_streamed(key, v.size, &mut |off, buf| {
            if buf.is_empty() {
                return Ok(());
            }
            let region = Region::new(vec![off], vec![buf.len() as u64])?;
            server.engine.read_version(v.id, &region, v.seal_seq, buf)
        });
    }
    let upload_id = dest.create_upload(key)?;
    server.meta.set_upload_id(v.id, v.epoch, &upload_id)?;
    pdcx_fsio::crash::point("s3.after_create_upload");
    let parts = v.size.div_ceil(part_size);
    let result = upload_parts(server, v, bucket, key, &upload_id, part_size, parts)
        .and_then(|etags| dest.complete_upload(key, &upload_id, etags));
    if let Err(e) = result {
        if let Err(a) = dest.abort_upload(key, &upload_id) {
            tracing::warn!(
                "aborting upload {upload_id} of s3://{bucket}/{key}: {}",
                a.message
            );
            return Err(e); // upload id stays recorded: the next attempt aborts it
        }
        server.meta.set_upload_id(v.id, v.epoch, "")?;
        return Err(e);
    }
    server.meta.set_upload_id(v.id, v.epoch, "")
}

/// Uploads parts `0..parts` of a version, at most the bucket's concurrency at once, each by
/// the server holding most of its bytes; their ETags in part order.
fn upload_parts(
    server: &Server,
    v: &VersionInfo,
    bucket: &str,
    key: &str,
    upload_id: &str,
    part_size: u64,
    parts: u64,
) -> Result<Vec<String>> {
    let workers = server.homecopy.concurrency();
    crate::parallel::try_each(parts as usize, workers, |k| {
        upload_one(server, v, bucket, key, upload_id, part_size, k as u64)
    })
}

fn upload_one(
    server: &Server,
    v: &VersionInfo,
    bucket: &str,
    key: &str,
    upload_id: &str,
    part_size: u64,
    k: u64,
) -> Result<String> {
    if server.stopping() {
        return Err(Error::new(ErrorKind::Unavailable, "server stopping"));
    }
    let off = k * part_size;
    let region = Region::new(vec![off], vec![part_size.min(v.size - off)])?;
    let held = server.engine.version_holders(v.id, &region, v.seal_seq);
    // The server holding most of the part uploads it (ties: spread by part number); a part
    // nobody wrote (zeros) is uploaded here.
    let most = held.iter().map(|h| h.1).max().unwrap_or(0);
    let best: Vec<u32> = held.iter().filter(|h| h.1 == most).map(|h| h.0).collect();
    // Only the owner reads a stream's base (`streambase.rs`).
    let uploader = if best.is_empty() || server.engine.bases.get(v.id).is_some() {
        server.config.rank
    } else {
        best[k as usize % best.len()]
    };
    let part = UploadPart {
        id: v.id,
        seq_below: v.seal_seq,
        region,
        holders: held.iter().map(|h| h.0).collect(),
        bucket: bucket.into(),
        key: key.into(),
        upload_id: upload_id.into(),
        part: k as u32,
    };
    if uploader == server.config.rank {
        upload_part(server, &part)
    } else {
        server.engine.peers()?.upload_part(uploader, &part)
    }
}

/// Reads one part of a version (here and from the other holders) and uploads it: the
/// leader's own parts, and `PeerRequest::UploadPart` from the leader. Its ETag.
pub fn upload_part(server: &Server, p: &UploadPart) -> Result<String> {
    let len =
        usize::try_from(p.region.num_elements()).map_err(|_| Error::invalid("part too large"))?;
    if p.region.ndim() != 1 || len as u64 > 5 << 30 {
        return Err(Error::invalid(format!("bad part region {}", p.region)));
    }
    let mut buf = vec![0u8; len];
    server
        .engine
        .read_version_from(p.id, &p.region, p.seq_below, &p.holders, &mut buf)?;
    let dest = server.engine.bases.s3(&p.bucket)?;
    let etag = dest.put_part(&p.key, &p.upload_id, p.part as usize, buf)?;
    server
        .homecopy
        .parts_uploaded
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(etag)
}

fn copy_to_file(server: &Server, v: &VersionInfo, dst: &Path) -> Result<()> {
    let io =
        |what: &str, p: &Path, e: std::io::Error| Error::io(&format!("{what} {}", p.display()), &e);
    let dir = dst
        .parent()
        .ok_or_else(|| Error::invalid(format!("home {} has no directory", dst.display())))?;
    std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
    let name = dst
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.pdcx-e{}", v.epoch));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| io("creating", &tmp, e))?;
    f.set_len(v.size).map_err(|e| io("sizing", &tmp, e))?;
    let mut buf = vec![0u8; CHUNK.min(v.size) as usize];
    let mut off = 0u64;
    while off < v.size {
        if server.stopping() {
            return Err(Error::new(ErrorKind::Unavailable, "server stopping"));
        }
        let n = CHUNK.min(v.size - off);
        let out = &mut buf[..n as usize];
        let region = Region::new(vec![off], vec![n])?;
        server.engine.read_version(v.id, &region, v.seal_seq, out)?;
        // Never-written ranges stay holes, as in a direct run's file.
        if out.iter().any(|&b| b != 0) {
            f.write_all_at(out, off)
                .map_err(|e| io("writing", &tmp, e))?;
        }
        off += n;
    }
    f.sync_all().map_err(|e| io("syncing", &tmp, e))?;
    drop(f);
    pdcx_fsio::crash::point("home.after_tmp_written");
    std::fs::rename(&tmp, dst).map_err(|e| io("renaming onto", dst, e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("syncing directory", dir, e))?;
    pdcx_fsio::crash::point("home.after_rename");
    Ok(())
}
