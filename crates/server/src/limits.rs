//! What one server accepts from its clients, and how it lets go of the ones that stop
//! cooperating (docs/ARCHITECTURE.md, *Limits*).
//!
//! Every connection has its own thread, which reads one request, answers it, and only then
//! reads the next: a client that pipelines requests without reading its replies fills its own
//! socket buffers and stalls only its own thread. These limits bound what such a client (or a
//! flood of clients) can hold:
//! - `max_connections`: connections beyond it get an error frame saying so and are closed;
//! - `write_timeout`: a reply that makes no progress for this long (the client stopped reading)
//!   closes the connection, freeing its thread and buffers;
//! - `frame_timeout`: a request whose bytes stop arriving half way (header, body or payload)
//!   for this long closes the connection;
//! - `idle_timeout` (off by default): a connection with no request for this long is closed
//!   (clients reconnect transparently; a connection holding staged, uncommitted writes is kept);
//! - `keep_buffers_bytes`: between requests a connection keeps its receive and read buffers
//!   (so a steady stream of transfers does not page-fault fresh memory), but all connections
//!   together keep about this much: each keeps at most its share;
//! - `handshake_timeout`: a connection must authenticate within this long in all, however
//!   slowly its bytes come (a total deadline, not one per read);
//! - `max_handshakes`: connections authenticating at once; past it, room is made by closing
//!   unverified connections past their grace (`net::Pending`), so stalling connections cannot
//!   crowd out honest ones;
//! - the frame size limits live in the protocol (`MAX_BODY`) and in `ServerConfig::max_payload`.

use pdcx_core::config;
use pdcx_core::protocol::{self, FrameKind, Response};
use pdcx_core::{Error, ErrorKind, Result};
use pdcx_transport::Stream;
use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Client (and peer) connections served at once.
    pub max_connections: usize,
    /// Longest a reply may make no progress before the connection is dropped (None: forever).
    pub write_timeout: Option<Duration>,
    /// Longest a started request may make no progress before the connection is dropped.
    pub frame_timeout: Option<Duration>,
    /// Longest a connection may wait between requests (None: forever).
    pub idle_timeout: Option<Duration>,
    /// Buffers all connections together keep between requests (each keeps at most
    /// this / open connections of each kind of buffer).
    pub keep_buffers_bytes: u64,
    /// Longest a connection may take to authenticate, however its bytes trickle in.
    pub handshake_timeout: Duration,
    /// Connections in their handshake at once; past it the oldest is closed (`net::Pending`).
    pub max_handshakes: usize,
}

/// Defaults: far above what one node's clients open, and long enough for a loaded machine.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_FRAME_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_KEEP_BUFFERS: u64 = 1 << 30;
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A quarter of the connections. A connection waiting in its handshake costs a sleeping thread
/// for at most the handshake timeout; closing one early to make room costs an accept, a
/// thread and a challenge each time a flood reconnects. Measured in `bench/soak` (1,000
/// honest clients against 1,000 reconnecting hostile threads, 2 vCPUs): with 256 places the
/// churn (~760 closed connections a second) starved the honest handshakes and 98 of 1,000
/// timed out; with 1,024 every one connected (`bench/RESULTS.md`).
pub const DEFAULT_MAX_HANDSHAKES: usize = 1024;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            write_timeout: Some(DEFAULT_WRITE_TIMEOUT),
            frame_timeout: Some(DEFAULT_FRAME_TIMEOUT),
            idle_timeout: None,
            keep_buffers_bytes: DEFAULT_KEEP_BUFFERS,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            max_handshakes: DEFAULT_MAX_HANDSHAKES,
        }
    }
}

/// Environment variables that set the limits (read by `pdcx server`).
pub const ENV_MAX_CONNECTIONS: &str = "PDCX_MAX_CONNECTIONS";
pub const ENV_WRITE_TIMEOUT: &str = "PDCX_WRITE_TIMEOUT_S";
pub const ENV_FRAME_TIMEOUT: &str = "PDCX_FRAME_TIMEOUT_S";
pub const ENV_IDLE_TIMEOUT: &str = "PDCX_IDLE_TIMEOUT_S";
pub const ENV_MAX_PAYLOAD: &str = "PDCX_MAX_PAYLOAD_MB";
pub const ENV_KEEP_BUFFERS: &str = "PDCX_KEEP_BUFFERS_MB";

/// The setting's value from the environment (`None`: unset), parsed and bounded as declared.
fn env_u64(setting: &config::Setting) -> Result<Option<u64>> {
    match setting.raw() {
        None => Ok(None),
        Some(v) => Ok(Some(setting.parse_count(&v)?)),
    }
}

/// Seconds from the environment; 0 means no timeout.
fn env_secs(setting: &config::Setting, default: Option<Duration>) -> Result<Option<Duration>> {
    Ok(match env_u64(setting)? {
        None => default,
        Some(0) => None,
        Some(s) => Some(Duration::from_secs(s)),
    })
}

impl Limits {
    /// The defaults, overridden by `PDCX_MAX_CONNECTIONS`, `PDCX_WRITE_TIMEOUT_S`,
    /// `PDCX_FRAME_TIMEOUT_S`, `PDCX_IDLE_TIMEOUT_S` (0 turns a timeout off) and
    /// `PDCX_KEEP_BUFFERS_MB`.
    pub fn from_env() -> Result<Limits> {
        let d = Limits::default();
        // The declared bounds refuse 0.
        let max_connections =
            env_u64(&config::MAX_CONNECTIONS)?.map_or(d.max_connections, |n| n as usize);
        Ok(Limits {
            max_connections,
            write_timeout: env_secs(&config::WRITE_TIMEOUT_S, d.write_timeout)?,
            frame_timeout: env_secs(&config::FRAME_TIMEOUT_S, d.frame_timeout)?,
            idle_timeout: env_secs(&config::IDLE_TIMEOUT_S, d.idle_timeout)?,
            keep_buffers_bytes: match env_u64(&config::KEEP_BUFFERS_MB)? {
                None => d.keep_buffers_bytes,
                Some(mb) => mb.checked_mul(1 << 20).ok_or_else(|| {
                    Error::invalid(format!("{ENV_KEEP_BUFFERS}={mb} is out of range"))
                })?,
            },
            // The declared bounds refuse 0 for both: a handshake always has a deadline.
            handshake_timeout: env_u64(&config::HANDSHAKE_TIMEOUT_S)?
                .map_or(d.handshake_timeout, Duration::from_secs),
            max_handshakes: env_u64(&config::MAX_HANDSHAKES)?
                .map_or(d.max_handshakes, |n| n as usize),
        })
    }
}

/// Applies the environment's limits to a server's config (`pdcx server` calls this), including
/// `PDCX_MAX_PAYLOAD_MB`, the largest bulk payload of one frame.
pub fn apply_env(config: &mut crate::ServerConfig) -> Result<()> {
    config.limits = Limits::from_env()?;
    // Read again at each handshake; a malformed value stops the start instead.
    config::WIRE
        .word()
        .map_err(|e| Error::invalid(e.to_string()))?;
    if let Some(mb) = env_u64(&config::MAX_PAYLOAD_MB)? {
        config.max_payload = mb
            .checked_mul(1 << 20)
            .filter(|&b| b > 0)
            .ok_or_else(|| Error::invalid(format!("{ENV_MAX_PAYLOAD}={mb} is out of range")))?;
    }
    Ok(())
}

/// The largest buffer of one kind a connection may keep until its next request: its share of
/// `keep_buffers_bytes` among the open connections, and never more than `max`. Without the
/// share, 1,000 connections that each once moved 32 MiB would pin 64 GB while idle.
pub(crate) fn keep_limit(server: &crate::Server, max: usize) -> usize {
    let open = server.connections.load(Ordering::Relaxed);
    share(server.config.limits.keep_buffers_bytes, open, max)
}

fn share(budget: u64, open: u64, max: usize) -> usize {
    (budget / open.max(1)).min(max as u64) as usize
}

/// Counts open connections against `max_connections`.
#[derive(Clone)]
pub(crate) struct Admission {
    open: Arc<AtomicUsize>,
    max: usize,
}

/// One admitted connection; dropping it frees its slot.
pub(crate) struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Admission {
    pub(crate) fn new(max: usize) -> Admission {
        Admission {
            open: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }

    /// A slot, or None when `max` connections are open.
    pub(crate) fn admit(&self) -> Option<Slot> {
        let mut n = self.open.load(Ordering::SeqCst);
        loop {
            if n >= self.max {
                return None;
            }
            match self
                .open
                .compare_exchange(n, n + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return Some(Slot(self.open.clone())),
                Err(now) => n = now,
            }
        }
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }
}

/// Tells a connection the server will not serve it, in an error frame where a client expects
/// the challenge, then closes it. Never blocks the accept loop for long: the frame is small and
/// the write is bounded.
pub(crate) fn refuse(stream: Stream, why: String) {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
    let e = Error::new(ErrorKind::Unavailable, why);
    if let Ok(body) = protocol::encode_body(&Response::Error(e)) {
        let mut w = &stream;
        let _ = protocol::write_frame(&mut w, FrameKind::Response, 0, &body, &[]);
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// Applies the write timeout to a new connection.
pub(crate) fn on_connect(stream: &Stream, limits: &Limits) {
    let _ = stream.set_write_timeout(limits.write_timeout);
}

/// Waits for the first byte of the next request, under the idle timeout, then arms the frame
/// timeout for the rest of it. False: the client closed the connection, or stayed idle past
/// the idle timeout while `may_idle_out` (nothing staged that a close would lose).
pub(crate) fn await_request(
    reader: &mut BufReader<Stream>,
    limits: &Limits,
    may_idle_out: bool,
) -> bool {
    if reader.buffer().is_empty() {
        // A client issuing back-to-back small operations sends the next one within
        // microseconds of this reply: poll before sleeping (see `spin_budget`).
        pdcx_transport::stream::spin_until_readable(
            reader.get_ref(),
            pdcx_transport::stream::spin_budget(),
        );
        let idle = if may_idle_out {
            limits.idle_timeout
        } else {
            None
        };
        if idle.is_none() {
            // Waiting as long as it takes (the default): the socket keeps its frame timeout,
            // which only wakes this wait now and then. Switching timeouts around every request
            // cost two setsockopt calls per request, a tenth of a small write.
            loop {
                match reader.fill_buf() {
                    Ok([]) => return false, // closed by the client
                    Ok(_) => return true,
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::Interrupted
                                | std::io::ErrorKind::WouldBlock
                                | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        continue
                    }
                    Err(_) => return false,
                }
            }
        }
        if idle != limits.frame_timeout && reader.get_ref().set_read_timeout(idle).is_err() {
            return false;
        }
        loop {
            match reader.fill_buf() {
                Ok([]) => return false, // closed by the client
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // Idle past the limit (WouldBlock/TimedOut), or the socket failed.
                Err(_) => return false,
            }
        }
        if idle != limits.frame_timeout
            && reader
                .get_ref()
                .set_read_timeout(limits.frame_timeout)
                .is_err()
        {
            return false;
        }
    }
    true
}

/// The read of a request's payload stopped: the client went away or stalled past the frame
/// timeout. Either way the stream is no longer framed, so the connection must close.
pub(crate) fn stalled_or_gone(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::UnexpectedEof | K::WouldBlock | K::TimedOut | K::ConnectionReset | K::BrokenPipe
    )
}

/// Arms the frame timeout on a freshly authenticated connection (the handshake has its own).
pub(crate) fn after_handshake(stream: &Stream, limits: &Limits) -> Result<()> {
    stream
        .set_read_timeout(limits.frame_timeout)
        .map_err(|e| Error::io("socket", &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_keeps_its_share_of_the_buffer_budget() {
        let gib = 1u64 << 30;
        // Few connections: the per-connection cap.
        assert_eq!(share(gib, 1, 64 << 20), 64 << 20);
        assert_eq!(share(gib, 0, 64 << 20), 64 << 20);
        // Many: their share, so the total stays at the budget.
        assert_eq!(share(gib, 1000, 64 << 20), (gib / 1000) as usize);
        assert!(share(gib, 1000, 64 << 20) * 1000 <= gib as usize);
        assert_eq!(share(0, 10, 64 << 20), 0);
    }
}
