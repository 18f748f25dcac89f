//! Writes this server holds of objects another server owns and deleted while this one could
//! not be told (the owner's `DropExtents` failed: this server was down or cut off): found by
//! asking the owners, a bounded number of objects per compaction pass in turn, and forgotten.

use super::Engine;
use pdcx_core::{ErrorKind, ObjectId};

impl Engine {
    /// Asks the owners of up to `budget` objects held here (continuing where the last call
    /// stopped) whether they still exist; forgets the writes of those an owner answers are
    /// gone (an owner that does not answer proves nothing). Returns the writes forgotten.
    pub fn forget_orphans(&self, budget: usize) -> usize {
        let mut ids: Vec<ObjectId> = self
            .store
            .extent_counts()
            .into_iter()
            .map(|(id, _)| id)
            .filter(|id| !self.meta.owns(*id))
            .collect();
        if ids.is_empty() {
            return 0;
        }
        ids.sort_unstable();
        let mut cursor = self.orphan_cursor.lock().unwrap_or_else(|p| p.into_inner());
        let start = ids.partition_point(|&id| id <= *cursor);
        let turn: Vec<ObjectId> = ids[start..]
            .iter()
            .chain(&ids[..start])
            .take(budget)
            .copied()
            .collect();
        let Ok(peers) = self.peers() else { return 0 };
        let mut forgotten = 0;
        for &id in &turn {
            match peers.object(id, true) {
                Err(e) if e.kind == ErrorKind::NotFound => {
                    let n = self.store.forget(id);
                    tracing::info!(
                        "forgot {n} writes of object {id:#x}: its owner deleted it while this server could not be told"
                    );
                    forgotten += n;
                }
                _ => {}
            }
        }
        if let Some(last) = turn.last() {
            *cursor = *last;
        }
        forgotten
    }
}
