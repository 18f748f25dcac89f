//! The small-operation fast path: clients on the server's node talk over its
//! Unix-domain socket, falling back to TCP when it is unusable, and a small write is one
//! message (`StageCommit` / `StageShmCommit`), whether synchronous or a transfer whose
//! `start` and `wait` come back to back.

use pdcx_client::{start_all, wait_all, Client, ClusterFile, Status, Transfer};
use pdcx_core::protocol::{Consistency, Durability};
use pdcx_core::{Dtype, Region};
use pdcx_server::{Server, ServerConfig, ServerHandle};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::time::Duration;
mod common;
use common::{byte_object as object, deployment};

fn r(o: u64, n: u64) -> Region {
    Region::new(vec![o], vec![n]).unwrap()
}

/// How many requests of `kind` the server answered (its Prometheus counter).
fn requests(h: &ServerHandle, kind: &str) -> u64 {
    let text = pdcx_server::metrics::render(&h.server);
    let want = format!("pdcx_requests_total{{kind=\"{kind}\"");
    text.lines()
        .filter(|l| l.starts_with(&want))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Small writes (synchronous, one transfer, a batch) and reads; checks the bytes.
fn small_round_trip(c: &Client, name: &str) {
    let o = object(c, name, 1 << 16);
    let a: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    c.write(o.id, &r(0, 4096), &a, Durability::Memory).unwrap();
    let mut t = Transfer::write(c, &o, r(4096, 4096)).unwrap();
    t.load_from(&a).unwrap();
    t.start().unwrap();
    t.wait().unwrap();
    assert_eq!(t.status(), Status::Complete);
    let mut ts: Vec<Transfer> = (2..5)
        .map(|k| {
            let mut t = Transfer::write(c, &o, r(k * 4096, 4096)).unwrap();
            t.load_from(&vec![k as u8; 4096]).unwrap();
            t
        })
        .collect();
    let mut refs: Vec<&mut Transfer> = ts.iter_mut().collect();
    start_all(&mut refs).unwrap();
    wait_all(&mut refs).unwrap();
    let mut out = vec![0u8; 4096];
    c.read_into(o.id, &r(4096, 4096), &mut out).unwrap();
    assert_eq!(out, a);
    let mut rd = Transfer::read(c, &o, r(3 * 4096, 4096)).unwrap();
    rd.start().unwrap();
    rd.wait().unwrap();
    assert_eq!(rd.take_result().unwrap(), vec![3u8; 4096]);
}

#[test]
fn a_same_node_client_uses_the_unix_socket_and_others_use_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let h = deployment(dir.path());
    let sock = dir.path().join("run").join("rank-0.sock");
    let meta = std::fs::metadata(&sock).expect("the listener's socket file");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let cf = ClusterFile::load(dir.path()).unwrap();
    assert_eq!(cf.servers[0].unix, sock.to_string_lossy());

    let c = Client::connect(Some(dir.path())).unwrap();
    assert!(c.uses_unix(0).unwrap());
    let before = h.server.unix_connections();
    assert!(
        before >= 1,
        "the client's connection came over the Unix socket"
    );
    small_round_trip(&c, "unix");
    assert!(c.stats(0).unwrap().unix_connections >= before);
    assert!(
        c.stats(0).unwrap().shm_bytes > 0,
        "shared memory still attaches"
    );

    // Seen from another node: TCP, and everything works the same.
    let mut other = cf.clone();
    other.servers[0].node = "some-other-node".into();
    let remote = Client::from_cluster(other).unwrap();
    assert!(!remote.uses_unix(0).unwrap());
    let n = h.server.unix_connections();
    small_round_trip(&remote, "remote");
    assert_eq!(
        h.server.unix_connections(),
        n,
        "no Unix connection from another node"
    );

    // Shutdown removes the socket file.
    drop(c);
    drop(remote);
    h.shutdown().unwrap();
    assert!(!sock.exists(), "socket removed at shutdown");
}

#[test]
fn an_unusable_unix_socket_falls_back_to_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let h = deployment(dir.path());
    let cf = ClusterFile::load(dir.path()).unwrap();
    // No listener at the advertised path, a plain file there, an abstract name nobody binds.
    let plain = dir.path().join("not-a-socket");
    std::fs::write(&plain, b"x").unwrap();
    for (i, bogus) in [
        dir.path()
            .join("missing.sock")
            .to_string_lossy()
            .into_owned(),
        plain.to_string_lossy().into_owned(),
        "@pdcx-nobody-listens-here".to_string(),
    ]
    .into_iter()
    .enumerate()
    {
        let mut c2 = cf.clone();
        c2.servers[0].unix = bogus.clone();
        let c = Client::from_cluster(c2).unwrap();
        assert!(!c.uses_unix(0).unwrap(), "{bogus}: TCP");
        small_round_trip(&c, &format!("fallback{i}"));
    }
    // A socket file left by a killed server is replaced at the next start.
    h.shutdown().unwrap();
    let sock = dir.path().join("run").join("rank-0.sock");
    let stale = std::os::unix::net::UnixListener::bind(dir.path().join("stale.sock")).unwrap();
    drop(stale);
    let _ = std::fs::remove_file(&sock);
    std::fs::rename(dir.path().join("stale.sock"), &sock).unwrap();
    let h = deployment(dir.path());
    let c = Client::connect(Some(dir.path())).unwrap();
    assert!(c.uses_unix(0).unwrap(), "the stale socket was replaced");
    small_round_trip(&c, "restarted");
    h.shutdown().unwrap();
}

#[test]
fn a_long_root_gets_an_abstract_socket() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("a".repeat(100));
    std::fs::create_dir_all(&root).unwrap();
    let _h = deployment(&root);
    let cf = ClusterFile::load(&root).unwrap();
    assert!(
        cf.servers[0].unix.starts_with('@'),
        "{}",
        cf.servers[0].unix
    );
    let c = Client::connect(Some(&root)).unwrap();
    assert!(c.uses_unix(0).unwrap());
    small_round_trip(&c, "abstract");
}

#[test]
fn a_small_write_and_wait_is_one_message() {
    let dir = tempfile::tempdir().unwrap();
    let h = deployment(dir.path());
    let c = Client::connect(Some(dir.path())).unwrap();
    let o = object(&c, "one", 1 << 20);
    let data = vec![5u8; 4096];
    let count = |h: &ServerHandle| {
        // The server counts a request after its reply has gone out.
        std::thread::sleep(Duration::from_millis(100));
        [
            "Stage",
            "StageShm",
            "Commit",
            "CommitRelaxed",
            "StageCommit",
            "StageShmCommit",
            "ReserveWrite",
        ]
        .map(|k| requests(h, k))
    };
    let before = count(&h);
    c.write(o.id, &r(0, 4096), &data, Durability::Local)
        .unwrap();
    let mut t = Transfer::write(&c, &o, r(4096, 4096)).unwrap();
    t.load_from(&data).unwrap();
    t.start().unwrap();
    t.wait().unwrap();
    let after = count(&h);
    let sent: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    // Two writes, two messages: no separate stage or commit.
    assert_eq!(sent[..4], [0, 0, 0, 0], "{sent:?}");
    assert_eq!(sent[4] + sent[5], 2, "{sent:?}");

    // A large transfer keeps the worker path: a stage at start, a commit at wait. Here the
    // stage is a reservation: the server is on this node and a transfer past the one-message
    // size goes one-copy (tests/direct_write.rs).
    let big = vec![9u8; 200 << 10];
    let mut t = Transfer::write(&c, &o, r(1 << 19, 200 << 10)).unwrap();
    t.load_from(&big).unwrap();
    t.start().unwrap();
    t.wait().unwrap();
    let later = count(&h);
    assert_eq!(later[0] + later[1] - after[0] - after[1], 0);
    assert_eq!(later[6] - after[6], 1, "one reservation");
    assert_eq!(later[2] - after[2], 1);

    // Polling status of a started small write sends it (as a stage), so a poll loop ends;
    // wait then commits it.
    let mut t = Transfer::write(&c, &o, r(8192, 4096)).unwrap();
    t.load_from(&[6u8; 4096]).unwrap();
    t.start().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while t.status() != Status::Complete {
        assert!(
            std::time::Instant::now() < deadline,
            "status never completed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    t.wait().unwrap();
    let mut out = vec![0u8; 4096];
    c.read_into(o.id, &r(8192, 4096), &mut out).unwrap();
    assert_eq!(out, vec![6u8; 4096]);

    // Relaxed writes of an object this server owns commit as before (strong at the owner).
    c.set_consistency(o.id, Consistency::Relaxed { expected_writes: 0 });
    c.write(o.id, &r(0, 4096), &[7u8; 4096], Durability::Memory)
        .unwrap();
    c.read_into(o.id, &r(0, 4096), &mut out).unwrap();
    assert_eq!(out, vec![7u8; 4096]);
}

#[test]
fn a_small_write_that_fails_leaves_nothing_staged() {
    let dir = tempfile::tempdir().unwrap();
    let _h = deployment(dir.path());
    let c = Client::connect(Some(dir.path())).unwrap();
    let o = object(&c, "bad", 4096);
    // Out of the object's bounds as the server knows it: the stage fails.
    let stale = Transfer::for_object(&c, o.id, Dtype::UInt8, &[8192], r(4096, 4096), true);
    let mut t = stale.unwrap();
    t.load_from(&[1u8; 4096]).unwrap();
    t.start().unwrap();
    let e = t.wait().unwrap_err();
    assert!(matches!(t.status(), Status::Failed(_)), "{e}");
    // The connection goes on, and the next write commits only itself.
    c.write(o.id, &r(0, 4096), &[2u8; 4096], Durability::Memory)
        .unwrap();
    let mut out = vec![0u8; 4096];
    c.read_into(o.id, &r(0, 4096), &mut out).unwrap();
    assert_eq!(out, vec![2u8; 4096]);
}

#[test]
fn servers_on_one_node_call_each_other_over_the_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let hs: Vec<ServerHandle> = (0..2)
        .map(|r| {
            let h = Server::start(ServerConfig::new(dir.path(), r, 2)).unwrap();
            h.server.publish_rank_file().unwrap();
            h
        })
        .collect();
    pdcx_server::launch::assemble_cluster(dir.path(), 2, Duration::from_secs(30)).unwrap();
    let c = Client::connect(Some(dir.path())).unwrap();
    // An object server 1 owns, looked up through server 0 (per-node aggregation): server 0
    // forwards the lookup to server 1 on a peer connection.
    let name = (0..)
        .map(|i| format!("peer{i}"))
        .find(|n| pdcx_core::owner_of_name(n, 2) == 1)
        .unwrap();
    object(&c, &name, 16);
    c.set_local_server(0).unwrap();
    c.set_aggregation(true);
    assert!(c.uses_unix(0).unwrap() && c.uses_unix(1).unwrap());
    let before = hs[1].server.unix_connections();
    c.open_object(&name).unwrap();
    assert_eq!(
        hs[1].server.unix_connections(),
        before + 1,
        "server 0's peer connection came over the Unix socket"
    );
}
