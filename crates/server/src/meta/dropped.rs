//! Versions compaction made unreadable. A version `v` of an N-d object is the object as of
//! write `v`: every write numbered `<= v`. Dropping a write that newer writes hide
//! (`engine/drop.rs`) keeps every version at or after the newest of those writes readable,
//! and may break the versions between the dropped write and it: those are recorded here, as
//! merged ranges `from_seq <= v < to_seq`, durably before the write is dropped, so a read of
//! such a version is refused with a clear error instead of answered with wrong bytes.
//! Retained versions (`engine/retention.rs`) are never inside a range.

use super::{db_err, Metadata};
use pdcx_core::{ObjectId, Result};
use rusqlite::{params, OptionalExtension};

impl Metadata {
    /// Records that versions `from <= v < to` of `id` are gone, merged with the ranges it
    /// meets or touches; durable (WAL fsynced) when it returns.
    pub fn add_dropped_versions(&self, ranges: &[(ObjectId, u64, u64)]) -> Result<()> {
        if ranges.is_empty() {
            return Ok(());
        }
        self.write(|tx| {
            for &(id, from, to) in ranges.iter().filter(|r| r.1 < r.2) {
                let (mut lo, mut hi) = (from as i64, to as i64);
                let mut meet = tx
                    .prepare_cached(
                        "SELECT from_seq, to_seq FROM dropped_versions
                         WHERE object=?1 AND from_seq<=?3 AND to_seq>=?2",
                    )
                    .map_err(db_err)?;
                let old: Vec<(i64, i64)> = meet
                    .query_map(params![id as i64, lo, hi], |r| Ok((r.get(0)?, r.get(1)?)))
                    .map_err(db_err)?
                    .collect::<rusqlite::Result<_>>()
                    .map_err(db_err)?;
                for (f, t) in old {
                    lo = lo.min(f);
                    hi = hi.max(t);
                    tx.prepare_cached(
                        "DELETE FROM dropped_versions WHERE object=?1 AND from_seq=?2",
                    )
                    .map_err(db_err)?
                    .execute(params![id as i64, f])
                    .map_err(db_err)?;
                }
                tx.prepare_cached(
                    "INSERT INTO dropped_versions (object, from_seq, to_seq) VALUES (?1,?2,?3)",
                )
                .map_err(db_err)?
                .execute(params![id as i64, lo, hi])
                .map_err(db_err)?;
            }
            Ok(())
        })
    }

    /// The dropped range holding version `v` of `id`, if it is gone.
    pub fn dropped_version(&self, id: ObjectId, v: u64) -> Result<Option<(u64, u64)>> {
        self.db()
            .prepare_cached(
                "SELECT from_seq, to_seq FROM dropped_versions
                 WHERE object=?1 AND from_seq<=?2 AND to_seq>?2 LIMIT 1",
            )
            .map_err(db_err)?
            .query_row(params![id as i64, v as i64], |r| {
                Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
            })
            .optional()
            .map_err(db_err)
    }

    /// Every dropped range of `id`, oldest first.
    pub fn dropped_versions(&self, id: ObjectId) -> Result<Vec<(u64, u64)>> {
        let db = self.db();
        let mut st = db
            .prepare_cached(
                "SELECT from_seq, to_seq FROM dropped_versions WHERE object=?1 ORDER BY from_seq",
            )
            .map_err(db_err)?;
        let rows = st
            .query_map([id as i64], |r| {
                Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
            })
            .map_err(db_err)?
            .collect::<rusqlite::Result<_>>()
            .map_err(db_err)?;
        Ok(rows)
    }
}
