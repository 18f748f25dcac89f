//! Frames on a link between sites, inside TLS: a 4-byte little-endian header length, the
//! header (JSON, at most [`MAX_HEADER`] bytes), an 8-byte payload length, the payload (at most
//! [`MAX_PAYLOAD`] bytes). Everything read is bounded before it is allocated; before the peer
//! is known (its `Hello`) a gateway reads with the far smaller [`PRE_AUTH_MAX_HEADER`] and no
//! payload at all ([`recv_limited`]), so a stranger cannot make it buffer megabytes.

use crate::{invalid, io, Result};
use pdcx_core::model::ObjectMeta;
use pdcx_core::region::Region;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

pub const MAX_HEADER: usize = 4 << 20;
pub const MAX_PAYLOAD: u64 = 64 << 20;
/// Largest frame header a gateway reads before the peer has authenticated: a `Hello` (site
/// name of at most 64 bytes, a 64-digit token) is a few hundred bytes.
pub const PRE_AUTH_MAX_HEADER: usize = 4 << 10;
/// Link protocol version, checked at `Hello`.
pub const VERSION: u32 = 1;

/// What a transfer moves: `region` of the source object `meta` (as the source site has it),
/// cut into `chunks` (disjoint, covering the region), identified by `key`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferSpec {
    pub key: String,
    pub source_site: String,
    pub meta: ObjectMeta,
    pub region: Region,
    pub chunks: Vec<Region>,
    /// A push's name at the receiver (`pdcx push --as`); absent: the source's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t")]
pub enum Msg {
    /// First message of a connection: who the client site is and its token.
    Hello {
        site: String,
        token: String,
        version: u32,
    },
    /// Answer to `Hello`: the gateway's site name.
    Welcome {
        site: String,
    },
    /// Any request failed; the connection stays usable.
    Error {
        message: String,
    },
    /// An object's metadata (pull).
    Meta {
        name: String,
    },
    MetaIs {
        meta: ObjectMeta,
    },
    /// `region` of object `name`, every `step[d]` element when given (the region is then the
    /// selection's bounding box); answered with `Data` and the bytes (pull).
    Read {
        name: String,
        region: Region,
        #[serde(default)]
        step: Option<Vec<u64>>,
    },
    /// A value query over object `name` (and objects of its shape the condition names, a
    /// name not found also tried in `name`'s containers) inside `region` (all when None):
    /// answered with `Hits` and the payload: the hits' coordinates (u64 LE, ndim each, C
    /// order), then `name`'s values at them.
    Query {
        name: String,
        expr: String,
        region: Option<Region>,
    },
    Hits {
        nhits: u64,
        ndim: u32,
        crc: u32,
    },
    /// Bytes follow; `crc` is their CRC-32C, computed where they were read.
    Data {
        crc: u32,
    },
    /// A push begins (or resumes): answered with the chunks still missing.
    Begin {
        spec: TransferSpec,
    },
    Missing {
        chunks: Vec<u32>,
    },
    /// Chunk `index` of a push; its bytes follow. Answered with `Stored`.
    Chunk {
        key: String,
        index: u32,
        crc: u32,
    },
    Stored,
    /// Every chunk is stored: verify and publish. Answered with `Published`.
    Finish {
        key: String,
    },
    Published {
        bytes: u64,
    },
}

pub fn send<W: Write>(w: &mut W, msg: &Msg, payload: &[u8]) -> Result<()> {
    let header = serde_json::to_vec(msg).map_err(|e| invalid(e.to_string()))?;
    let mut buf = Vec::with_capacity(12 + header.len());
    buf.extend_from_slice(&(header.len() as u32).to_le_bytes());
    buf.extend_from_slice(&header);
    buf.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    w.write_all(&buf)
        .and_then(|()| w.write_all(payload))
        .and_then(|()| w.flush())
        .map_err(io("send on the link"))
}

/// Reads one frame; Ok(None) at a clean end of the stream.
pub fn recv<R: Read>(r: &mut R) -> Result<Option<(Msg, Vec<u8>)>> {
    recv_limited(r, MAX_HEADER, MAX_PAYLOAD)
}

/// Reads one frame whose header is at most `max_header` bytes and payload at most
/// `max_payload`; each length is checked before anything is allocated for it.
pub fn recv_limited<R: Read>(
    r: &mut R,
    max_header: usize,
    max_payload: u64,
) -> Result<Option<(Msg, Vec<u8>)>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(io("receive on the link")(e)),
    }
    let hlen = u32::from_le_bytes(len) as usize;
    if hlen > max_header {
        return Err(invalid(format!(
            "a frame header of {hlen} bytes (at most {max_header})"
        )));
    }
    let mut header = vec![0u8; hlen];
    r.read_exact(&mut header)
        .map_err(io("receive on the link"))?;
    let msg: Msg = serde_json::from_slice(&header)
        .map_err(|e| invalid(format!("a frame header that is not a message: {e}")))?;
    let mut plen = [0u8; 8];
    r.read_exact(&mut plen).map_err(io("receive on the link"))?;
    let plen = u64::from_le_bytes(plen);
    if plen > max_payload {
        return Err(invalid(format!(
            "a payload of {plen} bytes (at most {max_payload})"
        )));
    }
    let mut payload = vec![0u8; plen as usize];
    r.read_exact(&mut payload)
        .map_err(io("receive on the link"))?;
    Ok(Some((msg, payload)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bad_ones_are_refused() {
        let mut buf = Vec::new();
        send(&mut buf, &Msg::Data { crc: 7 }, b"abc").unwrap();
        send(&mut buf, &Msg::Stored, b"").unwrap();
        let mut r = &buf[..];
        assert_eq!(
            recv(&mut r).unwrap(),
            Some((Msg::Data { crc: 7 }, b"abc".to_vec()))
        );
        assert_eq!(recv(&mut r).unwrap(), Some((Msg::Stored, vec![])));
        assert_eq!(recv(&mut r).unwrap(), None);
        let huge = (MAX_HEADER as u32 + 1).to_le_bytes();
        assert!(recv(&mut &huge[..])
            .unwrap_err()
            .to_string()
            .contains("header"));
        let mut junk = 3u32.to_le_bytes().to_vec();
        junk.extend_from_slice(b"{x}");
        assert!(recv(&mut &junk[..])
            .unwrap_err()
            .to_string()
            .contains("not a message"));
        let mut big = Vec::new();
        send(&mut big, &Msg::Stored, b"").unwrap();
        let n = big.len();
        big[n - 8..].copy_from_slice(&(MAX_PAYLOAD + 1).to_le_bytes());
        assert!(recv(&mut &big[..])
            .unwrap_err()
            .to_string()
            .contains("payload"));
    }

    #[test]
    fn before_authentication_only_a_small_frame_is_read() {
        // A header length just over the limit is refused from its 4 bytes alone: the reader
        // has nothing more to give, so any attempt to read (or allocate) the header would fail
        // with an end of stream instead of this message.
        let over = (PRE_AUTH_MAX_HEADER as u32 + 1).to_le_bytes();
        let e = recv_limited(&mut &over[..], PRE_AUTH_MAX_HEADER, 0).unwrap_err();
        assert!(e.to_string().contains("at most 4096"), "{e}");
        let mut hello = Vec::new();
        let m = Msg::Hello {
            site: "hpc".into(),
            token: "ab".repeat(32),
            version: VERSION,
        };
        send(&mut hello, &m, b"").unwrap();
        assert_eq!(
            recv_limited(&mut &hello[..], PRE_AUTH_MAX_HEADER, 0).unwrap(),
            Some((m.clone(), vec![]))
        );
        // No payload at all before authentication.
        let mut with = Vec::new();
        send(&mut with, &m, b"x").unwrap();
        let e = recv_limited(&mut &with[..], PRE_AUTH_MAX_HEADER, 0).unwrap_err();
        assert!(e.to_string().contains("payload of 1 bytes"), "{e}");
    }
}
