//! Group shards with in-process engines joined by a loopback whose member can be made
//! unreachable: a leader pass skips a member that does not hand over its extents (they wait
//! in its log) or does not record its homes (the shard it was put in is deleted once no
//! server references it), and a later pass homes them exactly once.

mod common;
use pdcx_core::protocol::{
    Durability, ObjectSpec, PeerRequest, PeerResponse, Pieces, RegisterItem,
};
use pdcx_core::{Dtype, Error, ErrorKind, ObjectId, ObjectMeta, Region, Result};
use pdcx_server::engine::{Engine, Peers};
use pdcx_server::meta::Metadata;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, Weak};

/// Elements (f64) per write: 256 KiB.
const CHUNK: u64 = 32_768;

/// What the member (rank 1) answers: everything, nothing, or all but `RecordShardHomes`.
const UP: u8 = 0;
const DOWN: u8 = 1;
const NO_RECORD: u8 = 2;

struct Loopback {
    owner: OnceLock<(Arc<Metadata>, Weak<Engine>)>,
    engines: OnceLock<Vec<Weak<Engine>>>,
    member: AtomicU8,
}

impl Loopback {
    fn engine(&self, rank: u32) -> Arc<Engine> {
        self.engines.get().expect("engines set")[rank as usize]
            .upgrade()
            .expect("engine alive")
    }
}

impl Peers for Loopback {
    fn object(&self, id: ObjectId, _fresh: bool) -> Result<ObjectMeta> {
        self.owner.get().expect("owner set").0.object(id)
    }
    fn register(&self, _owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        self.engine(0).register_batch(1, items)
    }
    fn pieces(&self, holder: u32, id: ObjectId, region: &Region) -> Result<Pieces> {
        self.engine(holder).pieces(id, region)
    }
    fn shard_call(&self, to: u32, req: &PeerRequest) -> Result<(PeerResponse, Vec<u8>)> {
        let state = self.member.load(Ordering::SeqCst);
        let refused = to == 1
            && (state == DOWN
                || state == NO_RECORD && matches!(req, PeerRequest::RecordShardHomes { .. }));
        if refused {
            return Err(Error::new(
                ErrorKind::Unavailable,
                "server 1 is down (test)",
            ));
        }
        // Requests come from server 0 (the leader) or, for releases, from server 1.
        let from = if to == 0 { 1 } else { 0 };
        self.engine(to).flusher().shard_request(from, req.clone())
    }
}

struct Pair {
    meta: Arc<Metadata>,
    leader: Arc<Engine>,
    member: Arc<Engine>,
    peers: Arc<Loopback>,
}

fn open_pair(base: &Path) -> Pair {
    let cfg = common::shared_group_config(base);
    let one = |rank: u32| common::open_engine(base, rank, &cfg, "dep");
    let (meta, leader) = one(0);
    let (_m, member) = one(1);
    let peers = Arc::new(Loopback {
        owner: OnceLock::new(),
        engines: OnceLock::new(),
        member: AtomicU8::new(UP),
    });
    let _ = peers.owner.set((meta.clone(), Arc::downgrade(&leader)));
    let _ = peers
        .engines
        .set(vec![Arc::downgrade(&leader), Arc::downgrade(&member)]);
    leader.set_peers(peers.clone());
    member.set_peers(peers.clone());
    Pair {
        meta,
        leader,
        member,
        peers,
    }
}

fn payload(j: u64, k: u64) -> Vec<u8> {
    (0..CHUNK)
        .flat_map(|i| ((k * CHUNK + i) as f64 + j as f64 * 1e9).to_le_bytes())
        .collect()
}

/// Group shard blobs on the tier.
fn shards(base: &Path) -> Vec<String> {
    let t = pdcx_tiers::open(&pdcx_tiers::TierConfig {
        name: "pfs".into(),
        kind: pdcx_tiers::TierKind::Shared,
        path: Some(base.join("pfs")),
        ..Default::default()
    })
    .unwrap();
    t.list("dep/")
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

fn homed(e: &Engine, id: u64, holder: u32) -> (usize, usize) {
    let mine: Vec<_> = e
        .extents(id)
        .into_iter()
        .filter(|x| x.holder == holder)
        .collect();
    let n = mine.iter().filter(|x| x.tier.ends_with("pfs")).count();
    (n, mine.len())
}

#[test]
fn a_member_that_does_not_answer_is_skipped_and_flushed_later() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path();
    let p = open_pair(base);
    // Two objects owned by the leader; each server writes 4 extents of each.
    let ids: Vec<u64> = (0..2)
        .map(|j| {
            p.meta
                .create_object(&ObjectSpec {
                    name: format!("v{j}"),
                    dims: vec![8 * CHUNK],
                    dtype: Dtype::Float64,
                    fill: None,
                    containers: vec![],
                    tags: vec![],
                    creator: "t".into(),
                })
                .unwrap()
                .id
        })
        .collect();
    for (j, id) in ids.iter().enumerate() {
        for k in 0..8u64 {
            let e = if k < 4 { &p.leader } else { &p.member };
            let region = Region::new(vec![k * CHUNK], vec![CHUNK]).unwrap();
            let s = e.stage(k, *id, &region, &payload(j as u64, k)).unwrap();
            e.commit(&[s], Durability::Local).unwrap();
        }
    }
    // A member's own pass leaves its extents for the leader.
    let r = p.member.flusher().flush_pass(u64::MAX).unwrap();
    assert_eq!(r.extents, 0, "{r:?}");
    assert_eq!(homed(&p.member, ids[0], 1), (0, 4));

    // Member down: the leader homes its own extents only and says why.
    p.peers.member.store(DOWN, Ordering::SeqCst);
    let r = p.leader.flusher().flush_all(&mut |_, _| {}).unwrap();
    assert_eq!(r.extents, 8, "{r:?}");
    assert!(
        r.error.as_deref().is_some_and(|e| e.contains("server 1")),
        "{r:?}"
    );
    assert_eq!(homed(&p.leader, ids[0], 0), (4, 4));
    assert_eq!(homed(&p.member, ids[0], 1), (0, 4));
    assert_eq!(shards(base).len(), 2, "one shard per object");

    // Member answers but does not record: its extents are put, then not homed; the shards
    // holding only its extents go at the next pass (no server references them).
    p.peers.member.store(NO_RECORD, Ordering::SeqCst);
    let r = p.leader.flusher().flush_all(&mut |_, _| {}).unwrap();
    assert!(r.error.is_some(), "{r:?}");
    assert_eq!(homed(&p.member, ids[0], 1), (0, 4));
    assert_eq!(shards(base).len(), 4, "{:?}", shards(base));

    // Back up: its extents are homed exactly once, the unrecorded shards replaced.
    p.peers.member.store(UP, Ordering::SeqCst);
    let r = p.leader.flusher().flush_all(&mut |_, _| {}).unwrap();
    assert_eq!(r.extents, 8, "{r:?}");
    for id in &ids {
        assert_eq!(homed(&p.member, *id, 1), (4, 4));
        assert_eq!(homed(&p.leader, *id, 0), (4, 4));
    }
    // The leader's 2 shards and the member's 2 (same keys as the unrecorded ones: named after
    // their first extent, put again).
    assert_eq!(shards(base).len(), 4, "{:?}", shards(base));
    // The member's homes point into blobs that hold its bytes: read them through the owner.
    for (j, id) in ids.iter().enumerate() {
        let mut out = vec![0u8; 8 * CHUNK as usize * 8];
        p.leader
            .read(
                *id,
                &Region::new(vec![0], vec![8 * CHUNK]).unwrap(),
                &mut out,
            )
            .unwrap();
        let want: Vec<u8> = (0..8).flat_map(|k| payload(j as u64, k)).collect();
        assert!(out == want, "object {j}");
    }
    // Nothing waits any more on either server.
    assert_eq!(
        p.member
            .flusher()
            .flush_pass(u64::MAX)
            .unwrap()
            .pending_extents,
        0
    );
    assert_eq!(
        p.leader
            .flusher()
            .flush_pass(u64::MAX)
            .unwrap()
            .pending_extents,
        0
    );

    // That pass found the member idle: the next background pass skips it (backoff), an
    // explicit flush (`pdcx flush` kicks, `flush_all`) asks it at once.
    let region = Region::new(vec![0], vec![CHUNK]).unwrap();
    let s = p.member.stage(99, ids[1], &region, &payload(7, 0)).unwrap();
    p.member.commit(&[s], Durability::Local).unwrap();
    assert_eq!(
        p.member
            .flusher()
            .flush_pass(u64::MAX)
            .unwrap()
            .pending_extents,
        1
    );
    assert_eq!(p.leader.flusher().flush_pass(u64::MAX).unwrap().extents, 0);
    assert_eq!(
        p.leader
            .flusher()
            .flush_all(&mut |_, _| {})
            .unwrap()
            .extents,
        1
    );
    assert_eq!(
        p.member
            .flusher()
            .flush_pass(u64::MAX)
            .unwrap()
            .pending_extents,
        0
    );
}
