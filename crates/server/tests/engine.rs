//! The engine's contract: commit order decides overlaps, fill values show through gaps, and
//! recovery never exposes writes that were not made durable.

use pdcx_core::protocol::{Durability, ObjectSpec};
use pdcx_core::{Dtype, Region};
use pdcx_server::engine::Engine;
use pdcx_server::meta::Metadata;
use std::path::Path;
use std::sync::Arc;

fn open(dir: &Path) -> (Arc<Metadata>, Engine) {
    let meta = Arc::new(Metadata::open(&dir.join("meta.sqlite"), 0, 1).unwrap());
    let (engine, _, _) = Engine::open(&dir.join("log"), meta.clone(), 1 << 20).unwrap();
    (meta, engine)
}

fn object(meta: &Metadata, dims: Vec<u64>, fill: u16) -> u64 {
    let spec = ObjectSpec {
        name: "o".into(),
        dims,
        dtype: Dtype::UInt16,
        fill: Some(fill.to_le_bytes().to_vec()),
        containers: vec![],
        tags: vec![],
        creator: "test".into(),
    };
    meta.create_object(&spec).unwrap().id
}

fn r(o: &[u64], c: &[u64]) -> Region {
    Region::new(o.to_vec(), c.to_vec()).unwrap()
}

fn constant(region: &Region, v: u16) -> Vec<u8> {
    (0..region.num_elements())
        .flat_map(|_| v.to_le_bytes())
        .collect()
}

fn read(engine: &Engine, id: u64, region: &Region) -> Vec<u16> {
    let mut out = vec![0u8; region.num_elements() as usize * 2];
    engine.read(id, region, &mut out).unwrap();
    out.chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

#[test]
fn overlaps_resolve_by_commit_order_not_stage_order() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, engine) = open(dir.path());
    let id = object(&meta, vec![4, 6], 9);
    let a = r(&[0, 0], &[2, 4]);
    let b = r(&[1, 2], &[2, 4]);
    let sa = engine.stage(1, id, &a, &constant(&a, 1)).unwrap();
    let sb = engine.stage(2, id, &b, &constant(&b, 2)).unwrap();
    // Staged but not committed: invisible.
    assert!(read(&engine, id, &r(&[0, 0], &[4, 6]))
        .iter()
        .all(|&v| v == 9));
    engine.commit(&[sb], Durability::Local).unwrap();
    engine.commit(&[sa], Durability::Local).unwrap(); // waited last: wins the overlap
    #[rustfmt::skip]
    let want = vec![
        1, 1, 1, 1, 9, 9,
        1, 1, 1, 1, 2, 2,
        9, 9, 2, 2, 2, 2,
        9, 9, 9, 9, 9, 9,
    ];
    assert_eq!(read(&engine, id, &r(&[0, 0], &[4, 6])), want);
    assert_eq!(read(&engine, id, &r(&[1, 3], &[1, 2])), vec![1, 2]);
    drop(engine);
    drop(meta);
    let (_meta, engine) = open(dir.path());
    assert_eq!(
        read(&engine, id, &r(&[0, 0], &[4, 6])),
        want,
        "same answer after reopening"
    );
}

#[test]
fn memory_durability_commits_do_not_survive_an_unsynced_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, engine) = open(dir.path());
    let id = object(&meta, vec![8], 0);
    let whole = r(&[0], &[8]);
    let first = engine.stage(1, id, &whole, &constant(&whole, 5)).unwrap();
    engine.commit(&[first], Durability::Local).unwrap();
    let second = engine.stage(2, id, &whole, &constant(&whole, 6)).unwrap();
    engine.commit(&[second], Durability::Memory).unwrap();
    assert_eq!(read(&engine, id, &whole), vec![6; 8]);
    // "Crash": drop without sync, then tear the unsynced write's data record (the third
    // record: data, commit record, data, commit record) as a power loss could.
    drop(engine);
    drop(meta);
    let seg = pdcx_store::segment_path(dir.path().join("log"), 1);
    let manifest = std::fs::read_to_string(dir.path().join("log/MANIFEST")).unwrap();
    let (records, _) = pdcx_store::scan_segment(&seg, None).unwrap();
    assert_eq!(records.len(), 4, "{records:?}");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(records[2].location.offset + 3)
        .unwrap();
    let (_meta, engine) = open(dir.path());
    assert_eq!(
        read(&engine, id, &whole),
        vec![5; 8],
        "the durable write is back, the torn one is gone"
    );
    assert!(manifest.contains("committed_len"));
    assert_eq!(engine.extents(id).len(), 1);
}

#[test]
fn concurrent_local_commits_share_log_syncs_and_all_survive_a_reopen() {
    use std::sync::atomic::Ordering;
    const THREADS: u64 = 8;
    const EACH: u64 = 25;
    let dir = tempfile::tempdir().unwrap();
    let (meta, engine) = open(dir.path());
    let id = object(&meta, vec![THREADS * EACH], 0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let engine = &engine;
            s.spawn(move || {
                for i in 0..EACH {
                    let k = t * EACH + i;
                    let region = r(&[k], &[1]);
                    let staged = engine
                        .stage(k + 1, id, &region, &constant(&region, k as u16 + 1))
                        .unwrap();
                    engine.commit(&[staged], Durability::Local).unwrap();
                }
            });
        }
    });
    let io = engine.store().io();
    let (syncs, shared) = (
        io.log_syncs.load(Ordering::Relaxed),
        io.log_syncs_shared.load(Ordering::Relaxed),
    );
    // Every local commit either ran a sync round or found its record covered by another's.
    assert_eq!(
        syncs + shared,
        THREADS * EACH,
        "syncs {syncs}, shared {shared}"
    );
    let want: Vec<u16> = (1..=(THREADS * EACH) as u16).collect();
    assert_eq!(read(&engine, id, &r(&[0], &[THREADS * EACH])), want);
    // Reopened: the commit records replay whatever the metadata did not make durable.
    drop(engine);
    drop(meta);
    let (_meta, engine) = open(dir.path());
    assert_eq!(read(&engine, id, &r(&[0], &[THREADS * EACH])), want);
}
