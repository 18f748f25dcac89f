//! Per-process counts of what the driver and the POSIX wrappers did, written at exit as one
//! JSON line appended to the file `PDCX_FITS_STATS` names (nothing when it is unset). The
//! Montage benchmark sums them per component: files opened, round trips to the servers,
//! bytes moved.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub static OPENS: AtomicU64 = AtomicU64::new(0);
pub static CREATES: AtomicU64 = AtomicU64::new(0);
pub static READ_FETCHES: AtomicU64 = AtomicU64::new(0);
pub static BYTES_READ: AtomicU64 = AtomicU64::new(0);
pub static BYTES_WRITTEN: AtomicU64 = AtomicU64::new(0);
pub static POSIX_CALLS: AtomicU64 = AtomicU64::new(0);

pub fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

/// The counts as a JSON object.
pub fn json() -> String {
    let prog = std::env::args_os()
        .next()
        .map(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .unwrap_or_default()
        .replace(['"', '\\'], "_");
    format!(
        "{{\"prog\":\"{prog}\",\"pid\":{},\"opens\":{},\"creates\":{},\"read_fetches\":{},\"bytes_read\":{},\"bytes_written\":{},\"posix_calls\":{},\"round_trips\":{}}}",
        std::process::id(),
        OPENS.load(Relaxed),
        CREATES.load(Relaxed),
        READ_FETCHES.load(Relaxed),
        BYTES_READ.load(Relaxed),
        BYTES_WRITTEN.load(Relaxed),
        POSIX_CALLS.load(Relaxed),
        pdcx_client::transport_requests_sent(),
    )
}

/// Appends the counts to the file `PDCX_FITS_STATS` names, at exit (see `at_exit` in lib.rs).
pub(crate) fn write_out() {
    let Some(path) = pdcx_core::config::FITS_STATS.path() else {
        return;
    };
    if OPENS.load(Relaxed) + CREATES.load(Relaxed) + POSIX_CALLS.load(Relaxed) == 0 {
        return;
    }
    // One write of one line: concurrent processes appending do not interleave.
    let line = format!("{}\n", json());
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(line.as_bytes());
    }
}
