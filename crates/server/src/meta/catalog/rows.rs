//! The catalog's rows in SQLite: an object read back, a created object's rows and a queued
//! growth of its dims written inside the caller's transaction, and tags written and read.

use crate::meta::{db_err, grow_dims, id_of, lid_of, now, Metadata};
use pdcx_core::model::Tags;
use pdcx_core::{Access, Dtype, Error, ObjectId, ObjectMeta, Result, TagValue};
use rusqlite::{params, Connection, OptionalExtension};

impl Metadata {
    pub(super) fn read_object(&self, db: &Connection, lid: i64) -> Result<ObjectMeta> {
        let (name, dtype, dims, fill, creator, ctime, mtime, access): (
            String,
            u8,
            String,
            Vec<u8>,
            String,
            f64,
            f64,
            String,
        ) = db
            .query_row(
                "SELECT name, dtype, dims, fill, creator, ctime, mtime, access FROM objects WHERE lid=?1",
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
                        r.get(7)?,
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
            id: id_of(lid),
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
            access: access_from_column(&access),
        })
    }
}

/// A queued growth of object `id`'s dims (`Shard::flush_locked`), inside the caller's
/// transaction: the stored dims grown to at least `want`. An object deleted since is skipped.
pub(in crate::meta) fn grow_row(
    tx: &rusqlite::Transaction,
    id: ObjectId,
    want: &[u64],
) -> Result<()> {
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
    grow_dims(&mut dims, want);
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
pub(in crate::meta) fn insert_rows(tx: &rusqlite::Transaction, m: &ObjectMeta) -> Result<()> {
    let dims = serde_json::to_string(&m.dims).map_err(|e| Error::internal(e.to_string()))?;
    let lid = lid_of(m.id);
    tx.prepare_cached(
        "INSERT INTO objects (lid, name, dtype, dims, fill, creator, ctime, mtime, access) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)",
    )
    .and_then(|mut st| {
        st.execute(params![
            lid,
            m.name,
            m.dtype as u8,
            dims,
            m.fill,
            m.creator,
            m.ctime,
            m.mtime,
            access_column(&m.access)
        ])
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

/// An `Access` as a catalog column: empty for the default (the deployment's user, no grants),
/// else JSON.
pub(in crate::meta) fn access_column(a: &Access) -> String {
    if *a == Access::default() {
        String::new()
    } else {
        serde_json::to_string(a).unwrap_or_default()
    }
}

/// An `Access` column read back. One this code cannot read keeps the row from every other
/// user (fail closed): only the deployment's user reaches it.
pub(in crate::meta) fn access_from_column(text: &str) -> Access {
    if text.is_empty() {
        return Access::default();
    }
    serde_json::from_str(text).unwrap_or(Access {
        user: Some(u32::MAX),
        grants: Vec::new(),
    })
}

pub(super) fn write_tags(
    tx: &rusqlite::Transaction,
    kind: i64,
    lid: i64,
    tags: &Tags,
) -> Result<()> {
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

pub(super) fn read_tags(db: &Connection, kind: i64, lid: i64) -> Result<Tags> {
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
