//! `pdcx gateway`: a site's end of links from other sites. One thread per connection, at most
//! [`Limits::max_connections`] of them; each connection must first say which site it is with
//! the token this site issued to it (`pdcx remote token SITE`); then it may read metadata and
//! regions (pulls) and push transfers, which a shared [`Receiver`] takes in, scoped to that
//! site.
//!
//! Before a connection has authenticated it is a stranger's: the TLS handshake and its `Hello`
//! together must end within [`Limits::auth_timeout`] (however slowly the bytes drip in), and
//! its frame may be a few KiB ([`wire::PRE_AUTH_MAX_HEADER`]), no payload. When every slot is
//! taken, a new connection evicts the oldest one still unauthenticated (a flood of silent
//! connections cannot lock the sites out), or, when all are authenticated, is closed at once
//! (TLS leaves no way to say why before the handshake, and a handshake is what a flood wants).
//! Afterwards reads and writes that make no progress for [`Limits::io_timeout`] end the
//! connection.

use crate::receive::{is_staging, push_placement, Origin, Receiver};
use crate::site;
use crate::wire::{self, Msg};
use crate::{invalid, io, Result, XsiteError};
use pdcx_client::Client;
use pdcx_core::config;
use rustls::{ServerConnection, StreamOwned};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How much a gateway gives connections (settings `gateway.*`, docs/OPERATIONS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    /// TLS handshake and `Hello`, together.
    pub auth_timeout: Duration,
    /// After authentication, per read or write.
    pub io_timeout: Duration,
}

impl Limits {
    /// The settings' values (environment, else their defaults).
    pub fn from_env() -> Result<Limits> {
        let count = |s: &config::Setting| s.count().map_err(|e| invalid(e.to_string()));
        Ok(Limits {
            max_connections: count(&config::GATEWAY_MAX_CONNECTIONS)? as usize,
            auth_timeout: Duration::from_secs(count(&config::GATEWAY_AUTH_TIMEOUT_S)?),
            io_timeout: Duration::from_secs(count(&config::GATEWAY_IO_TIMEOUT_S)?),
        })
    }
}

/// The connections being served: those not yet authenticated in arrival order (with a handle
/// to shut each down), and how many have authenticated.
#[derive(Default)]
struct Slots {
    next: u64,
    pending: VecDeque<(u64, TcpStream)>,
    authed: usize,
}

/// This site's name as its gateway tells connecting sites.
pub struct Gateway {
    pub site: String,
    receiver: Arc<Receiver>,
    /// The deployment root: the tokens it accepts and the names it grants are read when used,
    /// so a token issued (or replaced) or a grant made while the gateway runs counts at once.
    root: std::path::PathBuf,
    tls: Arc<rustls::ServerConfig>,
    limits: Limits,
    slots: Mutex<Slots>,
    /// When a refusal or an eviction, and a failure of a connection that never
    /// authenticated, were last reported (seconds since start): a flood must not flood the
    /// log too.
    last_full: AtomicU64,
    last_stranger: AtomicU64,
    started: Instant,
}

/// A connection's slot, given back when its thread ends.
struct Slot<'a> {
    gw: &'a Gateway,
    id: u64,
    authed: bool,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut slots = self.gw.slots.lock().unwrap_or_else(|p| p.into_inner());
        if self.authed {
            slots.authed -= 1;
        } else {
            slots.pending.retain(|(id, _)| *id != self.id);
        }
    }
}

/// The socket under TLS. Until authentication it has a deadline: each read and write may take
/// only what is left of it, so a peer dripping a byte at a time cannot keep the connection.
struct Timed {
    tcp: TcpStream,
    deadline: Option<Instant>,
}

impl Timed {
    fn arm(&self) -> std::io::Result<()> {
        if let Some(d) = self.deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "did not authenticate in time",
                ));
            }
            self.tcp.set_read_timeout(Some(left))?;
            self.tcp.set_write_timeout(Some(left))?;
        }
        Ok(())
    }
}

/// A socket timeout reads as "would block": say what it is.
fn timed_out(e: std::io::Error) -> std::io::Error {
    if e.kind() == std::io::ErrorKind::WouldBlock {
        std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out")
    } else {
        e
    }
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.arm()?;
        self.tcp.read(buf).map_err(timed_out)
    }
}

impl Write for Timed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.arm()?;
        self.tcp.write(buf).map_err(timed_out)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
}

impl Gateway {
    /// A gateway with the limits of the settings.
    pub fn new(root: &Path, site: &str, client: Client) -> Result<Gateway> {
        Self::with_limits(root, site, client, Limits::from_env()?)
    }

    pub fn with_limits(root: &Path, site: &str, client: Client, limits: Limits) -> Result<Gateway> {
        site::check_site_name(site)?;
        let id = site::load_identity(root)?;
        Ok(Gateway {
            site: site.to_string(),
            receiver: Arc::new(Receiver::new(client)),
            root: root.to_path_buf(),
            tls: crate::tls::server_config(&id)?,
            limits,
            slots: Mutex::new(Slots::default()),
            last_full: AtomicU64::new(u64::MAX),
            last_stranger: AtomicU64::new(u64::MAX),
            started: Instant::now(),
        })
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Serves connections from `listener` until the process ends.
    pub fn serve(self: Arc<Self>, listener: TcpListener) -> Result<()> {
        for conn in listener.incoming() {
            let tcp = match conn {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("pdcx gateway: accept: {e}");
                    // Out of descriptors, say: do not spin on it.
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            let Some(id) = self.admit(&tcp) else {
                let _ = tcp.shutdown(Shutdown::Both);
                continue;
            };
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name("pdcx-gateway".into())
                .spawn(move || {
                    let mut slot = Slot {
                        gw: &me,
                        id,
                        authed: false,
                    };
                    let peer = tcp.peer_addr().map(|a| a.to_string()).unwrap_or_default();
                    if let Err(e) = me.connection(tcp, &mut slot) {
                        let line = format!("connection from {peer}: {e}");
                        if slot.authed {
                            eprintln!("pdcx gateway: {line}");
                        } else {
                            // Strangers' failures are many in a flood: a sample is enough.
                            me.report(&me.last_stranger, 1, &line);
                        }
                    }
                });
            if let Err(e) = spawned {
                eprintln!("pdcx gateway: no thread for a connection: {e}");
                self.slots
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .pending
                    .retain(|(i, _)| *i != id);
            }
        }
        Ok(())
    }

    /// A slot for a new connection: a free one, else the oldest unauthenticated connection's
    /// (shut down); None when every slot is an authenticated site's.
    fn admit(&self, tcp: &TcpStream) -> Option<u64> {
        let handle = tcp.try_clone().ok()?;
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if slots.pending.len() + slots.authed >= self.limits.max_connections {
            match slots.pending.pop_front() {
                Some((_, oldest)) => {
                    let _ = oldest.shutdown(Shutdown::Both);
                    self.report_full("closing the oldest unauthenticated connection for a new one");
                }
                None => {
                    self.report_full(
                        "refusing a connection: every slot is an authenticated site's",
                    );
                    return None;
                }
            }
        }
        slots.next += 1;
        let id = slots.next;
        slots.pending.push_back((id, handle));
        Some(id)
    }

    fn report_full(&self, what: &str) {
        let cap = self.limits.max_connections;
        self.report(
            &self.last_full,
            10,
            &format!("{what} (gateway.max_connections = {cap})"),
        );
    }

    /// Says `what` on stderr unless `last` says something was said less than `every` seconds
    /// ago.
    fn report(&self, last: &AtomicU64, every: u64, what: &str) {
        let now = self.started.elapsed().as_secs();
        let before = last.load(Ordering::Relaxed);
        if before == u64::MAX || now >= before + every {
            last.store(now, Ordering::Relaxed);
            eprintln!("pdcx gateway: {what}");
        }
    }

    /// Moves connection `slot` to the authenticated; false if it was evicted meanwhile.
    fn authenticated(&self, slot: &mut Slot) -> bool {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let before = slots.pending.len();
        slots.pending.retain(|(id, _)| *id != slot.id);
        if slots.pending.len() == before {
            return false;
        }
        slots.authed += 1;
        slot.authed = true;
        true
    }

    fn connection(&self, tcp: TcpStream, slot: &mut Slot) -> Result<()> {
        tcp.set_nodelay(true).ok();
        let conn =
            ServerConnection::new(self.tls.clone()).map_err(|e| XsiteError::Tls(e.to_string()))?;
        let sock = Timed {
            tcp,
            deadline: Some(Instant::now() + self.limits.auth_timeout),
        };
        let mut s = StreamOwned::new(conn, sock);
        // Nothing but a valid, small Hello is answered before the peer is known.
        let first = match wire::recv_limited(&mut s, wire::PRE_AUTH_MAX_HEADER, 0) {
            Ok(f) => f,
            Err(e) => {
                // Inside TLS the peer can be told why (still within the deadline).
                if !s.conn.is_handshaking() {
                    let _ = wire::send(
                        &mut s,
                        &Msg::Error {
                            message: format!("before Hello: {e}"),
                        },
                        &[],
                    );
                }
                return Err(e);
            }
        };
        let peer = match first {
            Some((
                Msg::Hello {
                    site,
                    token,
                    version,
                },
                _,
            )) => {
                let refused = if version != wire::VERSION {
                    Some(format!(
                        "link protocol {version}, this gateway speaks {}",
                        wire::VERSION
                    ))
                } else if !site::accepts(&site::load_accepted(&self.root)?, &site, &token) {
                    Some(format!(
                        "site {site:?} is not accepted with this token (issue one with `pdcx remote token {site}` here)"
                    ))
                } else {
                    None
                };
                if let Some(message) = refused {
                    wire::send(
                        &mut s,
                        &Msg::Error {
                            message: message.clone(),
                        },
                        &[],
                    )?;
                    return Err(crate::invalid(format!("refused: {message}")));
                }
                if !self.authenticated(slot) {
                    return Err(invalid(format!(
                        "site {site}: closed to make room for a newer connection"
                    )));
                }
                s.sock.deadline = None;
                let t = Some(self.limits.io_timeout);
                s.sock
                    .tcp
                    .set_read_timeout(t)
                    .and_then(|()| s.sock.tcp.set_write_timeout(t))
                    .map_err(io("set the link's timeouts"))?;
                wire::send(
                    &mut s,
                    &Msg::Welcome {
                        site: self.site.clone(),
                    },
                    &[],
                )?;
                site
            }
            Some(_) => {
                wire::send(
                    &mut s,
                    &Msg::Error {
                        message: "say Hello first".into(),
                    },
                    &[],
                )?;
                return Ok(());
            }
            None => return Ok(()),
        };
        let origin = Origin::Site(peer);
        while let Some((msg, payload)) = wire::recv(&mut s)? {
            let (answer, data) = match self.handle(&origin, msg, &payload) {
                Ok(x) => x,
                Err(e) => (
                    Msg::Error {
                        message: e.to_string(),
                    },
                    Vec::new(),
                ),
            };
            wire::send(&mut s, &answer, &data)?;
        }
        Ok(())
    }

    fn handle(&self, origin: &Origin, msg: Msg, payload: &[u8]) -> Result<(Msg, Vec<u8>)> {
        let client = self.receiver.client();
        Ok(match msg {
            Msg::Meta { name } => {
                if is_staging(&name) {
                    return Err(crate::invalid(format!(
                        "{name} is not an object one may pull"
                    )));
                }
                (
                    Msg::MetaIs {
                        meta: client.open_object(&name)?,
                    },
                    Vec::new(),
                )
            }
            Msg::Read { name, region, step } => {
                if is_staging(&name) {
                    return Err(crate::invalid(format!(
                        "{name} is not an object one may pull"
                    )));
                }
                let meta = client.open_object(&name)?;
                region.check_within(&meta.dims)?;
                let elems = match &step {
                    Some(s) if s.len() == region.ndim() && !s.contains(&0) => region
                        .count
                        .iter()
                        .zip(s)
                        .map(|(c, s)| c.div_ceil(*s))
                        .product::<u64>(),
                    Some(s) => {
                        return Err(crate::invalid(format!("steps {s:?} for region {region}")))
                    }
                    None => region.num_elements(),
                };
                let len = elems.saturating_mul(meta.dtype.size() as u64);
                if len > wire::MAX_PAYLOAD {
                    return Err(crate::invalid(format!(
                        "region {region} is {len} bytes, over a frame"
                    )));
                }
                let mut buf = vec![0u8; len as usize];
                match &step {
                    Some(s) => client.read_strided(meta.id, &region, s, &mut buf)?,
                    None => client.read_into(meta.id, &region, &mut buf)?,
                }
                (
                    Msg::Data {
                        crc: crc32c::crc32c(&buf),
                    },
                    buf,
                )
            }
            Msg::Query { name, expr, region } => {
                let meta = client.open_object(&name)?;
                let (nhits, ndim, bytes) =
                    crate::transfer::where_query(client, &meta, &expr, region)?;
                let hits = Msg::Hits {
                    nhits,
                    ndim: ndim as u32,
                    crc: crc32c::crc32c(&bytes),
                };
                (hits, bytes)
            }
            Msg::Begin { spec } => (
                Msg::Missing {
                    chunks: self.receiver.begin(origin, &spec)?,
                },
                Vec::new(),
            ),
            Msg::Chunk { key, index, crc } => {
                self.receiver.store(origin, &key, index, crc, payload)?;
                (Msg::Stored, Vec::new())
            }
            Msg::Finish { key } => {
                let Origin::Site(peer) = origin else {
                    return Err(invalid("a push comes from a site"));
                };
                let spec = self.receiver.spec_of(origin, &key)?;
                let grants = site::load_accepted(&self.root)?.grants_of(peer);
                let place = push_placement(peer, &spec, &grants)?;
                (
                    Msg::Published {
                        bytes: self.receiver.publish(origin, &key, &place)?,
                    },
                    Vec::new(),
                )
            }
            other => return Err(crate::invalid(format!("not a request: {other:?}"))),
        })
    }
}

/// Binds `addr` for a gateway, with a clear error.
pub fn bind(addr: &str) -> Result<TcpListener> {
    TcpListener::bind(addr).map_err(io(format!("listen on {addr}")))
}
