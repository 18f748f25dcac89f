//! The shard's schema version (`PRAGMA user_version`) and the numbered steps that bring a
//! database up to [`VERSION`].
//!
//! Each step runs in its own transaction together with the `user_version` bump, so a crash
//! mid-migration leaves the database at the previous version and the step runs again at the
//! next open. Steps must therefore be idempotent (`IF NOT EXISTS`, column checks).
//!
//! | version | layout |
//! |---|---|
//! | 0 | no version recorded: a new, empty file, or a shard written before versions existed (same tables as 1, `extent_home` possibly without `blob`/`blob_offset`, or missing) |
//! | 1 | catalog (`settings`, `containers`, `objects`, `memberships`, `tags`) + locations (`extent_map`, `region_map`, `region_tokens`, `extent_home` with `blob`, `blob_offset`) |
//! | 2 | + `bs_versions`: the versions of byte-stream objects and their home copies (`versions.rs`) |
//! | 3 | + `bs_versions.evicted`: the version is its stream's base, read from its home (`streambase.rs`) |
//! | 4 | + `extent_stats`: each extent's smallest and largest element (value queries skip extents) |
//! | 5 | + `extent_refs`: extents whose bytes stay in a file outside pdcx (HDF5 import by reference) |
//! | 6 | + `name_links`: names that hash to this server for objects another server owns (renames: `rename.rs`) |
//! | 7 | + `objects.access`, `containers.access`: the owning user and its grants (`pdcx_core::Access`, JSON; empty: the deployment's user, no grants) |
//! | 8 | + `dropped_versions`: versions of an object compaction made unreadable (`dropped.rs`) |
//! | 9 | the `lid` of `objects`, `containers`, `tags` and `memberships.object_lid` hold the whole id (home rank in the top 16 bits), so a resize can bring rows of several homes into one shard |
//!
//! A database whose version is newer than this code knows is refused (it was written by a
//! newer pdcx; this one might misread or corrupt it).

use super::db_err;
use pdcx_core::{Error, Result};
use rusqlite::Connection;
use std::path::Path;

/// The schema version this code writes.
pub const VERSION: u32 = MIGRATIONS.len() as u32;

/// A migration step: brings a database from version `n` to `n + 1` (`MIGRATIONS[n]`).
type Step = fn(&rusqlite::Transaction) -> Result<()>;

/// The steps, in order. Append only: never change a step that has shipped.
const MIGRATIONS: &[Step] = &[
    v1_catalog_and_locations,
    v2_byte_stream_versions,
    v3_stream_bases,
    v4_extent_stats,
    v5_extent_refs,
    v6_name_links,
    v7_access,
    v8_dropped_versions,
    v9_lids_are_ids,
];

/// Version 1: today's tables. Also adopts an unversioned shard written by earlier code, which
/// created the same tables with `IF NOT EXISTS` (so they are kept) and may lack the shard
/// columns of `extent_home` (added here).
fn v1_catalog_and_locations(tx: &rusqlite::Transaction) -> Result<()> {
    tx.execute_batch(V1_SCHEMA).map_err(db_err)?;
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
}

/// The schema version recorded in the database.
pub fn version(db: &Connection) -> Result<u32> {
    db.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
        .map(|v| v as u32)
        .map_err(db_err)
}

/// Brings the database at `path` up to [`VERSION`], or refuses one written by a newer pdcx.
pub fn migrate(db: &Connection, path: &Path) -> Result<()> {
    let have = version(db)?;
    if have > VERSION {
        return Err(Error::invalid(format!(
            "{} has schema version {have}, but this pdcx ({}) knows versions up to {VERSION}: \
             it was written by a newer pdcx. Run that newer pdcx on this root (or restore a \
             backup made before the upgrade); this one will not open it",
            path.display(),
            env!("CARGO_PKG_VERSION"),
        )));
    }
    for (n, step) in MIGRATIONS.iter().enumerate().skip(have as usize) {
        let tx = rusqlite::Transaction::new_unchecked(db, rusqlite::TransactionBehavior::Immediate)
            .map_err(db_err)?;
        step(&tx).map_err(|e| {
            Error::new(
                e.kind,
                format!(
                    "{}: migrating the schema to version {}: {}",
                    path.display(),
                    n + 1,
                    e.message
                ),
            )
        })?;
        tx.pragma_update(None, "user_version", (n + 1) as i64)
            .map_err(db_err)?;
        tx.commit().map_err(db_err)?;
    }
    Ok(())
}

/// Version 2: the versions of byte-stream objects.
fn v2_byte_stream_versions(tx: &rusqlite::Transaction) -> Result<()> {
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS bs_versions (
            object INTEGER NOT NULL, epoch INTEGER NOT NULL, seal_seq INTEGER NOT NULL,
            size INTEGER NOT NULL, home TEXT NOT NULL, state TEXT NOT NULL,
            sealed_at REAL NOT NULL, done_at REAL NOT NULL DEFAULT 0,
            error TEXT NOT NULL DEFAULT '', upload_id TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (object, epoch));",
    )
    .map_err(db_err)
}

/// Version 3: which done version is its stream's base (the log no longer holds it).
fn v3_stream_bases(tx: &rusqlite::Transaction) -> Result<()> {
    let has: bool = tx
        .prepare("SELECT 1 FROM pragma_table_info('bs_versions') WHERE name='evicted'")
        .and_then(|mut st| st.exists([]))
        .map_err(db_err)?;
    if !has {
        tx.execute_batch("ALTER TABLE bs_versions ADD COLUMN evicted INTEGER NOT NULL DEFAULT 0;")
            .map_err(db_err)?;
    }
    Ok(())
}

/// Version 4: per-extent statistics for value queries (`datastore/stats.rs`).
fn v4_extent_stats(tx: &rusqlite::Transaction) -> Result<()> {
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS extent_stats (
            object INTEGER NOT NULL, seq INTEGER NOT NULL, min REAL NOT NULL, max REAL NOT NULL,
            PRIMARY KEY (object, seq));",
    )
    .map_err(db_err)
}

/// Version 5: extents read from a file outside pdcx (`datastore/refs.rs`).
fn v5_extent_refs(tx: &rusqlite::Transaction) -> Result<()> {
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS extent_refs (
            object INTEGER NOT NULL, seq INTEGER NOT NULL, path TEXT NOT NULL,
            offset INTEGER NOT NULL, size INTEGER NOT NULL, chunk TEXT NOT NULL,
            filters TEXT NOT NULL, PRIMARY KEY (object, seq));",
    )
    .map_err(db_err)
}

/// Version 6: names this server answers lookups for although another server owns the
/// object (an object renamed to a name that hashes here).
fn v6_name_links(tx: &rusqlite::Transaction) -> Result<()> {
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS name_links (name TEXT PRIMARY KEY, id INTEGER NOT NULL);",
    )
    .map_err(db_err)
}

/// Version 7: who owns each object and container, and what it grants other users. Rows
/// written before have none: the deployment's own user's, as they always were.
fn v7_access(tx: &rusqlite::Transaction) -> Result<()> {
    for table in ["objects", "containers"] {
        let has: bool = tx
            .prepare(&format!(
                "SELECT 1 FROM pragma_table_info('{table}') WHERE name='access'"
            ))
            .and_then(|mut st| st.exists([]))
            .map_err(db_err)?;
        if !has {
            tx.execute_batch(&format!(
                "ALTER TABLE {table} ADD COLUMN access TEXT NOT NULL DEFAULT '';"
            ))
            .map_err(db_err)?;
        }
    }
    Ok(())
}

/// Version 9: local ids become whole ids (`rank << 48 | local`): after a resize a shard holds
/// objects created by other servers, whose ids its rank does not give. Rows of rank 0 are
/// unchanged; a row already whole (top bits set) is left alone, so the step is idempotent.
fn v9_lids_are_ids(tx: &rusqlite::Transaction) -> Result<()> {
    use rusqlite::OptionalExtension;
    let rank: Option<String> = tx
        .query_row("SELECT value FROM settings WHERE key='rank'", [], |r| {
            r.get(0)
        })
        .optional()
        .map_err(db_err)?;
    let rank: i64 = match rank {
        // A new file: its rank is recorded after the migrations, with nothing to rewrite.
        None => return Ok(()),
        Some(v) => v
            .parse()
            .map_err(|_| Error::internal(format!("settings.rank is not a number: {v:?}")))?,
    };
    if rank == 0 {
        return Ok(());
    }
    let home = rank << 48;
    let local = "< 281474976710656";
    tx.execute_batch(&format!(
        "UPDATE objects SET lid = lid + {home} WHERE lid {local};
         UPDATE containers SET lid = lid + {home} WHERE lid {local};
         UPDATE memberships SET object_lid = object_lid + {home} WHERE object_lid {local};
         UPDATE tags SET lid = lid + {home} WHERE lid {local};
         UPDATE sqlite_sequence SET seq = seq + {home}
             WHERE name IN ('objects', 'containers') AND seq {local};"
    ))
    .map_err(db_err)
}

/// Version 8: the versions of each object compaction made unreadable (`versions.rs`):
/// versions `from_seq <= v < to_seq` of `object` lost a write their reads needed.
fn v8_dropped_versions(tx: &rusqlite::Transaction) -> Result<()> {
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS dropped_versions (
            object INTEGER NOT NULL, from_seq INTEGER NOT NULL, to_seq INTEGER NOT NULL,
            PRIMARY KEY (object, from_seq));",
    )
    .map_err(db_err)
}

const V1_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS containers (
    lid INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE NOT NULL, creator TEXT NOT NULL, ctime REAL NOT NULL);
CREATE TABLE IF NOT EXISTS objects (
    lid INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE NOT NULL, dtype INTEGER NOT NULL,
    dims TEXT NOT NULL, fill BLOB NOT NULL, creator TEXT NOT NULL, ctime REAL NOT NULL, mtime REAL NOT NULL);
CREATE TABLE IF NOT EXISTS memberships (
    object_lid INTEGER NOT NULL, container TEXT NOT NULL, PRIMARY KEY (object_lid, container));
-- kind 0 = object, 1 = container; vtype 0 str, 1 int, 2 float, 3 bytes.
CREATE TABLE IF NOT EXISTS tags (
    kind INTEGER NOT NULL, lid INTEGER NOT NULL, key TEXT NOT NULL, vtype INTEGER NOT NULL,
    ival INTEGER, num REAL, sval TEXT, bval BLOB, PRIMARY KEY (kind, lid, key));
CREATE INDEX IF NOT EXISTS tags_num ON tags (kind, key, num);
CREATE INDEX IF NOT EXISTS tags_str ON tags (kind, key, sval);
-- Extents whose bytes are in this server's log, of any object (the owner may be another
-- server: region-local placement). seq orders writes of one object; the owner assigns it.
CREATE TABLE IF NOT EXISTS extent_map (
    object INTEGER NOT NULL, seq INTEGER NOT NULL, region BLOB NOT NULL,
    segment INTEGER NOT NULL, offset INTEGER NOT NULL, len INTEGER NOT NULL, crc INTEGER NOT NULL,
    PRIMARY KEY (object, seq));
-- The owner's region map: regions of its objects whose bytes another server holds.
CREATE TABLE IF NOT EXISTS region_map (
    object INTEGER NOT NULL, seq INTEGER NOT NULL, holder INTEGER NOT NULL, region BLOB NOT NULL,
    PRIMARY KEY (object, seq));
-- Owner side of deferred (relaxed) writes: the sequence number each one was registered
-- under, by the holder's log location, so a holder that re-registers after a crash (it never
-- learned the answer) gets the same number back. Pruned when the holder reports its oldest live
-- log segment (`engine/release.rs`).
CREATE TABLE IF NOT EXISTS region_tokens (
    holder INTEGER NOT NULL, segment INTEGER NOT NULL, offset INTEGER NOT NULL,
    object INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (holder, segment, offset));
-- The tier copy of a flushed extent (`locations.rs`).
CREATE TABLE IF NOT EXISTS extent_home (
    object INTEGER NOT NULL, seq INTEGER NOT NULL, tier TEXT NOT NULL, codec TEXT NOT NULL,
    stored_len INTEGER NOT NULL, blob TEXT, blob_offset INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (object, seq));
";
