//! How a server learns its place: rank and size from the launcher's environment (mpirun, srun,
//! PMI) or the command line, and how rank 0 assembles the cluster file once every rank answers.

use crate::rank_file;
use pdcx_core::protocol::Role;
use pdcx_core::{Error, ErrorKind, Result};
use pdcx_transport::cluster::{encode_hex, load_or_create_secret, ClusterFile, ServerEntry};
use pdcx_transport::Conn;
use std::path::Path;
use std::time::{Duration, Instant};

/// (rank, size) from the first launcher whose variables are set, with its name.
pub fn rank_from_env() -> Option<(u32, u32, &'static str)> {
    let pairs = [
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI"),
        ("PMI_RANK", "PMI_SIZE", "PMI"),
        ("PMIX_RANK", "PMIX_SIZE", "PMIx"),
        ("SLURM_PROCID", "SLURM_NTASKS", "Slurm"),
    ];
    for (r, s, who) in pairs {
        if let (Ok(r), Ok(s)) = (std::env::var(r), std::env::var(s)) {
            if let (Ok(r), Ok(s)) = (r.trim().parse::<u32>(), s.trim().parse::<u32>()) {
                if s > 0 && r < s {
                    return Some((r, s, who));
                }
            }
        }
    }
    None
}

pub use pdcx_transport::cluster::hostname;

/// Rank 0: waits until every rank's file names a server that answers with the right rank,
/// then publishes the cluster file. Files left by a crashed run name dead addresses and are
/// simply waited past until the new server overwrites them.
pub fn assemble_cluster(root: &Path, size: u32, timeout: Duration) -> Result<ClusterFile> {
    let secret = load_or_create_secret(root)?;
    let deadline = Instant::now() + timeout;
    let mut entries: Vec<Option<ServerEntry>> = vec![None; size as usize];
    loop {
        for rank in 0..size {
            if entries[rank as usize].is_some() {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(rank_file(root, rank)) else {
                continue;
            };
            let Ok(entry) = serde_json::from_str::<ServerEntry>(&text) else {
                continue;
            };
            // Rank 0 asks as the server it is (a peer handshake proves the rank too).
            if let Ok(conn) = Conn::connect_as(&entry.addr, &secret, Role::Peer { rank: 0 }) {
                if conn.rank == rank {
                    entries[rank as usize] = Some(entry);
                }
            }
        }
        if entries.iter().all(Option::is_some) {
            break;
        }
        if Instant::now() > deadline {
            let missing: Vec<u32> = (0..size)
                .filter(|r| entries[*r as usize].is_none())
                .collect();
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!("servers {missing:?} did not come up within {timeout:?}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let cf = ClusterFile {
        version: 1,
        size,
        secret: encode_hex(&secret),
        servers: entries
            .into_iter()
            .map(|e| e.expect("all present"))
            .collect(),
    };
    cf.store(root)?;
    if !crate::users::Users::of_root(root)?.is_empty() {
        cf.store_public(root)?;
    }
    Ok(cf)
}
