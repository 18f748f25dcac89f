//! What a client connection keeps between requests, and reading (or skipping) the payload
//! that follows a request frame: shared by the request loop (`crate::net`) and the families.

use crate::engine::Staged;
use crate::shm::Attached;
use pdcx_core::{Error, ErrorKind, Result};
use pdcx_transport::Stream;
use std::collections::HashMap;
use std::io::{BufReader, Read};

pub(crate) type Reader = BufReader<Stream>;

/// What one connection keeps between requests.
#[derive(Default)]
pub(crate) struct Session {
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
