//! A reconnecting flood of unauthenticated connections against a small handshake limit, from
//! the honest clients' own address (the server cannot tell them apart by source): every honest
//! client still gets in, through the client library, within a bound.

use pdcx_server::{Server, ServerConfig};
use pdcx_transport::{ClusterFile, Conn};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connects, reads the challenge, drips a byte now and then, and reconnects the moment the
/// server closes it, until `stop`.
fn flood(addr: String, stop: Arc<AtomicBool>, opened: Arc<AtomicU64>) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect(&addr) else {
            continue;
        };
        opened.fetch_add(1, Ordering::Relaxed);
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut buf = [0u8; 1024];
        while !stop.load(Ordering::Relaxed) {
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
    }
}

#[test]
fn honest_clients_get_in_through_a_reconnecting_flood_from_their_own_address() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ServerConfig::new(dir.path(), 0, 1);
    // 8 places (2 per source while others want in), 300 ms of grace for each.
    cfg.limits.max_handshakes = 8;
    cfg.limits.handshake_timeout = Duration::from_secs(3);
    let h = Server::start(cfg).unwrap();
    h.server.publish_rank_file().unwrap();
    pdcx_server::launch::assemble_cluster(dir.path(), 1, Duration::from_secs(30)).unwrap();
    let secret = ClusterFile::load(dir.path())
        .unwrap()
        .secret_bytes()
        .unwrap();
    let addr = h.addr().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicU64::new(0));
    // Three times as many flooding connections as places.
    let floods: Vec<_> = (0..24)
        .map(|_| {
            let (a, s, o) = (addr.clone(), stop.clone(), opened.clone());
            std::thread::spawn(move || flood(a, s, o))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    let honest: Vec<_> = (0..4)
        .map(|_| {
            let (a, s) = (addr.clone(), secret.clone());
            std::thread::spawn(move || {
                let mut slowest = Duration::ZERO;
                for _ in 0..5 {
                    let t = Instant::now();
                    let c = Conn::connect(&a, &s);
                    assert!(c.is_ok(), "an honest connect failed: {:?}", c.err());
                    slowest = slowest.max(t.elapsed());
                }
                slowest
            })
        })
        .collect();
    let slowest = honest.into_iter().map(|t| t.join().unwrap()).max().unwrap();
    let took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    for f in floods {
        f.join().unwrap();
    }
    // The flood kept cycling: it was held off, not absent.
    let n = opened.load(Ordering::Relaxed);
    assert!(n > 24, "the flood opened only {n} connections");
    // 20 honest connects; each waits at most for the flood's connections queued ahead of it.
    assert!(
        slowest < Duration::from_secs(8),
        "slowest connect {slowest:?}"
    );
    assert!(took < Duration::from_secs(30), "{took:?}");
    h.shutdown().unwrap();
}
