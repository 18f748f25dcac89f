//! One authenticated framed connection to a server, spoken raw (pdcx_core::protocol): the
//! handshake, sending a request, reading its reply.

use pdcx_core::protocol::{self, FrameKind, Request, Response};
use pdcx_core::{Error, Result};
use std::io::{BufReader, BufWriter, Read};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One authenticated framed connection, spoken raw.
pub(crate) struct Raw {
    r: BufReader<TcpStream>,
    pub(crate) w: BufWriter<TcpStream>,
    next: u64,
}

pub(crate) fn io(what: &str) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::io(what, &e)
}

impl Raw {
    pub(crate) fn connect(addr: SocketAddr, secret: &[u8]) -> Result<Raw> {
        let s =
            TcpStream::connect_timeout(&addr, Duration::from_secs(30)).map_err(io("connect"))?;
        s.set_nodelay(true).map_err(io("nodelay"))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(io("timeout"))?;
        let mut c = Raw {
            r: BufReader::with_capacity(64 << 10, s.try_clone().map_err(io("clone"))?),
            w: BufWriter::with_capacity(64 << 10, s),
            next: 1,
        };
        let (h, nonce) = protocol::read_frame_head(&mut c.r, 0)?;
        if h.kind != FrameKind::Challenge {
            // A server that refuses the connection (e.g. at its connection limit) says why in
            // an error frame instead of a challenge.
            if h.kind == FrameKind::Response {
                if let Ok(Response::Error(e)) = protocol::decode_body::<Response>(&nonce) {
                    return Err(e);
                }
            }
            return Err(Error::protocol(format!(
                "expected a challenge, got {:?}",
                h.kind
            )));
        }
        let tcp = c.r.get_ref();
        let binding = protocol::tcp_binding(
            tcp.local_addr().map_err(io("address"))?,
            tcp.peer_addr().map_err(io("address"))?,
        );
        // Loopback: plain frames (the soak measures the server, not the protection).
        let hello = protocol::Hello::new(
            &protocol::Credential::deployment(secret),
            &nonce,
            protocol::Role::Client,
            binding,
            protocol::Wire::Plain,
        );
        let body = protocol::encode_body(&hello)?;
        protocol::write_frame(&mut c.w, FrameKind::Hello, 0, &body, &[]).map_err(io("hello"))?;
        let (h, body) = protocol::read_frame_head(&mut c.r, 0)?;
        if h.kind != FrameKind::Welcome {
            return Err(Error::protocol(format!("handshake reply {:?}", h.kind)));
        }
        protocol::decode_body::<std::result::Result<protocol::Welcome, Error>>(&body)??;
        // Replies under load can take long; the run's own deadline bounds the wait.
        c.r.get_ref()
            .set_read_timeout(Some(Duration::from_secs(120)))
            .map_err(io("timeout"))?;
        Ok(c)
    }

    fn send(&mut self, req: &Request, payload: &[&[u8]]) -> Result<()> {
        let body = protocol::encode_body(req)?;
        let id = self.next;
        self.next += 1;
        protocol::write_frame(&mut self.w, FrameKind::Request, id, &body, payload)
            .map_err(io("sending a request"))
    }

    /// Reads one reply; its payload lands in `data`. A server error is an `Err`.
    fn recv(&mut self, data: &mut Vec<u8>) -> Result<Response> {
        let (h, body) = protocol::read_frame_head(&mut self.r, u64::MAX)?;
        let resp: Response = protocol::decode_body(&body)?;
        data.resize(h.payload_len as usize, 0);
        self.r
            .read_exact(data)
            .map_err(io("reading a reply payload"))?;
        match resp {
            Response::Error(e) => Err(e),
            r => Ok(r),
        }
    }

    pub(crate) fn call(
        &mut self,
        req: &Request,
        payload: &[&[u8]],
        data: &mut Vec<u8>,
    ) -> Result<Response> {
        self.send(req, payload)?;
        self.recv(data)
    }
}
