//! A group leader asks its members for their extents all at once: with in-process engines
//! joined by a loopback, each member's `ShardCandidates` waits until the other member's has
//! arrived too, which happens only if the leader sent both before either answered.

mod common;
use pdcx_core::protocol::{Durability, PeerRequest, PeerResponse, Pieces, RegisterItem};
use pdcx_core::{ObjectId, ObjectMeta, Region, Result};
use pdcx_server::engine::{Engine, Peers};
use pdcx_server::meta::Metadata;
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::Duration;

/// Elements (f64) per write: 64 KiB.
const CHUNK: u64 = 8_192;
/// How long a member's ask waits for the other one's before answering anyway.
const RENDEZVOUS: Duration = Duration::from_secs(10);

/// What the servers share: the owner's metadata, every engine, and the members' asks so far.
struct Shared {
    owner: OnceLock<Arc<Metadata>>,
    engines: OnceLock<Vec<Weak<Engine>>>,
    /// ShardCandidates asks that arrived, and how many of them saw another one in flight.
    asks: Mutex<(u32, u32)>,
    arrived: Condvar,
}

/// One server's view of the others.
struct Loopback {
    me: u32,
    shared: Arc<Shared>,
}

impl Loopback {
    fn engine(&self, rank: u32) -> Arc<Engine> {
        self.shared.engines.get().expect("engines set")[rank as usize]
            .upgrade()
            .expect("engine alive")
    }

    /// Waits until two asks have arrived (or the rendezvous times out); counts the ask as
    /// overlapped if it saw the other.
    fn meet(&self) {
        let s = &self.shared;
        let mut g = s.asks.lock().unwrap();
        g.0 += 1;
        s.arrived.notify_all();
        let (mut g, _) = s
            .arrived
            .wait_timeout_while(g, RENDEZVOUS, |g| g.0 < 2)
            .unwrap();
        if g.0 >= 2 {
            g.1 += 1;
        }
    }
}

impl Peers for Loopback {
    fn object(&self, id: ObjectId, _fresh: bool) -> Result<ObjectMeta> {
        self.shared.owner.get().expect("owner set").object(id)
    }
    fn register(&self, owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        self.engine(owner).register_batch(self.me, items)
    }
    fn pieces(&self, holder: u32, id: ObjectId, region: &Region) -> Result<Pieces> {
        self.engine(holder).pieces(id, region)
    }
    fn shard_call(&self, to: u32, req: &PeerRequest) -> Result<(PeerResponse, Vec<u8>)> {
        if matches!(req, PeerRequest::ShardCandidates { .. }) {
            self.meet();
        }
        self.engine(to)
            .flusher()
            .shard_request(self.me, req.clone())
    }
}

#[test]
fn the_leader_asks_its_members_for_their_extents_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path();
    let cfg = common::shared_group_config(base);
    let shared = Arc::new(Shared {
        owner: OnceLock::new(),
        engines: OnceLock::new(),
        asks: Mutex::new((0, 0)),
        arrived: Condvar::new(),
    });
    let servers: Vec<(Arc<Metadata>, Arc<Engine>)> = (0..3)
        .map(|rank| common::open_engine_of(base, rank, 3, &cfg, "dep"))
        .collect();
    let _ = shared.owner.set(servers[0].0.clone());
    let _ = shared
        .engines
        .set(servers.iter().map(|(_, e)| Arc::downgrade(e)).collect());
    for (rank, (_, e)) in servers.iter().enumerate() {
        e.set_peers(Arc::new(Loopback {
            me: rank as u32,
            shared: shared.clone(),
        }));
    }
    let id = servers[0]
        .0
        .create_object(&common::f64_spec("v", 3 * CHUNK))
        .unwrap()
        .id;
    // Every server writes one extent; the members' own passes leave theirs for the leader.
    for (k, (_, e)) in servers.iter().enumerate() {
        let k = k as u64;
        let region = Region::new(vec![k * CHUNK], vec![CHUNK]).unwrap();
        let bytes: Vec<u8> = (0..CHUNK)
            .flat_map(|i| ((k * CHUNK + i) as f64).to_le_bytes())
            .collect();
        let s = e.stage(k, id, &region, &bytes).unwrap();
        e.commit(&[s], Durability::Local).unwrap();
    }
    for (_, member) in &servers[1..] {
        assert_eq!(member.flusher().flush_pass(u64::MAX).unwrap().extents, 0);
    }

    let t0 = std::time::Instant::now();
    let r = servers[0].1.flusher().flush_all(&mut |_, _| {}).unwrap();
    assert_eq!(r.error, None, "{r:?}");
    assert_eq!(r.extents, 3, "{r:?}");
    assert_eq!(
        *shared.asks.lock().unwrap(),
        (2, 2),
        "both members' asks were in flight at once (pass took {:?})",
        t0.elapsed()
    );
    // And the shard holds every server's bytes: read them back through the owner.
    let mut out = vec![0u8; 3 * CHUNK as usize * 8];
    servers[0]
        .1
        .read(
            id,
            &Region::new(vec![0], vec![3 * CHUNK]).unwrap(),
            &mut out,
        )
        .unwrap();
    let want: Vec<u8> = (0..3 * CHUNK)
        .flat_map(|i| (i as f64).to_le_bytes())
        .collect();
    assert!(out == want);
}
