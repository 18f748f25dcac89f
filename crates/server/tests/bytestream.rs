//! Byte-stream objects and their versions (issue 11): writers on two servers grow one
//! stream, a seal records a version, and the home copier writes exactly that version (not
//! what came after it) to an ordinary file, atomically, in epoch order.

use pdcx_client::Client;
use pdcx_server::{Server, ServerConfig, ServerHandle};
use std::path::Path;
use std::time::{Duration, Instant};

fn two_servers(root: &Path) -> Vec<ServerHandle> {
    let hs: Vec<ServerHandle> = (0..2)
        .map(|r| {
            let h = Server::start(ServerConfig::new(root, r, 2)).unwrap();
            h.server.publish_rank_file().unwrap();
            h
        })
        .collect();
    pdcx_server::launch::assemble_cluster(root, 2, Duration::from_secs(30)).unwrap();
    hs
}

fn client_at(root: &Path, local: u32) -> Client {
    let c = Client::connect(Some(root)).unwrap();
    c.set_local_server(local).unwrap();
    c
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Waits until version `epoch` of `name` is `done` (or fails with its state).
fn wait_done(c: &Client, name: &str, epoch: u64) {
    let bs = c.bs_open(name, false).unwrap();
    let t0 = Instant::now();
    loop {
        let v = bs.versions().unwrap();
        let mine = v
            .iter()
            .find(|v| v.epoch == epoch)
            .expect("version recorded");
        if mine.state == "done" {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "version {epoch} of {name} still {} ({})",
            mine.state,
            mine.error
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn writers_on_two_servers_make_one_stream_and_its_versions_reach_the_home() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let _servers = two_servers(&root);
    let home = dir.path().join("home/out.dat");
    let home_s = home.to_str().unwrap();
    let a = client_at(&root, 0);
    let b = client_at(&root, 1);
    let sa = a.bs_open("mpiio/out.dat", true).unwrap();
    let sb = b.bs_open("mpiio/out.dat", false).unwrap();
    assert_eq!(sa.id(), sb.id());
    assert_eq!(sa.size().unwrap(), 0);

    // Epoch 1: a large write from each side (one-copy into each node's log) and small ones
    // queued, overlapping in program order; a hole in the middle.
    let big_a = pattern(1 << 20, 1);
    let big_b = pattern(1 << 20, 2);
    sa.pwrite(0, &big_a).unwrap();
    sb.pwrite(3 << 20, &big_b).unwrap();
    sa.pwrite(100, b"first").unwrap();
    sa.pwrite(105, b"-more").unwrap();
    sa.pwrite(100, b"FIRST").unwrap();
    let mut golden = vec![0u8; 4 << 20];
    golden[..1 << 20].copy_from_slice(&big_a);
    golden[3 << 20..].copy_from_slice(&big_b);
    golden[100..110].copy_from_slice(b"FIRST-more");
    // Each writer sees its own writes at once (the queue drains before a read).
    let mut got = vec![0u8; 10];
    assert_eq!(sa.pread(100, &mut got).unwrap(), 10);
    assert_eq!(&got, b"FIRST-more");
    sa.commit().unwrap();
    sb.commit().unwrap();
    assert_eq!(sa.size().unwrap(), 4 << 20);
    // A read past the end is short, as POSIX pread.
    let mut tail = vec![0u8; 100];
    assert_eq!(sb.pread((4 << 20) - 10, &mut tail).unwrap(), 10);
    let e1 = sa.seal(home_s).unwrap();
    assert_eq!(e1, 1);
    // Writes after the seal belong to the next version, never to this one's home copy.
    sb.pwrite(0, b"LATER").unwrap();
    sb.pwrite(5 << 20, b"beyond").unwrap();
    sb.commit().unwrap();
    wait_done(&a, "mpiio/out.dat", e1);
    assert_eq!(
        std::fs::read(&home).unwrap(),
        golden,
        "home holds version 1 exactly"
    );
    // Sealing again without a change records no new version.
    let e2 = sb.seal(home_s).unwrap();
    assert_eq!(e2, 2);
    assert_eq!(sb.seal(home_s).unwrap(), 2, "unchanged: same epoch");
    wait_done(&a, "mpiio/out.dat", e2);
    golden[..5].copy_from_slice(b"LATER");
    golden.resize((5 << 20) + 6, 0);
    golden[5 << 20..].copy_from_slice(b"beyond");
    assert_eq!(
        std::fs::read(&home).unwrap(),
        golden,
        "home holds version 2"
    );
    // No temporary file is left next to the home.
    let left: Vec<_> = std::fs::read_dir(home.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");

    // Truncate: the size is exact, reads stop there, the next version is that long.
    sa.set_size(1000).unwrap();
    assert_eq!(sb.size().unwrap(), 1000);
    let e3 = sa.seal(home_s).unwrap();
    wait_done(&a, "mpiio/out.dat", e3);
    assert_eq!(std::fs::read(&home).unwrap(), golden[..1000]);
}

#[test]
fn racing_writers_grow_the_stream_to_the_furthest_end() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let _servers = two_servers(&root);
    let c = client_at(&root, 0);
    c.bs_open("grow", true).unwrap();
    let threads: Vec<_> = (0..8u64)
        .map(|i| {
            let c = client_at(&root, (i % 2) as u32);
            std::thread::spawn(move || {
                let s = c.bs_open("grow", false).unwrap();
                for k in 0..20u64 {
                    s.pwrite((k * 8 + i) * 1000, &[i as u8 + 1; 1000]).unwrap();
                }
                s.commit().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = c.bs_open("grow", false).unwrap();
    assert_eq!(s.size().unwrap(), 160 * 1000);
    let mut all = vec![0u8; 160 * 1000];
    assert_eq!(s.pread(0, &mut all).unwrap(), all.len());
    for (j, chunk) in all.chunks(1000).enumerate() {
        assert!(chunk.iter().all(|&x| x == (j % 8) as u8 + 1), "chunk {j}");
    }
}

#[test]
fn bad_homes_and_non_streams_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let _servers = two_servers(&root);
    let c = client_at(&root, 0);
    let s = c.bs_open("x", true).unwrap();
    s.pwrite(0, b"abc").unwrap();
    s.commit().unwrap();
    for bad in ["relative/x", "/a/../b", "s3://bucket"] {
        let e = s.seal(bad).unwrap_err();
        assert!(e.message.contains("home"), "{bad}: {e}");
    }
    c.create_object(pdcx_core::protocol::ObjectSpec {
        name: "array".into(),
        dims: vec![4],
        dtype: pdcx_core::Dtype::UInt8,
        fill: None,
        containers: vec![],
        tags: vec![],
        creator: String::new(),
    })
    .unwrap();
    let e = c.bs_open("array", false).err().expect("refused");
    assert!(e.message.contains("not a byte stream"), "{e}");
}
