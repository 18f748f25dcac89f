//! Retiring segments whose every record now lives elsewhere (on a storage tier): unlisted
//! from the MANIFEST first, then unlinked.

use super::{Segment, SegmentLog};
use pdcx_core::{Error, Result};
use pdcx_fsio::crash;

impl SegmentLog {
    /// Removes sealed, fully committed segments whose every record now lives elsewhere (the
    /// caller has made copies durable on a storage tier). The MANIFEST is replaced first
    /// (fsynced, renamed, directory fsynced), then the files are unlinked; a crash in between
    /// leaves unlisted files, which the next open deletes. The active segment, leased ones and
    /// segments with uncommitted or unsynced bytes are refused. Returns the bytes freed.
    pub fn retire(&mut self, ids: &[u64]) -> Result<u64> {
        self.check_poisoned()?;
        for id in ids {
            let seg = self
                .segments
                .get(id)
                .ok_or_else(|| Error::invalid(format!("segment {id} is not part of the log")))?;
            if !self.is_sealed(*id, seg) {
                return Err(Error::invalid(format!(
                    "segment {id} is active or has uncommitted bytes; only sealed segments can be retired"
                )));
            }
        }
        let manifest = self.next_manifest(ids);
        crash::point("retire.before_manifest");
        self.manifests.publish(manifest)?;
        crash::point("retire.after_manifest");
        let mut freed = 0;
        for id in ids {
            if let Some(seg) = self.segments.remove(id) {
                freed += seg.len;
                // Already unlisted: if the unlink fails, the next open removes the file.
                let _ = self.fs.remove_file(&self.segment_path(*id));
            }
        }
        Ok(freed)
    }

    /// Ids of segments that no longer take appends and whose bytes are all synced and
    /// checkpointed.
    pub fn sealed_segments(&self) -> Vec<u64> {
        self.segments
            .iter()
            .filter(|(&id, s)| self.is_sealed(id, s))
            .map(|(&id, _)| id)
            .collect()
    }

    /// Neither the shared active segment, nor leased to a writer or kept for one (a spare),
    /// nor the newest segment, and
    /// every byte synced and checkpointed. The newest stays because the next segment's id is
    /// one past it: ids are never reused (plans and clients name segments by id), and the
    /// MANIFEST records no counter, so the newest listed segment is what carries it over a
    /// restart.
    fn is_sealed(&self, id: u64, seg: &Segment) -> bool {
        Some(id) != self.active
            && Some(id) != self.segments.last_key_value().map(|(&k, _)| k)
            && !self.is_spare(id)
            && !self.is_leased(id)
            && !self.dirty.contains(&id)
            && seg.len == seg.checkpointed
    }
}
