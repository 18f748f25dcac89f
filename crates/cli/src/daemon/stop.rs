//! `pdcx server stop`: asks every server to shut down, waits, signals as a last resort.

use super::deployment::{ask_all, discover, lock_holder};
use super::process::{force_stop, pid_alive, signal};
use anyhow::{anyhow, bail, Result};
use pdcx_client::cluster::{ClusterFile, ServerEntry};
use pdcx_core::protocol::{admin, handshake};
use pdcx_server::{launch, rank_file};
use std::path::Path;
use std::time::{Duration, Instant};

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
            // Its shard lock free too: a process whose main thread returned shows as a zombie
            // while its other threads still finish (a large shard's maps take seconds to
            // free), and a resize or start right after must find the shard free.
            !pid_alive(t.entry.pid) && lock_holder(root, t.entry.rank) != Some(t.entry.pid)
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
