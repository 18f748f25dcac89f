//! Replies from a peer server, read as a server's peer connection (or a client) reads them
//! (`crates/transport/src/conn.rs`, `peer_call`): a frame head with no payload limit, a
//! bincode `PeerResponse` body, then the payload the header announces, received with
//! `protocol::read_payload`.
//!
//! Properties: no panic; the payload buffer never holds more than about twice what arrived
//! (at least `PAYLOAD_STEP`) whatever length the header announces, and what arrived whole is
//! exactly the input's bytes; a decoded reply re-encodes stably; the pieces of a `Pieces`
//! reply can be sized (`byte_len`) and, once validated (as `engine/read.rs` does), intersected
//! with a read region without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pdcx_core::protocol::{self, decode_body, encode_body, FrameKind, PeerResponse, PAYLOAD_STEP};
use pdcx_core::Region;

fuzz_target!(|data: &[u8]| {
    let mut r = data;
    let Ok((h, body)) = protocol::read_frame_head(&mut r, u64::MAX) else {
        return;
    };
    if h.kind != FrameKind::PeerResponse {
        return;
    }
    let Ok(reply) = decode_body::<PeerResponse>(&body) else {
        return;
    };
    let e1 = encode_body(&reply).expect("a decoded reply encodes");
    let again = decode_body::<PeerResponse>(&e1).expect("an encoded reply decodes");
    assert_eq!(encode_body(&again).expect("encodes"), e1);
    let rest = r;
    let mut buf = Vec::new();
    let announced = usize::try_from(h.payload_len).unwrap_or(usize::MAX);
    let got = protocol::read_payload(&mut r, &mut buf, announced);
    assert!(
        buf.capacity() <= (2 * rest.len()).max(PAYLOAD_STEP),
        "{} bytes held for {} received ({} announced)",
        buf.capacity(),
        rest.len(),
        h.payload_len
    );
    match got {
        Ok(()) => assert_eq!(buf[..announced], rest[..announced]),
        Err(_) => assert!((rest.len() as u64) < h.payload_len),
    }
    if let PeerResponse::Pieces(list) = &reply {
        let read = Region::new(vec![0; 2], vec![1 << 20, 1 << 20]).expect("a region");
        for (_, piece) in list {
            let _ = piece.byte_len(8);
            // As the server's merged read does: a piece is validated before it is intersected.
            if piece.validate().is_ok() {
                let _ = piece.intersect(&read);
            }
        }
    }
});
