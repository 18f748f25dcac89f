//! The handshake family: requests about the connection itself.

use super::Session;
use crate::Server;
use pdcx_core::protocol::{HandshakeRequest, HandshakeResponse, ServerInfo};
use pdcx_core::Result;

pub(super) fn handle(
    server: &Server,
    req: HandshakeRequest,
    sess: &mut Session,
) -> Result<HandshakeResponse> {
    Ok(match req {
        HandshakeRequest::Ping(_) => HandshakeResponse::Welcome(ServerInfo {
            rank: server.config.rank,
            size: server.config.size,
        }),
        HandshakeRequest::AttachShm(a) => {
            sess.shm
                .attach(&server.secret, a.arena, a.pid, a.fd, &a.name, a.len)?;
            HandshakeResponse::Attached
        }
    })
}
