//! Changing objects: dims set or grown, a byte stream's size set, an object deleted with its
//! rows.

use crate::meta::{db_err, grow_dims, lid_of, locations, now, Metadata};
use pdcx_core::model::validate_dims;
use pdcx_core::{Error, ObjectId, ObjectMeta, Result};
use rusqlite::params;

impl Metadata {
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
        self.store_dims(id, dims)
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
                grow_dims(&mut m.dims, want);
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
        self.store_dims(id, &[len])
    }

    /// Writes `dims` as the object's stored dims in a transaction of its own (durable when it
    /// returns) and returns the refreshed metadata.
    fn store_dims(&self, id: ObjectId, dims: &[u64]) -> Result<ObjectMeta> {
        let text = serde_json::to_string(dims).map_err(|e| Error::internal(e.to_string()))?;
        self.write(|tx| {
            tx.prepare_cached("UPDATE objects SET dims=?1, mtime=?2 WHERE lid=?3")
                .map_err(db_err)?
                .execute(params![text, now(), lid_of(id)])
                .map_err(db_err)
        })?;
        self.refresh(id)
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
}
