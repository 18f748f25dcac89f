//! Per-extent statistics: the smallest and largest element of each extent, so a
//! value query skips extents that cannot match without reading them (which matters most when
//! they sit on a slow tier). The flusher computes them from the bytes it has read to copy the
//! extent to its tier, so keeping them costs the write path nothing; an object tagged
//! `pdcx.stats = "off"` has none. They are advisory: an extent without them is read.
//! Persisted in `extent_stats`, in the same WAL as the extent's home (written before it, so the
//! home row's fsync covers them).

use super::DataStore;
use pdcx_core::valuequery::min_max;
use pdcx_core::{ObjectId, ObjectMeta, Region, Result, TagValue};
use std::sync::Arc;

/// Parts of a region covered by a server's extents, each with the extent's (min, max).
pub type ExtentRanges = Vec<(Region, Option<(f64, f64)>)>;

/// The tag that turns statistics off for an object (`"off"`; anything else or absent: on).
pub const STATS_TAG: &str = "pdcx.stats";

/// Whether `obj` keeps extent statistics.
pub fn stats_enabled(obj: &ObjectMeta) -> bool {
    !obj.tags
        .iter()
        .any(|(k, v)| k == STATS_TAG && matches!(v, TagValue::Str(s) if s.trim() == "off"))
}

impl DataStore {
    /// Notes extent `seq` of `obj`'s statistics from its raw bytes (written to the metadata by
    /// the next [`write_pending_stats`](Self::write_pending_stats)).
    pub fn note_stats(&self, obj: &ObjectMeta, seq: u64, raw: &[u8]) {
        if !stats_enabled(obj) {
            return;
        }
        let Some((lo, hi)) = min_max(obj.dtype, raw) else {
            return;
        };
        let found = {
            let mut index = self.index_mut();
            match index
                .get_mut(&obj.id)
                .and_then(|v| v.iter_mut().find(|e| e.seq == seq))
            {
                Some(e) => {
                    Arc::make_mut(e).stats = Some((lo, hi));
                    true
                }
                None => false,
            }
        };
        if found {
            self.pending_stats
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((obj.id, seq, lo, hi));
        }
    }

    /// Writes the statistics noted since the last call (not waiting for the WAL fsync: the
    /// next durable write, e.g. the homes of the same flush pass, covers them).
    pub fn write_pending_stats(&self) -> Result<()> {
        let rows =
            std::mem::take(&mut *self.pending_stats.lock().unwrap_or_else(|p| p.into_inner()));
        if rows.is_empty() {
            return Ok(());
        }
        self.meta.put_extent_stats(&rows)
    }

    /// Whether this server holds any visible extent of `id`.
    pub fn holds_any(&self, id: ObjectId) -> bool {
        self.index().get(&id).is_some_and(|v| !v.is_empty())
    }

    /// The parts of `region` covered by extents of `id` held here, each with its extent's
    /// statistics (None: not computed). Overlapping extents each appear.
    pub fn extent_ranges(&self, id: ObjectId, region: &Region) -> ExtentRanges {
        self.index()
            .get(&id)
            .map(|v| {
                v.iter()
                    .filter_map(|e| e.region.intersect(region).map(|r| (r, e.stats)))
                    .collect()
            })
            .unwrap_or_default()
    }
}
