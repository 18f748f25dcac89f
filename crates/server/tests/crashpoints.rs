//! Every crash point of the data path, with a real SIGKILL (build with `--features crash-points`):
//! the test re-runs its own binary as a child with `PDCX_CRASH_AT=POINT`; the child drives two
//! engines (owner rank 0, holder rank 1, joined in-process) through strong writes, foreign
//! writes registered with the owner, a flush pass with retirement and `remote` commits, noting
//! each acknowledged write in a file it fsyncs, and dies at the point. The parent then recovers
//! both engines and checks: every acknowledged write reads back exactly, the one in flight is
//! whole or absent (never torn), and a second recovery changes nothing.
#![cfg(feature = "crash-points")]

mod common;
use pdcx_core::protocol::{Durability, ObjectSpec, Pieces, RegisterItem};
use pdcx_core::{Dtype, ObjectId, ObjectMeta, Region, Result};
use pdcx_server::engine::{Engine, Peers};
use pdcx_server::meta::Metadata;
use pdcx_tiers::DeploymentConfig;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, OnceLock, Weak};

/// Elements (f64) per write: 256 KiB, so a 1 MiB log segment seals every 4 writes.
const CHUNK: u64 = 32_768;
/// Writes in the workload (regions 0..STEPS of the object).
const STEPS: u64 = 14;

struct Loopback {
    owner: OnceLock<(Arc<Metadata>, Weak<Engine>)>,
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
    fn register_memory(&self, _owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        live(self.owner.get().map(|o| &o.1)).register_batch_with(1, items, false)
    }
    fn pieces(&self, _holder: u32, id: ObjectId, region: &Region) -> Result<Pieces> {
        live(self.holder.get()).pieces(id, region)
    }
}

struct Pair {
    meta: Arc<Metadata>,
    owner: Arc<Engine>,
    holder: Arc<Engine>,
}

fn open_pair(base: &Path) -> Pair {
    let cfg = DeploymentConfig::parse(
        &format!(
            "[[tier]]\nname = \"pfs\"\nkind = \"shared\"\npath = \"{}/pfs\"\n",
            base.display()
        ),
        Vec::new(),
    )
    .unwrap();
    let one = |rank: u32| common::open_engine(base, rank, &cfg, "crash");
    let (meta, owner) = one(0);
    let (_hm, holder) = one(1);
    let peers = Arc::new(Loopback {
        owner: OnceLock::new(),
        holder: OnceLock::new(),
    });
    let _ = peers.owner.set((meta.clone(), Arc::downgrade(&owner)));
    let _ = peers.holder.set(Arc::downgrade(&holder));
    owner.set_peers(peers.clone());
    holder.set_peers(peers);
    Pair {
        meta,
        owner,
        holder,
    }
}

fn region(k: u64) -> Region {
    Region::new(vec![k * CHUNK], vec![CHUNK]).unwrap()
}

fn payload(k: u64) -> Vec<u8> {
    (0..CHUNK)
        .flat_map(|i| ((k * CHUNK + i) as f64 + 0.5).to_le_bytes())
        .collect()
}

/// The workload, run by the child until it dies at its crash point.
fn workload(base: &Path) {
    let p = open_pair(base);
    let id = p
        .meta
        .create_object(&ObjectSpec {
            name: "x".into(),
            dims: vec![STEPS * CHUNK],
            dtype: Dtype::Float64,
            fill: None,
            containers: vec![],
            tags: vec![],
            creator: "t".into(),
        })
        .unwrap()
        .id;
    std::fs::write(base.join("object"), id.to_string()).unwrap();
    let mut acked = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(base.join("acked"))
        .unwrap();
    let mut ack = |k: u64| {
        writeln!(acked, "{k}").unwrap();
        acked.sync_data().unwrap();
    };
    let write = |engine: &Engine, k: u64, d: Durability| {
        let s = engine.stage(k, id, &region(k), &payload(k)).unwrap();
        engine.commit(&[s], d).unwrap();
    };
    // Strong writes at the owner; then writes of the owner's object held by the other server
    // (registered with the owner); a flush pass homing everything and retiring sealed
    // segments; `remote` commits, which put their extents on the tier themselves.
    for k in 0..6 {
        write(&p.owner, k, Durability::Local);
        ack(k);
    }
    for k in 6..8 {
        write(&p.holder, k, Durability::Local);
        ack(k);
    }
    // `memory` writes held by the other server: registered without the owner's WAL fsync
    // (never acknowledged as durable here: `memory` promises visibility, not survival).
    for k in 8..10 {
        write(&p.holder, k, Durability::Memory);
    }
    // A pass that homes only part of the log first: retirement must leave every segment that
    // still holds an unhomed extent.
    p.owner.flusher().flush_pass(2 * CHUNK * 8).unwrap();
    p.owner.flusher().flush_pass(u64::MAX).unwrap();
    p.holder.flusher().flush_pass(u64::MAX).unwrap();
    for k in 10..STEPS {
        write(&p.owner, k, Durability::Remote);
        ack(k);
    }
    // Another pass: the segments of the remote writes can now be retired too.
    p.owner.flusher().flush_pass(u64::MAX).unwrap();
}

/// The state after recovery: per region, Some(true) exactly the write, Some(false) fill only.
fn check(base: &Path, point: &str) -> Vec<bool> {
    let acked: Vec<u64> = std::fs::read_to_string(base.join("acked"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let Ok(id) = std::fs::read_to_string(base.join("object")) else {
        assert!(acked.is_empty());
        return Vec::new();
    };
    let id: u64 = id.parse().unwrap();
    let p = open_pair(base);
    (0..STEPS)
        .map(|k| {
            let mut out = vec![0u8; CHUNK as usize * 8];
            p.owner.read(id, &region(k), &mut out).unwrap();
            let whole = out == payload(k);
            let absent = out.iter().all(|&b| b == 0);
            assert!(
                whole || absent,
                "{point}: region {k} is torn after recovery"
            );
            assert!(
                whole || !acked.contains(&k),
                "{point}: acknowledged write {k} lost (acked {acked:?})"
            );
            whole
        })
        .collect()
}

/// Runs only as the child (PDCX_CRASH_CHILD names its directory); a no-op otherwise.
#[test]
fn crash_child() {
    if let Some(dir) = std::env::var_os("PDCX_CRASH_CHILD") {
        workload(Path::new(&dir));
    }
}

#[test]
fn every_crash_point_loses_nothing_acknowledged_and_tears_nothing() {
    // (point, which hit kills): later hits of the commit points, so some writes are acked.
    let points = [
        ("commit.after_register", 8),
        ("commit.after_log_sync", 3),
        ("commit.after_extent_rows", 8),
        ("commit.after_publish", 3),
        ("register.after_region_map", 2),
        // Hit 4 is k = 9, a `memory` registration answered before the owner's WAL fsync.
        ("register.after_region_map", 4),
        ("flush.after_put", 1),
        ("flush.after_home_rows", 1),
        ("checkpoint.after_wal_sync", 1),
        ("retire.before_manifest", 1),
        ("retire.after_manifest", 1),
        // The segment log's fsync done, before the commit that needed it goes on: hit 3 is
        // write k = 2's (the in-process crash test only simulates this one with a hook).
        ("log.after_segment_sync", 3),
    ];
    for (point, n) in points {
        let dir = tempfile::tempdir().unwrap();
        common::kill_child_at(dir.path(), point, n);
        let first = check(dir.path(), point);
        let second = check(dir.path(), point);
        assert_eq!(first, second, "{point}: a second recovery changed the data");
    }
}
