//! Tier homes: loading them at open, recording them durably, publishing them in the index, and
//! the views of the index the flusher's policy works from.

use super::index::Extent;
use super::{crash_point, DataStore};
use crate::meta::{HomeRow, Metadata};
use crate::tiering::{Home, Tiering};
use pdcx_core::{Error, ObjectId, Result};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Durable homes by extent, resolved against the configured tiers (and counted as shard
/// references). A home on a tier the config no longer declares is an error: that data would be
/// unreachable.
pub(super) fn load(
    meta: &Metadata,
    tiering: Option<&Tiering>,
) -> Result<HashMap<(ObjectId, u64), Home>> {
    let rows = meta.load_homes()?;
    let mut out = HashMap::with_capacity(rows.len());
    for r in rows {
        let tier = tiering.and_then(|t| t.tier_index(&r.tier)).ok_or_else(|| {
            Error::invalid(format!(
                "extent {} of object {:#x} lives on tier {:?}, which the config (pdcx.toml) does not declare; restore that tier's entry",
                r.seq, r.id, r.tier
            ))
        })?;
        let home = Home {
            tier,
            codec: r.codec,
            stored_len: r.stored_len,
            shard: r.blob,
            offset: r.offset,
        };
        if let Some(t) = tiering {
            t.acquire(&home);
        }
        out.insert((r.id, r.seq), home);
    }
    Ok(out)
}

impl DataStore {
    /// The flusher's work list: (object, extent) of every visible extent without a home, in
    /// log order (the flusher reads the log sequentially), and the (tier, blob) of every home
    /// in use (for the sweep of blobs a crash left unreferenced).
    #[allow(clippy::type_complexity)]
    pub fn extents_to_flush(
        &self,
        t: &Tiering,
    ) -> (Vec<(ObjectId, Extent)>, HashSet<(usize, String)>) {
        let mut todo = Vec::new();
        let mut referenced = HashSet::new();
        for (id, v) in self.index().iter() {
            for e in v {
                match &e.home {
                    // Extents read by reference stay in their files (`refs.rs`).
                    None if e.external.is_some() => {}
                    None => todo.push((*id, (**e).clone())),
                    Some(h) => {
                        referenced.insert((h.tier, t.blob_key(*id, e.seq, h)));
                    }
                }
            }
        }
        todo.sort_by_key(|(_, e)| (e.loc.segment, e.loc.offset));
        (todo, referenced)
    }

    /// Raw bytes of each of `ids`' extents per tier (for quotas).
    pub fn placed(&self, tiers: usize, ids: &HashSet<ObjectId>) -> HashMap<ObjectId, Vec<u64>> {
        let index = self.index();
        ids.iter()
            .map(|id| {
                let mut per = vec![0u64; tiers];
                for e in index.get(id).into_iter().flatten() {
                    if let Some(h) = &e.home {
                        per[h.tier] += e.loc.len;
                    }
                }
                (*id, per)
            })
            .collect()
    }

    /// Every extent whose home is on `tier`, with its object.
    pub fn homed_on(&self, tier: usize) -> Vec<(ObjectId, Extent)> {
        let mut out = Vec::new();
        for (id, v) in self.index().iter() {
            for e in v {
                if e.home.as_ref().is_some_and(|h| h.tier == tier) {
                    out.push((*id, (**e).clone()));
                }
            }
        }
        out
    }

    /// Records homes on durable tiers in the location tables and waits until the row is on
    /// stable storage: only then may the log copy go. Homes on memory tiers are not recorded
    /// (the copy dies with the process). Call after the blobs are on their tiers.
    pub fn record_homes(&self, t: &Tiering, homes: &[(ObjectId, u64, Home)]) -> Result<()> {
        // The statistics computed while encoding these extents go first: the homes' fsync
        // below covers them.
        self.write_pending_stats()?;
        let rows: Vec<HomeRow> = homes
            .iter()
            .filter(|(_, _, h)| t.is_durable(h.tier))
            .map(|(id, seq, h)| h.row(t, *id, *seq))
            .collect();
        if rows.is_empty() {
            return Ok(());
        }
        let ticket = self.meta.put_homes(&rows)?;
        self.meta.wait_durable(ticket)?;
        crash_point("flush.after_home_rows");
        Ok(())
    }

    /// Publishes new homes in the index, releasing the homes they replace (a moved extent's
    /// old blob, or its share of an old shard); a home for an extent that vanished meanwhile
    /// (object deleted) is undone.
    pub fn set_homes(&self, done: Vec<(ObjectId, u64, Home)>) {
        let Some(t) = &self.tiering else { return };
        let mut orphans = Vec::new();
        let mut replaced = Vec::new();
        {
            let mut index = self.index_mut();
            for (id, seq, home) in done {
                t.acquire(&home);
                match index
                    .get_mut(&id)
                    .and_then(|v| v.iter_mut().find(|x| x.seq == seq))
                {
                    Some(x) => {
                        let x = Arc::make_mut(x);
                        if let Some(old) = x.home.replace(home) {
                            replaced.push((id, seq, old));
                        }
                    }
                    None => orphans.push((id, seq, home)),
                }
            }
        }
        for (id, seq, old) in replaced {
            t.release(id, seq, &old);
        }
        for (id, seq, home) in orphans {
            t.release(id, seq, &home);
            let _ = self.meta.delete_homes(&[(id, seq)]);
        }
    }

    /// Deletes the tier copies and home rows of a deleted object's extents.
    pub(super) fn drop_tier_copies(&self, id: ObjectId, gone: &[Arc<Extent>]) {
        let Some(t) = &self.tiering else { return };
        let mut keys = Vec::new();
        for e in gone {
            if let Some(h) = &e.home {
                t.release(id, e.seq, h);
                keys.push((id, e.seq));
            }
        }
        if !keys.is_empty() {
            let _ = self.meta.delete_homes(&keys);
        }
    }
}
