//! Setup shared by the server's integration tests that run in-process servers.
#![allow(dead_code)] // each test file uses its own subset

use pdcx_client::{Client, ClusterFile};
use pdcx_core::protocol::ObjectSpec;
use pdcx_core::protocol::{self, FrameKind};
use pdcx_core::{Dtype, ObjectMeta};
use pdcx_server::{Server, ServerConfig, ServerHandle};
use std::io::BufReader;
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

/// A one-server deployment at `root` with `f` applied to its config, its cluster file
/// published so clients can connect.
pub fn deployment_with(root: &Path, f: impl FnOnce(&mut ServerConfig)) -> ServerHandle {
    let mut cfg = ServerConfig::new(root, 0, 1);
    f(&mut cfg);
    let h = Server::start(cfg).unwrap();
    h.server.publish_rank_file().unwrap();
    pdcx_server::launch::assemble_cluster(root, 1, Duration::from_secs(30)).unwrap();
    h
}

/// [`deployment_with`] the default config.
pub fn deployment(root: &Path) -> ServerHandle {
    deployment_with(root, |_| {})
}

/// A 1-D byte object of `n` elements.
pub fn byte_object(c: &Client, name: &str, n: u64) -> ObjectMeta {
    c.create_object(ObjectSpec {
        name: name.into(),
        dims: vec![n],
        dtype: Dtype::UInt8,
        fill: None,
        containers: vec![],
        tags: vec![],
        creator: String::new(),
    })
    .unwrap()
}

/// The spec of a 1-D f64 object of `n` elements, for tests that create objects through the
/// metadata directly.
pub fn f64_spec(name: &str, n: u64) -> ObjectSpec {
    ObjectSpec {
        name: name.into(),
        dims: vec![n],
        dtype: Dtype::Float64,
        fill: None,
        containers: vec![],
        tags: vec![],
        creator: "t".into(),
    }
}

/// Two servers (ranks 0 and 1) on `root`, in this process, joined into one deployment.
pub fn two_servers(root: &Path) -> Vec<ServerHandle> {
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

/// A client of the deployment at `root` whose node-local server is `local`, as if each server
/// were a node of its own.
pub fn client_at(root: &Path, local: u32) -> Client {
    let c = Client::connect(Some(root)).unwrap();
    c.set_local_server(local).unwrap();
    // The servers share this host but stand for nodes of their own: a small write stays with
    // `local` instead of going to a same-node owner (tests/conftest.py's client_on does the same).
    c.set_small_write_to_owner(0);
    c
}

/// A private versitygw (scripts/s3server.sh), killed by PID on drop, with the settings the
/// script printed (`PDCX_TEST_S3_*`).
pub struct S3 {
    pub vars: std::collections::HashMap<String, String>,
    pid: i32,
    _dir: tempfile::TempDir,
}

impl Drop for S3 {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the server this test started.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
        }
    }
}

/// Starts a private versitygw; None (said on stderr) when it is not installed, unless
/// PDCX_REQUIRE_S3=1 (CI), which makes that a failure.
pub fn s3_server() -> Option<S3> {
    let bin = std::env::var("VERSITYGW").unwrap_or_else(|_| "/usr/local/bin/versitygw".into());
    if !Path::new(&bin).is_file() {
        assert_ne!(
            std::env::var("PDCX_REQUIRE_S3").as_deref(),
            Ok("1"),
            "PDCX_REQUIRE_S3=1 but versitygw is not installed"
        );
        eprintln!("SKIPPED (nothing checked): versitygw not installed");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/s3server.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .arg("start")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let vars: std::collections::HashMap<String, String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let pid = std::fs::read_to_string(&vars["PDCX_TEST_S3_PIDFILE"])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    Some(S3 {
        vars,
        pid,
        _dir: dir,
    })
}

/// Exports `s3`'s credentials and endpoint as the `AWS_*` variables a server reads (servers
/// started in this process or in its children, as a real server does for an S3 home), and
/// opens its bucket as the test's own view of it.
pub fn s3_home_env(s3: &S3) -> pdcx_tiers::s3::S3Tier {
    for (k, v) in [
        ("AWS_ACCESS_KEY_ID", "PDCX_TEST_S3_ACCESS_KEY_ID"),
        ("AWS_SECRET_ACCESS_KEY", "PDCX_TEST_S3_SECRET_ACCESS_KEY"),
        ("AWS_ENDPOINT_URL", "PDCX_TEST_S3_ENDPOINT"),
    ] {
        std::env::set_var(k, &s3.vars[v]);
    }
    std::env::set_var("AWS_REGION", "us-east-1");
    pdcx_tiers::s3::S3Tier::open_destination(&pdcx_tiers::TierConfig {
        name: "check".into(),
        kind: pdcx_tiers::TierKind::S3,
        bucket: Some(s3.vars["PDCX_TEST_S3_BUCKET"].clone()),
        ..Default::default()
    })
    .unwrap()
}

/// Rank `rank` of a 2-server deployment `deployment` as an in-process engine (no RPC server)
/// under `base/server-RANK`, with 1 MiB log segments and the tiers of `cfg`; peers are the
/// caller's to set.
pub fn open_engine(
    base: &Path,
    rank: u32,
    cfg: &pdcx_tiers::DeploymentConfig,
    deployment: &str,
) -> (
    std::sync::Arc<pdcx_server::meta::Metadata>,
    std::sync::Arc<pdcx_server::engine::Engine>,
) {
    open_engine_of(base, rank, 2, cfg, deployment)
}

/// A deployment config with one shared-directory tier `pfs` under `base` and group shards of
/// every server (`[shard] strategy = 1`).
pub fn shared_group_config(base: &Path) -> pdcx_tiers::DeploymentConfig {
    pdcx_tiers::DeploymentConfig::parse(
        &format!(
            "[[tier]]\nname = \"pfs\"\nkind = \"shared\"\npath = \"{}/pfs\"\n[shard]\nstrategy = 1\n",
            base.display()
        ),
        Vec::new(),
    )
    .unwrap()
}

/// [`open_engine`] of a deployment of `size` servers.
pub fn open_engine_of(
    base: &Path,
    rank: u32,
    size: u32,
    cfg: &pdcx_tiers::DeploymentConfig,
    deployment: &str,
) -> (
    std::sync::Arc<pdcx_server::meta::Metadata>,
    std::sync::Arc<pdcx_server::engine::Engine>,
) {
    let dir = base.join(format!("server-{rank}"));
    std::fs::create_dir_all(&dir).unwrap();
    let meta = std::sync::Arc::new(
        pdcx_server::meta::Metadata::open(&dir.join("meta.sqlite"), rank, size).unwrap(),
    );
    let (engine, _, _) = pdcx_server::engine::Engine::open_with(
        &dir.join("log"),
        meta.clone(),
        1 << 20,
        pdcx_store::LogOptions {
            segment_bytes: 1 << 20,
            ..pdcx_store::LogOptions::default()
        },
        pdcx_server::tiering::Tiering::open(cfg, deployment, rank, size).unwrap(),
    )
    .unwrap();
    (meta, std::sync::Arc::new(engine))
}

/// Rank 0's address and the deployment secret at `root`.
pub fn cluster(root: &std::path::Path) -> (String, Vec<u8>) {
    let cf = ClusterFile::load(root).unwrap();
    (cf.servers[0].addr.clone(), cf.secret_bytes().unwrap())
}

/// An authenticated client connection spoken raw, so a test can misbehave on purpose.
pub fn raw(root: &std::path::Path) -> (BufReader<TcpStream>, TcpStream) {
    let (addr, secret) = cluster(root);
    let s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut w = s.try_clone().unwrap();
    let (h, nonce) = protocol::read_frame_head(&mut r, 0).unwrap();
    assert_eq!(h.kind, FrameKind::Challenge);
    let binding = protocol::tcp_binding(s.local_addr().unwrap(), s.peer_addr().unwrap());
    let hello = protocol::Hello::new(
        &protocol::Credential::deployment(&secret),
        &nonce,
        protocol::Role::Client,
        binding,
        protocol::Wire::Plain,
    );
    let body = protocol::encode_body(&hello).unwrap();
    protocol::write_frame(&mut w, FrameKind::Hello, 0, &body, &[]).unwrap();
    let (h, body) = protocol::read_frame_head(&mut r, 0).unwrap();
    assert_eq!(h.kind, FrameKind::Welcome);
    protocol::decode_body::<Result<protocol::Welcome, pdcx_core::Error>>(&body)
        .unwrap()
        .unwrap();
    (r, w)
}

/// Runs this test binary's `crash_child` test as a child process in `dir`
/// (`PDCX_CRASH_CHILD`) armed to die at hit `n` of crash point `point` (`PDCX_CRASH_AT`), and
/// checks that it did (SIGKILL). For the crash-point tests.
pub fn kill_child_at(dir: &Path, point: &str, n: u32) {
    use std::os::unix::process::ExitStatusExt;
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env("PDCX_CRASH_CHILD", dir)
        .env("PDCX_CRASH_AT", format!("{point}:{n}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "{point}:{n} was never reached (child exited with {status})"
    );
}
