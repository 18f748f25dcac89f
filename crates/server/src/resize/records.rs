//! Records to their new servers: objects by id (home modulo the count), containers by name;
//! name links rebuilt; id and sequence counters raised above everything any shard used.

use super::{in_tx, shard_path, Ctx};
use crate::datastore::{crash_point, FIRST_PROVISIONAL_SEQ};
use crate::meta::db_err;
use pdcx_core::model::owner_of_name;
use pdcx_core::Result;
use rusqlite::{params, Connection, OptionalExtension};

/// The low 48 bits of a whole id.
const LOCAL: i64 = (1 << 48) - 1;

/// The owner-side tables of an object's record, and the column naming the object in each
/// (`tags` and the region map follow the object; extents follow their holder, `holdings.rs`).
const OBJECT_TABLES: &[(&str, &str)] = &[
    ("objects", "lid"),
    ("memberships", "object_lid"),
    ("region_map", "object"),
    ("region_tokens", "object"),
    ("dropped_versions", "object"),
    ("bs_versions", "object"),
];

/// Moves every object record to `owner_of_id(id, to)` and every container to the server its
/// name hashes to. Returns (objects, containers) moved.
pub(super) fn move_records(ctx: &Ctx, dbs: &[Option<Connection>]) -> Result<(u64, u64)> {
    let (mut objects, mut containers) = (0, 0);
    for (r, src) in dbs.iter().enumerate() {
        let Some(src) = src else { continue };
        let r = r as u32;
        // Containers by name: the moving ones listed in a scratch table.
        let mut by_dest: Vec<Vec<i64>> = vec![Vec::new(); ctx.to as usize];
        {
            let mut st = src
                .prepare("SELECT lid, name FROM containers")
                .map_err(db_err)?;
            let rows = st
                .query_map([], |row| {
                    Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
                })
                .map_err(db_err)?;
            for row in rows {
                let (lid, name) = row.map_err(db_err)?;
                let k = owner_of_name(&name, ctx.to);
                if k != r {
                    by_dest[k as usize].push(lid);
                }
            }
        }
        for k in 0..ctx.to {
            if k == r {
                continue;
            }
            let home = format!("((lid >> 48) % {}) = {k}", ctx.to);
            let conds: Vec<(&str, String)> = OBJECT_TABLES
                .iter()
                .map(|(t, col)| (*t, format!("(({col} >> 48) % {}) = {k}", ctx.to)))
                .chain([("tags", format!("kind = 0 AND {home}"))])
                .chain([
                    (
                        "containers",
                        "lid IN (SELECT lid FROM temp.moving)".to_string(),
                    ),
                    (
                        "tags",
                        "kind = 1 AND lid IN (SELECT lid FROM temp.moving)".to_string(),
                    ),
                ])
                .collect();
            let n: i64 = src
                .query_row(
                    &format!("SELECT count(*) FROM objects WHERE {home}"),
                    [],
                    |x| x.get(0),
                )
                .map_err(db_err)?;
            let moving = &by_dest[k as usize];
            if n == 0 && moving.is_empty() {
                continue;
            }
            src.execute_batch(
                "CREATE TEMP TABLE IF NOT EXISTS moving (lid INTEGER PRIMARY KEY); DELETE FROM temp.moving;",
            )
            .map_err(db_err)?;
            {
                let mut ins = src
                    .prepare("INSERT OR IGNORE INTO temp.moving VALUES (?1)")
                    .map_err(db_err)?;
                for lid in moving {
                    ins.execute([lid]).map_err(db_err)?;
                }
            }
            let dest_path = shard_path(ctx.root, k);
            src.execute("ATTACH DATABASE ?1 AS dest", [dest_path.to_string_lossy()])
                .map_err(db_err)?;
            // Extents this server holds of the moving objects were its own (no region-map
            // rows); the new owner learns where they are.
            let held_here = format!(
                "INSERT OR REPLACE INTO dest.region_map (object, seq, holder, region) \
                 SELECT object, seq, {r}, region FROM main.extent_map \
                 WHERE ((object >> 48) % {}) = {k} AND seq < {FIRST_PROVISIONAL_SEQ}",
                ctx.to
            );
            let copied = copy_then_delete(src, &conds, &held_here);
            src.execute_batch("DETACH DATABASE dest").map_err(db_err)?;
            copied?;
            objects += n as u64;
            containers += moving.len() as u64;
        }
    }
    Ok((objects, containers))
}

/// Copies the rows matching each `(table, condition)` into `dest` in one transaction there,
/// then deletes them here in another: a crash between leaves copies that the next run
/// replaces, never a row in neither place. `also` runs in the copying transaction.
fn copy_then_delete(src: &Connection, conds: &[(&str, String)], also: &str) -> Result<()> {
    in_tx(src, |db| {
        db.execute(also, []).map_err(db_err)?;
        for (table, cond) in conds {
            let cols = columns(db, table)?;
            db.execute(
                &format!(
                    "INSERT OR REPLACE INTO dest.{table} ({cols}) SELECT {cols} FROM main.{table} WHERE {cond}"
                ),
                [],
            )
            .map_err(db_err)?;
        }
        Ok(())
    })?;
    crash_point("resize.after_copy");
    in_tx(src, |db| {
        for (table, cond) in conds {
            db.execute(&format!("DELETE FROM main.{table} WHERE {cond}"), [])
                .map_err(db_err)?;
        }
        Ok(())
    })
}

/// The destination's columns of `table`, comma-separated (columns added by migrations sit in
/// the same order in every shard of one schema version, but naming them costs nothing).
fn columns(db: &Connection, table: &str) -> Result<String> {
    let mut st = db
        .prepare(&format!(
            "SELECT name FROM dest.pragma_table_info('{table}')"
        ))
        .map_err(db_err)?;
    let names: Vec<String> = st
        .query_map([], |r| r.get(0))
        .map_err(db_err)?
        .collect::<std::result::Result<_, _>>()
        .map_err(db_err)?;
    Ok(names.join(", "))
}

/// Replaces every shard's name links with exactly the names whose object's record is on
/// another server than the name hashes to. Returns how many.
pub(super) fn rebuild_links(ctx: &Ctx, dbs: &[Option<Connection>]) -> Result<u64> {
    let mut links: Vec<Vec<(String, i64)>> = vec![Vec::new(); ctx.to as usize];
    for (k, db) in dbs.iter().enumerate().take(ctx.to as usize) {
        let Some(db) = db else { continue };
        let mut st = db
            .prepare("SELECT name, lid FROM objects")
            .map_err(db_err)?;
        let rows = st
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .map_err(db_err)?;
        for row in rows {
            let (name, lid) = row.map_err(db_err)?;
            let n = owner_of_name(&name, ctx.to);
            if n as usize != k {
                links[n as usize].push((name, lid));
            }
        }
    }
    let mut total = 0;
    for (k, want) in links.into_iter().enumerate() {
        let Some(db) = &dbs[k] else { continue };
        total += want.len() as u64;
        in_tx(db, |db| {
            db.execute("DELETE FROM name_links", []).map_err(db_err)?;
            let mut ins = db
                .prepare("INSERT OR REPLACE INTO name_links (name, id) VALUES (?1, ?2)")
                .map_err(db_err)?;
            for (name, id) in &want {
                ins.execute(params![name, id]).map_err(db_err)?;
            }
            Ok(())
        })?;
    }
    Ok(total)
}

/// Records the new count in every shard and raises its counters above what any shard used:
/// local ids (an id is minted from this server's rank and a local number, and objects of this
/// home may have lived on other servers), container ids, and sequence numbers (an object's
/// new owner numbers its next write above every write it had).
pub(super) fn raise_counters(ctx: &Ctx, dbs: &[Option<Connection>]) -> Result<()> {
    let (mut lids, mut containers, mut seqs) = (0i64, 0i64, 0i64);
    for db in dbs.iter().flatten() {
        let one = |sql: &str| -> Result<i64> {
            db.query_row(sql, [], |r| r.get::<_, Option<i64>>(0))
                .optional()
                .map(|v| v.flatten().unwrap_or(0))
                .map_err(db_err)
        };
        let setting = |key: &str| -> Result<i64> {
            let v: Option<String> = db
                .query_row("SELECT value FROM settings WHERE key=?1", [key], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(db_err)?;
            Ok(v.and_then(|v| v.parse().ok()).unwrap_or(0))
        };
        lids = lids
            .max(one(&format!("SELECT max(lid & {LOCAL}) FROM objects"))?)
            .max(one(&format!(
                "SELECT seq & {LOCAL} FROM sqlite_sequence WHERE name='objects'"
            ))?)
            .max(setting("lids_reserved")?);
        containers = containers
            .max(one(&format!("SELECT max(lid & {LOCAL}) FROM containers"))?)
            .max(one(&format!(
                "SELECT seq & {LOCAL} FROM sqlite_sequence WHERE name='containers'"
            ))?);
        seqs = seqs
            .max(one("SELECT max(seq) FROM region_map")?)
            .max(one(&format!(
                "SELECT max(seq) FROM extent_map WHERE seq < {}",
                FIRST_PROVISIONAL_SEQ
            ))?)
            .max(setting("seq_reserved")?);
    }
    for (k, db) in dbs.iter().enumerate().take(ctx.to as usize) {
        let Some(db) = db else { continue };
        in_tx(db, |db| {
            let set = |key: &str, value: String| {
                db.execute(
                    "INSERT OR REPLACE INTO settings (key, value) VALUES (?1, ?2)",
                    params![key, value],
                )
                .map_err(db_err)
            };
            set("size", ctx.to.to_string())?;
            set("lids_reserved", (lids + 1).to_string())?;
            set("seq_reserved", (seqs + 1).to_string())?;
            let seq = ((k as i64) << 48) | containers;
            if db
                .execute(
                    "UPDATE sqlite_sequence SET seq = max(seq, ?1) WHERE name='containers'",
                    [seq],
                )
                .map_err(db_err)?
                == 0
            {
                db.execute(
                    "INSERT INTO sqlite_sequence (name, seq) VALUES ('containers', ?1)",
                    [seq],
                )
                .map_err(db_err)?;
            }
            Ok(())
        })?;
    }
    Ok(())
}
