//! The flusher's policy: which committed extents go to which tier (placement, quotas, spill),
//! how they are grouped into shard blobs, the puts themselves, and moves between tiers
//! (`pdcx migrate`, demotion, promotion). Everything about the log, the index, homes and
//! retirement is done through the data store's methods (`crate::datastore`).

mod group;
mod logpages;
mod repack;

use crate::datastore::DataStore;
use crate::datastore::{crash_point, Extent};
use crate::tiering::flushbytes::{self, FlushBytes};
use crate::tiering::placement::{candidates, Hints, TierHint, TierView};
use crate::tiering::{codec, Home, Tiering};
use bytes::Bytes;
use logpages::{keep_unchanged, LogPages};
use pdcx_core::protocol::{PeerRequest, PeerResponse, TierStat};
use pdcx_core::{Error, ErrorKind, ObjectId, ObjectMeta, Result};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// The flusher: homes committed extents on their tiers (flush passes, group shards), moves
/// them between tiers (migration, demotion, promotion) and reports the tiers' state. It
/// borrows its host (the engine) for the data store, the metadata and the peers; its state
/// (queues, errors, locks) is the `Tiering`'s.
#[derive(Clone, Copy)]
pub struct Flusher<'a> {
    host: &'a dyn FlushHost,
}

/// What the flusher borrows of the engine it runs in. The engine implements it and hands out
/// its flusher (`Engine::flusher`); the flusher never names the engine, so the arrows point
/// one way: engine ─▶ flusher ─▶ data store, tiering.
pub trait FlushHost: Sync {
    /// The durable data path: log, index, homes.
    fn store(&self) -> &DataStore;
    /// This server's rank.
    fn rank(&self) -> u32;
    /// Whether this server owns object `id`.
    fn owns(&self, id: ObjectId) -> bool;
    /// The storage hierarchy; None when the config declares no tiers.
    fn tiering(&self) -> Option<&Arc<Tiering>>;
    /// An object's metadata wherever it is owned (`fresh`: ask a foreign owner again).
    fn object_meta(&self, id: ObjectId, fresh: bool) -> Result<ObjectMeta>;
    /// Sends a group-shard request to another server.
    fn shard_call(&self, to: u32, req: &PeerRequest) -> Result<(PeerResponse, Vec<u8>)>;
}

impl<'a> Flusher<'a> {
    /// The flusher of `host`.
    pub fn new(host: &'a dyn FlushHost) -> Flusher<'a> {
        Flusher { host }
    }
}

/// The flusher's events keep the target of the tiers' own (`pdcx_server::tiering`), which the
/// log filters in docs/OPERATIONS.md name.
const LOG_TARGET: &str = "pdcx_server::tiering";

/// Reads from a slower tier between two passes that make an extent hot enough to promote.
pub const PROMOTE_READS: u32 = 3;

pub use pdcx_core::protocol::FlushReport;

impl Flusher<'_> {
    fn tiers(&self) -> Result<&Arc<Tiering>> {
        self.host
            .tiering()
            .ok_or_else(|| Error::invalid("this deployment has no tiers configured (pdcx.toml)"))
    }

    /// The metadata placing `id`'s extents in a flush pass. A foreign object's is fetched
    /// fresh (once per pass): the cached copy predates placement tags set since; the cached
    /// one serves while the owner is unreachable. None: the object is gone.
    pub(super) fn placement_meta(&self, id: ObjectId) -> Option<ObjectMeta> {
        match self.host.object_meta(id, !self.host.owns(id)) {
            Ok(m) => Some(m),
            Err(e) if e.kind == ErrorKind::NotFound => None,
            Err(_) => self.host.object_meta(id, false).ok(),
        }
    }

    pub(super) fn views(&self, t: &Tiering) -> Vec<TierView> {
        t.tiers
            .iter()
            .zip(&t.counters)
            .map(|(tier, c)| TierView {
                free: tier.capacity().map(|cap| cap.saturating_sub(tier.used())),
                bandwidth: c.put_bandwidth(),
                durable: tier.durable(),
            })
            .collect()
    }

    /// One flush pass: homes up to `max_bytes` of extents that have none, then retires the
    /// log segments that no longer hold anything unflushed.
    pub fn flush_pass(&self, max_bytes: u64) -> Result<FlushReport> {
        let mut report = FlushReport::default();
        let Some(t) = self.host.tiering().cloned() else {
            return Ok(report);
        };
        let _moves = t.moves.lock().unwrap_or_else(|p| p.into_inner());
        let (todo, referenced) = self.host.store().extents_to_flush(&t);
        t.sweep_unreferenced(&referenced);
        // Group shards' bookkeeping (releases, the leader's sweep) before any put.
        self.group_checks(&t, &mut report);
        let names: Vec<&str> = t.tiers.iter().map(|x| x.name()).collect();
        let mut hints = Hints::new(&names);
        let ids: HashSet<ObjectId> = todo.iter().map(|(id, _)| *id).collect();
        let mut placed = self.host.store().placed(t.tiers.len(), &ids);
        let mut metas: HashMap<ObjectId, Option<ObjectMeta>> = HashMap::new();
        let failed: Mutex<HashSet<usize>> = Mutex::new(HashSet::new());
        let put_error: Mutex<Option<String>> = Mutex::new(None);
        let mut done: Vec<(ObjectId, u64, Home)> = Vec::new();
        let mut batch: Vec<Encoded> = Vec::new();
        let mut batch_bytes = 0u64;
        let mut considered = 0u64;
        let batch_limit = PUT_BATCH_BYTES.max(t.max_shard_bytes);
        let mut shard_groups = ShardGroups::new(t.objects_per_shard);
        let mut pages = LogPages::new(self.host.store());
        // The log's pages each put read, until their homes are recorded (to check them again:
        // `FlushBytes::unchanged`). They are the page cache's, so holding them costs no memory.
        let mut taken_bytes: HashMap<(ObjectId, u64), FlushBytes> = HashMap::new();
        let last = todo.len();
        for (k, (id, e)) in todo.iter().enumerate() {
            if considered < max_bytes {
                let meta = metas
                    .entry(*id)
                    .or_insert_with(|| self.placement_meta(*id))
                    .clone();
                if let Some(meta) = meta {
                    // deleted objects (None) are skipped
                    let hint = match hints.hint_for(&meta, &e.region) {
                        Ok(h) => h,
                        Err(err) => {
                            report.error = Some(format!(
                                "object {}: {}; placing it automatically",
                                meta.name, err.message
                            ));
                            TierHint::Auto
                        }
                    };
                    let chosen = match codec::codec_for(&meta) {
                        Ok(c) => c,
                        Err(err) => {
                            report.error =
                                Some(format!("{}; storing it uncompressed", err.message));
                            None
                        }
                    };
                    let per = placed.entry(*id).or_insert_with(|| vec![0; t.tiers.len()]);
                    // An extent whose first choice is a tier the whole shard group reaches
                    // waits for the group's leader to pull it into a group shard (`group/`).
                    if !t.waits_for_group(&hint, e.loc.len, per, &self.views(&t)) {
                        let raw = pages.take(&meta, e)?;
                        self.host.store().note_stats(&meta, e.seq, &raw.bytes);
                        let (taken, codec_used) =
                            codec::encode(chosen.as_ref(), meta.dtype, &e.region, raw)?;
                        let stored = taken.bytes.clone();
                        if taken.is_mapped() {
                            taken_bytes.insert((*id, e.seq), taken);
                        }
                        let order = candidates(&hint, stored.len() as u64, per, &self.views(&t));
                        // Assume the first choice takes it (later quota decisions of this
                        // batch see it); corrected below if the put spilled or failed.
                        per[order[0]] += e.loc.len;
                        considered += e.loc.len;
                        batch_bytes += stored.len() as u64;
                        batch.push(Encoded {
                            id: *id,
                            seq: e.seq,
                            from: self.host.rank(),
                            raw_len: e.loc.len,
                            group: shard_groups.group_of(*id),
                            len: stored.len() as u64,
                            stored,
                            codec: codec_used,
                            order,
                        });
                    }
                }
            }
            if batch.is_empty()
                || (batch_bytes < batch_limit && k + 1 < last && considered < max_bytes)
            {
                continue;
            }
            let jobs = form_jobs(&t, std::mem::take(&mut batch), false);
            let landed = run_puts(&t, &jobs, &failed, &put_error);
            crash_point("flush.after_put");
            for (job, tier) in jobs.iter().zip(landed) {
                for m in &job.members {
                    let per = placed.entry(m.id).or_insert_with(|| vec![0; t.tiers.len()]);
                    per[job.order[0]] -= m.raw_len;
                    let Some(tier) = tier else { continue };
                    per[tier] += m.raw_len;
                    report.extents += 1;
                    report.bytes += m.raw_len;
                    report.stored_bytes += m.stored_len;
                    done.push((m.id, m.seq, job.home_of(m, tier)));
                }
            }
            batch_bytes = 0;
        }
        let failed = failed.into_inner().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = put_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            report.error = Some(e);
        }
        drop(pages);
        if let Some(changed) = keep_unchanged(&mut done, &taken_bytes) {
            report.error = Some(changed);
        }
        drop(taken_bytes);
        self.host.store().record_homes(&t, &done)?;
        self.host.store().set_homes(done);
        (report.pending_extents, report.pending_bytes) = self.host.store().pending();
        // The leader of a shard group pulls its members' waiting extents into group shards.
        self.group_pass(&t, &mut report);
        if let Err(e) = self.rebalance(&t) {
            report.error = Some(format!("moving extents between tiers: {}", e.message));
        }
        report.retired_segments = self.host.store().retire_flushed()?;
        let mut st = t.state.lock().unwrap_or_else(|p| p.into_inner());
        st.passes += 1;
        st.flushed_bytes += report.bytes;
        st.flushed_extents += report.extents;
        if report.error.is_none() && failed.is_empty() {
            st.last_error = None;
        } else if let Some(e) = &report.error {
            st.last_error = Some(e.clone());
        }
        Ok(report)
    }

    /// Completes a `remote` commit: puts each of these committed extents (object, seq) that is
    /// not yet on a tier surviving node loss onto one — the first such tier of its placement
    /// order (its hint, quotas and spill, without the tiers that do not qualify) — grouped into
    /// shards as a flush pass would, records the homes durably and publishes them. An extent
    /// already homed on a node-local tier is moved. Holds `t.moves` (waits for a running flush
    /// pass). Returns an error naming the tier if any extent could not be put: the data is then
    /// committed at `local` durability only, and the flusher retries it as usual.
    pub(crate) fn make_remote(&self, keys: &[(ObjectId, u64)]) -> Result<()> {
        let t = self.tiers()?.clone();
        t.check_remote()?;
        let _moves = t.moves.lock().unwrap_or_else(|p| p.into_inner());
        let names: Vec<&str> = t.tiers.iter().map(|x| x.name()).collect();
        let mut hints = Hints::new(&names);
        let ids: HashSet<ObjectId> = keys.iter().map(|(id, _)| *id).collect();
        let mut placed = self.host.store().placed(t.tiers.len(), &ids);
        let mut metas: HashMap<ObjectId, ObjectMeta> = HashMap::new();
        let mut shard_groups = ShardGroups::new(t.objects_per_shard);
        let mut batch: Vec<Encoded> = Vec::new();
        for &(id, seq) in keys {
            // Gone meanwhile (object deleted): nothing left to make durable.
            let Some(e) = self.host.store().extent(id, seq) else {
                continue;
            };
            if e.home.as_ref().is_some_and(|h| t.off_node(h.tier)) {
                continue;
            }
            let meta = match metas.get(&id) {
                Some(m) => m.clone(),
                None => {
                    let m = self.host.object_meta(id, false)?;
                    metas.insert(id, m.clone());
                    m
                }
            };
            let hint = hints.hint_for(&meta, &e.region).unwrap_or(TierHint::Auto);
            let per = placed.entry(id).or_insert_with(|| vec![0; t.tiers.len()]);
            let order: Vec<usize> = candidates(&hint, e.loc.len, per, &self.views(&t))
                .into_iter()
                .filter(|&i| t.off_node(i))
                .collect();
            let Some(&first) = order.first() else {
                return Err(crate::tiering::no_remote_tier(Some(&t)));
            };
            if e.home.is_some() {
                // On a node-local or memory tier already: move it as stored.
                self.move_extent(&t, &meta, &e, first)?;
                continue;
            }
            let chosen = codec::codec_for(&meta).unwrap_or(None);
            let raw = self.host.store().extent_bytes(&meta, &e)?;
            self.host.store().note_stats(&meta, e.seq, &raw);
            let raw = FlushBytes::copied(flushbytes::shared(raw));
            let (stored, codec_used) = codec::encode(chosen.as_ref(), meta.dtype, &e.region, raw)?;
            let stored = stored.bytes;
            per[first] += e.loc.len;
            batch.push(Encoded {
                id,
                seq,
                from: self.host.rank(),
                raw_len: e.loc.len,
                group: shard_groups.group_of(id),
                len: stored.len() as u64,
                stored,
                codec: codec_used,
                order,
            });
        }
        if batch.is_empty() {
            return Ok(());
        }
        let failed: Mutex<HashSet<usize>> = Mutex::new(HashSet::new());
        let put_error: Mutex<Option<String>> = Mutex::new(None);
        let jobs = form_jobs(&t, batch, false);
        let landed = run_puts(&t, &jobs, &failed, &put_error);
        crash_point("flush.after_put");
        let mut done = Vec::new();
        let mut missing = 0usize;
        let (mut bytes, mut extents) = (0u64, 0u64);
        for (job, tier) in jobs.iter().zip(landed) {
            let Some(tier) = tier else {
                missing += job.members.len();
                continue;
            };
            for m in &job.members {
                bytes += m.raw_len;
                extents += 1;
                done.push((m.id, m.seq, job.home_of(m, tier)));
            }
        }
        self.host.store().record_homes(&t, &done)?;
        self.host.store().set_homes(done);
        {
            let mut st = t.state.lock().unwrap_or_else(|p| p.into_inner());
            st.flushed_bytes += bytes;
            st.flushed_extents += extents;
        }
        if missing > 0 {
            let why = put_error
                .into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or_else(|| "every tier that survives node loss is full".into());
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "durability 'remote' not reached for {missing} write(s): {why}; they are committed and durable in this server's log ('local'), and the flusher keeps trying"
                ),
            ));
        }
        Ok(())
    }

    /// Moves every extent of `id` held here to tier `tier_name` (re-encoding with the object's
    /// current codec). Returns (extents moved, raw bytes).
    pub fn migrate(&self, id: ObjectId, tier_name: &str) -> Result<(u64, u64)> {
        let t = self.tiers()?.clone();
        let tier = t.tier_index(tier_name).ok_or_else(|| {
            Error::invalid(format!(
                "no tier named {tier_name:?} (tiers: {})",
                t.tiers
                    .iter()
                    .map(|x| x.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        if !t.is_durable(tier) {
            // A memory copy may be the only one once the log segment is retired.
            return Err(Error::invalid(format!(
                "tier {tier_name:?} is not durable; migrate to a durable tier (memory tiers fill from flushes and act as a cache)"
            )));
        }
        let extents: Vec<Extent> = self.host.store().extents_of(id);
        if extents.is_empty() {
            return Ok((0, 0));
        }
        let meta = self.host.object_meta(id, false)?;
        let _moves = t.moves.lock().unwrap_or_else(|p| p.into_inner());
        let (mut n, mut bytes) = (0, 0);
        for e in extents {
            if e.home.as_ref().is_some_and(|h| h.tier == tier) {
                continue;
            }
            self.move_extent(&t, &meta, &e, tier)?;
            n += 1;
            bytes += e.loc.len;
        }
        Ok((n, bytes))
    }

    /// Puts a copy of `e` on durable tier `tier` in its own blob, makes that its durable home,
    /// then releases the old copy: at every point some durable copy is reachable.
    /// Callers hold `t.moves`.
    pub(super) fn move_extent(
        &self,
        t: &Tiering,
        meta: &ObjectMeta,
        e: &Extent,
        tier: usize,
    ) -> Result<()> {
        let key = t.key(meta.id, e.seq);
        let old = self.host.store().current_home(meta.id, e).ok();
        // A homed extent moves as stored (a lossy codec is never applied twice); one still
        // only in the log is encoded with the object's codec.
        let (stored, codec_used) = match &old {
            Some(h) => {
                let mut blob = vec![0u8; h.stored_len as usize];
                t.get_range(h.tier, &t.blob_key(meta.id, e.seq, h), h.offset, &mut blob)?;
                (Bytes::from(blob), h.codec.clone())
            }
            None => {
                let raw = self.host.store().extent_bytes(meta, e)?;
                self.host.store().note_stats(meta, e.seq, &raw);
                let chosen = codec::codec_for(meta).unwrap_or(None);
                let raw = FlushBytes::copied(flushbytes::shared(raw));
                let (stored, used) = codec::encode(chosen.as_ref(), meta.dtype, &e.region, raw)?;
                (stored.bytes, used)
            }
        };
        t.put(tier, &key, &stored)?;
        crash_point("flush.after_put");
        let home = vec![(
            meta.id,
            e.seq,
            Home::own(tier, codec_used, stored.len() as u64),
        )];
        self.host.store().record_homes(t, &home)?;
        self.host.store().set_homes(home);
        Ok(())
    }

    /// Background moves between durable tiers: a tier above 90% of its capacity demotes its
    /// coldest blobs (an extent's own, or a shard with all its extents; fewest reads, then
    /// oldest) to the next durable tier until it is below 60%; an extent read from a tier at least `PROMOTE_READS` times since the last pass moves
    /// up to the fastest durable tier that stays below 75% with it. Returns extents moved.
    /// Callers hold `t.moves`.
    fn rebalance(&self, t: &Tiering) -> Result<u64> {
        let hits = t.take_hits();
        let mut moved = 0;
        let n = t.tiers.len();
        for tier in 0..n {
            let Some(cap) = t.tiers[tier].capacity() else {
                continue;
            };
            if !t.is_durable(tier) || (t.tiers[tier].used() as f64) <= 0.9 * cap as f64 {
                continue;
            }
            let Some(target) = (tier + 1..n).find(|&i| t.is_durable(i)) else {
                continue;
            };
            // Demotion moves whole blobs: a shard frees its space only when its last extent
            // leaves, so moving single extents of many shards would free nothing. A blob's
            // heat is its extents' reads; coldest (then oldest) first.
            let mut blobs: HashMap<String, ColdBlob> = HashMap::new();
            for (id, e) in self.host.store().homed_on(tier) {
                let Some(h) = e.home.as_ref() else { continue };
                let b = blobs
                    .entry(t.blob_key(id, e.seq, h))
                    .or_insert((0, u64::MAX, Vec::new()));
                b.0 += hits.get(&(id, e.seq)).copied().unwrap_or(0);
                b.1 = b.1.min(e.seq);
                b.2.push((id, e));
            }
            let mut cold: Vec<ColdBlob> = blobs.into_values().collect();
            cold.sort_by_key(|c| (c.0, c.1));
            for (_, _, members) in cold {
                if (t.tiers[tier].used() as f64) < 0.6 * cap as f64 {
                    break;
                }
                for (id, e) in members {
                    let Ok(meta) = self.host.object_meta(id, false) else {
                        continue;
                    };
                    self.move_extent(t, &meta, &e, target)?;
                    moved += 1;
                }
            }
        }
        for ((id, seq), count) in hits {
            if count < PROMOTE_READS {
                continue;
            }
            let Some(e) = self.host.store().extent(id, seq) else {
                continue;
            };
            let Some(h) = e.home.clone() else { continue };
            let up = (0..h.tier).find(|&i| {
                t.is_durable(i)
                    && t.tiers[i].capacity().is_none_or(|cap| {
                        ((t.tiers[i].used() + h.stored_len) as f64) < 0.75 * cap as f64
                    })
            });
            let Some(up) = up else { continue };
            let Ok(meta) = self.host.object_meta(id, false) else {
                continue;
            };
            self.move_extent(t, &meta, &e, up)?;
            moved += 1;
        }
        if moved > 0 {
            t.state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .moved_extents += moved;
        }
        Ok(moved)
    }

    /// Tier usage, the flush queue and the flusher's health, for `pdcx top` and tests.
    pub fn fill_tier_stats(&self, st: &mut pdcx_core::protocol::ServerStats) {
        let Some(t) = self.host.tiering() else {
            return;
        };
        st.tiers = tier_stats(t);
        for (tier, live) in self.host.store().tier_live_bytes() {
            if let Some(x) = st.tiers.get_mut(tier) {
                x.live = live;
            }
        }
        (st.flush_pending_extents, st.flush_pending_bytes) = self.host.store().pending();
        let fs = t.state();
        st.flushed_bytes = fs.flushed_bytes;
        st.retired_bytes = fs.retired_bytes;
        st.flush_error = fs.last_error;
    }

    /// Flushes until nothing is pending or a pass makes no progress (a tier is failing).
    /// Progress goes to `progress` after each pass.
    pub fn flush_all(&self, progress: &mut dyn FnMut(&FlushReport, u64)) -> Result<FlushReport> {
        if let Some(t) = self.host.tiering() {
            // A leader asks every member of its shard group again (no idle backoff).
            t.kicked.store(true, Ordering::Relaxed);
        }
        let mut total = FlushReport::default();
        let mut done = 0u64;
        loop {
            let r = self.flush_pass(256 << 20)?;
            done += r.bytes;
            total.extents += r.extents;
            total.bytes += r.bytes;
            total.stored_bytes += r.stored_bytes;
            total.retired_segments += r.retired_segments;
            total.pending_extents = r.pending_extents;
            total.pending_bytes = r.pending_bytes;
            total.error = r.error.clone();
            progress(&r, done);
            if r.pending_extents == 0 || r.extents == 0 {
                return Ok(total);
            }
        }
    }
}

/// Per-tier numbers for stats.
pub fn tier_stats(t: &Tiering) -> Vec<TierStat> {
    t.tiers
        .iter()
        .zip(&t.counters)
        .map(|(x, c)| TierStat {
            name: x.name().to_string(),
            kind: x.kind().to_string(),
            used: x.used(),
            capacity: x.capacity(),
            put_bytes: c.put_bytes.load(Ordering::Relaxed),
            get_bytes: c.get_bytes.load(Ordering::Relaxed),
            put_bandwidth: c.put_bandwidth().unwrap_or(0.0),
            live: 0,
        })
        .collect()
}

/// A blob considered for demotion: (reads of its extents, oldest seq, its extents).
type ColdBlob = (u32, u64, Vec<(ObjectId, Extent)>);

/// Bytes of encoded extents the flusher puts in parallel before recording their homes.
const PUT_BATCH_BYTES: u64 = 64 << 20;

/// Concurrent puts per flush batch (S3 and parallel file systems want several in flight).
const PUT_THREADS: usize = 4;

/// One extent encoded for its home, before grouping into blobs.
pub(super) struct Encoded {
    pub(super) id: ObjectId,
    pub(super) seq: u64,
    /// The server holding it (another than this one only in a group shard).
    pub(super) from: u32,
    pub(super) raw_len: u64,
    /// Extents of the same group placed on the same tiers share a shard blob.
    pub(super) group: Option<usize>,
    /// The encoded bytes, or nothing when they stay with `from` (S3 group shards: see
    /// `group/`); `len` is their length either way.
    pub(super) stored: Bytes,
    pub(super) len: u64,
    pub(super) codec: String,
    /// Tiers to try: the placement's choice, then spill targets.
    pub(super) order: Vec<usize>,
}

/// Assigns objects to shard groups in the order a pass meets them: `objects_per_shard`
/// objects per group (`None` for all when sharding is off).
pub(super) struct ShardGroups {
    per: usize,
    seen: HashMap<ObjectId, usize>,
}

impl ShardGroups {
    pub(super) fn new(objects_per_shard: u32) -> Self {
        ShardGroups {
            per: objects_per_shard as usize,
            seen: HashMap::new(),
        }
    }

    pub(super) fn group_of(&mut self, id: ObjectId) -> Option<usize> {
        if self.per == 0 {
            return None;
        }
        let n = self.seen.len();
        Some(*self.seen.entry(id).or_insert(n) / self.per)
    }
}

/// An extent's place in a blob.
pub(super) struct Member {
    pub(super) id: ObjectId,
    pub(super) seq: u64,
    /// The server holding it (another than this one only in a group shard).
    pub(super) from: u32,
    pub(super) raw_len: u64,
    pub(super) codec: String,
    pub(super) stored_len: u64,
    pub(super) offset: u64,
}

/// One blob on its way to a tier: an extent's own blob, or a shard of several extents
/// (concatenated, each encoded on its own so it can be read alone).
pub(super) struct PutJob {
    pub(super) key: String,
    pub(super) shard: bool,
    /// The blob as its members' stored bytes back to back (none while they stay with their
    /// servers); `len` its length. Put as parts: a shard is never copied into one buffer.
    pub(super) parts: Vec<Bytes>,
    pub(super) len: u64,
    pub(super) members: Vec<Member>,
    /// Tiers to try: the placement's choice, then spill targets.
    pub(super) order: Vec<usize>,
}

impl PutJob {
    /// The home of `m`, one of this job's members, once the job's blob is on `tier`: at the
    /// member's offset in the shard, or its own blob.
    fn home_of(&self, m: &Member, tier: usize) -> Home {
        Home {
            tier,
            codec: m.codec.clone(),
            stored_len: m.stored_len,
            shard: self.shard.then(|| self.key.clone()),
            offset: m.offset,
        }
    }
}

/// Groups a batch into blobs: extents of one shard group with the same placement go into one
/// shard (in log order, cut at `max_shard_bytes`); the rest, and groups of one, get their own.
/// A `cross` batch (several servers' extents, put by their leader) is all shards under the
/// group's prefix, even of one extent: an own blob would sit under the leader's prefix, where
/// the leader's own sweep would take it for garbage.
pub(super) fn form_jobs(t: &Tiering, batch: Vec<Encoded>, cross: bool) -> Vec<PutJob> {
    let mut jobs: Vec<PutJob> = Vec::new();
    // Open shard per (group, placement): index into `jobs`.
    let mut open: HashMap<(usize, Vec<usize>), usize> = HashMap::new();
    for x in batch {
        let member = |offset| Member {
            id: x.id,
            seq: x.seq,
            from: x.from,
            raw_len: x.raw_len,
            codec: x.codec.clone(),
            stored_len: x.len,
            offset,
        };
        let Some(group) = x.group else {
            jobs.push(PutJob {
                key: t.key(x.id, x.seq),
                shard: false,
                members: vec![member(0)],
                parts: vec![x.stored],
                len: x.len,
                order: x.order,
            });
            continue;
        };
        let slot = (group, x.order.clone());
        match open.get(&slot).map(|&j| &mut jobs[j]) {
            Some(job) if job.len + x.len <= t.max_shard_bytes => {
                job.members.push(member(job.len));
                job.parts.push(x.stored);
                job.len += x.len;
            }
            _ => {
                open.insert(slot, jobs.len());
                jobs.push(PutJob {
                    key: if cross {
                        t.group_shard_key(x.id, x.seq)
                    } else {
                        t.shard_key(x.id, x.seq)
                    },
                    shard: true,
                    members: vec![member(0)],
                    parts: vec![x.stored],
                    len: x.len,
                    order: x.order,
                });
            }
        }
    }
    // A shard of one extent is just that extent's blob.
    for job in &mut jobs {
        if !cross && job.shard && job.members.len() == 1 {
            job.shard = false;
            job.key = t.key(job.members[0].id, job.members[0].seq);
        }
    }
    jobs
}

/// Puts a batch with a few threads; returns the tier each blob landed on. Each job tries its
/// tiers in order: full → next tier; any other error marks the tier failed for the rest of
/// the pass (its extents wait in the log rather than skip to a tier the placement did not
/// choose).
pub(super) fn run_puts(
    t: &Tiering,
    jobs: &[PutJob],
    failed: &Mutex<HashSet<usize>>,
    error: &Mutex<Option<String>>,
) -> Vec<Option<usize>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<Mutex<Option<usize>>> = jobs.iter().map(|_| Mutex::new(None)).collect();
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(job) = jobs.get(i) else { return };
        for &tier in &job.order {
            if failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&tier)
            {
                break;
            }
            match t.put_parts(tier, &job.key, &job.parts) {
                Ok(()) => {
                    *results[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(tier);
                    break;
                }
                Err(err) if err.kind == ErrorKind::NoSpace => continue,
                Err(err) => {
                    failed
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(tier);
                    *error.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(format!("tier {:?}: {}", t.name(tier), err.message));
                    break;
                }
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..PUT_THREADS.min(jobs.len()) {
            s.spawn(work);
        }
        work();
    });
    results
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
        .collect()
}

impl Flusher<'_> {
    /// Parts of group shards this server uploaded since start (for its leader or as leader).
    pub fn group_parts_uploaded(&self) -> u64 {
        self.host
            .tiering()
            .map_or(0, |t| t.group_parts_uploaded.load(Ordering::Relaxed))
    }

    /// Multipart uploads of group shards left by a crashed leader that this server (their
    /// leader) aborted since start.
    pub fn group_uploads_aborted(&self) -> u64 {
        self.host
            .tiering()
            .map_or(0, |t| t.group_uploads_aborted.load(Ordering::Relaxed))
    }
}
