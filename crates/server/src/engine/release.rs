//! Keeping an owner's location tables bounded. An owner records a row per write another server
//! holds of its objects (`region_map`) and per deferred write a token (`region_tokens`), and
//! without this both grew by one row per write for good. The holder knows when each may go:
//!
//! - a write it dropped because its own newer writes hid it (`drop.rs`): reads still reach
//!   the region through the newer writes' rows, which name the same holder;
//! - a token below its oldest live log segment (`DataStore::settled_token_bound`).
//!
//! So the holder tells the owner (`PeerRequest::Released`) after each compaction pass, and
//! the owner deletes those rows ([`forget_released`](Engine::forget_released)). An owner that
//! cannot be reached is told on a later pass; what a holder crash loses before it told the
//! owner stays as rows (harmless: a row without its write is read as "nothing there").

use super::*;

/// Writes kept for an owner that could not be told; past this the oldest are given up (their
/// rows then stay at the owner: space, never wrong data).
const PENDING_MAX: usize = 1 << 20;

/// Objects per `Released` request (far below the frame body limit).
const WRITES_PER_REQUEST: usize = 4096;

/// What a holder has yet to tell each owner.
#[derive(Default)]
pub(super) struct Releases {
    /// Per owner: (object, seqs) dropped here and not yet reported.
    pending: HashMap<u32, Vec<(ObjectId, Vec<u64>)>>,
    /// Per owner: the token bound it was last told.
    told: HashMap<u32, u64>,
}

impl Engine {
    /// Notes writes of `id` (owned elsewhere) dropped here, for its owner's next `Released`.
    pub(super) fn note_released(&self, id: ObjectId, seqs: Vec<u64>) {
        let owner = owner_of_id(id);
        if owner == self.rank || seqs.is_empty() {
            return;
        }
        let mut r = self.releases.lock().unwrap_or_else(|p| p.into_inner());
        let list = r.pending.entry(owner).or_default();
        list.push((id, seqs));
        let held: usize = list.iter().map(|(_, s)| s.len()).sum();
        if held > PENDING_MAX {
            let excess = list.len() / 2;
            tracing::warn!(
                "server {owner} has not been reachable to forget {held} dropped writes; \
                 giving up on reporting the oldest {excess} objects' (their rows stay there)"
            );
            list.drain(..excess);
        }
    }

    /// Tells each of `owners` (every other server) which of its writes this server dropped and
    /// which of this server's tokens are settled, when there is news. Returns how many rows
    /// the owners forgot; an owner that cannot be reached is told on a later call.
    pub fn release_to_owners(&self, owners: impl Iterator<Item = u32>) -> u64 {
        let bound = self.store.settled_token_bound();
        let mut forgot = 0;
        for owner in owners.filter(|&o| o != self.rank) {
            let writes = {
                let mut r = self.releases.lock().unwrap_or_else(|p| p.into_inner());
                let writes = r.pending.remove(&owner).unwrap_or_default();
                if writes.is_empty() && r.told.get(&owner) == Some(&bound) {
                    continue;
                }
                writes
            };
            let mut sent = 0;
            let mut failed = None;
            for chunk in writes.chunks(WRITES_PER_REQUEST) {
                match self.peers().and_then(|p| p.released(owner, chunk, bound)) {
                    Ok(n) => {
                        forgot += n;
                        sent += chunk.len();
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            if writes.is_empty() {
                match self.peers().and_then(|p| p.released(owner, &[], bound)) {
                    Ok(n) => forgot += n,
                    Err(e) => failed = Some(e),
                }
            }
            let mut r = self.releases.lock().unwrap_or_else(|p| p.into_inner());
            match failed {
                None => {
                    r.told.insert(owner, bound);
                }
                Some(e) => {
                    tracing::debug!("server {owner} not told of released writes: {}", e.message);
                    let mut rest = writes[sent..].to_vec();
                    rest.extend(r.pending.remove(&owner).unwrap_or_default());
                    r.pending.insert(owner, rest);
                }
            }
        }
        forgot
    }

    /// Owner side of `Released` from `holder`: forgets the region-map rows of `writes` that
    /// `holder` holds (rows of other holders are left alone) and `holder`'s tokens below
    /// `tokens_below`. Returns how many rows went.
    pub fn forget_released(
        &self,
        holder: u32,
        writes: &[(ObjectId, Vec<u64>)],
        tokens_below: u64,
    ) -> Result<u64> {
        let mut keys = Vec::new();
        {
            let mut remote = self.remote.write().unwrap_or_else(|p| p.into_inner());
            for (id, seqs) in writes {
                if owner_of_id(*id) != self.rank {
                    return Err(Error::invalid(format!(
                        "server {holder} released writes of object {id:#x}, which server {} does not own",
                        self.rank
                    )));
                }
                let gone: HashSet<u64> = seqs.iter().copied().collect();
                if let Some(list) = remote.get_mut(id) {
                    list.retain(|r| {
                        let drop = r.holder == holder && gone.contains(&r.seq);
                        if drop {
                            keys.push((*id, r.seq));
                        }
                        !drop
                    });
                    if list.is_empty() {
                        remote.remove(id);
                    }
                }
            }
        }
        let tokens = self.meta.forget_released(holder, &keys, tokens_below)?;
        Ok(keys.len() as u64 + tokens)
    }
}
