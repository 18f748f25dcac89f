//! Each limit a server enforces (limits.rs, docs/ARCHITECTURE.md *Limits*) is hit here, and
//! each ends in a clear error or a closed connection within seconds: never a hang, a crash, or
//! a stall of the other clients.

use pdcx_client::conn::Conn;
use pdcx_client::Client;
use pdcx_core::protocol::{
    self, read, write, CommitOpts, Committed, Durability, FrameKind, ReadItem, ReadOpts, Request,
    Response, StageItem, WriteResponse,
};
use pdcx_core::{ErrorKind, Region};
use pdcx_server::limits::Limits;
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
mod common;
use common::{byte_object as object, cluster as secret, deployment_with, raw};

/// Reads until the server closes the connection; how long that took. Replies in between are
/// skipped (a closed stream is what the test waits for).
fn time_to_close(r: &mut BufReader<TcpStream>, limit: Duration) -> Duration {
    let t0 = Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        assert!(t0.elapsed() < limit, "still open after {limit:?}");
        match r.read(&mut buf) {
            Ok(0) => return t0.elapsed(),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                ) =>
            {
                return t0.elapsed()
            }
            Err(e) => panic!("read: {e}"),
        }
    }
}

fn connections(c: &Client) -> u64 {
    c.stats(0).unwrap().connections
}

fn wait_connections(c: &Client, want: u64, within: Duration) {
    let t0 = Instant::now();
    while connections(c) != want {
        assert!(
            t0.elapsed() < within,
            "server still counts {} connections, want {want}",
            connections(c)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn connections_beyond_the_limit_are_refused_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let h = deployment_with(dir.path(), |c| c.limits.max_connections = 2);
    let (addr, secret) = secret(dir.path());
    let a = Conn::connect(&addr, &secret).unwrap();
    let b = Conn::connect(&addr, &secret).unwrap();
    let t0 = Instant::now();
    let err = Conn::connect(&addr, &secret)
        .err()
        .expect("a third connection is refused");
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(err.kind, ErrorKind::Unavailable);
    assert!(
        err.message.contains("at its limit of 2 connections")
            && err.message.contains("PDCX_MAX_CONNECTIONS"),
        "{}",
        err.message
    );
    // A freed slot serves the next client.
    drop(a);
    let t0 = Instant::now();
    let c = loop {
        match Conn::connect(&addr, &secret) {
            Ok(c) => break c,
            Err(_) if t0.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("slot not freed: {e}"),
        }
    };
    drop((b, c));
    h.shutdown().unwrap();
}

#[test]
fn frames_over_the_size_limits_get_an_error_and_the_connection_closes() {
    let dir = tempfile::tempdir().unwrap();
    let h = deployment_with(dir.path(), |c| c.max_payload = 1 << 20);
    // Payload over max_payload.
    let (mut r, mut w) = raw(dir.path());
    let head = protocol::Header {
        kind: FrameKind::Request,
        flags: 0,
        body_len: 0,
        request_id: 7,
        payload_len: 2 << 20,
    };
    w.write_all(&head.encode()).unwrap();
    let (h1, body) = protocol::read_frame_head(&mut r, 0).unwrap();
    assert_eq!(h1.kind, FrameKind::Response);
    match protocol::decode_body::<Response>(&body).unwrap() {
        Response::Error(e) => assert!(
            e.message.contains("exceeds this peer's limit of 1048576"),
            "{}",
            e.message
        ),
        other => panic!("{other:?}"),
    }
    time_to_close(&mut r, Duration::from_secs(5));
    // Body over MAX_BODY.
    let (mut r, mut w) = raw(dir.path());
    let head = protocol::Header {
        kind: FrameKind::Request,
        flags: 0,
        body_len: protocol::MAX_BODY + 1,
        request_id: 8,
        payload_len: 0,
    };
    w.write_all(&head.encode()).unwrap();
    let (_, body) = protocol::read_frame_head(&mut r, 0).unwrap();
    match protocol::decode_body::<Response>(&body).unwrap() {
        Response::Error(e) => assert!(e.message.contains("exceeds"), "{}", e.message),
        other => panic!("{other:?}"),
    }
    time_to_close(&mut r, Duration::from_secs(5));
    h.shutdown().unwrap();
}

#[test]
fn a_client_that_stops_reading_is_dropped_and_does_not_stall_others() {
    let dir = tempfile::tempdir().unwrap();
    let h = deployment_with(dir.path(), |c| {
        c.limits.write_timeout = Some(Duration::from_secs(1))
    });
    let client = Client::connect(Some(dir.path())).unwrap();
    let n = 8u64 << 20;
    let obj = object(&client, "big", n);
    let (r, mut w) = raw(dir.path());
    let req = protocol::encode_body(&Request::from(read::Read {
        items: vec![ReadItem {
            id: obj.id,
            region: Region::whole(&[n]),
        }],
        opts: ReadOpts::default(),
    }))
    .unwrap();
    // 32 replies of 8 MiB: far more than the socket buffers hold; this client reads none.
    for i in 0..32 {
        protocol::write_frame(&mut w, FrameKind::Request, i + 1, &req, &[]).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    // Others are served meanwhile, promptly.
    let small = object(&client, "small", 4096);
    for _ in 0..20 {
        let t0 = Instant::now();
        client
            .write(
                small.id,
                &Region::whole(&[4096]),
                &[1u8; 4096],
                Durability::Memory,
            )
            .unwrap();
        assert!(
            t0.elapsed() < Duration::from_millis(500),
            "{:?}",
            t0.elapsed()
        );
    }
    // The stalled connection is closed once its reply made no progress for 1 s.
    wait_connections(&client, 1, Duration::from_secs(10));
    drop(r);
    h.shutdown().unwrap();
}

#[test]
fn a_request_that_stops_half_way_is_dropped_after_the_frame_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let h = deployment_with(dir.path(), |c| {
        c.limits.frame_timeout = Some(Duration::from_secs(1))
    });
    let client = Client::connect(Some(dir.path())).unwrap();
    let obj = object(&client, "o", 1 << 20);
    let (mut r, mut w) = raw(dir.path());
    let body = protocol::encode_body(&Request::from(write::Stage {
        items: vec![StageItem {
            txn: 1,
            id: obj.id,
            region: Region::whole(&[1 << 20]),
            len: 1 << 20,
        }],
        shm: None,
        commit: None,
    }))
    .unwrap();
    let head = protocol::Header {
        kind: FrameKind::Request,
        flags: 0,
        body_len: body.len() as u32,
        request_id: 1,
        payload_len: 1 << 20,
    };
    w.write_all(&head.encode()).unwrap();
    w.write_all(&body).unwrap();
    w.write_all(&vec![0u8; 1 << 19]).unwrap(); // half the payload, then nothing
    let took = time_to_close(&mut r, Duration::from_secs(10));
    assert!(took >= Duration::from_millis(800), "{took:?}");
    // A header that stops half way is dropped too.
    let (mut r, mut w) = raw(dir.path());
    w.write_all(&head.encode()[..10]).unwrap();
    time_to_close(&mut r, Duration::from_secs(10));
    wait_connections(&client, 1, Duration::from_secs(5));
    // Nothing of the half-sent write became visible.
    let mut got = vec![7u8; 1 << 20];
    client
        .read_into(obj.id, &Region::whole(&[1 << 20]), &mut got)
        .unwrap();
    assert!(got.iter().all(|&b| b == 0));
    h.shutdown().unwrap();
}

#[test]
fn idle_connections_close_and_clients_reconnect_but_staged_writes_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let h = deployment_with(dir.path(), |c| {
        c.limits.idle_timeout = Some(Duration::from_secs(1))
    });
    let client = Client::connect(Some(dir.path())).unwrap();
    let obj = object(&client, "o", 4096);
    // A raw idle connection is closed after about a second.
    let (mut r, _w) = raw(dir.path());
    let took = time_to_close(&mut r, Duration::from_secs(10));
    assert!(took >= Duration::from_millis(800), "{took:?}");
    // The client's pooled connection went idle too; its next call reconnects.
    std::thread::sleep(Duration::from_millis(1500));
    client
        .write(
            obj.id,
            &Region::whole(&[4096]),
            &[3u8; 4096],
            Durability::Local,
        )
        .unwrap();
    // A connection holding a staged, uncommitted write is not idle: the commit still works
    // after more than the idle timeout.
    let (mut r, mut w) = raw(dir.path());
    let stage = protocol::encode_body(&Request::from(write::Stage {
        items: vec![StageItem {
            txn: 42,
            id: obj.id,
            region: Region::whole(&[4096]),
            len: 4096,
        }],
        shm: None,
        commit: None,
    }))
    .unwrap();
    protocol::write_frame(&mut w, FrameKind::Request, 1, &stage, &[&[9u8; 4096]]).unwrap();
    let (_, body) = protocol::read_frame_head(&mut r, 0).unwrap();
    assert!(matches!(
        protocol::decode_body::<Response>(&body).unwrap(),
        Response::Write(WriteResponse::Staged(1))
    ));
    std::thread::sleep(Duration::from_millis(2500));
    let commit = protocol::encode_body(&Request::from(write::Commit {
        txns: vec![42],
        opts: CommitOpts::at(Durability::Local),
    }))
    .unwrap();
    protocol::write_frame(&mut w, FrameKind::Request, 2, &commit, &[]).unwrap();
    let (_, body) = protocol::read_frame_head(&mut r, 0).unwrap();
    assert!(matches!(
        protocol::decode_body::<Response>(&body).unwrap(),
        Response::Write(WriteResponse::Committed(Committed { count: 1, .. }))
    ));
    let mut got = vec![0u8; 4096];
    client
        .read_into(obj.id, &Region::whole(&[4096]), &mut got)
        .unwrap();
    assert!(got.iter().all(|&b| b == 9));
    h.shutdown().unwrap();
}

#[test]
fn limits_come_from_the_environment() {
    // The only test that touches these variables (tests share the process environment).
    let d = Limits::default();
    assert_eq!(Limits::from_env().unwrap(), d);
    // The declared defaults (docs/OPERATIONS.md, `pdcx server config`) are the ones in force.
    use pdcx_core::config;
    let secs = |t: Option<Duration>| t.map_or(0, |t| t.as_secs());
    assert_eq!(
        config::MAX_CONNECTIONS.default_count() as usize,
        d.max_connections
    );
    assert_eq!(
        config::WRITE_TIMEOUT_S.default_count(),
        secs(d.write_timeout)
    );
    assert_eq!(
        config::FRAME_TIMEOUT_S.default_count(),
        secs(d.frame_timeout)
    );
    assert_eq!(config::IDLE_TIMEOUT_S.default_count(), secs(d.idle_timeout));
    assert_eq!(
        config::KEEP_BUFFERS_MB.default_count() << 20,
        d.keep_buffers_bytes
    );
    let c = pdcx_server::ServerConfig::new(std::path::Path::new("/nonexistent"), 0, 1);
    assert_eq!(config::MAX_PAYLOAD_MB.default_count() << 20, c.max_payload);
    assert_eq!(config::CACHE_MB.default_count() << 20, c.cache_bytes);
    std::env::set_var("PDCX_MAX_CONNECTIONS", "10");
    std::env::set_var("PDCX_WRITE_TIMEOUT_S", "0");
    std::env::set_var("PDCX_IDLE_TIMEOUT_S", "300");
    std::env::set_var("PDCX_KEEP_BUFFERS_MB", "64");
    let l = Limits::from_env().unwrap();
    assert_eq!(l.keep_buffers_bytes, 64 << 20);
    assert_eq!(l.max_connections, 10);
    assert_eq!(l.write_timeout, None);
    assert_eq!(l.idle_timeout, Some(Duration::from_secs(300)));
    assert_eq!(l.frame_timeout, d.frame_timeout);
    std::env::set_var("PDCX_MAX_CONNECTIONS", "lots");
    let e = Limits::from_env().unwrap_err();
    assert!(e.message.contains("PDCX_MAX_CONNECTIONS"), "{}", e.message);
    for v in [
        "PDCX_MAX_CONNECTIONS",
        "PDCX_WRITE_TIMEOUT_S",
        "PDCX_IDLE_TIMEOUT_S",
        "PDCX_KEEP_BUFFERS_MB",
    ] {
        std::env::remove_var(v);
    }
}
