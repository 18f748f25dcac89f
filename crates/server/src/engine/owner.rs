//! The owner's side: registrations of regions committed by holders, and which servers hold
//! an object's data.

use super::*;

impl Engine {
    /// Owner side of a peer's `Register`: records where the regions live and gives each its
    /// sequence number (new items consecutive, in request order). A deferred write (with a
    /// token) registered before gets its number back; one whose object is gone gets None.
    /// Anything wrong with a strong item (not ours, unknown, out of bounds) fails the request.
    pub fn register_batch(&self, holder: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        self.register_batch_with(holder, items, true)
    }

    /// [`register_batch`](Self::register_batch); with `durable` false (the strong writes of a
    /// `memory` commit, `PeerRequest::RegisterMemory`) the answer does not wait for the WAL
    /// fsync that makes the region-map rows durable: they are written (visible, and kept by a
    /// kill -9) and fsynced in the background; the numbers stay below the durable high-water
    /// mark (`Metadata::register_regions`), so a crash never reuses one. Items with a token
    /// (deferred writes) always make the registration durable.
    pub fn register_batch_with(
        &self,
        holder: u32,
        items: &[RegisterItem],
        durable: bool,
    ) -> Result<Vec<Option<u64>>> {
        self.counters.received.fetch_add(1, Ordering::Relaxed);
        self.counters
            .regions
            .fetch_add(items.len() as u64, Ordering::Relaxed);
        let mut live: Vec<Registration<'_>> = Vec::new();
        let mut at: Vec<usize> = Vec::new();
        for (k, item) in items.iter().enumerate() {
            if self.meta.owner_of(item.id) != self.rank {
                return Err(Error::invalid(format!(
                    "server {holder} registered object {:#x} with server {}, which does not own it",
                    item.id, self.rank
                )));
            }
            match self.meta.object(item.id) {
                Ok(obj) => item.region.check_within(&obj.dims)?,
                // A deferred write may outlive its object: answer None, the holder drops it.
                Err(e) if e.kind == ErrorKind::NotFound && item.token.is_some() => continue,
                Err(e) => return Err(e),
            }
            live.push((item.id, &item.region, item.token));
            at.push(k);
        }
        let mut out = vec![None; items.len()];
        if live.is_empty() {
            return Ok(out);
        }
        let durable = durable || live.iter().any(|(_, _, token)| token.is_some());
        let (got, synced) = self.store.record_registrations(holder, &live, durable)?;
        if !synced {
            // Durable within about one background fsync (and 5 ms), off this request's path.
            self.meta.kick_syncer();
            self.counters.unsynced.fetch_add(1, Ordering::Relaxed);
        }
        let mut remote = self.remote.write().unwrap_or_else(|p| p.into_inner());
        for ((&k, (id, region, _)), (seq, new)) in at.iter().zip(&live).zip(got) {
            out[k] = Some(seq);
            if new {
                remote.entry(*id).or_default().push(RemoteExtent {
                    seq,
                    holder,
                    region: (*region).clone(),
                });
            }
        }
        Ok(out)
    }

    /// Whether any committed data of `id` (owned here) exists, here or on other holders.
    pub(crate) fn has_data(&self, id: ObjectId) -> bool {
        self.store.holds_any(id)
            || self
                .remote
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(&id)
                .is_some_and(|v| !v.is_empty())
    }

    /// Other servers holding committed data of `id` inside `region`.
    pub(crate) fn remote_holders(&self, id: ObjectId, region: &Region) -> Vec<u32> {
        let remote = self.remote.read().unwrap_or_else(|p| p.into_inner());
        let mut holders: Vec<u32> = remote
            .get(&id)
            .map(|v| {
                v.iter()
                    .filter(|r| r.holder != self.rank && r.region.intersect(region).is_some())
                    .map(|r| r.holder)
                    .collect()
            })
            .unwrap_or_default();
        holders.sort_unstable();
        holders.dedup();
        holders
    }

    /// Forgets every visible extent of a deleted object, here, in the region map and on the
    /// other servers holding its writes (`drop_remote_writes`): their log bytes become
    /// garbage, which compaction frees.
    pub fn forget(&self, id: ObjectId) -> usize {
        let held = self
            .remote
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
            .unwrap_or_default();
        let mut by_holder: HashMap<u32, Vec<u64>> = HashMap::new();
        for r in held.iter().filter(|r| r.holder != self.rank) {
            by_holder.entry(r.holder).or_default().push(r.seq);
        }
        let n = self.store.forget(id);
        self.drop_remote_writes(id, by_holder);
        n + held.len()
    }
}
