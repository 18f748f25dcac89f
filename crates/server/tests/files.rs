//! Files over byte streams: aggregated writes become visible at close in one
//! commit, a handle reads its own unflushed writes, read-ahead serves sequential reads in
//! few round trips, and stat/list/remove/truncate/append behave like their POSIX namesakes.

mod common;
use common::{client_at, two_servers};
use pdcx_client::transport_requests_sent as sent;
use pdcx_client::{FileOptions, Prefetch};
use std::io::SeekFrom;

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// The round-trip counter is per process: tests that count run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A fresh two-server deployment at `DIR/root`, up while this lives; holding it also keeps
/// the other counting tests out.
struct Deployment {
    root: std::path::PathBuf,
    _servers: Vec<pdcx_server::ServerHandle>,
    _dir: tempfile::TempDir,
    _one: std::sync::MutexGuard<'static, ()>,
}

fn two_server_deployment() -> Deployment {
    let one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let servers = two_servers(&root);
    Deployment {
        root,
        _servers: servers,
        _dir: dir,
        _one: one,
    }
}

const AGG: FileOptions = FileOptions {
    aggregate: true,
    prefetch: Prefetch::Adaptive,
};
const NONE: FileOptions = FileOptions {
    aggregate: false,
    prefetch: Prefetch::Off,
};

#[test]
fn aggregated_writes_are_visible_at_close_and_read_whole_in_few_round_trips() {
    let dep = two_server_deployment();
    let root = &dep.root;
    let a = client_at(root, 0);
    let b = client_at(root, 1);

    // A FITS-like writer: 2880-byte blocks, then a header block rewritten at the end.
    let data = pattern(2880 * 120, 7);
    let mut w = a.file_open("proj/img_1.fits", "wb", AGG).unwrap();
    let before = sent();
    for block in data.chunks(2880) {
        w.write(block).unwrap();
    }
    w.seek(SeekFrom::Start(0)).unwrap();
    w.write(b"SIMPLE  =                    T").unwrap();
    assert_eq!(
        sent(),
        before,
        "aggregated writes made round trips before the close"
    );
    // Not visible to others yet; this write-only handle refuses reads.
    assert_eq!(b.file_stat("proj/img_1.fits").unwrap().size, 0);
    let mut head = [0u8; 6];
    assert_eq!(
        w.pread(0, &mut head).unwrap_err().kind,
        pdcx_core::ErrorKind::InvalidArgument
    );
    w.close().unwrap();
    assert!(w.write(b"x").is_err(), "a closed file took a write");

    let mut want = data.clone();
    want[..30].copy_from_slice(b"SIMPLE  =                    T");
    assert_eq!(
        b.file_stat("proj/img_1.fits").unwrap().size,
        want.len() as u64
    );

    // Read whole, in blocks: the open and one read (the first window covers the file).
    let before = sent();
    let mut r = b.file_open("proj/img_1.fits", "rb", AGG).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 2880];
    loop {
        let n = r.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, want);
    assert_eq!(r.fetches(), 1);
    assert!(sent() - before <= 3, "{} round trips", sent() - before);
    r.close().unwrap();

    // Without prefetching, every block is a round trip.
    let mut r = b.file_open("proj/img_1.fits", "r", NONE).unwrap();
    let n = r.read_full(&mut vec![0u8; want.len()]).unwrap();
    assert_eq!(n, want.len());
    let mut r = b.file_open("proj/img_1.fits", "r", NONE).unwrap();
    while r.read(&mut buf).unwrap() > 0 {}
    assert_eq!(r.fetches(), 120);
}

#[test]
fn a_large_written_file_is_committed_every_aggregate_max_bytes_and_whole_at_close() {
    let dep = two_server_deployment();
    let root = &dep.root;
    let a = client_at(root, 0);
    let b = client_at(root, 1);
    let max = pdcx_client::file::AGGREGATE_MAX;
    let data = pattern(2 * max + max / 2, 3);
    let mut w = a.file_open("big.fits", "wb", AGG).unwrap();
    for block in data.chunks(2880) {
        w.write(block).unwrap();
    }
    // Two bounds passed: what they held is committed (the buffer never grows past them).
    let seen = b.file_stat("big.fits").unwrap().size;
    assert!(
        seen >= 2 * max as u64 && seen < data.len() as u64,
        "{seen} bytes visible before the close"
    );
    w.seek(SeekFrom::Start(0)).unwrap();
    w.write(b"SIMPLE  =                    T").unwrap(); // over committed bytes: later wins
    w.close().unwrap();
    let mut want = data.clone();
    want[..30].copy_from_slice(b"SIMPLE  =                    T");
    let mut got = vec![0u8; want.len()];
    let mut r = b.file_open("big.fits", "rb", AGG).unwrap();
    assert_eq!(r.read_full(&mut got).unwrap(), want.len());
    assert!(got == want, "the file differs after the close");
}

#[test]
fn a_handle_reads_its_own_unflushed_writes_and_modes_behave() {
    let dep = two_server_deployment();
    let root = &dep.root;
    let c = client_at(root, 0);

    let mut f = c.file_open("t/a.bin", "w+b", AGG).unwrap();
    f.write(&pattern(10_000, 1)).unwrap();
    f.flush().unwrap();
    f.pwrite(5_000, b"hello").unwrap(); // unflushed, over flushed bytes
    f.pwrite(20_000, b"tail").unwrap(); // unflushed, past a hole
    assert_eq!(f.size(), 20_004);
    let mut out = vec![0u8; 20_004];
    assert_eq!(f.pread(0, &mut out).unwrap(), 20_004);
    let mut want = pattern(10_000, 1);
    want[5_000..5_005].copy_from_slice(b"hello");
    want.resize(20_000, 0);
    want.extend_from_slice(b"tail");
    assert_eq!(out, want);
    f.set_len(4).unwrap();
    assert_eq!(f.size(), 4);
    f.close().unwrap();
    assert_eq!(c.file_stat("t/a.bin").unwrap().size, 4);

    // Append writes at the end whatever the position; `w` truncates; `x` refuses an
    // existing file; `r` of a missing one fails.
    let mut f = c.file_open("t/a.bin", "a", NONE).unwrap();
    f.write(b"++").unwrap();
    f.close().unwrap();
    let mut f = c.file_open("t/a.bin", "rb", AGG).unwrap();
    let mut out = vec![0u8; 16];
    assert_eq!(f.read(&mut out).unwrap(), 6);
    assert_eq!(&out[..6], &[want[0], want[1], want[2], want[3], b'+', b'+']);
    assert!(f.write(b"no").is_err(), "a read-only file took a write");
    assert!(c.file_open("t/a.bin", "x", AGG).is_err());
    assert!(c.file_open("t/missing", "r", AGG).is_err());
    assert!(c.file_open("t/../escape", "w", AGG).is_err());
    let mut f = c.file_open("t/a.bin", "w", AGG).unwrap();
    f.close().unwrap();
    assert_eq!(c.file_stat("t/a.bin").unwrap().size, 0);

    // list by prefix, remove.
    c.file_open("t/b.bin", "w", AGG).unwrap().close().unwrap();
    c.file_open("u/c.bin", "w", AGG).unwrap().close().unwrap();
    let names: Vec<String> = c
        .file_list("t/")
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["t/a.bin", "t/b.bin"]);
    c.file_remove("t/a.bin").unwrap();
    assert!(c.file_stat("t/a.bin").is_err());
    assert_eq!(c.file_list("t/").unwrap().len(), 1);
}

/// Names whose owners (by hash) are server 0 and server 1.
fn names_on_each_server(prefix: &str) -> (String, String) {
    let mut on = [None, None];
    for i in 0.. {
        let n = format!("{prefix}{i}");
        let r = pdcx_core::model::owner_of_name(&n, 2) as usize;
        if on[r].is_none() {
            on[r] = Some(n);
        }
        if let [Some(a), Some(b)] = &on {
            return (a.clone(), b.clone());
        }
    }
    unreachable!()
}

#[test]
fn renames_move_names_across_servers() {
    let dep = two_server_deployment();
    let root = &dep.root;
    let (on0, on1) = names_on_each_server("r/f");
    let data = pattern(100_000, 3);
    let (id, c) = {
        let c = client_at(root, 0);
        let mut f = c.file_open(&on0, "wb", AGG).unwrap();
        f.write(&data).unwrap();
        f.close().unwrap();
        let id = c
            .file_stat(&on0)
            .map(|_| c.open_object(&on0).unwrap().id)
            .unwrap();

        // To a name another server answers for: a link there; the old name is gone.
        c.file_rename(&on0, &on1).unwrap();
        assert!(c.open_object(&on0).is_err());
        let m = c.open_object(&on1).unwrap();
        assert_eq!((m.id, m.name.as_str()), (id, on1.as_str()));
        let mut r = c.file_open(&on1, "rb", NONE).unwrap();
        let mut back = vec![0u8; data.len()];
        assert_eq!(r.read_full(&mut back).unwrap(), data.len());
        assert_eq!(back, data);
        let names: Vec<String> = c
            .file_list("r/")
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, std::slice::from_ref(&on1));
        // Through the other server's relay too.
        let other = client_at(root, 1);
        assert_eq!(other.open_object(&on1).unwrap().id, id);

        // A name that is taken is refused; a file there is replaced by file_rename.
        c.file_open("r/other", "wb", AGG).unwrap().close().unwrap();
        let other_id = c.open_object("r/other").unwrap().id;
        assert_eq!(
            c.rename_object(id, "r/other").unwrap_err().kind,
            pdcx_core::ErrorKind::AlreadyExists
        );
        c.file_rename(&on1, "r/other").unwrap();
        assert_eq!(c.open_object("r/other").unwrap().id, id);
        assert!(c.get_object(other_id).is_err(), "the replaced file is gone");
        assert!(c.open_object(&on1).is_err());
        c.rename_object(id, &on1).unwrap();
        (id, c)
    };
    // (That links survive a restart is tests/test_files.py's: real server processes.)
    // Deleting the object frees its name, link and all: the name can be created again.
    c.file_remove(&on1).unwrap();
    assert!(c.open_object(&on1).is_err());
    c.file_open(&on1, "wb", AGG).unwrap().close().unwrap();
    assert_ne!(c.open_object(&on1).unwrap().id, id);
}

#[test]
fn flush_all_commits_many_files_at_one_consistency_point() {
    let dep = two_server_deployment();
    let root = &dep.root;
    let a = client_at(root, 0);
    let b = client_at(root, 1);
    let mut files: Vec<pdcx_client::File> = (0..10)
        .map(|i| {
            let mut f = a.file_open(&format!("batch/f{i}"), "wb", AGG).unwrap();
            for block in pattern(2880 * 4, i as u8).chunks(2880) {
                f.write(block).unwrap();
            }
            f
        })
        .collect();
    assert_eq!(
        b.file_stat("batch/f3").unwrap().size,
        0,
        "visible before the flush"
    );
    let before = sent();
    let mut refs: Vec<&mut pdcx_client::File> = files.iter_mut().collect();
    pdcx_client::flush_all(&mut refs).unwrap();
    let trips = sent() - before;
    // One grow per file (at its owner) and one commit per server, not a write and a commit
    // per file (30 here).
    assert!(trips <= 10 + 2 + 2, "{trips} round trips");
    for (i, f) in files.iter_mut().enumerate() {
        f.close().unwrap();
        let mut r = b.file_open(&format!("batch/f{i}"), "rb", NONE).unwrap();
        let mut got = vec![0u8; 2880 * 4];
        assert_eq!(r.read_full(&mut got).unwrap(), got.len());
        assert_eq!(got, pattern(2880 * 4, i as u8), "file {i}");
    }
}
