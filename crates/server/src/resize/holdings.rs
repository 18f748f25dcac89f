//! The data a retired server holds, adopted by `rank % M` and read where it is.
//!
//! The retired log moves out of the shard directory (a server of that rank started later
//! would otherwise open it as its own log and retire its segments), and each extent in it
//! becomes a reference extent: the adopter reads its bytes from the moved segment file, as it
//! reads an HDF5 chunk imported by reference, and may copy them into its own log later
//! (`promote_references`). An extent with a tier copy is read from the tier instead, its blob
//! key made explicit (blob keys carry the rank that wrote them).

use super::{in_tx, sync_dir, Ctx};
use crate::datastore::{crash_point, FIRST_PROVISIONAL_SEQ, OFF_LOG, REF_SEGMENT};
use crate::meta::db_err;
use pdcx_core::{Error, Region, Result};
use rusqlite::{params, Connection};
use std::collections::HashMap;

/// One extent of a retired server, as its shard records it.
struct Held {
    object: i64,
    seq: i64,
    region: Vec<u8>,
    segment: i64,
    offset: i64,
    len: i64,
    crc: i64,
}

/// Refuses, before anything changes, a resize that would lose data: unregistered writes on a
/// server being retired, or a tier blob that a sweep would delete once its holder and the
/// rank in its key no longer match (a blob key names the server, or the group leader, whose
/// startup sweep deletes the blobs under it that its own shard does not reference).
pub(super) fn check_adoptable(ctx: &Ctx, dbs: &[Option<Connection>]) -> Result<()> {
    for r in ctx.to..ctx.from {
        let Some(db) = &dbs[r as usize] else { continue };
        let pending: i64 = db
            .query_row(
                &format!("SELECT count(*) FROM extent_map WHERE seq >= {FIRST_PROVISIONAL_SEQ}"),
                [],
                |x| x.get(0),
            )
            .map_err(db_err)?;
        if pending > 0 {
            return Err(Error::invalid(format!(
                "server {r} holds {pending} relaxed writes not yet registered with their owners \
                 (their owners were stopped first); start the deployment with {} servers, wait \
                 until `pdcx server status` shows no deferred writes, stop it, then resize",
                ctx.from
            )));
        }
    }
    let own = format!("{}/s", ctx.deployment);
    let group = format!("{}/g", ctx.deployment);
    for (k, db) in dbs.iter().enumerate() {
        let Some(db) = db else { continue };
        let k = k as u32;
        let holder = if k >= ctx.to { ctx.adopter(k) } else { k };
        let mut st = db
            .prepare("SELECT blob FROM extent_home WHERE blob IS NOT NULL")
            .map_err(db_err)?;
        let keys = st
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(db_err)?;
        for key in keys {
            let key = key.map_err(db_err)?;
            let rank_in =
                |prefix: &str| -> Option<u32> { key.strip_prefix(prefix)?.get(..4)?.parse().ok() };
            let swept_by_another = if let Some(r) = rank_in(&own) {
                r != holder && r < ctx.to
            } else if let Some(leader) = rank_in(&group) {
                leader < ctx.to && !(leader..leader + ctx.group).contains(&holder)
            } else {
                false
            };
            if swept_by_another {
                return Err(Error::invalid(format!(
                    "server {holder} would hold tier blob {key:?}, which server or group leader \
                     of the same rank in the key would sweep as unreferenced; resize to a \
                     count that keeps it with its holder (this resize is refused, nothing changed)"
                )));
            }
        }
    }
    Ok(())
}

/// Moves each retired server's log out of its shard directory and its extents to the
/// adopter. Returns the extents and bytes adopted.
pub(super) fn adopt(
    ctx: &Ctx,
    dbs: &[Option<Connection>],
    say: &mut dyn FnMut(&str),
) -> Result<(u64, u64)> {
    let (mut extents, mut bytes) = (0u64, 0u64);
    for r in ctx.to..ctx.from {
        let Some(src) = &dbs[r as usize] else {
            continue;
        };
        let adopter = ctx.adopter(r);
        let Some(dest) = &dbs[adopter as usize] else {
            continue;
        };
        let log = crate::rank_dir(ctx.root, r).join("log");
        let moved = ctx.retired_logs.join(format!("server-{r:04}")).join("log");
        if log.exists() {
            let parent = moved.parent().unwrap_or(ctx.root);
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::io(&format!("creating {}", parent.display()), &e))?;
            std::fs::rename(&log, &moved).map_err(|e| {
                Error::io(
                    &format!("moving {} to {}", log.display(), moved.display()),
                    &e,
                )
            })?;
            sync_dir(parent)?;
            sync_dir(&crate::rank_dir(ctx.root, r))?;
            crash_point("resize.after_log_move");
        }
        if moved.exists() {
            set_holder(moved.parent().unwrap_or(ctx.root), adopter)?;
        }
        let held = load_held(src)?;
        if held.is_empty() {
            continue;
        }
        let homes = load_rows(
            src,
            "extent_home",
            "tier, codec, stored_len, blob, blob_offset",
        )?;
        let refs = load_rows(src, "extent_refs", "path, offset, size, chunk, filters")?;
        // References this server had adopted from servers retired before: their new holder.
        let retired_root = ctx.root.join("retired");
        let earlier: std::collections::BTreeSet<std::path::PathBuf> = refs
            .values()
            .filter_map(|v| match &v[0] {
                rusqlite::types::Value::Text(p) => {
                    let rel = std::path::Path::new(p).strip_prefix(&retired_root).ok()?;
                    let mut parts = rel.components();
                    let (a, b) = (parts.next()?, parts.next()?);
                    Some(retired_root.join(a).join(b))
                }
                _ => None,
            })
            .collect();
        for dir in &earlier {
            if dir.exists() {
                set_holder(dir, adopter)?;
            }
        }
        let stats = load_rows(src, "extent_stats", "min, max")?;
        let n = held.len() as u64;
        let b: u64 = held.iter().map(|h| h.len.max(0) as u64).sum();
        let mut lost = 0u64;
        in_tx(dest, |db| {
            let mut map = db
                .prepare("INSERT OR REPLACE INTO extent_map (object, seq, region, segment, offset, len, crc) VALUES (?1,?2,?3,?4,?5,?6,?7)")
                .map_err(db_err)?;
            let mut home = db
                .prepare("INSERT OR REPLACE INTO extent_home (object, seq, tier, codec, stored_len, blob, blob_offset) VALUES (?1,?2,?3,?4,?5,?6,?7)")
                .map_err(db_err)?;
            let mut reference = db
                .prepare("INSERT OR REPLACE INTO extent_refs (object, seq, path, offset, size, chunk, filters) VALUES (?1,?2,?3,?4,?5,?6,?7)")
                .map_err(db_err)?;
            let mut stat = db
                .prepare("INSERT OR REPLACE INTO extent_stats (object, seq, min, max) VALUES (?1,?2,?3,?4)")
                .map_err(db_err)?;
            for h in &held {
                let key = (h.object, h.seq);
                let seg = h.segment as u64;
                if seg >= REF_SEGMENT {
                    map.execute(params![
                        h.object, h.seq, h.region, h.segment, h.offset, h.len, h.crc
                    ])
                    .map_err(db_err)?;
                    if let Some(v) = refs.get(&key) {
                        reference
                            .execute(params![h.object, h.seq, v[0], v[1], v[2], v[3], v[4]])
                            .map_err(db_err)?;
                    }
                } else if let Some(v) = homes.get(&key) {
                    // On a tier (its log bytes retired, or still there: the tier copy is
                    // read, so the retired log need not stay for it).
                    let off_log = if seg >= OFF_LOG { seg } else { seg + OFF_LOG };
                    map.execute(params![
                        h.object,
                        h.seq,
                        h.region,
                        off_log as i64,
                        h.offset,
                        h.len,
                        h.crc
                    ])
                    .map_err(db_err)?;
                    {
                        let blob = match &v[3] {
                            rusqlite::types::Value::Text(k) => k.clone(),
                            _ => format!(
                                "{}/s{r:04}/{:016x}/{:016x}",
                                ctx.deployment, h.object, h.seq
                            ),
                        };
                        home.execute(params![h.object, h.seq, v[0], v[1], v[2], blob, v[4]])
                            .map_err(db_err)?;
                    }
                } else if seg >= OFF_LOG || !in_segment(&moved, seg, h.offset, h.len) {
                    // Neither on a tier nor in the log: a `memory` write a crash lost, which
                    // the retired server would have dropped at its next start too.
                    lost += 1;
                } else {
                    // In the log only: a reference to its payload in the moved segment file.
                    let region: Region = bincode::deserialize(&h.region)
                        .map_err(|e| Error::internal(format!("stored region: {e}")))?;
                    let path = pdcx_store::record::segment_path(&moved, seg);
                    let chunk = serde_json::to_string(&region.count)
                        .map_err(|e| Error::internal(e.to_string()))?;
                    map.execute(params![
                        h.object,
                        h.seq,
                        h.region,
                        REF_SEGMENT as i64,
                        h.seq,
                        h.len,
                        // The record's crc, kept: a whole read checks it (`read_reference`).
                        h.crc
                    ])
                    .map_err(db_err)?;
                    reference
                        .execute(params![
                            h.object,
                            h.seq,
                            path.to_string_lossy(),
                            h.offset,
                            h.len,
                            chunk,
                            "[]"
                        ])
                        .map_err(db_err)?;
                }
                if let Some(v) = stats.get(&key) {
                    stat.execute(params![h.object, h.seq, v[0], v[1]])
                        .map_err(db_err)?;
                }
            }
            Ok(())
        })?;
        crash_point("resize.after_adopt");
        in_tx(src, |db| {
            db.execute_batch(
                "DELETE FROM extent_map; DELETE FROM extent_home; DELETE FROM extent_refs; DELETE FROM extent_stats;",
            )
            .map_err(db_err)
        })?;
        say(&format!(
            "  server {r}: {n} extents ({b} bytes) adopted by server {adopter}, read from {} or their tier{}",
            moved.display(),
            if lost > 0 {
                format!(" ({lost} `memory` writes a crash had lost left out)")
            } else {
                String::new()
            }
        ));
        extents += n;
        bytes += b;
    }
    Ok((extents, bytes))
}

/// Owners' region maps name the adopter instead of a retired holder (and nothing, where the
/// adopter is the owner itself: its own extent map has them); retired holders' tokens go
/// (they only serve a holder re-registering after a crash, which a retired one never does).
pub(super) fn remap_holders(ctx: &Ctx, dbs: &[Option<Connection>]) -> Result<()> {
    for (k, db) in dbs.iter().enumerate().take(ctx.to as usize) {
        let Some(db) = db else { continue };
        in_tx(db, |db| {
            db.execute(
                "UPDATE OR REPLACE region_map SET holder = holder % ?1 WHERE holder >= ?1",
                [ctx.to],
            )
            .map_err(db_err)?;
            db.execute("DELETE FROM region_map WHERE holder = ?1", [k as i64])
                .map_err(db_err)?;
            db.execute("DELETE FROM region_tokens WHERE holder >= ?1", [ctx.to])
                .map_err(db_err)?;
            Ok(())
        })?;
    }
    Ok(())
}

/// Records that server `rank` holds the references into retired directory `dir`.
fn set_holder(dir: &std::path::Path, rank: u32) -> Result<()> {
    let path = dir.join(crate::retired::HOLDER);
    pdcx_fsio::publish_private(pdcx_fsio::os().as_ref(), &path, rank.to_string().as_bytes())
        .map_err(|e| {
            Error::new(
                pdcx_core::ErrorKind::Io,
                format!("writing {}: {e}", path.display()),
            )
        })
}

/// Whether the segment file `seg` of log `dir` holds `len` bytes at `offset`.
fn in_segment(dir: &std::path::Path, seg: u64, offset: i64, len: i64) -> bool {
    let path = pdcx_store::record::segment_path(dir, seg);
    std::fs::metadata(path).is_ok_and(|m| (offset.max(0) + len.max(0)) as u64 <= m.len())
}

fn load_held(db: &Connection) -> Result<Vec<Held>> {
    let mut st = db
        .prepare("SELECT object, seq, region, segment, offset, len, crc FROM extent_map")
        .map_err(db_err)?;
    let rows = st
        .query_map([], |r| {
            Ok(Held {
                object: r.get(0)?,
                seq: r.get(1)?,
                region: r.get(2)?,
                segment: r.get(3)?,
                offset: r.get(4)?,
                len: r.get(5)?,
                crc: r.get(6)?,
            })
        })
        .map_err(db_err)?;
    rows.collect::<std::result::Result<_, _>>().map_err(db_err)
}

type Rows = HashMap<(i64, i64), Vec<rusqlite::types::Value>>;

/// `cols` of every row of `table`, by (object, seq).
fn load_rows(db: &Connection, table: &str, cols: &str) -> Result<Rows> {
    let n = cols.split(',').count();
    let mut st = db
        .prepare(&format!("SELECT object, seq, {cols} FROM {table}"))
        .map_err(db_err)?;
    let rows = st
        .query_map([], |r| {
            let mut v = Vec::with_capacity(n);
            for i in 0..n {
                v.push(r.get::<_, rusqlite::types::Value>(2 + i)?);
            }
            Ok(((r.get(0)?, r.get(1)?), v))
        })
        .map_err(db_err)?;
    rows.collect::<std::result::Result<_, _>>().map_err(db_err)
}
