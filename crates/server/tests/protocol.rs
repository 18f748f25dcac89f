//! The two request families and the handshake, against a real server on 127.0.0.1: what a
//! raw connection may send after a client handshake, what a peer handshake must prove, and
//! what a connecting side of another protocol version is told.

use pdcx_client::Client;
use pdcx_core::protocol::{
    self, handshake::Ping, write, CommitOpts, Credential, FrameKind, HandshakeResponse, Hello,
    ObjectSpec, PeerRequest, PeerResponse, RegisterItem, Request, Response, Role, ServerInfo,
    Welcome, Wire, HEADER_LEN, NONCE_LEN, VERSION,
};
use pdcx_core::{Dtype, Error, ErrorKind, ObjectMeta, Region};
use pdcx_server::{Server, ServerConfig, ServerHandle};
use pdcx_transport::{ClusterFile, Conn};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn deployment(root: &std::path::Path) -> ServerHandle {
    let h = Server::start(ServerConfig::new(root, 0, 1)).unwrap();
    h.server.publish_rank_file().unwrap();
    pdcx_server::launch::assemble_cluster(root, 1, Duration::from_secs(30)).unwrap();
    h
}

fn object(c: &Client, name: &str) -> ObjectMeta {
    c.create_object(ObjectSpec {
        name: name.into(),
        dims: vec![16],
        dtype: Dtype::UInt8,
        fill: None,
        containers: vec![],
        tags: vec![],
        creator: String::new(),
    })
    .unwrap()
}

/// A raw socket that has read the server's challenge.
fn challenged(addr: &str) -> (TcpStream, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (h, nonce) = protocol::read_frame_head(&mut s, 0).unwrap();
    assert_eq!(h.kind, FrameKind::Challenge);
    assert_eq!(nonce.len(), NONCE_LEN);
    (s, nonce)
}

/// This raw connection's channel binding, as a client computes it.
fn binding(s: &TcpStream) -> String {
    protocol::tcp_binding(s.local_addr().unwrap(), s.peer_addr().unwrap())
}

/// Sends a `Hello` and returns the server's `Welcome` (its info, or why it refused), after
/// checking the server's proof.
fn hello(s: &mut TcpStream, hello: &Hello) -> Result<ServerInfo, Error> {
    let body = protocol::encode_body(hello).unwrap();
    protocol::write_frame(s, FrameKind::Hello, 0, &body, &[]).unwrap();
    let (h, body) = protocol::read_frame_head(s, 0).unwrap();
    assert_eq!(h.kind, FrameKind::Welcome);
    let w: Result<Welcome, Error> = protocol::decode_body(&body).unwrap();
    w.map(|w| w.info)
}

fn send<T: serde::Serialize>(s: &mut TcpStream, kind: FrameKind, id: u64, req: &T) {
    let body = protocol::encode_body(req).unwrap();
    protocol::write_frame(s, kind, id, &body, &[]).unwrap();
}

fn answer<T: for<'de> serde::Deserialize<'de>>(s: &mut TcpStream, kind: FrameKind, id: u64) -> T {
    let (h, body) = protocol::read_frame_head(s, 1 << 20).unwrap();
    assert_eq!((h.kind, h.request_id), (kind, id));
    protocol::decode_body(&body).unwrap()
}

#[test]
fn a_peer_request_on_a_client_connection_is_refused_and_the_connection_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let _server = deployment(dir.path());
    let cf = ClusterFile::load(dir.path()).unwrap();
    let secret = cf.secret_bytes().unwrap();
    let c = Client::connect(Some(dir.path())).unwrap();
    let obj = object(&c, "o");

    let (mut s, nonce) = challenged(&cf.servers[0].addr);
    let h = Hello::new(
        &Credential::deployment(&secret),
        &nonce,
        Role::Client,
        binding(&s),
        Wire::Plain,
    );
    let info = hello(&mut s, &h).unwrap();
    assert_eq!((info.rank, info.size), (0, 1));
    // What a holder sends an owner: would put a region of `obj` in the region map.
    let register = PeerRequest::Register {
        items: vec![RegisterItem {
            id: obj.id,
            region: Region::whole(&[16]),
            token: None,
        }],
    };
    send(&mut s, FrameKind::PeerRequest, 7, &register);
    match answer::<Response>(&mut s, FrameKind::Response, 7) {
        Response::Error(e) => {
            assert_eq!(e.kind, ErrorKind::Auth);
            assert!(
                e.message.contains(
                    "`Register` is a server-to-server request, refused on a client connection"
                ),
                "{}",
                e.message
            );
        }
        r => panic!("a client registered a region: {r:?}"),
    }
    send(
        &mut s,
        FrameKind::PeerRequest,
        8,
        &PeerRequest::Object { id: obj.id },
    );
    assert!(matches!(
        answer::<Response>(&mut s, FrameKind::Response, 8),
        Response::Error(e) if e.kind == ErrorKind::Auth
    ));
    // The connection is still good, and nothing was registered.
    send(&mut s, FrameKind::Request, 9, &Request::from(Ping {}));
    assert!(matches!(
        answer::<Response>(&mut s, FrameKind::Response, 9),
        Response::Handshake(HandshakeResponse::Welcome(ServerInfo { rank: 0, size: 1 }))
    ));
    assert!(c.extents(obj.id).unwrap().is_empty());

    // Through the transport: a peer connection serves the peer family and refuses clients'.
    let mut peer = Conn::connect_as(&cf.servers[0].addr, &secret, Role::Peer { rank: 0 }).unwrap();
    match peer.peer_call(&PeerRequest::Object { id: obj.id }).unwrap() {
        (PeerResponse::Object(m), _) => assert_eq!(m.id, obj.id),
        r => panic!("{r:?}"),
    }
    let e = peer.ask(Ping {}, &[]).unwrap_err();
    assert!(
        e.message
            .contains("client request on a connection opened as Peer"),
        "{e}"
    );
    let mut client = Conn::connect(&cf.servers[0].addr, &secret).unwrap();
    let e = client
        .peer_call(&PeerRequest::Object { id: obj.id })
        .unwrap_err();
    assert!(
        e.message
            .contains("server-to-server request on a connection opened as Client"),
        "{e}"
    );
}

#[test]
fn a_peer_must_prove_its_role_and_rank() {
    let dir = tempfile::tempdir().unwrap();
    let _server = deployment(dir.path());
    let cf = ClusterFile::load(dir.path()).unwrap();
    let secret = cf.secret_bytes().unwrap();
    let addr = &cf.servers[0].addr;

    // A client's proof relabelled as a peer's: refused.
    let (mut s, nonce) = challenged(addr);
    let mut h = Hello::new(
        &Credential::deployment(&secret),
        &nonce,
        Role::Client,
        binding(&s),
        Wire::Plain,
    );
    h.role = Role::Peer { rank: 0 };
    let e = hello(&mut s, &h).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Auth);
    assert!(
        e.message.contains("does not hold the deployment secret"),
        "{e}"
    );
    // The wrong secret: refused.
    let (mut s, nonce) = challenged(addr);
    let role = Role::Peer { rank: 0 };
    let h = Hello::new(
        &Credential::deployment(b"not the secret"),
        &nonce,
        role,
        binding(&s),
        Wire::Plain,
    );
    assert_eq!(hello(&mut s, &h).unwrap_err().kind, ErrorKind::Auth);
    // A rank outside the deployment, with the right secret: refused.
    let e = Conn::connect_as(addr, &secret, Role::Peer { rank: 5 })
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::Auth);
    assert!(
        e.message
            .contains("server 5 is not part of this deployment of 1 servers"),
        "{e}"
    );
    // Anything but a Hello: refused.
    let (mut s, _) = challenged(addr);
    send(&mut s, FrameKind::Request, 1, &Request::from(Ping {}));
    let (h, body) = protocol::read_frame_head(&mut s, 0).unwrap();
    assert_eq!(h.kind, FrameKind::Welcome);
    let r: Result<ServerInfo, Error> = protocol::decode_body(&body).unwrap();
    assert_eq!(r.unwrap_err().kind, ErrorKind::Auth);
}

#[test]
fn a_connecting_side_of_another_protocol_version_is_told_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let _server = deployment(dir.path());
    let cf = ClusterFile::load(dir.path()).unwrap();
    for theirs in [VERSION - 1, VERSION + 1] {
        let (mut s, _) = challenged(&cf.servers[0].addr);
        // What a client of another version sends: a Hello header with its version.
        let mut h = protocol::Header {
            kind: FrameKind::Hello,
            flags: 0,
            body_len: 0,
            request_id: 0,
            payload_len: 0,
        }
        .encode();
        h[4..6].copy_from_slice(&theirs.to_le_bytes());
        s.write_all(&h).unwrap();
        let mut hb = [0u8; HEADER_LEN];
        s.read_exact(&mut hb).unwrap();
        assert_eq!(protocol::header_version(&hb), VERSION);
        let (head, body) = protocol::finish_frame_head(&mut s, &hb, 1 << 20, 0).unwrap();
        assert_eq!(head.kind, FrameKind::Welcome);
        let e = protocol::decode_body::<Result<ServerInfo, Error>>(&body)
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Protocol);
        let want = format!(
            "this server (rank 0) speaks pdcx protocol {VERSION}, the connecting side {theirs}"
        );
        assert!(e.message.contains(&want), "{}", e.message);
        assert!(
            e.message.contains("upgrade the older side"),
            "{}",
            e.message
        );
    }
}

#[test]
fn a_registration_is_recorded_for_the_rank_the_handshake_proved() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let _servers: Vec<ServerHandle> = (0..2)
        .map(|r| {
            let h = Server::start(ServerConfig::new(root, r, 2)).unwrap();
            h.server.publish_rank_file().unwrap();
            h
        })
        .collect();
    pdcx_server::launch::assemble_cluster(root, 2, Duration::from_secs(30)).unwrap();
    let cf = ClusterFile::load(root).unwrap();
    let c = Client::connect(Some(root)).unwrap();
    let name = (0..)
        .map(|i| format!("r{i}"))
        .find(|n| pdcx_core::owner_of_name(n, 2) == 0)
        .unwrap();
    let obj = object(&c, &name);
    // Server 1, as a holder, registers a region of an object server 0 owns: no request field
    // names the holder, the connection does.
    let mut peer = Conn::connect_as(
        &cf.servers[0].addr,
        &cf.secret_bytes().unwrap(),
        Role::Peer { rank: 1 },
    )
    .unwrap();
    let register = PeerRequest::Register {
        items: vec![RegisterItem {
            id: obj.id,
            region: Region::whole(&[16]),
            token: None,
        }],
    };
    let seq = match peer.peer_call(&register).unwrap() {
        (PeerResponse::Seqs(s), _) => s[0].expect("a sequence number"),
        r => panic!("{r:?}"),
    };
    let ext = c.extents(obj.id).unwrap();
    assert_eq!(ext.len(), 1);
    assert_eq!((ext[0].seq, ext[0].holder), (seq, 1));
}

/// A write reserved without its checksum (`ReserveWriteLate`) is committed only with one: a
/// plain `Commit` and a `CommitLate` with a wrong number of checksums are refused, and the
/// reservation stays for a proper `CommitLate`.
#[test]
fn a_late_reservation_is_committed_only_with_its_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let h = deployment(&root);
    let c = Client::connect(Some(&root)).unwrap();
    let obj = object(&c, "late");
    let cf = ClusterFile::load(&root).unwrap();
    let secret = cf.secret_bytes().unwrap();
    let mut conn = Conn::connect(&cf.servers[0].addr, &secret).unwrap();
    let item = protocol::StageItem {
        txn: 77,
        id: obj.id,
        region: Region::new(vec![0], vec![16]).unwrap(),
        len: 16,
    };
    let reserve = write::Reserve {
        items: vec![item],
        crcs: None,
    };
    let r = conn.ask(reserve, &[]).unwrap();
    let (seg, _, _, offset) = r.spans[0];
    let data = [7u8; 16];
    let path = pdcx_store::segment_path(&r.dir, seg);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &data, offset).unwrap();
    let commit = |checksums: Vec<u32>| write::Commit {
        txns: vec![77],
        opts: CommitOpts {
            checksums,
            ..CommitOpts::at(protocol::Durability::Local)
        },
    };
    let e = conn.ask(commit(vec![]), &[]).unwrap_err();
    assert!(e.message.contains("without its checksum"), "{e}");
    let e = conn.ask(commit(vec![1, 2]), &[]).unwrap_err();
    assert!(e.message.contains("carries 2 checksums"), "{e}");
    let done = conn.ask(commit(vec![crc32c::crc32c(&data)]), &[]).unwrap();
    assert_eq!(done.count, 1);
    let mut got = vec![0u8; 16];
    c.read_into(obj.id, &Region::new(vec![0], vec![16]).unwrap(), &mut got)
        .unwrap();
    assert_eq!(got, data);
    drop(conn);
    drop(c);
    h.shutdown().unwrap();
}

/// A process in the middle: accepts connections on a port of its own and copies bytes both
/// ways to and from `to`, as whoever holds a dead server's port could.
fn relay(to: String) -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { break };
            let s = TcpStream::connect(&to).unwrap();
            let pipe = |mut a: TcpStream, mut b: TcpStream| {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut a, &mut b);
                    let _ = b.shutdown(std::net::Shutdown::Both);
                });
            };
            pipe(c.try_clone().unwrap(), s.try_clone().unwrap());
            pipe(s, c);
        }
    });
    addr
}

#[test]
fn a_relayed_handshake_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _server = deployment(dir.path());
    let cf = ClusterFile::load(dir.path()).unwrap();
    let secret = cf.secret_bytes().unwrap();
    let addr = cf.servers[0].addr.clone();
    // Directly: accepted, and the server proved itself.
    assert_eq!(Conn::connect(&addr, &secret).unwrap().rank, 0);
    // Through a relay that forwards every byte of both sides: the client's proof names its
    // connection to the relay, which is not the one the server sees.
    let e = Conn::connect(&relay(addr.clone()), &secret).err().unwrap();
    assert_eq!(e.kind, ErrorKind::Auth, "{e}");
    assert!(e.message.contains("relayed"), "{e}");
    // A client that claims the relay's channel as its own cannot: the server compares the
    // binding with the connection it has, whatever the proof says.
    let (mut s, nonce) = challenged(&addr);
    let lie = protocol::tcp_binding("127.0.0.1:1".parse().unwrap(), s.peer_addr().unwrap());
    let e = hello(
        &mut s,
        &Hello::new(
            &Credential::deployment(&secret),
            &nonce,
            Role::Client,
            lie,
            Wire::Plain,
        ),
    )
    .unwrap_err();
    assert!(e.message.contains("another channel"), "{e}");
}

#[test]
fn a_server_that_cannot_prove_the_secret_is_refused_by_the_client() {
    // Whatever holds the address (a planted socket, a dead server's port) answers the
    // handshake without the secret: it cannot produce the Welcome's proof.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let impostor = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        protocol::write_frame(&mut s, FrameKind::Challenge, 0, &[9u8; NONCE_LEN], &[]).unwrap();
        let (_, body) = protocol::read_frame_head(&mut s, 0).unwrap();
        let hello: Hello = protocol::decode_body(&body).unwrap();
        let info = ServerInfo { rank: 0, size: 1 };
        let forged = Welcome::new(b"a guess", &hello, info, hello.wire);
        let body = protocol::encode_body(&Ok::<_, Error>(forged)).unwrap();
        protocol::write_frame(&mut s, FrameKind::Welcome, 0, &body, &[]).unwrap();
        // Anything the client sent after this would be a request meant for the real server.
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        rest
    });
    let e = Conn::connect(&addr, b"the real secret").err().unwrap();
    assert_eq!(e.kind, ErrorKind::Auth, "{e}");
    assert!(e.message.contains("did not prove"), "{e}");
    assert!(
        impostor.join().unwrap().is_empty(),
        "the client sent nothing more"
    );
}

#[test]
fn a_handshake_that_trickles_is_closed_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ServerConfig::new(dir.path(), 0, 1);
    cfg.limits.handshake_timeout = Duration::from_secs(2);
    let h = Server::start(cfg).unwrap();
    let addr = h.addr().to_string();
    let (mut s, _) = challenged(&addr);
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // One byte every 300 ms: each read alone is quick, the whole never finishes.
    let t0 = std::time::Instant::now();
    let mut closed = false;
    for _ in 0..60 {
        if s.write_all(b"P").is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
        if t0.elapsed() > Duration::from_secs(3) {
            let mut buf = [0u8; 4096];
            // The server's refusal (a Welcome carrying the error), then end of stream.
            match s.read(&mut buf) {
                Ok(0) | Err(_) => {
                    closed = true;
                    break;
                }
                Ok(_) => continue,
            }
        }
    }
    let took = t0.elapsed();
    assert!(closed, "still open after {took:?}");
    assert!(took < Duration::from_secs(8), "{took:?}");
}

#[test]
fn unauthenticated_connections_cannot_crowd_out_a_client() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ServerConfig::new(dir.path(), 0, 1);
    cfg.limits.max_handshakes = 4;
    let h = Server::start(cfg).unwrap();
    h.server.publish_rank_file().unwrap();
    pdcx_server::launch::assemble_cluster(dir.path(), 1, Duration::from_secs(30)).unwrap();
    let cf = ClusterFile::load(dir.path()).unwrap();
    let secret = cf.secret_bytes().unwrap();
    let addr = h.addr().to_string();
    // 40 connections that read their challenge and then say nothing.
    let silent: Vec<TcpStream> = (0..40).map(|_| challenged(&addr).0).collect();
    let t0 = std::time::Instant::now();
    let c = Conn::connect(&addr, &secret).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    drop(c);
    // All but the newest few were closed to make room, long before their deadline.
    let closed = silent
        .into_iter()
        .filter(|s| {
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let mut b = [0u8; 1024];
            // End of stream (or a reset): closed. A timeout: still open.
            match (&*s).read(&mut b) {
                Ok(0) => true,
                Ok(_) => panic!("a silent connection was sent something"),
                Err(e) => !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
            }
        })
        .count();
    assert!(closed >= 36, "{closed} of 40 closed");
}

#[test]
fn only_the_admin_role_stops_a_server_or_moves_data_between_tiers() {
    let dir = tempfile::tempdir().unwrap();
    let h = deployment(dir.path());
    let cf = ClusterFile::load(dir.path()).unwrap();
    let secret = cf.secret_bytes().unwrap();
    let addr = &cf.servers[0].addr;
    // An application's connection: status yes, shutdown and migrate no.
    let mut app = Conn::connect(addr, &secret).unwrap();
    app.ask(protocol::admin::Stats {}, &[]).unwrap();
    for e in [
        app.ask(protocol::admin::Shutdown {}, &[]).unwrap_err(),
        app.ask(
            protocol::admin::Migrate {
                id: 1,
                tier: "x".into(),
            },
            &[],
        )
        .unwrap_err(),
    ] {
        assert_eq!(e.kind, ErrorKind::Auth, "{e}");
        assert!(e.message.contains("needs the admin role"), "{e}");
    }
    assert!(!h.server.shutdown_requested());
    // A user of the deployment may not even ask for the role: its Hello is refused.
    let (mut s, nonce) = challenged(addr);
    let key = protocol::user_key(&secret, 12345);
    let cred = Credential::user_key(12345, key);
    let h_admin = Hello::new(&cred, &nonce, Role::Admin, binding(&s), Wire::Plain);
    let e = hello(&mut s, &h_admin).unwrap_err();
    assert!(e.message.contains("connects as a client only"), "{e}");
    // The operator's connection may.
    let mut op = Conn::connect_as(addr, &secret, Role::Admin).unwrap();
    op.ask(protocol::admin::Shutdown {}, &[]).unwrap();
    assert!(h.server.shutdown_requested());
    h.shutdown().unwrap();
}
