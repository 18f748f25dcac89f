//! The compactor: every `compaction.interval_ms` a server drops the writes no read needs
//! (`engine/drop.rs`) and compacts its log (`datastore/compact.rs`), rate-limited; `pdcx
//! compact` runs the same pass at once, unlimited. Settings: `[compaction]` in pdcx.toml,
//! overridden by `PDCX_COMPACTION_*` (docs/OPERATIONS.md).

use crate::datastore::CompactOptions;
use crate::Server;
use pdcx_core::config::{COMPACTION_INTERVAL_MS, COMPACTION_RATE_MIB_S, COMPACTION_THRESHOLD};
use pdcx_core::protocol::CompactReport;
use pdcx_core::{Error, Result};
use pdcx_tiers::DeploymentConfig;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

/// Thresholds a user may set, as Titan bounds its discardable ratio: below, compaction copies
/// far more than it frees; above, it barely frees anything.
const THRESHOLD_MIN: f64 = 0.05;
const THRESHOLD_MAX: f64 = 0.95;

/// Objects of other owners a background pass asks about (`engine/orphans.rs`): one lookup
/// each, so a pass stays short; the next passes go on from there.
const ORPHANS_PER_PASS: usize = 256;

/// Bytes of adopted data (`engine/adopted.rs`) a background pass moves into the log, at
/// least: the rest waits for the next passes.
const ADOPTED_PER_PASS: u64 = 256 << 20;

/// Segments that still take appends are sealed for compaction from this size on: sealing
/// a small one would only add segments.
const SEAL_MIN: u64 = 16 << 20;

/// A server's compaction settings and what its passes did since start.
#[derive(Debug)]
pub struct Compactor {
    /// None: no background compaction (threshold 0).
    pub threshold: Option<f64>,
    pub rate: u64,
    pub interval: Duration,
    totals: Mutex<CompactReport>,
    /// Set when data was deleted: the next poll runs a pass.
    wanted: AtomicBool,
    /// Retired servers' logs this server may remove (`retired.rs`).
    retired: crate::retired::RetiredLogs,
}

impl Compactor {
    /// The settings from the environment, else pdcx.toml, else the defaults, checked.
    pub fn from_config(deployment: &DeploymentConfig) -> Result<Compactor> {
        let c = &deployment.compaction;
        let threshold = match COMPACTION_THRESHOLD.raw() {
            Some(v) => v.trim().parse::<f64>().map_err(|_| {
                Error::invalid(format!(
                    "{}={v:?}: expected a number from {THRESHOLD_MIN} to {THRESHOLD_MAX}, or 0",
                    COMPACTION_THRESHOLD.key()
                ))
            })?,
            None => c.threshold.unwrap_or(0.5),
        };
        let threshold = check_threshold(threshold)?;
        let rate_mib = match COMPACTION_RATE_MIB_S.count_opt()? {
            Some(n) => n,
            None => match c.rate_mib_s {
                Some(n) => COMPACTION_RATE_MIB_S.parse_count(&n.to_string())?,
                None => COMPACTION_RATE_MIB_S.default_count(),
            },
        };
        let interval_ms = match COMPACTION_INTERVAL_MS.count_opt()? {
            Some(n) => n,
            None => match c.interval_ms {
                Some(n) => COMPACTION_INTERVAL_MS.parse_count(&n.to_string())?,
                None => COMPACTION_INTERVAL_MS.default_count(),
            },
        };
        Ok(Compactor {
            threshold,
            rate: rate_mib << 20,
            interval: Duration::from_millis(interval_ms),
            totals: Mutex::new(CompactReport::default()),
            wanted: AtomicBool::new(false),
            retired: Default::default(),
        })
    }

    /// Asks for a pass at the next poll (an object was deleted: its space should come back
    /// within a poll, not an interval).
    pub fn kick(&self) {
        self.wanted.store(true, Ordering::Relaxed);
    }

    /// Everything compaction did since start (`server status`, `/metrics`).
    pub fn totals(&self) -> CompactReport {
        self.totals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn add(&self, r: &CompactReport) {
        let mut t = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        t.dropped_writes += r.dropped_writes;
        t.victims += r.victims;
        t.moved_extents += r.moved_extents;
        t.moved_bytes += r.moved_bytes;
        t.retired_segments += r.retired_segments;
        t.freed_bytes += r.freed_bytes;
        t.forgotten_rows += r.forgotten_rows;
        t.meta_freed_bytes += r.meta_freed_bytes;
        t.seconds += r.seconds;
        t.log_bytes = r.log_bytes;
        t.live_bytes = r.live_bytes;
    }
}

/// 0 (off) or a threshold within the bounds.
fn check_threshold(t: f64) -> Result<Option<f64>> {
    if t == 0.0 {
        return Ok(None);
    }
    if !(THRESHOLD_MIN..=THRESHOLD_MAX).contains(&t) {
        return Err(Error::invalid(format!(
            "compaction.threshold = {t}: expected a number from {THRESHOLD_MIN} to {THRESHOLD_MAX}, or 0 (off)"
        )));
    }
    Ok(Some(t))
}

/// One pass on `server`: hidden writes dropped, then the log compacted at `threshold`
/// (the configured one when None; `pdcx compact` may pass up to 1.0: every segment with
/// any garbage) and `rate` bytes/s (0: unlimited).
pub fn pass(
    server: &Server,
    threshold: Option<f64>,
    rate: u64,
    progress: &mut dyn FnMut(&CompactReport),
) -> Result<CompactReport> {
    let forced = threshold.is_some();
    let threshold = match threshold {
        Some(t) if t > 0.0 && t <= 1.0 => t,
        Some(t) => {
            return Err(Error::invalid(format!(
                "compaction threshold {t}: expected a live fraction above 0 and at most 1"
            )))
        }
        None => server.compactor.threshold.unwrap_or(0.5),
    };
    let started = Instant::now();
    let store = server.engine.store();
    let mut report = CompactReport {
        // `pdcx compact` (a threshold given) looks at every object, the background pass at
        // those written since its last pass.
        dropped_writes: server.engine.drop_hidden_writes(forced)?,
        ..Default::default()
    };
    // Writes of objects owned here that another holder's newer writes hide.
    report.dropped_writes += server.engine.drop_cross_hidden()?;
    // Writes of objects deleted while this server could not be told.
    let budget = if forced { usize::MAX } else { ORPHANS_PER_PASS };
    report.dropped_writes += server.engine.forget_orphans(budget) as u64;
    let opts = CompactOptions {
        threshold,
        rate,
        seal_min: if threshold >= 1.0 { 1 } else { SEAL_MIN },
    };
    store.compact(&opts, &mut report, progress)?;
    // Data a resize adopted from retired servers moves into this log; their logs go once
    // nothing reads from them.
    let retired = server.config.root.join("retired");
    if retired.exists() {
        let budget = if forced { u64::MAX } else { ADOPTED_PER_PASS };
        let (n, bytes) = server.engine.promote_adopted(&retired, budget)?;
        report.moved_extents += n;
        report.moved_bytes += bytes;
        server.compactor.retired.remove_unreferenced(
            &server.config.root,
            server.config.rank,
            store,
            forced,
        );
    }
    // Tier shards mostly garbage: their live extents moved out, the shards deleted.
    let (moved, bytes) = server.engine.flusher().repack(threshold)?;
    report.moved_extents += moved;
    report.moved_bytes += bytes;
    // The owners' rows of writes dropped here, and settled tokens, can go there too.
    report.forgotten_rows = server.engine.release_to_owners(0..server.config.size);
    // Deleted objects' and forgotten rows' pages back to the file system.
    report.meta_freed_bytes = server.meta.reclaim()?;
    let (log_bytes, live_bytes) = store.space();
    report.log_bytes = log_bytes;
    report.live_bytes = live_bytes;
    report.seconds = started.elapsed().as_secs_f64();
    server.compactor.add(&report);
    Ok(report)
}

/// How often the background thread looks at the log's growth between passes.
const GROWTH_POLL: Duration = Duration::from_millis(200);

/// The background thread, while the server runs: a pass every interval, and sooner once the
/// log grew by half its live bytes (at least [`GROWTH_MIN`]) since the last pass, so a
/// burst of overwrites does not wait out the interval with its garbage on disk, or when the
/// last pass freed something (it may have sealed segments the next one frees).
pub fn run(server: Weak<Server>) {
    let mut last = Instant::now();
    let mut after_last = 0u64;
    let mut live_last = 0u64;
    let mut progressed = false;
    loop {
        let Some(s) = server.upgrade() else { return };
        if s.registrar_sleep(GROWTH_POLL.min(s.compactor.interval)) {
            return;
        }
        if s.compactor.threshold.is_none() {
            continue;
        }
        let grown = s.engine.log_bytes().saturating_sub(after_last);
        let wanted = s.compactor.wanted.swap(false, Ordering::Relaxed);
        if !progressed
            && !wanted
            && last.elapsed() < s.compactor.interval
            && grown < (live_last / 2).max(GROWTH_MIN)
        {
            continue;
        }
        last = Instant::now();
        let result = pass(&s, None, s.compactor.rate, &mut |_| {});
        give_back_memory();
        match result {
            Ok(r) => {
                after_last = r.log_bytes;
                live_last = r.live_bytes;
                // Freeing some may have left more to free (segments sealed by this pass).
                progressed = r.freed_bytes > 0;
                if r.freed_bytes > 0 || r.dropped_writes > 0 {
                    tracing::debug!(
                        rank = s.config.rank,
                        dropped = r.dropped_writes,
                        moved_mib = r.moved_bytes >> 20,
                        freed_mib = r.freed_bytes >> 20,
                        "compaction"
                    );
                }
            }
            Err(e) => {
                progressed = false;
                tracing::warn!(rank = s.config.rank, "compaction failed: {e}")
            }
        }
    }
}

/// Returns the allocator's free memory at the top of its heaps to the kernel: after a burst
/// (a thousand connections' buffers, a large read's replies) glibc keeps the freed pages
/// mapped, and the server's RSS would stay at its peak for good.
fn give_back_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The least growth of the log that starts a pass before the interval is out.
const GROWTH_MIN: u64 = 64 << 20;
