//! The byte stream under a connection: TCP, or a Unix-domain socket to a server on this node
//! (the cheaper channel: no TCP/IP stack, no loopback device, fewer wake-ups per message).
//! Both carry the same frames and the same handshake; only the socket differs. After the
//! handshake a TCP connection between nodes is protected ([`Stream::Sealed`], `crate::seal`).

use crate::seal::{Opener, Sealer};
use pdcx_core::protocol::{self, Wire};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Where a server's Unix-domain listener is, as the cluster file advertises it: a path, or
/// (`@` then the name) an abstract socket in the server's network namespace, used when the
/// root's path is too long for `sun_path`.
pub const ABSTRACT_PREFIX: char = '@';

pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// A TCP connection whose frames are protected after the handshake; the read half and
    /// the write half of a connection each protect their own direction.
    Sealed(Box<Sealed>),
}

pub struct Sealed {
    tcp: TcpStream,
    opener: Option<Opener>,
    sealer: Option<Sealer>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stream::Tcp(s) => f.debug_tuple("Tcp").field(s).finish(),
            Stream::Unix(s) => f.debug_tuple("Unix").field(s).finish(),
            Stream::Sealed(s) => f.debug_tuple("Sealed").field(&s.tcp).finish(),
        }
    }
}

/// The credentials of the process at the other end of a Unix socket, as the kernel recorded
/// them when it connected (`SO_PEERCRED`): nothing the process can claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
}

/// `SO_PEERCRED` of a Unix socket.
pub fn peer_cred(s: &UnixStream) -> io::Result<PeerCred> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid socket fd, and `cred`/`len` describe a writable ucred.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: cred.pid as u32,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// The uid owning the TCP socket bound to `local` and connected to `remote` in this network
/// namespace, from `/proc/net/tcp` (IPv4) or `/proc/net/tcp6`.
fn loopback_owner(local: std::net::SocketAddr, remote: std::net::SocketAddr) -> io::Result<u32> {
    use std::net::SocketAddr;
    fn hex(a: SocketAddr) -> String {
        match a {
            SocketAddr::V4(v) => format!(
                "{:08X}:{:04X}",
                u32::from_ne_bytes(v.ip().octets()),
                v.port()
            ),
            SocketAddr::V6(v) => {
                let o = v.ip().octets();
                let words: String = o
                    .chunks(4)
                    .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
                    .collect();
                format!("{words}:{:04X}", v.port())
            }
        }
    }
    let table = if local.is_ipv4() {
        "/proc/net/tcp"
    } else {
        "/proc/net/tcp6"
    };
    let (want_local, want_remote) = (hex(local), hex(remote));
    let text = std::fs::read_to_string(table)?;
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() > 7 && f[1] == want_local && f[2] == want_remote {
            return f[7]
                .parse()
                .map_err(|_| io::Error::other(format!("{table}: unreadable uid {:?}", f[7])));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("no socket {local} -> {remote} in {table}"),
    ))
}

fn not_sealed_op(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{what} on a protected connection"),
    )
}

impl Stream {
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            // Each half owns its direction's sequence numbers: protect after cloning.
            Stream::Sealed(_) => return Err(not_sealed_op("cloning")),
        })
    }

    fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Stream::Tcp(s) => Some(s),
            Stream::Sealed(s) => Some(&s.tcp),
            Stream::Unix(_) => None,
        }
    }

    pub fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(d),
            s => s.tcp().expect("a TCP stream").set_read_timeout(d),
        }
    }

    pub fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(d),
            s => s.tcp().expect("a TCP stream").set_write_timeout(d),
        }
    }

    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.shutdown(how),
            s => s.tcp().expect("a TCP stream").shutdown(how),
        }
    }

    pub fn is_unix(&self) -> bool {
        matches!(self, Stream::Unix(_))
    }

    /// Who is on the other end, for messages: the TCP peer address, or "a local process".
    pub fn peer_desc(&self) -> String {
        match self {
            Stream::Unix(_) => "a process on this node (Unix socket)".into(),
            s => s
                .tcp()
                .and_then(|t| t.peer_addr().ok())
                .map_or_else(|| "?".into(), |a| a.to_string()),
        }
    }

    /// The credentials of the process at the other end of a Unix socket (None over TCP).
    pub fn peer_cred(&self) -> io::Result<Option<PeerCred>> {
        match self {
            Stream::Unix(s) => peer_cred(s).map(Some),
            _ => Ok(None),
        }
    }

    /// The uid of the process at the other end, when the kernel of this node knows it: a Unix
    /// socket's `SO_PEERCRED`, or for TCP over loopback the owner of the other end's socket
    /// (`/proc/net/tcp`, as `ss -e` shows it). None for TCP from another node.
    pub fn peer_uid(&self) -> io::Result<Option<u32>> {
        if let Stream::Unix(s) = self {
            return peer_cred(s).map(|c| Some(c.uid));
        }
        let t = self.tcp().expect("a TCP stream");
        let (me, other) = (t.local_addr()?, t.peer_addr()?);
        if !other.ip().is_loopback() {
            return Ok(None);
        }
        loopback_owner(other, me).map(Some)
    }

    /// This connection's channel binding (`pdcx_core::protocol::Hello::binding`) as this side
    /// sees it; `client` says which side this is. Both sides compute the same string unless
    /// something between them (a relay, an address translation) joined two connections.
    pub fn channel_binding(&self, client: bool) -> io::Result<String> {
        if let Stream::Unix(s) = self {
            let other = peer_cred(s)?.pid;
            let me = std::process::id();
            let (c, srv) = if client { (me, other) } else { (other, me) };
            return Ok(protocol::unix_binding(c, srv));
        }
        let t = self.tcp().expect("a TCP stream");
        let (me, other) = (t.local_addr()?, t.peer_addr()?);
        let (c, srv) = if client { (me, other) } else { (other, me) };
        Ok(protocol::tcp_binding(c, srv))
    }

    /// The protection this side wants on this connection under `PDCX_WIRE` (`setting`: auto,
    /// integrity, encrypt or plain): none on a Unix socket (the kernel names the peer and
    /// nothing crosses a network), encrypted and authenticated frames over TCP between nodes,
    /// and over loopback only when asked. `plain` wants none anywhere; since the stronger side wins,
    /// frames stay plain only when both sides say so.
    pub fn wire_wanted(&self, setting: &str) -> io::Result<Wire> {
        let Some(t) = self.tcp() else {
            return Ok(Wire::Plain);
        };
        Ok(match setting {
            "encrypt" => Wire::Encrypted,
            "integrity" => Wire::Integrity,
            "plain" => Wire::Plain,
            _ if t.peer_addr()?.ip().is_loopback() => Wire::Plain,
            // Between nodes, encrypted records: with AES-NI they cost less than integrity
            // alone, whose tag runs over the bytes as associated data without the fused
            // encrypt-and-hash path (bench/wire/run.py: 0.74-0.84x of plain against 0.89-0.92x).
            _ => Wire::Encrypted,
        })
    }

    /// Protects what this half reads from now on (the other side's `protect_writes`).
    pub fn protect_reads(&mut self, key: &[u8; 32], encrypt: bool) -> io::Result<()> {
        self.sealed()?.opener = Some(Opener::new(key, encrypt));
        Ok(())
    }

    /// Protects what this half writes from now on.
    pub fn protect_writes(&mut self, key: &[u8; 32], encrypt: bool) -> io::Result<()> {
        self.sealed()?.sealer = Some(Sealer::new(key, encrypt));
        Ok(())
    }

    fn sealed(&mut self) -> io::Result<&mut Sealed> {
        if let Stream::Tcp(t) = self {
            let tcp = t.try_clone()?;
            *self = Stream::Sealed(Box::new(Sealed {
                tcp,
                opener: None,
                sealer: None,
            }));
        }
        match self {
            Stream::Sealed(s) => Ok(s),
            _ => Err(not_sealed_op("protecting a Unix socket")),
        }
    }

    /// Verified bytes read from the socket but not yet returned (a protected stream's staged
    /// record): a caller that polls the socket before reading must not wait while these wait.
    pub fn buffered(&self) -> usize {
        match self {
            Stream::Sealed(s) => s.opener.as_ref().map_or(0, Opener::buffered),
            _ => 0,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Sealed(s) => match &mut s.opener {
                Some(o) => o.read(&mut s.tcp, buf),
                None => s.tcp.read(buf),
            },
        }
    }

    fn read_vectored(&mut self, bufs: &mut [io::IoSliceMut<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read_vectored(bufs),
            Stream::Unix(s) => s.read_vectored(bufs),
            s => {
                let first = bufs.iter_mut().find(|b| !b.is_empty());
                first.map_or(Ok(0), |b| s.read(b))
            }
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Sealed(s) => match &mut s.sealer {
                Some(w) => w.write(&mut s.tcp, buf),
                None => s.tcp.write(buf),
            },
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write_vectored(bufs),
            Stream::Unix(s) => s.write_vectored(bufs),
            s => {
                let first = bufs.iter().find(|b| !b.is_empty());
                first.map_or(Ok(0), |b| s.write(b))
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Unprotected writes through a shared reference: used before a handshake (refusing a
/// connection), never on a protected stream.
impl Write for &Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write(buf),
            Stream::Unix(s) => (&*s).write(buf),
            Stream::Sealed(_) => Err(not_sealed_op("a shared write")),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write_vectored(bufs),
            Stream::Unix(s) => (&*s).write_vectored(bufs),
            Stream::Sealed(_) => Err(not_sealed_op("a shared write")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// How long a thread about to block for the next message on a Unix socket first polls it
/// (`PDCX_SPIN_US`, default [`DEFAULT_SPIN_US`]; 0 turns it off). On a virtual machine, waking
/// a thread that sleeps on another, idle (halted) vCPU costs an inter-processor interrupt and a
/// host-side reschedule, tens of microseconds per wake-up: a 4 KiB write + wait between a
/// client and a server on different CPUs measured ~100 us p50 against ~31 us when they share
/// one (smallmem). Polling briefly covers that ping-pong (the reply, or the next
/// request of a client issuing back-to-back small operations) without the sleep. When the
/// other side runs on the same CPU, polling only delays it (it cannot preempt the poller at
/// once), so the poll is adaptive: see [`spin_until_readable`].
pub fn spin_budget() -> Duration {
    static SPIN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        let us = pdcx_core::config::SPIN_US.count_or_default();
        Duration::from_micros(us)
    })
}

/// The default of [`spin_budget`], in microseconds.
pub const DEFAULT_SPIN_US: u64 = 50;

/// How long a caller waiting for the reply to its call polls first (`PDCX_REPLY_SPIN_US`,
/// default [`DEFAULT_REPLY_SPIN_US`]; 0 turns it off): longer than [`spin_budget`], since a
/// small write to an object another server owns is answered only after the holder's own
/// round trip to the owner (~60 us when nothing else runs).
pub fn reply_spin_budget() -> Duration {
    static SPIN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        let us = pdcx_core::config::REPLY_SPIN_US.count_or_default();
        Duration::from_micros(us)
    })
}

/// The default of [`reply_spin_budget`], in microseconds.
pub const DEFAULT_REPLY_SPIN_US: u64 = 200;

thread_local! {
    /// Adaptive polling of this thread: polls that ran out of budget in a row, and how many
    /// waits to block at once before polling again.
    static SPIN_STATE: std::cell::Cell<(u32, u32)> = const { std::cell::Cell::new((0, 0)) };
}

/// Longest pause between polling attempts after failures: 1024 waits.
const MAX_SKIP_LOG2: u32 = 10;

/// Polls `s` (a Unix socket; TCP returns at once) until it has something to read (bytes, end
/// of stream or an error, all of which the caller's read then reports) or `budget` has passed;
/// the caller then reads, blocking if nothing came. Adaptive, per thread: a poll that runs out
/// of budget (the other side is slow, or shares this CPU and waits for the poller to stop)
/// makes the thread block at once for the next 2, 4, ... up to 1024 waits before it polls
/// again; a poll that succeeds resets that.
pub fn spin_until_readable(s: &Stream, budget: Duration) {
    use std::os::fd::AsRawFd;
    let Stream::Unix(u) = s else { return };
    if budget.is_zero() {
        return;
    }
    let (fails, skip) = SPIN_STATE.with(|c| c.get());
    if skip > 0 {
        SPIN_STATE.with(|c| c.set((fails, skip - 1)));
        return;
    }
    let mut p = libc::pollfd {
        fd: u.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let start = std::time::Instant::now();
    loop {
        // SAFETY: one valid pollfd, a zero timeout (never blocks).
        if unsafe { libc::poll(&mut p, 1, 0) } != 0 {
            SPIN_STATE.with(|c| c.set((0, 0)));
            return;
        }
        if start.elapsed() >= budget {
            let fails = (fails + 1).min(MAX_SKIP_LOG2);
            SPIN_STATE.with(|c| c.set((fails, 1 << fails)));
            return;
        }
        std::hint::spin_loop();
    }
}

/// The `sockaddr_un` of an advertised Unix listener (a path, or `@name` for an abstract one).
pub fn unix_addr(spec: &str) -> io::Result<std::os::unix::net::SocketAddr> {
    match spec.strip_prefix(ABSTRACT_PREFIX) {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        }
        None => std::os::unix::net::SocketAddr::from_pathname(Path::new(spec)),
    }
}

/// Connects to the Unix listener advertised as `spec`.
pub fn connect_unix(spec: &str) -> io::Result<UnixStream> {
    UnixStream::connect_addr(&unix_addr(spec)?)
}

/// Whether the Unix-domain channel may be used (`PDCX_UNIX` is not 0/off/false/no).
pub fn unix_enabled_by_env() -> bool {
    pdcx_core::config::UNIX.switch_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn spin_defaults_are_the_declared_ones() {
        use pdcx_core::config;
        assert_eq!(config::SPIN_US.default_count(), DEFAULT_SPIN_US);
        assert_eq!(config::REPLY_SPIN_US.default_count(), DEFAULT_REPLY_SPIN_US);
    }

    #[test]
    fn polling_returns_when_bytes_arrive_and_backs_off_after_running_out() {
        let (a, b) = UnixStream::pair().unwrap();
        let s = Stream::Unix(a);
        let budget = Duration::from_millis(30);
        // Nothing to read: the poll runs its whole budget...
        let t = Instant::now();
        spin_until_readable(&s, budget);
        assert!(t.elapsed() >= budget);
        // ...so the next two waits block at once, without polling.
        for _ in 0..2 {
            let t = Instant::now();
            spin_until_readable(&s, budget);
            assert!(t.elapsed() < budget / 2, "{:?}", t.elapsed());
        }
        // Then it polls again; bytes that arrive meanwhile end the poll early.
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            (&b).write_all(b"x").unwrap();
            b
        });
        let t = Instant::now();
        spin_until_readable(&s, Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
        let _b = writer.join().unwrap();
        // A successful poll resets the back-off: with bytes waiting it returns at once.
        spin_until_readable(&s, budget);
        let t = Instant::now();
        spin_until_readable(&s, Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_secs(1));
        // TCP streams and a zero budget never poll.
        spin_until_readable(&s, Duration::ZERO);
    }
}
