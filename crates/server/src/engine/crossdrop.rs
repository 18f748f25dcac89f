//! Writes hidden only by newer writes another server holds (a region's writer moved to
//! another node: region-local placement). No holder sees such a write hidden (each decides
//! from its own index, `drop.rs`), so the owner, which sees every holder's writes, decides for
//! its objects. Its region map alone is not a witness (it may name a write whose holder never
//! committed it: the owner recorded the region and crashed before answering), so before
//! anything is dropped the holders of the writes that stay confirm they hold them, durably
//! (`PeerRequest::ConfirmHeld`: a log sync, then the writes in their index). Then, in order:
//! the versions the drop breaks are recorded (durably), the holders drop the hidden writes
//! (`DropExtents`), and the region map forgets them. A crash between steps leaves a hidden
//! write in place (dropped at a later pass) or a region-map row naming a write its holder
//! dropped (a read finds nothing there, and the newer writes cover its region).

use super::drop::{hidden, ContainerTags, Write};
use super::retention::{epoch_of, Retention};
use super::Engine;
use pdcx_core::{ObjectId, Result};
use std::collections::{BTreeMap, HashMap, HashSet};

impl Engine {
    /// For each object owned here whose writes are on more than one server: drops the writes
    /// newer writes of the same retention epoch hide, wherever they are held. An object with
    /// `pdcx.keep.seconds` is left to its holders (the owner does not know when a holder made
    /// a write visible). Returns the writes dropped.
    pub fn drop_cross_hidden(&self) -> Result<u64> {
        // Only objects with writes on two servers or more (a cheap look at the region map: an
        // object written once, or only by one holder, costs nothing more).
        let local: HashSet<ObjectId> = self
            .store
            .extent_counts()
            .into_iter()
            .map(|c| c.0)
            .collect();
        let ids: Vec<ObjectId> = self
            .remote
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(id, list)| {
                let first = list.first().map(|r| r.holder);
                list.iter().any(|r| Some(r.holder) != first)
                    || (!list.is_empty() && local.contains(id))
            })
            .map(|(id, _)| *id)
            .collect();
        let mut containers = ContainerTags::default();
        let mut dropped = 0u64;
        for id in ids {
            let Ok(obj) = self.meta.object(id) else {
                continue;
            };
            if obj.is_byte_stream() || obj.is_untyped() {
                continue;
            }
            let tags = containers.of(self, &obj.containers);
            let Some(policy) =
                tags.and_then(|t| Retention::of_in(&obj, &t.iter().collect::<Vec<_>>()))
            else {
                continue;
            };
            if policy.seconds.is_some() {
                continue;
            }
            dropped += self.drop_cross_hidden_of(id, &policy)?;
        }
        Ok(dropped)
    }

    fn drop_cross_hidden_of(&self, id: ObjectId, policy: &Retention) -> Result<u64> {
        let mut writes: Vec<Write> = self
            .store
            .extents_of(id)
            .into_iter()
            .map(|e| (e.seq, self.rank, e.region))
            .collect();
        {
            let remote = self.remote.read().unwrap_or_else(|p| p.into_inner());
            let mine: HashSet<u64> = writes.iter().map(|w| w.0).collect();
            writes.extend(
                remote
                    .get(&id)
                    .into_iter()
                    .flatten()
                    .filter(|r| !mine.contains(&r.seq))
                    .map(|r| (r.seq, r.holder, r.region.clone())),
            );
        }
        let holders: HashSet<u32> = writes.iter().map(|w| w.1).collect();
        if holders.len() < 2 {
            return Ok(0);
        }
        // The owner sees every write: its versions are exact, no stand-ins (`retention.rs`).
        let times: Vec<(u64, f64)> = writes.iter().map(|w| (w.0, 0.0)).collect();
        let bounds = policy.boundaries(&times, 0.0);
        let mut epochs: BTreeMap<u64, Vec<Write>> = BTreeMap::new();
        for w in writes {
            epochs.entry(epoch_of(&bounds, w.0)).or_default().push(w);
        }
        let mut dead: HashMap<u32, Vec<u64>> = HashMap::new();
        let mut stay: HashMap<u32, Vec<u64>> = HashMap::new();
        let mut gone = Vec::new();
        for (_, mut list) in epochs {
            let newest = list.iter().map(|w| w.0).max().unwrap_or(0);
            let hid: Vec<(u64, u32)> = hidden(&mut list);
            // Only what no holder would drop by itself: hidden by another holder's writes.
            let cross: Vec<(u64, u32)> = hid
                .iter()
                .copied()
                .filter(|&(seq, holder)| {
                    let mut own: Vec<Write> = list
                        .iter()
                        .filter(|w| w.1 == holder && w.0 >= seq)
                        .cloned()
                        .collect();
                    !hidden(&mut own).iter().any(|h| h.0 == seq)
                })
                .collect();
            let Some(oldest) = cross.iter().map(|w| w.0).min() else {
                continue;
            };
            let hid: HashSet<u64> = hid.iter().map(|h| h.0).collect();
            for w in list.iter().filter(|w| !hid.contains(&w.0)) {
                stay.entry(w.1).or_default().push(w.0);
            }
            for (seq, holder) in cross {
                dead.entry(holder).or_default().push(seq);
            }
            gone.push((id, oldest, newest));
        }
        if dead.is_empty() {
            return Ok(0);
        }
        // The writes that stay (every point of a hidden write is in one of them) must be there.
        for (holder, seqs) in &stay {
            let held: HashSet<u64> = if *holder == self.rank {
                self.store.sync_log_only()?;
                seqs.iter()
                    .copied()
                    .filter(|&s| self.store.extent(id, s).is_some())
                    .collect()
            } else {
                match self.peers().and_then(|p| p.confirm_held(*holder, id, seqs)) {
                    Ok(h) => h.into_iter().collect(),
                    Err(_) => return Ok(0),
                }
            };
            if seqs.iter().any(|s| !held.contains(s)) {
                return Ok(0);
            }
        }
        self.meta.add_dropped_versions(&gone)?;
        let mut dropped = 0u64;
        let mut rows = Vec::new();
        for (holder, seqs) in dead {
            if holder == self.rank {
                dropped += self
                    .store
                    .drop_extents(id, &seqs.iter().copied().collect())?
                    as u64;
                continue;
            }
            match self.peers().and_then(|p| p.drop_extents(holder, id, &seqs)) {
                Ok(n) => dropped += n,
                Err(e) => {
                    tracing::warn!(
                        "server {holder} keeps {} hidden writes of {id:#x} for now: {}",
                        seqs.len(),
                        e.message
                    );
                    continue;
                }
            }
            rows.extend(seqs.iter().map(|&s| (id, s)));
            self.forget_remote(id, holder, &seqs);
        }
        if !rows.is_empty() {
            self.meta.delete_region_rows(&rows)?;
        }
        Ok(dropped)
    }
}
