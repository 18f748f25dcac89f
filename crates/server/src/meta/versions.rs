//! Versions of byte-stream objects: the rows of `bs_versions`, kept by the
//! object's owner.
//!
//! A version (epoch) is the object's content at a consistency point: every write with a
//! sequence number below `seal_seq`, clipped to `size`. Sealing records the row durably
//! (state `sealed`); the home copier (`crate::homecopy`) then writes the version to its home
//! and moves it to `done`, or to `superseded` when a newer version was sealed before it
//! started. The home only ever receives whole versions, in epoch order.

use super::{db_err, now, Metadata};
use crate::streambase::Base;
use pdcx_core::protocol::VersionInfo;
use pdcx_core::{ObjectId, Result};
use rusqlite::{params, OptionalExtension};

pub const SEALED: &str = "sealed";
pub const WRITING: &str = "writing";
pub const DONE: &str = "done";
pub const SUPERSEDED: &str = "superseded";
pub const FAILED: &str = "failed";

/// What [`Metadata::seal_version`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sealed {
    /// A new version with this epoch.
    New(u64),
    /// Nothing changed since this epoch: no new version.
    Unchanged(u64),
}

impl Metadata {
    /// Records version `last + 1` of `id` with `seal_seq` and `size`, unless the last
    /// version has the same size and no write came after it (`newest_seq` < its seal_seq).
    /// Durable (WAL fsynced) when it returns, and with it every region-map row registered
    /// before. Older versions not yet copied are marked superseded: the home needs only the
    /// newest.
    pub fn seal_version(
        &self,
        id: ObjectId,
        seal_seq: u64,
        newest_seq: Option<u64>,
        size: u64,
        home: &str,
    ) -> Result<Sealed> {
        let last_of = |db: &rusqlite::Connection| {
            db.prepare_cached(
                "SELECT epoch, seal_seq, size, home FROM bs_versions WHERE object=?1
                 ORDER BY epoch DESC LIMIT 1",
            )
            .map_err(db_err)?
            .query_row(params![id as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()
            .map_err(db_err)
        };
        let unchanged = |last: &Option<(u64, u64, u64, String)>| {
            last.as_ref()
                .and_then(|(epoch, last_seq, last_size, last_home)| {
                    (*last_size == size
                        && last_home == home
                        && newest_seq.is_none_or(|n| n < *last_seq))
                    .then_some(*epoch)
                })
        };
        // An unchanged stream (a close right after a sync) is answered without a write
        // transaction, so without a WAL fsync.
        if let Some(epoch) = unchanged(&last_of(&self.db())?) {
            return Ok(Sealed::Unchanged(epoch));
        }
        self.write(|tx| {
            let last: Option<(u64, u64, u64, String)> = last_of(tx)?;
            if let Some(epoch) = unchanged(&last) {
                return Ok(Sealed::Unchanged(epoch));
            }
            let epoch = last.map_or(1, |l| l.0 + 1);
            tx.prepare_cached("UPDATE bs_versions SET state=?2 WHERE object=?1 AND state=?3")
                .map_err(db_err)?
                .execute(params![id as i64, SUPERSEDED, SEALED])
                .map_err(db_err)?;
            tx.prepare_cached(
                "INSERT INTO bs_versions (object, epoch, seal_seq, size, home, state, sealed_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .map_err(db_err)?
            .execute(params![
                id as i64,
                epoch as i64,
                seal_seq as i64,
                size as i64,
                home,
                SEALED,
                now()
            ])
            .map_err(db_err)?;
            Ok(Sealed::New(epoch))
        })
    }

    /// Versions of `id` (every object when None), oldest first per object.
    pub fn versions(&self, id: Option<ObjectId>) -> Result<Vec<VersionInfo>> {
        let db = self.db();
        let mut st = db
            .prepare(
                "SELECT object, epoch, seal_seq, size, home, state, sealed_at, done_at, error,
                 upload_id, evicted FROM bs_versions WHERE ?1 IS NULL OR object=?1
                 ORDER BY object, epoch",
            )
            .map_err(db_err)?;
        let rows = st
            .query_map(params![id.map(|i| i as i64)], |r| {
                let object: i64 = r.get(0)?;
                Ok(VersionInfo {
                    id: object as u64,
                    name: String::new(),
                    epoch: r.get::<_, i64>(1)? as u64,
                    seal_seq: r.get::<_, i64>(2)? as u64,
                    size: r.get::<_, i64>(3)? as u64,
                    home: r.get(4)?,
                    state: r.get(5)?,
                    sealed_at: r.get(6)?,
                    done_at: r.get(7)?,
                    error: r.get(8)?,
                    upload_id: r.get(9)?,
                    base: r.get::<_, i64>(10)? != 0,
                })
            })
            .map_err(db_err)?;
        let mut v: Vec<VersionInfo> = rows.collect::<rusqlite::Result<_>>().map_err(db_err)?;
        drop(st);
        drop(db);
        for x in &mut v {
            x.name = self.object(x.id).map(|m| m.name).unwrap_or_default();
        }
        Ok(v)
    }

    /// Versions waiting for their home copy (`sealed` or interrupted while `writing`), oldest
    /// first.
    pub fn versions_to_copy(&self) -> Result<Vec<VersionInfo>> {
        Ok(self
            .versions(None)?
            .into_iter()
            .filter(|v| v.state == SEALED || v.state == WRITING)
            .collect())
    }

    /// Moves a version to `state` (with `error`, empty when none). `done` is durable when
    /// this returns; the other states need not be (a crash replays the copy).
    pub fn set_version_state(
        &self,
        id: ObjectId,
        epoch: u64,
        state: &str,
        error: &str,
    ) -> Result<()> {
        let f = |tx: &rusqlite::Transaction| {
            tx.prepare_cached(
                "UPDATE bs_versions SET state=?3, error=?4,
                 done_at=CASE WHEN ?3='done' THEN ?5 ELSE done_at END
                 WHERE object=?1 AND epoch=?2",
            )
            .map_err(db_err)?
            .execute(params![id as i64, epoch as i64, state, error, now()])
            .map_err(db_err)
            .map(|_| ())
        };
        if state == DONE {
            self.write(f)
        } else {
            self.write_lazy(f)
        }
    }

    /// Marks version `epoch` of `id` done (its home copy complete) and its stream's base, in
    /// one transaction, durable when this returns: from now on its bytes are read from its
    /// home, and the writes below its seal may go.
    pub fn set_version_done_base(&self, id: ObjectId, epoch: u64) -> Result<()> {
        self.write(|tx| {
            tx.prepare_cached(
                "UPDATE bs_versions SET state=?3, error='', done_at=?4, evicted=1
                 WHERE object=?1 AND epoch=?2",
            )
            .map_err(db_err)?
            .execute(params![id as i64, epoch as i64, DONE, now()])
            .map_err(db_err)
            .map(|_| ())
        })
    }

    /// Each stream's base: its newest evicted version.
    pub fn stream_bases(&self) -> Result<Vec<(ObjectId, Base)>> {
        let db = self.db();
        let mut st = db
            .prepare(
                "SELECT object, epoch, seal_seq, size, home FROM bs_versions v WHERE evicted=1
                 AND epoch = (SELECT MAX(epoch) FROM bs_versions w
                              WHERE w.object = v.object AND w.evicted=1)",
            )
            .map_err(db_err)?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)? as ObjectId,
                    Base {
                        epoch: r.get::<_, i64>(1)? as u64,
                        seal_seq: r.get::<_, i64>(2)? as u64,
                        size: r.get::<_, i64>(3)? as u64,
                        home: r.get(4)?,
                    },
                ))
            })
            .map_err(db_err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(db_err)
    }

    /// Records (durably, before any part is sent) the S3 upload of a version's home copy, or
    /// clears it (""), so a restart aborts an upload it did not finish.
    pub fn set_upload_id(&self, id: ObjectId, epoch: u64, upload_id: &str) -> Result<()> {
        self.write(|tx| {
            tx.prepare_cached("UPDATE bs_versions SET upload_id=?3 WHERE object=?1 AND epoch=?2")
                .map_err(db_err)?
                .execute(params![id as i64, epoch as i64, upload_id])
                .map_err(db_err)
                .map(|_| ())
        })
    }

    /// Forgets the versions of a deleted object (its home copies stay: they are the user's
    /// files).
    pub fn forget_versions(&self, id: ObjectId) -> Result<()> {
        self.write_lazy(|tx| {
            tx.prepare_cached("DELETE FROM bs_versions WHERE object=?1")
                .map_err(db_err)?
                .execute(params![id as i64])
                .map_err(db_err)
                .map(|_| ())
        })
    }

    /// The largest sequence number the region map records for `id` (writes other servers
    /// hold).
    pub fn newest_region_seq(&self, id: ObjectId) -> Result<Option<u64>> {
        let db = self.db();
        let mut st = db
            .prepare_cached("SELECT MAX(seq) FROM region_map WHERE object=?1")
            .map_err(db_err)?;
        st.query_row(params![id as i64], |r| r.get::<_, Option<i64>>(0))
            .map(|v| v.map(|s| s as u64))
            .map_err(db_err)
    }
}
