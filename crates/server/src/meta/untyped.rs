//! Objects created without an element type (PDC's default object property has none): they
//! exist with their name, containers, tags and dims, carry the tag `pdcx.kind = "untyped"`
//! (`ObjectMeta::is_untyped`) over a placeholder dtype, and the engine refuses data for them.
//! [`Metadata::set_type`] gives one its type, once and durably: the dtype, the dims and the
//! fill change and the tag goes in one transaction, answered after it is synced.

use super::{db_err, lid_of, now, Metadata};
use pdcx_core::model::{validate_dims, KIND_TAG};
use pdcx_core::{Dtype, Error, ObjectId, ObjectMeta, Result};
use rusqlite::params;
use std::sync::Mutex;

/// Serializes type changes, so two first setters with different types cannot both pass the
/// untyped check (the second sees the first's type and is refused).
static SETTING: Mutex<()> = Mutex::new(());

impl Metadata {
    /// Gives untyped object `id` its element type, and `dims` unless empty (else it keeps the
    /// dims it has). Setting the type it already has is a no-op that answers the object as it
    /// is (every rank of a collective create may send it); another type is refused.
    pub fn set_type(&self, id: ObjectId, dtype: Dtype, dims: &[u64]) -> Result<ObjectMeta> {
        let _one = SETTING.lock().unwrap_or_else(|p| p.into_inner());
        let cur = self.object(id)?;
        if !cur.is_untyped() {
            if cur.dtype == dtype {
                return Ok(cur);
            }
            return Err(Error::invalid(format!(
                "object {:?} already has type {}; an object's type is set once",
                cur.name,
                cur.dtype.name()
            )));
        }
        let dims = if dims.is_empty() {
            cur.dims.clone()
        } else {
            validate_dims(dims)?;
            dims.to_vec()
        };
        let text = serde_json::to_string(&dims).map_err(|e| Error::internal(e.to_string()))?;
        let fill = vec![0u8; dtype.size()];
        let (lid, mtime) = (lid_of(id), now());
        self.write(|tx| {
            tx.prepare_cached(
                "UPDATE objects SET dtype=?1, dims=?2, fill=?3, mtime=?4 WHERE lid=?5",
            )
            .map_err(db_err)?
            .execute(params![dtype as u8, text, fill, mtime, lid])
            .map_err(db_err)?;
            // Object tags have kind 0 (see `schema.rs`).
            tx.prepare_cached("DELETE FROM tags WHERE kind=0 AND lid=?1 AND key=?2")
                .map_err(db_err)?
                .execute(params![lid, KIND_TAG])
                .map_err(db_err)
        })?;
        self.update_cached(id, |m| {
            m.dtype = dtype;
            m.dims = dims;
            m.fill = fill;
            m.mtime = mtime;
            m.tags.retain(|(k, _)| k != KIND_TAG);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pdcx_core::protocol::ObjectSpec;
    use pdcx_core::TagValue;

    fn untyped(name: &str, dims: Vec<u64>) -> ObjectSpec {
        ObjectSpec {
            name: name.into(),
            dims,
            dtype: Dtype::Bytes,
            fill: None,
            containers: vec![],
            tags: vec![(KIND_TAG.into(), TagValue::Str("untyped".into()))],
            creator: "t".into(),
        }
    }

    #[test]
    fn the_type_is_set_once_and_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        let id = {
            let md = Metadata::open(&path, 0, 1).unwrap();
            let o = md.create_object(&untyped("u/a", vec![0])).unwrap();
            assert!(o.is_untyped());
            // No dims given: it keeps its own; the tag goes, the fill fits the type.
            let t = md.set_type(o.id, Dtype::Int32, &[]).unwrap();
            assert!(!t.is_untyped() && t.dims == vec![0] && t.fill == vec![0; 4]);
            assert_eq!(md.object(o.id).unwrap(), t);
            // The same type again is a no-op; another is refused, naming the object.
            assert_eq!(md.set_type(o.id, Dtype::Int32, &[9]).unwrap().dims, vec![0]);
            let e = md.set_type(o.id, Dtype::Float64, &[]).unwrap_err();
            assert!(e.message.contains("\"u/a\" already has type int32"), "{e}");
            // With dims: they replace the ones it had (any rank: it holds no data).
            let b = md.create_object(&untyped("u/b", vec![10, 20])).unwrap();
            let b = md.set_type(b.id, Dtype::Float64, &[3, 4, 5]).unwrap();
            assert_eq!((b.dims, b.dtype), (vec![3, 4, 5], Dtype::Float64));
            assert!(md.set_type(o.id, Dtype::Int32, &[0; 9]).is_ok()); // typed: no-op
            let c = md.create_object(&untyped("u/c", vec![1])).unwrap();
            assert!(md.set_type(c.id, Dtype::Int8, &[0; 9]).is_err()); // too many dims
            o.id
        };
        let md = Metadata::open(&path, 0, 1).unwrap();
        let o = md.object(id).unwrap();
        assert!(!o.is_untyped() && o.dtype == Dtype::Int32);
        let b = md.object_by_name("u/b").unwrap();
        assert_eq!((b.dims, b.dtype), (vec![3, 4, 5], Dtype::Float64));
        assert!(md.object_by_name("u/c").unwrap().is_untyped());
    }
}
