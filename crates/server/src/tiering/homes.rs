//! Durable record of which tier holds each flushed extent (`extent_home`). A row is written
//! (and its WAL fsynced) before the log segment holding the extent may be retired, so after a
//! crash an extent is found either in the log or through its home, never nowhere.

use crate::metadata::{db_err, Metadata};
use pdcx_core::{ObjectId, Result};
use rusqlite::params;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS extent_home (
    object INTEGER NOT NULL, seq INTEGER NOT NULL, tier TEXT NOT NULL, codec TEXT NOT NULL,
    stored_len INTEGER NOT NULL, blob TEXT, blob_offset INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (object, seq));";

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

impl Metadata {
    pub(crate) fn ensure_home_table(&self) -> Result<()> {
        self.write(|tx| {
            tx.execute_batch(SCHEMA).map_err(db_err)?;
            // Tables created before shards existed lack the blob columns.
            let has_blob: bool = tx
                .prepare("SELECT 1 FROM pragma_table_info('extent_home') WHERE name='blob'")
                .and_then(|mut st| st.exists([]))
                .map_err(db_err)?;
            if !has_blob {
                tx.execute_batch(
                    "ALTER TABLE extent_home ADD COLUMN blob TEXT;
                     ALTER TABLE extent_home ADD COLUMN blob_offset INTEGER NOT NULL DEFAULT 0;",
                )
                .map_err(db_err)?;
            }
            Ok(())
        })
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
        // Read inside a (write) transaction: the table is created by `ensure_home_table`.
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
