//! The metadata shard: one SQLite database per server. Two kinds of tables live in it, in two
//! modules over one connection:
//! - the **catalog** ([`catalog`]): containers and objects whose names hash to this server,
//!   their memberships and tags (objects are also cached in memory: every data request checks
//!   bounds and dtype against them);
//! - the **data locations** ([`locations`]): where committed bytes are — the extent map of the
//!   data this server stores, the owner's region map of data other servers hold, deferred-write
//!   tokens, and the tier homes of flushed extents. Only the data store
//!   (`crate::datastore`) and the owner side of registration use them.
//!
//! The schema carries a version (`PRAGMA user_version`) and is brought up to date by the
//! numbered steps in [`schema`] when the shard opens.
//!
//! Durability: WAL with `synchronous=NORMAL` plus group commit ([`GroupSync`]). A write
//! transaction commits into the WAL (a `write()`, so it survives kill -9 at once and is visible
//! to other requests), and the request is answered only after one shared fdatasync of the WAL
//! covers it, so an acknowledged change also survives power loss, while concurrent requests
//! pay one fsync together instead of one each.

pub mod catalog;
mod dropped;
pub mod locations;
pub mod rename;
pub mod schema;
mod space;
#[cfg(test)]
mod tests;
pub mod untyped;
pub mod versions;

use crate::groupsync::GroupSync;
use pdcx_core::{Error, ErrorKind, ObjectId, ObjectMeta, Result};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};

pub use locations::{ExtentRow, HomeRow, RefRow, Registration};

pub struct Metadata {
    /// The database, the group commit of its WAL, and the object rows not written yet.
    shard: Arc<Shard>,
    /// The catalog's in-memory copy of every object of this shard, created rows not yet
    /// written included.
    objects: RwLock<HashMap<ObjectId, ObjectMeta>>,
    /// Every object name of this shard (with `objects`, the catalog answers creates and
    /// lookups by name without SQLite).
    names: RwLock<HashMap<String, ObjectId>>,
    /// Names that hash to this server for objects other servers own (`rename.rs`).
    links: RwLock<HashMap<String, ObjectId>>,
    /// Local ids: the next one and the end of the range recorded as handed out (creates
    /// hold this lock, so they are serialised per shard).
    lids: Mutex<catalog::LidRange>,
    /// Background flush and fsync of lazy writes ([`write_lazy`](Metadata::write_lazy)).
    syncer: Arc<Syncer>,
    syncer_thread: Option<std::thread::JoinHandle<()>>,
    /// The durable reserved sequence mark (`locations::Metadata::register_regions`).
    seq_reserved: std::sync::atomic::AtomicU64,
    pub rank: u32,
    /// The deployment's server count.
    pub size: u32,
    /// The shard's database file.
    path: std::path::PathBuf,
}

/// What the syncer thread shares with the catalog: the connection, its group commit and the
/// rows of created objects waiting to be written (creates: a create is answered
/// from memory and its rows reach SQLite in batches, one transaction per batch).
pub(crate) struct Shard {
    db: Mutex<Connection>,
    sync: GroupSync,
    /// Metadata changes answered but not in the database yet. Written before any other use
    /// of the connection (`Metadata::db`), so every query and every later transaction sees
    /// them; by the syncer; and by `sync`.
    pending: Mutex<Queued>,
    /// How many rows and growths are queued, readable without the lock (the check on every
    /// use of the connection).
    pending_n: AtomicUsize,
}

/// What [`Shard::pending`] holds.
#[derive(Default)]
struct Queued {
    /// Objects created (answered) whose rows are not written, in creation order.
    rows: Vec<ObjectMeta>,
    /// Written objects whose dims grew (`extend_dims`, a byte stream's writer) since: the
    /// elementwise maximum to write. A stream written past its end on every write grows
    /// without a transaction of its own (segment creation).
    grown: HashMap<ObjectId, Vec<u64>>,
}

impl Queued {
    fn len(&self) -> usize {
        self.rows.len() + self.grown.len()
    }

    fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.grown.is_empty()
    }
}

/// Grows `dims` to at least `want`, elementwise.
pub(super) fn grow_dims(dims: &mut [u64], want: &[u64]) {
    for (d, w) in dims.iter_mut().zip(want) {
        *d = (*d).max(*w);
    }
}

impl Shard {
    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Queued> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues the rows of objects just created (already in the in-memory catalog).
    fn queue(&self, made: Vec<ObjectMeta>) {
        let mut p = self.pending();
        p.rows.extend(made);
        self.pending_n.store(p.len(), Ordering::Release);
    }

    /// Grows object `id`'s dims to at least `want` in the database's next batch: in its
    /// queued row if it has one, else as a queued growth. `then` runs under the queue's lock
    /// (the caller updates its cached copy there, so a flush never writes a size the cache
    /// has not shown yet).
    fn queue_growth(&self, id: ObjectId, want: &[u64], then: impl FnOnce()) {
        let mut p = self.pending();
        match p.rows.iter_mut().rev().find(|m| m.id == id) {
            Some(row) => {
                grow_dims(&mut row.dims, want);
                row.mtime = now();
            }
            None => match p.grown.get_mut(&id) {
                Some(dims) => grow_dims(dims, want),
                None => {
                    p.grown.insert(id, want.to_vec());
                }
            },
        }
        then();
        self.pending_n.store(p.len(), Ordering::Release);
    }

    /// Writes the queued rows in one transaction on `db` (held by the caller, so nobody uses
    /// the connection before they are in). On failure they stay queued (in order) and the
    /// error is returned; the next use of the connection tries again.
    fn flush_locked(&self, db: &mut Connection) -> Result<()> {
        if self.pending_n.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let queued = {
            let mut p = self.pending();
            self.pending_n.store(0, Ordering::Release);
            std::mem::take(&mut *p)
        };
        if queued.is_empty() {
            return Ok(());
        }
        let written = db.transaction().map_err(db_err).and_then(|tx| {
            for m in &queued.rows {
                catalog::insert_rows(&tx, m)?;
            }
            for (id, want) in &queued.grown {
                catalog::grow_row(&tx, *id, want)?;
            }
            tx.commit().map_err(db_err)
        });
        match written {
            Ok(()) => {
                // Under the database lock: ticket order is commit order.
                self.sync.ticket();
                Ok(())
            }
            Err(e) => {
                let mut p = self.pending();
                let later = std::mem::replace(&mut *p, queued);
                p.rows.extend(later.rows);
                for (id, want) in later.grown {
                    match p.grown.get_mut(&id) {
                        Some(dims) => grow_dims(dims, &want),
                        None => {
                            p.grown.insert(id, want);
                        }
                    }
                }
                self.pending_n.store(p.len(), Ordering::Release);
                Err(e)
            }
        }
    }

    fn flush(&self) -> Result<()> {
        self.flush_locked(&mut self.lock())
    }

    /// Runs `f` on the queued row of object `id` under the queue's lock; false if its row is
    /// not queued (written already, or no such object). Searches from the newest row: a tag
    /// put usually follows its create.
    fn with_queued(&self, id: ObjectId, f: impl FnOnce(&mut ObjectMeta)) -> bool {
        if self.pending_n.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut p = self.pending();
        match p.rows.iter_mut().rev().find(|m| m.id == id) {
            Some(row) => {
                f(row);
                true
            }
            None => false,
        }
    }
}

/// The WAL syncer of lazy writes: a thread that, once kicked, runs the group commit for
/// everything committed so far, so a lazily acknowledged change reaches stable storage within
/// about one fsync plus [`SYNCER_INTERVAL`] of its acknowledgement without its request waiting
/// for it. Kicks during a sync or the interval after it are coalesced into the next one.
/// Shortest time between two background fsyncs of lazy changes.
const SYNCER_INTERVAL: std::time::Duration = std::time::Duration::from_millis(5);

#[derive(Default)]
struct Syncer {
    state: Mutex<SyncerState>,
    cv: Condvar,
}

#[derive(Default)]
struct SyncerState {
    kicked: bool,
    stop: bool,
    /// Tests: the syncer does nothing until stopped (so queued rows stay unwritten, as at a
    /// crash right after a create).
    held: bool,
}

impl Syncer {
    fn lock(&self) -> std::sync::MutexGuard<'_, SyncerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn kick(&self) {
        let mut s = self.lock();
        if !s.kicked {
            s.kicked = true;
            self.cv.notify_one();
        }
    }

    fn run(&self, shard: &Shard) {
        loop {
            {
                let mut s = self.lock();
                while (!s.kicked || s.held) && !s.stop {
                    s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner());
                }
                if s.stop {
                    return;
                }
                s.kicked = false;
            }
            // Queued object rows first (one transaction for all of them), then the fsync. A
            // failed write stays queued and is reported to the next SyncMeta; a failed fsync
            // poisons the group commit, which every later durable write and SyncMeta reports:
            // nobody to tell here.
            if let Err(e) = shard.flush() {
                tracing::warn!("metadata: writing created objects: {}", e.message);
            }
            if let Err(e) = shard.sync.wait(shard.sync.latest()) {
                tracing::warn!("metadata WAL syncer: {}", e.message);
            }
            // At most one background fsync per interval: each costs CPU and device time, and
            // lazy changes only need to reach the disk soon (a SyncMeta does not wait here).
            let s = self.lock();
            if s.stop {
                return;
            }
            let _ = self
                .cv
                .wait_timeout_while(s, SYNCER_INTERVAL, |s| !s.stop)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Drop for Metadata {
    /// Stops the syncer and waits for it, so the connection is closed when this returns (a
    /// reopen, or a test restoring the files, must not race a write of the old one). Rows not
    /// written yet are dropped, as a crash of the process would: acknowledged creates are
    /// durable only at [`sync`](Metadata::sync) (the server runs it at shutdown).
    fn drop(&mut self) {
        {
            let mut s = self.syncer.lock();
            s.stop = true;
            self.syncer.cv.notify_all();
        }
        if let Some(t) = self.syncer_thread.take() {
            let _ = t.join();
        }
    }
}

pub(crate) fn db_err(e: rusqlite::Error) -> Error {
    if let rusqlite::Error::SqliteFailure(f, _) = &e {
        if f.code == rusqlite::ErrorCode::DiskFull {
            return Error::new(ErrorKind::NoSpace, format!("metadata store: {e}"));
        }
    }
    Error::new(ErrorKind::Io, format!("metadata store: {e}"))
}

pub(super) fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The row key of object or container `id` (the whole id, schema version 9).
pub(super) fn lid_of(id: ObjectId) -> i64 {
    id as i64
}

/// The id of a row key.
pub(super) fn id_of(lid: i64) -> ObjectId {
    lid as ObjectId
}

/// Opens a shard's database with no server running on it (`resize`): WAL, every commit
/// fsynced, brought up to the current schema.
pub(crate) fn open_offline(path: &Path) -> Result<Connection> {
    let db = Connection::open(path).map_err(db_err)?;
    db.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;")
        .map_err(db_err)?;
    schema::migrate(&db, path)?;
    Ok(db)
}

impl Metadata {
    /// The server owning object `id` in this deployment.
    pub fn owner_of(&self, id: ObjectId) -> u32 {
        pdcx_core::model::owner_of_id(id, self.size)
    }

    /// Whether this server owns object `id`.
    pub fn owns(&self, id: ObjectId) -> bool {
        self.owner_of(id) == self.rank
    }

    /// Opens the shard, refusing a directory that belongs to another rank or deployment size:
    /// name hashing depends on both, so serving it would hide objects.
    pub fn open(path: &Path, rank: u32, size: u32) -> Result<Metadata> {
        Self::open_with_fs(path, rank, size, pdcx_fsio::os())
    }

    /// [`open`](Self::open) with the WAL's fsyncs going through the I/O seam `fs` (crash tests
    /// run the database on the real disk and let a simulated one snapshot it at each fsync).
    pub fn open_with_fs(
        path: &Path,
        rank: u32,
        size: u32,
        fs: std::sync::Arc<dyn pdcx_fsio::Fs>,
    ) -> Result<Metadata> {
        let db = Connection::open(path).map_err(db_err)?;
        // Auto-vacuum is chosen before any table exists (`space.rs`).
        space::prepare(&db)?;
        db.execute_batch(
            // NORMAL: commits write the WAL without fsync; GroupSync adds the (shared) fsync.
            // EXCLUSIVE (smallmem): this server is the shard's only user, so the
            // connection keeps the file lock and the WAL index in its own memory instead of
            // taking and dropping 6 `fcntl` locks on the -shm file per transaction (a small
            // `memory` commit runs one or two transactions). A second process opening the
            // shard while the server runs is refused ("database is locked").
            "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
        )
        .map_err(db_err)?;
        // Statements are prepared once and reused (`prepare_cached`): parsing and planning a
        // statement costs tens of microseconds, several times per commit and per seal. Room
        // for every statement of the hot paths, so none evicts another.
        db.set_prepared_statement_cache_capacity(128);
        let old_format: bool = db
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='extents'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map_err(db_err)?
            > 0;
        if old_format {
            return Err(Error::invalid(format!(
                "{} was written by an older pdcx (before region placement); export its objects with that version",
                path.display()
            )));
        }
        schema::migrate(&db, path)?;
        for (key, want) in [("rank", rank), ("size", size)] {
            let have: Option<String> = db
                .query_row("SELECT value FROM settings WHERE key=?1", [key], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(db_err)?;
            match have {
                None => {
                    db.execute("INSERT INTO settings VALUES (?1, ?2)", params![key, want.to_string()]).map_err(db_err)?;
                }
                Some(v) if v == want.to_string() => {}
                Some(v) => {
                    return Err(Error::invalid(format!(
                        "{} was created for {key} {v} but this server has {key} {want}; a deployment must restart with the same server count and ranks",
                        path.display()
                    )))
                }
            }
        }
        // The WAL exists while a connection is open (the writes above created it); keep our own
        // handle to fsync it. Its directory entry is made durable once here: SQLite reuses the
        // file (rewinding it after checkpoints) rather than recreating it while we are open.
        let mut wal_path = path.as_os_str().to_owned();
        wal_path.push("-wal");
        let wal_path = std::path::PathBuf::from(wal_path);
        let wal = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&wal_path)
            .map_err(|e| Error::io(&format!("open {}", wal_path.display()), &e))?;
        let sync = GroupSync::with_fs(wal, &wal_path, fs);
        sync.sync_now()?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io(&format!("fsync {}", parent.display()), &e))?;
        let lids = catalog::LidRange::load(&db)?;
        let seq_reserved = Self::load_seq_reserved(&db)?;
        let shard = Arc::new(Shard {
            db: Mutex::new(db),
            sync,
            pending: Mutex::new(Queued::default()),
            pending_n: AtomicUsize::new(0),
        });
        let syncer = Arc::new(Syncer::default());
        let syncer_thread = {
            let (syncer, shard) = (syncer.clone(), shard.clone());
            std::thread::Builder::new()
                .name(format!("meta-sync-{rank}"))
                .spawn(move || syncer.run(&shard))
                .map_err(|e| Error::io("start the metadata WAL syncer", &e))?
        };
        let md = Metadata {
            shard,
            objects: RwLock::new(HashMap::new()),
            names: RwLock::new(HashMap::new()),
            links: RwLock::new(HashMap::new()),
            lids: Mutex::new(lids),
            syncer,
            syncer_thread: Some(syncer_thread),
            seq_reserved: seq_reserved.into(),
            rank,
            size,
            path: path.to_path_buf(),
        };
        md.load_objects()?;
        md.load_links()?;
        Ok(md)
    }

    /// The connection, with every created object's rows written first (so whatever the caller
    /// reads or writes sees them, and its own transaction comes after theirs). A failure to
    /// write them is logged and left for the next use or `sync` to retry and report.
    pub(super) fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        let mut db = self.shard.lock();
        if let Err(e) = self.shard.flush_locked(&mut db) {
            tracing::warn!("metadata: writing created objects: {}", e.message);
        }
        db
    }

    /// Runs `f` in one write transaction and returns once it is durable (group commit). An
    /// error from `f` rolls the transaction back.
    pub(crate) fn write<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction) -> Result<T>,
    ) -> Result<T> {
        let (v, ticket) = self.write_nowait(f)?;
        self.shard.sync.wait(ticket)?;
        Ok(v)
    }

    /// Like [`write`](Self::write) but returns at commit (in the WAL, not yet fsynced) with the
    /// ticket to [`wait_durable`](Self::wait_durable) for.
    pub(crate) fn write_nowait<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction) -> Result<T>,
    ) -> Result<(T, u64)> {
        let mut db = self.shard.lock();
        // Created objects' rows go first (a transaction naming one must not commit without it).
        self.shard.flush_locked(&mut db)?;
        let tx = db.transaction().map_err(db_err)?;
        let v = f(&tx)?;
        tx.commit().map_err(db_err)?;
        // Under the database lock: ticket order is commit order.
        Ok((v, self.shard.sync.ticket()))
    }

    /// Like [`write`](Self::write) but returns at commit: the change is visible and survives a
    /// crash of this process (its WAL frames are written), and the background syncer makes it
    /// survive power loss within about 5 ms and one fsync; [`sync`](Self::sync) waits for that.
    pub(crate) fn write_lazy<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction) -> Result<T>,
    ) -> Result<T> {
        let (v, _ticket) = self.write_nowait(f)?;
        self.syncer.kick();
        Ok(v)
    }

    /// Asks the background syncer to make everything committed so far durable soon.
    pub(crate) fn kick_syncer(&self) {
        self.syncer.kick();
    }

    /// Returns once the transaction of `ticket` is on stable storage.
    pub fn wait_durable(&self, ticket: u64) -> Result<()> {
        self.shard.sync.wait(ticket)
    }

    /// Makes every metadata change durable, created objects whose rows were not written yet
    /// included (SyncMeta, shutdown, `memory` durability's sync).
    pub fn sync(&self) -> Result<()> {
        self.shard.flush()?;
        self.shard.sync.wait(self.shard.sync.latest())
    }

    /// How many WAL fsyncs the group commit has issued (shows how well commits are grouped).
    pub fn wal_syncs(&self) -> u64 {
        self.shard.sync.syncs()
    }

    /// Tests: keeps the syncer from writing or fsyncing anything from now on.
    #[cfg(test)]
    pub(crate) fn hold_syncer(&self) {
        self.syncer.lock().held = true;
    }

    /// Created objects whose rows, and grown objects whose dims, are not in the database yet
    /// (stats and tests).
    pub fn unwritten_creates(&self) -> usize {
        self.shard.pending_n.load(Ordering::Acquire)
    }
}
