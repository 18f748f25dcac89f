//! Running servers: one in the foreground (what mpirun/srun launch), or a local deployment of
//! N background servers managed with `start`, `stop` and `status`.

use crate::common::{human_bytes, human_duration, msg, print_table};
use anyhow::{anyhow, bail, Context, Result};
use pdcx_client::cluster::{load_or_create_secret, ClusterFile, ServerEntry, SECRET_FILE};
use pdcx_client::conn::Conn;
use pdcx_core::protocol::{admin, handshake, Call, ServerStats};
use pdcx_server::{launch, rank_dir, rank_file, Server, ServerConfig};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Set by SIGTERM/SIGINT; the foreground server polls it.
static STOP_SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP_SIGNALLED.store(true, Ordering::SeqCst);
}

fn install_stop_handlers() {
    let handler = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
    }
}

pub struct ForegroundOpts {
    pub root: PathBuf,
    pub rank: Option<u32>,
    pub size: Option<u32>,
    pub bind: String,
    pub cache_mb: u64,
    pub node: Option<String>,
    pub agg_window: Duration,
    pub lazy_interval: Duration,
    /// `--metrics ADDR` (overrides `PDCX_METRICS_ADDR`).
    pub metrics: Option<String>,
}

/// `pdcx server`: runs one server until it is asked to shut down or gets SIGTERM/SIGINT.
pub fn foreground(o: ForegroundOpts) -> Result<()> {
    // Server messages go through `tracing` (filter: PDCX_LOG, default info) to stderr, which
    // `pdcx server start` points at ROOT/logs/server-RANK.log.
    pdcx_server::logging::init();
    crate::config_cmd::check_server_env(|w| tracing::warn!("{w}"))?;
    let (rank, size) = match (o.rank, o.size) {
        (Some(r), Some(s)) => (r, s),
        (None, None) => launch::rank_from_env().map_or((0, 1), |(r, s, _)| (r, s)),
        _ => bail!("--rank and --size go together (or leave both to mpirun/srun)"),
    };
    if size == 0 || rank >= size {
        bail!("rank {rank} is not in 0..{size}");
    }
    let root = o.root;
    if rank == 0 {
        remove_stale_cluster_file(&root)?;
    }
    let mut config = ServerConfig::new(&root, rank, size);
    config.bind = o.bind;
    if let Some(node) = o.node.filter(|n| !n.trim().is_empty()) {
        config.node = node.trim().to_string();
    }
    config.cache_bytes = o
        .cache_mb
        .checked_mul(1 << 20)
        .ok_or_else(|| anyhow!("--cache-mb {} is too large", o.cache_mb))?;
    config.agg_window = o.agg_window;
    config.lazy_interval = o.lazy_interval;
    if let Some(m) = o.metrics.filter(|m| !m.trim().is_empty()) {
        config.metrics = Some(m);
    }
    pdcx_server::limits::apply_env(&mut config).map_err(msg)?;
    install_stop_handlers();
    let handle = Server::start(config).map_err(msg)?;
    if let Err(e) = handle.server.publish_rank_file() {
        let _ = handle.shutdown();
        return Err(msg(e));
    }
    if rank == 0 {
        let root = root.clone();
        std::thread::spawn(move || {
            match launch::assemble_cluster(&root, size, Duration::from_secs(120)) {
                Ok(cf) => tracing::info!(
                    rank = 0,
                    servers = cf.size,
                    "cluster file written ({} servers) to {}",
                    cf.size,
                    ClusterFile::path(&root).display()
                ),
                Err(e) => tracing::error!(
                    rank = 0,
                    "could not assemble the cluster file: {}",
                    e.message
                ),
            }
        });
    }
    tracing::info!(
        rank,
        size,
        addr = %handle.addr(),
        "pdcx server rank {rank}/{size} listening on {} (root {})",
        handle.addr(),
        root.display()
    );
    while !handle.server.shutdown_requested() && !STOP_SIGNALLED.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let why = if STOP_SIGNALLED.load(Ordering::SeqCst) {
        "signal"
    } else {
        "shutdown request"
    };
    let synced = handle.shutdown();
    let _ = std::fs::remove_file(rank_file(&root, rank));
    synced.map_err(|e| anyhow!("final sync failed: {}", e.message))?;
    tracing::info!(
        rank,
        size,
        "pdcx server rank {rank}/{size} stopped ({why}); data synced"
    );
    Ok(())
}

/// Rank 0 drops the previous run's cluster file before it starts so nobody connects to dead
/// addresses, unless rank 0's directory is locked: then a live server owns it and
/// `Server::start` will refuse to run with a clear message.
fn remove_stale_cluster_file(root: &Path) -> Result<()> {
    let path = ClusterFile::path(root);
    if !path.exists() || lock_holder(root, 0).is_some() {
        return Ok(());
    }
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow!("removing stale {}: {e}", path.display())),
    }
}

/// The pid holding a rank directory's lock, if a live process holds it.
fn lock_holder(root: &Path, rank: u32) -> Option<u32> {
    use std::os::fd::AsRawFd;
    let path = rank_dir(root, rank).join("LOCK");
    let f = std::fs::File::open(&path).ok()?;
    // SAFETY: flock on a descriptor we own.
    let free = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
    if free {
        // SAFETY: as above.
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
        return None;
    }
    std::fs::read_to_string(&path).ok()?.trim().parse().ok()
}

/// What a root says about its servers: the cluster file, else the rank files of a deployment
/// that was never assembled (or whose rank 0 died).
struct Deployment {
    servers: Vec<ServerEntry>,
    secret: Option<Vec<u8>>,
    from_cluster_file: bool,
}

fn discover(root: &Path) -> Result<Option<Deployment>> {
    let secret_path = root.join(SECRET_FILE);
    let secret = || -> Option<Vec<u8>> {
        secret_path
            .exists()
            .then(|| load_or_create_secret(root).ok())
            .flatten()
    };
    if ClusterFile::path(root).exists() {
        match ClusterFile::load(root) {
            Ok(cf) => {
                return Ok(Some(Deployment {
                    secret: cf.secret_bytes().ok().or_else(secret),
                    servers: cf.servers,
                    from_cluster_file: true,
                }))
            }
            Err(e) => eprintln!("warning: ignoring {}", e.message),
        }
    }
    let mut servers = Vec::new();
    if let Ok(dir) = std::fs::read_dir(root.join("run")) {
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !(name.starts_with("rank-") && name.ends_with(".json")) {
                continue;
            }
            let parsed = std::fs::read_to_string(entry.path())
                .ok()
                .and_then(|t| serde_json::from_str::<ServerEntry>(&t).ok());
            match parsed {
                Some(s) => servers.push(s),
                None => eprintln!("warning: ignoring unreadable {}", entry.path().display()),
            }
        }
    }
    if servers.is_empty() {
        return Ok(None);
    }
    servers.sort_by_key(|s| s.rank);
    Ok(Some(Deployment {
        servers,
        secret: secret(),
        from_cluster_file: false,
    }))
}

/// A connection to `entry` if a server answers there with the right rank.
fn reach(entry: &ServerEntry, secret: Option<&[u8]>) -> Result<Conn> {
    let secret = secret.ok_or_else(|| anyhow!("no deployment secret to authenticate with"))?;
    let conn = Conn::connect(&entry.addr, secret).map_err(msg)?;
    if conn.rank != entry.rank {
        bail!(
            "{} answers as rank {}, not {}",
            entry.addr,
            conn.rank,
            entry.rank
        );
    }
    Ok(conn)
}

/// Sends `req` to every server at once, each over a fresh connection. A server that does not
/// answer within `within` counts as failed, so one hung server cannot hang the command.
fn ask_all<C>(
    servers: &[ServerEntry],
    secret: Option<&[u8]>,
    req: &C,
    within: Duration,
) -> Vec<Result<C::Reply, String>>
where
    C: Call + Clone + Send + 'static,
    C::Reply: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    for (i, s) in servers.iter().enumerate() {
        let (tx, s, secret, req) = (
            tx.clone(),
            s.clone(),
            secret.map(<[u8]>::to_vec),
            req.clone(),
        );
        std::thread::spawn(move || {
            let r = reach(&s, secret.as_deref()).and_then(|mut c| c.ask(req, &[]).map_err(msg));
            let _ = tx.send((i, r.map_err(|e| format!("{e:#}"))));
        });
    }
    drop(tx);
    let mut results: Vec<Result<C::Reply, String>> = (0..servers.len())
        .map(|_| Err(format!("no reply within {} s", within.as_secs())))
        .collect();
    let deadline = Instant::now() + within;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok((i, r)) => results[i] = r,
            Err(_) => break,
        }
    }
    results
}

fn pid_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence.
    let exists = unsafe { libc::kill(p, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    // A zombie has exited; whoever should reap it has not yet.
    exists && !is_zombie(pid)
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(p) = libc::pid_t::try_from(pid) {
        if p > 0 {
            // SAFETY: plain kill(2) on a pid verified to be one of our servers.
            unsafe { libc::kill(p, sig) };
        }
    }
}

/// `pdcx server start -n N`: N background servers on this machine.
pub fn start(
    root: &Path,
    n: u32,
    cache_mb: u64,
    bind_host: &str,
    metrics: Option<&str>,
) -> Result<()> {
    if n == 0 || n > 4096 {
        bail!("-n must be 1..=4096, got {n}");
    }
    // Here, not only in each server's log, so the one who typed the command sees it.
    crate::config_cmd::check_server_env(|w| eprintln!("warning: {w}"))?;
    let logs = root.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    refuse_if_running(root)?;
    check_server_count(root, n)?;

    let exe = std::env::current_exe().context("finding the pdcx executable")?;
    let bind = if bind_host.contains(':') && !bind_host.starts_with('[') {
        format!("[{bind_host}]:0")
    } else {
        format!("{bind_host}:0")
    };
    // Options every rank gets. Each rank adds its rank to the metrics port, so one address
    // serves the whole deployment.
    let mut common = vec![
        "--cache-mb".to_string(),
        cache_mb.to_string(),
        "--bind".to_string(),
        bind,
    ];
    if let Some(m) = metrics {
        common.extend(["--metrics".to_string(), m.to_string()]);
    }
    let mut children: Vec<(u32, Child, PathBuf)> = Vec::new();
    for rank in 0..n {
        match spawn_server(&exe, root, rank, n, &common, &logs) {
            Ok((child, log)) => children.push((rank, child, log)),
            Err(e) => {
                stop_children(&mut children);
                return Err(e);
            }
        }
    }

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last_dot = Instant::now();
    let mut dots = false;
    loop {
        let exited = children
            .iter_mut()
            .find_map(|(rank, child, log)| match child.try_wait() {
                Ok(Some(status)) => Some((*rank, status, log.clone())),
                _ => None,
            });
        if let Some((rank, status, log)) = exited {
            if dots {
                eprintln!();
            }
            eprintln!(
                "server {rank} exited during startup ({status}); end of {}:",
                log.display()
            );
            eprintln!("{}", tail(&log, 20));
            stop_children(&mut children);
            bail!(
                "server {rank} failed to start (see {}); the other servers were stopped",
                log.display()
            );
        }
        if let Ok(cf) = ClusterFile::load(root) {
            if cf.size == n {
                break;
            }
        }
        if Instant::now() > deadline {
            if dots {
                eprintln!();
            }
            stop_children(&mut children);
            bail!(
                "the servers did not publish {} within 60 s; see the logs in {}",
                ClusterFile::path(root).display(),
                logs.display()
            );
        }
        if last_dot.elapsed() >= Duration::from_secs(1) {
            eprint!(".");
            dots = true;
            last_dot = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if dots {
        eprintln!();
    }
    println!("started {n} servers at {}", root.display());
    println!("export PDCX_ROOT={}", root.display());
    Ok(())
}

fn refuse_if_running(root: &Path) -> Result<()> {
    let Some(dep) = discover(root)? else {
        return Ok(());
    };
    let answers = ask_all(
        &dep.servers,
        dep.secret.as_deref(),
        &handshake::Ping {},
        Duration::from_secs(10),
    );
    for (s, a) in dep.servers.iter().zip(&answers) {
        if a.is_ok() {
            bail!(
                "a deployment is already running at {r}; `pdcx server stop --root {r}` first \
                 (server {} answers at {})",
                s.rank,
                s.addr,
                r = root.display()
            );
        }
    }
    let cluster = ClusterFile::path(root);
    if cluster.exists() {
        eprintln!("removing stale cluster file from a previous run");
        std::fs::remove_file(&cluster)
            .with_context(|| format!("removing {}", cluster.display()))?;
    }
    if let Ok(dir) = std::fs::read_dir(root.join("run")) {
        for e in dir.flatten() {
            if e.path().extension().is_some_and(|x| x == "json") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    Ok(())
}

/// Name hashing depends on the server count, so a root must restart with the count it has.
/// How many servers the data under `root` belongs to (0: none yet).
pub fn servers_on_disk(root: &Path) -> u32 {
    let Ok(dir) = std::fs::read_dir(root) else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rank = name.strip_prefix("server-")?.parse::<u32>().ok()?;
            e.path().join("meta.sqlite").exists().then_some(rank + 1)
        })
        .max()
        .unwrap_or(0)
}

fn check_server_count(root: &Path, n: u32) -> Result<()> {
    let Ok(dir) = std::fs::read_dir(root) else {
        return Ok(());
    };
    let mut ranks: Vec<u32> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rank = name.strip_prefix("server-")?.parse::<u32>().ok()?;
            e.path().join("meta.sqlite").exists().then_some(rank)
        })
        .collect();
    ranks.sort_unstable();
    if let Some(&max) = ranks.last() {
        if max + 1 != n {
            bail!(
                "{} holds the data of a {}-server deployment; restart it with -n {} \
                 (the server count of a root is fixed) or use a new root",
                root.display(),
                max + 1,
                max + 1
            );
        }
    }
    Ok(())
}

fn spawn_server(
    exe: &Path,
    root: &Path,
    rank: u32,
    n: u32,
    common: &[String],
    logs: &Path,
) -> Result<(Child, PathBuf)> {
    let log_path = logs.join(format!("server-{rank}.log"));
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let _ = writeln!(
        log,
        "==== {} pdcx server start: rank {rank}/{n}",
        crate::common::iso8601(now_secs())
    );
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("server")
        .arg("--root")
        .arg(root)
        .args(["--rank", &rank.to_string(), "--size", &n.to_string()])
        .args(common)
        .stdin(Stdio::null())
        .stdout(log.try_clone().context("duplicating the log handle")?)
        .stderr(log);
    // The children get their rank from the command line; a launcher's variables (we may run
    // inside an MPI or Slurm job) must not override it.
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if ["OMPI_", "PMI_", "PMIX_", "SLURM_"]
            .iter()
            .any(|p| k.starts_with(p))
        {
            cmd.env_remove(&key);
        }
    }
    // SAFETY: setsid is async-signal-safe; the child leaves our session so a Ctrl-C in this
    // terminal or the end of this shell does not stop the deployment.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    Ok((child, log_path))
}

/// SIGTERM (the servers sync and exit), then SIGKILL whatever is left after 5 s.
fn stop_children(children: &mut [(u32, Child, PathBuf)]) {
    for (_, c, _) in children.iter() {
        signal(c.id(), libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for (_, c, _) in children.iter_mut() {
        while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        if matches!(c.try_wait(), Ok(None)) {
            let _ = c.kill();
        }
        let _ = c.wait();
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..]
        .iter()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// `pdcx server stop`: asks every server to shut down, waits, signals as a last resort.
pub fn stop(root: &Path, timeout: u64) -> Result<()> {
    let Some(dep) = discover(root)? else {
        println!("no deployment running at {}", root.display());
        return Ok(());
    };
    let here = launch::hostname();
    struct Target {
        entry: ServerEntry,
        local: bool,
        asked: Result<()>,
        outcome: Option<String>,
    }
    let asked = ask_all(
        &dep.servers,
        dep.secret.as_deref(),
        &admin::Shutdown {},
        Duration::from_secs(10),
    );
    let mut targets: Vec<Target> = dep
        .servers
        .iter()
        .zip(asked)
        .map(|(entry, r)| Target {
            local: entry.host == here || entry.host.is_empty(),
            entry: entry.clone(),
            asked: match r {
                Ok(()) => Ok(()),
                Err(e) => Err(anyhow!(e)),
            },
            outcome: None,
        })
        .collect();

    // A local server we could not ask is signalled at once (if it is really ours).
    for t in targets.iter_mut().filter(|t| t.local && t.asked.is_err()) {
        if !pid_alive(t.entry.pid) {
            t.outcome = Some("not running".into());
        } else if lock_holder(root, t.entry.rank) == Some(t.entry.pid) {
            signal(t.entry.pid, libc::SIGTERM);
        } else {
            t.outcome = Some(format!(
                "not running (pid {} is not a pdcx server of this root)",
                t.entry.pid
            ));
        }
    }
    let gone = |t: &Target| {
        if t.local {
            !pid_alive(t.entry.pid)
        } else {
            ask_all(
                std::slice::from_ref(&t.entry),
                dep.secret.as_deref(),
                &handshake::Ping {},
                Duration::from_secs(3),
            )[0]
            .is_err()
        }
    };
    let deadline = Instant::now() + Duration::from_secs(timeout);
    loop {
        for t in targets.iter_mut().filter(|t| t.outcome.is_none()) {
            if gone(t) {
                t.outcome = Some(match (&t.asked, t.local) {
                    (Ok(()), _) => "stopped".into(),
                    (Err(_), true) => "stopped (SIGTERM)".into(),
                    (Err(_), false) => "not reachable (taken as stopped)".into(),
                });
            }
        }
        if targets.iter().all(|t| t.outcome.is_some()) || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for t in targets.iter_mut().filter(|t| t.outcome.is_none()) {
        t.outcome = Some(if !t.local {
            format!(
                "STILL RUNNING on {} (pid {}); stop it there",
                t.entry.host, t.entry.pid
            )
        } else if lock_holder(root, t.entry.rank) != Some(t.entry.pid) {
            "stopped".into()
        } else {
            force_stop(t.entry.pid)
        });
    }

    let mut failed = 0;
    for t in &targets {
        let outcome = t.outcome.as_deref().unwrap_or("unknown");
        if outcome.starts_with("STILL") {
            failed += 1;
        } else {
            let _ = std::fs::remove_file(rank_file(root, t.entry.rank));
        }
        let note = match &t.asked {
            Err(e) if outcome != "not running" => format!(" [shutdown request failed: {e:#}]"),
            _ => String::new(),
        };
        println!(
            "server {} ({}, pid {}): {outcome}{note}",
            t.entry.rank, t.entry.addr, t.entry.pid
        );
    }
    if failed > 0 {
        bail!("{failed} server(s) are still running; the cluster file was kept");
    }
    let cluster = ClusterFile::path(root);
    match std::fs::remove_file(&cluster) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => bail!("removing {}: {e}", cluster.display()),
    }
    if !dep.from_cluster_file {
        println!(
            "(the deployment had no cluster file; servers were found in {})",
            root.join("run").display()
        );
    }
    Ok(())
}

/// SIGTERM, 5 s grace, then SIGKILL. Returns what happened.
fn force_stop(pid: u32) -> String {
    signal(pid, libc::SIGTERM);
    if wait_gone(pid, Duration::from_secs(5)) {
        return "stopped after SIGTERM (did not exit on request in time)".into();
    }
    signal(pid, libc::SIGKILL);
    if wait_gone(pid, Duration::from_secs(5)) {
        "KILLED with SIGKILL (unsynced data is lost; committed data survives)".into()
    } else {
        format!("STILL RUNNING after SIGKILL (pid {pid})")
    }
}

fn wait_gone(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if !pid_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    !pid_alive(pid)
}

/// `pdcx server status`: 0 = every server up, 1 = some down, 2 = no deployment.
pub fn status(root: &Path, json: bool) -> Result<u8> {
    let Some(dep) = discover(root)? else {
        if json {
            println!("[]");
        }
        eprintln!("no deployment at {}", root.display());
        return Ok(2);
    };
    let results: Vec<Result<ServerStats, String>> = ask_all(
        &dep.servers,
        dep.secret.as_deref(),
        &admin::Stats {},
        Duration::from_secs(10),
    )
    .into_iter()
    .map(|r| r.map(|s| *s))
    .collect();
    let all_up = results.iter().all(Result::is_ok);

    if json {
        let rows: Vec<serde_json::Value> = dep
            .servers
            .iter()
            .zip(&results)
            .map(|(s, r)| {
                let mut v = serde_json::json!({
                    "rank": s.rank, "addr": s.addr, "host": s.host, "pid": s.pid, "up": r.is_ok(),
                });
                match r {
                    Ok(st) => {
                        v["stats"] = serde_json::json!({
                            "objects": st.objects, "containers": st.containers,
                            "extents": st.extents, "log_bytes": st.log_bytes,
                            "cache_bytes": st.cache_bytes, "cache_capacity": st.cache_capacity,
                            "connections": st.connections, "uptime_s": st.uptime_s,
                            "read_bytes": st.read_bytes, "shm_bytes": st.shm_bytes,
                            "direct_write_bytes": st.direct_write_bytes,
                            "dir": st.dir, "size": st.size,
                            "lookups": st.lookups, "lookups_forwarded": st.lookups_forwarded,
                            "lookups_forwarded_clients": st.lookups_forwarded_clients,
                            "lookups_relayed": st.lookups_relayed,
                            "lookups_coalesced": st.lookups_coalesced,
                            "registers": st.registers, "registered_regions": st.registered_regions,
                            "registers_sent": st.registers_sent, "unregistered": st.unregistered,
                        })
                    }
                    Err(e) => v["error"] = serde_json::json!(e),
                }
                v
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(if all_up { 0 } else { 1 });
    }

    let header = [
        "RANK", "ADDR", "PID", "STATE", "OBJECTS", "EXTENTS", "LOG", "CACHE", "CONNS", "UPTIME",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut problems = Vec::new();
    for (s, r) in dep.servers.iter().zip(&results) {
        let mut row = vec![s.rank.to_string(), s.addr.clone(), s.pid.to_string()];
        match r {
            Ok(st) => row.extend([
                "up".to_string(),
                st.objects.to_string(),
                st.extents.to_string(),
                human_bytes(st.log_bytes),
                format!(
                    "{}/{}",
                    human_bytes(st.cache_bytes),
                    human_bytes(st.cache_capacity)
                ),
                st.connections.to_string(),
                human_duration(st.uptime_s),
            ]),
            Err(e) => {
                row.push("DOWN".into());
                row.extend((0..6).map(|_| "-".to_string()));
                problems.push(format!("server {}: {e}", s.rank));
            }
        }
        rows.push(row);
    }
    print_table(&header, &rows);
    if !dep.from_cluster_file {
        println!(
            "note: no cluster file yet (or it was lost); servers listed from {}",
            root.join("run").display()
        );
    }
    for p in &problems {
        eprintln!("{p}");
    }
    Ok(if all_up { 0 } else { 1 })
}
