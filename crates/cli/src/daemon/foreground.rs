//! `pdcx server`: one server in the foreground (what mpirun/srun launch) until it is asked to
//! shut down or gets SIGTERM/SIGINT.

use super::deployment::lock_holder;
use crate::common::msg;
use anyhow::{anyhow, bail, Result};
use pdcx_client::cluster::ClusterFile;
use pdcx_server::{launch, rank_file, Server, ServerConfig};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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
