//! Compaction of the log: the space of data no read needs (overwritten, deleted) comes back.
//!
//! Garbage appears when the engine drops hidden writes and deleted objects
//! (`engine/drop.rs`); a segment holding nothing else is retired as it is
//! (`retire_flushed`). A segment still holding some live extents is **compacted** once its
//! live fraction falls below a threshold `r` (TiKV Titan's discardable ratio, inverted): its
//! live extents are copied to the shared segment, then it is retired. So sealed segments
//! hold at most `1/r` times their live bytes, and every byte copied frees at least `(1-r)/r`
//! bytes. Segments that still take appends (the shared one, writers' leased ones) are first
//! sealed when they pass the same threshold and hold at least `seal_min` bytes.
//!
//! One pass, in order (the crash points named):
//!
//! 1. choose the victims: sealed segments (synced, checkpointed, not leased, not the
//!    newest), not pinned by a staged write, holding no deferred write (its token is its log
//!    location), live fraction below `r`;
//! 2. copy each live extent (not one a durable tier home already holds) to the shared
//!    segment, as a new record with the same checksum, rate-limited, without the commit
//!    lock — `compact.after_copy`;
//! 3. fdatasync the log: the copies are durable — `compact.after_sync`;
//! 4. under the commit lock, point each extent row still naming its old location at the
//!    copy, in one transaction, fsynced; then the index — `compact.after_rows`;
//! 5. retire the victims (`retire_flushed`: MANIFEST without them, then unlink).
//!
//! A crash before step 4 leaves unreferenced copies (garbage the next pass frees); after it,
//! victims holding nothing live (retired next pass). Rows never name bytes that are not
//! durable, and no byte a row names is unlinked. A reader that looked an extent up before
//! step 4 and finds its segment gone starts its read again (`again_if_moved`).

use super::{crash_point, DataStore};
use pdcx_core::protocol::CompactReport;
use pdcx_core::{ObjectId, Region, Result};
use pdcx_store::record::record_overhead;
use pdcx_store::Location;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How a pass chooses and paces its work (`[compaction]` in pdcx.toml).
#[derive(Debug, Clone, Copy)]
pub struct CompactOptions {
    /// A segment whose live fraction is below this is compacted.
    pub threshold: f64,
    /// Most bytes copied per second (0: no limit).
    pub rate: u64,
    /// Segments still taking appends are sealed for compaction only from this size on.
    pub seal_min: u64,
}

/// Copies are made durable (step 3) and published (step 4) after at most this many bytes,
/// so one fdatasync never has much to write and victims are freed as the pass goes.
const BATCH_BYTES: u64 = 256 << 20;

/// One extent to move: where it is, and the copy once made.
struct Move {
    id: ObjectId,
    seq: u64,
    region: Region,
    from: Location,
}

/// One segment's size and the bytes in it that must stay.
#[derive(Debug, Clone, Copy, Default)]
pub struct SegmentSpace {
    pub bytes: u64,
    pub live: u64,
}

impl DataStore {
    /// Every segment's size and live bytes (the records, headers included, of extents in it
    /// that no durable tier home holds, and of deferred writes). What compaction chooses from and `space` sums up.
    pub fn segment_space(&self) -> HashMap<u64, SegmentSpace> {
        let durable = |tier: usize| self.tiering.as_ref().is_some_and(|t| t.is_durable(tier));
        let mut live: HashMap<u64, u64> = HashMap::new();
        for e in self.index().values().flatten() {
            if e.in_log && !e.home.as_ref().is_some_and(|h| durable(h.tier)) {
                *live.entry(e.loc.segment).or_default() +=
                    e.loc.len + record_overhead(e.region.ndim());
            }
        }
        for d in self
            .deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            *live.entry(d.loc.segment).or_default() += d.loc.len + record_overhead(d.region.ndim());
        }
        self.log()
            .segment_lengths()
            .into_iter()
            .map(|(id, bytes)| {
                let live = live.get(&id).copied().unwrap_or(0).min(bytes);
                (id, SegmentSpace { bytes, live })
            })
            .collect()
    }

    /// Every extent held here that has a tier home, with its object.
    pub fn homed_extents(&self) -> Vec<(ObjectId, super::Extent)> {
        self.index()
            .iter()
            .flat_map(|(id, v)| {
                v.iter()
                    .filter(|e| e.home.is_some())
                    .map(|e| (*id, (**e).clone()))
            })
            .collect()
    }

    /// (tier index, stored bytes) of the homes of this server's extents, per tier.
    pub fn tier_live_bytes(&self) -> Vec<(usize, u64)> {
        let mut live: HashMap<usize, u64> = HashMap::new();
        for e in self.index().values().flatten() {
            if let Some(h) = &e.home {
                *live.entry(h.tier).or_default() += h.stored_len;
            }
        }
        live.into_iter().collect()
    }

    /// (log bytes, live bytes): what the log takes on disk and what of it must stay.
    pub fn space(&self) -> (u64, u64) {
        self.segment_space()
            .values()
            .fold((0, 0), |(b, l), s| (b + s.bytes, l + s.live))
    }

    /// One compaction pass over the log (see the module notes); `progress` hears after each
    /// batch. The engine drops hidden writes first (`Engine::compact`).
    pub fn compact(
        &self,
        opts: &CompactOptions,
        report: &mut CompactReport,
        progress: &mut dyn FnMut(&CompactReport),
    ) -> Result<()> {
        let _one = self.compacting.lock().unwrap_or_else(|p| p.into_inner());
        let (segments, bytes) = self.retire_unneeded()?;
        report.retired_segments += segments;
        report.freed_bytes += bytes;
        self.seal_for_compaction(opts)?;
        let victims = self.victims(opts);
        report.victims += victims.len() as u64;
        let deferred = self.deferred_segments();
        let durable = |tier: usize| self.tiering.as_ref().is_some_and(|t| t.is_durable(tier));
        let mut moves: Vec<Move> = Vec::new();
        for (id, list) in self.index().iter() {
            for e in list {
                if e.in_log
                    && victims.contains(&e.loc.segment)
                    && !deferred.contains(&e.loc.segment)
                    && !e.home.as_ref().is_some_and(|h| durable(h.tier))
                {
                    moves.push(Move {
                        id: *id,
                        seq: e.seq,
                        region: e.region.clone(),
                        from: e.loc,
                    });
                }
            }
        }
        moves.sort_by_key(|m| (m.from.segment, m.from.offset));
        let started = Instant::now();
        let mut batch: Vec<(Move, Location)> = Vec::new();
        let mut batch_bytes = 0u64;
        for m in moves {
            let copy = self.copy_extent(&m)?;
            report.moved_extents += 1;
            report.moved_bytes += m.from.len;
            batch_bytes += m.from.len;
            batch.push((m, copy));
            pace(opts.rate, report.moved_bytes, started);
            if batch_bytes >= BATCH_BYTES {
                self.publish_copies(std::mem::take(&mut batch))?;
                batch_bytes = 0;
                progress(report);
            }
        }
        self.publish_copies(batch)?;
        let (segments, bytes) = self.retire_unneeded()?;
        report.retired_segments += segments;
        report.freed_bytes += bytes;
        progress(report);
        Ok(())
    }

    /// Seals the shared segment and revokes writers' leases of segments past `seal_min`
    /// bytes whose live fraction is below the threshold, then checkpoints, so that they count
    /// as sealed for this pass. A write staged or reserved there still commits (its room is
    /// taken; only later records go elsewhere), and pins the segment until it has.
    fn seal_for_compaction(&self, opts: &CompactOptions) -> Result<()> {
        let space = self.segment_space();
        let wants = |id: u64| {
            space.get(&id).is_some_and(|s| {
                s.bytes >= opts.seal_min.max(1) && (s.live as f64) < opts.threshold * s.bytes as f64
            })
        };
        let sealed_any = {
            let mut log = self.log();
            let leased: Vec<u64> = space
                .keys()
                .copied()
                .filter(|&id| log.leased(id) && wants(id))
                .collect();
            log.revoke_leases_of(&leased);
            let shared = log.shared_segment().filter(|&id| wants(id));
            let rolled = match shared {
                Some(_) => log.roll_shared()?.is_some(),
                None => false,
            };
            let sealed = rolled || !leased.is_empty();
            if sealed {
                // So that none of them is the newest segment, which is never retired.
                log.spares_ahead()?;
            }
            sealed
        };
        if sealed_any {
            // The sealed segments' last appends are synced and checkpointed here.
            self.sync_log_only()?;
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Sealed segments whose live fraction is below the threshold, fewest live bytes first.
    fn victims(&self, opts: &CompactOptions) -> HashSet<u64> {
        let space = self.segment_space();
        let sealed = self.log().sealed_segments();
        sealed
            .into_iter()
            .filter(|id| !self.pins.pinned(*id))
            .filter(|id| {
                space.get(id).is_some_and(|s| {
                    s.bytes > 0 && s.live > 0 && (s.live as f64) < opts.threshold * s.bytes as f64
                })
            })
            .collect()
    }

    /// Step 2: one extent's bytes, checked against their checksum, appended again to the
    /// shared segment. The copy is pinned by nothing: it is not in any index until step 4,
    /// and the shared segment is never retired while it takes appends.
    fn copy_extent(&self, m: &Move) -> Result<Location> {
        let span = self.log().span(m.from.segment, m.from.offset, m.from.len)?;
        let bytes = span.read_verified(m.from.crc)?;
        let copy = self.log().append(m.id, 0, &m.region, &bytes)?;
        crash_point("compact.after_copy");
        Ok(copy)
    }

    /// Steps 3 and 4 for a batch of copies.
    fn publish_copies(&self, batch: Vec<(Move, Location)>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.sync_log_only()?;
        crash_point("compact.after_sync");
        let _c = self.lock_commit();
        // Only extents still where they were when copied: one dropped or moved meanwhile keeps
        // its state, and its copy is garbage.
        let still: Vec<(ObjectId, u64, Location, Location)> = {
            let index = self.index();
            batch
                .iter()
                .filter(|(m, _)| {
                    index.get(&m.id).is_some_and(|v| {
                        v.iter()
                            .any(|e| e.seq == m.seq && e.loc == m.from && e.in_log)
                    })
                })
                .map(|(m, to)| (m.id, m.seq, m.from, *to))
                .collect()
        };
        self.meta.relocate_extents(&still)?;
        crash_point("compact.after_rows");
        let mut index = self.index_mut();
        for (id, seq, from, to) in &still {
            if let Some(e) = index
                .get_mut(id)
                .and_then(|v| v.iter_mut().find(|e| e.seq == *seq && e.loc == *from))
            {
                std::sync::Arc::make_mut(e).loc = *to;
            }
        }
        Ok(())
    }
}

/// Sleeps as long as copying `done` bytes since `started` went faster than `rate` bytes/s.
fn pace(rate: u64, done: u64, started: Instant) {
    if rate == 0 {
        return;
    }
    let due = Duration::from_secs_f64(done as f64 / rate as f64);
    if let Some(ahead) = due.checked_sub(started.elapsed()) {
        std::thread::sleep(ahead);
    }
}
