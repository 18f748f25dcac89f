//! The metrics endpoint's request-head parser (`crates/server/src/metrics/http.rs`,
//! `parse_head`): whatever bytes a scraper, or anyone who can reach the port, sends.
//!
//! Properties: no panic; a head is `TooLarge` exactly when its end (or, without one, its
//! length) is past `MAX_HEAD`; a parsed request has an upper-case method and a path with no
//! query and no whitespace; cutting a head before its ending empty line makes it `Incomplete`
//! (or still `TooLarge`), never a different request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pdcx_server::metrics::{parse_head, Head, MAX_HEAD};

/// Where the head's ending empty line ends, the slow obvious way.
fn end_of_head(b: &[u8]) -> Option<usize> {
    (0..b.len()).find_map(|i| {
        let s = &b[..=i];
        (s.ends_with(b"\r\n\r\n") || s.ends_with(b"\n\n")).then_some(i + 1)
    })
}

fuzz_target!(|data: &[u8]| {
    let got = parse_head(data);
    let end = end_of_head(data);
    match (&got, end) {
        (Head::Incomplete, None) => assert!(data.len() <= MAX_HEAD),
        (Head::Incomplete, Some(_)) => panic!("an ended head parsed as incomplete"),
        (Head::TooLarge, e) => assert!(e.unwrap_or(data.len()) > MAX_HEAD),
        (Head::Malformed, e) => assert!(e.is_some_and(|e| e <= MAX_HEAD)),
        (Head::Request { method, path }, e) => {
            assert!(e.is_some_and(|e| e <= MAX_HEAD));
            assert!(!method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase()));
            assert!(!path.contains('?') && !path.contains(char::is_whitespace));
        }
    }
    // A head cut before its end is not (yet) a request.
    if let Some(e) = end {
        let cut = &data[..e - 1];
        if end_of_head(cut).is_none() {
            assert!(matches!(
                parse_head(cut),
                Head::Incomplete | Head::TooLarge
            ));
        }
    }
});
