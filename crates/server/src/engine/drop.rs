//! Dropping the writes no read needs any more. Their log bytes become garbage that
//! compaction (`datastore/compact.rs`) and retirement free.
//!
//! - A write is **hidden** when newer writes cover every element of it: no read of the
//!   latest data reaches it. Each server drops the hidden writes it holds, hidden by newer
//!   writes it holds ([`drop_hidden_writes`](Engine::drop_hidden_writes), the
//!   checkpoint-overwrite pattern). Byte streams keep theirs until their versions are home
//!   (`drop_shadowed`, `homecopy.rs`), since a version read needs older writes: there the
//!   owner decides, here, in the region map and on the holders.
//! - Below a byte stream's base every write goes ([`drop_below`](Engine::drop_below)).
//! - A deleted object's writes go on every holder (`drop_remote_writes`, told by the owner).

use super::read::Coverage;
use super::retention::{epoch_of, Retention};
use super::*;
use pdcx_core::cover::hidden_by;
use pdcx_core::model::Tags;
use std::collections::BTreeMap;

/// Objects with more writes than this are checked for writes an identical newer region
/// hides only (O(n)), not for any cover by the union of newer ones (O(n^2) box cuts).
const FULL_COVER_CHECK_MAX: usize = 256;

/// One write of an object, wherever held: (seq, holder, region).
pub(super) type Write = (u64, u32, Region);

impl Engine {
    /// Once version `seq_below` of byte stream `id` (owned here) is at its home, no
    /// read ever needs an older version again. Drops every write numbered below it that newer
    /// writes below it cover entirely (an epoch rewritten by the next: the checkpoint
    /// pattern) — here, in the region map and on the servers holding them — and frees the log
    /// segments left holding nothing. Returns how many were dropped. A holder that cannot be
    /// reached keeps its shadowed extents (harmless: they stay shadowed).
    pub fn drop_shadowed(&self, id: ObjectId, seq_below: u64) -> Result<usize> {
        self.drop_writes_below(id, seq_below, false)
    }

    /// Once version `seq_below` of byte stream `id` (owned here) is its base (read
    /// from its home, see `streambase.rs`), drops every write numbered below it, here, in the
    /// region map and on its holders, and frees the log segments left holding nothing.
    /// Returns how many were dropped; a holder that cannot be reached keeps its writes (reads
    /// leave them out) and the next call (at the next start) tries again.
    pub fn drop_below(&self, id: ObjectId, seq_below: u64) -> Result<usize> {
        self.drop_writes_below(id, seq_below, true)
    }

    /// Notes that objects got writes held here: the next pass looks at them for hidden ones.
    pub(super) fn touch(&self, ids: impl Iterator<Item = ObjectId>) {
        let mut t = self.touched.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(set) = t.as_mut() {
            set.extend(ids);
        }
    }

    /// Drops the writes held here that newer writes held here hide, for every object that is
    /// not a byte stream (see the module notes); compaction's first step. Each server decides
    /// for the writes it holds, from its own index: the owner's region map may name writes
    /// whose holder never committed them (the owner recorded the region, then crashed before
    /// answering), and such a row must never be what hides a write that is there. Looks at
    /// the objects written here since the last call (every object on the first call after
    /// start, or with `all`). Does not retire segments (the caller does, once). Returns how
    /// many writes were dropped.
    pub fn drop_hidden_writes(&self, all: bool) -> Result<u64> {
        let touched = self
            .touched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(HashSet::new());
        let touched = if all { None } else { touched };
        let now = crate::datastore::unix_now();
        let mut plans: Vec<HiddenPlan> = Vec::new();
        let mut containers = ContainerTags::default();
        for (id, n) in self.store.extent_counts() {
            if n < 2 || !touched.as_ref().is_none_or(|t| t.contains(&id)) {
                continue;
            }
            let extents = self.store.extents_of(id);
            // First with the tags as cached here (most objects have nothing to drop), then,
            // for an object of another owner, with its tags as they are now: a version named
            // since would be kept. (Were the cache stale, the version would be refused when
            // read, never read wrong: the owner records what a drop breaks first.)
            // A container's policy only keeps more, so it is looked up (once per container
            // and pass) only for an object its own tags would drop writes of.
            let mut plan_with = |fresh: bool| match self.object_meta(id, fresh) {
                // A policy that cannot be read keeps everything.
                Ok(obj) if !obj.is_byte_stream() => Retention::of(&obj)
                    .and_then(|policy| hidden_plan(id, self.rank, &extents, &policy, now))
                    .and_then(|plan| {
                        if obj.containers.is_empty() {
                            return Some(plan);
                        }
                        let tags = containers.of(self, &obj.containers)?;
                        let policy = Retention::of_in(&obj, &tags.iter().collect::<Vec<_>>())?;
                        hidden_plan(id, self.rank, &extents, &policy, now)
                    }),
                _ => None,
            };
            let plan = match plan_with(false) {
                Some(_) if self.meta.owner_of(id) != self.rank => plan_with(true),
                plan => plan,
            };
            plans.extend(plan);
        }
        if plans.is_empty() {
            return Ok(0);
        }
        // The writes that hide them may be `memory` commits whose records are not durable yet,
        // while a dropped write's row deletion can reach the disk first (the kernel writes the
        // metadata WAL back when it likes): a power cut then loses both, the older write
        // acknowledged at `local` included (the crash harness's subset cuts found it). Every
        // write the index showed above has its record written, so one log sync here makes
        // them all durable before anything is dropped.
        self.store.sync_log_only()?;
        // The versions a drop breaks are recorded at the owner, durably, before the drop, so
        // a read of one is refused rather than answered without the dropped write.
        let mut by_owner: HashMap<u32, Vec<HiddenPlan>> = HashMap::new();
        for plan in plans {
            by_owner
                .entry(self.meta.owner_of(plan.id))
                .or_default()
                .push(plan);
        }
        let mut dropped = 0u64;
        for (owner, plans) in by_owner {
            let gone: Vec<(ObjectId, u64, u64)> =
                plans.iter().flat_map(|p| p.gone.iter().copied()).collect();
            let told = if owner == self.rank {
                self.meta.add_dropped_versions(&gone)
            } else {
                let writes: Vec<(ObjectId, Vec<u64>)> = plans
                    .iter()
                    .map(|p| (p.id, p.seqs.iter().copied().collect()))
                    .collect();
                self.tell_owner(owner, &writes, &gone)
            };
            if let Err(e) = told {
                tracing::warn!(
                    "keeping {} objects' hidden writes: their owner (server {owner}) did not record the versions dropping them breaks: {}",
                    plans.len(),
                    e.message
                );
                continue;
            }
            for plan in plans {
                dropped += self.store.drop_extents(plan.id, &plan.seqs)? as u64;
            }
        }
        Ok(dropped)
    }

    /// [`drop_writes`](Self::drop_writes), then frees the segments left holding nothing.
    pub(super) fn drop_writes_below(
        &self,
        id: ObjectId,
        seq_below: u64,
        all: bool,
    ) -> Result<usize> {
        let dropped = self.drop_writes(id, seq_below, all);
        if matches!(dropped, Ok(n) if n > 0) {
            self.store.retire_flushed()?;
        }
        dropped
    }

    /// Drops the writes of `id` numbered below `seq_below` that newer ones below it hide, or
    /// all of them (`all`): here, on their holders and in the region map.
    fn drop_writes(&self, id: ObjectId, seq_below: u64, all: bool) -> Result<usize> {
        let mut writes: Vec<Write> = self
            .store
            .extents_of(id)
            .into_iter()
            .filter(|e| e.seq < seq_below)
            .map(|e| (e.seq, self.rank, e.region))
            .collect();
        {
            let remote = self.remote.read().unwrap_or_else(|p| p.into_inner());
            writes.extend(
                remote
                    .get(&id)
                    .into_iter()
                    .flatten()
                    .filter(|r| r.seq < seq_below)
                    .map(|r| (r.seq, r.holder, r.region.clone())),
            );
        }
        let mut dead: HashMap<u32, Vec<u64>> = HashMap::new();
        for (seq, holder) in if all {
            writes.iter().map(|w| (w.0, w.1)).collect()
        } else {
            hidden(&mut writes)
        } {
            dead.entry(holder).or_default().push(seq);
        }
        let mut dropped = 0;
        if let Some(mine) = dead.remove(&self.rank) {
            dropped += self.store.drop_extents(id, &mine.into_iter().collect())?;
        }
        let mut rows = Vec::new();
        let mut unreached = None;
        for (holder, seqs) in dead {
            match self.peers().and_then(|p| p.drop_extents(holder, id, &seqs)) {
                Ok(n) => dropped += n as usize,
                Err(e) => {
                    tracing::warn!(
                        "server {holder} keeps {} writes of {id:#x}: {}",
                        seqs.len(),
                        e.message
                    );
                    unreached.get_or_insert(e);
                    continue;
                }
            }
            rows.extend(seqs.iter().map(|&s| (id, s)));
            self.forget_remote(id, holder, &seqs);
        }
        if !rows.is_empty() {
            self.meta.delete_region_rows(&rows)?;
        }
        match unreached {
            // Below a base they are garbage to be dropped later: say so.
            Some(e) if all => Err(e),
            _ => Ok(dropped),
        }
    }

    /// Forgets, in the owner's in-memory region map, writes `seqs` of `id` held by `holder`
    /// (their rows are deleted by the caller).
    pub(super) fn forget_remote(&self, id: ObjectId, holder: u32, seqs: &[u64]) {
        let gone: HashSet<u64> = seqs.iter().copied().collect();
        if let Some(v) = self
            .remote
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&id)
        {
            v.retain(|r| r.holder != holder || !gone.contains(&r.seq));
        }
    }

    /// Drops a deleted object's writes on the other servers holding them (the owner has
    /// forgotten its own, `forget`): their log bytes become garbage there too. A holder that
    /// cannot be reached keeps them (a known gap: nothing asks it again). `held`: (holder,
    /// seqs).
    pub(super) fn drop_remote_writes(&self, id: ObjectId, held: HashMap<u32, Vec<u64>>) {
        for (holder, seqs) in held {
            if let Err(e) = self.peers().and_then(|p| p.drop_extents(holder, id, &seqs)) {
                tracing::warn!(
                    "server {holder} keeps {} writes of deleted object {id:#x}: {}",
                    seqs.len(),
                    e.message
                );
            }
        }
    }
}

/// What one object's pass drops: its hidden writes held here, and the versions that breaks.
struct HiddenPlan {
    id: ObjectId,
    seqs: HashSet<u64>,
    /// (id, from, to) per epoch: versions `from <= v < to` may miss a dropped write.
    gone: Vec<(ObjectId, u64, u64)>,
}

/// The writes of `id` held here (`extents`) that newer ones hide within their retention epoch
/// (`retention.rs`: only writes up to the first retained version after a write may hide it),
/// and the versions dropping them breaks: per epoch, from its oldest dropped write up to (not
/// including) its newest write (a retained version is never inside: it ends its epoch).
/// None: nothing to drop.
fn hidden_plan(
    id: ObjectId,
    rank: u32,
    extents: &[crate::datastore::Extent],
    policy: &Retention,
    now: f64,
) -> Option<HiddenPlan> {
    let times: Vec<(u64, f64)> = extents.iter().map(|e| (e.seq, e.since)).collect();
    let bounds = policy.boundaries(&times, now);
    let mut epochs: BTreeMap<u64, Vec<Write>> = BTreeMap::new();
    for e in extents {
        epochs
            .entry(epoch_of(&bounds, e.seq))
            .or_default()
            .push((e.seq, rank, e.region.clone()));
    }
    let mut seqs = HashSet::new();
    let mut gone = Vec::new();
    for (_, mut writes) in epochs {
        let newest = writes.iter().map(|w| w.0).max().unwrap_or(0);
        let hidden = hidden(&mut writes);
        if let Some(oldest) = hidden.iter().map(|w| w.0).min() {
            // One range per epoch: merged across epochs it would cover the retained version
            // between them.
            gone.push((id, oldest, newest));
            seqs.extend(hidden.into_iter().map(|w| w.0));
        }
    }
    (!seqs.is_empty()).then_some(HiddenPlan { id, seqs, gone })
}

/// The hidden writes among `writes` (sorted here, newest first): (seq, holder) of each one
/// that newer writes cover entirely.
pub(super) fn hidden(writes: &mut [Write]) -> Vec<(u64, u32)> {
    writes.sort_unstable_by_key(|w| std::cmp::Reverse(w.0));
    let mut out = Vec::new();
    if writes.iter().all(|w| w.2.ndim() == 1) {
        // 1-d: one sweep over the merged intervals of newer writes (exact, O(n log n)).
        let mut covered = Coverage::default();
        for (seq, holder, r) in writes.iter() {
            let (start, end) = (r.offset[0], r.end(0));
            if covered.contains(start, end) {
                out.push((*seq, *holder));
            } else {
                covered.insert(start, end);
            }
        }
    } else if writes.len() <= FULL_COVER_CHECK_MAX {
        for (i, (seq, holder, r)) in writes.iter().enumerate() {
            if hidden_by(r, writes[..i].iter().map(|w| &w.2)) {
                out.push((*seq, *holder));
            }
        }
    } else {
        let mut seen: HashSet<&Region> = HashSet::new();
        for (seq, holder, r) in writes.iter() {
            if !seen.insert(r) {
                out.push((*seq, *holder));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(seq: u64, offset: &[u64], count: &[u64]) -> Write {
        (
            seq,
            0,
            Region::new(offset.to_vec(), count.to_vec()).unwrap(),
        )
    }

    fn seqs(mut writes: Vec<Write>) -> Vec<u64> {
        let mut s: Vec<u64> = hidden(&mut writes).into_iter().map(|x| x.0).collect();
        s.sort_unstable();
        s
    }

    #[test]
    fn only_writes_newer_ones_cover_are_hidden() {
        // 1-d: 1 is covered by 3 and 4 together, 2 sticks out past them.
        assert_eq!(
            seqs(vec![
                w(1, &[0], &[10]),
                w(2, &[5], &[20]),
                w(3, &[0], &[6]),
                w(4, &[6], &[4])
            ]),
            vec![1]
        );
        // A newer write never hides by an older one.
        assert!(seqs(vec![w(1, &[0], &[10]), w(2, &[0], &[4])]).is_empty());
        // 2-d: the checkpoint pattern, and halves.
        assert_eq!(
            seqs(vec![
                w(1, &[0, 0], &[4, 4]),
                w(2, &[0, 0], &[4, 4]),
                w(3, &[0, 0], &[4, 4])
            ]),
            vec![1, 2]
        );
        assert_eq!(
            seqs(vec![
                w(1, &[0, 0], &[4, 4]),
                w(2, &[0, 0], &[2, 4]),
                w(3, &[2, 0], &[2, 3])
            ]),
            Vec::<u64>::new()
        );
        // Many 2-d writes: identical regions only.
        let mut many: Vec<Write> = (0..300).map(|i| w(i + 1, &[i, 0], &[1, 8])).collect();
        many.push(w(1000, &[0, 0], &[1, 8]));
        assert_eq!(seqs(many), vec![1]);
    }
}

/// Containers' tags, looked up once per compaction pass (None: the lookup failed).
#[derive(Default)]
pub(super) struct ContainerTags(HashMap<String, Option<Tags>>);

impl ContainerTags {
    /// The tags of containers `names` (a container gone has none); None when one cannot be
    /// read now (then the object keeps everything this pass).
    pub(super) fn of(&mut self, engine: &Engine, names: &[String]) -> Option<Vec<Tags>> {
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let tags = self
                .0
                .entry(name.clone())
                .or_insert_with(|| engine.container_tags(name).ok());
            out.push(tags.clone()?);
        }
        Some(out)
    }
}

impl Engine {
    /// Container `name`'s tags, from the server its name hashes to (none if it is gone).
    fn container_tags(&self, name: &str) -> Result<Tags> {
        let owner = pdcx_core::model::owner_of_name(name, self.meta.size);
        let found = if owner == self.rank {
            match self.meta.get_container(name) {
                Ok(c) => Some(c.tags),
                Err(e) if e.kind == pdcx_core::ErrorKind::NotFound => None,
                Err(e) => return Err(e),
            }
        } else {
            self.peers()?
                .container_tags(owner, &[name.to_string()])?
                .pop()
                .flatten()
        };
        Ok(found.unwrap_or_default())
    }
}
