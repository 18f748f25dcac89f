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
    !matches!(
        std::env::var("PDCX_UNIX").as_deref().map(str::trim),
        Ok("0" | "off" | "false" | "no")
    )
}
