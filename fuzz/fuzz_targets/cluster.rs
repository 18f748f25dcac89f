//! The cluster file (`ROOT/cluster.json`) every client and server reads, and its hex secret.
//!
//! Properties: loading never panics; a loaded file has `size` servers ranked 0..size and a
//! secret that decodes; written back as JSON it loads to the same value; hex round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pdcx_client::cluster::{decode_hex, encode_hex, ClusterFile};
use std::path::Path;
use std::sync::OnceLock;

fn scratch() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("tempdir"))
        .path()
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(bytes) = decode_hex(text) {
            assert_eq!(bytes.len() * 2, text.len());
            assert!(encode_hex(&bytes).eq_ignore_ascii_case(text));
        }
    }
    let root = scratch();
    let path = ClusterFile::path(root);
    std::fs::write(&path, data).unwrap();
    let Ok(cf) = ClusterFile::load(root) else {
        return;
    };
    assert_eq!(cf.servers.len(), cf.size as usize);
    assert!(cf.size > 0);
    assert!(cf
        .servers
        .iter()
        .enumerate()
        .all(|(i, s)| s.rank as usize == i));
    let secret = cf.secret_bytes().expect("a loaded secret decodes");
    assert_eq!(decode_hex(&encode_hex(&secret)).unwrap(), secret);
    // `store` fsyncs; the round trip of the bytes it writes needs no disk sync.
    std::fs::write(&path, serde_json::to_string_pretty(&cf).unwrap()).unwrap();
    assert_eq!(ClusterFile::load(root).unwrap(), cf);
});
