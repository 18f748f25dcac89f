//! One authenticated, framed connection to one server. Calls are synchronous; a `Conn` is used
//! by one thread at a time (the client keeps one per server per purpose).
//!
//! Bulk data (`stage`, `read`, `read_into`) goes through a shared-memory arena when the server
//! is on this client's node and has mapped the arena (see `shm.rs`), else in the frame payload.

use crate::shm::{self, Arena, Payload, ShmBuf, ShmPool};
use pdcx_core::protocol::{self, FrameKind, ReadItem, Request, Response, ShmLoc, StageItem};
use pdcx_core::{Error, ErrorKind, Result};
use std::collections::HashSet;
use std::io::{BufReader, BufWriter, Read};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Conn {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
    next_id: u64,
    pub rank: u32,
    pub addr: String,
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

fn net_err(addr: &str, e: &std::io::Error) -> Error {
    Error::new(ErrorKind::Unavailable, format!("server at {addr}: {e}"))
}

impl Conn {
    pub fn connect(addr: &str, secret: &[u8]) -> Result<Conn> {
        let sock: std::net::SocketAddr = addr
            .parse()
            .map_err(|_| Error::invalid(format!("bad server address {addr:?}")))?;
        let stream = TcpStream::connect_timeout(&sock, Duration::from_secs(5)).map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                format!("cannot reach pdcx server at {addr}: {e} (is the deployment running? try `pdcx server status`)"),
            )
        })?;
        stream.set_nodelay(true).map_err(|e| net_err(addr, &e))?;
        // Something that accepts but never speaks (a frozen server, a reused port) must not
        // hang the client: bound the handshake, then lift the limit for long transfers.
        stream
            .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
            .map_err(|e| net_err(addr, &e))?;
        let reader = BufReader::with_capacity(
            256 << 10,
            stream.try_clone().map_err(|e| net_err(addr, &e))?,
        );
        let writer = BufWriter::with_capacity(256 << 10, stream);
        let mut conn = Conn {
            reader,
            writer,
            next_id: 1,
            rank: 0,
            addr: addr.to_string(),
            shm: None,
        };
        let (h, nonce) = protocol::read_frame_head(&mut conn.reader, 0)?;
        if h.kind == FrameKind::Response {
            // A server that will not serve this connection (at its connection limit) says why.
            if let Ok(Response::Error(e)) = protocol::decode_body::<Response>(&nonce) {
                return Err(e);
            }
        }
        if h.kind != FrameKind::Challenge || nonce.len() != protocol::NONCE_LEN {
            return Err(Error::protocol(format!(
                "{addr} did not send a pdcx challenge"
            )));
        }
        let tag = protocol::auth_tag(secret, &nonce);
        protocol::write_frame(&mut conn.writer, FrameKind::Auth, 0, &tag, &[])
            .map_err(|e| net_err(addr, &e))?;
        match conn.read_response(&mut |_, _| Ok(()))? {
            Response::Welcome { rank, .. } => conn.rank = rank,
            other => {
                return Err(Error::protocol(format!(
                    "unexpected handshake reply {other:?}"
                )))
            }
        }
        Ok(conn)
    }

    /// Sends a request with bulk payload parts and returns the reply and its payload.
    pub fn call(&mut self, req: &Request, payload: &[&[u8]]) -> Result<(Response, Vec<u8>)> {
        self.send(req, payload)?;
        let mut data = Vec::new();
        let resp = self.read_response(&mut |r, len| {
            data = vec![0u8; len as usize];
            r.read_exact(&mut data)
                .map_err(|e| Error::io("reading reply payload", &e))
        })?;
        Ok((resp, data))
    }

    /// Like `call`, but the reply payload is split into one freshly allocated Vec per entry of
    /// `lens` (which must add up to its size): each byte is received once, straight into the
    /// buffer that is handed to the caller, with no intermediate whole-reply buffer.
    pub fn call_split(
        &mut self,
        req: &Request,
        payload: &[&[u8]],
        lens: &[usize],
    ) -> Result<(Response, Vec<Vec<u8>>)> {
        self.send(req, payload)?;
        let want: u64 = lens.iter().map(|&l| l as u64).sum();
        let mut parts = Vec::with_capacity(lens.len());
        let resp = self.read_response(&mut |r, len| {
            if len != want {
                return Err(Error::protocol(format!(
                    "read reply has {len} bytes, expected {want}"
                )));
            }
            for &l in lens {
                let mut v = vec![0u8; l];
                r.read_exact(&mut v)
                    .map_err(|e| Error::io("reading reply payload", &e))?;
                parts.push(v);
            }
            Ok(())
        })?;
        if parts.is_empty() {
            // An all-empty reply carries no payload, so the callback never ran.
            parts = lens.iter().map(|_| Vec::new()).collect();
        }
        Ok((resp, parts))
    }

    /// Like `call`, but the reply payload lands directly in `out`, which must be its exact size.
    pub fn call_into(
        &mut self,
        req: &Request,
        payload: &[&[u8]],
        out: &mut [u8],
    ) -> Result<Response> {
        self.send(req, payload)?;
        let want = out.len() as u64;
        self.read_response(&mut |r, len| {
            if len != want {
                return Err(Error::protocol(format!(
                    "reply carries {len} bytes, expected {want}"
                )));
            }
            r.read_exact(out)
                .map_err(|e| Error::io("reading reply payload", &e))
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
        let req = Request::AttachShm {
            arena: arena.id,
            pid: std::process::id(),
            fd: arena.fd(),
            name: arena.name.clone(),
            len: arena.len() as u64,
        };
        self.send(&req, &[])?;
        let resp = self.read_reply(&mut |_, _| Ok(()))?;
        let Some(s) = &mut self.shm else {
            return Ok(false);
        };
        match resp {
            Response::Ok => {
                s.attached.insert(arena.id);
                Ok(true)
            }
            Response::Error(e) => {
                shm::debug(&format!(
                    "shm: server {} at {} does not map this client's arena ({}); bulk data goes over TCP",
                    self.rank, self.addr, e.message
                ));
                s.refused.store(true, Ordering::Relaxed);
                Ok(false)
            }
            other => Err(Error::protocol(format!(
                "unexpected reply to AttachShm: {other:?}"
            ))),
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

    /// Stages `items`, whose bytes are `data` in order: as `StageShm` when they all sit in
    /// arenas the server has mapped, else as `Stage` with the bytes in the frame payload.
    pub fn stage(&mut self, items: &[StageItem], data: &[&Payload]) -> Result<Response> {
        if let Some(locs) = self.shm_locs(data)? {
            let req = Request::StageShm {
                items: items.to_vec(),
                locs,
            };
            return self.call(&req, &[]).map(|(r, _)| r);
        }
        let parts: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let req = Request::Stage {
            items: items.to_vec(),
        };
        self.call(&req, &parts).map(|(r, _)| r)
    }

    /// Reads `items` (`Read`, or `ReadHeld` with `held`), `lens[i]` bytes each: one arena
    /// block per item that the server wrote into (no copy on this side), else one Vec per item
    /// received from the reply payload.
    pub fn read(&mut self, items: &[ReadItem], held: bool, lens: &[usize]) -> Result<Vec<Payload>> {
        if let Some(blocks) = self.read_shm(items, held, lens, false)? {
            return Ok(blocks.into_iter().map(Payload::Shm).collect());
        }
        let (_, parts) = self.call_split(&read_request(items, held), &[], lens)?;
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
        self.call_into(&read_request(items, held), &[], out)
            .map(|_| ())
    }

    /// A `ReadShm` into fresh blocks, one per item (or with `one_block` all back to back in
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
        let req = Request::ReadShm {
            items: items.to_vec(),
            held,
            locs,
        };
        let err = match self.call(&req, &[]) {
            Ok((Response::Data, _)) => return Ok(Some(blocks)),
            Ok((other, _)) => Error::protocol(format!("unexpected reply to ReadShm: {other:?}")),
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

    fn send(&mut self, req: &Request, payload: &[&[u8]]) -> Result<()> {
        let body = protocol::encode_body(req)?;
        let id = self.next_id;
        self.next_id += 1;
        protocol::write_frame(&mut self.writer, FrameKind::Request, id, &body, payload)
            .map_err(|e| net_err(&self.addr, &e))
    }

    fn read_response(
        &mut self,
        on_payload: &mut dyn FnMut(&mut BufReader<TcpStream>, u64) -> Result<()>,
    ) -> Result<Response> {
        match self.read_reply(on_payload)? {
            Response::Error(e) => Err(e),
            r => Ok(r),
        }
    }

    /// Like `read_response`, but an error the server sent comes back as `Response::Error`,
    /// so callers can tell it from a failed connection.
    fn read_reply(
        &mut self,
        on_payload: &mut dyn FnMut(&mut BufReader<TcpStream>, u64) -> Result<()>,
    ) -> Result<Response> {
        let (h, body) = protocol::read_frame_head(&mut self.reader, u64::MAX)?;
        if h.kind != FrameKind::Response {
            return Err(Error::protocol(format!(
                "expected a response frame, got {:?}",
                h.kind
            )));
        }
        let resp: Response = protocol::decode_body(&body)?;
        if let Response::Error(_) = resp {
            let mut sink = std::io::sink();
            std::io::copy(&mut (&mut self.reader).take(h.payload_len), &mut sink)
                .map_err(|e| net_err(&self.addr, &e))?;
            return Ok(resp);
        }
        if h.payload_len > 0 {
            on_payload(&mut self.reader, h.payload_len)?;
        }
        Ok(resp)
    }
}

fn read_request(items: &[ReadItem], held: bool) -> Request {
    let items = items.to_vec();
    if held {
        Request::ReadHeld { items }
    } else {
        Request::Read { items }
    }
}
