//! Named crash points on the durable path.
//!
//! `crash::point("commit.after_log_sync")` marks a place where a crash must lose nothing
//! acknowledged and expose nothing torn. Without the `crash-points` feature it compiles to
//! nothing. With it, a process started with `PDCX_CRASH_AT=NAME` (or `NAME:N`, the Nth hit)
//! kills itself with SIGKILL there, so no destructor, flush or atexit handler runs: the same
//! as `kill -9` at exactly that instruction. In-process tests instead install a [`set_hook`]
//! (e.g. to cut a simulated disk's power at that point).
//!
//! Every point is listed in [`POINTS`]; the test suite kills a process at each one, and with
//! `PDCX_CRASH_LEDGER=FILE` each such kill appends the point's name to FILE first, so that CI
//! can check that every point was reached (scripts/crash_coverage.py).

/// Every crash point, by name: `area.where`.
pub const POINTS: &[&str] = &[
    // The commit (see the data store's commit order).
    "commit.after_register",
    "commit.after_log_sync",
    "commit.after_extent_rows",
    "commit.after_publish",
    // The owner's side of a registration.
    "register.after_region_map",
    // The flusher: a tier copy made, its home recorded.
    "flush.after_put",
    "flush.after_home_rows",
    // A checkpoint: the metadata WAL fsynced, the log's MANIFEST not yet published.
    "checkpoint.after_wal_sync",
    // Retirement of flushed log segments.
    "retire.before_manifest",
    "retire.after_manifest",
    // Compaction: live extents copied to the shared segment; the copies fdatasynced; their
    // rows pointed at the copies (fsynced), the old segments not yet retired.
    "compact.after_copy",
    "compact.after_sync",
    "compact.after_rows",
    // S3 multipart upload: parts uploaded, before completion.
    "s3.after_part_upload",
    // The segment log's own commit: segments fsynced, manifest not yet published.
    "log.after_segment_sync",
    // Byte-stream versions: a version sealed (its row durable), not yet answered;
    // its home copy written and fsynced under the temporary name; renamed over the home,
    // `done` not yet recorded.
    "seal.after_row",
    "home.after_tmp_written",
    "home.after_rename",
    // A copied version done and made its stream's base (durably), its writes not yet dropped.
    "home.after_base",
    // An S3 home's multipart upload started and its id recorded, no part sent.
    "s3.after_create_upload",
    // A group shard (several servers' extents) put by its leader, no member's home recorded.
    "shard.after_group_put",
    // A group shard's multipart upload started and its marker put, no part uploaded.
    "shard.after_upload_started",
    // A group shard on a shared directory: every member wrote its part into the leader's
    // temporary, the leader has not published it.
    "shard.after_parts_written",
    // A resize (`pdcx resize`): its journal published, nothing moved; records copied to a
    // server, not yet deleted at the source; a retired server's log moved, its extents not yet
    // adopted; adopted, not yet deleted at the retired shard; links rebuilt, counters not yet
    // raised; the retired shards removed, the journal not yet.
    "resize.after_journal",
    "resize.after_copy",
    "resize.after_log_move",
    "resize.after_adopt",
    "resize.after_links",
    "resize.before_journal_removed",
];

/// Marks crash point `name` (one of [`POINTS`]).
#[inline(always)]
pub fn point(name: &'static str) {
    #[cfg(feature = "crash-points")]
    armed::hit(name);
    #[cfg(not(feature = "crash-points"))]
    let _ = name;
}

/// True when this build has crash points compiled in.
pub const ENABLED: bool = cfg!(feature = "crash-points");

#[cfg(feature = "crash-points")]
pub use armed::{hits, set_hook};

#[cfg(feature = "crash-points")]
mod armed {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};

    type Hook = Box<dyn Fn(&'static str) + Send + Sync>;

    struct Armed {
        target: Option<(String, u64)>,
        hits: HashMap<&'static str, u64>,
        hook: Option<std::sync::Arc<Hook>>,
    }

    fn state() -> &'static Mutex<Armed> {
        static S: OnceLock<Mutex<Armed>> = OnceLock::new();
        S.get_or_init(|| {
            let target = pdcx_core::config::CRASH_AT.text().and_then(|v| parse(&v));
            Mutex::new(Armed {
                target,
                hits: HashMap::new(),
                hook: None,
            })
        })
    }

    fn parse(v: &str) -> Option<(String, u64)> {
        let v = v.trim();
        if v.is_empty() {
            return None;
        }
        match v.rsplit_once(':') {
            Some((name, n)) => match n.parse::<u64>() {
                Ok(n) if n > 0 => Some((name.to_string(), n)),
                _ => {
                    eprintln!("pdcx: PDCX_CRASH_AT={v}: the count after ':' must be a positive integer; crash points stay off");
                    None
                }
            },
            None => Some((v.to_string(), 1)),
        }
    }

    pub(super) fn hit(name: &'static str) {
        debug_assert!(super::POINTS.contains(&name), "unlisted crash point {name}");
        let (die, hook) = {
            let mut s = state().lock().unwrap_or_else(|p| p.into_inner());
            let n = {
                let c = s.hits.entry(name).or_default();
                *c += 1;
                *c
            };
            let die = s
                .target
                .as_ref()
                .is_some_and(|(t, at)| t == name && *at == n);
            (die, s.hook.clone())
        };
        if let Some(hook) = hook {
            hook(name);
        }
        if die {
            eprintln!("pdcx: crash point {name} reached: killing this process (PDCX_CRASH_AT)");
            record(name);
            // SAFETY: signalling our own pid; SIGKILL cannot be caught, so nothing runs after.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
    }

    /// Appends `name` to the file `PDCX_CRASH_LEDGER` names, if any: CI's proof that some test
    /// really killed a process at each point (scripts/crash_coverage.py reads it). One
    /// O_APPEND write of a whole line, so concurrent dying processes do not interleave; it is
    /// in the page cache before the SIGKILL, which loses no written data.
    fn record(name: &str) {
        use std::io::Write;
        let Some(path) = pdcx_core::config::T_CRASH_LEDGER.path() else {
            return;
        };
        let line = format!("{name}\n");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!(
                "pdcx: PDCX_CRASH_LEDGER={}: {e}: this kill is not recorded",
                path.display()
            );
        }
    }

    /// Installs (or with None removes) a function called at every crash point.
    pub fn set_hook(hook: Option<Hook>) {
        state().lock().unwrap_or_else(|p| p.into_inner()).hook = hook.map(std::sync::Arc::new);
    }

    /// How often each point was hit in this process.
    pub fn hits() -> HashMap<&'static str, u64> {
        state()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .hits
            .clone()
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn parses_name_and_count() {
            assert_eq!(
                super::parse("commit.after_publish"),
                Some(("commit.after_publish".into(), 1))
            );
            assert_eq!(
                super::parse("flush.after_put:3"),
                Some(("flush.after_put".into(), 3))
            );
            assert_eq!(super::parse("flush.after_put:0"), None);
            assert_eq!(super::parse(""), None);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn point_names_are_unique_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for p in super::POINTS {
            assert!(seen.insert(p), "{p} listed twice");
            assert!(p.contains('.') && !p.contains(':'), "{p}");
        }
    }
}
