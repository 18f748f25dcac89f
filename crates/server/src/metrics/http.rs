//! The exporter's HTTP side: accepting, admitting (at most [`MAX_CONNECTIONS`] at once),
//! reading a bounded request head within a deadline, answering and closing. A scrape must
//! be answered even while other clients stall, so nothing here waits on one client for long
//! or holds memory a client can grow.

use super::render;
use crate::Server;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Connections the exporter serves at once; one more is answered `503` and closed at once.
/// Scrapes are rare and small: a handful of slots is plenty for Prometheus and an operator's
/// `curl`, and it bounds the threads and buffers clients that stall can hold.
pub const MAX_CONNECTIONS: usize = 8;

/// The whole request head must arrive within this long of the connection being accepted,
/// however slowly its bytes drip in (a per-read timeout alone lets a client that sends a byte
/// every few seconds hold a slot forever).
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);

/// Longest a response may make no progress (the client stopped reading).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest request head (request line and headers) read; a larger one gets `431` and is closed.
pub const MAX_HEAD: usize = 8 << 10;

/// The `/metrics` listener: one accepting thread, each connection served on a thread of its
/// own, at most [`MAX_CONNECTIONS`] at once, each within [`HEAD_DEADLINE`] and [`MAX_HEAD`].
pub struct Exporter {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// One of the exporter's connection slots; dropping it frees the slot.
struct Busy(Arc<AtomicUsize>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Exporter {
    pub fn start(addr: SocketAddr, server: Weak<Server>) -> std::io::Result<Exporter> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let busy = Arc::new(AtomicUsize::new(0));
        let thread = std::thread::Builder::new()
            .name("pdcx-metrics".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop2.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    if server.strong_count() == 0 {
                        break;
                    }
                    admit(&server, &busy, conn);
                }
            })?;
        Ok(Exporter {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept; it sees the flag and returns.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Serves `conn` on a thread of its own if a slot is free; else answers `503` from the
/// accepting thread (a fresh socket's send buffer takes the few bytes without blocking; the
/// write timeout covers the rest) and closes it.
fn admit(server: &Weak<Server>, busy: &Arc<AtomicUsize>, mut conn: TcpStream) {
    if busy.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
        busy.fetch_sub(1, Ordering::SeqCst);
        let _ = conn.set_write_timeout(Some(Duration::from_millis(200)));
        let body = b"metrics endpoint busy: too many connections at once\n";
        let _ = respond(&mut conn, "503 Service Unavailable", TEXT, body, false);
        return;
    }
    let slot = Busy(busy.clone());
    let server = server.clone();
    let spawned = std::thread::Builder::new()
        .name("pdcx-metrics-conn".into())
        .spawn(move || {
            let _slot = slot;
            if let Err(e) = serve(&server, conn) {
                tracing::debug!(error = %e, "metrics request failed");
            }
        });
    // A failed spawn drops the closure: the connection closes and the slot is freed.
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "metrics: cannot start a connection thread");
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

/// What a request head says, as far as the exporter cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// The head has not ended yet (no empty line); more bytes may complete it.
    Incomplete,
    /// Longer than [`MAX_HEAD`] without ending.
    TooLarge,
    /// Not an HTTP/1.x request line.
    Malformed,
    /// A whole head: its method and path (the target without its query).
    Request { method: String, path: String },
}

/// Parses the bytes received so far of a request head. Pure, so the fuzzer can drive it.
pub fn parse_head(buf: &[u8]) -> Head {
    let Some(end) = head_end(buf, 0) else {
        return if buf.len() > MAX_HEAD {
            Head::TooLarge
        } else {
            Head::Incomplete
        };
    };
    if end > MAX_HEAD {
        return Head::TooLarge;
    }
    let line = buf[..end].split(|&b| b == b'\n').next().unwrap_or(&[]);
    let Ok(line) = std::str::from_utf8(line) else {
        return Head::Malformed;
    };
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Head::Malformed;
    };
    if !version.starts_with("HTTP/1.")
        || method.is_empty()
        || !method.bytes().all(|b| b.is_ascii_uppercase())
    {
        return Head::Malformed;
    }
    let path = target.split('?').next().unwrap_or("");
    Head::Request {
        method: method.to_string(),
        path: path.to_string(),
    }
}

/// Where the head's ending empty line ends in `buf`, looking no earlier than `from` (minus the
/// few bytes an ending split across reads may have started with).
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let from = from.saturating_sub(3);
    let tail = buf.get(from..)?;
    let crlf = tail
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4);
    let lf = tail.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    let end = match (crlf, lf) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b)?,
    };
    Some(from + end)
}

/// How reading a head ended.
enum Received {
    Head(Vec<u8>),
    TooLarge,
    TimedOut,
    Closed,
}

/// Reads a request head: until its empty line, [`MAX_HEAD`] bytes, or `deadline`.
fn read_head(conn: &mut TcpStream, deadline: Instant) -> std::io::Result<Received> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Received::TimedOut);
        }
        conn.set_read_timeout(Some(left))?;
        // Never more than one byte past the limit: enough to tell "too large".
        let room = (MAX_HEAD + 1 - head.len()).min(buf.len());
        let n = match conn.read(&mut buf[..room]) {
            Ok(0) => return Ok(Received::Closed),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(Received::TimedOut)
            }
            Err(e) => return Err(e),
        };
        let before = head.len();
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head_end(&head, before) {
            if end > MAX_HEAD {
                return Ok(Received::TooLarge);
            }
            return Ok(Received::Head(head));
        }
        if head.len() > MAX_HEAD {
            return Ok(Received::TooLarge);
        }
    }
}

const TOO_LARGE: &str = "431 Request Header Fields Too Large";

/// Answers a request that will not be served, then reads (and drops) what the client still
/// sends for a moment: closing a socket with unread bytes resets the connection, which can
/// destroy the answer before the client reads it.
fn refuse(conn: &mut TcpStream, status: &str, body: &[u8]) -> std::io::Result<()> {
    respond(conn, status, TEXT, body, false)?;
    conn.shutdown(std::net::Shutdown::Write)?;
    conn.set_read_timeout(Some(Duration::from_millis(500)))?;
    let mut sink = [0u8; 4096];
    let mut left = 64usize << 10;
    while left > 0 {
        match conn.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
    Ok(())
}

/// Answers one HTTP/1.x request and closes the connection. The server is only looked at once
/// the whole head is in, and let go of before the response is written, so a stalled client
/// never keeps a stopped server alive.
fn serve(server: &Weak<Server>, mut conn: TcpStream) -> std::io::Result<()> {
    let deadline = Instant::now() + HEAD_DEADLINE;
    conn.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let head = match read_head(&mut conn, deadline)? {
        Received::Head(h) => h,
        Received::Closed => return Ok(()),
        Received::TimedOut => {
            let body = b"request head not received in time\n";
            return respond(&mut conn, "408 Request Timeout", TEXT, body, false);
        }
        Received::TooLarge => return refuse(&mut conn, TOO_LARGE, b"request head too large\n"),
    };
    let (method, path) = match parse_head(&head) {
        Head::Request { method, path } => (method, path),
        Head::TooLarge => return refuse(&mut conn, TOO_LARGE, b"request head too large\n"),
        Head::Incomplete | Head::Malformed => {
            return refuse(&mut conn, "400 Bad Request", b"not an HTTP/1.x request\n")
        }
    };
    let (status, ctype, body): (&str, &str, std::borrow::Cow<'static, [u8]>) =
        match (method.as_str(), path.as_str()) {
            ("GET" | "HEAD", "/metrics") => {
                let Some(s) = server.upgrade() else {
                    return Ok(());
                };
                s.metrics.scrapes.fetch_add(1, Ordering::Relaxed);
                let body = render(&s).into_bytes();
                (
                    "200 OK",
                    "text/plain; version=0.0.4; charset=utf-8",
                    body.into(),
                )
            }
            ("GET" | "HEAD", "/") => (
                "200 OK",
                TEXT,
                b"pdcx server metrics: GET /metrics\n"[..].into(),
            ),
            ("GET" | "HEAD", _) => ("404 Not Found", TEXT, b"not found\n"[..].into()),
            _ => (
                "405 Method Not Allowed",
                TEXT,
                b"only GET /metrics\n"[..].into(),
            ),
        };
    respond(&mut conn, status, ctype, &body, method == "HEAD")
}

/// Writes a whole response; `head_only` (a HEAD request) sends the headers GET would get.
fn respond(
    conn: &mut TcpStream,
    status: &str,
    ctype: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    if !head_only {
        conn.write_all(body)?;
    }
    conn.flush()
}
