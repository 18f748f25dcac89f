//! The logs of servers a resize retired (`ROOT/retired/ID/server-NNNN/log`), removed by the
//! server that holds the references into them (`HOLDER`, kept by `resize/holdings.rs`) once
//! none is left: every adopted extent moved into its log (`engine/adopted.rs`) or deleted.
//! A log found unreferenced is removed at the next background pass, not at once: a read that
//! resolved its extent before the move may still be opening the old file (`pdcx compact`, an
//! operator's request, removes it at once).

use crate::datastore::DataStore;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The file in a retired server's directory naming the server that holds its references.
pub const HOLDER: &str = "HOLDER";

/// What a server remembers between passes.
#[derive(Debug, Default)]
pub struct RetiredLogs {
    unreferenced: Mutex<HashSet<PathBuf>>,
}

impl RetiredLogs {
    /// Removes the retired directories under `root` that server `rank` holds and that no
    /// extent of `store` has read from since the previous call (`at_once`: since now);
    /// returns how many.
    pub fn remove_unreferenced(
        &self,
        root: &Path,
        rank: u32,
        store: &DataStore,
        at_once: bool,
    ) -> usize {
        let mut seen = self.unreferenced.lock().unwrap_or_else(|p| p.into_inner());
        let mut now = HashSet::new();
        let mut removed = 0;
        for dir in held_by(root, rank) {
            if !store.objects_with_refs_under(&dir).is_empty() {
                continue;
            }
            if !at_once && !seen.contains(&dir) {
                now.insert(dir);
                continue;
            }
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {
                    removed += 1;
                    tracing::info!(dir = %dir.display(), "removed a retired server's log: its data is in this server's log now");
                    // The resize's folder, and `retired` itself, once empty.
                    if let Some(parent) = dir.parent() {
                        let _ = std::fs::remove_dir(parent);
                        let _ = parent.parent().map(std::fs::remove_dir);
                    }
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), "could not remove a retired server's log: {e}")
                }
            }
        }
        *seen = now;
        removed
    }
}

/// The retired server directories whose `HOLDER` names `rank`.
fn held_by(root: &Path, rank: u32) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(resizes) = std::fs::read_dir(root.join("retired")) else {
        return out;
    };
    for resize in resizes.flatten() {
        let Ok(servers) = std::fs::read_dir(resize.path()) else {
            continue;
        };
        for server in servers.flatten() {
            let holder = std::fs::read_to_string(server.path().join(HOLDER));
            if holder.is_ok_and(|h| h.trim().parse::<u32>().ok() == Some(rank)) {
                out.push(server.path());
            }
        }
    }
    out
}
