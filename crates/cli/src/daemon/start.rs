//! `pdcx server start -n N`: N detached background servers on this machine, each logging to
//! ROOT/logs/server-RANK.log, and the wait until they have published the cluster file.

use super::deployment::{ask_all, discover};
use super::process::signal;
use anyhow::{bail, Context, Result};
use pdcx_client::cluster::ClusterFile;
use pdcx_core::protocol::handshake;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

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
    pdcx_server::privacy::prepare_root(root)?;
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
    pdcx_server::resize::shard_ranks(root)
        .last()
        .map_or(0, |r| r + 1)
}

fn check_server_count(root: &Path, n: u32) -> Result<()> {
    pdcx_server::resize::check_not_resizing(root)?;
    if let Some(&max) = pdcx_server::resize::shard_ranks(root).last() {
        if max + 1 != n {
            bail!(
                "{} holds the data of a {}-server deployment; restart it with -n {}, or \
                 resize it first (`pdcx resize --root {} --to {n}`)",
                root.display(),
                max + 1,
                max + 1,
                root.display()
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
    // Not through a symlink (someone else's file) and owner-only (umask 077, see main).
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
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
