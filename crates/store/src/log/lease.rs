//! Segments leased to one-copy writers.
//!
//! A one-copy writer (a client on the server's node, `SegmentLog::reserve`) opens a segment
//! file and writes its payloads into it itself. Whatever that process does with the file
//! (a bug that writes through a reused descriptor, a reservation's offsets misread), it can
//! reach every byte of that file. So a writer gets segments of its own: a [`WriterLease`],
//! one per client connection, names the segment its reservations go to, and no other record
//! (a staged write, a commit record, another writer's reservation) is ever put there. A
//! writer's stray bytes can then damage only its own records, which reads and recovery
//! detect by their checksums, never anyone else's.
//!
//! A leased segment is created and listed in the MANIFEST on the lease's first reservation
//! and when the one before it is full (as any segment rolls over). While leased it is not
//! sealed, so it is never retired under its writer; once the lease is dropped (the
//! connection ended) it is an ordinary sealed segment. A writer that stays connected does
//! not hold its segment forever: retirement revokes a lease whose segment has nothing left
//! that needs it ([`SegmentLog::revoke_leases`]), and the writer's next reservation starts a
//! new segment.
//!
//! Making a segment costs a MANIFEST publish (two fsyncs); so that a writer's first one-copy
//! write does not wait for it, the log keeps a few empty, listed segments ahead
//! ([`SegmentLog::replenish_spares`], run in the background once writers have leased any).
//!
//! Nothing about it is durable state:
//! after a restart no segment is leased, and since a lease never outlives the process that
//! granted it, recovery treats leased segments like any other (every listed segment's tail
//! is scanned).

use super::SegmentLog;
use pdcx_core::Result;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

/// The segments currently leased, shared by the log and its leases. Lock order: the log's
/// lock, then this one (a lease being dropped takes only this one).
pub(super) type Leased = Arc<Mutex<BTreeSet<u64>>>;

/// Empty segments kept ahead for new leases and rollovers (`SegmentLog::spares`): how many
/// writers may start, or segments fill, between two replenishments (the checkpoint thread's)
/// without making a segment on the write path.
pub(super) const SPARES: usize = 4;

/// One writer's claim on the segment its one-copy writes go to. Dropping it releases the
/// segment: it takes no more records and may be sealed and retired like any other.
#[derive(Debug)]
pub struct WriterLease {
    leased: Leased,
    segment: Option<u64>,
}

impl WriterLease {
    /// The segment this lease's reservations go to now, if it has made one.
    pub fn segment(&self) -> Option<u64> {
        self.segment
    }

    fn release(&mut self) {
        if let Some(id) = self.segment.take() {
            self.leased
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
        }
    }
}

impl Drop for WriterLease {
    fn drop(&mut self) {
        self.release();
    }
}

impl SegmentLog {
    /// A new lease for one writer; it makes its segment on its first reservation.
    pub fn writer_lease(&self) -> WriterLease {
        WriterLease {
            leased: self.leased.clone(),
            segment: None,
        }
    }

    /// True while `segment` is leased to a writer.
    pub(super) fn is_leased(&self, segment: u64) -> bool {
        self.leased
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&segment)
    }

    /// Makes empty segments ahead for new leases, up to a few, listed with one MANIFEST, once
    /// any writer has taken a lease (a log no one-copy writer uses gets none). For a
    /// background thread: under the log's lock this waits for the MANIFEST's fsyncs, once
    /// after leases took spares. Returns how many it made.
    pub fn replenish_spares(&mut self) -> Result<usize> {
        self.check_poisoned()?;
        if !self.wants_spares || self.spares.len() >= SPARES {
            return Ok(0);
        }
        let made = self.create_segments(SPARES - self.spares.len())?;
        // Taken from the end: the lowest ids are used first.
        self.spares.extend(made.iter().rev());
        Ok(made.len())
    }

    /// A spare this process made (see `made_here_from`), for the shared segment's rollover.
    pub(super) fn take_fresh_spare(&mut self) -> Option<u64> {
        let at = self
            .spares
            .iter()
            .rposition(|&id| id >= self.made_here_from)?;
        Some(self.spares.remove(at))
    }

    /// True when `segment` is a spare (empty, waiting for a lease).
    pub(super) fn is_spare(&self, segment: u64) -> bool {
        self.spares.contains(&segment)
    }

    /// Revokes the leases of segments for which `idle` holds (no reservation in them
    /// uncommitted, nothing in them the caller still needs) and that are otherwise sealed
    /// (synced and checkpointed), so that they can be retired. Under the log's lock, as every
    /// reservation is: a lease revoked here gets a new segment for its next reservation.
    pub fn revoke_leases(&mut self, idle: &dyn Fn(u64) -> bool) {
        let mut leased = self.leased.lock().unwrap_or_else(PoisonError::into_inner);
        leased.retain(|id| {
            let settled = self
                .segments
                .get(id)
                .is_some_and(|s| s.len == s.checkpointed && !self.dirty.contains(id));
            !(settled && idle(*id))
        });
    }

    /// The segment of `lease` a record of `rec_len` bytes goes to: its current one while it
    /// has room (or is empty: a record larger than a segment gets one of its own), else a new
    /// one, which the lease then holds instead.
    pub(super) fn leased_segment_for(
        &mut self,
        lease: &mut WriterLease,
        rec_len: u64,
    ) -> Result<u64> {
        if let Some(id) = lease.segment.filter(|&id| self.is_leased(id)) {
            if let Some(seg) = self.segments.get(&id) {
                if seg.len == 0 || seg.len.saturating_add(rec_len) <= self.opts.segment_bytes {
                    return Ok(id);
                }
            }
        }
        self.wants_spares = true;
        let id = match self.spares.pop() {
            Some(id) => id,
            None => self.create_segment()?,
        };
        lease.release();
        self.leased
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id);
        lease.segment = Some(id);
        Ok(id)
    }
}
