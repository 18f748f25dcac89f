//! The cross-site link's frames as a gateway reads them (`crates/xsite/src/wire.rs`), and what
//! it makes of a push's transfer description (`crates/xsite/src/receive.rs`). The first input
//! byte picks the mode: 0, a frame read before the peer authenticated (the small limit, no
//! payload); 1, frames read one after another after it (the normal limits); 2, a transfer
//! description (JSON) as a `Begin` carries it.
//!
//! Properties: no panic; no frame is accepted beyond the limits it was read with (lengths are
//! refused before anything is allocated for them); whatever decodes re-encodes to a frame that
//! decodes to the same kind of message with the same payload; a description `check_spec`
//! accepts has its chunks inside one frame, and without a grant its push lands under the
//! pushing site's own names and writes only into what that site sent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pdcx_xsite::receive::{check_spec, push_placement};
use pdcx_xsite::wire::{self, Msg, TransferSpec, MAX_HEADER, MAX_PAYLOAD, PRE_AUTH_MAX_HEADER};

/// The variant's name: messages with floats (object metadata's times) may not survive a JSON
/// round trip bit for bit, their kind does.
fn kind(m: &Msg) -> String {
    let v = serde_json::to_value(m).expect("a message encodes");
    v["t"].as_str().unwrap_or_default().to_string()
}

fn round_trip(msg: &Msg, payload: &[u8]) {
    let mut buf = Vec::new();
    wire::send(&mut buf, msg, payload).expect("a decoded message encodes");
    let (again, p) = wire::recv(&mut &buf[..])
        .expect("an encoded frame decodes")
        .expect("a whole frame");
    assert_eq!(kind(&again), kind(msg));
    assert_eq!(p, payload);
}

fn check_push(spec: &TransferSpec) {
    if check_spec(spec).is_err() {
        return;
    }
    let elem = spec.meta.dtype.size();
    for c in &spec.chunks {
        assert!(c.byte_len(elem).expect("a checked chunk's size") <= MAX_PAYLOAD);
    }
    if let Ok(p) = push_placement(&spec.source_site, spec, &[]) {
        let own = format!("{}/", spec.source_site);
        assert!(p.name.starts_with(&own), "{} outside {own}", p.name);
        assert!(p.containers.iter().all(|c| c.starts_with(&own)));
        assert_eq!(p.owner.as_deref(), Some(spec.source_site.as_str()));
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => {
            let mut r = rest;
            if let Ok(Some((msg, payload))) =
                wire::recv_limited(&mut r, PRE_AUTH_MAX_HEADER, 0)
            {
                let hlen = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
                assert!(hlen <= PRE_AUTH_MAX_HEADER && payload.is_empty());
                round_trip(&msg, &payload);
            }
        }
        1 => {
            let mut r = rest;
            while let Ok(Some((msg, payload))) = wire::recv(&mut r) {
                assert!(payload.len() as u64 <= MAX_PAYLOAD);
                assert!(serde_json::to_vec(&msg).is_ok_and(|h| h.len() <= MAX_HEADER * 2));
                round_trip(&msg, &payload);
                if let Msg::Begin { spec } = &msg {
                    check_push(spec);
                }
            }
        }
        _ => {
            if let Ok(spec) = serde_json::from_slice::<TransferSpec>(rest) {
                check_push(&spec);
            }
        }
    }
});
