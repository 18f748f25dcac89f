//! Operability end to end: a real `pdcx server` process logs through `tracing` (filtered by
//! `PDCX_LOG`) and serves Prometheus text on `--metrics`; writes and reads through the `pdcx`
//! client move the counters a scrape reports.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const PDCX: &str = env!("CARGO_BIN_EXE_pdcx");

/// A foreground `pdcx server` (rank 0 of 1) whose stderr lines arrive on a channel.
struct Server {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Server {
    fn start(root: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(PDCX);
        cmd.args(["server", "--root"])
            .arg(root)
            .args(["--rank", "0", "--size", "1"])
            .args(extra)
            .env_remove("PDCX_LOG")
            .env_remove("PDCX_METRICS_ADDR")
            .env_remove("PDCX_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("starting pdcx server");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut s = Server {
            child,
            lines,
            seen: Vec::new(),
        };
        let cluster = root.join("cluster.json");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !cluster.exists() {
            assert!(Instant::now() < deadline, "no cluster file:\n{}", s.log());
            assert!(
                s.child.try_wait().expect("try_wait").is_none(),
                "server exited:\n{}",
                s.log()
            );
            s.drain(Duration::from_millis(50));
        }
        s
    }

    fn drain(&mut self, wait: Duration) {
        if let Ok(l) = self.lines.recv_timeout(wait) {
            self.seen.push(l);
        }
        while let Ok(l) = self.lines.try_recv() {
            self.seen.push(l);
        }
    }

    fn log(&mut self) -> String {
        self.drain(Duration::from_millis(10));
        self.seen.join("\n")
    }

    /// The first stderr line containing `needle`, waiting for it up to 30 s.
    fn line_with(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(l) = self.seen.iter().find(|l| l.contains(needle)) {
                return l.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no line with {needle:?}:\n{}",
                self.log()
            );
            self.drain(Duration::from_millis(100));
        }
    }

    /// SIGTERM, then the whole stderr once the process has exited.
    fn stop(mut self) -> String {
        // SAFETY: kill(2) on the pid of the child this test spawned and has not reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().expect("try_wait").is_none() {
            assert!(Instant::now() < deadline, "server ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
        // The reader thread ends at EOF; collect what is left.
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(l);
        }
        self.seen.join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn pdcx(root: &Path, args: &[&str]) -> String {
    pdcx_env(root, args, &[])
}

fn pdcx_env(root: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let o = Command::new(PDCX)
        .args(args)
        .env("PDCX_ROOT", root)
        .envs(env.iter().copied())
        .output()
        .expect("running pdcx");
    assert!(
        o.status.success(),
        "pdcx {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A version 1.0 .npy file of `n` int32 values (header padded to 64 bytes as numpy does).
fn npy(path: &Path, n: usize) {
    let mut dict = format!("{{'descr': '<i4', 'fortran_order': False, 'shape': ({n},), }}");
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend((0..n as i32).flat_map(i32::to_le_bytes));
    std::fs::write(path, out).expect("writing npy");
}

/// One HTTP/1.1 request; returns (status line, headers, body).
fn http(addr: SocketAddr, method: &str, path: &str) -> (String, String, String) {
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(c, "{method} {path} HTTP/1.1\r\nHost: test\r\n\r\n").expect("send");
    let mut raw = String::new();
    c.read_to_string(&mut raw).expect("read reply");
    let (head, body) = raw.split_once("\r\n\r\n").expect("header end");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_string(), body.to_string())
}

/// A parsed scrape: family types, and samples keyed by `name{labels as written}`.
struct Scrape {
    types: HashMap<String, String>,
    samples: HashMap<String, f64>,
}

impl Scrape {
    /// Parses the text format strictly enough to catch what Prometheus would reject.
    fn parse(text: &str) -> Scrape {
        let mut types = HashMap::new();
        let mut helps = HashMap::new();
        let mut samples = HashMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, ty) = rest.split_once(' ').expect("TYPE name type");
                assert!(
                    ["counter", "gauge", "histogram", "summary", "untyped"].contains(&ty),
                    "{line}"
                );
                assert!(
                    types.insert(name.to_string(), ty.to_string()).is_none(),
                    "family {name} declared twice"
                );
                continue;
            }
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').expect("HELP name text");
                assert!(!help.is_empty(), "{line}");
                helps.insert(name.to_string(), ());
                continue;
            }
            assert!(
                !line.starts_with('#') && !line.is_empty(),
                "stray line {line:?}"
            );
            let (key, value) = line.rsplit_once(' ').expect("sample and value");
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                v => v
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value in {line:?}")),
            };
            let name = key.split('{').next().unwrap();
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':'),
                "bad name in {line:?}"
            );
            if let Some(labels) = key.strip_prefix(name) {
                if !labels.is_empty() {
                    assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
                    for pair in labels[1..labels.len() - 1].split("\",") {
                        let (k, v) = pair.split_once("=\"").expect("label=\"value\"");
                        assert!(!k.is_empty() && !v.contains('\n'), "{line}");
                    }
                }
            }
            // A sample belongs to a declared family (histograms add _bucket/_sum/_count).
            let family = if types.contains_key(name) {
                name.to_string()
            } else {
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix))
                    .filter(|base| types.get(*base).map(String::as_str) == Some("histogram"))
                    .unwrap_or_else(|| panic!("sample {name} has no TYPE line"))
                    .to_string()
            };
            assert!(helps.contains_key(&family), "family {family} has no HELP");
            if types[&family] == "counter" {
                assert!(
                    name.ends_with("_total"),
                    "counter {name} must end in _total"
                );
            }
            assert!(
                samples.insert(key.to_string(), value).is_none(),
                "duplicate sample {key}"
            );
        }
        Scrape { types, samples }
    }

    fn get(&self, key: &str) -> f64 {
        *self
            .samples
            .get(key)
            .unwrap_or_else(|| panic!("no sample {key}; have {:?}", self.keys()))
    }

    fn keys(&self) -> Vec<&String> {
        let mut k: Vec<_> = self.samples.keys().collect();
        k.sort();
        k
    }

    /// Sum of a family's samples over all label sets.
    fn sum(&self, name: &str) -> f64 {
        self.samples
            .iter()
            .filter(|(k, _)| k.split('{').next() == Some(name))
            .map(|(_, v)| v)
            .sum()
    }
}

fn scrape(addr: SocketAddr) -> Scrape {
    let (status, headers, body) = http(addr, "GET", "/metrics");
    assert!(status.contains("200"), "{status}");
    assert!(
        headers.contains("text/plain; version=0.0.4"),
        "content type: {headers}"
    );
    Scrape::parse(&body)
}

fn metrics_addr(line: &str) -> SocketAddr {
    let url = line
        .split("http://")
        .nth(1)
        .unwrap_or_else(|| panic!("no URL in {line:?}"));
    url.split('/').next().unwrap().parse().expect("address")
}

fn tier_config(root: &Path, tier_dir: &Path, extra: &str) -> PathBuf {
    std::fs::create_dir_all(root).unwrap();
    let path = root.join("pdcx.toml");
    std::fs::write(
        &path,
        format!(
            "[[tier]]\nname = \"disk\"\nkind = \"shared\"\npath = \"{}\"\n\n[flush]\ninterval_ms = 3600000\n{extra}",
            tier_dir.display()
        ),
    )
    .unwrap();
    path
}

#[test]
fn metrics_follow_writes_reads_and_flushes() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let root = tmp.path().join("root");
    tier_config(&root, &tmp.path().join("tier"), "");
    let mut server = Server::start(&root, &["--metrics", "127.0.0.1:0"], &[]);
    let addr = metrics_addr(&server.line_with("metrics on http://"));
    // Default filter `info`: the start is logged as a tracing event with the rank as a field.
    let listening = server.line_with("listening on");
    assert!(
        listening.contains("INFO") && listening.contains("rank=0"),
        "{listening}"
    );

    let before = scrape(addr);
    assert_eq!(before.types["pdcx_requests_total"], "counter");
    assert_eq!(before.types["pdcx_request_duration_seconds"], "histogram");
    assert_eq!(before.types["pdcx_cache_bytes"], "gauge");
    assert_eq!(before.types["pdcx_tier_used_bytes"], "gauge");
    assert!(before.get("pdcx_uptime_seconds") > 0.0);
    assert_eq!(before.get("pdcx_metrics_scrapes_total"), 1.0);

    // 1 MiB of int32 through the client over TCP, then read back through shared memory.
    let file = tmp.path().join("big.npy");
    npy(&file, 1 << 18);
    pdcx_env(
        &root,
        &["put", file.to_str().unwrap()],
        // Over TCP: neither shared memory nor a one-copy write into the server's log.
        &[("PDCX_SHM", "0"), ("PDCX_DIRECT_WRITE", "0")],
    );
    let out = tmp.path().join("back.npy");
    pdcx_env(
        &root,
        &["get", "big", "-o", out.to_str().unwrap()],
        // Through the server, not a one-copy read of its log.
        &[("PDCX_SHM", "1"), ("PDCX_DIRECT_READ", "0")],
    );
    let after = scrape(addr);

    let grew = |name: &str| {
        let (b, a) = (before.sum(name), after.sum(name));
        assert!(a > b, "{name} did not grow: {b} -> {a}");
        a - b
    };
    assert!(grew("pdcx_staged_bytes_total") >= (1 << 20) as f64);
    assert!(grew("pdcx_request_payload_bytes_total") >= (1 << 20) as f64);
    assert!(grew("pdcx_read_bytes_total") >= (1 << 20) as f64);
    assert!(grew("pdcx_shm_bytes_total") >= (1 << 20) as f64);
    grew("pdcx_requests_total");
    grew("pdcx_connections_accepted_total");
    grew("pdcx_log_commits_total");
    grew("pdcx_log_syncs_total"); // `pdcx put` commits at durability local
    grew("pdcx_log_bytes");
    grew("pdcx_objects");
    grew("pdcx_extents");
    grew("pdcx_metadata_wal_fsyncs_total");
    let lookups = |s: &Scrape| s.sum("pdcx_cache_hits_total") + s.sum("pdcx_cache_misses_total");
    assert!(
        lookups(&after) > lookups(&before),
        "the read looked in the cache"
    );
    assert!(after.get("pdcx_log_segments") >= 1.0);
    // Queued for the tier, or (if a flush already ran) on it.
    assert!(
        after.get("pdcx_flush_pending_bytes") + after.get("pdcx_flushed_bytes_total")
            >= (1 << 20) as f64
    );

    // Every request kind seen has a consistent histogram: cumulative buckets, +Inf = count.
    let kinds: Vec<String> = after
        .keys()
        .iter()
        .filter_map(|k| k.strip_prefix("pdcx_requests_total{kind=\""))
        .map(|k| k.trim_end_matches("\"}").to_string())
        .collect();
    // Small writes stage and commit in one message (`StageCommit`), large ones `Stage`.
    assert!(kinds.iter().any(|k| k.starts_with("Stage")), "{kinds:?}");
    assert!(kinds.iter().any(|k| k == "ReadShm"), "{kinds:?}");
    for k in &kinds {
        let count = after.get(&format!("pdcx_requests_total{{kind=\"{k}\"}}"));
        let inf = after.get(&format!(
            "pdcx_request_duration_seconds_bucket{{kind=\"{k}\",le=\"+Inf\"}}"
        ));
        let hcount = after.get(&format!(
            "pdcx_request_duration_seconds_count{{kind=\"{k}\"}}"
        ));
        assert_eq!((count, hcount), (inf, inf), "kind {k}");
        let mut last = 0.0;
        for le in ["0.00005", "0.001", "0.1", "10", "+Inf"] {
            let v = after.get(&format!(
                "pdcx_request_duration_seconds_bucket{{kind=\"{k}\",le=\"{le}\"}}"
            ));
            assert!(v >= last, "kind {k}: bucket {le} = {v} < {last}");
            last = v;
        }
        assert!(
            after.get(&format!(
                "pdcx_request_duration_seconds_sum{{kind=\"{k}\"}}"
            )) >= 0.0
        );
    }
    // Error replies include expected ones (`put` asks for the default container before it
    // creates it); the data path had none.
    for k in ["Stage", "Commit", "ReadShm"] {
        let errors = after
            .samples
            .get(&format!("pdcx_request_errors_total{{kind=\"{k}\"}}"));
        assert!(errors.is_none_or(|&e| e == 0.0), "{k}: {errors:?}");
    }

    // A flush moves the data to the tier: tier and flush counters follow.
    pdcx(&root, &["flush", "--quiet"]);
    let flushed = scrape(addr);
    let tier = "{tier=\"disk\",kind=\"shared\"}";
    assert!(flushed.get(&format!("pdcx_tier_put_bytes_total{tier}")) >= (1 << 20) as f64);
    assert!(flushed.get(&format!("pdcx_tier_used_bytes{tier}")) > 0.0);
    assert_eq!(flushed.get(&format!("pdcx_tier_errors_total{tier}")), 0.0);
    assert!(flushed.get("pdcx_flushed_bytes_total") >= (1 << 20) as f64);
    assert!(flushed.get("pdcx_flushed_extents_total") >= 1.0);
    assert_eq!(flushed.get("pdcx_flush_pending_bytes"), 0.0);
    assert_eq!(flushed.get("pdcx_flush_failing"), 0.0);

    // Every exported family is documented.
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/OPERATIONS.md"),
    )
    .expect("docs/OPERATIONS.md");
    for family in flushed.types.keys() {
        assert!(
            doc.contains(&format!("`{family}`")) || doc.contains(&format!("`{family}{{")),
            "{family} is not documented in docs/OPERATIONS.md"
        );
    }

    // Anything but GET /metrics is refused plainly.
    assert!(http(addr, "GET", "/nope").0.contains("404"));
    assert!(http(addr, "POST", "/metrics").0.contains("405"));
    let (status, headers, body) = http(addr, "HEAD", "/metrics");
    assert!(
        status.contains("200") && body.is_empty(),
        "{status} {body:?}"
    );
    assert!(!headers.contains("Content-Length: 0\r"), "{headers}");

    let log = server.stop();
    assert!(log.contains("data synced"), "{log}");
    // The exporter stopped with the server.
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err());
}

/// `[metrics] bind` in pdcx.toml enables the exporter (port + rank); `PDCX_LOG=warn` silences
/// the info events; a restart after a crash reports what recovery found.
#[test]
fn config_file_enables_metrics_and_pdcx_log_filters() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let root = tmp.path().join("root");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        l.local_addr().unwrap().port()
    };
    tier_config(
        &root,
        &tmp.path().join("tier"),
        &format!("\n[metrics]\nbind = \"127.0.0.1:{port}\"\n"),
    );
    let server = Server::start(&root, &[], &[("PDCX_LOG", "warn")]);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let s = scrape(addr);
    assert_eq!(s.get("pdcx_recovery_discarded_bytes"), 0.0);
    assert!(s.get("pdcx_uptime_seconds") >= 0.0);
    let log = server.stop();
    assert!(
        !log.contains("INFO"),
        "PDCX_LOG=warn still printed info:\n{log}"
    );
    assert!(!log.contains("listening on"), "{log}");
}

/// A metrics address that cannot be bound fails the start, saying which address and why.
#[test]
fn unusable_metrics_address_fails_the_start() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("a port to occupy");
    let addr = busy.local_addr().unwrap().to_string();
    let o = Command::new(PDCX)
        .args(["server", "--root"])
        .arg(tmp.path().join("root"))
        .args(["--rank", "0", "--size", "1", "--metrics", &addr])
        .env_remove("PDCX_METRICS_ADDR")
        .output()
        .expect("running pdcx server");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("binding metrics address {addr}")),
        "{err}"
    );
    let o = Command::new(PDCX)
        .args(["server", "--root"])
        .arg(tmp.path().join("root"))
        .args(["--rank", "0", "--size", "1", "--metrics", "no-port"])
        .output()
        .expect("running pdcx server");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(1) && err.contains("metrics address \"no-port\""),
        "{err}"
    );
}
