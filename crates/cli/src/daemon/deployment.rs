//! What a root says about its servers (the cluster file, else the rank files), whether a rank
//! directory is locked by a live server, and asking every server at once.

use crate::common::msg;
use anyhow::{anyhow, bail, Result};
use pdcx_client::cluster::{load_or_create_secret, ClusterFile, ServerEntry, SECRET_FILE};
use pdcx_client::conn::Conn;
use pdcx_core::protocol::{Call, Credential, Role};
use pdcx_server::rank_dir;
use std::path::Path;
use std::time::{Duration, Instant};

/// The pid holding a rank directory's lock, if a live process holds it.
pub(super) fn lock_holder(root: &Path, rank: u32) -> Option<u32> {
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
pub(super) struct Deployment {
    pub(super) servers: Vec<ServerEntry>,
    pub(super) secret: Option<Vec<u8>>,
    pub(super) from_cluster_file: bool,
}

pub(super) fn discover(root: &Path) -> Result<Option<Deployment>> {
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
    // The operator's own commands (status, stop): the admin role, which only the holder of
    // the deployment secret can take.
    let cred = Credential::deployment(secret);
    let conn = Conn::connect_with(&entry.addr, &cred, Role::Admin).map_err(msg)?;
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
pub(super) fn ask_all<C>(
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
