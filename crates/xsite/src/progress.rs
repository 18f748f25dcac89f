//! Progress lines of a transfer on stderr: bytes moved, share, rate, at most every 0.5 s.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub(crate) struct Progress {
    label: String,
    total: u64,
    pub(crate) done: AtomicU64,
    start: Instant,
    last: Mutex<Instant>,
    on: bool,
}

impl Progress {
    pub(crate) fn new(label: String, total: u64, on: bool) -> Progress {
        let now = Instant::now();
        Progress {
            label,
            total,
            done: AtomicU64::new(0),
            start: now,
            last: Mutex::new(now),
            on,
        }
    }

    pub(crate) fn add(&self, n: u64) {
        let done = self.done.fetch_add(n, Ordering::Relaxed) + n;
        if !self.on {
            return;
        }
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.elapsed() >= Duration::from_millis(500) || done == self.total {
            *last = Instant::now();
            self.print(done);
        }
    }

    fn print(&self, done: u64) {
        let secs = self.start.elapsed().as_secs_f64().max(1e-6);
        eprintln!(
            "{}: {:.1} / {:.1} MiB ({:.0}%), {:.1} MB/s",
            self.label,
            done as f64 / 1048576.0,
            self.total as f64 / 1048576.0,
            if self.total == 0 {
                100.0
            } else {
                100.0 * done as f64 / self.total as f64
            },
            done as f64 / secs / 1e6
        );
    }
}
