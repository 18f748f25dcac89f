//! Hostile connections: each thread connects, takes its challenge and then drips one byte
//! every 500 ms without ever completing the handshake; when the server closes it (its
//! handshake deadline, or room made for a newer connection), it connects again at once. They
//! run for the whole soak beside the honest clients, whose connect times and errors show
//! whether the hostile ones were held off.
//!
//! Sources: against a loopback server, thread i connects from 127.0.0.(1 + i % sources), so
//! one share of the flood comes from 127.0.0.1, the honest clients' own address (the server
//! cannot tell those apart by source), and the rest from other addresses, each its own source.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
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

/// The local address hostile thread `i` connects from (None: the system's choice).
pub(crate) fn source_of(i: usize, sources: usize, server: SocketAddr) -> Option<IpAddr> {
    if sources <= 1 || !server.ip().is_loopback() || !server.is_ipv4() {
        return None;
    }
    Some(IpAddr::V4(Ipv4Addr::new(
        127,
        0,
        0,
        1 + (i % sources) as u8,
    )))
}

/// Starts `n` hostile threads against `addrs` (round robin) from `sources` loopback
/// addresses until `stop`.
pub(crate) fn start(
    n: usize,
    sources: usize,
    addrs: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
) -> (Arc<Hostile>, Vec<std::thread::JoinHandle<()>>) {
    let counts = Arc::new(Hostile::default());
    let handles = (0..n)
        .map(|i| {
            let addr = addrs[i % addrs.len()];
            // Spread each server's share over the sources too.
            let from = source_of(i / addrs.len(), sources, addr);
            let (counts, stop) = (counts.clone(), stop.clone());
            std::thread::Builder::new()
                .name(format!("hostile-{i}"))
                .stack_size(64 << 10)
                .spawn(move || drip(addr, from, &counts, &stop))
                .expect("spawning a hostile thread")
        })
        .collect();
    (counts, handles)
}

/// A TCP connection to `to` from local address `from` (any port).
fn connect_from(to: SocketAddr, from: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let Some(from) = from else {
        return TcpStream::connect_timeout(&to, Duration::from_secs(5));
    };
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.bind(&SocketAddr::new(from, 0).into())?;
    s.connect_timeout(&to.into(), Duration::from_secs(5))?;
    Ok(s.into())
}

fn drip(addr: SocketAddr, from: Option<IpAddr>, counts: &Hostile, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = connect_from(addr, from) else {
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
