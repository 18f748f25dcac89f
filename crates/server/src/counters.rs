//! Counters: every number a server counts that its stores do not keep themselves, in one
//! place that both `stats` (`pdcx top`) and the Prometheus exporter (`crate::metrics`) read.
//! A leaf: it depends on nothing else of the crate, so any module may bump a counter without
//! an import pointing back up.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Upper bounds (seconds) of the request latency histogram's buckets; `+Inf` is implied.
/// From 50 µs (a cached metadata call over loopback) to 10 s (a large fsync'd write).
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 10.0,
];

/// Counters the engine bumps on its read and commit paths (the cache and the log count
/// nothing themselves).
#[derive(Default, Debug)]
pub struct EngineCounters {
    /// Extent pieces a read found in the cache, and those it had to read from the log or a tier.
    pub cache_hits: AtomicU64,
    pub cache_misses: AtomicU64,
    /// Commits of staged writes (any durability), and the log sync rounds they ran: each
    /// fdatasyncs the segments written since the last round (one per commit at most; none
    /// when another commit's round covered it: `log_syncs_shared`).
    pub log_commits: AtomicU64,
    pub log_syncs: AtomicU64,
    pub log_syncs_shared: AtomicU64,
}

impl EngineCounters {
    pub fn cache_lookups(&self, hits: usize, misses: usize) {
        self.cache_hits.fetch_add(hits as u64, Ordering::Relaxed);
        self.cache_misses
            .fetch_add(misses as u64, Ordering::Relaxed);
    }
}

/// What the log's recovery found when this server started.
#[derive(Default, Debug, Clone, Copy)]
pub struct RecoveryStats {
    pub segments: u64,
    pub committed_bytes: u64,
    pub discarded_bytes: u64,
    pub removed_segments: u64,
    /// Extents dropped because their data never reached a synced log.
    pub dropped_extents: u64,
}

#[derive(Default)]
pub(crate) struct RequestStats {
    pub(crate) count: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) in_bytes: AtomicU64,
    pub(crate) out_bytes: AtomicU64,
    pub(crate) nanos: AtomicU64,
    /// Per-bucket (not cumulative) counts; the last slot is `+Inf`.
    pub(crate) buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
}

/// The name of a request's kind (its enum variant), taken from its `Debug` output without
/// formatting the rest: no table to keep in step with the protocol as requests are added.
#[derive(Clone, Copy)]
pub struct Kind {
    buf: [u8; 40],
    len: u8,
}

impl Default for Kind {
    /// Frames whose body did not decode.
    fn default() -> Self {
        let mut k = Kind {
            buf: [0; 40],
            len: 0,
        };
        k.push("Undecodable");
        k
    }
}

impl Kind {
    pub fn of<T: std::fmt::Debug>(req: &T) -> Kind {
        let mut k = Kind {
            buf: [0; 40],
            len: 0,
        };
        // The writer refuses the first character that cannot be part of the variant name,
        // which stops the formatter there.
        let _ = write!(k, "{req:?}");
        if k.len == 0 {
            k.push("Unknown");
        }
        k
    }

    /// The kind called `name` (a request's operation name).
    pub fn named(name: &str) -> Kind {
        let mut k = Kind {
            buf: [0; 40],
            len: 0,
        };
        k.push(name);
        k
    }

    fn push(&mut self, s: &str) {
        let _ = std::fmt::Write::write_str(self, s);
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len as usize]).unwrap_or("Unknown")
    }
}

impl std::fmt::Write for Kind {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        for b in s.bytes() {
            if !(b.is_ascii_alphanumeric() || b == b'_') || self.len as usize == self.buf.len() {
                return Err(std::fmt::Error);
            }
            self.buf[self.len as usize] = b;
            self.len += 1;
        }
        Ok(())
    }
}

/// A server's own metrics (one per server, so several servers in one process stay apart).
#[derive(Default)]
pub struct Metrics {
    pub(crate) requests: RwLock<HashMap<String, Arc<RequestStats>>>,
    /// TCP connections accepted (handshake or not).
    pub(crate) accepted: AtomicU64,
    /// Bytes of writes staged (over TCP or from shared memory).
    pub(crate) staged: AtomicU64,
    /// Bytes of writes whose payload a same-node client wrote into the log itself
    /// (`ReserveWrite`); also counted in `staged`.
    pub(crate) direct_written: AtomicU64,
    /// Bytes of object data value queries read, and skipped thanks to extent statistics.
    pub(crate) query_scanned: AtomicU64,
    pub(crate) query_skipped: AtomicU64,
    pub(crate) piece_plans: AtomicU64,
    pub(crate) recovery: RwLock<RecoveryStats>,
    pub(crate) scrapes: AtomicU64,
}

impl Metrics {
    /// Requests of `kind` (a protocol request name, e.g. `"SyncSeal"`) answered since start.
    pub fn requests_of(&self, kind: &str) -> u64 {
        self.requests
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(kind)
            .map_or(0, |s| s.count.load(Ordering::Relaxed))
    }

    fn kind_stats(&self, kind: &str) -> Arc<RequestStats> {
        if let Some(s) = self
            .requests
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(kind)
        {
            return s.clone();
        }
        self.requests
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(kind.to_string())
            .or_default()
            .clone()
    }

    /// Records one answered request: its kind, the payload bytes it carried in and out, how
    /// long it took (header read to reply written) and whether the reply was an error.
    pub fn request(&self, kind: &Kind, in_bytes: u64, out_bytes: u64, took: Duration, err: bool) {
        let s = self.kind_stats(kind.as_str());
        s.count.fetch_add(1, Ordering::Relaxed);
        if err {
            s.errors.fetch_add(1, Ordering::Relaxed);
        }
        s.in_bytes.fetch_add(in_bytes, Ordering::Relaxed);
        s.out_bytes.fetch_add(out_bytes, Ordering::Relaxed);
        s.nanos.fetch_add(
            took.as_nanos().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
        let secs = took.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(LATENCY_BUCKETS.len());
        s.buckets[i].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_recovery(&self, r: RecoveryStats) {
        *self.recovery.write().unwrap_or_else(|p| p.into_inner()) = r;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    #[allow(dead_code)]
    enum Req {
        Ping,
        Stage { items: Vec<u32> },
        Create(String),
    }

    #[test]
    fn kind_is_the_variant_name() {
        assert_eq!(Kind::of(&Req::Ping).as_str(), "Ping");
        assert_eq!(
            Kind::of(&Req::Stage {
                items: vec![1, 2, 3]
            })
            .as_str(),
            "Stage"
        );
        assert_eq!(Kind::of(&Req::Create("x".into())).as_str(), "Create");
        assert_eq!(Kind::default().as_str(), "Undecodable");
    }

    /// What the per-request hook costs (run: cargo test --release -p pdcx-server --lib
    /// request_hook_cost -- --ignored --nocapture).
    #[test]
    #[ignore]
    fn request_hook_cost() {
        let m = Metrics::default();
        let req = Req::Stage {
            items: (0..64).collect(),
        };
        let n = 2_000_000u32;
        let t = std::time::Instant::now();
        for _ in 0..n {
            let started = std::time::Instant::now();
            let k = Kind::of(std::hint::black_box(&req));
            m.request(&k, 4096, 0, started.elapsed(), false);
        }
        println!(
            "request hook: {:.0} ns per request",
            t.elapsed().as_nanos() as f64 / n as f64
        );
        let t = std::time::Instant::now();
        let mut len = 0usize;
        for _ in 0..n {
            len += Kind::of(std::hint::black_box(&req)).len as usize;
        }
        println!(
            "  of which naming the kind: {:.0} ns ({len} bytes named)",
            t.elapsed().as_nanos() as f64 / n as f64
        );
    }

    #[test]
    fn latency_histogram_buckets() {
        let m = Metrics::default();
        let k = Kind::of(&Req::Ping);
        m.request(&k, 10, 20, Duration::from_micros(30), false);
        m.request(&k, 0, 0, Duration::from_secs(20), true);
        let s = m.kind_stats("Ping");
        assert_eq!(s.count.load(Ordering::Relaxed), 2);
        assert_eq!(s.errors.load(Ordering::Relaxed), 1);
        assert_eq!(s.buckets[0].load(Ordering::Relaxed), 1);
        assert_eq!(s.buckets[LATENCY_BUCKETS.len()].load(Ordering::Relaxed), 1);
    }
}
