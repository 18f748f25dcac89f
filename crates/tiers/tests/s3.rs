//! The S3 tier against a real S3 server.
//!
//! Which server: `PDCX_TEST_S3_ENDPOINT`, `PDCX_TEST_S3_BUCKET`, `PDCX_TEST_S3_ACCESS_KEY_ID`
//! and `PDCX_TEST_S3_SECRET_ACCESS_KEY` name one that is already running; otherwise each test
//! starts its own versitygw (`scripts/s3server.sh start`: 127.0.0.1, random port, fresh
//! credentials, temporary directory) and kills it by PID when it ends. With neither, the tests
//! pass without checking anything and say so on stderr, unless `PDCX_REQUIRE_S3=1` (set by
//! scripts/test.sh, i.e. CI), where a missing server fails them.

use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjPath;
use object_store::{ClientOptions, ObjectStoreExt};
use pdcx_tiers::s3::S3Tier;
use pdcx_tiers::{conformance, ErrorKind, Tier, TierConfig, TierKind};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

struct Server {
    endpoint: String,
    bucket: String,
    access: String,
    secret: String,
    /// Set when this test started the server.
    owned: Option<Owned>,
}

struct Owned {
    pid: i32,
    /// Set when the server is this process's child (after [`restart`]), so it can be reaped.
    child: Option<std::process::Child>,
    dir: tempfile::TempDir,
}

impl Owned {
    fn kill(&mut self) {
        match &mut self.child {
            Some(c) => {
                let _ = c.kill();
                let _ = c.wait();
            }
            None => kill(self.pid),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(o) = &mut self.owned {
            o.kill();
        }
    }
}

/// SIGKILL to a server started through s3server.sh (not our child: the script backgrounds it
/// in its own session and exits), then waits until it is gone.
fn kill(pid: i32) {
    // SAFETY: plain kill(2) on the PID of the server this test started.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let t0 = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn server_binary() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("VERSITYGW").map(PathBuf::from),
        Some(PathBuf::from("/usr/local/bin/versitygw")),
    ];
    candidates.into_iter().flatten().find(|p| p.is_file())
}

/// An S3 server for one test, or `None` (after saying why) if there is none and none is
/// required.
fn server() -> Option<Server> {
    if let Ok(endpoint) = std::env::var("PDCX_TEST_S3_ENDPOINT") {
        let var = |k: &str| {
            std::env::var(k)
                .unwrap_or_else(|_| panic!("PDCX_TEST_S3_ENDPOINT is set but {k} is not"))
        };
        return Some(Server {
            endpoint,
            bucket: var("PDCX_TEST_S3_BUCKET"),
            access: var("PDCX_TEST_S3_ACCESS_KEY_ID"),
            secret: var("PDCX_TEST_S3_SECRET_ACCESS_KEY"),
            owned: None,
        });
    }
    if server_binary().is_none() {
        let why = "no S3 server: set PDCX_TEST_S3_ENDPOINT (and _BUCKET, _ACCESS_KEY_ID, \
                   _SECRET_ACCESS_KEY) or run `scripts/s3server.sh install`";
        if std::env::var("PDCX_REQUIRE_S3").as_deref() == Ok("1") {
            panic!("PDCX_REQUIRE_S3=1 but {why}");
        }
        eprintln!("SKIPPED (nothing checked): {why}");
        return None;
    }
    Some(start_server())
}

/// Starts a private versitygw through scripts/s3server.sh.
fn start_server() -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("scripts/s3server.sh"))
        .arg("start")
        .arg(dir.path());
    if let Some(bin) = server_binary() {
        cmd.env("VERSITYGW", bin);
    }
    let out = cmd.output().expect("running scripts/s3server.sh");
    assert!(
        out.status.success(),
        "s3server.sh start failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let vars: HashMap<String, String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let get = |k: &str| {
        vars.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("s3server.sh printed no {k}"))
    };
    let pid: i32 = std::fs::read_to_string(get("PDCX_TEST_S3_PIDFILE"))
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    Server {
        endpoint: get("PDCX_TEST_S3_ENDPOINT"),
        bucket: get("PDCX_TEST_S3_BUCKET"),
        access: get("PDCX_TEST_S3_ACCESS_KEY_ID"),
        secret: get("PDCX_TEST_S3_SECRET_ACCESS_KEY"),
        owned: Some(Owned {
            pid,
            child: None,
            dir,
        }),
    }
}

/// A prefix no other test (or earlier run against a shared server) uses.
fn unique_prefix(what: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "test-{what}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

impl Server {
    fn config(&self, what: &str) -> TierConfig {
        TierConfig {
            name: "s3".into(),
            kind: TierKind::S3,
            endpoint: Some(self.endpoint.clone()),
            bucket: Some(self.bucket.clone()),
            prefix: Some(unique_prefix(what)),
            timeout_ms: Some(2_000),
            ..Default::default()
        }
    }

    fn open(&self, cfg: &TierConfig) -> pdcx_tiers::Result<S3Tier> {
        self.open_as(cfg, &self.access, &self.secret)
    }

    fn open_as(&self, cfg: &TierConfig, access: &str, secret: &str) -> pdcx_tiers::Result<S3Tier> {
        let (access, secret) = (access.to_string(), secret.to_string());
        S3Tier::open_with_env(cfg, &move |k| match k {
            "AWS_ACCESS_KEY_ID" => Some(access.clone()),
            "AWS_SECRET_ACCESS_KEY" => Some(secret.clone()),
            _ => None,
        })
    }

    /// A plain object_store client on the same bucket, to look behind the tier's back.
    fn raw(&self) -> object_store::aws::AmazonS3 {
        AmazonS3Builder::new()
            .with_endpoint(&self.endpoint)
            .with_bucket_name(&self.bucket)
            .with_region("us-east-1")
            .with_access_key_id(&self.access)
            .with_secret_access_key(&self.secret)
            .with_virtual_hosted_style_request(false)
            .with_client_options(ClientOptions::new().with_allow_http(true))
            .build()
            .expect("raw client")
    }
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    // Not periodic at any power of two, so a part in the wrong place cannot compare equal.
    (0..n as u64)
        .map(|i| ((i.wrapping_mul(2_654_435_761) >> 7) as u32 ^ seed) as u8)
        .collect()
}

#[test]
fn conformance_suite() {
    let Some(srv) = server() else { return };
    let t = srv.open(&srv.config("conformance")).expect("open");
    conformance::check(&t);
    assert_eq!(t.used(), 0, "everything the suite wrote was deleted");
    // The open through pdcx_tiers::open (the path the server takes) reads the process
    // environment for credentials; it must fail clearly when they are absent, not hang.
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        let err = pdcx_tiers::open(&srv.config("open"))
            .err()
            .expect("no credentials");
        assert_eq!(err.kind, ErrorKind::Auth, "{err}");
    }
}

#[test]
fn multipart_upload_and_ranged_reads() {
    let Some(srv) = server() else { return };
    let mut cfg = srv.config("multipart");
    cfg.part_size = Some(5 << 20);
    cfg.concurrency = Some(4);
    let t = srv.open(&cfg).expect("open");
    let n = (21 << 20) + 12_345; // 5 parts: four of 5 MiB and a tail
    let data = pattern(n, 7);
    t.put("obj/big", &data).expect("multipart put");
    assert_eq!(t.len("obj/big").unwrap(), n as u64);
    assert_eq!(t.used(), n as u64);

    // It really was a multipart upload: S3 ETags of multipart objects end in "-<parts>".
    let path = ObjPath::from(format!("{}/obj/big", cfg.prefix.as_ref().unwrap()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let meta = rt.block_on(srv.raw().head(&path)).expect("raw head");
    let etag = meta.e_tag.unwrap_or_default();
    assert!(etag.trim_matches('"').ends_with("-5"), "etag {etag:?}");

    assert!(t.get("obj/big").unwrap() == data, "whole blob differs");
    // Ranges inside a part, across part boundaries, at the very end.
    for (off, len) in [
        (0usize, 1usize),
        (1 << 20, 1 << 20),
        ((5 << 20) - 100, 200),
        ((10 << 20) - 1, (5 << 20) + 2),
        (n - 10, 10),
        (n - 1, 1),
    ] {
        let mut out = vec![0u8; len];
        t.get_range("obj/big", off as u64, &mut out).expect("range");
        assert!(out == data[off..off + len], "range {off}+{len}");
    }
    for (off, len) in [
        (n - 10, 11),
        (n, 1),
        (n + 1_000, 5),
        (u64::MAX as usize - 2, 5),
    ] {
        let mut out = vec![0u8; len];
        let err = t
            .get_range("obj/big", off as u64, &mut out)
            .expect_err("past the end");
        assert_eq!(err.kind, ErrorKind::OutOfBounds, "{off}+{len}: {err}");
    }
    t.get_range("obj/big", n as u64, &mut [])
        .expect("empty range at the end");

    // Replacing a multipart blob with a small one keeps the accounting right.
    t.put("obj/big", b"small now").unwrap();
    assert_eq!(t.used(), 9);
    assert_eq!(t.get("obj/big").unwrap(), b"small now");
    t.delete("obj/big").unwrap();
    assert_eq!(t.used(), 0);
}

#[test]
fn capacity_is_enforced_and_counted_again_at_open() {
    let Some(srv) = server() else { return };
    let mut cfg = srv.config("capacity");
    cfg.capacity = Some(10 << 20);
    let t = srv.open(&cfg).expect("open");
    t.put("a", &pattern(6 << 20, 1)).unwrap();
    let err = t.put("b", &pattern(6 << 20, 2)).expect_err("over capacity");
    assert_eq!(err.kind, ErrorKind::NoSpace, "{err}");
    t.put("a", &pattern(9 << 20, 3))
        .expect("replacing counts only the difference");
    assert_eq!(t.used(), 9 << 20);
    drop(t);
    let t = srv.open(&cfg).expect("reopen");
    assert_eq!(t.used(), 9 << 20, "reopen lists what is there");
    t.delete("a").unwrap();
    t.put("b", &pattern(10 << 20, 4)).expect("space was freed");
    t.delete("b").unwrap();
}

#[test]
fn bad_credentials_are_an_auth_error() {
    let Some(srv) = server() else { return };
    let cfg = srv.config("auth");
    let t0 = Instant::now();
    let err = srv
        .open_as(&cfg, &srv.access, "not-the-secret")
        .err()
        .expect("wrong secret");
    assert_eq!(err.kind, ErrorKind::Auth, "{err}");
    assert!(err.message.contains(&srv.endpoint), "{}", err.message);
    assert!(
        err.message.contains("AWS_SECRET_ACCESS_KEY"),
        "{}",
        err.message
    );
    let err = srv
        .open_as(&cfg, "nobody", "nothing")
        .err()
        .expect("unknown key id");
    assert_eq!(err.kind, ErrorKind::Auth, "{err}");
    assert!(err.message.contains("AWS_ACCESS_KEY_ID"), "{}", err.message);
    // A refusal is not retried into a timeout.
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

#[test]
fn missing_bucket_says_so() {
    let Some(srv) = server() else { return };
    let mut cfg = srv.config("nobucket");
    cfg.bucket = Some(format!("no-such-bucket-{}", std::process::id()));
    let err = srv.open(&cfg).err().expect("no bucket");
    assert_eq!(err.kind, ErrorKind::NotFound, "{err}");
    assert!(err.message.contains("does not exist"), "{}", err.message);
}

#[test]
fn endpoint_that_is_down_is_unavailable_within_seconds() {
    let Some(srv) = server() else { return };
    // Nothing listens on a port we just had and closed.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut cfg = srv.config("down");
    cfg.endpoint = Some(format!("http://127.0.0.1:{port}"));
    let t0 = Instant::now();
    let err = srv.open(&cfg).err().expect("nothing listens");
    assert_eq!(err.kind, ErrorKind::Unavailable, "{err}");
    assert!(
        err.message
            .contains(&format!("S3 endpoint http://127.0.0.1:{port} unreachable")),
        "{}",
        err.message
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());

    // A server that dies under an open tier: every call fails fast with Unavailable.
    if srv.owned.is_none() {
        return; // someone else's server: not ours to kill
    }
    let mine = start_server();
    let t = mine.open(&mine.config("dies")).expect("open");
    t.put("x", b"before").unwrap();
    let mut mine = mine;
    mine.owned.as_mut().unwrap().kill();
    type Op<'a> = Box<dyn Fn() -> pdcx_tiers::Result<()> + 'a>;
    let ops: [(&str, Op); 4] = [
        ("put", Box::new(|| t.put("y", b"after"))),
        (
            "put multipart",
            Box::new(|| t.put("z", &vec![1u8; 9 << 20])),
        ),
        ("get", Box::new(|| t.get("x").map(drop))),
        ("len", Box::new(|| t.len("x").map(drop))),
    ];
    for (what, op) in ops {
        let t0 = Instant::now();
        let err = op().expect_err(what);
        eprintln!("{what} after the server died: {:?}: {err}", t0.elapsed());
        assert_eq!(err.kind, ErrorKind::Unavailable, "{what}: {err}");
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{what} took {:?}",
            t0.elapsed()
        );
    }
}

/// Restarts the server of `srv` (same binary, port, credentials and data) after SIGKILL.
fn restart(srv: &mut Server) {
    let mut old = srv.owned.take().expect("our own server");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", old.pid)).expect("server cmdline");
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    old.kill();
    let log = std::fs::File::create(old.dir.path().join("versitygw-restart.log")).unwrap();
    use std::os::unix::process::CommandExt;
    let child = Command::new(&args[0])
        .args(&args[1..])
        .env("ROOT_ACCESS_KEY_ID", &srv.access)
        .env("ROOT_SECRET_ACCESS_KEY", &srv.secret)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("restarting the server");
    srv.owned = Some(Owned {
        pid: child.id() as i32,
        child: Some(child),
        dir: old.dir,
    });
}

#[test]
fn multipart_upload_survives_a_server_restart_by_retrying_parts() {
    let Some(mut srv) = server() else { return };
    if srv.owned.is_none() {
        return; // someone else's server: not ours to restart
    }
    let mut cfg = srv.config("restart");
    cfg.part_size = Some(5 << 20);
    cfg.concurrency = Some(2);
    cfg.timeout_ms = Some(10_000); // the retry budget must outlast the restart
    let t = srv.open(&cfg).expect("open");
    let data = pattern(80 << 20, 9);
    std::thread::scope(|s| {
        let upload = s.spawn(|| t.put("restarted", &data));
        std::thread::sleep(Duration::from_millis(150));
        assert!(
            !upload.is_finished(),
            "the upload ended before the restart: the test needs a bigger blob"
        );
        let t0 = Instant::now();
        restart(&mut srv);
        upload
            .join()
            .expect("upload thread")
            .expect("the upload retries the parts that failed while the server was down");
        eprintln!("upload finished {:?} after the restart began", t0.elapsed());
    });
    assert!(
        t.get("restarted").unwrap() == data,
        "content after retried parts"
    );
}

/// S3 homes of byte streams: an object written piece by piece from a reader, in one PUT when
/// small, in parts when large; a reader failing mid-way leaves no object (the upload is
/// aborted).
#[test]
fn streamed_puts_are_whole_or_absent() {
    let Some(srv) = server() else { return };
    let mut cfg = srv.config("streamed");
    cfg.part_size = Some(5 << 20);
    let t = srv.open(&cfg).expect("open");
    for (key, n) in [("small", 1_000_000usize), ("large", (12 << 20) + 12345)] {
        let data = pattern(n, 7);
        let mut calls = 0;
        t.put_streamed(key, n as u64, &mut |off, buf| {
            calls += 1;
            buf.copy_from_slice(&data[off as usize..off as usize + buf.len()]);
            Ok(())
        })
        .expect("put_streamed");
        assert_eq!(calls, if n < 5 << 20 { 1 } else { 3 }, "{key}: pieces read");
        let mut back = vec![0u8; n];
        t.get_range(key, 0, &mut back).expect("read back");
        assert!(back == data, "{key}: bytes differ");
    }
    let e = t
        .put_streamed("broken", 11 << 20, &mut |off, buf| {
            if off > 0 {
                return Err(pdcx_tiers::Error::new(ErrorKind::Io, "reader failed"));
            }
            buf.fill(1);
            Ok(())
        })
        .expect_err("a failing reader fails the put");
    assert!(e.message.contains("reader failed"), "{e}");
    assert_eq!(
        t.len("broken").expect_err("no object").kind,
        ErrorKind::NotFound
    );
}
