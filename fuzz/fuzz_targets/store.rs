//! The store's on-disk formats: segment records (scanned from a segment file) and the MANIFEST.
//! The first input byte picks the mode.
//!
//! Properties:
//! - raw segment bytes: the scan never panics, returns a valid prefix no longer than the file,
//!   its records lie back to back from offset 0, and re-encoding each record (header from
//!   `encode_prefix` + its payload) gives exactly the file's valid prefix;
//! - built segments: records made by `encode_prefix` scan back exactly; after one corrupted
//!   byte or a truncation, the scan returns exactly the records wholly before the damage;
//! - MANIFEST: loading never panics; a loaded manifest is version 1 with positive increasing
//!   segment ids, and its JSON loads back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pdcx_core::Region;
use pdcx_store::manifest::{self, Manifest};
use pdcx_store::record::{self, encode_prefix, segment_file_name};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One scratch directory per fuzzing process (files are overwritten each run).
fn scratch() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("tempdir"))
        .path()
}

fn segment_path() -> PathBuf {
    scratch().join(segment_file_name(7))
}

/// Reads bytes off the front of the input, zero-padded when it runs out.
struct Input<'a>(&'a [u8]);
impl Input<'_> {
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        let n = self.0.len().min(N);
        b[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        b
    }
    fn u8(&mut self) -> u8 {
        self.bytes::<1>()[0]
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes::<8>())
    }
}

fn scan_raw(data: &[u8], limit: Option<u64>) {
    let path = segment_path();
    std::fs::write(&path, data).unwrap();
    let (recs, valid) = record::scan_segment(&path, limit).expect("scan of a readable file");
    assert!(valid <= data.len() as u64);
    if let Some(l) = limit {
        assert!(valid <= l);
    }
    let mut rebuilt = Vec::new();
    for r in &recs {
        assert_eq!(r.location.segment, 7);
        let payload_at = r.location.offset as usize;
        let payload = &data[payload_at..payload_at + r.location.len as usize];
        assert_eq!(crc32c::crc32c(payload), r.location.crc);
        rebuilt.extend(encode_prefix(
            r.object,
            r.txn,
            &r.region,
            r.location.len,
            r.location.crc,
        ));
        assert_eq!(rebuilt.len(), payload_at, "records are not back to back");
        rebuilt.extend_from_slice(payload);
        r.region.validate().expect("a scanned region is valid");
    }
    assert_eq!(rebuilt.len() as u64, valid);
    assert_eq!(rebuilt[..], data[..valid as usize]);
}

fn scan_built(mut inp: Input) {
    // Up to 8 records with fuzzer-chosen fields, then one corruption or a truncation.
    let n = inp.u8() % 8;
    let mut file = Vec::new();
    let mut ends = Vec::new();
    let mut want = Vec::new();
    for _ in 0..n {
        let ndim = 1 + inp.u8() as usize % pdcx_core::MAX_DIMS;
        let mut offset = Vec::new();
        let mut count = Vec::new();
        for _ in 0..ndim {
            offset.push(inp.u64() >> 8);
            count.push(1 + (inp.u8() as u64));
        }
        let Ok(region) = Region::new(offset, count) else {
            continue;
        };
        let (object, txn) = (inp.u64(), inp.u64());
        let len = inp.u8() as usize;
        let payload: Vec<u8> = (0..len)
            .map(|i| inp.0.get(i).copied().unwrap_or(i as u8))
            .collect();
        let prefix = encode_prefix(object, txn, &region, len as u64, crc32c::crc32c(&payload));
        file.extend_from_slice(&prefix);
        file.extend_from_slice(&payload);
        ends.push(file.len());
        want.push((object, txn, region));
    }
    let how = inp.u8();
    let at = if file.is_empty() {
        0
    } else {
        inp.u64() as usize % file.len()
    };
    let damaged_from = match how % 3 {
        _ if file.is_empty() => 0,
        0 => file.len(), // intact
        1 => {
            file[at] ^= inp.u8().max(1);
            at
        }
        _ => {
            file.truncate(at);
            at
        }
    };
    let path = segment_path();
    std::fs::write(&path, &file).unwrap();
    let (recs, valid) = record::scan_segment(&path, None).unwrap();
    // A record is intact when it ends at or before the first damaged (or missing) byte.
    let intact = ends.iter().take_while(|&&e| e <= damaged_from).count();
    assert_eq!(
        recs.len(),
        intact,
        "scan kept {} of {intact} intact records",
        recs.len()
    );
    assert_eq!(
        valid,
        if intact == 0 {
            0
        } else {
            ends[intact - 1] as u64
        }
    );
    for (r, (object, txn, region)) in recs.iter().zip(&want) {
        assert_eq!((r.object, r.txn, &r.region), (*object, *txn, region));
    }
}

fn load_manifest(data: &[u8]) {
    let dir = scratch();
    let path = dir.join(manifest::MANIFEST);
    std::fs::write(&path, data).unwrap();
    let Ok(Some(m)) = manifest::load(dir) else {
        return;
    };
    assert_eq!(m.version, manifest::VERSION);
    assert!(m.segments.iter().all(|s| s.id > 0));
    assert!(m.segments.windows(2).all(|w| w[0].id < w[1].id));
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    let again: Manifest = manifest::load(dir).unwrap().unwrap();
    assert_eq!(again, m);
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => scan_raw(rest, None),
        1 => {
            let mut inp = Input(rest);
            let limit = inp.u64() % (rest.len() as u64 + 2);
            scan_raw(inp.0, Some(limit));
        }
        2 => scan_built(Input(rest)),
        _ => load_manifest(rest),
    }
});
