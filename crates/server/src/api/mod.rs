//! Client requests, answered by family: one module per family of `pdcx_core::protocol`, one
//! arm per family here. Whether a request writes (home copies wait while writes come:
//! `HomeCopier::note_write`) is a property of its family (`Request::writes`).

pub(crate) mod access;
mod admin;
mod analysis;
mod catalog;
mod handshake;
pub(crate) mod peer;
mod read;
mod session;
mod stream;
mod write;

use crate::Server;
use pdcx_core::protocol::{Request, Response, WriteRequest};
use pdcx_core::Result;
pub(crate) use session::{
    client_gone, drain, no_payload, Caller, Reader, Session, GONE_MID_TRANSFER, RECV_KEEP,
};

/// Answers one client request: the reply and its payload.
pub(crate) fn handle(
    server: &Server,
    req: Request,
    payload_len: u64,
    reader: &mut Reader,
    sess: &mut Session,
) -> Result<(Response, Vec<u8>)> {
    if req.writes() {
        server.homecopy.note_write();
    }
    // Only a stage carries a payload; it reads it itself.
    if !matches!(req, Request::Write(WriteRequest::Stage(_))) {
        no_payload(reader, payload_len)?;
    }
    if let Err(e) = access::check_request(server, sess, &req) {
        // The framing stays intact: a refused stage's payload is read and dropped.
        if matches!(req, Request::Write(WriteRequest::Stage(_))) {
            drain(reader, payload_len)?;
        }
        return Err(e);
    }
    let none = Vec::new;
    Ok(match req {
        Request::Handshake(r) => (
            Response::Handshake(handshake::handle(server, r, sess)?),
            none(),
        ),
        Request::Catalog(r) => (Response::Catalog(catalog::handle(server, r, sess)?), none()),
        Request::Write(r) => (
            Response::Write(write::handle(server, r, payload_len, reader, sess)?),
            none(),
        ),
        Request::Read(r) => {
            let (resp, data) = read::handle(server, r, sess)?;
            (Response::Read(resp), data)
        }
        Request::Analysis(r) => {
            let (resp, data) = analysis::handle(server, r, sess)?;
            (Response::Analysis(resp), data)
        }
        Request::Stream(r) => (Response::Stream(stream::handle(server, r, sess)?), none()),
        Request::Admin(r) => {
            if r.needs_admin() {
                sess.require_admin(r.name())?;
            }
            (Response::Admin(admin::handle(server, r)?), none())
        }
    })
}
