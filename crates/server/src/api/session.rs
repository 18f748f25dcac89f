//! What a client connection keeps between requests, and reading (or skipping) the payload
//! that follows a request frame: shared by the request loop (`crate::net`) and the families.

use crate::engine::Staged;
use crate::shm::Attached;
use pdcx_core::{Error, ErrorKind, Result};
use pdcx_transport::Stream;
use std::collections::HashMap;
use std::io::{BufReader, Read};

pub(crate) type Reader = BufReader<Stream>;

/// Who is calling on a client connection, as its handshake proved it (never as a request
/// claims it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caller {
    /// The caller's user id: the kernel's word on this node, the user key's across nodes.
    pub uid: u32,
    /// The caller is the deployment's own user (it holds the deployment secret): the server
    /// acts with its rights anyway, so it reaches every object and any path the server can.
    pub deployment_user: bool,
    /// The connection asked for, and proved, the admin role: shut down, flush, change tiers.
    pub admin: bool,
}

/// What one connection keeps between requests.
#[derive(Default)]
pub(crate) struct Session {
    /// Who this connection's requests come from (`None` only in code paths that serve no
    /// client, e.g. tests that build a session by hand).
    pub(crate) caller: Option<Caller>,
    /// Writes staged by this connection and not committed yet; dropped if it disconnects.
    pub(crate) pending: HashMap<u64, Staged>,
    /// Stage payloads are received (or copied out of shared memory) into this buffer, reused
    /// from one request to the next.
    pub(crate) recv: Vec<u8>,
    /// Read replies are assembled in this buffer, kept from one request to the next so a
    /// steady stream of reads does not page-fault fresh memory for every reply.
    pub(crate) scratch: Vec<u8>,
    /// Shared-memory arenas the client attached (same-node clients only).
    pub(crate) shm: Attached,
    /// The log segment this connection's one-copy writes go to, its own (made on its first
    /// `Reserve`; released when the connection ends).
    pub(crate) writer: Option<pdcx_store::WriterLease>,
}

impl Session {
    /// Whether the caller is the deployment's own user (see [`Caller::deployment_user`]).
    pub(crate) fn deployment_user(&self) -> bool {
        self.caller.is_some_and(|c| c.deployment_user)
    }

    /// Refuses `what` unless the connection proved the admin role.
    pub(crate) fn require_admin(&self, what: &str) -> Result<()> {
        match self.caller {
            Some(c) if c.admin => Ok(()),
            Some(c) => Err(Error::new(
                ErrorKind::Auth,
                format!(
                    "`{what}` needs the admin role, and this connection (uid {}) is a client: \
                     run it as the deployment's user with `pdcx server ...`",
                    c.uid
                ),
            )),
            None => Err(Error::new(
                ErrorKind::Auth,
                format!("`{what}` needs the admin role"),
            )),
        }
    }
}

const GONE_MID_PAYLOAD: &str = "connection closed mid-payload";
pub(crate) const GONE_MID_TRANSFER: &str = "client disconnected mid-transfer";

/// The error says this connection's client went away (so no reply can reach it).
pub(crate) fn client_gone(e: &Error) -> bool {
    e.kind == ErrorKind::Unavailable
        && (e.message == GONE_MID_PAYLOAD || e.message == GONE_MID_TRANSFER)
}

pub(crate) fn drain(r: &mut Reader, n: u64) -> Result<()> {
    let copied = std::io::copy(&mut r.take(n), &mut std::io::sink())
        .map_err(|e| Error::io("reading payload", &e))?;
    if copied < n {
        return Err(Error::new(ErrorKind::Unavailable, GONE_MID_PAYLOAD));
    }
    Ok(())
}

/// Largest receive buffer a connection keeps between stage requests.
pub(crate) const RECV_KEEP: usize = 256 << 20;

pub(crate) fn no_payload(r: &mut Reader, n: u64) -> Result<()> {
    if n > 0 {
        drain(r, n)?;
        return Err(Error::protocol("this request takes no payload"));
    }
    Ok(())
}
