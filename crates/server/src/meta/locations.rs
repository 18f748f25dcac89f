//! The data-location tables: where committed bytes are.
//! - `extent_map`: extents whose bytes are in this server's log (or were, and now live on a
//!   tier), of any object;
//! - `region_map` + `region_tokens`: the owner's record of regions of its objects that other
//!   servers hold (and the numbers given to deferred writes, by the holder's log location);
//! - `extent_home`: the tier copy of a flushed extent. A row is written (and its WAL fsynced)
//!   before the log segment holding the extent may be retired, so after a crash an extent is
//!   found either in the log or through its home, never nowhere.
//!
//! Only the data store (`crate::datastore`) and the owner side of registration use these.

use super::{db_err, lid_of, now, Metadata};
use pdcx_core::{Error, ObjectId, Region, Result};
use pdcx_store::Location;
use rusqlite::{params, OptionalExtension};

/// How many sequence numbers a raise of the reserved mark covers: one metadata fsync per this
/// many `memory` registrations; a crash skips at most this many numbers.
pub const SEQ_BLOCK: u64 = 1 << 20;

/// One region an owner records for a holder: object, region, and the token of a deferred
/// write (its location in the holder's log), if it is one.
pub type Registration<'a> = (ObjectId, &'a Region, Option<(u64, u64)>);

/// A committed extent as the data store indexes it.
#[derive(Debug, Clone)]
pub struct ExtentRow {
    pub id: ObjectId,
    pub seq: u64,
    pub region: Region,
    pub loc: Location,
}

/// Where an extent read by reference keeps its bytes: `size` bytes at `offset` of the file
/// `path`, a chunk of shape `chunk` (JSON list) after `filters` (JSON of `RefFilter`s).
#[derive(Debug, Clone, PartialEq)]
pub struct RefRow {
    pub path: String,
    pub offset: u64,
    pub size: u64,
    pub chunk: String,
    pub filters: String,
}

/// One extent's home: the tier (by config name), the codec its bytes are encoded with, their
/// stored length and, for an extent grouped into a shard blob, that blob's key and the offset
/// of the extent in it (else the blob is the extent's own, keyed by object and seq).
#[derive(Debug, Clone, PartialEq)]
pub struct HomeRow {
    pub id: ObjectId,
    pub seq: u64,
    pub tier: String,
    pub codec: String,
    pub stored_len: u64,
    pub blob: Option<String>,
    pub offset: u64,
}

/// Deletes every location row of object `id` inside the caller's transaction (the catalog's
/// object delete).
pub(super) fn delete_object_rows(tx: &rusqlite::Transaction, id: ObjectId) -> Result<()> {
    for table in [
        "extent_map",
        "region_map",
        "region_tokens",
        "extent_home",
        "extent_stats",
        "dropped_versions",
    ] {
        tx.execute(&format!("DELETE FROM {table} WHERE object=?1"), [id as i64])
            .map_err(db_err)?;
    }
    Ok(())
}

impl Metadata {
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
                insert_extent_row(&mut ins, r)?;
            }
            let mut touch = tx
                .prepare_cached("UPDATE objects SET mtime=?1 WHERE lid=?2")
                .map_err(db_err)?;
            for r in rows.iter().filter(|r| self.owner_of(r.id) == self.rank) {
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

    /// Moves the log location of these extents (which live on only through their tier home)
    /// out of the log's segment id space: `segment + off_log`. One durable transaction.
    pub fn mark_off_log(&self, keys: &[(ObjectId, u64)], off_log: u64) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        self.write(|tx| {
            let mut st = tx
                .prepare_cached(
                    "UPDATE extent_map SET segment = segment + ?1 WHERE object=?2 AND seq=?3 AND segment < ?1",
                )
                .map_err(db_err)?;
            for (id, seq) in keys {
                st.execute(params![off_log as i64, *id as i64, *seq as i64])
                    .map_err(db_err)?;
            }
            Ok(())
        })
    }

    /// Points extents at the copies compaction made of their bytes (`datastore/compact.rs`):
    /// `(object, seq, new location)`, only where the row still names `from` (an extent
    /// dropped or moved meanwhile keeps what it has). One durable transaction: the old
    /// segment is retired only after this returns.
    pub fn relocate_extents(&self, moves: &[(ObjectId, u64, Location, Location)]) -> Result<()> {
        if moves.is_empty() {
            return Ok(());
        }
        self.write(|tx| {
            let mut st = tx
                .prepare_cached(
                    "UPDATE extent_map SET segment=?3, offset=?4, len=?5, crc=?6
                     WHERE object=?1 AND seq=?2 AND segment=?7 AND offset=?8",
                )
                .map_err(db_err)?;
            for (id, seq, from, to) in moves {
                st.execute(params![
                    *id as i64,
                    *seq as i64,
                    to.segment as i64,
                    to.offset as i64,
                    to.len as i64,
                    to.crc,
                    from.segment as i64,
                    from.offset as i64
                ])
                .map_err(db_err)?;
            }
            Ok(())
        })
    }

    /// The holder's log incarnation: bumped when a log is found empty while extents were
    /// recorded (the node's log was lost), so deferred-write tokens (log locations) of the new
    /// log never match those the owners recorded for the old one. Kept in `settings`.
    pub fn log_incarnation(&self) -> Result<u64> {
        let v: Option<String> = self
            .db()
            .query_row(
                "SELECT value FROM settings WHERE key='log_incarnation'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)?;
        v.map_or(Ok(0), |v| {
            v.parse()
                .map_err(|e| Error::internal(format!("stored log_incarnation {v:?}: {e}")))
        })
    }

    pub fn set_log_incarnation(&self, n: u64) -> Result<()> {
        self.write(|tx| {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO settings (key, value) VALUES ('log_incarnation', ?1)",
            )
            .map_err(db_err)?
            .execute([n.to_string()])
            .map_err(db_err)
            .map(|_| ())
        })
    }

    /// Drops the owner's region-map rows `(object, seq)` (regions other servers hold that no
    /// read needs any more: shadowed in every version). Durable when it returns.
    pub fn delete_region_rows(&self, keys: &[(ObjectId, u64)]) -> Result<()> {
        self.write(|tx| {
            for (id, seq) in keys {
                tx.prepare_cached("DELETE FROM region_map WHERE object=?1 AND seq=?2")
                    .map_err(db_err)?
                    .execute(params![*id as i64, *seq as i64])
                    .map_err(db_err)?;
            }
            Ok(())
        })
    }

    /// Owner side of a holder's `Released`: deletes the region-map rows `keys` that name
    /// `holder`, and `holder`'s deferred-write tokens whose segment field is below
    /// `tokens_below`. Answered at commit (a crash before the next WAL fsync only keeps rows
    /// that are harmless). Returns how many tokens went.
    pub fn forget_released(
        &self,
        holder: u32,
        keys: &[(ObjectId, u64)],
        tokens_below: u64,
    ) -> Result<u64> {
        self.write_lazy(|tx| {
            let mut rows = tx
                .prepare_cached("DELETE FROM region_map WHERE object=?1 AND seq=?2 AND holder=?3")
                .map_err(db_err)?;
            for (id, seq) in keys {
                rows.execute(params![*id as i64, *seq as i64, holder as i64])
                    .map_err(db_err)?;
            }
            let tokens = tx
                .prepare_cached("DELETE FROM region_tokens WHERE holder=?1 AND segment<?2")
                .map_err(db_err)?
                .execute(params![holder as i64, tokens_below as i64])
                .map_err(db_err)?;
            Ok(tokens as u64)
        })
    }

    /// Rows in the owner's region map and token table (bounded-table checks, status).
    pub fn location_rows(&self) -> Result<(u64, u64)> {
        let db = self.db();
        let count = |table: &str| {
            db.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n as u64)
            .map_err(db_err)
        };
        Ok((count("region_map")?, count("region_tokens")?))
    }

    /// Drops extents whose data the log does not hold as committed (written with `memory`
    /// durability just before a crash).
    pub fn delete_extents(&self, keys: &[(ObjectId, u64)]) -> Result<()> {
        self.write(|tx| delete_extent_rows(tx, keys))
    }

    /// [`delete_extents`](Self::delete_extents) answered at commit (durable soon, by the
    /// background syncer or the next WAL fsync).
    pub fn delete_extents_lazy(&self, keys: &[(ObjectId, u64)]) -> Result<()> {
        self.write_lazy(|tx| delete_extent_rows(tx, keys))
    }

    /// Owner side of a registration by `holder`: each item's sequence number. A deferred write
    /// (with a token) that was registered before gets its first number back; every other item
    /// takes the next number from `next_seq` and is recorded in the region map (and its token,
    /// if any), all in one transaction. `next_seq` advances once it commits.
    ///
    /// With `durable` the transaction is fsynced (group commit) before this returns. Without
    /// it (the strong writes of a `memory` commit) it returns at commit: the rows are visible
    /// and survive a kill -9 (their WAL frames are written), the caller kicks the background
    /// syncer ([`kick_syncer`](Self::kick_syncer)) to make them durable soon after, and no number is ever handed out twice because every number handed
    /// out stays below the **reserved mark** (`settings.seq_reserved`), which is durable
    /// before any number at or above it is answered: when a registration needs numbers past
    /// it, the same transaction raises it by [`SEQ_BLOCK`] and waits for the fsync (once per
    /// block). After a crash the counter resumes at the mark (`Engine::open`). Returns (seq,
    /// newly recorded) per item and whether it waited for the fsync.
    pub fn register_regions(
        &self,
        holder: u32,
        items: &[Registration<'_>],
        next_seq: &mut u64,
        durable: bool,
    ) -> Result<(Vec<(u64, bool)>, bool)> {
        if !durable {
            // A shard whose WAL fsync failed accepts no more writes (fail-stop), also none
            // that would not wait for an fsync: ticket 0 is always covered, so this only
            // reports the poisoning.
            self.wait_durable(0)?;
        }
        let start = *next_seq;
        let reserved = self.seq_reserved();
        let ((out, next, raised), ticket) = self.write_nowait(|tx| {
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
            // Every number handed out (< next) must stay below a durable mark.
            let raised = if next > reserved {
                let mark = next
                    .checked_add(SEQ_BLOCK)
                    .ok_or_else(|| Error::internal("sequence numbers exhausted"))?;
                tx.prepare_cached("INSERT OR REPLACE INTO settings (key, value) VALUES ('seq_reserved', ?1)")
                .map_err(db_err)?
                .execute([mark.to_string()],
                )
                .map_err(db_err)?;
                Some(mark)
            } else {
                None
            };
            Ok((out, next, raised))
        })?;
        // The rows are in the WAL and visible: their numbers are taken, fsync or not.
        *next_seq = next;
        let synced = durable || raised.is_some();
        if synced {
            self.wait_durable(ticket)?;
            if let Some(mark) = raised {
                self.seq_reserved
                    .store(mark, std::sync::atomic::Ordering::Release);
            }
        }
        let t = now();
        let mut objects = self.objects.write().unwrap_or_else(|p| p.into_inner());
        for (id, _, _) in items {
            if let Some(o) = objects.get_mut(id) {
                o.mtime = t;
            }
        }
        Ok((out, synced))
    }

    /// The durable reserved mark: every sequence number this server handed out to a
    /// registration is below it (see [`register_regions`](Self::register_regions)).
    pub fn seq_reserved(&self) -> u64 {
        self.seq_reserved.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The stored mark (0: none yet), read when the shard opens.
    pub(super) fn load_seq_reserved(db: &rusqlite::Connection) -> Result<u64> {
        let v: Option<String> = db
            .query_row(
                "SELECT value FROM settings WHERE key='seq_reserved'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)?;
        v.map_or(Ok(0), |v| {
            v.parse()
                .map_err(|e| Error::internal(format!("stored seq_reserved {v:?}: {e}")))
        })
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

    /// Inserts or replaces homes in one transaction; returns the ticket to wait for durability.
    pub(crate) fn put_homes(&self, rows: &[HomeRow]) -> Result<u64> {
        let ((), ticket) = self.write_nowait(|tx| {
            let mut ins = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO extent_home (object, seq, tier, codec, stored_len, blob, blob_offset) VALUES (?1,?2,?3,?4,?5,?6,?7)",
                )
                .map_err(db_err)?;
            for r in rows {
                ins.execute(params![
                    r.id as i64,
                    r.seq as i64,
                    r.tier,
                    r.codec,
                    r.stored_len as i64,
                    r.blob,
                    r.offset as i64
                ])
                    .map_err(db_err)?;
            }
            Ok(())
        })?;
        Ok(ticket)
    }

    pub(crate) fn load_homes(&self) -> Result<Vec<HomeRow>> {
        self.write(|tx| {
            let mut st = tx
                .prepare("SELECT object, seq, tier, codec, stored_len, blob, blob_offset FROM extent_home")
                .map_err(db_err)?;
            let rows = st
                .query_map([], |r| {
                    Ok(HomeRow {
                        id: r.get::<_, i64>(0)? as u64,
                        seq: r.get::<_, i64>(1)? as u64,
                        tier: r.get(2)?,
                        codec: r.get(3)?,
                        stored_len: r.get::<_, i64>(4)? as u64,
                        blob: r.get(5)?,
                        offset: r.get::<_, i64>(6)? as u64,
                    })
                })
                .map_err(db_err)?;
            rows.map(|r| r.map_err(db_err)).collect()
        })
    }

    /// Records extents' statistics (min, max) without waiting for the WAL fsync.
    pub(crate) fn put_extent_stats(&self, rows: &[(ObjectId, u64, f64, f64)]) -> Result<()> {
        self.write_nowait(|tx| {
            let mut ins = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO extent_stats (object, seq, min, max) VALUES (?1,?2,?3,?4)",
                )
                .map_err(db_err)?;
            for (id, seq, lo, hi) in rows {
                ins.execute(params![*id as i64, *seq as i64, lo, hi])
                    .map_err(db_err)?;
            }
            Ok(())
        })
        .map(|_| ())
    }

    /// Records extents whose bytes stay in a file outside pdcx, each with its `extent_map`
    /// row, in one transaction; returns the ticket to wait for its durability.
    pub(crate) fn insert_refs(&self, rows: &[(ExtentRow, RefRow)]) -> Result<u64> {
        let t = now();
        let ((), ticket) = self.write_nowait(|tx| {
            let mut ext = tx
                .prepare_cached("INSERT INTO extent_map (seq, object, region, segment, offset, len, crc) VALUES (?1,?2,?3,?4,?5,?6,?7)")
                .map_err(db_err)?;
            let mut refs = tx
                .prepare_cached("INSERT OR REPLACE INTO extent_refs (object, seq, path, offset, size, chunk, filters) VALUES (?1,?2,?3,?4,?5,?6,?7)")
                .map_err(db_err)?;
            for (r, f) in rows {
                insert_extent_row(&mut ext, r)?;
                refs.execute(params![
                    r.id as i64,
                    r.seq as i64,
                    f.path,
                    f.offset as i64,
                    f.size as i64,
                    f.chunk,
                    f.filters
                ])
                .map_err(db_err)?;
            }
            let mut touch = tx
                .prepare_cached("UPDATE objects SET mtime=?1 WHERE lid=?2")
                .map_err(db_err)?;
            for (r, _) in rows.iter().filter(|(r, _)| self.owner_of(r.id) == self.rank) {
                touch.execute(params![t, lid_of(r.id)]).map_err(db_err)?;
            }
            Ok(())
        })?;
        Ok(ticket)
    }

    /// Extents read by reference now held in the log: each `extent_map` row names its new
    /// location, its `extent_refs` row goes, in one transaction; the ticket to wait for.
    pub(crate) fn rehome_refs(
        &self,
        moved: &[(ObjectId, u64, pdcx_store::Location)],
    ) -> Result<u64> {
        let ((), ticket) = self.write_nowait(|tx| {
            let mut up = tx
                .prepare_cached("UPDATE extent_map SET segment=?3, offset=?4, len=?5, crc=?6 WHERE object=?1 AND seq=?2")
                .map_err(db_err)?;
            let mut del = tx
                .prepare_cached("DELETE FROM extent_refs WHERE object=?1 AND seq=?2")
                .map_err(db_err)?;
            for (id, seq, loc) in moved {
                up.execute(params![
                    *id as i64,
                    *seq as i64,
                    loc.segment as i64,
                    loc.offset as i64,
                    loc.len as i64,
                    loc.crc
                ])
                .map_err(db_err)?;
                del.execute(params![*id as i64, *seq as i64]).map_err(db_err)?;
            }
            Ok(())
        })?;
        Ok(ticket)
    }

    /// Every extent read by reference, by (object, seq).
    pub(crate) fn load_refs(&self) -> Result<std::collections::HashMap<(ObjectId, u64), RefRow>> {
        self.write(|tx| {
            let mut st = tx
                .prepare("SELECT object, seq, path, offset, size, chunk, filters FROM extent_refs")
                .map_err(db_err)?;
            let rows = st
                .query_map([], |r| {
                    Ok((
                        (r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64),
                        RefRow {
                            path: r.get(2)?,
                            offset: r.get::<_, i64>(3)? as u64,
                            size: r.get::<_, i64>(4)? as u64,
                            chunk: r.get(5)?,
                            filters: r.get(6)?,
                        },
                    ))
                })
                .map_err(db_err)?;
            rows.map(|r| r.map_err(db_err)).collect()
        })
    }

    /// Every extent's statistics, by (object, seq).
    pub(crate) fn load_extent_stats(
        &self,
    ) -> Result<std::collections::HashMap<(ObjectId, u64), (f64, f64)>> {
        self.write(|tx| {
            let mut st = tx
                .prepare("SELECT object, seq, min, max FROM extent_stats")
                .map_err(db_err)?;
            let rows = st
                .query_map([], |r| {
                    Ok((
                        (r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64),
                        (r.get::<_, f64>(2)?, r.get::<_, f64>(3)?),
                    ))
                })
                .map_err(db_err)?;
            rows.map(|r| r.map_err(db_err)).collect()
        })
    }

    /// Forgets the homes of these extents (object deleted, or extent moved back).
    pub(crate) fn delete_homes(&self, keys: &[(ObjectId, u64)]) -> Result<()> {
        self.write(|tx| {
            let mut del = tx
                .prepare_cached("DELETE FROM extent_home WHERE object=?1 AND seq=?2")
                .map_err(db_err)?;
            for (id, seq) in keys {
                del.execute(params![*id as i64, *seq as i64])
                    .map_err(db_err)?;
            }
            Ok(())
        })
    }
}

/// One `extent_map` row through the prepared `INSERT INTO extent_map (seq, object, region,
/// segment, offset, len, crc)`.
fn insert_extent_row(ins: &mut rusqlite::CachedStatement<'_>, r: &ExtentRow) -> Result<()> {
    let region = bincode::serialize(&r.region).map_err(|e| Error::internal(e.to_string()))?;
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
    Ok(())
}

fn delete_extent_rows(tx: &rusqlite::Transaction, keys: &[(ObjectId, u64)]) -> Result<()> {
    for (id, seq) in keys {
        tx.prepare_cached("DELETE FROM extent_refs WHERE object=?1 AND seq=?2")
            .map_err(db_err)?
            .execute(params![*id as i64, *seq as i64])
            .map_err(db_err)?;
        tx.prepare_cached("DELETE FROM extent_stats WHERE object=?1 AND seq=?2")
            .map_err(db_err)?
            .execute(params![*id as i64, *seq as i64])
            .map_err(db_err)?;
        tx.prepare_cached("DELETE FROM extent_map WHERE object=?1 AND seq=?2")
            .map_err(db_err)?
            .execute(params![*id as i64, *seq as i64])
            .map_err(db_err)?;
    }
    Ok(())
}
