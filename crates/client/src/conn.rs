//! A client's connection to one server: the transport's authenticated connection in the
//! client role (`pdcx_transport::Conn`, whose calls it offers through `Deref`), plus the
//! shared-memory bulk path. The client keeps one per server per purpose.
//!
//! Bulk data (`stage`, `read`, `read_into`) goes through a shared-memory arena when the server
//! is on this client's node and has mapped the arena (see `shm.rs`), else in the frame payload.

use crate::shm::{self, Arena, Payload, ShmBuf, ShmPool};
use pdcx_core::protocol::{
    handshake, read, write, Call, CommitOpts, Credential, ReadItem, ReadOpts, Request, Response,
    Role, ShmLoc, StageItem,
};
use pdcx_core::{ErrorKind, Result};
use pdcx_transport::pool::Pooled;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub struct Conn {
    inner: pdcx_transport::Conn,
    /// Unique per connection this process opened: writes reserved in one connection's
    /// server session can only be committed on that same connection.
    serial: u64,
    /// Set when the server is on this node and shared memory may be tried.
    shm: Option<ConnShm>,
}

/// Shared-memory state of a connection to a server on this client's node.
struct ConnShm {
    pool: Arc<ShmPool>,
    /// Arenas this connection's server has mapped (a mapping lives as long as the connection).
    attached: HashSet<u32>,
    /// Shared by every connection to the same server: set once it refused an arena (other
    /// user, other pid namespace, a server without shared-memory support), so later
    /// connections do not ask again.
    refused: Arc<AtomicBool>,
}

impl std::ops::Deref for Conn {
    type Target = pdcx_transport::Conn;
    fn deref(&self) -> &pdcx_transport::Conn {
        &self.inner
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut pdcx_transport::Conn {
        &mut self.inner
    }
}

impl Pooled for Conn {
    fn rank(&self) -> u32 {
        self.inner.rank
    }
}

fn next_serial() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Conn {
    /// This connection's serial number (unique in this process).
    pub(crate) fn serial(&self) -> u64 {
        self.serial
    }

    /// A client connection to the server at `addr`, authenticated with the deployment secret.
    pub fn connect(addr: &str, secret: &[u8]) -> Result<Conn> {
        Ok(Conn {
            inner: pdcx_transport::Conn::connect(addr, secret)?,
            serial: next_serial(),
            shm: None,
        })
    }

    /// A connection in `role` to the server at `addr`, proved with `cred`.
    pub fn connect_with(addr: &str, cred: &Credential, role: Role) -> Result<Conn> {
        Ok(Conn {
            inner: pdcx_transport::Conn::connect_with(addr, cred, role)?,
            serial: next_serial(),
            shm: None,
        })
    }

    /// A connection in `role` over the Unix-domain listener `spec`, proved with `cred`.
    pub fn connect_unix_with(spec: &str, cred: &Credential, role: Role) -> Result<Conn> {
        Ok(Conn {
            inner: pdcx_transport::Conn::connect_unix_with(spec, cred, role)?,
            serial: next_serial(),
            shm: None,
        })
    }

    /// A client connection over the Unix-domain listener `spec` of a server on this node.
    pub fn connect_unix(spec: &str, secret: &[u8]) -> Result<Conn> {
        Ok(Conn {
            inner: pdcx_transport::Conn::connect_unix_as(spec, secret, Role::Client)?,
            serial: next_serial(),
            shm: None,
        })
    }

    /// Lets this connection move bulk data through `pool`'s arenas (its server is on this
    /// node). `refused` is the server's shared "does not attach" flag.
    pub(crate) fn enable_shm(&mut self, pool: Arc<ShmPool>, refused: Arc<AtomicBool>) {
        self.shm = Some(ConnShm {
            pool,
            attached: HashSet::new(),
            refused,
        });
    }

    /// Whether bulk data on this connection uses shared memory (once an arena is attached).
    pub fn shm_enabled(&self) -> bool {
        self.shm
            .as_ref()
            .is_some_and(|s| !s.refused.load(Ordering::Relaxed))
    }

    /// Makes sure the server has mapped `arena`. False if it cannot (the caller uses TCP);
    /// an error only if the connection itself failed.
    fn shm_attach(&mut self, arena: &Arena) -> Result<bool> {
        match &self.shm {
            Some(s) if !s.refused.load(Ordering::Relaxed) => {
                if s.attached.contains(&arena.id) {
                    return Ok(true);
                }
            }
            _ => return Ok(false),
        }
        let req: Request = handshake::AttachShm {
            arena: arena.id,
            pid: std::process::id(),
            fd: arena.fd(),
            name: arena.name.clone(),
            len: arena.len() as u64,
        }
        .into();
        self.inner.send(&req, &[])?;
        let resp = self.inner.read_reply(&mut |_, _| Ok(()))?;
        let Some(s) = &mut self.shm else {
            return Ok(false);
        };
        match resp {
            Response::Error(e) => {
                shm::debug(&format!(
                    "shm: server {} at {} does not map this client's arena ({}); bulk data goes over TCP",
                    self.inner.rank, self.inner.addr, e.message
                ));
                s.refused.store(true, Ordering::Relaxed);
                Ok(false)
            }
            other => {
                <handshake::AttachShm as Call>::reply(other)?;
                s.attached.insert(arena.id);
                Ok(true)
            }
        }
    }

    /// The arena locations of `data`, if every part is in an arena the server has mapped.
    fn shm_locs(&mut self, data: &[&Payload]) -> Result<Option<Vec<ShmLoc>>> {
        if !self.shm_enabled() || data.is_empty() {
            return Ok(None);
        }
        let mut locs = Vec::with_capacity(data.len());
        for d in data {
            let Payload::Shm(b) = d else { return Ok(None) };
            if !self.shm_attach(b.arena())? {
                return Ok(None);
            }
            locs.push(b.loc());
        }
        Ok(Some(locs))
    }

    /// Stages `items`, whose bytes are `data` in order, and with `commit` commits them in the
    /// same message (answered once committed): from arenas the server has mapped when they
    /// all sit in such, else with the bytes in the frame payload.
    pub fn stage(
        &mut self,
        items: &[StageItem],
        data: &[&Payload],
        commit: Option<CommitOpts>,
    ) -> Result<u64> {
        let (req, parts) = self.stage_request(items, data, commit)?;
        self.ask(req, &parts)
    }

    /// The `Stage` request for `items` and the frame payload it travels with: empty when the
    /// bytes sit in arenas the server has mapped (attached here on first use), else `data`.
    /// The caller sends it (`ask`), so a write's call path does not pass through this layer.
    pub fn stage_request<'d>(
        &mut self,
        items: &[StageItem],
        data: &[&'d Payload],
        commit: Option<CommitOpts>,
    ) -> Result<(write::Stage, Vec<&'d [u8]>)> {
        let shm = self.shm_locs(data)?;
        let parts: Vec<&[u8]> = match shm {
            Some(_) => Vec::new(),
            None => data.iter().map(|d| d.as_slice()).collect(),
        };
        let req = write::Stage {
            items: items.to_vec(),
            shm,
            commit,
        };
        Ok((req, parts))
    }

    /// Reads `items` (at a holder with `held`), `lens[i]` bytes each: one arena
    /// block per item that the server wrote into (no copy on this side), else one Vec per item
    /// received from the reply payload.
    pub fn read(&mut self, items: &[ReadItem], held: bool, lens: &[usize]) -> Result<Vec<Payload>> {
        if let Some(blocks) = self.read_shm(items, held, lens, false)? {
            return Ok(blocks.into_iter().map(Payload::Shm).collect());
        }
        let (resp, parts) = self.call_split(&read_request(items, held), &[], lens)?;
        <read::Read as Call>::reply(resp)?;
        Ok(parts.into_iter().map(Payload::Heap).collect())
    }

    /// Reads one item straight into `out` (exactly its size); through shared memory it is
    /// copied once, out of the block the server wrote into.
    pub fn read_into(&mut self, item: &ReadItem, held: bool, out: &mut [u8]) -> Result<()> {
        let items = std::slice::from_ref(item);
        if let Some(blocks) = self.read_shm(items, held, &[out.len()], true)? {
            out.copy_from_slice(blocks[0].as_slice());
            return Ok(());
        }
        let resp = self.call_into(&read_request(items, held), &[], out)?;
        <read::Read as Call>::reply(resp)
    }

    /// A read into fresh shared-memory blocks, one per item (or with `one_block` all back to back in
    /// the first); None when shared memory is not usable for it (the caller uses TCP).
    fn read_shm(
        &mut self,
        items: &[ReadItem],
        held: bool,
        lens: &[usize],
        one_block: bool,
    ) -> Result<Option<Vec<ShmBuf>>> {
        let Some(pool) = self.shm.as_ref().map(|s| s.pool.clone()) else {
            return Ok(None);
        };
        if !self.shm_enabled() || items.len() != lens.len() || lens.contains(&0) {
            return Ok(None);
        }
        let sizes = if one_block {
            vec![lens.iter().sum()]
        } else {
            lens.to_vec()
        };
        let mut blocks = Vec::with_capacity(sizes.len());
        for n in sizes {
            let Some(b) = pool.alloc(n) else {
                return Ok(None);
            };
            if !self.shm_attach(b.arena())? {
                return Ok(None);
            }
            blocks.push(b);
        }
        let locs = if one_block {
            let base = blocks[0].loc();
            let mut at = base.offset;
            lens.iter()
                .map(|&l| {
                    let loc = ShmLoc {
                        arena: base.arena,
                        offset: at,
                    };
                    at += l as u64;
                    loc
                })
                .collect()
        } else {
            blocks.iter().map(ShmBuf::loc).collect()
        };
        let req = read::Read {
            items: items.to_vec(),
            opts: ReadOpts {
                held,
                shm: Some(locs),
                ..ReadOpts::default()
            },
        };
        let err = match self.ask(req, &[]) {
            Ok(()) => return Ok(Some(blocks)),
            Err(e) => e,
        };
        // After a broken exchange the server might still write into the blocks: never hand
        // their ranges out again.
        if matches!(
            err.kind,
            ErrorKind::Unavailable | ErrorKind::Io | ErrorKind::Protocol
        ) {
            blocks.into_iter().for_each(ShmBuf::forfeit);
        }
        Err(err)
    }
}

fn read_request(items: &[ReadItem], held: bool) -> Request {
    read::Read {
        items: items.to_vec(),
        opts: ReadOpts {
            held,
            ..ReadOpts::default()
        },
    }
    .into()
}
