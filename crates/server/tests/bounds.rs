//! Memory and time a misbehaving client can make a server spend grow only with what it sends:
//! the metrics endpoint serves scrapes while slow clients hold connections, drops a head that
//! never ends and refuses an oversized one; a stage that announces far more payload than it
//! sends costs no memory up front and is dropped after the frame timeout.

use pdcx_client::conn::Conn;
use pdcx_client::Client;
use pdcx_core::protocol::{self, write, Durability, FrameKind, Request, Response, StageItem};
use pdcx_core::Region;
use pdcx_server::metrics;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};
mod common;
use common::{byte_object as object, deployment_with, raw};

/// The tests that measure this process's resident memory run one at a time (the others here
/// allocate little).
static RSS: Mutex<()> = Mutex::new(());

/// This process's resident memory (the servers under test run in it), in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/self/status");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in kB");
    kb << 10
}

/// What a test may let resident memory grow by while a peer claims gigabytes.
const RSS_SLACK: u64 = 64 << 20;

/// A server with its metrics endpoint on a free loopback port.
fn with_metrics(root: &std::path::Path) -> (pdcx_server::ServerHandle, SocketAddr) {
    let h = deployment_with(root, |c| c.metrics = Some("127.0.0.1:0".into()));
    let addr = h.metrics_addr().expect("metrics enabled");
    (h, addr)
}

/// Sends `request`, reads the response to its end; the status line and how long it took.
fn http(addr: SocketAddr, request: &[u8]) -> (String, String, Duration) {
    let t0 = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // The server may answer (and close) before taking all of an oversized request.
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.lines().next().unwrap_or("").to_string();
    (status, text, t0.elapsed())
}

/// Reads until the peer closes; how long that took (a response in between is read and dropped).
fn time_to_close(s: &mut TcpStream, limit: Duration) -> (Duration, Vec<u8>) {
    let t0 = Instant::now();
    s.set_read_timeout(Some(limit)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (t0.elapsed(), got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                ) =>
            {
                return (t0.elapsed(), got)
            }
            Err(e) => panic!("still open after {:?}: {e}", t0.elapsed()),
        }
    }
}

#[test]
fn a_slow_metrics_client_does_not_block_scrapes() {
    let dir = tempfile::tempdir().unwrap();
    let (h, addr) = with_metrics(dir.path());
    // A client that drips its head one byte every 300 ms, for longer than a scrape takes.
    let mut slow = TcpStream::connect(addr).unwrap();
    let drip = std::thread::spawn(move || {
        for b in b"GET /metrics HTTP/1.1\r\n" {
            if slow.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        slow
    });
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..3 {
        let (status, body, took) = http(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
        assert!(body.contains("pdcx_metrics_scrapes_total"), "{body}");
        assert!(took < Duration::from_secs(1), "a scrape took {took:?}");
    }
    // The dripping client is still being read from (it has not been served or dropped yet):
    // the scrapes above ran beside it.
    assert!(!drip.is_finished());
    drop(drip.join().unwrap());
    h.shutdown().unwrap();
}

#[test]
fn metrics_heads_that_never_end_are_dropped_and_extra_connections_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (h, addr) = with_metrics(dir.path());
    // Fill every slot with a connection that starts a head and never finishes it.
    let t0 = Instant::now();
    let mut held: Vec<TcpStream> = (0..metrics::MAX_CONNECTIONS)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /metr").unwrap();
            s
        })
        .collect();
    // The accepting thread admits them in order; give it a moment to take all of them.
    std::thread::sleep(Duration::from_millis(300));
    // One more is refused at once, not queued behind them.
    let (status, body, took) = http(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 503 Service Unavailable", "{body}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    // Each held connection is answered 408 and closed by the head deadline.
    for s in &mut held {
        let (_, got) = time_to_close(s, Duration::from_secs(15));
        let got = String::from_utf8_lossy(&got).to_string();
        assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    }
    let closed = t0.elapsed();
    assert!(
        closed >= metrics::HEAD_DEADLINE - Duration::from_millis(200)
            && closed < metrics::HEAD_DEADLINE + Duration::from_secs(3),
        "closed after {closed:?}"
    );
    // The slots are free again.
    let (status, body, _) = http(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    h.shutdown().unwrap();
}

#[test]
fn oversized_and_malformed_metrics_heads_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (h, addr) = with_metrics(dir.path());
    // A head over the limit that never ends: refused as soon as the limit is passed.
    let mut big = b"GET /metrics HTTP/1.1\r\n".to_vec();
    while big.len() <= metrics::MAX_HEAD {
        big.extend_from_slice(b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    let (status, body, took) = http(addr, &big);
    assert_eq!(
        status, "HTTP/1.1 431 Request Header Fields Too Large",
        "{body}"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    // Just under the limit, ended: served.
    let mut ok = b"GET /metrics HTTP/1.1\r\n".to_vec();
    while ok.len() + 60 < metrics::MAX_HEAD {
        ok.extend_from_slice(b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    ok.extend_from_slice(b"\r\n");
    let (status, body, _) = http(addr, &ok);
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    // Not HTTP at all.
    let (status, body, _) = http(addr, b"\x16\x03\x01 hello\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 400 Bad Request", "{body}");
    h.shutdown().unwrap();
}

#[test]
fn the_metrics_head_parser() {
    use metrics::{parse_head, Head};
    let req = |m: &str, p: &str| Head::Request {
        method: m.into(),
        path: p.into(),
    };
    assert_eq!(parse_head(b"GET /metrics HTTP/1.1\r\n"), Head::Incomplete);
    assert_eq!(
        parse_head(b"GET /metrics?x=1 HTTP/1.0\r\nHost: a\r\n\r\n"),
        req("GET", "/metrics")
    );
    assert_eq!(parse_head(b"HEAD / HTTP/1.1\n\n"), req("HEAD", "/"));
    assert_eq!(parse_head(b"GET /metrics\r\n\r\n"), Head::Malformed);
    assert_eq!(parse_head(b"GET / HTTP/2\r\n\r\n"), Head::Malformed);
    assert_eq!(parse_head(b"\xff\xfe / HTTP/1.1\r\n\r\n"), Head::Malformed);
    assert_eq!(
        parse_head(&vec![b'a'; metrics::MAX_HEAD + 1]),
        Head::TooLarge
    );
    let mut late = vec![b'a'; metrics::MAX_HEAD];
    late.extend_from_slice(b"\r\n\r\n");
    assert_eq!(parse_head(&late), Head::TooLarge);
}

/// A stage of one item of `n` bytes covering all of 1-D byte object `id`.
fn stage_body(id: pdcx_core::ObjectId, n: u64, commit: Option<protocol::CommitOpts>) -> Vec<u8> {
    protocol::encode_body(&Request::from(write::Stage {
        items: vec![StageItem {
            txn: 1,
            id,
            region: Region::whole(&[n]),
            len: n,
        }],
        shm: None,
        commit,
    }))
    .unwrap()
}

#[test]
fn a_stage_announcing_4_gib_and_sending_ten_bytes_costs_nothing_and_is_dropped() {
    let _one = RSS.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let h = deployment_with(dir.path(), |c| {
        c.limits.frame_timeout = Some(Duration::from_secs(1))
    });
    let client = Client::connect(Some(dir.path())).unwrap();
    let n: u64 = 4 << 30; // the default payload limit, so the header itself is accepted
    let obj = object(&client, "huge", n);
    let small = object(&client, "small", 4096);
    let before = rss();
    let (r, mut w) = raw(dir.path());
    // A well-formed stage whose item accounts for the whole announced payload.
    let body = stage_body(obj.id, n, None);
    let head = protocol::Header {
        kind: FrameKind::Request,
        flags: 0,
        body_len: body.len() as u32,
        request_id: 1,
        payload_len: n,
    };
    w.write_all(&head.encode()).unwrap();
    w.write_all(&body).unwrap();
    w.write_all(&[5u8; 10]).unwrap();
    // Dropped by the frame timeout, not kept waiting for the rest; resident memory is
    // watched all the while.
    let mut stream = r.into_inner();
    let closed = std::thread::spawn(move || time_to_close(&mut stream, Duration::from_secs(20)).0);
    let mut peak = 0u64;
    while !closed.is_finished() {
        peak = peak.max(rss().saturating_sub(before));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        peak < RSS_SLACK,
        "resident memory grew by {} MiB for 10 bytes received",
        peak >> 20
    );
    let took = closed.join().expect("the connection closes");
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(10),
        "{took:?}"
    );
    // The server goes on serving.
    client
        .write(
            small.id,
            &Region::whole(&[4096]),
            &[1u8; 4096],
            Durability::Local,
        )
        .unwrap();
    drop(w);
    h.shutdown().unwrap();
}

#[test]
fn an_honest_large_stage_still_arrives_whole() {
    let dir = tempfile::tempdir().unwrap();
    let h = deployment_with(dir.path(), |_| {});
    let client = Client::connect(Some(dir.path())).unwrap();
    // Several doublings past the first step of the payload buffer.
    let n: u64 = 9 * protocol::PAYLOAD_STEP as u64 + 17;
    let obj = object(&client, "big", n);
    let data: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
    let (mut r, mut w) = raw(dir.path());
    let body = stage_body(obj.id, n, Some(protocol::CommitOpts::at(Durability::Local)));
    protocol::write_frame(&mut w, FrameKind::Request, 1, &body, &[&data]).unwrap();
    let (_, reply) = protocol::read_frame_head(&mut r, 0).unwrap();
    let reply = protocol::decode_body::<Response>(&reply).unwrap();
    assert!(
        matches!(reply, Response::Write(protocol::WriteResponse::Staged(1))),
        "{reply:?}"
    );
    let mut got = vec![0u8; n as usize];
    client
        .read_into(obj.id, &Region::whole(&[n]), &mut got)
        .unwrap();
    assert!(got == data, "the staged bytes read back differently");
    h.shutdown().unwrap();
}

/// A client's connection to a fake server that holds the secret (a compromised node, say):
/// it completes the handshake, then answers the first request with a reply that announces
/// `announced` payload bytes, sends ten and closes.
fn lying_reply(root: &std::path::Path, announced: u64) -> pdcx_core::Result<(Response, Vec<u8>)> {
    let (_, secret) = common::cluster(root);
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_addr = fake.local_addr().unwrap().to_string();
    let key = secret.clone();
    let t = std::thread::spawn(move || {
        let (mut client, _) = fake.accept().unwrap();
        let nonce = [3u8; protocol::NONCE_LEN];
        protocol::write_frame(&mut client, FrameKind::Challenge, 0, &nonce, &[]).unwrap();
        let (_, body) = protocol::read_frame_head(&mut client, 0).unwrap();
        let hello: protocol::Hello = protocol::decode_body(&body).unwrap();
        let info = protocol::ServerInfo { rank: 0, size: 1 };
        let welcome = protocol::Welcome::new(&key, &hello, info, hello.wire);
        let body = protocol::encode_body(&Ok::<_, pdcx_core::Error>(welcome)).unwrap();
        protocol::write_frame(&mut client, FrameKind::Welcome, 0, &body, &[]).unwrap();
        // The request, then the lie.
        let (h, _) = protocol::read_frame_head(&mut client, 1 << 20).unwrap();
        let body = protocol::encode_body(&Response::Write(protocol::WriteResponse::Done)).unwrap();
        let head = protocol::Header {
            kind: FrameKind::Response,
            flags: 0,
            body_len: body.len() as u32,
            request_id: h.request_id,
            payload_len: announced,
        };
        let _ = client.write_all(&head.encode());
        let _ = client.write_all(&body);
        let _ = client.write_all(&[9u8; 10]);
        std::thread::sleep(Duration::from_millis(300));
        let _ = client.shutdown(std::net::Shutdown::Both);
    });
    let mut conn = Conn::connect(&fake_addr, &secret).unwrap();
    let req = Request::from(write::SyncLog {});
    let got = conn.call(&req, &[]);
    t.join().unwrap();
    got
}

#[test]
fn a_reply_announcing_more_than_it_sends_costs_the_client_nothing() {
    let _one = RSS.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let h = deployment_with(dir.path(), |_| {});
    for announced in [4u64 << 30, u64::MAX] {
        let before = rss();
        let err = lying_reply(dir.path(), announced).expect_err("a short reply is an error");
        let grown = rss().saturating_sub(before);
        assert!(
            err.message.contains("reading reply payload"),
            "{}",
            err.message
        );
        assert!(
            grown < RSS_SLACK,
            "resident memory grew by {} MiB for a reply of 10 bytes announcing {announced}",
            grown >> 20
        );
    }
    h.shutdown().unwrap();
}

/// A file holding `raw` deflated (as HDF5's deflate filter stores a chunk); its path and size.
fn deflated(dir: &std::path::Path, name: &str, raw: &[u8]) -> (String, u64) {
    use flate2::write::ZlibEncoder;
    let mut z = ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(raw).unwrap();
    let stored = z.finish().unwrap();
    let path = dir.join(name);
    std::fs::write(&path, &stored).unwrap();
    (path.to_str().unwrap().to_string(), stored.len() as u64)
}

fn ref_item(path: &str, size: u64, n: u64, chunk: u64) -> protocol::RefItem {
    protocol::RefItem {
        region: Region::whole(&[n]),
        path: path.to_string(),
        offset: 0,
        size,
        chunk: vec![chunk],
        filters: vec![protocol::RefFilter::Deflate],
    }
}

#[test]
fn an_import_by_reference_cannot_make_a_read_allocate_what_its_chunk_claims() {
    let _one = RSS.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let h = deployment_with(dir.path(), |_| {});
    let client = Client::connect(Some(dir.path())).unwrap();
    let n = 4096u64;
    let before = rss();
    // A chunk of 2^40 one-byte elements behind a few bytes of deflate: refused at import,
    // before anything is recorded or allocated.
    let (small, small_len) = deflated(dir.path(), "small.z", &[3u8; 4096]);
    let obj = object(&client, "bomb", n);
    let err = client
        .import_refs(obj.id, vec![ref_item(&small, small_len, n, 1 << 40)])
        .expect_err("a terabyte chunk is refused");
    assert_eq!(err.kind, pdcx_core::ErrorKind::InvalidArgument, "{err}");
    assert!(
        err.message.contains("1099511627776 bytes decoded")
            && err
                .message
                .contains(&pdcx_server::datastore::MAX_REF_CHUNK_BYTES.to_string()),
        "{}",
        err.message
    );
    // Just past the limit is refused too, and so is the largest shape there is.
    let past = pdcx_server::datastore::MAX_REF_CHUNK_BYTES + 1;
    assert!(client
        .import_refs(obj.id, vec![ref_item(&small, small_len, n, past)])
        .is_err());
    let err = client
        .import_refs(
            obj.id,
            vec![protocol::RefItem {
                region: Region::whole(&[n]),
                chunk: vec![u64::MAX],
                ..ref_item(&small, small_len, n, 0)
            }],
        )
        .expect_err("the largest chunk is refused");
    assert!(err.message.contains("at most"), "{}", err.message);
    // Nothing was recorded: the object reads as its fill.
    let mut got = vec![7u8; n as usize];
    client
        .read_into(obj.id, &Region::whole(&[n]), &mut got)
        .unwrap();
    assert!(got.iter().all(|&b| b == 0));
    // A chunk within the limit whose stream inflates to far more than its shape (64 MiB of
    // zeros for a 4 KiB chunk): the read stops one byte past the shape and fails clearly.
    let (bomb, bomb_len) = deflated(dir.path(), "bomb.z", &vec![0u8; 64 << 20]);
    let obj2 = object(&client, "bomb2", n);
    client
        .import_refs(obj2.id, vec![ref_item(&bomb, bomb_len, n, n)])
        .unwrap();
    let err = client
        .read_into(obj2.id, &Region::whole(&[n]), &mut got)
        .expect_err("an over-long chunk is an error, not data");
    assert!(err.message.contains("decoded to"), "{}", err.message);
    // An honest chunk reads back.
    let obj3 = object(&client, "honest", n);
    client
        .import_refs(obj3.id, vec![ref_item(&small, small_len, n, n)])
        .unwrap();
    client
        .read_into(obj3.id, &Region::whole(&[n]), &mut got)
        .unwrap();
    assert!(got.iter().all(|&b| b == 3));
    let grown = rss().saturating_sub(before);
    assert!(
        grown < RSS_SLACK,
        "resident memory grew by {} MiB",
        grown >> 20
    );
    h.shutdown().unwrap();
}
