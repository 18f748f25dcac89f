//! Relaxed consistency at the engine level: two engines (owner rank 0, holder rank 1) joined by
//! in-process peers, so a "crash" of the holder is a drop without registering, and a lost
//! answer is a registration the holder never hears about.

use pdcx_core::protocol::{Consistency, Durability, ObjectSpec, Pieces, RegisterItem};
use pdcx_core::{Dtype, ObjectId, ObjectMeta, Region, Result};
use pdcx_server::engine::{Engine, Peers};
use pdcx_server::meta::Metadata;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};

/// What one engine needs from the other, without a network. Weak references: the engines
/// hold this, and must still close (releasing their log locks) when the test drops them.
struct Loopback {
    /// The owner's shard (for `object`) and engine (for `register`).
    owner: OnceLock<(Arc<Metadata>, Weak<Engine>)>,
    /// The holder's engine (for the owner's merged reads).
    holder: OnceLock<Weak<Engine>>,
}

fn live(e: Option<&Weak<Engine>>) -> Arc<Engine> {
    e.and_then(Weak::upgrade).expect("engine alive")
}

impl Peers for Loopback {
    fn object(&self, id: ObjectId, _fresh: bool) -> Result<ObjectMeta> {
        self.owner.get().expect("owner set").0.object(id)
    }
    fn register(&self, _owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        live(self.owner.get().map(|o| &o.1)).register_batch(1, items)
    }
    fn pieces(&self, _holder: u32, id: ObjectId, region: &Region) -> Result<Pieces> {
        live(self.holder.get()).pieces(id, region)
    }
    fn released(
        &self,
        _owner: u32,
        writes: &[(ObjectId, Vec<u64>)],
        gone: &[(ObjectId, u64, u64)],
        below: u64,
    ) -> Result<u64> {
        live(self.owner.get().map(|o| &o.1)).forget_released(1, writes, gone, below)
    }
}

/// An engine whose log segments are 1 MiB (a test of retirement fills a few).
fn engine(dir: &Path, rank: u32) -> (Arc<Metadata>, Arc<Engine>) {
    let meta = Arc::new(Metadata::open(&dir.join("meta.sqlite"), rank, 2).unwrap());
    let opts = pdcx_store::LogOptions {
        segment_bytes: 1 << 20,
        ..pdcx_store::LogOptions::default()
    };
    let (engine, _, _) =
        Engine::open_with(&dir.join("log"), meta.clone(), 1 << 20, opts, None).unwrap();
    (meta, Arc::new(engine))
}

struct Pair {
    owner_meta: Arc<Metadata>,
    owner: Arc<Engine>,
    holder: Arc<Engine>,
}

fn pair(owner_dir: &Path, holder_dir: &Path) -> Pair {
    let (om, owner) = engine(owner_dir, 0);
    let (_hm, holder) = engine(holder_dir, 1);
    let peers = Arc::new(Loopback {
        owner: OnceLock::new(),
        holder: OnceLock::new(),
    });
    let _ = peers.owner.set((om.clone(), Arc::downgrade(&owner)));
    let _ = peers.holder.set(Arc::downgrade(&holder));
    owner.set_peers(peers.clone());
    holder.set_peers(peers);
    Pair {
        owner_meta: om,
        owner,
        holder,
    }
}

fn r(o: u64, c: u64) -> Region {
    Region::new(vec![o], vec![c]).unwrap()
}

fn bytes(n: u64, v: u8) -> Vec<u8> {
    vec![v; n as usize]
}

fn read(e: &Engine, id: ObjectId, region: &Region) -> Vec<u8> {
    let mut out = vec![0u8; region.num_elements() as usize];
    e.read(id, region, &mut out).unwrap();
    out
}

const RELAXED: Consistency = Consistency::Relaxed { expected_writes: 0 };

fn create(owner_dir: &Path) -> ObjectId {
    create_sized(owner_dir, 16)
}

fn create_sized(owner_dir: &Path, n: u64) -> ObjectId {
    let meta = Metadata::open(&owner_dir.join("meta.sqlite"), 0, 2).unwrap();
    meta.create_object(&ObjectSpec {
        name: "o".into(),
        dims: vec![n],
        dtype: Dtype::UInt8,
        fill: Some(vec![9]),
        containers: vec![],
        tags: vec![],
        creator: "t".into(),
    })
    .unwrap()
    .id
}

#[test]
fn deferred_writes_are_invisible_until_registered_then_batched_in_order() {
    let (od, hd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let id = create(od.path());
    let p = pair(od.path(), hd.path());
    let whole = r(0, 16);
    // Three overlapping relaxed writes, then a strong one on the same holder.
    for (txn, (off, v)) in [(0, 1u8), (4, 2), (2, 3)].into_iter().enumerate() {
        let s = p
            .holder
            .stage(txn as u64, id, &r(off, 8), &bytes(8, v))
            .unwrap();
        p.holder
            .commit_with(&[s], Durability::Local, RELAXED)
            .unwrap();
    }
    assert_eq!(p.holder.deferred_count(), 3);
    assert_eq!(p.owner.counters.received.load(Ordering::SeqCst), 0);
    assert_eq!(
        read(&p.owner, id, &whole),
        vec![9; 16],
        "nothing visible yet"
    );

    // A strong write for the same owner takes the deferred ones along, ahead of itself.
    let s = p.holder.stage(9, id, &r(12, 2), &bytes(2, 4)).unwrap();
    p.holder.commit(&[s], Durability::Local).unwrap();
    assert_eq!(p.holder.deferred_count(), 0);
    assert_eq!(p.owner.counters.received.load(Ordering::SeqCst), 1);
    assert_eq!(p.owner.counters.regions.load(Ordering::SeqCst), 4);
    let want = [1, 1, 3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 4, 4, 9, 9];
    assert_eq!(
        read(&p.owner, id, &whole),
        want,
        "commit order decides overlaps"
    );

    // Relaxed again, then one explicit registration for the whole batch.
    for txn in 20..30 {
        let s = p
            .holder
            .stage(txn, id, &r(14, 2), &bytes(2, txn as u8))
            .unwrap();
        p.holder
            .commit_with(&[s], Durability::Memory, RELAXED)
            .unwrap();
    }
    assert_eq!(p.holder.register_deferred(None).unwrap(), 10);
    assert_eq!(p.owner.counters.received.load(Ordering::SeqCst), 2);
    assert_eq!(read(&p.owner, id, &r(14, 2)), vec![29, 29]);
}

#[test]
fn expected_writes_trigger_one_registration() {
    let (od, hd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let id = create(od.path());
    let p = pair(od.path(), hd.path());
    let c = Consistency::Relaxed { expected_writes: 4 };
    for k in 0..4u64 {
        assert_eq!(read(&p.owner, id, &r(k * 4, 4)), vec![9; 4]);
        let s = p
            .holder
            .stage(k, id, &r(k * 4, 4), &bytes(4, k as u8))
            .unwrap();
        p.holder.commit_with(&[s], Durability::Local, c).unwrap();
    }
    // The fourth commit registered all four before it returned.
    assert_eq!(p.owner.counters.received.load(Ordering::SeqCst), 1);
    assert_eq!(p.holder.counters.sent.load(Ordering::SeqCst), 1);
    let want: Vec<u8> = (0..16).map(|i| (i / 4) as u8).collect();
    assert_eq!(read(&p.owner, id, &r(0, 16)), want);
}

#[test]
fn a_holder_crash_before_registration_loses_nothing_and_a_lost_answer_keeps_its_numbers() {
    let (od, hd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let id = create(od.path());
    {
        let p = pair(od.path(), hd.path());
        for k in 0..3u64 {
            let s = p
                .holder
                .stage(k, id, &r(k * 2, 4), &bytes(4, 10 + k as u8))
                .unwrap();
            p.holder
                .commit_with(&[s], Durability::Local, RELAXED)
                .unwrap();
        }
        // "Crash": the engines go away without registering anything.
    }
    let p = pair(od.path(), hd.path());
    assert_eq!(p.holder.deferred_count(), 3, "the deferred list is rebuilt");
    assert_eq!(read(&p.owner, id, &r(0, 8)), vec![9; 8]);
    // The owner records the first registration but its answer is lost (the holder crashed
    // between the owner's reply and recording it): the holder still has them deferred.
    let first = p.holder.register_deferred(None);
    assert_eq!(first.unwrap(), 3);
    let seqs: Vec<u64> = p.owner.extents(id).iter().map(|e| e.seq).collect();
    assert_eq!(seqs.len(), 3);
    drop(p);
    // Undo the holder's renumbering as if it never happened (it was never fsynced): the
    // same rows with provisional numbers again.
    let hm = Metadata::open(&hd.path().join("meta.sqlite"), 1, 2).unwrap();
    let rows = hm.load_extents().unwrap();
    let undo: Vec<(ObjectId, u64, Option<u64>)> = rows
        .iter()
        .enumerate()
        .map(|(k, row)| (row.id, row.seq, Some((1 << 62) + k as u64)))
        .collect();
    hm.assign_seqs(&undo).unwrap();
    drop(hm);
    let p = pair(od.path(), hd.path());
    assert_eq!(p.holder.deferred_count(), 3);
    assert_eq!(p.holder.register_deferred(None).unwrap(), 3);
    let again: Vec<u64> = p.owner.extents(id).iter().map(|e| e.seq).collect();
    assert_eq!(
        again, seqs,
        "the owner answered with the same numbers, no duplicates"
    );
    assert_eq!(
        read(&p.owner, id, &r(0, 8)),
        [10, 10, 11, 11, 12, 12, 12, 12]
    );
}

#[test]
fn a_holder_that_lost_its_log_registers_new_relaxed_writes_under_new_numbers() {
    let (od, hd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let id = create(od.path());
    {
        let p = pair(od.path(), hd.path());
        let s = p.holder.stage(0, id, &r(0, 4), &bytes(4, 1)).unwrap();
        p.holder
            .commit_with(&[s], Durability::Local, RELAXED)
            .unwrap();
        assert_eq!(p.holder.register_deferred(None).unwrap(), 1);
    }
    // Node loss at the holder: its log is gone; the new log starts at the same locations, so
    // the next relaxed write sits exactly where the first one did.
    std::fs::remove_dir_all(hd.path().join("log")).unwrap();
    let p = pair(od.path(), hd.path());
    let s = p.holder.stage(1, id, &r(8, 4), &bytes(4, 2)).unwrap();
    p.holder
        .commit_with(&[s], Durability::Local, RELAXED)
        .unwrap();
    assert_eq!(p.holder.register_deferred(None).unwrap(), 1);
    // The owner must not take it for the first write registered again (same location).
    assert_eq!(read(&p.owner, id, &r(8, 4)), vec![2; 4]);
    let seqs: Vec<u64> = p.owner.extents(id).iter().map(|e| e.seq).collect();
    assert_eq!(seqs.len(), 2, "{seqs:?}");
}

#[test]
fn an_owner_forgets_the_rows_of_writes_its_holder_dropped_and_settled_tokens() {
    let (od, hd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // 256 KiB per write: a 1 MiB segment holds about four.
    let n = 256 << 10;
    let id = create_sized(od.path(), n);
    let whole = r(0, n);
    let writes = 40u64;
    {
        let p = pair(od.path(), hd.path());
        for txn in 0..writes {
            let s = p
                .holder
                .stage(txn, id, &whole, &bytes(n, txn as u8))
                .unwrap();
            p.holder
                .commit_with(&[s], Durability::Local, RELAXED)
                .unwrap();
            assert_eq!(p.holder.register_deferred(None).unwrap(), 1);
        }
        let (rows, tokens) = p.owner_meta.location_rows().unwrap();
        assert_eq!(
            (rows, tokens),
            (writes, writes),
            "a row and a token per write"
        );
        // Nothing dropped or retired yet: the owner is told only of the token bound, which
        // lets nothing go (the oldest segment is still there).
        assert_eq!(p.holder.release_to_owners(0..2), 0);

        assert_eq!(p.holder.drop_hidden_writes(true).unwrap(), writes - 1);
        let opts = pdcx_server::datastore::CompactOptions {
            threshold: 0.9,
            rate: 0,
            seal_min: 1,
        };
        let mut report = Default::default();
        p.holder
            .store()
            .compact(&opts, &mut report, &mut |_| {})
            .unwrap();
        assert!(report.retired_segments >= 8, "{report:?}");
        // The owner forgot the dropped writes' rows when told of the drop.
        let (rows, _) = p.owner_meta.location_rows().unwrap();
        assert_eq!(rows, 1, "only the live write keeps its row");
        let forgot = p.holder.release_to_owners(0..2);
        let (_, tokens) = p.owner_meta.location_rows().unwrap();
        assert!(
            tokens <= 5,
            "{tokens} tokens left: only those in live segments may stay"
        );
        assert_eq!(forgot, (writes - 1) + (writes - tokens));
        // Told again with no news: nothing sent, nothing forgotten.
        assert_eq!(p.holder.release_to_owners(0..2), 0);
        assert_eq!(read(&p.owner, id, &whole), bytes(n, writes as u8 - 1));
    }
    // After a restart of both, the owner still finds the live write through its one row.
    let p = pair(od.path(), hd.path());
    assert_eq!(p.owner_meta.location_rows().unwrap().0, 1);
    assert_eq!(read(&p.owner, id, &whole), bytes(n, writes as u8 - 1));
}
