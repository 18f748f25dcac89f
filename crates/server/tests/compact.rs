//! Compaction (`datastore/compact.rs`, `engine/drop.rs`): overwritten and deleted data give
//! their log space back, what stays live reads back exactly, before and after a restart, and
//! after a SIGKILL at any of its crash points (with `--features crash-points`).

mod common;
use pdcx_core::protocol::{CompactReport, Durability};
use pdcx_core::{ObjectId, Region};
use pdcx_server::datastore::CompactOptions;
use pdcx_server::engine::Engine;
use pdcx_tiers::DeploymentConfig;
use std::path::Path;

/// Elements (f64) per write: 256 KiB, so a 1 MiB log segment holds about 4 writes.
const CHUNK: u64 = 32_768;
const REGIONS: u64 = 8;

fn region(k: u64) -> Region {
    Region::new(vec![k * CHUNK], vec![CHUNK]).unwrap()
}

fn payload(k: u64, version: u64) -> Vec<u8> {
    (0..CHUNK)
        .flat_map(|i| ((k * CHUNK + i) as f64 + version as f64 * 1e9).to_le_bytes())
        .collect()
}

fn open(
    base: &Path,
) -> (
    std::sync::Arc<pdcx_server::meta::Metadata>,
    std::sync::Arc<Engine>,
) {
    let cfg = DeploymentConfig::parse("", Vec::new()).unwrap();
    common::open_engine(base, 0, &cfg, "compact")
}

fn create(meta: &pdcx_server::meta::Metadata, name: &str) -> ObjectId {
    meta.create_object(&common::f64_spec(name, REGIONS * CHUNK))
        .unwrap()
        .id
}

fn write(engine: &Engine, id: ObjectId, k: u64, version: u64) {
    let s = engine
        .stage(k, id, &region(k), &payload(k, version))
        .unwrap();
    engine.commit(&[s], Durability::Local).unwrap();
}

fn pass(engine: &Engine, threshold: f64) -> CompactReport {
    let mut report = CompactReport {
        dropped_writes: engine.drop_hidden_writes(true).unwrap(),
        ..Default::default()
    };
    let opts = CompactOptions {
        threshold,
        rate: 0,
        seal_min: 1,
    };
    engine
        .store()
        .compact(&opts, &mut report, &mut |_| {})
        .unwrap();
    report
}

fn assert_reads(engine: &Engine, id: ObjectId, versions: &[u64]) {
    for (k, &v) in versions.iter().enumerate() {
        let mut out = vec![0u8; CHUNK as usize * 8];
        engine.read(id, &region(k as u64), &mut out).unwrap();
        assert!(out == payload(k as u64, v), "region {k} is not version {v}");
    }
}

#[test]
fn overwrites_give_their_space_back_and_the_latest_data_stays() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, engine) = open(dir.path());
    let id = create(&meta, "x");
    let mut versions = vec![0u64; REGIONS as usize];
    for k in 0..REGIONS {
        write(&engine, id, k, 0);
    }
    // Ten checkpoints of half the object: the other half stays live in the first segments.
    for v in 1..=10 {
        for k in 0..REGIONS / 2 {
            write(&engine, id, k, v);
            versions[k as usize] = v;
        }
    }
    // Until the pass drops them, hidden writes count as live.
    let before = engine.store().space();
    let latest = REGIONS * (CHUNK * 8 + 56);
    assert!(before.0 >= before.1 && before.1 > 5 * latest, "{before:?}");
    let r = pass(&engine, 0.9);
    assert_eq!(
        r.dropped_writes, 40,
        "every overwritten write is hidden: {r:?}"
    );
    assert!(r.moved_extents > 0, "live data was copied out: {r:?}");
    let (log, live) = engine.store().space();
    assert_eq!(live, latest, "only the latest writes are live");
    assert!(
        log <= live + live / 5 + (1 << 20),
        "after a pass the log ({log}) is close to its live bytes ({live}): {r:?}"
    );
    assert_reads(&engine, id, &versions);
    // A second pass finds nothing more to do.
    let again = pass(&engine, 0.9);
    assert_eq!(
        (again.dropped_writes, again.moved_bytes),
        (0, 0),
        "{again:?}"
    );
    drop(engine);
    drop(meta);
    let (_meta, engine) = open(dir.path());
    assert_reads(&engine, id, &versions);
    assert_eq!(
        engine.store().space().0,
        log,
        "a restart finds the same log"
    );
}

#[test]
fn deleting_an_object_frees_its_log_space() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, engine) = open(dir.path());
    let gone = create(&meta, "gone");
    let kept = create(&meta, "kept");
    for k in 0..REGIONS {
        write(&engine, gone, k, 1);
        write(&engine, kept, k, 2);
    }
    let full = engine.store().space().0;
    meta.delete_object(gone).unwrap();
    engine.forget(gone);
    let r = pass(&engine, 0.9);
    let (log, live) = engine.store().space();
    assert!(r.freed_bytes > 0, "{r:?}");
    assert!(
        log < full * 6 / 10,
        "half the data was deleted: log {log} of {full} before ({r:?})"
    );
    assert_eq!(
        live,
        REGIONS * (CHUNK * 8 + 56),
        "what is left is the kept object"
    );
    assert_reads(&engine, kept, &[2; REGIONS as usize]);
    meta.delete_object(kept).unwrap();
    engine.forget(kept);
    pass(&engine, 0.9);
    let (log, live) = engine.store().space();
    assert_eq!(live, 0);
    assert!(
        log <= 1 << 20,
        "with everything deleted at most the newest segment stays: {log} bytes"
    );
}

/// The owner's region map can name a write its holder never committed (the owner recorded
/// the region, then crashed before answering; the holder's commit failed). Such a row must
/// never be what hides a write that is there: each server drops only what its own newer
/// writes hide. (The crash harness found this: an acknowledged write lost after a kill at
/// `register.after_region_map`.)
#[test]
fn a_region_map_row_without_its_write_hides_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, engine) = open(dir.path());
    let id = create(&meta, "x");
    write(&engine, id, 0, 1);
    let phantom = pdcx_core::protocol::RegisterItem {
        id,
        region: region(0),
        token: None,
    };
    let seqs = engine.register_batch(1, &[phantom]).unwrap();
    assert!(seqs[0].is_some_and(|s| s > 1), "{seqs:?}");
    assert_eq!(engine.drop_hidden_writes(true).unwrap(), 0);
    assert_eq!(
        engine.store().extents_of(id).len(),
        1,
        "the acknowledged write stays"
    );
}

#[test]
fn writes_partly_covered_stay_and_only_whole_covers_drop() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, engine) = open(dir.path());
    let id = create(&meta, "x");
    write(&engine, id, 0, 1);
    // Half of region 0 written again: the first write still holds the other half.
    let half = Region::new(vec![0], vec![CHUNK / 2]).unwrap();
    let bytes = payload(0, 2)[..(CHUNK / 2 * 8) as usize].to_vec();
    let s = engine.stage(9, id, &half, &bytes).unwrap();
    engine.commit(&[s], Durability::Local).unwrap();
    assert_eq!(engine.drop_hidden_writes(true).unwrap(), 0);
    let mut out = vec![0u8; CHUNK as usize * 8];
    engine.read(id, &region(0), &mut out).unwrap();
    let mut want = payload(0, 1);
    want[..bytes.len()].copy_from_slice(&bytes);
    assert!(out == want);
}

/// What the crash workload leaves: region k's last version.
#[cfg(feature = "crash-points")]
fn latest() -> Vec<u64> {
    (0..REGIONS)
        .map(|k| if k < REGIONS / 2 { 10 } else { 0 })
        .collect()
}

#[cfg(feature = "crash-points")]
fn workload(base: &Path) {
    let (meta, engine) = open(base);
    let id = create(&meta, "x");
    std::fs::write(base.join("object"), id.to_string()).unwrap();
    for k in 0..REGIONS {
        write(&engine, id, k, 0);
    }
    for v in 1..=10 {
        for k in 0..REGIONS / 2 {
            write(&engine, id, k, v);
        }
    }
    std::fs::write(base.join("written"), "").unwrap();
    pass(&engine, 0.9);
}

/// Runs only as the child (PDCX_CRASH_CHILD names its directory); a no-op otherwise.
#[cfg(feature = "crash-points")]
#[test]
fn crash_child() {
    if let Some(dir) = std::env::var_os("PDCX_CRASH_CHILD") {
        workload(Path::new(&dir));
    }
}

/// Every crash point of compaction, with a real SIGKILL (`--features crash-points`): the
/// child writes and overwrites an object (every write acknowledged durable first), then
/// compacts and dies at the point. Recovery must read every region back exactly as last
/// written; a pass after it frees the garbage the crash left and changes no byte; a second
/// recovery changes nothing.
#[cfg(feature = "crash-points")]
#[test]
fn a_crash_anywhere_in_compaction_loses_and_changes_nothing() {
    let points = [
        ("compact.after_copy", 1),
        ("compact.after_copy", 3),
        ("compact.after_sync", 1),
        ("compact.after_rows", 1),
        ("retire.before_manifest", 2),
        ("retire.after_manifest", 2),
    ];
    for (point, n) in points {
        let dir = tempfile::tempdir().unwrap();
        common::kill_child_at(dir.path(), point, n);
        assert!(
            dir.path().join("written").exists(),
            "{point}:{n} hit before compaction"
        );
        let id: ObjectId = std::fs::read_to_string(dir.path().join("object"))
            .unwrap()
            .parse()
            .unwrap();
        let log = {
            let (_meta, engine) = open(dir.path());
            assert_reads(&engine, id, &latest());
            // The garbage the crash left (copies never published, victims not retired) goes.
            pass(&engine, 0.9);
            assert_reads(&engine, id, &latest());
            let (log, live) = engine.store().space();
            assert!(
                log <= live + live / 5 + (1 << 20),
                "{point}:{n}: log {log} after a pass, {live} live"
            );
            log
        };
        let (_meta, engine) = open(dir.path());
        assert_reads(&engine, id, &latest());
        assert_eq!(
            engine.store().space().0,
            log,
            "{point}:{n}: a second recovery changed the log"
        );
    }
}
