//! The shared-memory bulk path end to end, against an in-process server on this node.

use pdcx_client::conn::Conn;
use pdcx_client::shm::ShmPool;
use pdcx_client::{start_all, wait_all, Client, ClusterFile, Transfer};
use pdcx_core::protocol::{handshake, write, CommitOpts, Durability, ShmLoc, StageItem};
use pdcx_core::{ErrorKind, Region};
mod common;
use common::{byte_object as object, deployment};

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

/// Writes and reads (synchronous and transfers) and returns the server's shm byte count.
fn round_trip(c: &Client, prefix: &str) -> u64 {
    let n = 3 << 20;
    let a = object(c, &format!("{prefix}/a"), n as u64);
    let data = pattern(n, 1);
    c.write(a.id, &Region::whole(&[n as u64]), &data, Durability::Memory)
        .unwrap();
    let mut out = vec![0u8; n];
    c.read_into(a.id, &Region::whole(&[n as u64]), &mut out)
        .unwrap();
    assert!(out == data, "synchronous round trip");

    // A batch of transfers to one server: one StageShm with several locations.
    let parts: Vec<Vec<u8>> = (0..4).map(|k| pattern(n / 4, 10 + k as u8)).collect();
    let mut ts: Vec<Transfer> = parts
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let r = Region::new(vec![(k * n / 4) as u64], vec![(n / 4) as u64]).unwrap();
            let mut t = Transfer::write(c, &a, r).unwrap();
            t.load_from(p).unwrap();
            t
        })
        .collect();
    let mut refs: Vec<&mut Transfer> = ts.iter_mut().collect();
    start_all(&mut refs).unwrap();
    wait_all(&mut refs).unwrap();
    let mut reads: Vec<Transfer> = (0..4)
        .map(|k| {
            let r = Region::new(vec![(k * n / 4) as u64], vec![(n / 4) as u64]).unwrap();
            Transfer::read(c, &a, r).unwrap()
        })
        .collect();
    let mut refs: Vec<&mut Transfer> = reads.iter_mut().collect();
    start_all(&mut refs).unwrap();
    wait_all(&mut refs).unwrap();
    for (t, p) in reads.iter_mut().zip(&parts) {
        assert!(t.take_result().unwrap() == *p, "transfer round trip");
    }
    c.stats(0).unwrap().shm_bytes
}

#[test]
fn same_node_data_goes_through_shared_memory_and_other_nodes_use_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let _server = deployment(dir.path());
    // Reads of committed log bytes and large writes would bypass the server (the
    // one-copy reads and writes of the segment files); this test is about the shared-memory
    // path.
    std::env::set_var("PDCX_DIRECT_READ", "0");
    std::env::set_var("PDCX_DIRECT_WRITE", "0");
    let c = Client::connect(Some(dir.path())).unwrap();
    assert!(c.shm_active(0), "the server runs on this node");
    let moved = round_trip(&c, "same");
    // Synchronous write + read (3 MiB each), four staged and four read quarters.
    assert_eq!(moved, 4 * (3 << 20));

    // The same deployment seen from "another node": everything still works, over TCP.
    let mut cf = ClusterFile::load(dir.path()).unwrap();
    cf.servers[0].node = "some-other-node".into();
    let remote = Client::from_cluster(cf).unwrap();
    assert!(!remote.shm_active(0));
    assert_eq!(round_trip(&remote, "other"), moved, "no shm bytes over TCP");
}

#[test]
fn bad_shared_memory_requests_get_clear_errors_and_the_connection_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let _server = deployment(dir.path());
    let cf = ClusterFile::load(dir.path()).unwrap();
    let secret = cf.secret_bytes().unwrap();
    let c = Client::connect(Some(dir.path())).unwrap();
    let obj = object(&c, "raw", 64);
    let mut conn = Conn::connect(&cf.servers[0].addr, &secret).unwrap();
    let pool = ShmPool::new(&secret);
    let mut block = pool.alloc(64).unwrap();
    block.as_mut_slice().copy_from_slice(&pattern(64, 7));
    let arena = block.arena().clone();
    let stage = |offset: u64, arena_id: u32| write::Stage {
        items: vec![StageItem {
            txn: 1,
            id: obj.id,
            region: Region::whole(&[64]),
            len: 64,
        }],
        shm: Some(vec![ShmLoc {
            arena: arena_id,
            offset,
        }]),
        commit: None,
    };
    // Before any attach: refused.
    let e = conn.ask(stage(0, arena.id), &[]).unwrap_err();
    assert!(e.message.contains("not attached"), "{e}");
    // A wrong length and a wrong name are refused; the real arena attaches.
    let attach = |len: u64, name: &str| handshake::AttachShm {
        arena: arena.id,
        pid: std::process::id(),
        fd: arena.fd(),
        name: name.into(),
        len,
    };
    let e = conn
        .ask(attach(arena.len() as u64 * 2, &arena.name), &[])
        .unwrap_err();
    assert!(e.message.contains("fewer than"), "{e}");
    let e = conn.ask(attach(4096, "pdcx-x"), &[]).unwrap_err();
    assert!(e.message.contains("not a shared-memory arena"), "{e}");
    conn.ask(attach(arena.len() as u64, &arena.name), &[])
        .unwrap();
    // Past the end, straddling the end, overflowing: clear errors, nothing staged.
    let len = arena.len() as u64;
    for off in [len, len - 63, u64::MAX - 10] {
        let e = conn.ask(stage(off, arena.id), &[]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(e.message.contains("outside shared-memory arena"), "{e}");
    }
    // A mismatched item/location count is a protocol error, but the framing is intact.
    let e = conn
        .ask(
            write::Stage {
                items: vec![],
                shm: Some(vec![block.loc()]),
                commit: None,
            },
            &[],
        )
        .unwrap_err();
    assert!(e.message.contains("0 items but 1 locations"), "{e}");
    // The connection still works: a good StageShm and its commit.
    let staged = conn.ask(stage(block.loc().offset, arena.id), &[]).unwrap();
    assert_eq!(staged, 1);
    conn.ask(
        write::Commit {
            txns: vec![1],
            opts: CommitOpts::at(Durability::Memory),
        },
        &[],
    )
    .unwrap();
    let mut out = vec![0u8; 64];
    c.read_into(obj.id, &Region::whole(&[64]), &mut out)
        .unwrap();
    assert_eq!(out, pattern(64, 7));
}
