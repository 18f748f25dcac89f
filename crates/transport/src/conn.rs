//! One authenticated, framed connection to one server, in one role: a client's (application,
//! CLI) sends `Request`s, a peer's (another server of the deployment) sends `PeerRequest`s.
//! Calls are synchronous; a `Conn` is used by one thread at a time.
//!
//! The client library adds the shared-memory bulk path on top (`pdcx_client::conn`).

use crate::stream::{self, Stream};
use pdcx_core::protocol::{
    self, Call, Credential, FrameKind, Hello, PeerRequest, PeerResponse, Reply, Request, Response,
    Role, SessionKeys, Welcome, Wire,
};
use pdcx_core::{Error, ErrorKind, Result};
use serde::de::DeserializeOwned;
use std::io::{BufReader, BufWriter, Read};
use std::net::TcpStream;
use std::time::Duration;

/// Client requests this process has sent (each is one round trip): what benchmarks count.
static REQUESTS_SENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Client requests this process has sent so far, on every connection.
pub fn requests_sent() -> u64 {
    REQUESTS_SENT.load(std::sync::atomic::Ordering::Relaxed)
}

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The buffered read half of a connection (reply payloads are read from it directly).
pub type Reader = BufReader<Stream>;

pub struct Conn {
    reader: Reader,
    writer: BufWriter<Stream>,
    next_id: u64,
    /// The server's rank and the deployment's size, as its `Welcome` said.
    pub rank: u32,
    pub size: u32,
    pub addr: String,
    /// The role this side proved in its `Hello`: which request family it may send.
    pub role: Role,
    /// How the frames after the handshake are protected, as both sides agreed.
    pub wire: Wire,
}

pub fn net_err(addr: &str, e: &std::io::Error) -> Error {
    Error::new(ErrorKind::Unavailable, format!("server at {addr}: {e}"))
}

/// The error for a server at `addr` that speaks protocol `theirs`, saying what to upgrade.
fn version_mismatch(addr: &str, theirs: u16, role: Role) -> Error {
    let ours = protocol::VERSION;
    let (me, advice) = match role {
        Role::Peer { .. } => (
            "this server",
            "every server of a deployment must run the same pdcx release".to_string(),
        ),
        Role::Client | Role::Admin if theirs < ours => (
            "this client",
            "upgrade the servers to this client's pdcx release, or use the client of theirs"
                .to_string(),
        ),
        Role::Client | Role::Admin => (
            "this client",
            "upgrade this client (its pdcx library or CLI) to the servers' pdcx release"
                .to_string(),
        ),
    };
    Error::protocol(format!(
        "server at {addr} speaks pdcx protocol {theirs}, {me} {ours}: {advice}"
    ))
}

impl Conn {
    /// A client connection (sends `Request`s).
    pub fn connect(addr: &str, secret: &[u8]) -> Result<Conn> {
        Self::connect_as(addr, secret, Role::Client)
    }

    /// A connection in `role`, authenticated with the deployment `secret`.
    pub fn connect_as(addr: &str, secret: &[u8], role: Role) -> Result<Conn> {
        Self::connect_with(addr, &Credential::deployment(secret), role)
    }

    /// A connection in `role` over TCP, proved with `cred`.
    pub fn connect_with(addr: &str, cred: &Credential, role: Role) -> Result<Conn> {
        let sock: std::net::SocketAddr = addr
            .parse()
            .map_err(|_| Error::invalid(format!("bad server address {addr:?}")))?;
        let stream = TcpStream::connect_timeout(&sock, Duration::from_secs(5)).map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                format!("cannot reach pdcx server at {addr}: {e} (is the deployment running? try `pdcx server status`)"),
            )
        })?;
        stream.set_nodelay(true).map_err(|e| net_err(addr, &e))?;
        Self::over(Stream::Tcp(stream), addr, cred, role)
    }

    /// A connection in `role` over the Unix-domain listener a server on this node advertises
    /// (`spec`: a path, or `@name` for an abstract socket). Same handshake as over TCP.
    pub fn connect_unix_as(spec: &str, secret: &[u8], role: Role) -> Result<Conn> {
        Self::connect_unix_with(spec, &Credential::deployment(secret), role)
    }

    /// A connection in `role` over a Unix-domain listener, proved with `cred`.
    pub fn connect_unix_with(spec: &str, cred: &Credential, role: Role) -> Result<Conn> {
        let s = stream::connect_unix(spec).map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                format!("cannot reach pdcx server at Unix socket {spec}: {e}"),
            )
        })?;
        Self::over(Stream::Unix(s), &format!("unix:{spec}"), cred, role)
    }

    /// Authenticates a freshly connected `stream` to the server at `addr` (for messages).
    fn over(stream: Stream, addr: &str, cred: &Credential, role: Role) -> Result<Conn> {
        // Something that accepts but never speaks (a frozen server, a reused port) must not
        // hang the client: bound the handshake, then lift the limit for long transfers.
        stream
            .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
            .map_err(|e| net_err(addr, &e))?;
        let reader = BufReader::with_capacity(
            256 << 10,
            stream.try_clone().map_err(|e| net_err(addr, &e))?,
        );
        let writer = BufWriter::with_capacity(256 << 10, stream);
        let mut conn = Conn {
            reader,
            writer,
            next_id: 1,
            rank: 0,
            size: 0,
            addr: addr.to_string(),
            role,
            wire: Wire::Plain,
        };
        conn.handshake(cred)?;
        // A call may legitimately take longer than a handshake (a flush that waits, a large read
        // from a slow tier): from here on a read waits as long as the server works.
        conn.writer
            .get_ref()
            .set_read_timeout(None)
            .map_err(|e| net_err(addr, &e))?;
        Ok(conn)
    }

    /// Whether this connection runs over a Unix-domain socket (else TCP).
    pub fn is_unix(&self) -> bool {
        self.writer.get_ref().is_unix()
    }

    fn handshake(&mut self, cred: &Credential) -> Result<()> {
        let addr = self.addr.clone();
        let hb = protocol::read_header_bytes(&mut self.reader)?;
        let theirs = protocol::header_version(&hb);
        if protocol::has_magic(&hb) && theirs != protocol::VERSION {
            // Tell the server which version this side speaks, so its log says so too: a bare
            // `Hello` header (magic and version keep their place in every version; the body
            // format may not, so there is none).
            let _ = protocol::write_frame(&mut self.writer, FrameKind::Hello, 0, &[], &[]);
            return Err(version_mismatch(&addr, theirs, self.role));
        }
        let (h, nonce) = protocol::finish_frame_head(&mut self.reader, &hb, 1 << 16, 0)?;
        if h.kind == FrameKind::Response {
            // A server that will not serve this connection (at its connection limit) says why.
            if let Ok(protocol::Response::Error(e)) = protocol::decode_body(&nonce) {
                return Err(e);
            }
        }
        if h.kind != FrameKind::Challenge || nonce.len() != protocol::NONCE_LEN {
            return Err(Error::protocol(format!(
                "{addr} did not send a pdcx challenge"
            )));
        }
        let wanted = self.wire_wanted()?;
        let stream = self.writer.get_ref();
        let binding = stream
            .channel_binding(true)
            .map_err(|e| net_err(&addr, &e))?;
        if cred.is_kernel() && wanted != Wire::Plain {
            return Err(Error::new(
                ErrorKind::Auth,
                format!(
                    "{addr}: this side proves who it is by the kernel's word only, which cannot \
                     protect frames ({wanted:?} wanted): use a user key (PDCX_USER_KEY) or \
                     PDCX_WIRE=auto on the server's node"
                ),
            ));
        }
        let hello = Hello::new(cred, &nonce, self.role, binding, wanted);
        let body = protocol::encode_body(&hello)?;
        protocol::write_frame(&mut self.writer, FrameKind::Hello, 0, &body, &[])
            .map_err(|e| net_err(&addr, &e))?;
        let (h, body) = protocol::read_frame_head(&mut self.reader, 0)?;
        if h.kind != FrameKind::Welcome {
            return Err(Error::protocol(format!(
                "{addr} answered the handshake with a {:?} frame",
                h.kind
            )));
        }
        let welcome: std::result::Result<Welcome, Error> = protocol::decode_body(&body)?;
        let welcome = welcome?;
        // The server proves it holds the secret too, for this Hello: whatever accepted this
        // connection without it (a process on a dead server's port, a planted socket) stops
        // here, before the client sends a single request.
        if cred.is_kernel() {
            // No key to check the server's proof with: the kernel says who runs the server.
            let uid = self
                .writer
                .get_ref()
                .peer_uid()
                .map_err(|e| net_err(&addr, &e))?;
            if uid.is_none() || uid != cred.server_uid {
                return Err(Error::new(
                    ErrorKind::Auth,
                    format!(
                        "{addr} runs as uid {uid:?}, not as the deployment's user (uid {:?}, \
                         the owner of its published addresses): it is not a server of this \
                         deployment",
                        cred.server_uid
                    ),
                ));
            }
        } else if !welcome.verify(&cred.key, &hello) {
            return Err(Error::new(
                ErrorKind::Auth,
                format!(
                    "{addr} did not prove it holds this deployment's secret: it is not a server \
                     of this deployment (a stale address in the cluster file, or an impostor)"
                ),
            ));
        }
        if welcome.wire < wanted {
            return Err(Error::new(
                ErrorKind::Auth,
                format!(
                    "{addr} offered {:?} frames where this side requires {wanted:?}",
                    welcome.wire
                ),
            ));
        }
        if welcome.wire != Wire::Plain {
            let keys = SessionKeys::derive(&cred.key, &hello, &welcome);
            let encrypt = welcome.wire == Wire::Encrypted;
            let protect = |r: std::io::Result<()>| r.map_err(|e| net_err(&addr, &e));
            protect(
                self.reader
                    .get_mut()
                    .protect_reads(&keys.server_to_client, encrypt),
            )?;
            protect(
                self.writer
                    .get_mut()
                    .protect_writes(&keys.client_to_server, encrypt),
            )?;
        }
        self.rank = welcome.info.rank;
        self.size = welcome.info.size;
        self.wire = welcome.wire;
        Ok(())
    }

    /// The protection this side wants under `PDCX_WIRE` on this connection.
    fn wire_wanted(&self) -> Result<Wire> {
        let setting = pdcx_core::config::WIRE
            .word()
            .map_err(|e| Error::invalid(e.to_string()))?;
        self.writer
            .get_ref()
            .wire_wanted(setting)
            .map_err(|e| net_err(&self.addr, &e))
    }

    fn check_role(&self, peer: bool) -> Result<()> {
        match (self.role, peer) {
            (Role::Client | Role::Admin, false) | (Role::Peer { .. }, true) => Ok(()),
            (role, _) => Err(Error::internal(format!(
                "a {} request on a connection opened as {role:?}",
                if peer { "server-to-server" } else { "client" }
            ))),
        }
    }

    /// Sends a client request with bulk payload parts and returns the reply and its payload.
    pub fn call(&mut self, req: &Request, payload: &[&[u8]]) -> Result<(Response, Vec<u8>)> {
        self.send(req, payload)?;
        let mut data = Vec::new();
        let resp = self.read_response(&mut |r, len| {
            // Grown as the bytes arrive: the announced length is the server's claim.
            protocol::read_payload(r, &mut data, len as usize)
                .map_err(|e| Error::io("reading reply payload", &e))
        })?;
        Ok((resp, data))
    }

    /// Sends one operation and returns its typed reply: a reply of another operation is one
    /// protocol error (`Call::reply`). A reply payload, if any, is dropped (see `ask_data`).
    pub fn ask<C: Call>(&mut self, req: C, payload: &[&[u8]]) -> Result<C::Reply> {
        self.ask_data(req, payload).map(|(r, _)| r)
    }

    /// Like `ask`, with the reply's payload.
    pub fn ask_data<C: Call>(&mut self, req: C, payload: &[&[u8]]) -> Result<(C::Reply, Vec<u8>)> {
        let (resp, data) = self.call(&req.into(), payload)?;
        Ok((C::reply(resp)?, data))
    }

    /// Sends a server-to-server request (on a peer connection) and returns the reply and its
    /// payload.
    pub fn peer_call(&mut self, req: &PeerRequest) -> Result<(PeerResponse, Vec<u8>)> {
        self.check_role(true)?;
        let body = protocol::encode_body(req)?;
        self.send_frame(FrameKind::PeerRequest, &body, &[])?;
        let mut data = Vec::new();
        let resp: PeerResponse =
            self.read_frame_reply(FrameKind::PeerResponse, &mut |r, len| {
                protocol::read_payload(r, &mut data, len as usize)
                    .map_err(|e| Error::io("reading reply payload", &e))
            })?;
        Ok((resp.into_result()?, data))
    }

    /// Like `call`, but the reply payload is split into one freshly allocated Vec per entry of
    /// `lens` (which must add up to its size): each byte is received once, straight into the
    /// buffer that is handed to the caller, with no intermediate whole-reply buffer.
    pub fn call_split(
        &mut self,
        req: &Request,
        payload: &[&[u8]],
        lens: &[usize],
    ) -> Result<(Response, Vec<Vec<u8>>)> {
        self.send(req, payload)?;
        let want: u64 = lens.iter().map(|&l| l as u64).sum();
        let mut parts = Vec::with_capacity(lens.len());
        let resp = self.read_response(&mut |r, len| {
            if len != want {
                return Err(Error::protocol(format!(
                    "read reply has {len} bytes, expected {want}"
                )));
            }
            for &l in lens {
                let mut v = vec![0u8; l];
                r.read_exact(&mut v)
                    .map_err(|e| Error::io("reading reply payload", &e))?;
                parts.push(v);
            }
            Ok(())
        })?;
        if parts.is_empty() {
            // An all-empty reply carries no payload, so the callback never ran.
            parts = lens.iter().map(|_| Vec::new()).collect();
        }
        Ok((resp, parts))
    }

    /// Like `call`, but the reply payload lands directly in `out`, which must be its exact size.
    pub fn call_into(
        &mut self,
        req: &Request,
        payload: &[&[u8]],
        out: &mut [u8],
    ) -> Result<Response> {
        self.send(req, payload)?;
        let want = out.len() as u64;
        self.read_response(&mut |r, len| {
            if len != want {
                return Err(Error::protocol(format!(
                    "reply carries {len} bytes, expected {want}"
                )));
            }
            r.read_exact(out)
                .map_err(|e| Error::io("reading reply payload", &e))
        })
    }

    /// Sends one client request; its reply is read with `read_response` or `read_reply`.
    pub fn send(&mut self, req: &Request, payload: &[&[u8]]) -> Result<()> {
        self.check_role(false)?;
        REQUESTS_SENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let body = protocol::encode_body(req)?;
        self.send_frame(FrameKind::Request, &body, payload)
    }

    fn send_frame(&mut self, kind: FrameKind, body: &[u8], payload: &[&[u8]]) -> Result<()> {
        let id = self.next_id;
        self.next_id += 1;
        protocol::write_frame(&mut self.writer, kind, id, body, payload)
            .map_err(|e| net_err(&self.addr, &e))
    }

    /// Reads the reply to a client request; an error the server sent becomes `Err`.
    pub fn read_response(
        &mut self,
        on_payload: &mut dyn FnMut(&mut Reader, u64) -> Result<()>,
    ) -> Result<Response> {
        self.read_reply(on_payload)?.into_result()
    }

    /// Like `read_response`, but an error the server sent comes back as `Response::Error`,
    /// so callers can tell it from a failed connection.
    pub fn read_reply(
        &mut self,
        on_payload: &mut dyn FnMut(&mut Reader, u64) -> Result<()>,
    ) -> Result<Response> {
        self.read_frame_reply(FrameKind::Response, on_payload)
    }

    /// Reads one reply frame of `kind`; `on_payload` reads its payload unless it is an error.
    fn read_frame_reply<R: Reply + DeserializeOwned>(
        &mut self,
        kind: FrameKind,
        on_payload: &mut dyn FnMut(&mut Reader, u64) -> Result<()>,
    ) -> Result<R> {
        if self.reader.buffer().is_empty() {
            // The reply of a small call comes within microseconds: poll before sleeping.
            stream::spin_until_readable(self.reader.get_ref(), stream::reply_spin_budget());
        }
        let (h, body) = protocol::read_frame_head(&mut self.reader, u64::MAX)?;
        if h.kind != kind {
            return Err(Error::protocol(format!(
                "expected a {kind:?} frame, got {:?}",
                h.kind
            )));
        }
        let resp: R = protocol::decode_body(&body)?;
        if resp.is_error() {
            let mut sink = std::io::sink();
            std::io::copy(&mut (&mut self.reader).take(h.payload_len), &mut sink)
                .map_err(|e| net_err(&self.addr, &e))?;
            return Ok(resp);
        }
        if h.payload_len > 0 {
            on_payload(&mut self.reader, h.payload_len)?;
        }
        Ok(resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    /// A listener that speaks protocol `version` just long enough to send a challenge, and
    /// returns the header of what the client sent back.
    fn old_server(version: u16) -> (String, std::thread::JoinHandle<[u8; protocol::HEADER_LEN]>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut h = protocol::Header {
                kind: FrameKind::Challenge,
                flags: 0,
                body_len: protocol::NONCE_LEN as u32,
                request_id: 0,
                payload_len: 0,
            }
            .encode();
            h[4..6].copy_from_slice(&version.to_le_bytes());
            s.write_all(&h).unwrap();
            s.write_all(&[0u8; protocol::NONCE_LEN]).unwrap();
            let mut back = [0u8; protocol::HEADER_LEN];
            s.read_exact(&mut back).unwrap();
            back
        });
        (addr, t)
    }

    #[test]
    fn a_server_of_another_version_is_named_with_both_versions() {
        let ours = protocol::VERSION;
        for (theirs, advice) in [
            (ours - 1, "upgrade the servers"),
            (ours + 1, "upgrade this client"),
        ] {
            let (addr, t) = old_server(theirs);
            let e = Conn::connect(&addr, b"s").err().expect("refused");
            assert_eq!(e.kind, ErrorKind::Protocol);
            let want =
                format!("server at {addr} speaks pdcx protocol {theirs}, this client {ours}");
            assert!(e.message.contains(&want), "{}", e.message);
            assert!(e.message.contains(advice), "{}", e.message);
            // The server was told which version this side speaks.
            let back = t.join().unwrap();
            assert!(protocol::has_magic(&back));
            assert_eq!(protocol::header_version(&back), ours);
        }
        let (addr, t) = old_server(ours + 1);
        let e = Conn::connect_as(&addr, b"s", Role::Peer { rank: 1 })
            .err()
            .expect("refused");
        assert!(
            e.message.contains(&format!("this server {ours}"))
                && e.message.contains("same pdcx release"),
            "{}",
            e.message
        );
        t.join().unwrap();
    }
}
