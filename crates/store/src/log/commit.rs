//! Making appends durable and checkpointing them: a sync (one fdatasync per written segment,
//! in three steps so appends go on while it runs), then a MANIFEST recording the synced
//! lengths as checkpointed.

use super::publish::PendingManifest;
use super::{SegmentLog, POISONED};
use pdcx_core::{Error, ErrorKind, Result};
use pdcx_fsio::{crash, FsFile};
use std::path::PathBuf;
use std::sync::Arc;

/// What one sync makes durable; see [`SegmentLog::prepare_commit`].
pub struct CommitPlan {
    /// Segment, path, file, and its length when the plan was made.
    files: Vec<(u64, PathBuf, Arc<dyn FsFile>, u64)>,
}

impl CommitPlan {
    /// fdatasync every segment of the plan, all at once when there are several (the shared
    /// segment and writers' own, `lease.rs`): one after the other, each would wait for a
    /// journal commit of its own, while issued together the file system commits them as one.
    /// Nothing is acknowledged before every one has returned, so their order does not matter:
    /// a crash in between leaves a commit record whose payloads recovery finds damaged, as
    /// for any sync a crash interrupts. Needs no lock on the log.
    pub fn sync(&self) -> Result<()> {
        let sync = |(_, path, file, _): &(u64, PathBuf, Arc<dyn FsFile>, u64)| {
            file.sync_data().map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!("fdatasync {}: {e}; {POISONED}", path.display()),
                )
            })
        };
        match self.files.as_slice() {
            [] => {}
            [one] => sync(one)?,
            [first, rest @ ..] => std::thread::scope(|s| {
                let others: Vec<_> = rest.iter().map(|f| s.spawn(move || sync(f))).collect();
                let mut result = sync(first);
                for h in others {
                    let r = h
                        .join()
                        .unwrap_or_else(|_| Err(Error::internal("an fdatasync thread panicked")));
                    result = result.and(r);
                }
                result
            })?,
        }
        crash::point("log.after_segment_sync");
        Ok(())
    }
}

impl SegmentLog {
    /// Everything appended so far made durable and checkpointed: a sync, then a MANIFEST
    /// naming every segment's synced length. For callers without metadata of their own to
    /// replay (tests, tools); the server syncs per commit and checkpoints on its own schedule
    /// ([`prepare_commit`](Self::prepare_commit), [`checkpoint`](Self::checkpoint)).
    pub fn commit(&mut self) -> Result<()> {
        if let Some(plan) = self.prepare_commit()? {
            let synced = plan.sync();
            self.finish_commit(plan, synced)?;
        }
        let lengths = self.checkpoint_lengths();
        self.checkpoint(&lengths)
    }

    /// First part of a sync, under the caller's lock: snapshots the segments written since
    /// the last sync and their lengths. The slow part, [`CommitPlan::sync`] (fdatasync), needs
    /// no access to the log, so appends go on meanwhile; [`finish_commit`](Self::finish_commit)
    /// then marks exactly the snapshotted lengths durable, never bytes appended later.
    pub fn prepare_commit(&mut self) -> Result<Option<CommitPlan>> {
        self.check_poisoned()?;
        if self.dirty.is_empty() {
            return Ok(None);
        }
        let mut files = Vec::with_capacity(self.dirty.len());
        for &id in &self.dirty {
            let seg = self
                .segments
                .get(&id)
                .ok_or_else(|| Error::internal(format!("segment {id} vanished")))?;
            files.push((id, self.segment_path(id), seg.file.clone(), seg.len));
        }
        self.dirty.clear();
        Ok(Some(CommitPlan { files }))
    }

    /// Last part of a sync, under the caller's lock again: poisons the log if the fdatasync
    /// failed (never retry an fsync), else marks the plan's lengths durable.
    pub fn finish_commit(&mut self, plan: CommitPlan, synced: Result<()>) -> Result<()> {
        if let Err(e) = synced {
            self.poison();
            return Err(e);
        }
        self.check_poisoned()?;
        for (id, _, _, len) in &plan.files {
            if let Some(seg) = self.segments.get_mut(id) {
                seg.synced = seg.synced.max(*len);
            }
        }
        Ok(())
    }

    /// Each segment's durable length where it is past its checkpoint (what a checkpoint now
    /// would record). Empty when there is nothing new to checkpoint.
    pub fn checkpoint_lengths(&self) -> Vec<(u64, u64)> {
        self.segments
            .iter()
            .filter(|(_, s)| s.synced > s.checkpointed)
            .map(|(&id, s)| (id, s.synced))
            .collect()
    }

    /// Publishes a MANIFEST recording `lengths` (from [`checkpoint_lengths`]) as checkpointed:
    /// write MANIFEST.tmp, fsync, rename, fsync the directory. The caller guarantees that
    /// whatever the commit records below those lengths describe is durable elsewhere (the
    /// server: its metadata WAL was fsynced after they were recorded), since recovery no
    /// longer replays them. Lengths of segments retired meanwhile are ignored. Under this
    /// log's lock throughout; a caller that can, publishes after releasing it
    /// ([`prepare_checkpoint`](Self::prepare_checkpoint)).
    ///
    /// [`checkpoint_lengths`]: Self::checkpoint_lengths
    pub fn checkpoint(&mut self, lengths: &[(u64, u64)]) -> Result<()> {
        match self.prepare_checkpoint(lengths)? {
            Some(m) => self.manifests.publish(m),
            None => Ok(()),
        }
    }

    /// [`checkpoint`](Self::checkpoint) in two steps: records `lengths` as checkpointed and
    /// returns the MANIFEST to publish with [`manifests`](Self::manifests), which may be done
    /// without this log's lock. Until it is written, recovery replays a little more than the
    /// log now counts as checkpointed: harmless, since the caller made what those commit
    /// records describe durable before (retirement, which relies on the count, publishes a
    /// newer MANIFEST of its own before unlinking anything). None: nothing to record.
    pub fn prepare_checkpoint(
        &mut self,
        lengths: &[(u64, u64)],
    ) -> Result<Option<PendingManifest>> {
        self.check_poisoned()?;
        if lengths.is_empty() {
            return Ok(None);
        }
        for &(id, len) in lengths {
            if let Some(seg) = self.segments.get_mut(&id) {
                seg.checkpointed = seg.checkpointed.max(len.min(seg.synced));
            }
        }
        Ok(Some(self.next_manifest(&[])))
    }
}
