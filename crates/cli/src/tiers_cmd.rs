//! Commands for the storage hierarchy: flush, migrate, compact, top.

use crate::common::{connect, human_bytes, msg, print_table, resolve};
use anyhow::{bail, Result};
use pdcx_core::protocol::ServerStats;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Flushes every server's committed extents to their home tiers, printing progress until
/// nothing is pending. Fails (exit 1) if a tier error stops all progress for `stall` seconds:
/// the data is then safe in the servers' logs and the background flush keeps retrying.
pub fn flush(root: &Path, stall: u64, quiet: bool) -> Result<()> {
    let client = connect(root)?;
    let n = client.size();
    for rank in 0..n {
        client.flush_server(rank, false).map_err(msg)?;
    }
    let start = Instant::now();
    let mut last_progress = Instant::now();
    let mut last_pending = u64::MAX;
    let first: u64 = (0..n)
        .map(|r| client.stats(r).map(|s| s.flush_pending_bytes))
        .sum::<std::result::Result<u64, _>>()
        .map_err(msg)?;
    loop {
        let stats: Vec<ServerStats> = (0..n)
            .map(|r| client.stats(r))
            .collect::<std::result::Result<_, _>>()
            .map_err(msg)?;
        let pending: u64 = stats.iter().map(|s| s.flush_pending_bytes).sum();
        let extents: u64 = stats.iter().map(|s| s.flush_pending_extents).sum();
        if !quiet {
            let done = first.saturating_sub(pending);
            let secs = start.elapsed().as_secs_f64().max(1e-3);
            eprint!(
                "\rflush: {} of {} done, {} extents pending ({}/s)      ",
                human_bytes(done),
                human_bytes(first.max(done)),
                extents,
                human_bytes((done as f64 / secs) as u64)
            );
            let _ = std::io::stderr().flush();
        }
        if extents == 0 {
            if !quiet {
                eprintln!();
            }
            println!(
                "flushed: nothing pending on {n} servers ({:.1} s)",
                start.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if pending < last_pending {
            last_pending = pending;
            last_progress = Instant::now();
        } else if last_progress.elapsed() >= Duration::from_secs(stall) {
            if !quiet {
                eprintln!();
            }
            let errors: Vec<String> = stats
                .iter()
                .filter_map(|s| {
                    s.flush_error
                        .as_ref()
                        .map(|e| format!("server {}: {e}", s.rank))
                })
                .collect();
            bail!(
                "flush made no progress for {stall} s with {} in {extents} extents pending{}\nThe data is safe in the servers' logs; the background flush keeps retrying.",
                human_bytes(pending),
                if errors.is_empty() { String::new() } else { format!(":\n  {}", errors.join("\n  ")) }
            );
        }
        for rank in 0..n {
            client.flush_server(rank, false).map_err(msg)?;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

pub fn migrate(root: &Path, object: &str, tier: &str) -> Result<()> {
    let client = connect(root)?;
    let o = resolve(&client, object)?;
    let t0 = Instant::now();
    let (n, bytes) = client.migrate(o.id, tier).map_err(msg)?;
    println!(
        "moved {n} extents ({}) of {} to tier {tier} in {:.2} s",
        human_bytes(bytes),
        o.name,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Live view of every server: log, cache, flush queue and per-tier usage and throughput.
/// With `count`, prints that many samples and exits (for scripts); `csv` prints one CSV row
/// per server and tier per sample instead of tables.
pub fn top(root: &Path, interval: f64, count: Option<u64>, csv: bool) -> Result<()> {
    let client = connect(root)?;
    let n = client.size();
    let mut prev: Option<(Instant, Vec<ServerStats>)> = None;
    let mut printed = 0u64;
    let t0 = Instant::now();
    if csv {
        println!("t_s,server,tier,used_bytes,capacity_bytes,put_bytes,get_bytes,put_MBps,log_bytes,cache_bytes,flush_pending_bytes,flushed_bytes");
    }
    loop {
        let now = Instant::now();
        let stats: Vec<ServerStats> = (0..n)
            .map(|r| client.stats(r))
            .collect::<std::result::Result<_, _>>()
            .map_err(msg)?;
        let rate = |rank: usize, tier: usize, cur: u64| -> f64 {
            prev.as_ref()
                .and_then(|(t, p)| {
                    let before = p.get(rank)?.tiers.get(tier)?.put_bytes;
                    Some(
                        (cur.saturating_sub(before)) as f64
                            / now.duration_since(*t).as_secs_f64().max(1e-3)
                            / 1e6,
                    )
                })
                .unwrap_or(0.0)
        };
        if csv {
            for (r, s) in stats.iter().enumerate() {
                let row_tail = format!(
                    "{},{},{},{}",
                    s.log_bytes, s.cache_bytes, s.flush_pending_bytes, s.flushed_bytes
                );
                let t = t0.elapsed().as_secs_f64();
                if s.tiers.is_empty() {
                    println!("{t:.2},{},log,,,,,,{row_tail}", s.rank);
                }
                for (i, x) in s.tiers.iter().enumerate() {
                    println!(
                        "{t:.2},{},{},{},{},{},{},{:.1},{row_tail}",
                        s.rank,
                        x.name,
                        x.used,
                        x.capacity.map_or(String::new(), |c| c.to_string()),
                        x.put_bytes,
                        x.get_bytes,
                        rate(r, i, x.put_bytes)
                    );
                }
            }
        } else {
            if printed > 0 {
                print!("\x1b[2J\x1b[H");
            }
            println!(
                "pdcx top: {} servers, every {interval} s (Ctrl-C to quit)\n",
                n
            );
            let rows: Vec<Vec<String>> = stats
                .iter()
                .map(|s| {
                    vec![
                        s.rank.to_string(),
                        human_bytes(s.log_bytes),
                        format!(
                            "{} ({:.0}%)",
                            human_bytes(s.log_bytes.saturating_sub(s.log_live_bytes)),
                            100.0 * s.log_bytes.saturating_sub(s.log_live_bytes) as f64
                                / s.log_bytes.max(1) as f64
                        ),
                        format!(
                            "{}/{}",
                            human_bytes(s.cache_bytes),
                            human_bytes(s.cache_capacity)
                        ),
                        format!(
                            "{} ({} ext)",
                            human_bytes(s.flush_pending_bytes),
                            s.flush_pending_extents
                        ),
                        human_bytes(s.flushed_bytes),
                        s.flush_error.clone().unwrap_or_default(),
                    ]
                })
                .collect();
            print_table(
                &[
                    "SERVER",
                    "LOG",
                    "GARBAGE",
                    "CACHE",
                    "FLUSH QUEUE",
                    "FLUSHED",
                    "ERROR",
                ],
                &rows,
            );
            let mut trows = Vec::new();
            for (r, s) in stats.iter().enumerate() {
                for (i, x) in s.tiers.iter().enumerate() {
                    trows.push(vec![
                        s.rank.to_string(),
                        format!("{} ({})", x.name, x.kind),
                        match x.capacity {
                            Some(c) => format!(
                                "{} / {} ({:.0}%)",
                                human_bytes(x.used),
                                human_bytes(c),
                                100.0 * x.used as f64 / c.max(1) as f64
                            ),
                            None => human_bytes(x.used),
                        },
                        human_bytes(x.live),
                        format!("{:.1} MB/s", rate(r, i, x.put_bytes)),
                        human_bytes(x.put_bytes),
                        human_bytes(x.get_bytes),
                    ]);
                }
            }
            if !trows.is_empty() {
                println!();
                print_table(
                    &[
                        "SERVER",
                        "TIER",
                        "USED",
                        "LIVE HERE",
                        "WRITE NOW",
                        "WRITTEN",
                        "READ",
                    ],
                    &trows,
                );
            } else {
                println!("\n(no tiers configured: data lives in the servers' logs)");
            }
        }
        let _ = std::io::stdout().flush();
        printed += 1;
        if count.is_some_and(|c| printed >= c) {
            return Ok(());
        }
        prev = Some((now, stats));
        std::thread::sleep(Duration::from_secs_f64(interval));
    }
}

/// Runs a compaction pass on every server in turn, with a progress line per server on stderr
/// and a summary (or JSON lines) on stdout.
pub fn compact(root: &Path, threshold: f64, json: bool) -> Result<()> {
    if !(threshold > 0.0 && threshold <= 1.0) {
        bail!("--threshold {threshold}: expected a live fraction above 0 and at most 1");
    }
    let client = connect(root)?;
    let n = client.size();
    let start = Instant::now();
    let (mut before, mut after, mut moved, mut dropped) = (0u64, 0u64, 0u64, 0u64);
    for rank in 0..n {
        let log_before = client.stats(rank).map_err(msg)?.log_bytes;
        if !json {
            eprint!("\rcompact: server {} of {n}...      ", rank + 1);
            let _ = std::io::stderr().flush();
        }
        let r = client.compact_server(rank, Some(threshold)).map_err(msg)?;
        before += log_before;
        after += r.log_bytes;
        moved += r.moved_bytes;
        dropped += r.dropped_writes;
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "rank": rank,
                    "log_bytes_before": log_before,
                    "log_bytes": r.log_bytes,
                    "live_bytes": r.live_bytes,
                    "dropped_writes": r.dropped_writes,
                    "moved_bytes": r.moved_bytes,
                    "freed_bytes": r.freed_bytes,
                    "retired_segments": r.retired_segments,
                    "forgotten_rows": r.forgotten_rows,
                    "meta_freed_bytes": r.meta_freed_bytes,
                    "seconds": r.seconds,
                })
            );
        } else {
            eprintln!(
                "\rcompact: server {} of {n}: log {} -> {} ({} live), {} hidden writes dropped, {} copied, {} segments freed, {} rows forgotten elsewhere, metadata {} smaller in {:.1} s",
                rank + 1,
                human_bytes(log_before),
                human_bytes(r.log_bytes),
                human_bytes(r.live_bytes),
                r.dropped_writes,
                human_bytes(r.moved_bytes),
                r.retired_segments,
                r.forgotten_rows,
                human_bytes(r.meta_freed_bytes),
                r.seconds
            );
        }
    }
    if !json {
        println!(
            "compacted {n} servers: logs {} -> {} ({} freed, {} copied, {} hidden writes dropped) in {:.1} s",
            human_bytes(before),
            human_bytes(after),
            human_bytes(before.saturating_sub(after)),
            human_bytes(moved),
            dropped,
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
