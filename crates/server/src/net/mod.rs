//! The connection side of a server: one thread per connection authenticates the other side
//! (`handshake`), then reads request frames and answers each one. A client is answered in the
//! client families (`Request`, dispatched by `crate::api`), another server of the deployment,
//! which proves its rank, in the peer family (`PeerRequest`). A request of the other kind is
//! refused with an error reply. A malformed body gets an error reply and the connection goes
//! on (the framing is intact); a malformed header, a wrong version or a failed handshake
//! closes the connection. Listening (TCP and Unix sockets) is in the crate root.

mod handshake;
mod listen;
mod pending;

pub(crate) use listen::{accept, bind_unix};
pub(crate) use pending::{Entry, Pending, Refused, Source};

use crate::api::{client_gone, drain, no_payload, Caller, Reader, Session};
use crate::Server;
use pdcx_core::protocol::{
    self, AdminResponse, FrameKind, PeerRequest, PeerResponse, Request, Response, Role,
};
use pdcx_core::{Error, ErrorKind};
use pdcx_transport::Stream;
use std::io::{BufReader, BufWriter};
use std::sync::atomic::Ordering;

pub(crate) type Writer = BufWriter<Stream>;

/// Largest read buffer a connection keeps for its next reply.
const SCRATCH_KEEP: usize = 64 << 20;

/// Serves `stream`, which holds a place among the handshakes (`pending`, from
/// `Pending::enter` in the accept loop) until it authenticates.
pub(crate) fn serve_connection(server: &Server, stream: Stream, pending: Entry) {
    crate::limits::on_connect(&stream, &server.config.limits);
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::with_capacity(1 << 20, read_half);
    // The handshake marks its progress (`pending::hello_received`) on this thread.
    pending.bind_thread();
    let mut writer = BufWriter::with_capacity(256 << 10, stream);
    let (role, caller) = match handshake::handshake(server, &mut reader, &mut writer) {
        Ok(auth) => {
            pending.verified();
            (auth.role, auth.caller)
        }
        Err(e) => {
            let _ = handshake::send_welcome(&mut writer, Err(e));
            return;
        }
    };
    server.connections.fetch_add(1, Ordering::Relaxed);
    match role {
        Role::Client | Role::Admin => serve_client(server, caller, &mut reader, &mut writer),
        Role::Peer { rank } => serve_peer(server, rank, &mut reader, &mut writer),
    }
    server.connections.fetch_sub(1, Ordering::Relaxed);
}

/// The request loop of a client connection.
fn serve_client(server: &Server, caller: Caller, reader: &mut Reader, writer: &mut Writer) {
    let mut sess = Session {
        caller: Some(caller),
        ..Session::default()
    };
    loop {
        if !crate::limits::await_request(reader, &server.config.limits, sess.pending.is_empty()) {
            break;
        }
        let (head, body) = match protocol::read_frame_head(reader, server.config.max_payload) {
            Ok(x) => x,
            Err(e) if e.kind == ErrorKind::Unavailable => break,
            Err(e) => {
                let _ = reply(writer, 0, &Response::Error(e), &[]);
                break;
            }
        };
        if server.stopping() {
            // Stopping: its last sync has run or is running, so nothing more is accepted (a
            // write acknowledged now might never reach the disk). The client sees the server
            // as gone, as it will be.
            let _ = drain(reader, head.payload_len);
            let e = Error::new(
                ErrorKind::Unavailable,
                format!("pdcx server {} is shutting down", server.config.rank),
            );
            let _ = reply(writer, head.request_id, &Response::Error(e), &[]);
            break;
        }
        // Request kind and timing for `crate::counters`.
        let (started, mut kind) = (std::time::Instant::now(), crate::counters::Kind::default());
        let outcome = match head.kind {
            FrameKind::Request => match protocol::decode_body::<Request>(&body) {
                Ok(req) => {
                    kind = crate::counters::Kind::named(req.metric_name());
                    crate::api::handle(server, req, head.payload_len, reader, &mut sess)
                }
                Err(e) => drain(reader, head.payload_len).and(Err(e)),
            },
            // The framing is intact: refuse this one and go on.
            FrameKind::PeerRequest => {
                drain(reader, head.payload_len).and(Err(peer_request_refused(&body)))
            }
            kind => {
                let e = Error::protocol(format!("expected a request frame, got {kind:?}"));
                let _ = reply(writer, head.request_id, &Response::Error(e), &[]);
                break;
            }
        };
        let (resp, payload, shutdown) = match outcome {
            Ok((resp, payload)) => {
                let shut = matches!(resp, Response::Admin(AdminResponse::Done))
                    && server.shutdown_requested.load(Ordering::SeqCst);
                (resp, payload, shut)
            }
            // The client vanished mid-frame: nothing to answer. (Other servers being unavailable
            // is an ordinary error, reported to the client.)
            Err(e) if client_gone(&e) => break,
            Err(e) => (Response::Error(e), Vec::new(), false),
        };
        let sent = reply(writer, head.request_id, &resp, &payload);
        let failed = matches!(resp, Response::Error(_)) || sent.is_err();
        let out = payload.len() as u64;
        let took = started.elapsed();
        server
            .metrics
            .request(&kind, head.payload_len, out, took, failed);
        if sent.is_err() {
            break;
        }
        if payload.capacity() <= crate::limits::keep_limit(server, SCRATCH_KEEP)
            && payload.capacity() > sess.scratch.capacity()
        {
            sess.scratch = payload;
        }
        if shutdown {
            server.wake_acceptor();
            break;
        }
    }
    // `sess` drops here: uncommitted writes are forgotten and shared-memory arenas unmapped.
}

/// The error for a server-to-server request sent on a client connection.
fn peer_request_refused(body: &[u8]) -> Error {
    let what = protocol::decode_body::<PeerRequest>(body)
        .map(|r| format!("`{}`", r.name()))
        .unwrap_or_else(|_| "this request".into());
    Error::new(
        ErrorKind::Auth,
        format!(
            "{what} is a server-to-server request, refused on a client connection \
             (only a server of the deployment, proving its rank in the handshake, may send it)"
        ),
    )
}

/// The request loop of a connection from server `from` of the deployment.
fn serve_peer(server: &Server, from: u32, reader: &mut Reader, writer: &mut Writer) {
    loop {
        if reader.buffer().is_empty() {
            // A holder's registrations come one per small commit, i.e. one per round trip of
            // its client (holder and owner included): wait as long as a caller waits for a
            // reply (`reply_spin_budget`), or a stream of them settles into sleeping here.
            pdcx_transport::stream::spin_until_readable(
                reader.get_ref(),
                pdcx_transport::stream::reply_spin_budget(),
            );
        }
        let (head, body) = match protocol::read_frame_head(reader, server.config.max_payload) {
            Ok(x) => x,
            Err(e) if e.kind == ErrorKind::Unavailable => break,
            Err(e) => {
                let _ = peer_reply(writer, 0, &PeerResponse::Error(e), &[]);
                break;
            }
        };
        let outcome = match head.kind {
            FrameKind::PeerRequest => match protocol::decode_body::<PeerRequest>(&body) {
                Ok(req) => no_payload(reader, head.payload_len)
                    .and_then(|()| crate::api::peer::handle(server, from, req)),
                Err(e) => drain(reader, head.payload_len).and(Err(e)),
            },
            FrameKind::Request => drain(reader, head.payload_len).and(Err(Error::new(
                ErrorKind::Auth,
                format!(
                    "client requests are not served on a server-to-server connection \
                     (this one authenticated as server {from})"
                ),
            ))),
            kind => {
                let e = Error::protocol(format!("expected a request frame, got {kind:?}"));
                let _ = peer_reply(writer, head.request_id, &PeerResponse::Error(e), &[]);
                break;
            }
        };
        let (resp, payload) = match outcome {
            Ok(x) => x,
            Err(e) if client_gone(&e) => break,
            Err(e) => (PeerResponse::Error(e), Vec::new()),
        };
        if peer_reply(writer, head.request_id, &resp, &payload).is_err() {
            break;
        }
    }
}

fn reply(w: &mut Writer, id: u64, resp: &Response, payload: &[u8]) -> std::io::Result<()> {
    let body = protocol::encode_body(resp).map_err(|e| std::io::Error::other(e.message))?;
    protocol::write_frame(w, FrameKind::Response, id, &body, &[payload])
}

fn peer_reply(w: &mut Writer, id: u64, resp: &PeerResponse, payload: &[u8]) -> std::io::Result<()> {
    let body = protocol::encode_body(resp).map_err(|e| std::io::Error::other(e.message))?;
    protocol::write_frame(w, FrameKind::PeerResponse, id, &body, &[payload])
}
