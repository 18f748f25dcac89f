//! What compaction (the server's `datastore/compact.rs`) needs from the log: each segment's
//! size, and a way to seal segments that still take appends so that their garbage can be
//! freed: the shared segment is rolled over, writers' leases are revoked.

use super::SegmentLog;
use pdcx_core::Result;
use std::sync::PoisonError;

impl SegmentLog {
    /// Every segment's id and length in bytes, ascending by id.
    pub fn segment_lengths(&self) -> Vec<(u64, u64)> {
        self.segments.iter().map(|(&id, s)| (id, s.len)).collect()
    }

    /// The shared segment appends go to now, if any.
    pub fn shared_segment(&self) -> Option<u64> {
        self.active
    }

    /// Seals the shared segment: the next shared append goes to a new segment, made (and
    /// listed) here so that the old one is no longer the newest (the newest is never
    /// retired). Does nothing to an empty segment. Returns the sealed segment's id.
    pub fn roll_shared(&mut self) -> Result<Option<u64>> {
        self.check_poisoned()?;
        let Some(old) = self
            .active
            .filter(|id| self.segments.get(id).is_some_and(|s| s.len > 0))
        else {
            return Ok(None);
        };
        let new = match self.take_fresh_spare() {
            Some(id) => id,
            None => self.create_segment()?,
        };
        self.active = Some(new);
        Ok(Some(old))
    }

    /// Revokes the leases of `segments` (their writers' next reservations start new ones),
    /// so they can be sealed. The caller makes sure none holds an uncommitted reservation.
    pub fn revoke_leases_of(&mut self, segments: &[u64]) {
        let mut leased = self.leased.lock().unwrap_or_else(PoisonError::into_inner);
        for id in segments {
            leased.remove(id);
        }
    }

    /// Makes spare segments ahead now, so that the segments just sealed are not the newest
    /// (the newest is never retired: its id carries the next one over a restart).
    pub fn spares_ahead(&mut self) -> Result<usize> {
        self.wants_spares = true;
        self.replenish_spares()
    }

    /// Whether `segment` is leased to a one-copy writer now.
    pub fn leased(&self, segment: u64) -> bool {
        self.is_leased(segment)
    }
}
