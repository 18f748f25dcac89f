//! Resizing a deployment: the data written by N servers made servable by M, fewer or more
//! (`pdcx resize`). It runs with every server of the root stopped: it holds each shard
//! directory's `LOCK` throughout, as a server does.
//!
//! Where everything goes (no id changes, no name changes):
//! - an object's record (row, tags, memberships, and the owner's region map, tokens, dropped
//!   versions and byte-stream versions) goes to `owner_of_id(id, M)`, its home modulo M
//!   (`records.rs`);
//! - a container (row and tags) goes to the server its name hashes to under M;
//! - where a name hashes to another server than its object's record, that server gets a name
//!   link (`meta/rename.rs`), so lookups by name find the object; links are rebuilt from the
//!   records each time;
//! - what a retired server (rank >= M) holds is adopted by `rank % M` and read where it is
//!   (`holdings.rs`): its log moves to `ROOT/retired/RESIZE/server-NNNN/log`, each extent in it
//!   becomes a reference extent (`datastore/refs.rs`) naming its bytes there, and owners'
//!   region maps name the adopter. An extent only on a tier keeps its blob.
//!
//! Crash safety: `ROOT/resize.json` names the resize. It is published before anything changes
//! and removed last; while it exists servers refuse to start, and `pdcx resize` to the same
//! count runs the resize again from the start. Every step is idempotent: rows are copied
//! (`INSERT OR REPLACE`) and committed at their destination before they are deleted at their
//! source, a log is renamed before references name its new place, links are rebuilt from the
//! records, the counters only rise.

mod holdings;
mod records;

use crate::datastore::crash_point;
use crate::meta::{db_err, open_offline, Metadata};
use crate::{lock_dir, rank_dir, rank_file};
use pdcx_core::{Error, ErrorKind, Result};
use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The resize journal, at the root of a deployment.
pub const JOURNAL: &str = "resize.json";

/// Servers a deployment can have: object ids carry their home rank in 16 bits.
pub const MAX_SERVERS: u32 = 1 << 16;

/// What a resize did (JSON for `pdcx resize --json`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ResizeReport {
    pub from: u32,
    pub to: u32,
    /// Objects whose record moved to another server.
    pub objects_moved: u64,
    /// Containers that moved to another server.
    pub containers_moved: u64,
    /// Names that resolve through a link (their object's record is on another server).
    pub name_links: u64,
    /// Extents of retired servers now held by the adopters, and their bytes.
    pub extents_adopted: u64,
    pub bytes_adopted: u64,
    /// Whether an unfinished resize was run again.
    pub resumed: bool,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Journal {
    from: u32,
    to: u32,
    /// Names the folder of the logs this resize retires (`ROOT/retired/ID`).
    id: u64,
}

/// The unfinished resize recorded under `root`, if any: `(from, to)`.
pub fn unfinished(root: &Path) -> Result<Option<(u32, u32)>> {
    Ok(read_journal(&root.join(JOURNAL))?.map(|j| (j.from, j.to)))
}

/// Refuses to serve a root whose resize is unfinished (its shards are half moved).
pub fn check_not_resizing(root: &Path) -> Result<()> {
    match unfinished(root)? {
        None => Ok(()),
        Some((from, to)) => Err(Error::invalid(format!(
            "{} is being resized from {from} to {to} servers and the resize did not finish; \
             run `pdcx resize --root {} --to {to}` again to finish it, then start {to} servers",
            root.display(),
            root.display()
        ))),
    }
}

/// Makes the data under `root` servable by `to` servers. `say` gets one line per step.
pub fn resize(root: &Path, to: u32, say: &mut dyn FnMut(&str)) -> Result<ResizeReport> {
    if to == 0 || to > MAX_SERVERS {
        return Err(Error::invalid(format!(
            "a deployment has 1 to {MAX_SERVERS} servers, not {to}"
        )));
    }
    let started = Instant::now();
    let journal_path = root.join(JOURNAL);
    let recorded = read_journal(&journal_path)?;
    if let Some(j) = &recorded {
        if j.to != to {
            return Err(Error::invalid(format!(
                "{} records an unfinished resize from {} to {} servers; finish it first \
                 (`pdcx resize --root {} --to {}`), then resize again",
                journal_path.display(),
                j.from,
                j.to,
                root.display(),
                j.to
            )));
        }
    }
    let from = match &recorded {
        Some(j) => j.from,
        None => servers_on_disk(root)?,
    };
    if from == 0 {
        return Err(Error::not_found(format!(
            "{} holds no deployment (no server-NNNN/meta.sqlite)",
            root.display()
        )));
    }
    let mut report = ResizeReport {
        from,
        to,
        resumed: recorded.is_some(),
        ..ResizeReport::default()
    };
    if from == to && recorded.is_none() {
        say(&format!("{} already has {to} servers", root.display()));
        return Ok(report);
    }
    let span = from.max(to);
    // Every shard directory locked (a running server holds its lock) and none left by a
    // server that did not stop cleanly: its unregistered writes and unsynced metadata are
    // recovered by starting it, not here.
    let mut locks = Vec::new();
    for r in 0..span {
        let dir = rank_dir(root, r);
        if r < to {
            std::fs::create_dir_all(&dir)
                .map_err(|e| Error::io(&format!("creating {}", dir.display()), &e))?;
        }
        if dir.exists() {
            locks.push(lock_dir(&dir)?);
        }
        if recorded.is_none() && rank_file(root, r).exists() {
            return Err(Error::invalid(format!(
                "server {r} of {} did not stop cleanly ({} is there): start the deployment \
                 (`pdcx server start --root {} -n {from}`) so it recovers, stop it, then resize",
                root.display(),
                rank_file(root, r).display(),
                root.display()
            )));
        }
    }
    // The existing shards (brought to the current schema, as a server would), and the checks
    // that refuse a resize before anything is recorded.
    let mut dbs: Vec<Option<Connection>> = Vec::with_capacity(span as usize);
    for r in 0..span {
        let path = shard_path(root, r);
        dbs.push(if path.exists() {
            Some(open_offline(&path)?)
        } else {
            None
        });
    }
    let retired_id = recorded.as_ref().map_or_else(
        || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        },
        |j| j.id,
    );
    let ctx = Ctx {
        root,
        from,
        to,
        retired_logs: root.join("retired").join(retired_id.to_string()),
        deployment: crate::tiering::deployment_id(root)?,
        group: group_size(root, to)?,
    };
    holdings::check_adoptable(&ctx, &dbs)?;
    match recorded {
        Some(_) => say(&format!(
            "continuing the resize from {from} to {to} servers"
        )),
        None => {
            let j = Journal {
                from,
                to,
                id: retired_id,
            };
            let bytes =
                serde_json::to_vec_pretty(&j).map_err(|e| Error::internal(e.to_string()))?;
            pdcx_fsio::publish_private(pdcx_fsio::os().as_ref(), &journal_path, &bytes).map_err(
                |e| {
                    Error::new(
                        ErrorKind::Io,
                        format!("writing {}: {e}", journal_path.display()),
                    )
                },
            )?;
            say(&format!(
                "resizing {} from {from} to {to} servers",
                root.display()
            ));
            crash_point("resize.after_journal");
        }
    }

    for r in from..to {
        if dbs[r as usize].is_none() {
            // A new server's shard: created as the server would (auto-vacuum, schema, rank).
            let path = shard_path(root, r);
            drop(Metadata::open(&path, r, to)?);
            dbs[r as usize] = Some(open_offline(&path)?);
        }
    }
    say("moving object and container records to their servers");
    let (objects, containers) = records::move_records(&ctx, &dbs)?;
    report.objects_moved = objects;
    report.containers_moved = containers;
    say(&format!(
        "  {objects} objects, {containers} containers moved"
    ));

    if from > to {
        say("adopting the data of retired servers");
        let (n, bytes) = holdings::adopt(&ctx, &dbs, say)?;
        report.extents_adopted = n;
        report.bytes_adopted = bytes;
    }
    holdings::remap_holders(&ctx, &dbs)?;

    say("rebuilding name links");
    report.name_links = records::rebuild_links(&ctx, &dbs)?;
    say(&format!(
        "  {} names resolve through a link",
        report.name_links
    ));
    crash_point("resize.after_links");
    records::raise_counters(&ctx, &dbs)?;

    // The retired shards go last: until here a rerun reads them.
    drop(dbs);
    for r in to..from {
        let dir = rank_dir(root, r);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| Error::io(&format!("removing {}", dir.display()), &e))?;
        }
    }
    sync_dir(root)?;
    crash_point("resize.before_journal_removed");
    std::fs::remove_file(&journal_path)
        .map_err(|e| Error::io(&format!("removing {}", journal_path.display()), &e))?;
    sync_dir(root)?;
    drop(locks);
    report.seconds = started.elapsed().as_secs_f64();
    say(&format!(
        "done in {:.1} s: start the deployment with {to} servers (`pdcx server start --root {} -n {to}`, or `srun -n {to} pdcx server --root {}`)",
        report.seconds,
        root.display(),
        root.display()
    ));
    Ok(report)
}

/// What every step needs to know.
pub(crate) struct Ctx<'a> {
    root: &'a Path,
    from: u32,
    to: u32,
    /// Where this resize puts the logs of the servers it retires.
    retired_logs: PathBuf,
    /// The deployment id (tier blob keys start with it).
    deployment: String,
    /// The group size of group shards under the new count (1: off).
    group: u32,
}

impl Ctx<'_> {
    /// The server that takes over what retired server `r` holds.
    fn adopter(&self, r: u32) -> u32 {
        r % self.to
    }
}

fn shard_path(root: &Path, rank: u32) -> PathBuf {
    rank_dir(root, rank).join("meta.sqlite")
}

/// The ranks whose shard (`server-NNNN/meta.sqlite`) is under `root`, ascending (none when
/// `root` cannot be read).
pub fn shard_ranks(root: &Path) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut ranks: Vec<u32> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rank = name.strip_prefix("server-")?.parse::<u32>().ok()?;
            e.path().join("meta.sqlite").exists().then_some(rank)
        })
        .collect();
    ranks.sort_unstable();
    ranks
}

/// How many servers the data under `root` belongs to: shards 0..N, none missing.
fn servers_on_disk(root: &Path) -> Result<u32> {
    let ranks = shard_ranks(root);
    for (i, r) in ranks.iter().enumerate() {
        if *r != i as u32 {
            return Err(Error::invalid(format!(
                "{} has no shard for server {i} (found server-{r:04}): not a complete deployment",
                root.display()
            )));
        }
    }
    Ok(ranks.len() as u32)
}

fn group_size(root: &Path, to: u32) -> Result<u32> {
    let path = root.join("pdcx.toml");
    if !path.exists() {
        return Ok(1);
    }
    Ok(pdcx_tiers::DeploymentConfig::load(&path)?
        .shard
        .group_size(to))
}

fn read_journal(path: &Path) -> Result<Option<Journal>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Error::invalid(format!(
                "{} is not a resize journal ({e}); it was not written by pdcx",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(&format!("reading {}", path.display()), &e)),
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(&format!("fsync {}", dir.display()), &e))
}

/// Runs `f` in one transaction of `db` (committed durably: the connection syncs fully).
fn in_tx<T>(db: &Connection, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    db.execute_batch("BEGIN IMMEDIATE").map_err(db_err)?;
    match f(db) {
        Ok(v) => {
            db.execute_batch("COMMIT").map_err(db_err)?;
            Ok(v)
        }
        Err(e) => {
            let _ = db.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests;
