//! The catalog: containers, objects, their memberships and tags, and tag queries. Objects are
//! cached in memory (`Metadata::object`): every data request checks bounds and dtype against
//! them.

use super::{db_err, lid_of, locations, now, Metadata};
use pdcx_core::model::{make_object_id, validate_dims, Tags};
use pdcx_core::protocol::{ObjectSpec, TagTarget};
use pdcx_core::query::CmpOp;
use pdcx_core::{
    Condition, ContainerInfo, Dtype, Error, ErrorKind, ObjectId, ObjectMeta, Result, TagValue,
};
use rusqlite::{params, Connection, OptionalExtension};

impl Metadata {
    pub(super) fn load_objects(&self) -> Result<()> {
        let lids: Vec<i64> = {
            let db = self.db();
            let mut st = db.prepare("SELECT lid FROM objects").map_err(db_err)?;
            let rows = st.query_map([], |r| r.get(0)).map_err(db_err)?;
            rows.collect::<std::result::Result<_, _>>()
                .map_err(db_err)?
        };
        for lid in lids {
            let meta = self.read_object(&self.db(), lid)?;
            self.names
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(meta.name.clone(), meta.id);
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
    /// gets its own result: a duplicate name or a bad spec fails that object only (before any
    /// of its rows is written), never the batch; a database error fails the whole batch (the
    /// transaction rolls back, so no object is left half-created). Returns once the batch is
    /// durable.
    pub fn create_objects(&self, specs: &[ObjectSpec]) -> Vec<Result<ObjectMeta>> {
        self.create_objects_with(specs, false)
    }

    /// [`create_objects`](Self::create_objects), or with `lazy` answered without waiting for
    /// the disk. Either way the objects are created in memory: checked (a duplicate name or a
    /// bad spec fails here), given ids, visible to every request at once, and their rows are
    /// queued; they are written in one transaction with whatever else is queued by the next use
    /// of the database, by the syncer (kicked here, so within about one transaction plus 5 ms)
    /// or by [`sync`](Metadata::sync) (`SyncMeta`), which also fsyncs. Without `lazy` this
    /// returns after that `sync`; with it, a kill -9 before the syncer ran loses the objects
    /// (never their ids: see [`LidRange`]).
    pub fn create_objects_with(&self, specs: &[ObjectSpec], lazy: bool) -> Vec<Result<ObjectMeta>> {
        let t = now();
        let mut results = Vec::with_capacity(specs.len());
        {
            let mut lids = self.lids.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = self.reserve_lids(&mut lids, specs.len() as u64) {
                return specs.iter().map(|_| Err(e.clone())).collect();
            }
            let mut names = self.names.write().unwrap_or_else(|p| p.into_inner());
            let mut made = Vec::new();
            for spec in specs {
                let meta = match new_object(spec, t) {
                    Ok(m) => m,
                    Err(e) => {
                        results.push(Err(e));
                        continue;
                    }
                };
                if names.contains_key(&spec.name) || self.linked(&spec.name).is_some() {
                    results.push(Err(Error::new(
                        ErrorKind::AlreadyExists,
                        format!("object {:?} already exists", spec.name),
                    )));
                    continue;
                }
                let meta = ObjectMeta {
                    id: make_object_id(self.rank, lids.take()),
                    owner: self.rank,
                    ..meta
                };
                names.insert(meta.name.clone(), meta.id);
                made.push(meta.clone());
                results.push(Ok(meta));
            }
            let mut objects = self.objects.write().unwrap_or_else(|p| p.into_inner());
            for m in &made {
                objects.insert(m.id, m.clone());
            }
            drop(objects);
            drop(names);
            self.shard.queue(made);
        }
        if lazy {
            self.syncer.kick();
        } else if let Err(e) = self.sync() {
            // Not durable, so not acknowledged (they stay queued and visible; the shard's
            // group commit is poisoned by a failed fsync, so no later write succeeds either).
            for r in results.iter_mut().filter(|r| r.is_ok()) {
                *r = Err(e.clone());
            }
        }
        results
    }

    /// Makes sure the next `n` local ids are recorded as handed out: when the recorded range
    /// is too short it is extended by `n` + [`LID_BLOCK`] in one durable transaction (one per
    /// about 4096 creates). An id is handed out only inside the recorded range, so ids stay
    /// unique after a crash that lost created objects whose ids clients already hold.
    fn reserve_lids(&self, lids: &mut LidRange, n: u64) -> Result<()> {
        if lids.next + n <= lids.end {
            return Ok(());
        }
        let end = lids.next + n + LID_BLOCK;
        self.write(|tx| {
            tx.prepare_cached("INSERT OR REPLACE INTO settings VALUES ('lids_reserved', ?1)")
                .map_err(db_err)?
                .execute([end.to_string()])
                .map_err(db_err)
        })?;
        lids.end = end;
        Ok(())
    }

    pub fn object(&self, id: ObjectId) -> Result<ObjectMeta> {
        self.objects
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
            .ok_or_else(|| Error::not_found(format!("no object with id {id:#x}")))
    }

    /// One tag of object `id` (None: no such tag or object), without copying the object.
    pub fn object_tag(&self, id: ObjectId, key: &str) -> Option<TagValue> {
        self.objects
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .and_then(|o| o.tags.iter().find(|(k, _)| k == key))
            .map(|(_, v)| v.clone())
    }

    pub fn object_by_name(&self, name: &str) -> Result<ObjectMeta> {
        let id = self
            .names
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .copied();
        let id = id.ok_or_else(|| Error::not_found(format!("no object named {name:?}")))?;
        self.object(id)
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
    /// Sets an object's dims exactly, as PDC's `PDCobj_set_dims` does: they may grow or shrink
    /// (elements past a shrunk end are no longer readable or writable). The number of dims may
    /// change only while the object has no elements (all dims 0) and, as the caller checks, no
    /// data: an object created with its shape unknown takes its rank from the first set.
    pub fn set_dims(&self, id: ObjectId, dims: &[u64]) -> Result<ObjectMeta> {
        validate_dims(dims)?;
        let cur = self.object(id)?;
        if dims.len() != cur.dims.len() && cur.dims.iter().any(|&d| d != 0) {
            return Err(Error::invalid(format!(
                "object {} has {} dims; cannot change to {} (only an object with no elements, \
                 all dims 0, may change its number of dims)",
                cur.name,
                cur.dims.len(),
                dims.len()
            )));
        }
        if cur.is_byte_stream() {
            return Err(Error::invalid(format!(
                "{} is a byte stream: set its size (truncate) instead of its dims",
                cur.name
            )));
        }
        let text = serde_json::to_string(dims).map_err(|e| Error::internal(e.to_string()))?;
        self.write(|tx| {
            tx.prepare_cached("UPDATE objects SET dims=?1, mtime=?2 WHERE lid=?3")
                .map_err(db_err)?
                .execute(params![text, now(), lid_of(id)])
                .map_err(db_err)
        })?;
        self.refresh(id)
    }

    /// Grows dims to at least `want` (elementwise maximum) and never fails for being smaller:
    /// the writers of a byte stream grow it concurrently, in any order; the queued growth is
    /// merged into the stored dims with the same maximum, so two growers never lose each
    /// other's size. Not written before it returns (see below).
    pub fn extend_dims(&self, id: ObjectId, want: &[u64]) -> Result<ObjectMeta> {
        validate_dims(want)?;
        let cur = self.object(id)?;
        if want.len() != cur.dims.len() {
            return Err(Error::invalid(format!(
                "object {} has {} dims; cannot extend with {}",
                cur.name,
                cur.dims.len(),
                want.len()
            )));
        }
        if want.iter().zip(&cur.dims).all(|(w, c)| w <= c) {
            return Ok(cur);
        }
        // The new size goes to the database with its next batch (`Shard::queue_growth`), no
        // transaction of its own. A write past the old end becomes visible when its rows are
        // registered, in a transaction the queue is written before: once the write is
        // committed, its growth is in the WAL too and survives a kill -9 as its rows do; it
        // is durable at the next WAL sync (the writer's consistency point). The cached copy
        // grows with the same maximum, under the queue's lock (a plain re-read could land
        // after a racing grower's and put a smaller size back, seen as a version sealed
        // without the last writer's bytes).
        let mut out = None;
        self.shard.queue_growth(id, want, || {
            let mut objects = self.objects.write().unwrap_or_else(|p| p.into_inner());
            if let Some(m) = objects.get_mut(&id) {
                super::grow_dims(&mut m.dims, want);
                m.mtime = now();
                out = Some(m.clone());
            }
        });
        out.ok_or_else(|| Error::not_found(format!("no object with id {id:#x}")))
    }

    /// Sets the size of a byte-stream object (1-D `u8`, tag `pdcx.kind = "bytestream"`) to
    /// exactly `len`, shrinking too (POSIX `ftruncate`). Durable when it returns.
    pub fn set_size(&self, id: ObjectId, len: u64) -> Result<ObjectMeta> {
        let cur = self.object(id)?;
        if !cur.is_byte_stream() {
            return Err(Error::invalid(format!(
                "object {} is not a byte stream: only byte streams have a size to set (use set_dims)",
                cur.name
            )));
        }
        let text = serde_json::to_string(&[len]).map_err(|e| Error::internal(e.to_string()))?;
        self.write(|tx| {
            tx.prepare_cached("UPDATE objects SET dims=?1, mtime=?2 WHERE lid=?3")
                .map_err(db_err)?
                .execute(params![text, now(), lid_of(id)])
                .map_err(db_err)
        })?;
        self.refresh(id)
    }

    pub fn add_to_container(&self, id: ObjectId, container: &str) -> Result<()> {
        self.object(id)?;
        self.write(|tx| {
            tx.prepare_cached("INSERT OR IGNORE INTO memberships VALUES (?1, ?2)")
                .map_err(db_err)?
                .execute(params![lid_of(id), container])
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
            tx.prepare_cached("DELETE FROM memberships WHERE object_lid=?1")
                .map_err(db_err)?
                .execute([lid])
                .map_err(db_err)?;
            tx.prepare_cached("DELETE FROM tags WHERE kind=0 AND lid=?1")
                .map_err(db_err)?
                .execute([lid])
                .map_err(db_err)?;
            locations::delete_object_rows(tx, id)?;
            tx.prepare_cached("DELETE FROM objects WHERE lid=?1")
                .map_err(db_err)?
                .execute([lid])
                .map_err(db_err)?;
            Ok(())
        })?;
        self.names
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&meta.name);
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
            tx.prepare_cached("DELETE FROM tags WHERE kind=1 AND lid=?1")
                .map_err(db_err)?
                .execute([lid])
                .map_err(db_err)?;
            tx.prepare_cached("DELETE FROM containers WHERE lid=?1")
                .map_err(db_err)?
                .execute([lid])
                .map_err(db_err)?;
            Ok(())
        })
    }

    /// Removes object `id` from `container`; NotFound if it was not a member.
    pub fn remove_from_container(&self, id: ObjectId, container: &str) -> Result<()> {
        let o = self.object(id)?;
        let n = self.write(|tx| {
            tx.prepare_cached("DELETE FROM memberships WHERE object_lid=?1 AND container=?2")
                .map_err(db_err)?
                .execute(params![lid_of(id), container])
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
            tx.prepare_cached("DELETE FROM memberships WHERE container=?1")
                .map_err(db_err)?
                .execute([container])
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
        self.put_tags_with(target, tags, false)
    }

    /// [`put_tags`](Self::put_tags), or with `lazy` answered at commit (as
    /// [`create_objects_with`](Self::create_objects_with)).
    pub fn put_tags_with(&self, target: &TagTarget, tags: &Tags, lazy: bool) -> Result<()> {
        if tags.iter().any(|(k, _)| k.is_empty()) {
            return Err(Error::invalid("tag names must not be empty"));
        }
        if let (true, TagTarget::Object(id)) = (lazy, target) {
            // An object whose rows are still queued (the create-then-tag pattern) takes the
            // tags into its queued row: no transaction of its own, and no more durable than
            // the create it belongs to would be anyway.
            if self.tag_queued(*id, tags) {
                self.syncer.kick();
                return Ok(());
            }
        }
        let (kind, lid) = self.target_lid(target)?;
        let rows = |tx: &rusqlite::Transaction| write_tags(tx, kind, lid, tags);
        if lazy {
            self.write_lazy(rows)?;
        } else {
            self.write(rows)?;
        }
        if let TagTarget::Object(id) = target {
            // The cached copy takes the new values the way `read_object` would read them back
            // (sorted by name, the last value of a repeated name wins), saving three queries.
            let mut objects = self.objects.write().unwrap_or_else(|p| p.into_inner());
            match objects.get_mut(id) {
                Some(o) => {
                    let mut merged: std::collections::BTreeMap<String, TagValue> =
                        std::mem::take(&mut o.tags).into_iter().collect();
                    for (k, v) in tags {
                        merged.insert(k.clone(), v.clone());
                    }
                    o.tags = merged.into_iter().collect();
                }
                None => {
                    drop(objects);
                    self.refresh(*id)?;
                }
            }
        }
        Ok(())
    }

    /// Merges `tags` into object `id`'s queued row and cached copy if its row is still queued
    /// (false: it is not, write the tags the usual way). Holds the queue's lock throughout, so
    /// a flush takes the row either before (then this returns false) or after the merge.
    fn tag_queued(&self, id: ObjectId, tags: &Tags) -> bool {
        let merge = |have: &mut Tags| {
            let mut merged: std::collections::BTreeMap<String, TagValue> =
                std::mem::take(have).into_iter().collect();
            for (k, v) in tags {
                merged.insert(k.clone(), v.clone());
            }
            *have = merged.into_iter().collect();
        };
        self.shard.with_queued(id, |row| {
            merge(&mut row.tags);
            let mut objects = self.objects.write().unwrap_or_else(|p| p.into_inner());
            if let Some(o) = objects.get_mut(&id) {
                merge(&mut o.tags);
            }
        })
    }

    pub fn delete_tag(&self, target: &TagTarget, key: &str) -> Result<()> {
        let (kind, lid) = self.target_lid(target)?;
        let n = self.write(|tx| {
            tx.prepare_cached("DELETE FROM tags WHERE kind=?1 AND lid=?2 AND key=?3")
                .map_err(db_err)?
                .execute(params![kind, lid, key])
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

/// Local ids handed out per durable record of the range (`settings.lids_reserved`): one
/// transaction and fsync per this many creates.
const LID_BLOCK: u64 = 4096;

/// The shard's local ids (the low 48 bits of object ids). `next` is the next to hand out;
/// every id below `end` may have been handed out, and `end` is on stable storage before any
/// id at or above the old end is (so after a crash, ids restart at the recorded end, above
/// any id a client may hold for an object the crash lost).
pub(crate) struct LidRange {
    next: u64,
    end: u64,
}

impl LidRange {
    /// After the highest id ever used by a row (`sqlite_sequence` keeps it after deletes) and
    /// the recorded range.
    pub(super) fn load(db: &Connection) -> Result<LidRange> {
        let seq: Option<i64> = db
            .query_row(
                "SELECT seq FROM sqlite_sequence WHERE name='objects'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)?;
        let max: Option<i64> = db
            .query_row("SELECT max(lid) FROM objects", [], |r| r.get(0))
            .map_err(db_err)?;
        let reserved: Option<String> = db
            .query_row(
                "SELECT value FROM settings WHERE key='lids_reserved'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)?;
        let reserved = match reserved {
            None => 0,
            Some(v) => v.parse::<u64>().map_err(|_| {
                Error::internal(format!("settings.lids_reserved is not a number: {v:?}"))
            })?,
        };
        let used = seq.unwrap_or(0).max(max.unwrap_or(0)).max(0) as u64;
        // Local id 0 is never used (rowids start at 1).
        let next = (used + 1).max(reserved).max(1);
        Ok(LidRange { next, end: next })
    }

    fn take(&mut self) -> u64 {
        let lid = self.next;
        self.next += 1;
        lid
    }
}

/// An object for `spec` (id and owner still to be set), or why the spec is refused. Builds
/// the metadata the way `read_object` would read it back: memberships and tags sorted by
/// name, the last value of a repeated tag winning.
fn new_object(spec: &ObjectSpec, t: f64) -> Result<ObjectMeta> {
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
    let containers: std::collections::BTreeSet<&String> = spec.containers.iter().collect();
    let tags: std::collections::BTreeMap<&String, &TagValue> =
        spec.tags.iter().map(|(k, v)| (k, v)).collect();
    Ok(ObjectMeta {
        id: 0,
        name: spec.name.clone(),
        owner: 0,
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

/// A queued growth of object `id`'s dims (`Shard::flush_locked`), inside the caller's
/// transaction: the stored dims grown to at least `want`. An object deleted since is skipped.
pub(super) fn grow_row(tx: &rusqlite::Transaction, id: ObjectId, want: &[u64]) -> Result<()> {
    let text: Option<String> = tx
        .query_row(
            "SELECT dims FROM objects WHERE lid=?1",
            params![lid_of(id)],
            |r| r.get(0),
        )
        .optional()
        .map_err(db_err)?;
    let Some(text) = text else {
        return Ok(());
    };
    let mut dims: Vec<u64> = serde_json::from_str(&text)
        .map_err(|e| Error::internal(format!("stored dims {text:?}: {e}")))?;
    if dims.len() != want.len() {
        return Err(Error::internal(format!(
            "queued growth of object {id:#x} to {want:?} does not match its dims {dims:?}"
        )));
    }
    super::grow_dims(&mut dims, want);
    let text = serde_json::to_string(&dims).map_err(|e| Error::internal(e.to_string()))?;
    tx.prepare_cached("UPDATE objects SET dims=?1, mtime=?2 WHERE lid=?3")
        .map_err(db_err)?
        .execute(params![text, now(), lid_of(id)])
        .map_err(db_err)?;
    Ok(())
}

/// The rows of a created object (`Shard::flush_locked`), inside the caller's transaction.
/// Plain INSERT: the catalog checked the name and handed out the id, so a conflict here is a
/// bug and fails the batch rather than being ignored.
pub(super) fn insert_rows(tx: &rusqlite::Transaction, m: &ObjectMeta) -> Result<()> {
    let dims = serde_json::to_string(&m.dims).map_err(|e| Error::internal(e.to_string()))?;
    let lid = lid_of(m.id);
    tx.prepare_cached(
        "INSERT INTO objects (lid, name, dtype, dims, fill, creator, ctime, mtime) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)",
    )
    .and_then(|mut st| {
        st.execute(params![lid, m.name, m.dtype as u8, dims, m.fill, m.creator, m.ctime, m.mtime])
    })
    .map_err(db_err)?;
    let mut st = tx
        .prepare_cached("INSERT OR IGNORE INTO memberships VALUES (?1, ?2)")
        .map_err(db_err)?;
    for c in &m.containers {
        st.execute(params![lid, c]).map_err(db_err)?;
    }
    write_tags(tx, 0, lid, &m.tags)
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
