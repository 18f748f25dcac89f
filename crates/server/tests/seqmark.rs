//! smallmem: registrations of `memory` writes at an object's owner skip the
//! metadata WAL fsync, and sequence numbers are never reused after the owner loses what it
//! had not fsynced (the durable reserved mark, `Metadata::register_regions`).
//!
//! Run on a simulated disk (SQLite on the real disk, snapshotted at each fsync through the
//! I/O seam), so a power cut loses exactly the metadata that was not fsynced.

use pdcx_core::protocol::{ObjectSpec, RegisterItem};
use pdcx_core::{Dtype, Region};
use pdcx_fsio::{Fs, SimFs};
use pdcx_server::engine::Engine;
use pdcx_server::meta::Metadata;
use pdcx_store::LogOptions;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn open(disk: &SimFs, sql: &Path) -> (Arc<Metadata>, Engine) {
    let fs: Arc<dyn Fs> = Arc::new(disk.clone());
    let meta =
        Arc::new(Metadata::open_with_fs(&sql.join("meta.sqlite"), 0, 1, fs.clone()).unwrap());
    let (engine, _, _) = Engine::open_with(
        Path::new("/node/log"),
        meta.clone(),
        0,
        LogOptions {
            segment_bytes: 1 << 20,
            fs,
        },
        None,
    )
    .unwrap();
    (meta, engine)
}

fn object(meta: &Metadata) -> u64 {
    meta.create_object(&ObjectSpec {
        name: "seqmark".into(),
        dims: vec![1 << 20],
        dtype: Dtype::UInt8,
        fill: None,
        containers: vec![],
        tags: vec![],
        creator: "t".into(),
    })
    .unwrap()
    .id
}

fn item(id: u64, k: u64) -> Vec<RegisterItem> {
    vec![RegisterItem {
        id,
        region: Region::new(vec![k * 16], vec![16]).unwrap(),
        token: None,
    }]
}

/// One seq from a registration by holder 1 (a server this test pretends exists).
fn register(engine: &Engine, id: u64, k: u64, durable: bool) -> u64 {
    engine
        .register_batch_with(1, &item(id, k), durable)
        .unwrap()[0]
        .unwrap()
}

#[test]
fn memory_registrations_answer_before_the_wal_fsync_and_durable_ones_after_it() {
    let sql = tempfile::tempdir().unwrap();
    let disk = SimFs::new();
    let (meta, engine) = open(&disk, sql.path());
    let id = object(&meta);
    // The first registration raises the reserved mark: that one waits for the fsync.
    let first = register(&engine, id, 0, false);
    assert_eq!(engine.counters.unsynced.load(Ordering::Relaxed), 0);
    assert!(meta.seq_reserved() > first);
    let mut last = first;
    for k in 1..50 {
        let seq = register(&engine, id, k, false);
        assert!(seq > last, "numbers grow: {seq} after {last}");
        assert!(
            seq < meta.seq_reserved(),
            "{seq} handed out above the durable mark"
        );
        last = seq;
    }
    assert_eq!(engine.counters.unsynced.load(Ordering::Relaxed), 49);
    // `local`/`remote` registrations (and any with a token) still wait for the fsync.
    let before = meta.wal_syncs();
    register(&engine, id, 60, true);
    assert!(
        meta.wal_syncs() > before,
        "a durable registration fsyncs the WAL"
    );
    let token = vec![RegisterItem {
        token: Some((1, 64)),
        ..item(id, 61).remove(0)
    }];
    engine.register_batch_with(1, &token, false).unwrap();
    assert_eq!(
        engine.counters.unsynced.load(Ordering::Relaxed),
        49,
        "a deferred write's registration is durable even in a memory request"
    );
    // Visible at once to reads planned at the owner.
    assert_eq!(
        engine
            .locate(id, &Region::new(vec![16], vec![16]).unwrap())
            .unwrap(),
        vec![1]
    );
}

#[test]
fn numbers_after_a_power_cut_are_above_every_number_handed_out() {
    let sql = tempfile::tempdir().unwrap();
    let disk = SimFs::new();
    let (meta, engine) = open(&disk, sql.path());
    let id = object(&meta);
    let mut handed = 0;
    for k in 0..20 {
        handed = handed.max(register(&engine, id, k, false));
    }
    // The owner's own writes take numbers from the same counter.
    let own = engine
        .stage(
            1,
            id,
            &Region::new(vec![4096], vec![16]).unwrap(),
            &[7u8; 16],
        )
        .unwrap();
    engine
        .commit(&[own], pdcx_core::protocol::Durability::Memory)
        .unwrap();
    handed = handed.max(engine.store().next_seq() - 1);
    let mark = meta.seq_reserved();
    // Power cut: the metadata keeps only what was fsynced (at least the mark).
    let cut = disk.power_cut(None);
    drop(engine);
    drop(meta);
    cut.restore_foreign().unwrap();
    let (meta, engine) = open(&cut, sql.path());
    assert!(meta.seq_reserved() >= mark, "the mark was durable");
    assert!(
        engine.store().next_seq() > handed,
        "after the crash the counter resumes at {} but {handed} was handed out",
        engine.store().next_seq()
    );
    let next = register(&engine, id, 30, false);
    assert!(
        next > handed,
        "{next} reuses a number handed out before the crash"
    );
}

/// The exact case the mark exists for: the owner loses power right after answering a
/// `memory` registration, before any fsync covered its row (the crash point runs before the
/// background syncer is asked for one). The row is gone after recovery, its number is not
/// handed out again.
#[cfg(feature = "crash-points")]
#[test]
fn a_lost_memory_registration_never_gets_its_number_reused() {
    use std::sync::Mutex;
    let sql = tempfile::tempdir().unwrap();
    let disk = SimFs::new();
    let (meta, engine) = open(&disk, sql.path());
    let id = object(&meta);
    register(&engine, id, 0, false); // raises the mark (durable)
    let cuts: Arc<Mutex<Vec<SimFs>>> = Arc::default();
    {
        // The hook is process-wide: only this thread's registration counts (other tests run
        // in parallel).
        let me = std::thread::current().id();
        let (disk, cuts) = (disk.clone(), cuts.clone());
        pdcx_fsio::crash::set_hook(Some(Box::new(move |point| {
            if point == "register.after_region_map" && std::thread::current().id() == me {
                cuts.lock().unwrap().push(disk.power_cut(None));
            }
        })));
    }
    let lost = register(&engine, id, 1, false);
    pdcx_fsio::crash::set_hook(None);
    let cut = cuts.lock().unwrap().pop().expect("the crash point ran");
    drop(engine);
    drop(meta);
    cut.restore_foreign().unwrap();
    let (meta, engine) = open(&cut, sql.path());
    assert!(
        meta.load_region_map().unwrap().iter().all(|r| r.1 != lost),
        "the row of the unsynced registration survived the power cut: the test lost its point"
    );
    let next = register(&engine, id, 2, false);
    assert!(
        next > lost,
        "seq {lost} handed out again after the power cut"
    );
}

#[test]
fn a_shard_whose_wal_fsync_failed_refuses_memory_registrations_too() {
    let sql = tempfile::tempdir().unwrap();
    let disk = SimFs::new();
    let (meta, engine) = open(&disk, sql.path());
    let id = object(&meta);
    register(&engine, id, 0, false);
    register(&engine, id, 1, false);
    disk.set_faults(pdcx_fsio::Faults {
        sync_eio: true,
        ..Default::default()
    });
    let err = engine
        .register_batch_with(1, &item(id, 2), true)
        .expect_err("a failed WAL fsync fails the durable registration");
    assert!(err.message.contains("fsync"), "{err}");
    let err = engine
        .register_batch_with(1, &item(id, 3), false)
        .expect_err("fail-stop: no more registrations after a failed fsync");
    assert!(err.message.contains("no longer accepts writes"), "{err}");
}
