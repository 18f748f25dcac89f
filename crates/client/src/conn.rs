//! One authenticated, framed connection to one server. Calls are synchronous; a `Conn` is used
//! by one thread at a time (the client keeps one per server per purpose).

use pdcx_core::protocol::{self, FrameKind, Request, Response};
use pdcx_core::{Error, ErrorKind, Result};
use std::io::{BufReader, BufWriter, Read};
use std::net::TcpStream;
use std::time::Duration;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Conn {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
    next_id: u64,
    pub rank: u32,
    pub addr: String,
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
        };
        let (h, nonce) = protocol::read_frame_head(&mut conn.reader, 0)?;
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
        let (h, body) = protocol::read_frame_head(&mut self.reader, u64::MAX)?;
        if h.kind != FrameKind::Response {
            return Err(Error::protocol(format!(
                "expected a response frame, got {:?}",
                h.kind
            )));
        }
        let resp: Response = protocol::decode_body(&body)?;
        if let Response::Error(e) = resp {
            let mut sink = std::io::sink();
            std::io::copy(&mut (&mut self.reader).take(h.payload_len), &mut sink)
                .map_err(|e| net_err(&self.addr, &e))?;
            return Err(e);
        }
        if h.payload_len > 0 {
            on_payload(&mut self.reader, h.payload_len)?;
        }
        Ok(resp)
    }
}
