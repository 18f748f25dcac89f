//! Byte-stream objects and their versions: writers on two servers grow one
//! stream, a seal records a version, and the home copier writes exactly that version (not
//! what came after it) to an ordinary file, atomically, in epoch order.

use pdcx_client::Client;
mod common;
use common::{client_at, s3_server, two_servers};
use std::time::{Duration, Instant};

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

/// S3 homes (ParaLog §6.3): a small version is one PUT; a large one a multipart upload
/// led by the owner whose parts are uploaded by the servers holding their bytes; only the
/// sealed version reaches the bucket.
#[test]
fn versions_reach_an_s3_home_in_parts_from_the_servers_holding_them() {
    let Some(s3) = s3_server() else { return };
    // The servers (in this process) read S3 credentials from the environment, as a real
    // server does.
    let raw = common::s3_home_env(&s3);
    let bucket = &s3.vars["PDCX_TEST_S3_BUCKET"];
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let _servers = two_servers(&root);
    let a = client_at(&root, 0);
    let b = client_at(&root, 1);
    use pdcx_tiers::Tier;

    // Small: one PUT.
    let small = a.bs_open("mpiio/small.dat", true).unwrap();
    small.pwrite(0, b"tiny file").unwrap();
    small.commit().unwrap();
    let e = small
        .seal(&format!("s3://{bucket}/run1/small.dat"))
        .unwrap();
    wait_done(&a, "mpiio/small.dat", e);
    let mut got = vec![0u8; 9];
    raw.get_range("run1/small.dat", 0, &mut got).unwrap();
    assert_eq!(&got, b"tiny file");

    // Large: 20 MiB, the first half written through server 0, the rest through server 1,
    // so parts 1 and 2 (8 MiB parts) are uploaded by server 1.
    const MIB: usize = 1 << 20;
    let data = pattern(20 * MIB, 9);
    let sa = a.bs_open("mpiio/big.dat", true).unwrap();
    let sb = b.bs_open("mpiio/big.dat", false).unwrap();
    for k in 0..10 {
        sa.pwrite((k * MIB) as u64, &data[k * MIB..(k + 1) * MIB])
            .unwrap();
        sb.pwrite(
            ((k + 10) * MIB) as u64,
            &data[(k + 10) * MIB..(k + 11) * MIB],
        )
        .unwrap();
    }
    sa.commit().unwrap();
    sb.commit().unwrap();
    let parts_before: Vec<u64> = (0..2)
        .map(|r| a.stats(r).unwrap().home_parts_uploaded)
        .collect();
    let e = sa.seal(&format!("s3://{bucket}/run1/big.dat")).unwrap();
    sb.pwrite(0, b"not in this version").unwrap();
    sb.commit().unwrap();
    wait_done(&a, "mpiio/big.dat", e);
    assert_eq!(raw.len("run1/big.dat").unwrap(), data.len() as u64);
    let mut back = vec![0u8; data.len()];
    raw.get_range("run1/big.dat", 0, &mut back).unwrap();
    assert!(back == data, "the S3 object is not version {e}");
    let parts: Vec<u64> = (0..2)
        .map(|r| a.stats(r).unwrap().home_parts_uploaded - parts_before[r as usize])
        .collect();
    assert_eq!(parts.iter().sum::<u64>(), 3, "{parts:?}");
    assert!(
        parts.iter().all(|&p| p > 0),
        "both servers upload parts: {parts:?}"
    );
    let v = sa.versions().unwrap();
    assert!(v.iter().all(|v| v.upload_id.is_empty()), "{v:?}");

    // The version is the stream's base now: its bytes left the logs and are read from the
    // S3 object (ranged GETs), with the later write painted over them.
    let mut now = data.clone();
    now[..19].copy_from_slice(b"not in this version");
    wait_no_extents_below(&a, "mpiio/big.dat", 1);
    let mut back = vec![0u8; now.len()];
    assert_eq!(sa.pread(0, &mut back).unwrap(), back.len());
    assert!(back == now, "stream content from its S3 base");
    // The next version is copied from the base and that write.
    let e2 = sa.seal(&format!("s3://{bucket}/run1/big.dat")).unwrap();
    wait_done(&a, "mpiio/big.dat", e2);
    raw.get_range("run1/big.dat", 0, &mut back).unwrap();
    let first_diff = back.iter().zip(&now).position(|(x, y)| x != y);
    assert!(
        first_diff.is_none(),
        "the S3 object is not version {e2}: first difference at byte {first_diff:?}"
    );
}

/// Waits until stream `name` has at most `max` writes left in the logs.
fn wait_no_extents_below(c: &Client, name: &str, max: usize) {
    let id = c.bs_open(name, false).unwrap().id();
    let t0 = Instant::now();
    loop {
        let held = c.extents(id).unwrap().len();
        if held <= max {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{name}: {held} extents still held"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Log space: a version at its home becomes the stream's base. Every write below
/// it leaves the logs (on every holder), the stream reads the home with later writes painted
/// over it, the next version is copied from both, and a home removed behind pdcx's back is
/// an error, never zeros.
#[test]
fn a_copied_version_leaves_the_logs_and_is_read_from_its_home() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    // Small segments: a segment is freed once sealed and holding nothing.
    std::fs::write(root.join("pdcx.toml"), "[log]\nsegment_bytes = \"1MiB\"\n").unwrap();
    let _servers = two_servers(&root);
    let home = dir.path().join("home/run.h5");
    let home_s = home.to_str().unwrap();
    let c = client_at(&root, 0);
    let a = c.bs_open("mpiio/run.h5", true).unwrap();
    let b = client_at(&root, 1).bs_open("mpiio/run.h5", false).unwrap();
    // 4 MiB per server: four times a log segment.
    const HALF: usize = 4 << 20;
    let mut want = pattern(2 * HALF, 3);
    a.pwrite(0, &want[..HALF]).unwrap();
    b.pwrite(HALF as u64, &want[HALF..]).unwrap();
    a.pwrite(10, b"small").unwrap();
    want[10..15].copy_from_slice(b"small");
    a.commit().unwrap();
    b.commit().unwrap();
    let e1 = a.seal(home_s).unwrap();
    wait_done(&c, "mpiio/run.h5", e1);
    wait_no_extents_below(&c, "mpiio/run.h5", 0);
    // Only each server's active segment (at most 1 MiB and a record) can remain (the owner
    // retires its segments last: wait for it).
    let t0 = Instant::now();
    loop {
        let log_total: u64 = (0..2).map(|r| c.stats(r).unwrap().log_bytes).sum();
        if log_total < 3 << 20 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "logs still hold {log_total} of the {} bytes written",
            2 * HALF
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut back = vec![0u8; want.len()];
    assert_eq!(b.pread(0, &mut back).unwrap(), back.len());
    assert!(back == want, "the stream reads its home");

    // Later writes (one past the base's end) are painted over it.
    b.pwrite(HALF as u64 - 2, b"ACROSS").unwrap();
    a.pwrite(2 * HALF as u64 + 4, b"tail").unwrap();
    b.commit().unwrap();
    a.commit().unwrap();
    want[HALF - 2..HALF + 4].copy_from_slice(b"ACROSS");
    want.extend_from_slice(&[0, 0, 0, 0]);
    want.extend_from_slice(b"tail");
    let mut back = vec![0u8; want.len()];
    assert_eq!(a.pread(0, &mut back).unwrap(), back.len());
    assert!(back == want, "base + later writes");
    let e2 = a.seal(home_s).unwrap();
    wait_done(&c, "mpiio/run.h5", e2);
    assert!(
        std::fs::read(&home).unwrap() == want,
        "home holds version 2"
    );
    wait_no_extents_below(&c, "mpiio/run.h5", 0);
    assert_eq!(a.pread(0, &mut back).unwrap(), back.len());
    assert!(back == want, "the stream reads version 2 at its home");

    // A shrink into the base, then growth: the cut bytes read as zeros (they are at the
    // home, not in any log).
    b.set_size(HALF as u64).unwrap();
    b.set_size(2 * HALF as u64).unwrap();
    assert_eq!(a.pread(0, &mut back).unwrap(), 2 * HALF);
    assert!(back[..HALF] == want[..HALF]);
    assert!(
        back[HALF..2 * HALF].iter().all(|&x| x == 0),
        "bytes cut from the base came back"
    );

    // The home removed by someone else: a clear error, not zeros.
    std::fs::remove_file(&home).unwrap();
    let err = a.pread(0, &mut back).unwrap_err();
    assert!(
        err.message.contains("home") && err.message.contains("run.h5"),
        "{err}"
    );
}

/// `PDCX_HOME_KEEP_LOG=1` (`home_keep_log`): a copied version stays in the log, so the
/// stream reads without its home.
#[test]
fn home_keep_log_keeps_a_copied_version_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let _h = common::deployment_with(&root, |c| c.home_keep_log = true);
    let home = dir.path().join("home/keep.dat");
    let c = client_at(&root, 0);
    let bs = c.bs_open("mpiio/keep.dat", true).unwrap();
    let data = pattern(300 << 10, 5);
    bs.pwrite(0, &data).unwrap();
    bs.commit().unwrap();
    let e = bs.seal(home.to_str().unwrap()).unwrap();
    wait_done(&c, "mpiio/keep.dat", e);
    assert_eq!(c.extents(bs.id()).unwrap().len(), 1);
    std::fs::remove_file(&home).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(bs.pread(0, &mut back).unwrap(), back.len());
    assert!(back == data);
}

/// `ftruncate` semantics: bytes cut off by a shrink read as zeros once the stream grows
/// again, wherever they were held.
#[test]
fn a_shrink_then_growth_reads_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let _servers = two_servers(&root);
    let a = client_at(&root, 0).bs_open("t", true).unwrap();
    let b = client_at(&root, 1).bs_open("t", false).unwrap();
    a.pwrite(0, &[1u8; 4000]).unwrap();
    b.pwrite(4000, &[2u8; 600_000]).unwrap();
    a.commit().unwrap();
    b.commit().unwrap();
    b.set_size(1000).unwrap();
    assert_eq!(a.size().unwrap(), 1000);
    a.pwrite(700_000, b"end").unwrap();
    a.flush().unwrap();
    let mut all = vec![9u8; 700_003];
    assert_eq!(b.pread(0, &mut all).unwrap(), all.len());
    assert!(all[..1000].iter().all(|&x| x == 1));
    assert!(
        all[1000..700_000].iter().all(|&x| x == 0),
        "old bytes came back"
    );
    assert_eq!(&all[700_000..], b"end");
}

/// A run that crashes between consistency points leaves an incomplete version in the log;
/// the next run's open discards it: the content is the last version again, and the next
/// version holds the last one plus the new writes only.
#[test]
fn an_incomplete_version_is_discarded_and_never_reaches_the_home() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let _servers = two_servers(&root);
    let home = dir.path().join("home/f");
    let home_s = home.to_str().unwrap();
    let a = client_at(&root, 0).bs_open("mpiio/f", true).unwrap();
    let b = client_at(&root, 1).bs_open("mpiio/f", false).unwrap();
    let v1 = pattern(300_000, 5);
    a.pwrite(0, &v1).unwrap();
    a.commit().unwrap();
    assert_eq!(a.seal(home_s).unwrap(), 1);
    // The "crashed" run: overwrites part of version 1 and grows the stream, never seals.
    b.pwrite(1000, &[7u8; 400_000]).unwrap();
    a.pwrite(10, b"XXXX").unwrap();
    a.commit().unwrap();
    b.commit().unwrap();
    assert_eq!(a.size().unwrap(), 401_000);
    // The next run opens it.
    let c = client_at(&root, 1).bs_open("mpiio/f", true).unwrap();
    assert!(c.discard_incomplete().unwrap() > 0);
    assert_eq!(c.size().unwrap(), v1.len() as u64);
    let mut back = vec![0u8; v1.len()];
    assert_eq!(a.pread(0, &mut back).unwrap(), v1.len());
    assert!(back == v1, "content is version 1 again");
    assert_eq!(
        c.discard_incomplete().unwrap(),
        0,
        "nothing left to discard"
    );
    // It grows the stream past the discarded end: zeros, not the crashed run's bytes.
    c.pwrite(450_000, b"new").unwrap();
    c.commit().unwrap();
    let e = c.seal(home_s).unwrap();
    wait_done(&client_at(&root, 0), "mpiio/f", e);
    let got = std::fs::read(&home).unwrap();
    let mut want = v1.clone();
    want.resize(450_000, 0);
    want.extend_from_slice(b"new");
    assert!(got == want, "home holds version 1 + the new write only");
}

/// Log space is freed once a version is home: writes an epoch rewrites entirely (the
/// checkpoint pattern) are dropped on every server holding them, and log segments left
/// holding nothing are retired, so the logs hold about one version, not one per epoch.
#[test]
fn log_space_of_shadowed_epochs_is_freed_after_the_home_copy() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("pdcx.toml"), "[log]\nsegment_bytes = \"1MiB\"\n").unwrap();
    let _servers = two_servers(&root);
    let home = dir.path().join("home/ckpt");
    let home_s = home.to_str().unwrap();
    let a = client_at(&root, 0).bs_open("mpiio/ckpt", true).unwrap();
    let b = client_at(&root, 1).bs_open("mpiio/ckpt", false).unwrap();
    let c = client_at(&root, 0);
    const HALF: usize = 1 << 20;
    let log_total = || -> u64 { (0..2).map(|r| c.stats(r).unwrap().log_bytes).sum() };
    let mut last = Vec::new();
    for epoch in 0..10u8 {
        let x = pattern(2 * HALF, epoch);
        a.pwrite(0, &x[..HALF]).unwrap();
        b.pwrite(HALF as u64, &x[HALF..]).unwrap();
        a.commit().unwrap();
        b.commit().unwrap();
        let e = a.seal(home_s).unwrap();
        wait_done(&c, "mpiio/ckpt", e);
        last = x;
    }
    assert!(
        std::fs::read(&home).unwrap() == last,
        "home holds the last epoch"
    );
    let mut back = vec![0u8; last.len()];
    assert_eq!(a.pread(0, &mut back).unwrap(), back.len());
    assert!(back == last, "the stream still reads the last epoch");
    // 20 MiB were written; without freeing the logs would hold all of it.
    let total = log_total();
    assert!(
        total < 8 << 20,
        "logs hold {total} bytes after 10 epochs of 2 MiB"
    );
    let extents: u64 = (0..2).map(|r| c.stats(r).unwrap().extents).sum();
    assert!(extents <= 4, "{extents} extents left");
}

/// A one-process file (ParaLog §8.7's segment creation, `MPI_COMM_SELF`): from create to
/// version it costs three round trips — create, write (the owner grows the stream as it
/// takes it), and one `SyncSeal` that makes the writes, the create and the version durable —
/// and a second consistency point with nothing new costs none.
#[test]
fn a_new_file_costs_create_write_and_one_sync_seal() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let h = common::deployment(&root);
    let home = dir.path().join("home/seg.0");
    let home_s = home.to_str().unwrap();
    let c = client_at(&root, 0);
    let counts = || {
        [
            "OpenObject",
            "CreateObjectLazy",
            "ExtendDims",
            "StageCommit",
            "SyncLog",
            "SyncMeta",
            "Seal",
            "SyncSeal",
        ]
        .map(|k| (k, h.server.requests_of(k)))
    };
    let before = counts();
    let bs = c.bs_open("mpiio/seg.0", true).unwrap();
    assert!(bs.created());
    assert!(bs.take_changed(), "a created stream is a change to seal");
    bs.pwrite(0, &pattern(1024, 7)).unwrap();
    bs.prepare_seal().unwrap();
    assert!(bs.take_changed());
    assert_eq!(bs.seal(home_s).unwrap(), 1);
    // The close after the sync: nothing changed, nothing to send.
    assert!(!bs.take_changed());
    bs.prepare_seal().unwrap();
    // A request is counted once its answer is out: wait for the last one's count.
    let t0 = Instant::now();
    while h.server.requests_of("SyncSeal") == 0 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let after = counts();
    let sent: Vec<(&str, u64)> = before
        .iter()
        .zip(&after)
        .map(|((k, b), (_, a))| (*k, a - b))
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(
        sent,
        vec![("CreateObjectLazy", 1), ("StageCommit", 1), ("SyncSeal", 1)]
    );
    // The create reached the disk with the seal (no create left unwritten), the version is
    // recorded and copied.
    assert_eq!(h.server.meta.unwritten_creates(), 0);
    wait_done(&c, "mpiio/seg.0", 1);
    assert_eq!(std::fs::read(&home).unwrap(), pattern(1024, 7));
    // Opening it again finds it: not created, two round trips (the create refused, the open).
    let again = c.bs_open("mpiio/seg.0", true).unwrap();
    assert!(!again.created());
    assert!(!again.take_changed());
}

/// Home copies of different files are independent: one whose home cannot be written (its
/// directory is a file) keeps failing and is retried, while the others reach their homes.
#[test]
fn a_failing_home_copy_does_not_hold_up_other_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let _h = common::deployment(&root);
    let c = client_at(&root, 0);
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"x").unwrap();
    let bad = c.bs_open("mpiio/bad", true).unwrap();
    bad.pwrite(0, b"never copied").unwrap();
    bad.commit().unwrap();
    bad.seal(blocker.join("bad").to_str().unwrap()).unwrap();
    let mut good = Vec::new();
    for k in 0..6 {
        let name = format!("mpiio/good.{k}");
        let bs = c.bs_open(&name, true).unwrap();
        bs.pwrite(0, &pattern(1000 + k, k as u8)).unwrap();
        bs.commit().unwrap();
        let home = dir.path().join(format!("home/good.{k}"));
        bs.seal(home.to_str().unwrap()).unwrap();
        good.push((name, home, k));
    }
    for (name, home, k) in &good {
        wait_done(&c, name, 1);
        assert_eq!(std::fs::read(home).unwrap(), pattern(1000 + k, *k as u8));
    }
    let v = bad.versions().unwrap();
    assert_eq!(v.len(), 1);
    assert_ne!(v[0].state, "done");
    assert!(!v[0].error.is_empty(), "the failure is recorded: {v:?}");
}

/// A large write on the owner's node (a one-copy write) is reserved without its checksum,
/// which is computed as the payload is written, and left uncommitted until the consistency
/// point; the seal commits it with its checksum in its own round trip (`CommitSyncSeal`): a
/// new file of large writes costs create, reserve (one per write) and one seal, with no
/// commit of its own. A read through the handle commits them first (`CommitLate`).
#[test]
fn large_writes_are_committed_by_the_seal() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let h = common::deployment(&root);
    let home = dir.path().join("home");
    let c = client_at(&root, 0);
    assert!(
        c.direct_transfers_possible(1 << 20),
        "this test needs one-copy writes (a server on this node)"
    );
    let kinds = [
        "CreateObjectLazy",
        "ReserveWrite",
        "ReserveWriteLate",
        "Commit",
        "CommitLate",
        "StageCommit",
        "SyncSeal",
        "CommitSyncSeal",
    ];
    let counts = || kinds.map(|k| h.server.requests_of(k));
    let settled = |want: u64| {
        let t0 = Instant::now();
        while h.server.requests_of("CommitSyncSeal") < want && t0.elapsed() < Duration::from_secs(5)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let before = counts();
    let bs = c.bs_open("mpiio/big.0", true).unwrap();
    let (a, b) = (pattern(1 << 20, 1), pattern(1 << 20, 2));
    bs.pwrite(0, &a).unwrap();
    bs.pwrite(1 << 20, &b).unwrap();
    // Not visible to another reader before the consistency point.
    let other = c.bs_open("mpiio/big.0", false).unwrap();
    assert_eq!(
        other.size().unwrap(),
        2 << 20,
        "the owner grew it as it took the writes"
    );
    let mut early = vec![1u8; 4096];
    other.pread(4096, &mut early).unwrap();
    assert!(
        early.iter().all(|&x| x == 0),
        "an uncommitted write was read"
    );
    bs.prepare_seal().unwrap();
    let home0 = home.join("big.0");
    assert_eq!(bs.seal(home0.to_str().unwrap()).unwrap(), 1);
    settled(1);
    let after = counts();
    let sent: Vec<(&str, u64)> = kinds
        .iter()
        .zip(before.iter().zip(&after))
        .map(|(k, (b, a))| (*k, a - b))
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(
        sent,
        vec![
            ("CreateObjectLazy", 1),
            ("ReserveWriteLate", 2),
            ("CommitSyncSeal", 1)
        ]
    );
    let mut got = vec![0u8; 2 << 20];
    assert_eq!(other.pread(0, &mut got).unwrap(), 2 << 20);
    assert_eq!(&got[..1 << 20], &a[..]);
    assert_eq!(&got[1 << 20..], &b[..]);
    wait_done(&c, "mpiio/big.0", 1);
    assert_eq!(std::fs::read(&home0).unwrap(), got);
    // A read through the writing handle sees its own write: committed before it.
    let commits = h.server.requests_of("CommitLate");
    let c2 = pattern(1 << 20, 3);
    bs.pwrite(0, &c2).unwrap();
    let mut first = vec![0u8; 16];
    bs.pread(0, &mut first).unwrap();
    assert_eq!(first, c2[..16]);
    assert_eq!(h.server.requests_of("CommitLate"), commits + 1);
    bs.prepare_seal().unwrap();
    assert_eq!(bs.seal(home0.to_str().unwrap()).unwrap(), 2);
    // A handle dropped with an uncommitted write commits it (visible, not sealed).
    let d = pattern(1 << 20, 4);
    bs.pwrite(1 << 20, &d).unwrap();
    drop(bs);
    let mut tail = vec![0u8; 1 << 20];
    other.pread(1 << 20, &mut tail).unwrap();
    assert!(tail == d, "a dropped handle's write is not visible");
}

/// Home copies yield to bursts of writes: a version sealed while the node keeps writing is
/// copied once the writes pause (not during them), and never later than the configured
/// limit when they do not pause.
#[test]
fn home_copies_wait_for_a_pause_in_the_writes_up_to_the_limit() {
    // Writes through server 0 every few ms for `busy`; returns the version's state just
    // before they stop and how long after they stopped it was done.
    fn run(defer: Duration, busy: Duration) -> (String, Duration) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        let _h = common::deployment_with(&root, |cfg| cfg.home_defer = defer);
        let home = dir.path().join("home/f.0");
        let c = client_at(&root, 0);
        let other = common::byte_object(&c, "busy", 4096);
        let bs = c.bs_open("mpiio/f.0", true).unwrap();
        bs.pwrite(0, &pattern(4096, 1)).unwrap();
        bs.prepare_seal().unwrap();
        let epoch = bs.seal(home.to_str().unwrap()).unwrap();
        let r = pdcx_core::Region::new(vec![0], vec![4096]).unwrap();
        let t0 = Instant::now();
        while t0.elapsed() < busy {
            c.write(
                other.id,
                &r,
                &[7u8; 4096],
                pdcx_core::protocol::Durability::Memory,
            )
            .unwrap();
            std::thread::sleep(Duration::from_millis(3));
        }
        let state = bs
            .versions()
            .unwrap()
            .into_iter()
            .find(|v| v.epoch == epoch)
            .unwrap()
            .state;
        let stopped = Instant::now();
        wait_done(&c, "mpiio/f.0", epoch);
        assert_eq!(std::fs::read(&home).unwrap(), pattern(4096, 1));
        (state, stopped.elapsed())
    }
    // Writes for 0.6 s, the limit far away: the copy waits for them, then runs at once.
    let (state, after) = run(Duration::from_secs(30), Duration::from_millis(600));
    assert_ne!(state, "done", "copied while the writes went on");
    assert!(
        after < Duration::from_secs(5),
        "done {after:?} after the writes paused"
    );
    // Writes for 3 s, the limit 0.2 s: copied while they go on.
    let (state, _) = run(Duration::from_millis(200), Duration::from_secs(3));
    assert_eq!(state, "done", "the limit did not bound the wait");
}
