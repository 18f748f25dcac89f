//! The run's results: throughput and p50/p99/max latency per kind of operation, each server's
//! memory through the run, the first errors; printed, and written as JSON with `--json`.

use crate::memory::Mem;
use crate::raw::io;
use crate::{ClientStats, Shared, KINDS};
use pdcx_core::Result;
use std::sync::atomic::Ordering;

fn pct(v: &[u32], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[i.clamp(1, v.len()) - 1] as f64 / 1e3
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn report(
    sh: &Shared,
    all: &mut ClientStats,
    elapsed: f64,
    connect_s: f64,
    connect_lat: &[u32],
    before: &[Mem],
    connected: &[Mem],
    peak: &[Mem],
    idle: &[Mem],
    [end, settled]: &[Vec<Mem>; 2],
    stalled: usize,
) -> Result<u64> {
    let a = &sh.args;
    let errors: u64 = all.errors.iter().sum::<u64>() + sh.connect_errors.load(Ordering::SeqCst);
    let ops: usize = all.lat_us.iter().map(|v| v.len()).sum();
    println!(
        "pdcx-soak: {} clients ({} stalled readers, {} stalled writers) x {} servers, {:.1} s, mix {} ({}), durability {}",
        a.clients,
        a.stalled_readers,
        a.stalled_writers,
        sh.targets.len(),
        elapsed,
        a.mix,
        KINDS.join(","),
        a.durability
    );
    println!(
        "connect: {} connections in {connect_s:.2} s, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        a.clients,
        pct(connect_lat, 50.0),
        pct(connect_lat, 99.0),
        connect_lat.last().copied().unwrap_or(0) as f64 / 1e3
    );
    println!(
        "{:<12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "op", "count", "ops/s", "p50 ms", "p99 ms", "max ms", "errors"
    );
    let mut kinds_json = serde_json::Map::new();
    for (k, kind) in KINDS.iter().enumerate() {
        let v = &mut all.lat_us[k];
        v.sort_unstable();
        let (p50, p99) = (pct(v, 50.0), pct(v, 99.0));
        let max = v.last().copied().unwrap_or(0) as f64 / 1e3;
        println!(
            "{:<12} {:>9} {:>9.1} {:>9.2} {:>9.2} {:>9.1} {:>7}",
            kind,
            v.len(),
            v.len() as f64 / elapsed,
            p50,
            p99,
            max,
            all.errors[k]
        );
        kinds_json.insert(
            (*kind).into(),
            serde_json::json!({"count": v.len(), "ops_per_s": v.len() as f64 / elapsed,
                "p50_ms": p50, "p99_ms": p99, "max_ms": max, "errors": all.errors[k]}),
        );
    }
    println!(
        "total: {ops} ops, {:.1} ops/s, {:.1} MB/s of data (writes + reads), {} errors ({} at connect), {} stalled clients held",
        ops as f64 / elapsed,
        all.bytes as f64 / elapsed / 1e6,
        errors,
        sh.connect_errors.load(Ordering::SeqCst),
        stalled
    );
    let mut servers_json = Vec::new();
    for (i, t) in sh.targets.iter().enumerate() {
        println!(
            "server {} (pid {}): RSS {:.0} MiB before, {:.0} MiB connected, peak {:.0} MiB, {:.0} MiB idle after the run (connections open), end {:.0} MiB, {:.0} MiB {} s after the clients left (high water {:.0} MiB); threads peak {}, idle {}",
            t.rank,
            t.pid,
            before[i].rss_kb as f64 / 1024.0,
            connected[i].rss_kb as f64 / 1024.0,
            peak[i].rss_kb as f64 / 1024.0,
            idle[i].rss_kb as f64 / 1024.0,
            end[i].rss_kb as f64 / 1024.0,
            settled[i].rss_kb as f64 / 1024.0,
            a.settle,
            end[i].hwm_kb as f64 / 1024.0,
            peak[i].threads,
            idle[i].threads
        );
        servers_json.push(serde_json::json!({"rank": t.rank, "pid": t.pid,
            "rss_mib_before": before[i].rss_kb as f64 / 1024.0,
            "rss_mib_connected": connected[i].rss_kb as f64 / 1024.0,
            "rss_mib_peak": peak[i].rss_kb as f64 / 1024.0,
            "rss_mib_idle": idle[i].rss_kb as f64 / 1024.0,
            "rss_mib_end": end[i].rss_kb as f64 / 1024.0,
            "rss_mib_settled": settled[i].rss_kb as f64 / 1024.0,
            "hwm_mib": end[i].hwm_kb as f64 / 1024.0,
            "threads_peak": peak[i].threads, "threads_idle": idle[i].threads}));
    }
    let first = sh.first_errors.lock().unwrap_or_else(|p| p.into_inner());
    for e in first.iter() {
        println!("error: {e}");
    }
    if let Some(path) = &a.json {
        let j = serde_json::json!({
            "clients": a.clients, "stalled_readers": a.stalled_readers,
            "stalled_writers": a.stalled_writers, "seconds": elapsed, "mix": a.mix,
            "small": a.small, "large": a.large, "durability": a.durability,
            "connect_s": connect_s, "ops": ops, "ops_per_s": ops as f64 / elapsed,
            "data_mb_per_s": all.bytes as f64 / elapsed / 1e6, "errors": errors,
            "kinds": kinds_json, "servers": servers_json, "first_errors": *first,
        });
        std::fs::write(path, serde_json::to_string_pretty(&j).unwrap_or_default())
            .map_err(io("writing --json"))?;
    }
    Ok(errors)
}
