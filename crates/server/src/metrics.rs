//! Prometheus metrics: a server's counters in the text exposition format (version 0.0.4),
//! served on an opt-in address (`pdcx server --metrics ADDR`, `PDCX_METRICS_ADDR`, or
//! `[metrics] bind` in `pdcx.toml`) by a small blocking HTTP listener (`GET /metrics`, `http.rs`).
//!
//! Most numbers are read at scrape time from what the server already keeps for `pdcx top`
//! (`ServerStats`, the flusher's state, the tiers' traffic counters, the metadata shard's group
//! commit). What nothing counted before (requests by kind with a latency histogram, accepted
//! connections, what recovery found at start, the engine's cache lookups and log commits) is
//! kept in `crate::counters`, which `stats` reads too.
//!
//! Every metric is listed with its type and meaning in docs/OPERATIONS.md; keep them in step.

use crate::counters::{RequestStats, LATENCY_BUCKETS};
use crate::Server;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Environment variable naming the metrics address (see [`rank_addr`]).
pub const ENV: &str = "PDCX_METRICS_ADDR";

/// The address rank `rank` listens on for `spec` (`HOST:PORT`): port + rank, so every rank
/// of a deployment can share one setting (N ranks on one node get N consecutive ports);
/// port 0 stays 0 (any free port).
pub fn rank_addr(spec: &str, rank: u32) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let addr = spec
        .trim()
        .to_socket_addrs()
        .map_err(|e| format!("metrics address {spec:?}: {e} (expected HOST:PORT)"))?
        .next()
        .ok_or_else(|| format!("metrics address {spec:?} resolves to nothing"))?;
    if addr.port() == 0 {
        return Ok(addr);
    }
    let port = u32::from(addr.port()) + rank;
    let port = u16::try_from(port).map_err(|_| {
        format!(
            "metrics address {spec:?}: port {} + rank {rank} is past 65535",
            addr.port()
        )
    })?;
    Ok(SocketAddr::new(addr.ip(), port))
}

mod http;
pub use http::{
    parse_head, Exporter, Head, HEAD_DEADLINE, MAX_CONNECTIONS, MAX_HEAD, WRITE_TIMEOUT,
};

/// Builds the exposition text. Families are written whole (HELP, TYPE, then every sample).
struct Text(String);

impl Text {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", escape(v));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {}", number(value));
    }

    /// A family with one unlabelled sample.
    fn one(&mut self, name: &str, kind: &str, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Segment files in the log directory (named by `pdcx_store::segment_file_name`).
fn log_segments(server: &Server) -> u64 {
    std::fs::read_dir(server.engine.log_dir())
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    pdcx_store::parse_segment_file_name(&e.file_name().to_string_lossy()).is_some()
                })
                .count() as u64
        })
        .unwrap_or(0)
}

/// The exposition text for `server`, read now.
pub fn render(server: &Server) -> String {
    let mut t = Text(String::with_capacity(16 << 10));
    let rank = server.config.rank.to_string();
    let size = server.config.size.to_string();
    t.family(
        "pdcx_server_info",
        "gauge",
        "Always 1; labels say which server this is.",
    );
    t.sample(
        "pdcx_server_info",
        &[
            ("rank", &rank),
            ("size", &size),
            ("node", &server.config.node),
            ("version", env!("CARGO_PKG_VERSION")),
        ],
        1.0,
    );
    t.one(
        "pdcx_uptime_seconds",
        "gauge",
        "Seconds since this server started.",
        server.started.elapsed().as_secs_f64(),
    );
    t.one(
        "pdcx_metrics_scrapes_total",
        "counter",
        "GET /metrics requests answered (this one included).",
        server.metrics.scrapes.load(Ordering::Relaxed) as f64,
    );

    // Requests, by kind.
    let kinds: Vec<(String, Arc<RequestStats>)> = {
        let m = server
            .metrics
            .requests
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> = m.iter().map(|(k, s)| (k.clone(), s.clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let per_kind = |t: &mut Text, name: &str, help: &str, f: &dyn Fn(&RequestStats) -> u64| {
        t.family(name, "counter", help);
        for (k, s) in &kinds {
            t.sample(name, &[("kind", k)], f(s) as f64);
        }
    };
    per_kind(
        &mut t,
        "pdcx_requests_total",
        "Requests answered, by kind (protocol request name).",
        &|s| s.count.load(Ordering::Relaxed),
    );
    per_kind(
        &mut t,
        "pdcx_request_errors_total",
        "Requests answered with an error, by kind.",
        &|s| s.errors.load(Ordering::Relaxed),
    );
    per_kind(
        &mut t,
        "pdcx_request_payload_bytes_total",
        "Bulk payload bytes received with requests (data staged over TCP), by kind.",
        &|s| s.in_bytes.load(Ordering::Relaxed),
    );
    per_kind(
        &mut t,
        "pdcx_reply_payload_bytes_total",
        "Bulk payload bytes sent with replies (data read over TCP), by kind.",
        &|s| s.out_bytes.load(Ordering::Relaxed),
    );
    t.family(
        "pdcx_request_duration_seconds",
        "histogram",
        "Time from a request's header arriving to its reply written, by kind.",
    );
    for (k, s) in &kinds {
        let mut cum = 0u64;
        for (i, b) in s.buckets.iter().enumerate() {
            cum += b.load(Ordering::Relaxed);
            let le = LATENCY_BUCKETS
                .get(i)
                .map_or("+Inf".to_string(), |v| number(*v));
            t.sample(
                "pdcx_request_duration_seconds_bucket",
                &[("kind", k), ("le", &le)],
                cum as f64,
            );
        }
        t.sample(
            "pdcx_request_duration_seconds_sum",
            &[("kind", k)],
            s.nanos.load(Ordering::Relaxed) as f64 / 1e9,
        );
        t.sample(
            "pdcx_request_duration_seconds_count",
            &[("kind", k)],
            cum as f64,
        );
    }

    // Connections.
    t.one(
        "pdcx_connections_accepted_total",
        "counter",
        "TCP connections accepted on the server's port (before authentication).",
        server.metrics.accepted.load(Ordering::Relaxed) as f64,
    );

    let st = match crate::stats::stats(server) {
        Ok(st) => st,
        Err(e) => {
            // The metadata shard could not be read: say so in the scrape, keep the rest.
            t.one(
                "pdcx_stats_error",
                "gauge",
                "1 if the server's statistics could not be read at this scrape.",
                1.0,
            );
            tracing::warn!(rank = server.config.rank, error = %e.message, "metrics: reading stats failed");
            return t.0;
        }
    };
    t.one(
        "pdcx_connections",
        "gauge",
        "Authenticated client and peer connections open now.",
        st.connections as f64,
    );
    t.one(
        "pdcx_objects",
        "gauge",
        "Objects whose metadata this server owns.",
        st.objects as f64,
    );
    t.one(
        "pdcx_containers",
        "gauge",
        "Containers whose metadata this server owns.",
        st.containers as f64,
    );
    t.one(
        "pdcx_extents",
        "gauge",
        "Extents (written regions) in this server's index.",
        st.extents as f64,
    );

    // Data in and out.
    t.one(
        "pdcx_staged_bytes_total",
        "counter",
        "Bytes of writes staged (received over TCP or copied from shared memory).",
        server.metrics.staged.load(Ordering::Relaxed) as f64,
    );
    t.one(
        "pdcx_direct_write_bytes_total",
        "counter",
        "Bytes of writes a same-node client wrote into the log itself (one copy, no server CPU for the bytes).",
        server.metrics.direct_written.load(Ordering::Relaxed) as f64,
    );
    t.one(
        "pdcx_read_bytes_total",
        "counter",
        "Bytes of read replies served (owner reads and direct reads of held regions).",
        st.read_bytes as f64,
    );
    t.one(
        "pdcx_shm_bytes_total",
        "counter",
        "Bytes staged from or read into same-node clients' shared-memory arenas.",
        st.shm_bytes as f64,
    );

    // Cache.
    let c = server.engine.store().io();
    t.one(
        "pdcx_cache_bytes",
        "gauge",
        "Bytes held in the data cache.",
        st.cache_bytes as f64,
    );
    t.one(
        "pdcx_cache_capacity_bytes",
        "gauge",
        "The data cache's capacity (0: disabled).",
        st.cache_capacity as f64,
    );
    t.one(
        "pdcx_cache_hits_total",
        "counter",
        "Extent pieces reads found in the cache.",
        c.cache_hits.load(Ordering::Relaxed) as f64,
    );
    t.one(
        "pdcx_cache_misses_total",
        "counter",
        "Extent pieces reads had to fetch from the log or a tier.",
        c.cache_misses.load(Ordering::Relaxed) as f64,
    );

    // Log and metadata durability.
    t.one(
        "pdcx_log_bytes",
        "gauge",
        "Bytes in the segment log (all segments).",
        st.log_bytes as f64,
    );
    t.one(
        "pdcx_log_live_bytes",
        "gauge",
        "Bytes of the log some read still needs; the rest (pdcx_log_bytes minus this) is garbage compaction frees.",
        st.log_live_bytes as f64,
    );
    t.one(
        "pdcx_compaction_freed_bytes_total",
        "counter",
        "Log bytes compaction and retirement of garbage gave back to the file system.",
        st.compacted.freed_bytes as f64,
    );
    t.one(
        "pdcx_compaction_moved_bytes_total",
        "counter",
        "Live bytes compaction copied out of mostly-garbage log segments.",
        st.compacted.moved_bytes as f64,
    );
    t.one(
        "pdcx_compaction_dropped_writes_total",
        "counter",
        "Writes dropped because newer writes hide them or their object was deleted.",
        st.compacted.dropped_writes as f64,
    );
    t.one(
        "pdcx_meta_bytes",
        "gauge",
        "Bytes of the metadata shard on disk (database pages and WAL).",
        st.meta_bytes as f64,
    );
    t.one(
        "pdcx_compaction_forgotten_rows_total",
        "counter",
        "Rows of other servers' location tables forgotten because this server no longer needs them.",
        st.compacted.forgotten_rows as f64,
    );
    t.one(
        "pdcx_log_segments",
        "gauge",
        "Segment files in the log.",
        log_segments(server) as f64,
    );
    t.one(
        "pdcx_log_commits_total",
        "counter",
        "Commits of staged writes (any durability).",
        c.log_commits.load(Ordering::Relaxed) as f64,
    );
    t.one(
        "pdcx_log_syncs_total",
        "counter",
        "Log sync rounds run by commits at durability local (each fdatasyncs the segments written since the last round; the MANIFEST is written by checkpoints, not commits).",
        c.log_syncs.load(Ordering::Relaxed) as f64,
    );
    t.one(
        "pdcx_log_syncs_shared_total",
        "counter",
        "Commits at durability local that needed no fdatasync of their own: another commit's sync round covered their records (group commit).",
        c.log_syncs_shared.load(Ordering::Relaxed) as f64,
    );
    t.one(
        "pdcx_metadata_wal_fsyncs_total",
        "counter",
        "fdatasyncs of the metadata shard's write-ahead log (group commit: many transactions share one).",
        server.meta.wal_syncs() as f64,
    );

    // Recovery at start.
    let r = *server
        .metrics
        .recovery
        .read()
        .unwrap_or_else(|p| p.into_inner());
    t.one(
        "pdcx_recovery_segments",
        "gauge",
        "Log segments recovery found at this server's start.",
        r.segments as f64,
    );
    t.one(
        "pdcx_recovery_committed_bytes",
        "gauge",
        "Committed log bytes recovery kept at start.",
        r.committed_bytes as f64,
    );
    t.one(
        "pdcx_recovery_discarded_bytes",
        "gauge",
        "Uncommitted log bytes recovery discarded at start (never acknowledged at local durability).",
        r.discarded_bytes as f64,
    );
    t.one(
        "pdcx_recovery_removed_segments",
        "gauge",
        "Unlisted log segments recovery removed at start.",
        r.removed_segments as f64,
    );
    t.one(
        "pdcx_recovery_dropped_extents",
        "gauge",
        "Extents recovery dropped at start because their data was never synced.",
        r.dropped_extents as f64,
    );

    // Lookups and registration (the metadata traffic between servers).
    let counters: [(&str, &str, u64); 8] = [
        (
            "pdcx_lookups_total",
            "Object lookups answered as the owner.",
            st.lookups,
        ),
        (
            "pdcx_lookups_forwarded_total",
            "Of those, lookups other servers forwarded for their clients.",
            st.lookups_forwarded,
        ),
        (
            "pdcx_lookups_relayed_total",
            "Lookups this server forwarded to owners for its clients.",
            st.lookups_relayed,
        ),
        (
            "pdcx_lookups_coalesced_total",
            "Client lookups answered by joining another client's forwarded lookup.",
            st.lookups_coalesced,
        ),
        (
            "pdcx_registers_total",
            "Register requests answered as owner.",
            st.registers,
        ),
        (
            "pdcx_registered_regions_total",
            "Regions those register requests carried.",
            st.registered_regions,
        ),
        (
            "pdcx_registers_sent_total",
            "Register requests sent to owners as a holder.",
            st.registers_sent,
        ),
        (
            "pdcx_registers_unsynced_total",
            "Of the register requests answered as owner, those answered before their metadata WAL fsync (memory durability, within the reserved sequence block).",
            server.engine.counters.unsynced.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, v) in counters {
        t.one(name, "counter", help, v as f64);
    }
    t.one(
        "pdcx_unregistered_writes",
        "gauge",
        "Relaxed writes held here, durable and acknowledged, not yet registered with their owner.",
        st.unregistered as f64,
    );

    // Flusher and tiers (only with tiers configured).
    if let Some(tiering) = &server.engine.tiering {
        let fs = tiering.state();
        t.one(
            "pdcx_flush_pending_bytes",
            "gauge",
            "Committed bytes not yet placed on a tier (the flush queue).",
            st.flush_pending_bytes as f64,
        );
        t.one(
            "pdcx_flush_pending_extents",
            "gauge",
            "Committed extents not yet placed on a tier.",
            st.flush_pending_extents as f64,
        );
        let flush: [(&str, &str, u64); 6] = [
            (
                "pdcx_flushed_bytes_total",
                "Raw bytes the flusher copied to tiers.",
                fs.flushed_bytes,
            ),
            (
                "pdcx_flushed_extents_total",
                "Extents the flusher placed on tiers.",
                fs.flushed_extents,
            ),
            ("pdcx_flush_passes_total", "Flush passes run.", fs.passes),
            (
                "pdcx_retired_segments_total",
                "Log segments retired after their data was flushed.",
                fs.retired_segments,
            ),
            (
                "pdcx_retired_bytes_total",
                "Log bytes freed by retiring segments.",
                fs.retired_bytes,
            ),
            (
                "pdcx_moved_extents_total",
                "Extents moved between tiers (demotion and promotion).",
                fs.moved_extents,
            ),
        ];
        for (name, help, v) in flush {
            t.one(name, "counter", help, v as f64);
        }
        t.one(
            "pdcx_flush_failing",
            "gauge",
            "1 while the flusher's last attempt on some tier failed (the data stays in the log).",
            if fs.last_error.is_some() { 1.0 } else { 0.0 },
        );
        let tier_family =
            |t: &mut Text, name: &str, kind: &str, help: &str, f: &dyn Fn(usize) -> Option<f64>| {
                t.family(name, kind, help);
                for (i, ts) in st.tiers.iter().enumerate() {
                    if let Some(v) = f(i) {
                        t.sample(name, &[("tier", &ts.name), ("kind", &ts.kind)], v);
                    }
                }
            };
        tier_family(
            &mut t,
            "pdcx_tier_used_bytes",
            "gauge",
            "Bytes this server keeps on the tier.",
            &|i| Some(st.tiers[i].used as f64),
        );
        tier_family(
            &mut t,
            "pdcx_tier_capacity_bytes",
            "gauge",
            "The tier's configured capacity (absent when unbounded).",
            &|i| st.tiers[i].capacity.map(|c| c as f64),
        );
        tier_family(
            &mut t,
            "pdcx_tier_put_bytes_total",
            "counter",
            "Bytes written to the tier.",
            &|i| Some(st.tiers[i].put_bytes as f64),
        );
        tier_family(
            &mut t,
            "pdcx_tier_get_bytes_total",
            "counter",
            "Bytes read from the tier.",
            &|i| Some(st.tiers[i].get_bytes as f64),
        );
        tier_family(
            &mut t,
            "pdcx_tier_errors_total",
            "counter",
            "Failed writes to the tier (other than no space left).",
            &|i| {
                tiering
                    .counters
                    .get(i)
                    .map(|c| c.errors.load(Ordering::Relaxed) as f64)
            },
        );
        tier_family(
            &mut t,
            "pdcx_tier_put_bandwidth_bytes_per_second",
            "gauge",
            "Measured write bandwidth to the tier (0 until 1 MiB was written).",
            &|i| Some(st.tiers[i].put_bandwidth),
        );
    }
    t.0
}

/// Starts the exporter for `server` if an address is configured; logs where it listens.
pub(crate) fn start_exporter(server: &Arc<Server>, spec: &str) -> crate::Result<Exporter> {
    let rank = server.config.rank;
    let addr = rank_addr(spec, rank).map_err(pdcx_core::Error::invalid)?;
    let ex = Exporter::start(addr, Arc::downgrade(server))
        .map_err(|e| pdcx_core::Error::io(&format!("binding metrics address {addr}"), &e))?;
    tracing::info!(
        rank,
        addr = %ex.addr(),
        "metrics on http://{}/metrics",
        ex.addr()
    );
    Ok(ex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_addr_offsets_the_port_by_rank() {
        assert_eq!(
            rank_addr("127.0.0.1:9464", 0).unwrap(),
            "127.0.0.1:9464".parse().unwrap()
        );
        assert_eq!(
            rank_addr("127.0.0.1:9464", 3).unwrap(),
            "127.0.0.1:9467".parse().unwrap()
        );
        assert_eq!(rank_addr("127.0.0.1:0", 5).unwrap().port(), 0);
        assert!(rank_addr("127.0.0.1:65535", 1).is_err());
        assert!(rank_addr("nonsense", 0).is_err());
    }

    #[test]
    fn numbers_and_labels_in_the_text_format() {
        assert_eq!(number(1.0), "1");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
