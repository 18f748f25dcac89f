//! Versions on purpose (`engine/retention.rs`, `meta/dropped.rs`): a version is the object as
//! of one of its writes; compaction keeps the versions an object's tags ask for readable, and
//! a read of one it dropped is refused, never answered with other bytes.

mod common;
use pdcx_core::model::TagValue;
use pdcx_core::protocol::{Durability, TagTarget};
use pdcx_core::{ErrorKind, ObjectId, Region};
use pdcx_server::datastore::CompactOptions;
use pdcx_server::engine::Engine;
use pdcx_tiers::DeploymentConfig;

const N: u64 = 4096;

fn whole() -> Region {
    Region::new(vec![0], vec![N]).unwrap()
}

fn payload(v: u64) -> Vec<u8> {
    (0..N)
        .flat_map(|i| (i as f64 + v as f64 * 1e6).to_le_bytes())
        .collect()
}

/// Writes version `v` of the whole object; returns its number.
fn write(engine: &Engine, id: ObjectId, v: u64) -> u64 {
    let s = engine.stage(v, id, &whole(), &payload(v)).unwrap();
    engine.commit(&[s], Durability::Local).unwrap();
    engine.store().newest_seq(id).unwrap()
}

fn read_at(engine: &Engine, id: ObjectId, seq: u64) -> pdcx_core::Result<Vec<u8>> {
    let mut out = vec![0u8; N as usize * 8];
    engine.read_at(id, &whole(), seq, &mut out).map(|()| out)
}

fn compact(engine: &Engine) -> u64 {
    let dropped = engine.drop_hidden_writes(true).unwrap();
    let opts = CompactOptions {
        threshold: 0.9,
        rate: 0,
        seal_min: 1,
    };
    let mut report = Default::default();
    engine
        .store()
        .compact(&opts, &mut report, &mut |_| {})
        .unwrap();
    dropped
}

fn tag(meta: &pdcx_server::meta::Metadata, id: ObjectId, key: &str, v: i64) {
    meta.put_tags(
        &TagTarget::Object(id),
        &vec![(key.to_string(), TagValue::Int(v))],
    )
    .unwrap();
}

#[test]
fn every_write_is_a_version_until_compaction_drops_it_and_then_reading_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DeploymentConfig::parse("", Vec::new()).unwrap();
    let (meta, engine) = common::open_engine(dir.path(), 0, &cfg, "versions");
    let id = meta.create_object(&common::f64_spec("x", N)).unwrap().id;
    let seqs: Vec<u64> = (1..=5).map(|v| write(&engine, id, v)).collect();
    for (k, &s) in seqs.iter().enumerate() {
        assert!(
            read_at(&engine, id, s).unwrap() == payload(k as u64 + 1),
            "version {s}"
        );
    }
    // Before the first write: the fill value.
    assert!(read_at(&engine, id, seqs[0] - 1).unwrap() == vec![0u8; N as usize * 8]);
    // Default retention: only the latest version stays.
    assert_eq!(compact(&engine), 4);
    let e = read_at(&engine, id, seqs[1]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert!(e.message.contains("dropped by compaction"), "{}", e.message);
    assert!(read_at(&engine, id, seqs[4]).unwrap() == payload(5));
    // After a restart the refusal stands.
    drop(engine);
    drop(meta);
    let (meta, engine) = common::open_engine(dir.path(), 0, &cfg, "versions");
    assert!(read_at(&engine, id, seqs[0]).is_err());
    assert!(read_at(&engine, id, seqs[4]).unwrap() == payload(5));
    drop((meta, engine));
}

#[test]
fn named_versions_and_the_last_n_are_kept_the_rest_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DeploymentConfig::parse("", Vec::new()).unwrap();
    let (meta, engine) = common::open_engine(dir.path(), 0, &cfg, "versions");
    let id = meta.create_object(&common::f64_spec("x", N)).unwrap().id;
    tag(&meta, id, "pdcx.keep.last", 3);
    let seqs: Vec<u64> = (1..=10).map(|v| write(&engine, id, v)).collect();
    tag(&meta, id, "pdcx.version.first-good", seqs[1] as i64);
    // Versions 1 and 3..=7 go; 2 (named) and 8..=10 (the last three) stay.
    assert_eq!(compact(&engine), 6);
    for (k, &s) in seqs.iter().enumerate() {
        let got = read_at(&engine, id, s);
        if k == 1 || k >= 7 {
            assert!(got.unwrap() == payload(k as u64 + 1), "kept version {s}");
        } else {
            assert_eq!(
                got.unwrap_err().kind,
                ErrorKind::NotFound,
                "dropped version {s}"
            );
        }
    }
    // Nothing more to drop until newer writes come.
    assert_eq!(compact(&engine), 0);
    let mut out = vec![0u8; N as usize * 8];
    engine.read(id, &whole(), &mut out).unwrap();
    assert!(out == payload(10));
}

#[test]
fn bad_retention_tags_are_refused_and_a_policy_that_cannot_be_read_keeps_everything() {
    use pdcx_server::engine::retention::check_tag;
    assert!(check_tag("pdcx.keep.last", &TagValue::Int(-2)).is_err());
    assert!(check_tag("pdcx.keep.seconds", &TagValue::Str("a week".into())).is_err());
    assert!(check_tag("pdcx.version.x", &TagValue::Float(1.5)).is_err());
    assert!(check_tag("pdcx.keep.last", &TagValue::Int(5)).is_ok());
    let dir = tempfile::tempdir().unwrap();
    let cfg = DeploymentConfig::parse("", Vec::new()).unwrap();
    let (meta, engine) = common::open_engine(dir.path(), 0, &cfg, "versions");
    let id = meta.create_object(&common::f64_spec("x", N)).unwrap().id;
    // Written past the check (as a shard of an older pdcx might hold it).
    meta.put_tags(
        &TagTarget::Object(id),
        &vec![("pdcx.keep.last".into(), TagValue::Str("many".into()))],
    )
    .unwrap();
    let seqs: Vec<u64> = (1..=3).map(|v| write(&engine, id, v)).collect();
    assert_eq!(compact(&engine), 0);
    assert!(read_at(&engine, id, seqs[0]).unwrap() == payload(1));
}

#[test]
fn versions_of_the_last_seconds_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DeploymentConfig::parse("", Vec::new()).unwrap();
    let (meta, engine) = common::open_engine(dir.path(), 0, &cfg, "versions");
    let id = meta.create_object(&common::f64_spec("x", N)).unwrap().id;
    tag(&meta, id, "pdcx.keep.seconds", 3600);
    let seqs: Vec<u64> = (1..=4).map(|v| write(&engine, id, v)).collect();
    assert_eq!(compact(&engine), 0, "every version is of the last hour");
    for (k, &s) in seqs.iter().enumerate() {
        assert!(read_at(&engine, id, s).unwrap() == payload(k as u64 + 1));
    }
    // A window of 0 s keeps the latest only.
    tag(&meta, id, "pdcx.keep.seconds", 0);
    assert_eq!(compact(&engine), 3);
    assert!(read_at(&engine, id, seqs[2]).is_err());
    assert!(read_at(&engine, id, seqs[3]).unwrap() == payload(4));
}
