//! Keeping the metadata file within a small multiple of its live rows. SQLite never shrinks a
//! database file by itself: pages freed by deletes go on its freelist, and a deployment that
//! created and deleted millions of objects kept a file the size of its peak. The shard is
//! opened with `auto_vacuum=INCREMENTAL` (an older file is rewritten once by `VACUUM`), and
//! compaction passes call [`reclaim`](Metadata::reclaim), which gives free pages back to the
//! file system a bounded batch at a time. The WAL file is truncated after a checkpoint to at
//! most `journal_size_limit`.

use super::{db_err, Metadata};
use pdcx_core::Result;
use rusqlite::Connection;

/// Free pages below this many bytes stay in the file (reused by the next inserts).
const RECLAIM_MIN_BYTES: i64 = 1 << 20;
/// Pages moved per incremental-vacuum step: the shard's lock is held for one step only.
const PAGES_PER_STEP: i64 = 2048;
/// The WAL file is cut back to this after a checkpoint (SQLite otherwise keeps its peak).
const WAL_KEEP_BYTES: i64 = 64 << 20;

/// Before the schema is created or migrated: incremental auto-vacuum, rewriting a file made
/// without it once (VACUUM is atomic: a crash leaves the old file).
pub(super) fn prepare(db: &Connection) -> Result<()> {
    db.execute_batch(&format!("PRAGMA journal_size_limit={WAL_KEEP_BYTES};"))
        .map_err(db_err)?;
    let mode: i64 = db
        .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
        .map_err(db_err)?;
    if mode == 2 {
        return Ok(());
    }
    db.execute_batch("PRAGMA auto_vacuum=INCREMENTAL;")
        .map_err(db_err)?;
    let tables: i64 = db
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(db_err)?;
    if tables > 0 {
        tracing::info!("metadata: rewriting the shard once to give deleted rows' space back");
        db.execute_batch("VACUUM;").map_err(db_err)?;
    }
    Ok(())
}

/// Page counts of the shard: (pages, free pages, page size).
fn pages(db: &Connection) -> Result<(i64, i64, i64)> {
    let get = |pragma: &str| {
        db.query_row(&format!("PRAGMA {pragma}"), [], |r| r.get::<_, i64>(0))
            .map_err(db_err)
    };
    Ok((
        get("page_count")?,
        get("freelist_count")?,
        get("page_size")?,
    ))
}

impl Metadata {
    /// Gives the shard's free pages back to the file system once they are at least a quarter
    /// of it (and 1 MiB). Returns the bytes freed.
    pub fn reclaim(&self) -> Result<u64> {
        let mut freed = 0i64;
        loop {
            let db = self.db();
            let (total, free, page) = pages(&db)?;
            let worth = if freed == 0 {
                free * page >= RECLAIM_MIN_BYTES && free * 4 >= total
            } else {
                free > 0
            };
            if !worth {
                if freed > 0 {
                    // The file shrinks when the WAL is checkpointed: now, not at some later
                    // automatic checkpoint.
                    db.execute_batch("PRAGMA wal_checkpoint(PASSIVE);")
                        .map_err(db_err)?;
                }
                return Ok(freed as u64);
            }
            let step = free.min(PAGES_PER_STEP);
            db.execute_batch(&format!("PRAGMA incremental_vacuum({step});"))
                .map_err(db_err)?;
            freed += step * page;
        }
    }

    /// The shard's size on disk: the database file's pages and its WAL.
    pub fn file_bytes(&self) -> u64 {
        let pages = pages(&self.db()).map_or(0, |(n, _, size)| (n * size) as u64);
        let mut wal = self.path.as_os_str().to_owned();
        wal.push("-wal");
        pages + std::fs::metadata(wal).map_or(0, |m| m.len())
    }
}
