//! The wire protocol: frame headers, whole frames read from a byte stream, and the bincode body
//! of every type a peer decodes (requests, responses, and the C API's serialized handles).
//! The first input byte picks what the rest is decoded as.
//!
//! Properties: no panic; whatever decodes re-encodes, and that encoding decodes to a value that
//! encodes to the same bytes (bincode round trip is stable); a decoded header re-encodes to the
//! same 32 bytes; a frame body is never allocated beyond the header's bounded `body_len`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pdcx_core::protocol::{
    self, decode_body, encode_body, FrameKind, Header, Hello, PeerRequest, PeerResponse, Request,
    Response, ServerInfo, HEADER_LEN, MAX_BODY,
};
use pdcx_core::{ContainerInfo, ObjectMeta, Region};
use serde::{de::DeserializeOwned, Serialize};

/// decode → encode → decode → encode gives the same bytes twice.
fn round_trip<T: Serialize + DeserializeOwned>(body: &[u8]) {
    let Ok(v) = decode_body::<T>(body) else {
        return;
    };
    let e1 = encode_body(&v).expect("a decoded value encodes");
    let v2 = decode_body::<T>(&e1).expect("an encoded value decodes");
    let e2 = encode_body(&v2).expect("a decoded value encodes");
    assert_eq!(e1, e2, "bincode round trip is not stable");
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 8 {
        0 => {
            // A frame off the wire; the max payload comes from the input too.
            let max_payload = 1u64 << (mode >> 3);
            let mut r = rest;
            if let Ok((h, body)) = protocol::read_frame_head(&mut r, max_payload) {
                assert!(h.body_len <= MAX_BODY && h.payload_len <= max_payload);
                assert_eq!(body.len(), h.body_len as usize);
                assert_eq!(body[..], rest[HEADER_LEN..HEADER_LEN + body.len()]);
                assert_eq!(Header::decode(&h.encode(), max_payload).unwrap(), h);
                match h.kind {
                    FrameKind::Request => round_trip::<Request>(&body),
                    FrameKind::Response => round_trip::<Response>(&body),
                    FrameKind::PeerRequest => round_trip::<PeerRequest>(&body),
                    FrameKind::PeerResponse => round_trip::<PeerResponse>(&body),
                    FrameKind::Hello => round_trip::<Hello>(&body),
                    FrameKind::Welcome => round_trip::<Result<ServerInfo, pdcx_core::Error>>(&body),
                    FrameKind::Challenge => {}
                }
            }
            // The handshake's tighter limit must hold as well.
            let mut r = rest;
            if let Ok((h, body)) = protocol::read_frame_head_limited(&mut r, 64, max_payload) {
                assert!(h.body_len <= 64 && body.len() <= 64);
            }
        }
        1 => {
            let mut b = [0u8; HEADER_LEN];
            let n = rest.len().min(HEADER_LEN);
            b[..n].copy_from_slice(&rest[..n]);
            if let Ok(h) = Header::decode(&b, u64::MAX) {
                assert_eq!(h.encode(), b, "a decoded header re-encodes to other bytes");
            }
        }
        2 => round_trip::<Request>(rest),
        3 => round_trip::<PeerRequest>(rest),
        4 => round_trip::<Response>(rest),
        5 => round_trip::<PeerResponse>(rest),
        6 => round_trip::<ObjectMeta>(rest),
        _ => {
            round_trip::<ContainerInfo>(rest);
            // Regions are also stored as plain bincode in the metadata database.
            if let Ok(r) = bincode::deserialize::<Region>(rest) {
                let e = bincode::serialize(&r).unwrap();
                assert_eq!(bincode::deserialize::<Region>(&e).unwrap(), r);
            }
        }
    }
});
