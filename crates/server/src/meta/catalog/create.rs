//! Creating objects: checked and given ids in memory, visible at once, their rows queued and
//! written in batches; local ids handed out only inside a durably recorded range.

use crate::meta::{db_err, now, Metadata};
use pdcx_core::model::{make_object_id, validate_dims};
use pdcx_core::protocol::ObjectSpec;
use pdcx_core::{Access, Error, ErrorKind, ObjectMeta, Result, TagValue};
use rusqlite::{Connection, OptionalExtension};

impl Metadata {
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
        self.create_objects_with(specs, false, &Access::default())
    }

    /// [`create_objects`](Self::create_objects), or with `lazy` answered without waiting for
    /// the disk. Either way the objects are created in memory: checked (a duplicate name or a
    /// bad spec fails here), given ids, visible to every request at once, and their rows are
    /// queued; they are written in one transaction with whatever else is queued by the next use
    /// of the database, by the syncer (kicked here, so within about one transaction plus 5 ms)
    /// or by [`sync`](Metadata::sync) (`SyncMeta`), which also fsyncs. Without `lazy` this
    /// returns after that `sync`; with it, a kill -9 before the syncer ran loses the objects
    /// (never their ids: see [`LidRange`]). Every object is created with `access` (its owning
    /// user: the caller's, never one a spec claims).
    pub fn create_objects_with(
        &self,
        specs: &[ObjectSpec],
        lazy: bool,
        access: &Access,
    ) -> Vec<Result<ObjectMeta>> {
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
                let meta = match new_object(spec, t, access) {
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
}

/// Local ids handed out per durable record of the range (`settings.lids_reserved`): one
/// transaction and fsync per this many creates.
const LID_BLOCK: u64 = 4096;

/// The shard's local ids (the low 48 bits of object ids). `next` is the next to hand out;
/// every id below `end` may have been handed out, and `end` is on stable storage before any
/// id at or above the old end is (so after a crash, ids restart at the recorded end, above
/// any id a client may hold for an object the crash lost).
/// The local part of a whole id (its low 48 bits).
pub(in crate::meta) const LOCAL_MASK: i64 = (1 << 48) - 1;

pub(crate) struct LidRange {
    next: u64,
    end: u64,
}

impl LidRange {
    /// After the highest id ever used by a row (`sqlite_sequence` keeps it after deletes) and
    /// the recorded range.
    pub(in crate::meta) fn load(db: &Connection) -> Result<LidRange> {
        let seq: Option<i64> = db
            .query_row(
                "SELECT seq FROM sqlite_sequence WHERE name='objects'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)?;
        let max: Option<i64> = db
            .query_row(
                &format!("SELECT max(lid & {LOCAL_MASK}) FROM objects"),
                [],
                |r| r.get(0),
            )
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
        // Row keys are whole ids (schema version 9); after a resize they have several homes.
        let used = (seq.unwrap_or(0) & LOCAL_MASK).max(max.unwrap_or(0)).max(0) as u64;
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
fn new_object(spec: &ObjectSpec, t: f64, access: &Access) -> Result<ObjectMeta> {
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
        access: access.clone(),
    })
}
