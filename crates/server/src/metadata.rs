//! The metadata shard: one SQLite database per server holding the containers and objects whose
//! names hash to this server, their tags, and the extent map of the data this server stores.
//! Objects are also cached in memory: every data request checks bounds and dtype against them.
//!
//! Durability: WAL with `synchronous=NORMAL` plus group commit ([`GroupSync`]). A write
//! transaction commits into the WAL (a `write()`, so it survives kill -9 at once and is visible
//! to other requests), and the request is answered only after one shared fdatasync of the WAL
//! covers it, so an acknowledged change also survives power loss, while concurrent requests
//! pay one fsync together instead of one each.

use crate::groupsync::GroupSync;
use pdcx_core::model::{make_object_id, owner_of_id, validate_dims, Tags};
use pdcx_core::protocol::{ObjectSpec, TagTarget};
use pdcx_core::query::CmpOp;
use pdcx_core::{
    Condition, ContainerInfo, Dtype, Error, ErrorKind, ObjectId, ObjectMeta, Region, Result,
    TagValue,
};
use pdcx_store::Location;
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, RwLock};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS containers (
    lid INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE NOT NULL, creator TEXT NOT NULL, ctime REAL NOT NULL);
CREATE TABLE IF NOT EXISTS objects (
    lid INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE NOT NULL, dtype INTEGER NOT NULL,
    dims TEXT NOT NULL, fill BLOB NOT NULL, creator TEXT NOT NULL, ctime REAL NOT NULL, mtime REAL NOT NULL);
CREATE TABLE IF NOT EXISTS memberships (
    object_lid INTEGER NOT NULL, container TEXT NOT NULL, PRIMARY KEY (object_lid, container));
-- kind 0 = object, 1 = container; vtype 0 str, 1 int, 2 float, 3 bytes.
CREATE TABLE IF NOT EXISTS tags (
    kind INTEGER NOT NULL, lid INTEGER NOT NULL, key TEXT NOT NULL, vtype INTEGER NOT NULL,
    ival INTEGER, num REAL, sval TEXT, bval BLOB, PRIMARY KEY (kind, lid, key));
CREATE INDEX IF NOT EXISTS tags_num ON tags (kind, key, num);
CREATE INDEX IF NOT EXISTS tags_str ON tags (kind, key, sval);
-- Extents whose bytes are in this server's log, of any object (the owner may be another
-- server: region-local placement). seq orders writes of one object; the owner assigns it.
CREATE TABLE IF NOT EXISTS extent_map (
    object INTEGER NOT NULL, seq INTEGER NOT NULL, region BLOB NOT NULL,
    segment INTEGER NOT NULL, offset INTEGER NOT NULL, len INTEGER NOT NULL, crc INTEGER NOT NULL,
    PRIMARY KEY (object, seq));
-- The owner's region map: regions of its objects whose bytes another server holds.
CREATE TABLE IF NOT EXISTS region_map (
    object INTEGER NOT NULL, seq INTEGER NOT NULL, holder INTEGER NOT NULL, region BLOB NOT NULL,
    PRIMARY KEY (object, seq));
-- Owner side of deferred (relaxed) writes: the sequence number each one was registered
-- under, by the holder's log location, so a holder that re-registers after a crash (it never
-- learned the answer) gets the same number back. Not pruned yet: one row per relaxed write.
CREATE TABLE IF NOT EXISTS region_tokens (
    holder INTEGER NOT NULL, segment INTEGER NOT NULL, offset INTEGER NOT NULL,
    object INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (holder, segment, offset));
";

pub struct Metadata {
    db: Mutex<Connection>,
    objects: RwLock<HashMap<ObjectId, ObjectMeta>>,
    sync: GroupSync,
    pub rank: u32,
}

/// One region an owner records for a holder: object, region, and the token of a deferred
/// write (its location in the holder's log), if it is one.
pub type Registration<'a> = (ObjectId, &'a Region, Option<(u64, u64)>);

/// A committed extent as the engine indexes it.
#[derive(Debug, Clone)]
pub struct ExtentRow {
    pub id: ObjectId,
    pub seq: u64,
    pub region: Region,
    pub loc: Location,
}

pub(crate) fn db_err(e: rusqlite::Error) -> Error {
    if let rusqlite::Error::SqliteFailure(f, _) = &e {
        if f.code == rusqlite::ErrorCode::DiskFull {
            return Error::new(ErrorKind::NoSpace, format!("metadata store: {e}"));
        }
    }
    Error::new(ErrorKind::Io, format!("metadata store: {e}"))
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn lid_of(id: ObjectId) -> i64 {
    (id & ((1 << 48) - 1)) as i64
}

impl Metadata {
    /// Opens the shard, refusing a directory that belongs to another rank or deployment size:
    /// name hashing depends on both, so serving it would hide objects.
    pub fn open(path: &Path, rank: u32, size: u32) -> Result<Metadata> {
        let db = Connection::open(path).map_err(db_err)?;
        db.execute_batch(
            // NORMAL: commits write the WAL without fsync; GroupSync adds the (shared) fsync.
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
        )
        .map_err(db_err)?;
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
        db.execute_batch(SCHEMA).map_err(db_err)?;
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
        wal.sync_data()
            .map_err(|e| Error::io(&format!("fdatasync {}", wal_path.display()), &e))?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io(&format!("fsync {}", parent.display()), &e))?;
        let md = Metadata {
            db: Mutex::new(db),
            objects: RwLock::new(HashMap::new()),
            sync: GroupSync::new(wal, &wal_path),
            rank,
        };
        md.load_objects()?;
        Ok(md)
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` in one write transaction and returns once it is durable (group commit). An
    /// error from `f` rolls the transaction back.
    pub(crate) fn write<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction) -> Result<T>,
    ) -> Result<T> {
        let (v, ticket) = self.write_nowait(f)?;
        self.sync.wait(ticket)?;
        Ok(v)
    }

    /// Like [`write`](Self::write) but returns at commit (in the WAL, not yet fsynced) with the
    /// ticket to [`wait_durable`](Self::wait_durable) for.
    pub(crate) fn write_nowait<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction) -> Result<T>,
    ) -> Result<(T, u64)> {
        let mut db = self.db();
        let tx = db.transaction().map_err(db_err)?;
        let v = f(&tx)?;
        tx.commit().map_err(db_err)?;
        // Under the database lock: ticket order is commit order.
        Ok((v, self.sync.ticket()))
    }

    /// Returns once the transaction of `ticket` is on stable storage.
    pub fn wait_durable(&self, ticket: u64) -> Result<()> {
        self.sync.wait(ticket)
    }

    /// Makes every committed metadata change durable (shutdown, `memory` durability's sync).
    pub fn sync(&self) -> Result<()> {
        self.sync.wait(self.sync.latest())
    }

    /// How many WAL fsyncs the group commit has issued (shows how well commits are grouped).
    pub fn wal_syncs(&self) -> u64 {
        self.sync.syncs()
    }

    fn load_objects(&self) -> Result<()> {
        let lids: Vec<i64> = {
            let db = self.db();
            let mut st = db.prepare("SELECT lid FROM objects").map_err(db_err)?;
            let rows = st.query_map([], |r| r.get(0)).map_err(db_err)?;
            rows.collect::<std::result::Result<_, _>>()
                .map_err(db_err)?
        };
        for lid in lids {
            let meta = self.read_object(&self.db(), lid)?;
            self.objects
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(meta.id, meta);
        }
        Ok(())
    }

    fn read_object(&self, db: &Connection, lid: i64) -> Result<ObjectMeta> {
        let (name, dtype, dims, fill, creator, ctime, mtime): (
            String,
            u8,
            String,
            Vec<u8>,
            String,
            f64,
            f64,
        ) = db
            .query_row(
                "SELECT name, dtype, dims, fill, creator, ctime, mtime FROM objects WHERE lid=?1",
                [lid],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                    ))
                },
            )
            .map_err(db_err)?;
        let dims: Vec<u64> = serde_json::from_str(&dims)
            .map_err(|e| Error::internal(format!("stored dims: {e}")))?;
        let mut st = db
            .prepare("SELECT container FROM memberships WHERE object_lid=?1 ORDER BY container")
            .map_err(db_err)?;
        let containers = st
            .query_map([lid], |r| r.get(0))
            .map_err(db_err)?
            .collect::<std::result::Result<_, _>>()
            .map_err(db_err)?;
        Ok(ObjectMeta {
            id: make_object_id(self.rank, lid as u64),
            name,
            owner: self.rank,
            creator,
            ctime,
            mtime,
            dims,
            dtype: Dtype::from_code(dtype)?,
            fill,
            containers,
            tags: read_tags(db, 0, lid)?,
        })
    }

    fn refresh(&self, id: ObjectId) -> Result<ObjectMeta> {
        let meta = self.read_object(&self.db(), lid_of(id))?;
        self.objects
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, meta.clone());
        Ok(meta)
    }

    pub fn create_container(
        &self,
        name: &str,
        tags: &Tags,
        creator: &str,
    ) -> Result<ContainerInfo> {
        self.write(|tx| {
            let inserted = tx
                .execute(
                    "INSERT OR IGNORE INTO containers (name, creator, ctime) VALUES (?1, ?2, ?3)",
                    params![name, creator, now()],
                )
                .map_err(db_err)?;
            if inserted == 0 {
                return Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!("container {name:?} already exists"),
                ));
            }
            let lid = tx.last_insert_rowid();
            write_tags(tx, 1, lid, tags)
        })?;
        self.get_container(name)
    }

    pub fn get_container(&self, name: &str) -> Result<ContainerInfo> {
        let db = self.db();
        let row: Option<(i64, String, f64)> = db
            .query_row(
                "SELECT lid, creator, ctime FROM containers WHERE name=?1",
                [name],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(db_err)?;
        let (lid, creator, ctime) =
            row.ok_or_else(|| Error::not_found(format!("no container named {name:?}")))?;
        Ok(ContainerInfo {
            id: make_object_id(self.rank, lid as u64),
            name: name.to_string(),
            owner: self.rank,
            creator,
            ctime,
            tags: read_tags(&db, 1, lid)?,
        })
    }

    pub fn list_containers(&self) -> Result<Vec<ContainerInfo>> {
        let names: Vec<String> = {
            let db = self.db();
            let mut st = db
                .prepare("SELECT name FROM containers ORDER BY name")
                .map_err(db_err)?;
            let rows = st.query_map([], |r| r.get(0)).map_err(db_err)?;
            rows.collect::<std::result::Result<_, _>>()
                .map_err(db_err)?
        };
        names.iter().map(|n| self.get_container(n)).collect()
    }

    pub fn create_object(&self, spec: &ObjectSpec) -> Result<ObjectMeta> {
        self.create_objects(std::slice::from_ref(spec))
            .pop()
            .unwrap_or_else(|| Err(Error::internal("create_objects returned no result")))
    }

    /// Creates many objects in one transaction and one (group-committed) fsync. Each object
    /// gets its own result: a duplicate name or a bad spec fails that object only (a savepoint
    /// undoes its partial rows), never the batch. Returns once the batch is durable.
    pub fn create_objects(&self, specs: &[ObjectSpec]) -> Vec<Result<ObjectMeta>> {
        let t = now();
        let batch = self.write(|tx| {
            let mut out = Vec::with_capacity(specs.len());
            for spec in specs {
                out.push(self.insert_object(tx, spec, t));
            }
            Ok(out)
        });
        let results = match batch {
            Ok(r) => r,
            // The transaction (or its fsync) failed: nothing of it is acknowledged.
            Err(e) => return specs.iter().map(|_| Err(e.clone())).collect(),
        };
        let mut objects = self.objects.write().unwrap_or_else(|p| p.into_inner());
        for m in results.iter().flatten() {
            objects.insert(m.id, m.clone());
        }
        results
    }

    /// One object's rows inside the caller's transaction, under a savepoint. Builds the
    /// metadata the way `read_object` would read it back (memberships and tags sorted by name,
    /// the last value of a repeated tag wins), saving three queries per object.
    fn insert_object(
        &self,
        tx: &rusqlite::Transaction,
        spec: &ObjectSpec,
        t: f64,
    ) -> Result<ObjectMeta> {
        validate_dims(&spec.dims)?;
        let fill = match &spec.fill {
            None => vec![0u8; spec.dtype.size()],
            Some(f) if f.len() == spec.dtype.size() => f.clone(),
            Some(f) => {
                return Err(Error::new(
                    ErrorKind::DtypeMismatch,
                    format!(
                        "fill value has {} bytes but {} elements have {}",
                        f.len(),
                        spec.dtype,
                        spec.dtype.size()
                    ),
                ))
            }
        };
        if spec.tags.iter().any(|(k, _)| k.is_empty()) {
            return Err(Error::invalid("tag names must not be empty"));
        }
        let dims = serde_json::to_string(&spec.dims).map_err(|e| Error::internal(e.to_string()))?;
        tx.execute_batch("SAVEPOINT obj").map_err(db_err)?;
        let rows = (|| {
            let inserted = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO objects (name, dtype, dims, fill, creator, ctime, mtime) VALUES (?1,?2,?3,?4,?5,?6,?6)",
                )
                .and_then(|mut st| st.execute(params![spec.name, spec.dtype as u8, dims, fill, spec.creator, t]))
                .map_err(db_err)?;
            if inserted == 0 {
                return Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!("object {:?} already exists", spec.name),
                ));
            }
            let lid = tx.last_insert_rowid();
            let mut st = tx
                .prepare_cached("INSERT OR IGNORE INTO memberships VALUES (?1, ?2)")
                .map_err(db_err)?;
            for c in &spec.containers {
                st.execute(params![lid, c]).map_err(db_err)?;
            }
            write_tags(tx, 0, lid, &spec.tags)?;
            Ok(lid)
        })();
        let lid = match rows {
            Ok(lid) => {
                tx.execute_batch("RELEASE obj").map_err(db_err)?;
                lid
            }
            Err(e) => {
                tx.execute_batch("ROLLBACK TO obj; RELEASE obj")
                    .map_err(db_err)?;
                return Err(e);
            }
        };
        let containers: std::collections::BTreeSet<&String> = spec.containers.iter().collect();
        let tags: std::collections::BTreeMap<&String, &TagValue> =
            spec.tags.iter().map(|(k, v)| (k, v)).collect();
        Ok(ObjectMeta {
            id: make_object_id(self.rank, lid as u64),
            name: spec.name.clone(),
            owner: self.rank,
            creator: spec.creator.clone(),
            ctime: t,
            mtime: t,
            dims: spec.dims.clone(),
            dtype: spec.dtype,
            fill,
            containers: containers.into_iter().cloned().collect(),
            tags: tags
                .into_iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        })
    }

    pub fn object(&self, id: ObjectId) -> Result<ObjectMeta> {
        self.objects
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
            .ok_or_else(|| Error::not_found(format!("no object with id {id:#x}")))
    }

    pub fn object_by_name(&self, name: &str) -> Result<ObjectMeta> {
        let lid: Option<i64> = self
            .db()
            .query_row("SELECT lid FROM objects WHERE name=?1", [name], |r| {
                r.get(0)
            })
            .optional()
            .map_err(db_err)?;
        let lid = lid.ok_or_else(|| Error::not_found(format!("no object named {name:?}")))?;
        self.object(make_object_id(self.rank, lid as u64))
    }

    pub fn list_objects(&self, container: Option<&str>) -> Result<Vec<ObjectMeta>> {
        let objects = self.objects.read().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<ObjectMeta> = objects
            .values()
            .filter(|o| container.is_none_or(|c| o.containers.iter().any(|x| x == c)))
            .cloned()
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(v)
    }

    /// Dims may only grow: shrinking would silently hide written data.
    pub fn set_dims(&self, id: ObjectId, dims: &[u64]) -> Result<ObjectMeta> {
        validate_dims(dims)?;
        let cur = self.object(id)?;
        if dims.len() != cur.dims.len() {
            return Err(Error::invalid(format!(
                "object {} has {} dims; cannot change to {}",
                cur.name,
                cur.dims.len(),
                dims.len()
            )));
        }
        if let Some(d) = (0..dims.len()).find(|&d| dims[d] < cur.dims[d]) {
            return Err(Error::invalid(format!(
                "dims can only grow: dim {d} of {} is {} and cannot shrink to {}",
                cur.name, cur.dims[d], dims[d]
            )));
        }
        let text = serde_json::to_string(dims).map_err(|e| Error::internal(e.to_string()))?;
        self.write(|tx| {
            tx.execute(
                "UPDATE objects SET dims=?1, mtime=?2 WHERE lid=?3",
                params![text, now(), lid_of(id)],
            )
            .map_err(db_err)
        })?;
        self.refresh(id)
    }

    pub fn add_to_container(&self, id: ObjectId, container: &str) -> Result<()> {
        self.object(id)?;
        self.write(|tx| {
            tx.execute(
                "INSERT OR IGNORE INTO memberships VALUES (?1, ?2)",
                params![lid_of(id), container],
            )
            .map_err(db_err)
        })?;
        self.refresh(id).map(|_| ())
    }

    /// Removes one object with its memberships, tags, extent rows and region map (one
    /// transaction). The caller drops the engine's in-memory extents; the log bytes become
    /// garbage, here and on other servers holding regions of it (ids are never reused, so
    /// their leftover extents are never read).
    pub fn delete_object(&self, id: ObjectId) -> Result<ObjectMeta> {
        let meta = self.object(id)?;
        let lid = lid_of(id);
        self.write(|tx| {
            tx.execute("DELETE FROM memberships WHERE object_lid=?1", [lid])
                .map_err(db_err)?;
            tx.execute("DELETE FROM tags WHERE kind=0 AND lid=?1", [lid])
                .map_err(db_err)?;
            tx.execute("DELETE FROM extent_map WHERE object=?1", [id as i64])
                .map_err(db_err)?;
            tx.execute("DELETE FROM region_map WHERE object=?1", [id as i64])
                .map_err(db_err)?;
            tx.execute("DELETE FROM region_tokens WHERE object=?1", [id as i64])
                .map_err(db_err)?;
            tx.execute("DELETE FROM objects WHERE lid=?1", [lid])
                .map_err(db_err)?;
            Ok(())
        })?;
        self.objects
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        Ok(meta)
    }

    /// Removes a container and its tags. Memberships naming it are dropped separately on
    /// every server (`drop_memberships`), since they live with the objects' owners.
    pub fn delete_container(&self, name: &str) -> Result<()> {
        let c = self.get_container(name)?;
        let lid = lid_of(c.id);
        self.write(|tx| {
            tx.execute("DELETE FROM tags WHERE kind=1 AND lid=?1", [lid])
                .map_err(db_err)?;
            tx.execute("DELETE FROM containers WHERE lid=?1", [lid])
                .map_err(db_err)?;
            Ok(())
        })
    }

    /// Removes object `id` from `container`; NotFound if it was not a member.
    pub fn remove_from_container(&self, id: ObjectId, container: &str) -> Result<()> {
        let o = self.object(id)?;
        let n = self.write(|tx| {
            tx.execute(
                "DELETE FROM memberships WHERE object_lid=?1 AND container=?2",
                params![lid_of(id), container],
            )
            .map_err(db_err)
        })?;
        if n == 0 {
            return Err(Error::not_found(format!(
                "object {:?} is not in container {container:?}",
                o.name
            )));
        }
        self.refresh(id).map(|_| ())
    }

    /// Drops every membership in `container` of this shard's objects; returns how many.
    pub fn drop_memberships(&self, container: &str) -> Result<u64> {
        let lids: Vec<i64> = {
            let db = self.db();
            let mut st = db
                .prepare("SELECT object_lid FROM memberships WHERE container=?1")
                .map_err(db_err)?;
            let rows = st.query_map([container], |r| r.get(0)).map_err(db_err)?;
            rows.collect::<std::result::Result<_, _>>()
                .map_err(db_err)?
        };
        self.write(|tx| {
            tx.execute("DELETE FROM memberships WHERE container=?1", [container])
                .map_err(db_err)
        })?;
        for lid in &lids {
            self.refresh(make_object_id(self.rank, *lid as u64))?;
        }
        Ok(lids.len() as u64)
    }

    fn target_lid(&self, target: &TagTarget) -> Result<(i64, i64)> {
        match target {
            TagTarget::Object(id) => self.object(*id).map(|_| (0, lid_of(*id))),
            TagTarget::Container(name) => self.get_container(name).map(|c| (1, lid_of(c.id))),
        }
    }

    pub fn put_tags(&self, target: &TagTarget, tags: &Tags) -> Result<()> {
        let (kind, lid) = self.target_lid(target)?;
        self.write(|tx| write_tags(tx, kind, lid, tags))?;
        if let TagTarget::Object(id) = target {
            self.refresh(*id)?;
        }
        Ok(())
    }

    pub fn delete_tag(&self, target: &TagTarget, key: &str) -> Result<()> {
        let (kind, lid) = self.target_lid(target)?;
        let n = self.write(|tx| {
            tx.execute(
                "DELETE FROM tags WHERE kind=?1 AND lid=?2 AND key=?3",
                params![kind, lid, key],
            )
            .map_err(db_err)
        })?;
        if n == 0 {
            return Err(Error::not_found(format!("no tag {key:?}")));
        }
        if let TagTarget::Object(id) = target {
            self.refresh(*id)?;
        }
        Ok(())
    }

    /// Objects of this shard matching all conditions. The tag name `name` matches the object's
    /// own name, so `name~run1/*` selects by name pattern.
    pub fn query(&self, conditions: &[Condition]) -> Result<Vec<(ObjectId, String)>> {
        let mut sql = String::from("SELECT o.lid, o.name FROM objects o WHERE 1=1");
        let mut args: Vec<rusqlite::types::Value> = Vec::new();
        for c in conditions {
            let (clause, mut a) = condition_sql(c);
            sql.push_str(" AND ");
            sql.push_str(&clause);
            args.append(&mut a);
        }
        sql.push_str(" ORDER BY o.name");
        let db = self.db();
        let mut st = db.prepare(&sql).map_err(db_err)?;
        let rows = st
            .query_map(rusqlite::params_from_iter(args), |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(db_err)?;
        rows.map(|r| {
            r.map(|(lid, name)| (make_object_id(self.rank, lid as u64), name))
                .map_err(db_err)
        })
        .collect()
    }

    /// Records committed extents in one transaction and bumps the objects' mtime. Returns at
    /// commit (visible, in the WAL, survives kill -9) with the ticket to `wait_durable` for:
    /// `memory` durability does not wait for the fsync.
    pub fn insert_extents(&self, rows: &[ExtentRow]) -> Result<u64> {
        let t = now();
        let ((), ticket) = self.write_nowait(|tx| {
            let mut ins = tx
                .prepare_cached("INSERT INTO extent_map (seq, object, region, segment, offset, len, crc) VALUES (?1,?2,?3,?4,?5,?6,?7)")
                .map_err(db_err)?;
            for r in rows {
                let region =
                    bincode::serialize(&r.region).map_err(|e| Error::internal(e.to_string()))?;
                ins.execute(params![
                    r.seq as i64,
                    r.id as i64,
                    region,
                    r.loc.segment as i64,
                    r.loc.offset as i64,
                    r.loc.len as i64,
                    r.loc.crc
                ])
                .map_err(db_err)?;
            }
            let mut touch = tx
                .prepare_cached("UPDATE objects SET mtime=?1 WHERE lid=?2")
                .map_err(db_err)?;
            for r in rows.iter().filter(|r| owner_of_id(r.id) == self.rank) {
                touch.execute(params![t, lid_of(r.id)]).map_err(db_err)?;
            }
            Ok(())
        })?;
        let mut objects = self.objects.write().unwrap_or_else(|p| p.into_inner());
        for r in rows {
            if let Some(o) = objects.get_mut(&r.id) {
                o.mtime = t;
            }
        }
        Ok(ticket)
    }

    pub fn load_extents(&self) -> Result<Vec<ExtentRow>> {
        let db = self.db();
        let mut st = db.prepare("SELECT seq, object, region, segment, offset, len, crc FROM extent_map ORDER BY object, seq").map_err(db_err)?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Vec<u8>>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, i64>(5)?,
                    r.get::<_, u32>(6)?,
                ))
            })
            .map_err(db_err)?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, id, region, segment, offset, len, crc) = row.map_err(db_err)?;
            let region: Region = bincode::deserialize(&region)
                .map_err(|e| Error::internal(format!("stored region: {e}")))?;
            out.push(ExtentRow {
                id: id as u64,
                seq: seq as u64,
                region,
                loc: Location {
                    segment: segment as u64,
                    offset: offset as u64,
                    len: len as u64,
                    crc,
                },
            });
        }
        Ok(out)
    }

    /// Drops extents whose data the log does not hold as committed (written with `memory`
    /// durability just before a crash).
    pub fn delete_extents(&self, keys: &[(ObjectId, u64)]) -> Result<()> {
        self.write(|tx| {
            for (id, seq) in keys {
                tx.execute(
                    "DELETE FROM extent_map WHERE object=?1 AND seq=?2",
                    params![*id as i64, *seq as i64],
                )
                .map_err(db_err)?;
            }
            Ok(())
        })
    }

    /// Owner side of a registration by `holder`: each item's sequence number. A deferred write
    /// (with a token) that was registered before gets its first number back; every other item
    /// takes the next number from `next_seq` and is recorded in the region map (and its token,
    /// if any), all in one transaction that is durable when this returns. `next_seq` advances
    /// only if it commits. Returns (seq, newly recorded) per item.
    pub fn register_regions(
        &self,
        holder: u32,
        items: &[Registration<'_>],
        next_seq: &mut u64,
    ) -> Result<Vec<(u64, bool)>> {
        let start = *next_seq;
        let (out, next) = self.write(|tx| {
            let mut find = tx
                .prepare_cached(
                    "SELECT seq FROM region_tokens WHERE holder=?1 AND segment=?2 AND offset=?3",
                )
                .map_err(db_err)?;
            let mut ins = tx
                .prepare_cached(
                    "INSERT INTO region_map (object, seq, holder, region) VALUES (?1,?2,?3,?4)",
                )
                .map_err(db_err)?;
            let mut ins_token = tx
                .prepare_cached("INSERT INTO region_tokens (holder, segment, offset, object, seq) VALUES (?1,?2,?3,?4,?5)")
                .map_err(db_err)?;
            let mut next = start;
            let mut out = Vec::with_capacity(items.len());
            for (id, region, token) in items {
                if let Some((seg, off)) = token {
                    let known: Option<i64> = find
                        .query_row(params![holder as i64, *seg as i64, *off as i64], |r| {
                            r.get(0)
                        })
                        .optional()
                        .map_err(db_err)?;
                    if let Some(seq) = known {
                        out.push((seq as u64, false));
                        continue;
                    }
                }
                let seq = next;
                next += 1;
                let blob =
                    bincode::serialize(region).map_err(|e| Error::internal(e.to_string()))?;
                ins.execute(params![*id as i64, seq as i64, holder as i64, blob])
                    .map_err(db_err)?;
                if let Some((seg, off)) = token {
                    ins_token
                        .execute(params![
                            holder as i64,
                            *seg as i64,
                            *off as i64,
                            *id as i64,
                            seq as i64
                        ])
                        .map_err(db_err)?;
                }
                out.push((seq, true));
            }
            Ok((out, next))
        })?;
        *next_seq = next;
        let t = now();
        let mut objects = self.objects.write().unwrap_or_else(|p| p.into_inner());
        for (id, _, _) in items {
            if let Some(o) = objects.get_mut(id) {
                o.mtime = t;
            }
        }
        Ok(out)
    }

    /// Holder side, once the owners answered a registration of deferred writes: gives each
    /// extent stored under its provisional sequence number the owner's number, or drops it
    /// (None: the object was deleted). Returns at commit with the ticket to `wait_durable` for;
    /// nobody needs to wait: after a crash the holder registers again and the owner answers
    /// with the same numbers.
    pub fn assign_seqs(&self, updates: &[(ObjectId, u64, Option<u64>)]) -> Result<u64> {
        let ((), ticket) = self.write_nowait(|tx| {
            let mut set = tx
                .prepare_cached("UPDATE extent_map SET seq=?1 WHERE object=?2 AND seq=?3")
                .map_err(db_err)?;
            let mut del = tx
                .prepare_cached("DELETE FROM extent_map WHERE object=?1 AND seq=?2")
                .map_err(db_err)?;
            for (id, provisional, seq) in updates {
                match seq {
                    Some(seq) => set
                        .execute(params![*seq as i64, *id as i64, *provisional as i64])
                        .map_err(db_err)?,
                    None => del
                        .execute(params![*id as i64, *provisional as i64])
                        .map_err(db_err)?,
                };
            }
            Ok(())
        })?;
        Ok(ticket)
    }

    /// The region map as (object, seq, holder, region), ordered by object and seq.
    pub fn load_region_map(&self) -> Result<Vec<(ObjectId, u64, u32, Region)>> {
        let db = self.db();
        let mut st = db
            .prepare("SELECT object, seq, holder, region FROM region_map ORDER BY object, seq")
            .map_err(db_err)?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Vec<u8>>(3)?,
                ))
            })
            .map_err(db_err)?;
        let mut out = Vec::new();
        for row in rows {
            let (id, seq, holder, region) = row.map_err(db_err)?;
            let region: Region = bincode::deserialize(&region)
                .map_err(|e| Error::internal(format!("stored region: {e}")))?;
            out.push((id as u64, seq as u64, holder as u32, region));
        }
        Ok(out)
    }

    pub fn counts(&self) -> Result<(u64, u64)> {
        let db = self.db();
        let c: i64 = db
            .query_row("SELECT COUNT(*) FROM containers", [], |r| r.get(0))
            .map_err(db_err)?;
        Ok((
            self.objects.read().unwrap_or_else(|p| p.into_inner()).len() as u64,
            c as u64,
        ))
    }
}

fn write_tags(tx: &rusqlite::Transaction, kind: i64, lid: i64, tags: &Tags) -> Result<()> {
    let mut st = tx
        .prepare_cached("INSERT OR REPLACE INTO tags (kind, lid, key, vtype, ival, num, sval, bval) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)")
        .map_err(db_err)?;
    for (key, value) in tags {
        if key.is_empty() {
            return Err(Error::invalid("tag names must not be empty"));
        }
        let none = rusqlite::types::Null;
        match value {
            TagValue::Str(s) => st.execute(params![kind, lid, key, 0, none, none, s, none]),
            TagValue::Int(i) => st.execute(params![kind, lid, key, 1, i, *i as f64, none, none]),
            TagValue::Float(f) => st.execute(params![kind, lid, key, 2, none, f, none, none]),
            TagValue::Bytes(b) => st.execute(params![kind, lid, key, 3, none, none, none, b]),
        }
        .map_err(db_err)?;
    }
    Ok(())
}

fn read_tags(db: &Connection, kind: i64, lid: i64) -> Result<Tags> {
    let mut st = db
        .prepare_cached("SELECT key, vtype, ival, num, sval, bval FROM tags WHERE kind=?1 AND lid=?2 ORDER BY key")
        .map_err(db_err)?;
    let rows = st
        .query_map(params![kind, lid], |r| {
            let key: String = r.get(0)?;
            let v = match r.get::<_, i64>(1)? {
                0 => TagValue::Str(r.get(4)?),
                1 => TagValue::Int(r.get(2)?),
                2 => TagValue::Float(r.get(3)?),
                _ => TagValue::Bytes(r.get(5)?),
            };
            Ok((key, v))
        })
        .map_err(db_err)?;
    rows.collect::<std::result::Result<_, _>>().map_err(db_err)
}

/// SQL for one condition over `objects o`, with its bind values.
fn condition_sql(c: &Condition) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value as V;
    let key = c.key().to_string();
    if key == "name" {
        match c {
            Condition::Eq(_, TagValue::Str(s)) => {
                return ("o.name = ?".into(), vec![V::Text(s.clone())])
            }
            Condition::Ne(_, TagValue::Str(s)) => {
                return ("o.name != ?".into(), vec![V::Text(s.clone())])
            }
            Condition::Glob(_, g) => return ("o.name GLOB ?".into(), vec![V::Text(g.clone())]),
            _ => {}
        }
    }
    let eq = |v: &TagValue| -> (String, Vec<V>) {
        match v {
            TagValue::Str(s) => ("vtype=0 AND sval=?".into(), vec![V::Text(s.clone())]),
            TagValue::Int(i) => (
                "((vtype=1 AND ival=?) OR (vtype=2 AND num=?))".into(),
                vec![V::Integer(*i), V::Real(*i as f64)],
            ),
            TagValue::Float(f) => ("vtype IN (1,2) AND num=?".into(), vec![V::Real(*f)]),
            TagValue::Bytes(b) => ("vtype=3 AND bval=?".into(), vec![V::Blob(b.clone())]),
        }
    };
    let (pred, mut vals) = match c {
        Condition::Eq(_, v) => eq(v),
        Condition::Ne(_, v) => {
            let (p, v) = eq(v);
            (format!("NOT ({p})"), v)
        }
        Condition::Cmp(_, op, x) => {
            let op = match op {
                CmpOp::Lt => "<",
                CmpOp::Le => "<=",
                CmpOp::Gt => ">",
                CmpOp::Ge => ">=",
            };
            (format!("vtype IN (1,2) AND num {op} ?"), vec![V::Real(*x)])
        }
        Condition::Glob(_, g) => ("vtype=0 AND sval GLOB ?".into(), vec![V::Text(g.clone())]),
        Condition::Exists(_) => ("1=1".into(), vec![]),
    };
    let mut args = vec![V::Text(key)];
    args.append(&mut vals);
    (
        format!("o.lid IN (SELECT lid FROM tags WHERE kind=0 AND key=? AND {pred})"),
        args,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, tags: Tags) -> ObjectSpec {
        ObjectSpec {
            name: name.into(),
            dims: vec![10],
            dtype: Dtype::Float32,
            fill: None,
            containers: vec!["c".into()],
            tags,
            creator: "t".into(),
        }
    }

    #[test]
    fn tag_queries_cover_equality_ranges_and_globs() {
        let dir = tempfile::tempdir().unwrap();
        let md = Metadata::open(&dir.path().join("m.db"), 0, 1).unwrap();
        for s in 0..5i64 {
            let tags = vec![
                ("step".into(), TagValue::Int(s)),
                (
                    "species".into(),
                    TagValue::Str(if s % 2 == 0 {
                        "electron".into()
                    } else {
                        "ion".into()
                    }),
                ),
                ("t".into(), TagValue::Float(s as f64 * 0.5)),
            ];
            md.create_object(&spec(&format!("run/s{s}"), tags)).unwrap();
        }
        let q = |conds: &[&str]| -> Vec<String> {
            let c: Vec<Condition> = conds.iter().map(|t| Condition::parse(t).unwrap()).collect();
            md.query(&c).unwrap().into_iter().map(|x| x.1).collect()
        };
        assert_eq!(q(&["step=3"]), vec!["run/s3"]);
        assert_eq!(q(&["step>=3"]), vec!["run/s3", "run/s4"]);
        assert_eq!(q(&["t<1", "species=electron"]), vec!["run/s0"]);
        assert_eq!(q(&["species~elec*"]).len(), 3);
        assert_eq!(q(&["species!=ion"]).len(), 3);
        assert_eq!(q(&["name~run/s[12]"]), vec!["run/s1", "run/s2"]);
        assert_eq!(q(&["step=1.0"]), vec!["run/s1"]);
        assert!(q(&["missing?"]).is_empty());
        assert_eq!(q(&["step?"]).len(), 5);
    }

    #[test]
    fn deletes_remove_objects_containers_and_memberships() {
        let dir = tempfile::tempdir().unwrap();
        let md = Metadata::open(&dir.path().join("m.db"), 0, 1).unwrap();
        md.create_container("c", &vec![("k".into(), TagValue::Int(1))], "t")
            .unwrap();
        md.create_container("d", &vec![], "t").unwrap();
        let a = md
            .create_object(&spec("a", vec![("x".into(), TagValue::Int(1))]))
            .unwrap();
        let b = md.create_object(&spec("b", vec![])).unwrap();
        md.add_to_container(b.id, "d").unwrap();
        md.insert_extents(&[ExtentRow {
            id: a.id,
            seq: 1,
            region: Region::whole(&[10]),
            loc: Location {
                segment: 0,
                offset: 0,
                len: 40,
                crc: 0,
            },
        }])
        .unwrap();
        // Object delete: gone by id and name, no tags, no extents, not listed, name reusable.
        md.delete_object(a.id).unwrap();
        assert_eq!(md.object(a.id).unwrap_err().kind, ErrorKind::NotFound);
        assert_eq!(
            md.object_by_name("a").unwrap_err().kind,
            ErrorKind::NotFound
        );
        assert!(md.load_extents().unwrap().is_empty());
        assert!(md
            .query(&[Condition::parse("x=1").unwrap()])
            .unwrap()
            .is_empty());
        assert_eq!(
            md.delete_object(a.id).unwrap_err().kind,
            ErrorKind::NotFound
        );
        let a2 = md.create_object(&spec("a", vec![])).unwrap();
        assert_ne!(a2.id, a.id, "ids are never reused");
        // Remove from one container: the object stays, in its other containers.
        md.remove_from_container(b.id, "d").unwrap();
        assert_eq!(md.object(b.id).unwrap().containers, vec!["c".to_string()]);
        assert_eq!(
            md.remove_from_container(b.id, "d").unwrap_err().kind,
            ErrorKind::NotFound
        );
        // Container delete + membership drop.
        md.delete_container("c").unwrap();
        assert_eq!(md.get_container("c").unwrap_err().kind, ErrorKind::NotFound);
        assert_eq!(md.drop_memberships("c").unwrap(), 2);
        assert!(md.object(b.id).unwrap().containers.is_empty());
        assert!(md.list_objects(Some("c")).unwrap().is_empty());
        assert_eq!(md.list_containers().unwrap().len(), 1);
        // The container name is free again, without the old tags.
        assert!(md
            .create_container("c", &vec![], "t")
            .unwrap()
            .tags
            .is_empty());
    }

    #[test]
    fn batched_creates_fail_per_object_and_match_what_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        let md = Metadata::open(&path, 0, 1).unwrap();
        md.create_object(&spec("dup", vec![])).unwrap();
        let mut bad_fill = spec("badfill", vec![]);
        bad_fill.fill = Some(vec![1]);
        let mut specs = vec![
            spec(
                "a",
                vec![
                    ("z".into(), TagValue::Int(1)),
                    ("b".into(), TagValue::Str("x".into())),
                    ("z".into(), TagValue::Int(2)),
                ],
            ),
            spec("dup", vec![]),
            bad_fill,
            spec("emptytag", vec![("".into(), TagValue::Int(1))]),
            spec("b", vec![]),
        ];
        specs[4].containers = vec!["d".into(), "c".into(), "d".into()];
        let syncs = md.wal_syncs();
        let r = md.create_objects(&specs);
        assert_eq!(md.wal_syncs(), syncs + 1, "one fsync for the whole batch");
        assert_eq!(r.len(), 5);
        assert_eq!(r[1].as_ref().unwrap_err().kind, ErrorKind::AlreadyExists);
        assert_eq!(r[2].as_ref().unwrap_err().kind, ErrorKind::DtypeMismatch);
        assert_eq!(r[3].as_ref().unwrap_err().kind, ErrorKind::InvalidArgument);
        let a = r[0].as_ref().unwrap().clone();
        let b = r[4].as_ref().unwrap().clone();
        assert_eq!(
            a.tags,
            vec![
                ("b".into(), TagValue::Str("x".into())),
                ("z".into(), TagValue::Int(2))
            ]
        );
        // Failed objects left no rows behind (savepoints), the rest read back identically.
        assert_eq!(
            md.object_by_name("emptytag").unwrap_err().kind,
            ErrorKind::NotFound
        );
        assert_eq!(
            md.object_by_name("badfill").unwrap_err().kind,
            ErrorKind::NotFound
        );
        drop(md);
        let md = Metadata::open(&path, 0, 1).unwrap();
        assert_eq!(md.object(a.id).unwrap(), a);
        assert_eq!(md.object(b.id).unwrap(), b);
        assert_eq!(md.list_objects(None).unwrap().len(), 3);
    }

    #[test]
    fn concurrent_writers_share_wal_fsyncs() {
        let dir = tempfile::tempdir().unwrap();
        let md = std::sync::Arc::new(Metadata::open(&dir.path().join("m.db"), 0, 1).unwrap());
        let before = md.wal_syncs();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let md = md.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let o = md
                            .create_object(&spec(&format!("t{t}-{i}"), vec![]))
                            .unwrap();
                        md.put_tags(
                            &TagTarget::Object(o.id),
                            &vec![("k".into(), TagValue::Int(i))],
                        )
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(md.list_objects(None).unwrap().len(), 200);
        let syncs = md.wal_syncs() - before;
        assert!(syncs <= 400, "at most one fsync per write, got {syncs}");
    }

    #[test]
    fn duplicates_shrinks_and_wrong_rank_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        let md = Metadata::open(&path, 0, 2).unwrap();
        let o = md.create_object(&spec("a", vec![])).unwrap();
        assert_eq!(
            md.create_object(&spec("a", vec![])).unwrap_err().kind,
            ErrorKind::AlreadyExists
        );
        assert!(md.set_dims(o.id, &[5]).is_err());
        assert_eq!(md.set_dims(o.id, &[20]).unwrap().dims, vec![20]);
        let mut bad = spec("b", vec![]);
        bad.fill = Some(vec![1, 2]);
        assert_eq!(
            md.create_object(&bad).unwrap_err().kind,
            ErrorKind::DtypeMismatch
        );
        drop(md);
        let err = Metadata::open(&path, 0, 3)
            .err()
            .expect("size change must be refused");
        assert!(err.message.contains("same server count"), "{err}");
        let md = Metadata::open(&path, 0, 2).unwrap();
        assert_eq!(md.object_by_name("a").unwrap().dims, vec![20]);
    }
}
