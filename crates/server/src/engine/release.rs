//! What a holder tells an object's owner about the writes it holds of the owner's objects
//! (`PeerRequest::Released`). An owner records a row per write another server holds
//! (`region_map`) and a token per deferred write (`region_tokens`); without this both grew by
//! one row per write for good. The holder knows when each may go:
//!
//! - a write it is dropping because its own newer writes hide it (`drop.rs`): reads still
//!   reach the region through the newer writes' rows, which name the same holder. The owner
//!   is told *before* the drop, with the versions the drop breaks (`meta/dropped.rs`), which
//!   it records durably before answering: a version read at the owner is then refused, never
//!   answered without the dropped write. An owner that cannot be reached keeps its writes
//!   held until a later pass;
//! - a token below its oldest live log segment (`DataStore::settled_token_bound`), told after
//!   each compaction pass ([`release_to_owners`](Engine::release_to_owners)).

use super::*;

/// What a holder last told each owner.
#[derive(Default)]
pub(super) struct Releases {
    /// Per owner: the token bound it was last told.
    told: HashMap<u32, u64>,
    /// Rows the owners forgot when told of drops, since `release_to_owners` last reported.
    forgotten: u64,
}

impl Engine {
    /// Tells `owner` that this server is dropping `writes` of its objects, which breaks the
    /// versions `gone`; returns once the owner recorded them.
    pub(super) fn tell_owner(
        &self,
        owner: u32,
        writes: &[(ObjectId, Vec<u64>)],
        gone: &[(ObjectId, u64, u64)],
    ) -> Result<()> {
        let bound = self.store.settled_token_bound();
        let n = self.peers()?.released(owner, writes, gone, bound)?;
        let mut r = self.releases.lock().unwrap_or_else(|p| p.into_inner());
        r.told.insert(owner, bound);
        r.forgotten += n;
        Ok(())
    }

    /// Tells each of `owners` (every other server) which of this server's deferred-write
    /// tokens are settled, when that changed. Returns how many rows the owners forgot: those
    /// tokens, and the rows of writes dropped since the last call. An owner that cannot be
    /// reached is told on a later call.
    pub fn release_to_owners(&self, owners: impl Iterator<Item = u32>) -> u64 {
        let bound = self.store.settled_token_bound();
        let mut forgot = std::mem::take(
            &mut self
                .releases
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .forgotten,
        );
        for owner in owners.filter(|&o| o != self.rank) {
            let told = self
                .releases
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .told
                .get(&owner)
                == Some(&bound);
            if told {
                continue;
            }
            match self
                .peers()
                .and_then(|p| p.released(owner, &[], &[], bound))
            {
                Ok(n) => {
                    forgot += n;
                    self.releases
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .told
                        .insert(owner, bound);
                }
                Err(e) => {
                    tracing::debug!("server {owner} not told of settled tokens: {}", e.message)
                }
            }
        }
        forgot
    }

    /// Owner side of `Released` from `holder`: records the versions `gone` (durably, first),
    /// then forgets the region-map rows of `writes` that `holder` holds (rows of other holders
    /// are left alone) and `holder`'s tokens below `tokens_below`. Returns how many rows went.
    pub fn forget_released(
        &self,
        holder: u32,
        writes: &[(ObjectId, Vec<u64>)],
        gone: &[(ObjectId, u64, u64)],
        tokens_below: u64,
    ) -> Result<u64> {
        for id in writes.iter().map(|w| w.0).chain(gone.iter().map(|g| g.0)) {
            if self.meta.owner_of(id) != self.rank {
                return Err(Error::invalid(format!(
                    "server {holder} released writes of object {id:#x}, which server {} does not own",
                    self.rank
                )));
            }
        }
        if let Some((id, from, to)) = gone.iter().find(|g| g.1 >= g.2) {
            return Err(Error::invalid(format!(
                "server {holder} released versions {from}..{to} of object {id:#x}: an empty range"
            )));
        }
        self.meta.add_dropped_versions(gone)?;
        let mut keys = Vec::new();
        {
            let mut remote = self.remote.write().unwrap_or_else(|p| p.into_inner());
            for (id, seqs) in writes {
                let dropping: HashSet<u64> = seqs.iter().copied().collect();
                if let Some(list) = remote.get_mut(id) {
                    list.retain(|r| {
                        let drop = r.holder == holder && dropping.contains(&r.seq);
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
