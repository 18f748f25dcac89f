//! The two request families and the handshake, against a real server on 127.0.0.1: what a
//! raw connection may send after a client handshake, what a peer handshake must prove, and
//! what a connecting side of another protocol version is told.

use pdcx_client::Client;
use pdcx_core::protocol::{
    self, handshake::Ping, write, CommitOpts, FrameKind, HandshakeResponse, Hello, ObjectSpec,
    PeerRequest, PeerResponse, RegisterItem, Request, Response, Role, ServerInfo, HEADER_LEN,
    NONCE_LEN, VERSION,
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

/// Sends a `Hello` and returns the server's `Welcome` (its info, or why it refused).
fn hello(s: &mut TcpStream, hello: &Hello) -> Result<ServerInfo, Error> {
    let body = protocol::encode_body(hello).unwrap();
    protocol::write_frame(s, FrameKind::Hello, 0, &body, &[]).unwrap();
    let (h, body) = protocol::read_frame_head(s, 0).unwrap();
    assert_eq!(h.kind, FrameKind::Welcome);
    protocol::decode_body(&body).unwrap()
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
    let tag = protocol::hello_tag(&secret, &nonce, Role::Client);
    let info = hello(
        &mut s,
        &Hello {
            role: Role::Client,
            tag,
        },
    )
    .unwrap();
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
    let tag = protocol::hello_tag(&secret, &nonce, Role::Client);
    let e = hello(
        &mut s,
        &Hello {
            role: Role::Peer { rank: 0 },
            tag,
        },
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Auth);
    assert!(
        e.message.contains("does not hold the deployment secret"),
        "{e}"
    );
    // The wrong secret: refused.
    let (mut s, nonce) = challenged(addr);
    let role = Role::Peer { rank: 0 };
    let tag = protocol::hello_tag(b"not the secret", &nonce, role);
    assert_eq!(
        hello(&mut s, &Hello { role, tag }).unwrap_err().kind,
        ErrorKind::Auth
    );
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
