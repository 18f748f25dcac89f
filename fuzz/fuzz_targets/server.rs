//! Every request body, as a running server handles it: one in-process server (rank 0 of 1, a
//! memory tier behind its log) is started per fuzzing process, and each input is sent to it as
//! an authenticated request frame with a fuzzed body and payload, over one TCP connection.
//!
//! Input: u16 body length, the body (bincode `Request`, usually mutated from a valid one), the
//! rest is the frame's bulk payload. Requests that would stop the server (`Shutdown`) or map
//! another process's memory (`AttachShm`, and the `*Shm` requests that need it) are skipped.
//!
//! Properties: the server answers every frame with a well-formed `Response` within 20 s, never
//! panics (libFuzzer aborts on a panic in any thread, so a panicking connection or flusher
//! thread is a crash), and keeps accepting connections.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pdcx_core::protocol::{
    self, AdminRequest, FrameKind, HandshakeRequest, ReadRequest, Request, Response, WriteRequest,
};
use pdcx_server::{Server, ServerConfig, ServerHandle};
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

struct Fixture {
    _handle: ServerHandle,
    addr: SocketAddr,
    secret: Vec<u8>,
    conn: Mutex<Option<TcpStream>>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        // tmpfs: commits fsync. Statics are never dropped, so remove the roots of fuzzing
        // processes that are gone (their name ends with the pid).
        let base = std::path::PathBuf::from(
            std::env::var_os("PDCX_FUZZ_DIR").unwrap_or_else(|| "/dev/shm".into()),
        );
        for e in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("pdcx-fuzz-server-") {
                if !std::path::Path::new("/proc").join(pid).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let root = base.join(format!("pdcx-fuzz-server-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("fuzz root");
        let cfg_path = root.as_path().join("pdcx.toml");
        std::fs::write(
            &cfg_path,
            "[[tier]]\nname = \"mem\"\nkind = \"memory\"\ncapacity = \"64MiB\"\n\
             [flush]\ninterval_ms = 50\n",
        )
        .unwrap();
        let mut config = ServerConfig::new(root.as_path(), 0, 1);
        config.config_file = Some(cfg_path);
        config.cache_bytes = 8 << 20;
        config.max_payload = 1 << 20;
        let handle = Server::start(config).expect("server starts");
        let addr = handle.addr();
        let secret = pdcx_client::cluster::load_or_create_secret(root.as_path()).unwrap();
        Fixture {
            _handle: handle,
            addr,
            secret,
            conn: Mutex::new(None),
        }
    })
}

fn read_response(s: &mut TcpStream) -> Response {
    let (h, body) = protocol::read_frame_head(s, u64::MAX)
        .unwrap_or_else(|e| panic!("server did not answer a frame: {e}"));
    assert_eq!(h.kind, FrameKind::Response);
    let mut payload = Vec::new();
    s.take(h.payload_len)
        .read_to_end(&mut payload)
        .expect("reply payload");
    assert_eq!(payload.len() as u64, h.payload_len);
    protocol::decode_body::<Response>(&body).expect("the server's reply decodes")
}

fn connect(f: &Fixture) -> TcpStream {
    let mut s = TcpStream::connect(f.addr).expect("the server still accepts connections");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (h, nonce) = protocol::read_frame_head(&mut s, 0).expect("challenge");
    assert_eq!(h.kind, FrameKind::Challenge);
    let binding = protocol::tcp_binding(s.local_addr().unwrap(), s.peer_addr().unwrap());
    let hello = protocol::Hello::new(
        &protocol::Credential::deployment(&f.secret),
        &nonce,
        protocol::Role::Client,
        binding,
        protocol::Wire::Plain,
    );
    let body = protocol::encode_body(&hello).unwrap();
    protocol::write_frame(&mut s, FrameKind::Hello, 0, &body, &[]).unwrap();
    let (h, body) = protocol::read_frame_head(&mut s, 0).expect("welcome");
    assert_eq!(h.kind, FrameKind::Welcome);
    match protocol::decode_body::<Result<protocol::Welcome, pdcx_core::Error>>(&body) {
        Ok(Ok(_)) => s,
        other => panic!("handshake answered with {other:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let [a, b, rest @ ..] = data else {
        return;
    };
    let n = (u16::from_le_bytes([*a, *b]) as usize).min(rest.len());
    let (body, payload) = rest.split_at(n);
    if let Ok(req) = protocol::decode_body::<Request>(body) {
        let skip = match &req {
            Request::Admin(AdminRequest::Shutdown(_))
            | Request::Handshake(HandshakeRequest::AttachShm(_)) => true,
            Request::Write(WriteRequest::Stage(s)) => s.shm.is_some(),
            Request::Read(ReadRequest::Read(r)) => r.opts.shm.is_some(),
            _ => false,
        };
        if skip {
            return;
        }
    }
    let f = fixture();
    let mut guard = f.conn.lock().unwrap_or_else(|p| p.into_inner());
    let mut s = match guard.take() {
        Some(s) => s,
        None => connect(f),
    };
    if protocol::write_frame(&mut s, FrameKind::Request, 7, body, &[payload]).is_err() {
        // The server closed the connection after the last input; retry once on a new one.
        s = connect(f);
        protocol::write_frame(&mut s, FrameKind::Request, 7, body, &[payload]).unwrap();
    }
    let _resp = read_response(&mut s);
    *guard = Some(s);
});
