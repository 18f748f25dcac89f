//! Challenge, `Hello`, `Welcome`: who connects, the proof that it holds the deployment secret,
//! this server's proof back, and the protection of the frames that follow
//! (`pdcx_core::protocol::handshake` has the transcript and the proofs).
//!
//! The whole handshake must finish within `Limits::handshake_timeout`, however the bytes
//! trickle in, and reads at most a header and a small body: a connection that has not proved
//! anything costs one thread for a bounded time and a few hundred bytes.

use super::{Reader, Writer};
use crate::api::Caller;
use crate::Server;
use pdcx_core::protocol::{self, FrameKind, Hello, Role, ServerInfo, SessionKeys, Welcome, Wire};
use pdcx_core::{Error, ErrorKind, Result};
use std::io::{BufRead, Read};
use std::time::{Duration, Instant};

/// Who the other side proved to be.
pub(super) struct Authenticated {
    pub role: Role,
    pub caller: Caller,
}

/// Reads through the connection's buffer, each read waiting at most until `deadline`.
struct ByDeadline<'a> {
    reader: &'a mut Reader,
    deadline: Instant,
}

impl Read for ByDeadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.reader.buffer().is_empty() {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::ErrorKind::TimedOut.into());
            }
            // A zero timeout would mean "wait forever".
            let left = left.max(Duration::from_millis(1));
            self.reader.get_ref().set_read_timeout(Some(left))?;
        }
        let n = {
            let avail = self.reader.fill_buf()?;
            let n = avail.len().min(buf.len());
            buf[..n].copy_from_slice(&avail[..n]);
            n
        };
        self.reader.consume(n);
        Ok(n)
    }
}

fn refused(why: &str) -> Error {
    Error::new(ErrorKind::Auth, format!("authentication failed: {why}"))
}

/// Challenge, `Hello`, `Welcome`; then protects the connection as agreed.
pub(super) fn handshake(
    server: &Server,
    reader: &mut Reader,
    writer: &mut Writer,
) -> Result<Authenticated> {
    let limits = &server.config.limits;
    let deadline = Instant::now() + limits.handshake_timeout;
    let nonce: [u8; protocol::NONCE_LEN] = rand::random();
    protocol::write_frame(writer, FrameKind::Challenge, 0, &nonce, &[])
        .map_err(|e| Error::io("sending challenge", &e))?;
    let mut r = ByDeadline { reader, deadline };
    let hb = protocol::read_header_bytes(&mut r).map_err(|e| late(e, deadline, limits))?;
    let theirs = protocol::header_version(&hb);
    if protocol::has_magic(&hb) && theirs != protocol::VERSION {
        let ours = protocol::VERSION;
        let who = r.reader.get_ref().peer_desc();
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
    // A Hello is a role, a nonce, a binding of two addresses and a tag: a few hundred bytes.
    let (head, body) =
        protocol::finish_frame_head(&mut r, &hb, 512, 0).map_err(|e| late(e, deadline, limits))?;
    if head.kind != FrameKind::Hello {
        return Err(refused("the connection did not answer the challenge"));
    }
    let hello: Hello =
        protocol::decode_body(&body).map_err(|_| refused("malformed answer to the challenge"))?;
    let stream = reader.get_ref();
    let mine = stream
        .channel_binding(false)
        .map_err(|e| Error::io("socket", &e))?;
    // On this node the kernel says who connects (None between nodes).
    let uid = stream
        .peer_uid()
        .map_err(|e| refused(&format!("cannot tell who is connecting: {e}")))?;
    let key = hello.key(&server.secret);
    let caller = identify(server, &hello, &nonce, &key, uid)?;
    if hello.binding != mine {
        let who = stream.peer_desc();
        eprintln!(
            "pdcx server {}: refused a relayed handshake from {who}: its proof names the channel {:?}, this one is {mine:?}",
            server.config.rank, hello.binding
        );
        return Err(refused(&format!(
            "the proof names another channel ({:?}, this connection is {mine:?}): it was relayed, \
             or an address translation sits between client and server (connect to the \
             server's own address)",
            hello.binding
        )));
    }
    if let Role::Peer { rank } = hello.role {
        if rank >= server.config.size {
            return Err(refused(&format!(
                "server {rank} is not part of this deployment of {} servers",
                server.config.size
            )));
        }
    }
    let setting = pdcx_core::config::WIRE
        .word()
        .map_err(|e| Error::invalid(e.to_string()))?;
    let ours = stream
        .wire_wanted(setting)
        .map_err(|e| Error::io("socket", &e))?;
    let wire = ours.max(hello.wire);
    if hello.by_kernel() && wire != Wire::Plain {
        // The kernel's word proves who connects but gives no key to protect frames with.
        return Err(refused(&format!(
            "this connection must be protected ({wire:?}), which needs a key: connect with \
             your user key (PDCX_USER_KEY, from `pdcx server user-key`)"
        )));
    }
    let info = ServerInfo {
        rank: server.config.rank,
        size: server.config.size,
    };
    let welcome = Welcome::new(&key, &hello, info, wire);
    crate::limits::after_handshake(reader.get_ref(), limits)?;
    send_welcome(writer, Ok(welcome.clone())).map_err(|e| Error::io("sending welcome", &e))?;
    if wire != Wire::Plain {
        let keys = SessionKeys::derive(&key, &hello, &welcome);
        let encrypt = wire == Wire::Encrypted;
        reader
            .get_mut()
            .protect_reads(&keys.client_to_server, encrypt)
            .map_err(|e| Error::io("socket", &e))?;
        writer
            .get_mut()
            .protect_writes(&keys.server_to_client, encrypt)
            .map_err(|e| Error::io("socket", &e))?;
    }
    Ok(Authenticated {
        role: hello.role,
        caller,
    })
}

/// Who proved what: the deployment's own user (the secret), or another user of the
/// deployment (its user key, or on this node the kernel's word). `uid` is the kernel's word
/// on who connects, when the connection is on this node.
fn identify(
    server: &Server,
    hello: &Hello,
    nonce: &[u8],
    key: &[u8],
    uid: Option<u32>,
) -> Result<Caller> {
    let me = nix_euid();
    let Some(user) = hello.user else {
        if !hello.verify(key, nonce) {
            return Err(refused("this client does not hold the deployment secret"));
        }
        // The secret alone does not make another user this deployment's user.
        if let Some(uid) = uid {
            if uid != me && uid != 0 {
                return Err(refused(&format!(
                    "the connecting process runs as uid {uid}, this server as uid {me}: it \
                     holds the deployment secret but is not the deployment's user (another \
                     user connects as itself, if the deployment's `users` setting lists it)"
                )));
            }
        }
        return Ok(Caller {
            uid: uid.unwrap_or(me),
            deployment_user: true,
            admin: hello.role == Role::Admin,
        });
    };
    if hello.role != Role::Client {
        return Err(refused(&format!(
            "uid {user} asked for the {:?} role: another user of a deployment connects as a \
             client only",
            hello.role
        )));
    }
    if user != me && !server.users.allows(user) {
        return Err(refused(&format!(
            "uid {user} is not a user of this deployment (its operator lists the users it \
             serves in the `users` setting)"
        )));
    }
    if hello.by_kernel() {
        if uid != Some(user) {
            return Err(refused(&match uid {
                Some(k) => format!("the connection claims uid {user}, the kernel says uid {k}"),
                None => format!(
                    "uid {user} offered no key, and the kernel cannot vouch for a connection \
                     from another node: use your user key (PDCX_USER_KEY)"
                ),
            }));
        }
    } else {
        if !hello.verify(key, nonce) {
            return Err(refused(&format!(
                "this client does not hold the key of uid {user}"
            )));
        }
        if let Some(k) = uid.filter(|&k| k != user) {
            return Err(refused(&format!(
                "the connection proves the key of uid {user}, the kernel says it runs as uid {k}: \
                 a user key is its user's alone"
            )));
        }
    }
    Ok(Caller {
        uid: user,
        deployment_user: user == me,
        admin: false,
    })
}

fn nix_euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A read that ran out of the handshake's time says so.
fn late(e: Error, deadline: Instant, limits: &crate::limits::Limits) -> Error {
    if Instant::now() + Duration::from_millis(5) >= deadline {
        refused(&format!(
            "the handshake did not finish within {} s",
            limits.handshake_timeout.as_secs_f64()
        ))
    } else {
        e
    }
}

/// The handshake's answer: this server's `Welcome`, or why it refused.
pub(super) fn send_welcome(w: &mut Writer, r: Result<Welcome>) -> std::io::Result<()> {
    let body = protocol::encode_body(&r).map_err(|e| std::io::Error::other(e.message))?;
    protocol::write_frame(w, FrameKind::Welcome, 0, &body, &[])
}
