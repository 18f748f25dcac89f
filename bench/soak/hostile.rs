//! Hostile connections: each thread connects, takes its challenge and then drips one byte
//! every 500 ms without ever completing the handshake; when the server closes it (its
//! handshake deadline, or room made for a newer connection), it connects again at once. They
//! run for the whole soak beside the honest clients, whose connect times and errors show
//! whether the hostile ones were held off.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Counts of the hostile threads.
#[derive(Default)]
pub(crate) struct Hostile {
    /// Connections opened (each one the server had to accept and then close).
    pub opened: AtomicU64,
    /// Connections the server closed.
    pub closed: AtomicU64,
}

/// Starts `n` hostile threads against `addrs` (round robin) until `stop`.
pub(crate) fn start(
    n: usize,
    addrs: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
) -> (Arc<Hostile>, Vec<std::thread::JoinHandle<()>>) {
    let counts = Arc::new(Hostile::default());
    let handles = (0..n)
        .map(|i| {
            let addr = addrs[i % addrs.len()];
            let (counts, stop) = (counts.clone(), stop.clone());
            std::thread::Builder::new()
                .name(format!("hostile-{i}"))
                .stack_size(64 << 10)
                .spawn(move || drip(addr, &counts, &stop))
                .expect("spawning a hostile thread")
        })
        .collect();
    (counts, handles)
}

fn drip(addr: SocketAddr, counts: &Hostile, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        counts.opened.fetch_add(1, Ordering::Relaxed);
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 4096];
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
            if s.write_all(b"P").is_err() {
                break;
            }
        }
        counts.closed.fetch_add(1, Ordering::Relaxed);
    }
}
