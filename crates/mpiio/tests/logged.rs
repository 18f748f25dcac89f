//! An unmodified MPI-IO program under the preload, against two real servers: every byte it
//! writes under the prefix lands in the byte stream `mpiio/NAME` (and, written through, in the
//! file at its path), the sealed version reaches `HOME/NAME` byte-identical to a direct run, and every
//! setup that cannot log falls back with exactly one line and writes the file to its home.

mod common;

use common::*;
use pdcx_client::Client;
use pdcx_server::{Server, ServerConfig, ServerHandle};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
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

struct Setup {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    root: PathBuf,
    prefix: PathBuf,
    home: PathBuf,
    prog: PathBuf,
    lib: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_path_buf();
        let s = Setup {
            root: dir.join("root"),
            prefix: dir.join("prefix"),
            home: dir.join("home"),
            prog: compile("writer", &dir, true),
            lib: lib(),
            dir,
            _dir: d,
        };
        std::fs::create_dir_all(s.prefix.join("sub")).unwrap();
        s
    }

    fn env<'a>(&'a self, root: &'a Path, mode: &'a str) -> Vec<(&'static str, &'a OsStr)> {
        vec![
            ("LD_PRELOAD", self.lib.as_os_str()),
            ("PDCX_MPIIO_PREFIX", self.prefix.as_os_str()),
            ("PDCX_MPIIO_HOME", self.home.as_os_str()),
            ("PDCX_ROOT", root.as_os_str()),
            ("PDCX_MPIIO_MODE", OsStr::new(mode)),
        ]
    }

    /// The direct run's file and output.
    fn direct(&self, io: &str) -> (Vec<u8>, Vec<String>) {
        let f = self.dir.join(format!("direct.{io}"));
        let o = mpirun(2, io, &[], &self.prog, &[f.as_os_str()]);
        (std::fs::read(&f).unwrap(), sorted_lines(&o))
    }
}

/// Waits until `path` holds exactly `want` (the home copy is written in the background).
fn wait_for_file(path: &Path, want: &[u8]) {
    let t0 = Instant::now();
    loop {
        match std::fs::read(path) {
            Ok(b) if b == want => return,
            r => assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{} never became the direct run's {} bytes (now: {:?} bytes)",
                path.display(),
                want.len(),
                r.map(|b| b.len())
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn stream_bytes(c: &Client, name: &str) -> Vec<u8> {
    let bs = c.bs_open(name, false).unwrap();
    let mut out = vec![0u8; bs.size().unwrap() as usize];
    let n = bs.pread(0, &mut out).unwrap();
    out.truncate(n);
    out
}

#[test]
fn writes_under_the_prefix_go_to_the_stream_and_reach_the_home() {
    if !have_mpi("writes_under_the_prefix_go_to_the_stream_and_reach_the_home") {
        return;
    }
    let s = Setup::new();
    let _servers = two_servers(&s.root);
    let c = Client::connect(Some(&s.root)).unwrap();
    for io in ["ompio", "romio321"] {
        let (want, want_out) = s.direct(io);
        let f = s.prefix.join(format!("sub/f.{io}"));
        let o = mpirun(2, io, &s.env(&s.root, "log"), &s.prog, &[f.as_os_str()]);
        // The program read back what it wrote (from the stream).
        assert_eq!(sorted_lines(&o), want_out, "{io}");
        assert_eq!(our_lines(&o), Vec::<String>::new(), "{io}");
        assert!(
            std::fs::read(&f).unwrap() == want,
            "{io}: the file at its path"
        );
        let name = format!("mpiio/sub/f.{io}");
        assert!(stream_bytes(&c, &name) == want, "{io}: stream differs");
        // Sealed at each sync and at close; the last version is the whole file.
        let v = c.bs_open(&name, false).unwrap().versions().unwrap();
        assert!(v.len() >= 2, "{io}: {v:?}");
        wait_for_file(&s.home.join(format!("sub/f.{io}")), &want);
    }
}

#[test]
fn reruns_start_from_the_last_version_or_empty_without_a_placeholder() {
    if !have_mpi("reruns_start_from_the_last_version_or_empty_without_a_placeholder") {
        return;
    }
    let s = Setup::new();
    let _servers = two_servers(&s.root);
    let c = Client::connect(Some(&s.root)).unwrap();
    let (want, _) = s.direct("ompio");
    // An older, longer stream of the same name, with no placeholder: the new file must not
    // show its bytes.
    let bs = c.bs_open("mpiio/again", true).unwrap();
    bs.pwrite(0, &vec![7u8; want.len() + 5000]).unwrap();
    bs.commit().unwrap();
    let f = s.prefix.join("again");
    for _ in 0..2 {
        // Without MPI_File_set_size(0): only the library can empty the stream.
        let args = [f.as_os_str(), OsStr::new("nosetsize")];
        let o = mpirun(2, "ompio", &s.env(&s.root, "log"), &s.prog, &args);
        assert_eq!(our_lines(&o), Vec::<String>::new());
        assert!(stream_bytes(&c, "mpiio/again") == want);
    }
    // A run that crashed after writing past the end, before its consistency point: the next
    // run (placeholder present) starts from the last sealed version, not from those bytes.
    let bs = c.bs_open("mpiio/again", false).unwrap();
    bs.pwrite(want.len() as u64, b"crashed run").unwrap();
    bs.commit().unwrap();
    let args = [f.as_os_str(), OsStr::new("nosetsize")];
    mpirun(2, "ompio", &s.env(&s.root, "log"), &s.prog, &args);
    assert!(stream_bytes(&c, "mpiio/again") == want);
    wait_for_file(&s.home.join("again"), &want);
}

/// Every POSIX wrapper against the kernel: a program does pwrite, write/lseek, writev, dup
/// (shared offset), fstat, SEEK_END, pwritev, ftruncate, short reads, read/readv/preadv,
/// F_DUPFD, dup2, fsync and a write past a hole on the MPI library's own fd; the logged run
/// prints what the direct run prints and leaves the same bytes.
#[test]
fn posix_calls_on_the_mpi_fd_match_the_kernel() {
    if !have_mpi("posix_calls_on_the_mpi_fd_match_the_kernel") {
        return;
    }
    let s = Setup::new();
    let _servers = two_servers(&s.root);
    let c = Client::connect(Some(&s.root)).unwrap();
    let prog = compile("posix", &s.dir, true);
    for io in ["ompio", "romio321"] {
        let direct = s.dir.join(format!("direct-posix.{io}"));
        let plain = mpirun(1, io, &[], &prog, &[direct.as_os_str()]);
        let want = std::fs::read(&direct).unwrap();
        assert_eq!(want.len(), 1003);
        assert_eq!(&want[300..304], b"late");
        let f = s.prefix.join(format!("posix.{io}"));
        let o = mpirun(1, io, &s.env(&s.root, "log"), &prog, &[f.as_os_str()]);
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&plain.stdout),
            "{io}"
        );
        assert_eq!(our_lines(&o), Vec::<String>::new(), "{io}");
        assert!(
            std::fs::read(&f).unwrap() == want,
            "{io}: the file at its path"
        );
        assert!(
            stream_bytes(&c, &format!("mpiio/posix.{io}")) == want,
            "{io}"
        );
        wait_for_file(&s.home.join(format!("posix.{io}")), &want);
    }
}

/// Shared file pointers (`MPI_File_write_ordered`, `write_shared`): OMPIO keeps the pointer
/// in shared memory, ROMIO in a hidden file beside ours; both pass through, and the data
/// writes land in the stream. The ordered part is deterministic, the shared lines' order not.
#[test]
fn shared_file_pointers() {
    if !have_mpi("shared_file_pointers") {
        return;
    }
    let s = Setup::new();
    let _servers = two_servers(&s.root);
    let c = Client::connect(Some(&s.root)).unwrap();
    let prog = compile("ordered", &s.dir, true);
    let lines = |b: &[u8]| {
        let t = String::from_utf8_lossy(b).to_string();
        let (ordered, shared) = t.split_at(t.find("shared").expect("shared lines"));
        let mut shared: Vec<String> = shared.lines().map(str::to_string).collect();
        shared.sort();
        (ordered.to_string(), shared)
    };
    for io in ["ompio", "romio321"] {
        let direct = s.dir.join(format!("direct-ordered.{io}"));
        mpirun(2, io, &[], &prog, &[direct.as_os_str()]);
        let want = std::fs::read(&direct).unwrap();
        let f = s.prefix.join(format!("ordered.{io}"));
        let o = mpirun(2, io, &s.env(&s.root, "log"), &prog, &[f.as_os_str()]);
        assert_eq!(our_lines(&o), Vec::<String>::new(), "{io}");
        let got = stream_bytes(&c, &format!("mpiio/ordered.{io}"));
        assert_eq!(got.len(), want.len(), "{io}");
        assert_eq!(lines(&got), lines(&want), "{io}");
        // Written through: the same bytes as the stream (both in this run's order).
        assert!(
            std::fs::read(&f).unwrap() == got,
            "{io}: the file at its path"
        );
    }
}

/// One file per process (`MPI_COMM_SELF`): every rank is rank 0 of its own file.
#[test]
fn one_file_per_process() {
    if !have_mpi("one_file_per_process") {
        return;
    }
    let s = Setup::new();
    let _servers = two_servers(&s.root);
    let c = Client::connect(Some(&s.root)).unwrap();
    for io in ["ompio", "romio321"] {
        let direct = s.dir.join(format!("direct-self.{io}"));
        let plain = mpirun(
            2,
            io,
            &[],
            &s.prog,
            &[direct.as_os_str(), OsStr::new("self")],
        );
        let f = s.prefix.join(format!("p.{io}"));
        let o = mpirun(
            2,
            io,
            &s.env(&s.root, "log"),
            &s.prog,
            &[f.as_os_str(), OsStr::new("self")],
        );
        assert_eq!(sorted_lines(&o), sorted_lines(&plain), "{io}");
        assert_eq!(our_lines(&o), Vec::<String>::new(), "{io}");
        for r in 0..2 {
            let want = std::fs::read(format!("{}.{r}", direct.display())).unwrap();
            assert!(
                stream_bytes(&c, &format!("mpiio/p.{io}.{r}")) == want,
                "{io} {r}"
            );
            wait_for_file(&s.home.join(format!("p.{io}.{r}")), &want);
        }
    }
}

/// Parallel HDF5 (collective hyperslab writes, an attribute, `H5Fflush` = `MPI_File_sync`,
/// the superblock rewritten at close): the home file is byte-identical to a direct run, also
/// when the file is created again over a longer stream (`H5F_ACC_TRUNC`).
#[test]
fn parallel_hdf5_files_come_out_byte_identical() {
    if !have_phdf5("parallel_hdf5_files_come_out_byte_identical") {
        return;
    }
    let s = Setup::new();
    let _servers = two_servers(&s.root);
    let c = Client::connect(Some(&s.root)).unwrap();
    let prog = compile_with("h5pcc", "phdf5", &s.dir);
    for io in ["ompio", "romio321"] {
        let direct = s.dir.join(format!("direct.{io}.h5"));
        mpirun(2, io, &[], &prog, &[direct.as_os_str()]);
        let want = std::fs::read(&direct).unwrap();
        let f = s.prefix.join(format!("h.{io}.h5"));
        let name = format!("mpiio/h.{io}.h5");
        // The second run truncates a stream that holds a longer file.
        c.bs_open(&name, true)
            .unwrap()
            .pwrite(0, &vec![1u8; want.len() * 2])
            .unwrap();
        std::fs::write(&f, b"").unwrap();
        for _ in 0..2 {
            let o = mpirun(2, io, &s.env(&s.root, "log"), &prog, &[f.as_os_str()]);
            assert_eq!(our_lines(&o), Vec::<String>::new(), "{io}");
            let got = stream_bytes(&c, &name);
            let first = got.iter().zip(&want).position(|(a, b)| a != b);
            assert!(
                got == want,
                "{io}: stream differs: {} vs {} bytes, first difference at {first:?}",
                got.len(),
                want.len()
            );
        }
        wait_for_file(&s.home.join(format!("h.{io}.h5")), &want);
    }
}

/// Non-blocking MPI-IO: OMPIO does `MPI_File_iwrite_at`/`iread_at` with POSIX AIO, which
/// glibc runs in its own threads with calls no preload sees; the aio wrappers must catch them
/// (else the bytes land only in the file at its path and the stream and home are empty).
#[test]
fn non_blocking_writes_and_reads_are_logged() {
    if !have_mpi("non_blocking_writes_and_reads_are_logged") {
        return;
    }
    let s = Setup::new();
    let _servers = two_servers(&s.root);
    let c = Client::connect(Some(&s.root)).unwrap();
    let prog = compile("iwriter", &s.dir, true);
    for io in ["ompio", "romio321"] {
        let direct = s.dir.join(format!("direct.{io}"));
        let plain = mpirun(2, io, &[], &prog, &[direct.as_os_str()]);
        let want = std::fs::read(&direct).unwrap();
        let f = s.prefix.join(format!("i.{io}"));
        let o = mpirun(2, io, &s.env(&s.root, "log"), &prog, &[f.as_os_str()]);
        assert_eq!(sorted_lines(&o), sorted_lines(&plain), "{io}");
        assert_eq!(our_lines(&o), Vec::<String>::new(), "{io}");
        assert!(
            std::fs::read(&f).unwrap() == want,
            "{io}: the file at its path"
        );
        assert!(
            stream_bytes(&c, &format!("mpiio/i.{io}")) == want,
            "{io}: stream differs"
        );
        wait_for_file(&s.home.join(format!("i.{io}")), &want);
    }
}

/// `MPI_File_delete` of a logged file removes its stream, the placeholder and, once it has
/// been copied, the home copy: the file is gone everywhere, as on a file system.
#[test]
fn delete_removes_the_stream_and_the_home_copy() {
    if !have_mpi("delete_removes_the_stream_and_the_home_copy") {
        return;
    }
    let s = Setup::new();
    let _servers = two_servers(&s.root);
    let c = Client::connect(Some(&s.root)).unwrap();
    let prog = compile("deleter", &s.dir, true);
    let f = s.prefix.join("gone");
    let o = mpirun(2, "ompio", &s.env(&s.root, "log"), &prog, &[f.as_os_str()]);
    assert_eq!(sorted_lines(&o), ["delete: 0"]);
    assert_eq!(our_lines(&o), Vec::<String>::new());
    assert!(!f.exists());
    let e = c
        .bs_open("mpiio/gone", false)
        .err()
        .expect("stream removed");
    assert_eq!(e.kind, pdcx_core::ErrorKind::NotFound, "{e}");
    // The delete waited for the home copy of the sealed version before removing both, so no
    // copy can arrive later.
    assert!(
        !s.home.join("gone").exists(),
        "the home copy outlived the delete"
    );
}

#[test]
fn setups_that_cannot_log_fall_back_to_the_home_with_one_line() {
    if !have_mpi("setups_that_cannot_log_fall_back_to_the_home_with_one_line") {
        return;
    }
    let s = Setup::new();
    let (want, want_out) = s.direct("romio321");
    let nowhere = s.dir.join("no-deployment");
    let cases: [(&str, &Path, Option<&str>, &str); 2] = [
        ("noserver", &nowhere, None, "no pdcx server reachable"),
        (
            "append",
            &nowhere,
            Some("append"),
            "MPI_MODE_APPEND is not supported",
        ),
    ];
    for (name, root, arg, reason) in cases {
        let f = s.prefix.join(name);
        let mut args = vec![f.as_os_str()];
        args.extend(arg.map(OsStr::new));
        for io in ["ompio", "romio321"] {
            let home = s.home.join(name);
            let _ = std::fs::remove_file(&home);
            let o = mpirun(2, io, &s.env(root, "log"), &s.prog, &args);
            let lines = our_lines(&o);
            assert_eq!(lines.len(), 1, "{name} {io}: {lines:?}");
            assert!(lines[0].contains(reason), "{name} {io}: {lines:?}");
            assert!(
                lines[0].ends_with(&format!(
                    "writing {} directly to {}",
                    f.display(),
                    home.display()
                )),
                "{name} {io}: {lines:?}"
            );
            // Never both paths: the file is only at its home.
            assert!(!f.exists(), "{name} {io}");
            assert_eq!(std::fs::read(&home).unwrap(), want, "{name} {io}");
            assert_eq!(sorted_lines(&o), want_out, "{name} {io}");
        }
    }
    // Redirect (asked for; `pdcx run` prints the job's one line when it chooses it): silent,
    // writes the home, and reads come back from there.
    for io in ["ompio", "romio321"] {
        let f = s.prefix.join("redirect");
        let home = s.home.join("redirect");
        let _ = std::fs::remove_file(&home);
        let o = mpirun(
            2,
            io,
            &s.env(&nowhere, "redirect"),
            &s.prog,
            &[f.as_os_str()],
        );
        assert_eq!(our_lines(&o), Vec::<String>::new(), "redirect {io}");
        assert!(!f.exists(), "redirect {io}");
        assert_eq!(std::fs::read(&home).unwrap(), want, "redirect {io}");
        assert_eq!(sorted_lines(&o), want_out, "redirect {io}");
    }
}

/// ROMIO truncates on rank 0 only; the other ranks' handles still believe the old size and
/// must still be able to write (the client grows the stream again and retries), for large
/// (committed at once) and small (queued) writes alike.
#[test]
fn a_writer_whose_size_is_stale_after_another_truncated_still_writes() {
    let d = tempfile::tempdir().unwrap();
    let _servers = two_servers(d.path());
    let c = Client::connect(Some(d.path())).unwrap();
    let a = c.bs_open("mpiio/t", true).unwrap();
    a.pwrite(0, &vec![1u8; 1 << 20]).unwrap();
    a.commit().unwrap();
    let b = c.bs_open("mpiio/t", false).unwrap();
    a.set_size(0).unwrap();
    b.pwrite(1000, &vec![2u8; 300 << 10]).unwrap();
    b.pwrite(500_000, b"small").unwrap();
    b.commit().unwrap();
    assert_eq!(a.size().unwrap(), 500_005);
    let mut got = vec![0u8; 5];
    assert_eq!(b.pread(500_000, &mut got).unwrap(), 5);
    assert_eq!(&got, b"small");
}

/// The servers go away between the program's writes and its consistency point: `MPI_File_sync`
/// and `MPI_File_close` return `MPI_ERR_IO` on every rank, with lines on stderr, and nothing
/// hangs (never a silent success).
#[test]
fn a_lost_server_makes_sync_and_close_fail_loudly() {
    if !have_mpi("a_lost_server_makes_sync_and_close_fail_loudly") {
        return;
    }
    let s = Setup::new();
    let servers = two_servers(&s.root);
    let prog = compile("syncfail", &s.dir, true);
    let f = s.prefix.join("lost");
    let lib = s.lib.clone();
    let (prefix, home, root) = (s.prefix.clone(), s.home.clone(), s.root.clone());
    let (prog2, f2) = (prog.clone(), f.clone());
    let run = std::thread::spawn(move || {
        let env = [
            ("LD_PRELOAD", lib.as_os_str()),
            ("PDCX_MPIIO_PREFIX", prefix.as_os_str()),
            ("PDCX_MPIIO_HOME", home.as_os_str()),
            ("PDCX_ROOT", root.as_os_str()),
        ];
        let mut a: Vec<std::ffi::OsString> = ["--allow-run-as-root", "--oversubscribe", "-n", "2"]
            .iter()
            .map(|x| x.into())
            .collect();
        for (k, v) in env {
            let mut kv = std::ffi::OsString::from(format!("{k}="));
            kv.push(v);
            a.push("-x".into());
            a.push(kv);
        }
        a.push(prog2.into());
        a.push(f2.into());
        std::process::Command::new("timeout")
            .arg("120")
            .arg("mpirun")
            .args(a)
            .output()
            .unwrap()
    });
    let ready = PathBuf::from(format!("{}.ready", f.display()));
    let t0 = Instant::now();
    while !ready.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the program never got ready"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for h in servers {
        h.shutdown().unwrap();
    }
    std::fs::write(format!("{}.go", f.display()), b"").unwrap();
    let o = run.join().unwrap();
    let out = sorted_lines(&o);
    assert_eq!(
        out,
        [
            "rank 0 sync MPI_ERR_IO close MPI_ERR_IO",
            "rank 1 sync MPI_ERR_IO close MPI_ERR_IO"
        ],
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!our_lines(&o).is_empty());
}

/// Two handles shrinking one stream at once (OMPIO's `MPI_File_set_size` truncates on every
/// rank): the owner takes both (size changes are serialised there).
#[test]
fn concurrent_shrinks_of_one_stream_both_succeed() {
    let d = tempfile::tempdir().unwrap();
    let _servers = two_servers(d.path());
    let c = Client::connect(Some(d.path())).unwrap();
    let c2 = Client::connect(Some(d.path())).unwrap();
    for i in 0..20 {
        let name = format!("mpiio/shrink{i}");
        let a = c.bs_open(&name, true).unwrap();
        a.pwrite(0, &vec![1u8; 4 << 20]).unwrap();
        a.commit().unwrap();
        // Another process: its own client (connections).
        let b = c2.bs_open(&name, false).unwrap();
        let t = std::thread::spawn(move || b.set_size(0));
        let ra = a.set_size(0);
        let rb = t.join().unwrap();
        assert!(ra.is_ok() && rb.is_ok(), "round {i}: {ra:?} / {rb:?}");
    }
}
