//! Segment retirement ([`DataStore::retire_flushed`]).

use super::commit::CommitGuard;
use super::DataStore;
use pdcx_core::Result;
use std::collections::HashSet;
use std::sync::Arc;

impl DataStore {
    /// Retires sealed log segments whose every visible extent has a durable home and that no
    /// staged or deferred write still needs; returns how many. Order:
    ///
    /// 1. take the commit lock: no extent can appear (or be registered) meanwhile;
    /// 2. collect the blocked segments: those of deferred writes (read before the index:
    ///    registration adds to the index before it takes a write off the deferred list), and of
    ///    every extent still in the log without a durable home;
    /// 3. under the log lock: the sealed segments neither blocked nor pinned by a staged write
    ///    (appends pin under the same lock), segments leased to writers included (their
    ///    leases are revoked) — crash point `retire.before_manifest`;
    /// 4. `SegmentLog::retire`: a new manifest without them (fsynced, renamed, directory
    ///    fsynced), then unlink the files — `retire.after_manifest`. A crash in between leaves
    ///    unlisted files, which the next open deletes; every extent they held has a durable home
    ///    row (written and fsynced before its home was published), so recovery finds it there;
    /// 5. mark their extents as no longer in the log (reads go to the home tier).
    ///
    /// Without tiers no extent has a durable home: only segments holding no visible extent
    /// at all (those of dropped or deleted data) are retired.
    pub fn retire_flushed(&self) -> Result<u64> {
        Ok(self.retire_unneeded()?.0)
    }

    /// [`retire_flushed`](Self::retire_flushed), returning (segments, bytes) freed.
    pub fn retire_unneeded(&self) -> Result<(u64, u64)> {
        let t = self.tiering.clone();
        // Only checkpointed segments are sealed: a segment is retired only once no commit
        // record in it needs replaying (the rows it names are durable in the metadata). The
        // checkpoint's WAL fsync runs without the commit lock, so commits go on meanwhile;
        // a commit that lands after it leaves its segment dirty or longer than checkpointed,
        // and such a segment is not sealed (`SegmentLog::sealed_segments`).
        self.checkpoint()?;
        let commit = self.lock_commit();
        let blocked = self.blocked_segments(&commit, &|tier| {
            t.as_ref().is_some_and(|t| t.is_durable(tier))
        });
        let (ready, freed) = {
            let mut log = self.log();
            // A writer that stays connected lets go of its segment once it holds nothing
            // that must stay (its next reservation starts a new one).
            log.revoke_leases(&|s| !blocked.contains(&s) && !self.pins.pinned(s));
            let ready: Vec<u64> = log
                .sealed_segments()
                .into_iter()
                .filter(|s| !blocked.contains(s) && !self.pins.pinned(*s))
                .collect();
            if ready.is_empty() {
                return Ok((0, 0));
            }
            // Crash points retire.before_manifest / retire.after_manifest are inside.
            let freed = log.retire(&ready)?;
            (ready, freed)
        };
        if let Some(t) = &t {
            let mut st = t.state.lock().unwrap_or_else(|p| p.into_inner());
            st.retired_segments += ready.len() as u64;
            st.retired_bytes += freed;
        }
        let ready: HashSet<u64> = ready.into_iter().collect();
        for e in self.index_mut().values_mut().flatten() {
            if ready.contains(&e.loc.segment) {
                Arc::make_mut(e).in_log = false;
            }
        }
        Ok((ready.len() as u64, freed))
    }

    /// Segments that must stay: holding deferred writes, or extents without a durable home.
    fn blocked_segments(
        &self,
        _c: &CommitGuard<'_>,
        durable: &dyn Fn(usize) -> bool,
    ) -> HashSet<u64> {
        let mut blocked = self.deferred_segments();
        for e in self.index().values().flatten() {
            if e.in_log && !e.home.as_ref().is_some_and(|h| durable(h.tier)) {
                blocked.insert(e.loc.segment);
            }
        }
        blocked
    }
}
