//! A holder's reply to an owner's merged read is a claim: a piece whose region is malformed
//! (offset and count of different lengths, an end past u64) is a protocol error of that read,
//! not a panic of the owner's thread. Two engines (owner rank 0, holder rank 1) joined by
//! in-process peers, as in lazy.rs, with a switch that makes the holder lie.

use pdcx_core::protocol::{Durability, ObjectSpec, Pieces, RegisterItem};
use pdcx_core::{Dtype, ErrorKind, ObjectId, ObjectMeta, Region, Result};
use pdcx_server::engine::{Engine, Peers};
use pdcx_server::meta::Metadata;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// The holder's pieces, or (when set) this lie instead.
struct Loopback {
    owner: OnceLock<(Arc<Metadata>, Weak<Engine>)>,
    holder: OnceLock<Weak<Engine>>,
    lie: Mutex<Option<Region>>,
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
        let (mut list, bytes) = live(self.holder.get()).pieces(id, region)?;
        if let Some(lie) = self.lie.lock().unwrap().clone() {
            for (_, piece) in &mut list {
                *piece = lie.clone();
            }
        }
        Ok((list, bytes))
    }
}

fn engine(dir: &Path, rank: u32) -> (Arc<Metadata>, Arc<Engine>) {
    let meta = Arc::new(Metadata::open(&dir.join("meta.sqlite"), rank, 2).unwrap());
    let (engine, _, _) = Engine::open(&dir.join("log"), meta.clone(), 1 << 20).unwrap();
    (meta, Arc::new(engine))
}

#[test]
fn a_malformed_piece_from_a_holder_fails_the_read_cleanly() {
    let (od, hd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let id = {
        let meta = Metadata::open(&od.path().join("meta.sqlite"), 0, 2).unwrap();
        meta.create_object(&ObjectSpec {
            name: "o".into(),
            dims: vec![16],
            dtype: Dtype::UInt8,
            fill: Some(vec![9]),
            containers: vec![],
            tags: vec![],
            creator: "t".into(),
        })
        .unwrap()
        .id
    };
    let (om, owner) = engine(od.path(), 0);
    let (_hm, holder) = engine(hd.path(), 1);
    let peers = Arc::new(Loopback {
        owner: OnceLock::new(),
        holder: OnceLock::new(),
        lie: Mutex::new(None),
    });
    let _ = peers.owner.set((om, Arc::downgrade(&owner)));
    let _ = peers.holder.set(Arc::downgrade(&holder));
    owner.set_peers(peers.clone());
    holder.set_peers(peers.clone());
    // The holder writes part of the object (strong: registered with the owner at commit).
    let w = Region::new(vec![4], vec![8]).unwrap();
    let s = holder.stage(1, id, &w, &[5u8; 8]).unwrap();
    holder.commit(&[s], Durability::Local).unwrap();
    let whole = Region::new(vec![0], vec![16]).unwrap();
    let mut out = vec![0u8; 16];
    owner.read(id, &whole, &mut out).unwrap();
    assert_eq!(&out[4..12], &[5u8; 8], "the honest merged read");
    for lie in [
        // An offset shorter than the count: `intersect` would index past it.
        Region {
            offset: vec![],
            count: vec![8],
        },
        // An end past u64.
        Region {
            offset: vec![u64::MAX],
            count: vec![8],
        },
    ] {
        *peers.lie.lock().unwrap() = Some(lie.clone());
        let err = owner
            .read(id, &whole, &mut out)
            .expect_err("a malformed piece fails the read");
        assert_eq!(err.kind, ErrorKind::Protocol, "{lie:?}: {err}");
        assert!(err.message.contains("malformed piece"), "{}", err.message);
    }
    *peers.lie.lock().unwrap() = None;
    owner.read(id, &whole, &mut out).unwrap();
}
