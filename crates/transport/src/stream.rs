//! The byte stream under a connection: TCP, or a Unix-domain socket to a server on this node
//! (the cheaper channel: no TCP/IP stack, no loopback device, fewer wake-ups per message).
//! Both carry the same frames and the same handshake; only the socket differs.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Where a server's Unix-domain listener is, as the cluster file advertises it: a path, or
/// (`@` then the name) an abstract socket in the server's network namespace, used when the
/// root's path is too long for `sun_path`.
pub const ABSTRACT_PREFIX: char = '@';

#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    pub fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(d),
            Stream::Unix(s) => s.set_read_timeout(d),
        }
    }

    pub fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(d),
            Stream::Unix(s) => s.set_write_timeout(d),
        }
    }

    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.shutdown(how),
            Stream::Unix(s) => s.shutdown(how),
        }
    }

    pub fn is_unix(&self) -> bool {
        matches!(self, Stream::Unix(_))
    }

    /// Who is on the other end, for messages: the TCP peer address, or "a local process".
    pub fn peer_desc(&self) -> String {
        match self {
            Stream::Tcp(s) => s.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string()),
            Stream::Unix(_) => "a process on this node (Unix socket)".into(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }

    fn read_vectored(&mut self, bufs: &mut [io::IoSliceMut<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read_vectored(bufs),
            Stream::Unix(s) => s.read_vectored(bufs),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write_vectored(bufs),
            Stream::Unix(s) => s.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write(buf),
            Stream::Unix(s) => (&*s).write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write_vectored(bufs),
            Stream::Unix(s) => (&*s).write_vectored(bufs),
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
