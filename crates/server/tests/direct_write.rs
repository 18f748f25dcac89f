//! One-copy writes: a same-node client writes a large payload into the
//! server's log itself, into room the server reserved; the write is then committed like a
//! staged one, survives a restart, and a payload that does not match its checksum ruins only
//! its own write.

use pdcx_client::{start_all, wait_all, Transfer};
use pdcx_core::protocol::{Durability, ObjectSpec};
use pdcx_core::{Dtype, Region};
use pdcx_server::engine::Engine;
use pdcx_server::meta::Metadata;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;
mod common;
use common::{byte_object, deployment};

fn r(o: u64, n: u64) -> Region {
    Region::new(vec![o], vec![n]).unwrap()
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// The server's `pdcx_direct_write_bytes_total`.
fn direct_bytes(h: &pdcx_server::ServerHandle) -> u64 {
    let text = pdcx_server::metrics::render(&h.server);
    text.lines()
        .find(|l| l.starts_with("pdcx_direct_write_bytes_total"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .expect("metric present") as u64
}

#[test]
fn large_writes_go_into_the_log_from_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let h = deployment(root);
    let c = pdcx_client::Client::connect(Some(root)).unwrap();
    const MIB: usize = 1 << 20;
    let o = byte_object(&c, "direct", 4 * MIB as u64);
    let loaded = pattern(MIB, 1);
    let user = pattern(2 * MIB, 2);
    let small = pattern(4096, 3);
    let mut a = Transfer::write(&c, &o, r(0, MIB as u64)).unwrap();
    a.load_from(&loaded).unwrap();
    let mut b = Transfer::write(&c, &o, r(MIB as u64, 2 * MIB as u64)).unwrap();
    assert!(b.direct_write_possible());
    // SAFETY: `user` outlives the wait below and is not changed before it.
    unsafe { b.set_write_source(user.as_ptr(), user.len()) }.unwrap();
    let mut s = Transfer::write(&c, &o, r(3 * MIB as u64, 4096)).unwrap();
    assert!(!s.direct_write_possible(), "small writes are staged");
    s.load_from(&small).unwrap();
    for t in [&mut a, &mut b, &mut s] {
        t.durability = Durability::Local;
    }
    let mut all = [&mut a, &mut b, &mut s];
    start_all(&mut all).unwrap();
    wait_all(&mut all).unwrap();
    assert_eq!(direct_bytes(&h), 3 * MIB as u64);

    let mut want = vec![0u8; 4 * MIB];
    want[..MIB].copy_from_slice(&loaded);
    want[MIB..3 * MIB].copy_from_slice(&user);
    want[3 * MIB..3 * MIB + 4096].copy_from_slice(&small);
    let mut got = vec![0u8; 4 * MIB];
    c.read_into(o.id, &r(0, 4 * MIB as u64), &mut got).unwrap();
    assert!(got == want, "read back after one-copy writes");
    // (Restarts: the engine test below and tests/test_direct_write.py, which kills servers.)

    // Overwrite part of it the same way: the later write wins.
    let again = pattern(MIB, 9);
    c.write(
        o.id,
        &r(MIB as u64 / 2, MIB as u64),
        &again,
        Durability::Local,
    )
    .unwrap();
    want[MIB / 2..MIB / 2 + MIB].copy_from_slice(&again);
    assert_eq!(direct_bytes(&h), 4 * MIB as u64);

    drop(c);
    h.shutdown().unwrap();
}

fn open(dir: &Path) -> (Arc<Metadata>, Engine) {
    let meta = Arc::new(Metadata::open(&dir.join("meta.sqlite"), 0, 1).unwrap());
    let (engine, _, _) = Engine::open(&dir.join("log"), meta.clone(), 1 << 20).unwrap();
    (meta, engine)
}

fn object(meta: &Metadata, name: &str, n: u64) -> u64 {
    let spec = ObjectSpec {
        name: name.into(),
        dims: vec![n],
        dtype: Dtype::UInt8,
        fill: None,
        containers: vec![],
        tags: vec![],
        creator: "test".into(),
    };
    meta.create_object(&spec).unwrap().id
}

/// What a client does with a reservation: write the payload into the named file.
fn client_write(engine: &Engine, span: (u64, u64, u64, u64), bytes: &[u8]) {
    let (seg, dev, ino, offset) = span;
    let path = pdcx_store::segment_path(engine.log_dir(), seg);
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let m = f.metadata().unwrap();
    assert_eq!((m.dev(), m.ino()), (dev, ino));
    f.write_all_at(bytes, offset).unwrap();
}

#[test]
fn a_payload_that_does_not_match_its_checksum_ruins_only_its_own_write() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, engine) = open(dir.path());
    let n = 300_000u64;
    let bad = object(&meta, "bad", n);
    let good = object(&meta, "good", n);
    let promised = pattern(n as usize, 4);
    let scribbled = pattern(n as usize, 5);
    let ok = pattern(n as usize, 6);
    // The bad writer announces one payload and writes another (as a client changing its
    // buffer during the write would).
    let (mut bad_writer, mut good_writer) =
        (engine.store().writer_lease(), engine.store().writer_lease());
    let (s1, (dev, ino)) = engine
        .reserve(
            &mut bad_writer,
            1,
            bad,
            &r(0, n),
            n,
            crc32c::crc32c(&promised),
        )
        .unwrap();
    client_write(
        &engine,
        (s1.loc.segment, dev, ino, s1.loc.offset),
        &scribbled,
    );
    let (s2, (dev, ino)) = engine
        .reserve(&mut good_writer, 2, good, &r(0, n), n, crc32c::crc32c(&ok))
        .unwrap();
    client_write(&engine, (s2.loc.segment, dev, ino, s2.loc.offset), &ok);
    // A staged write after both, and a reservation never written at all.
    let (s3, _) = engine
        .reserve(
            &mut bad_writer,
            3,
            bad,
            &r(0, 10),
            10,
            crc32c::crc32c(&[7u8; 10]),
        )
        .unwrap();
    let s4 = engine.stage(4, good, &r(0, 100), &[8u8; 100]).unwrap();
    assert_ne!(
        s1.loc.segment, s2.loc.segment,
        "each writer has its own segment"
    );
    assert_ne!(s4.loc.segment, s2.loc.segment);
    engine.commit(&[s1, s2, s3, s4], Durability::Local).unwrap();
    drop((bad_writer, good_writer));

    let mut out = vec![0u8; n as usize];
    let mut want = ok.clone();
    want[..100].copy_from_slice(&[8u8; 100]);
    engine.read(good, &r(0, n), &mut out).unwrap();
    assert!(out == want);
    drop(engine);
    drop(meta);

    // A crash before any checkpoint: recovery scans the log, finds the two bad records
    // damaged, drops their extents and keeps everything else.
    let (meta, engine) = open(dir.path());
    engine.read(good, &r(0, n), &mut out).unwrap();
    assert!(out == want, "the good write survives a restart");
    engine.read(bad, &r(0, n), &mut out).unwrap();
    assert!(
        out.iter().all(|&b| b == 0),
        "the damaged writes are dropped (fill value), never read as data"
    );
    // The log goes on after them.
    let s5 = engine.stage(5, bad, &r(0, 3), &[1, 2, 3]).unwrap();
    engine.commit(&[s5], Durability::Local).unwrap();
    drop(engine);
    drop(meta);
    let (_meta, engine) = open(dir.path());
    engine.read(bad, &r(0, 4), &mut out[..4]).unwrap();
    assert_eq!(&out[..4], &[1, 2, 3, 0]);
}

/// A writer that writes through its segment file outside its reservation (a descriptor
/// reused by a stray `write`, a bad offset) reaches only its own segment: another writer's
/// committed data and the staged writes are untouched, before and after a restart.
#[test]
fn a_stray_write_through_a_writers_file_reaches_only_its_own_records() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, engine) = open(dir.path());
    let n = 300_000u64;
    let (mine, theirs) = (object(&meta, "mine", n), object(&meta, "theirs", n));
    let (a_data, b_data) = (pattern(n as usize, 1), pattern(n as usize, 2));
    let (mut a, mut b) = (engine.store().writer_lease(), engine.store().writer_lease());
    let (sb, (dev, ino)) = engine
        .reserve(&mut b, 1, theirs, &r(0, n), n, crc32c::crc32c(&b_data))
        .unwrap();
    client_write(&engine, (sb.loc.segment, dev, ino, sb.loc.offset), &b_data);
    let (sa, (dev, ino)) = engine
        .reserve(&mut a, 2, mine, &r(0, n), n, crc32c::crc32c(&a_data))
        .unwrap();
    let a_span = (sa.loc.segment, dev, ino, sa.loc.offset);
    client_write(&engine, a_span, &a_data);
    let staged = engine.stage(3, theirs, &r(0, 100), &[9u8; 100]).unwrap();
    engine.commit(&[sb, sa, staged], Durability::Local).unwrap();
    // Writer a, still connected, writes garbage from offset 0 over everything it can reach.
    client_write(
        &engine,
        (a_span.0, a_span.1, a_span.2, 0),
        &vec![0x5A; n as usize + 4096],
    );

    let mut want = b_data.clone();
    want[..100].copy_from_slice(&[9u8; 100]);
    let mut out = vec![0u8; n as usize];
    engine.read(theirs, &r(0, n), &mut out).unwrap();
    assert!(out == want, "another writer's data is untouched");
    assert!(
        engine.read(mine, &r(0, n), &mut out).is_err(),
        "the scribbled write is an error, never garbage returned as data"
    );
    drop((a, b));
    drop(engine);
    drop(meta);
    let (_meta, engine) = open(dir.path());
    engine.read(theirs, &r(0, n), &mut out).unwrap();
    assert!(out == want, "and after a restart");
}
