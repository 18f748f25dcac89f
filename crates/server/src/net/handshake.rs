//! Challenge, `Hello`, `Welcome`: who connects, and the proof that it holds the deployment
//! secret.

use super::{Reader, Writer};
use crate::Server;
use pdcx_core::protocol::{self, FrameKind, Hello, Role, ServerInfo};
use pdcx_core::{Error, ErrorKind, Result};
use std::time::Duration;

/// Challenge, `Hello`, `Welcome`: returns the role the other side proved.
pub(super) fn handshake(server: &Server, reader: &mut Reader, writer: &mut Writer) -> Result<Role> {
    let nonce: [u8; protocol::NONCE_LEN] = rand::random();
    protocol::write_frame(writer, FrameKind::Challenge, 0, &nonce, &[])
        .map_err(|e| Error::io("sending challenge", &e))?;
    reader
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| Error::io("socket", &e))?;
    let hb = protocol::read_header_bytes(reader)?;
    let theirs = protocol::header_version(&hb);
    if protocol::has_magic(&hb) && theirs != protocol::VERSION {
        let ours = protocol::VERSION;
        let who = reader.get_ref().peer_desc();
        eprintln!(
            "pdcx server {}: refused a connection from {who}: it speaks pdcx protocol {theirs}, this server {ours}",
            server.config.rank
        );
        return Err(Error::protocol(format!(
            "this server (rank {}) speaks pdcx protocol {ours}, the connecting side {theirs}: \
             clients and servers must come from the same pdcx release (upgrade the older side)",
            server.config.rank
        )));
    }
    // A Hello is a role and a 32-byte tag; allow a little slack, never megabytes.
    let (head, body) = protocol::finish_frame_head(reader, &hb, 256, 0)?;
    let refused = |why: &str| Error::new(ErrorKind::Auth, format!("authentication failed: {why}"));
    if head.kind != FrameKind::Hello {
        return Err(refused("the connection did not answer the challenge"));
    }
    let hello: Hello =
        protocol::decode_body(&body).map_err(|_| refused("malformed answer to the challenge"))?;
    if !protocol::hello_verify(&server.secret, &nonce, hello.role, &hello.tag) {
        return Err(refused("this client does not hold the deployment secret"));
    }
    if let Role::Peer { rank } = hello.role {
        if rank >= server.config.size {
            return Err(refused(&format!(
                "server {rank} is not part of this deployment of {} servers",
                server.config.size
            )));
        }
    }
    crate::limits::after_handshake(reader.get_ref(), &server.config.limits)?;
    welcome(
        writer,
        Ok(ServerInfo {
            rank: server.config.rank,
            size: server.config.size,
        }),
    )
    .map_err(|e| Error::io("sending welcome", &e))?;
    Ok(hello.role)
}

/// The handshake's answer: this server's rank and size, or why it refused.
pub(super) fn welcome(w: &mut Writer, r: Result<ServerInfo>) -> std::io::Result<()> {
    let body = protocol::encode_body(&r).map_err(|e| std::io::Error::other(e.message))?;
    protocol::write_frame(w, FrameKind::Welcome, 0, &body, &[])
}
