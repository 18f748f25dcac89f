//! Retiring segments whose every record now lives elsewhere (on a storage tier): unlisted
//! from the MANIFEST first, then unlinked.

use super::SegmentLog;
use pdcx_core::{Error, Result};
use pdcx_fsio::crash;

impl SegmentLog {
    /// Removes sealed, fully committed segments whose every record now lives elsewhere (the
    /// caller has made copies durable on a storage tier). The MANIFEST is replaced first
    /// (fsynced, renamed, directory fsynced), then the files are unlinked; a crash in between
    /// leaves unlisted files, which the next open deletes. The active (last) segment and
    /// segments with uncommitted or unsynced bytes are refused. Returns the bytes freed.
    pub fn retire(&mut self, ids: &[u64]) -> Result<u64> {
        self.check_poisoned()?;
        let last = self.segments.last_key_value().map(|(&id, _)| id);
        for id in ids {
            let seg = self
                .segments
                .get(id)
                .ok_or_else(|| Error::invalid(format!("segment {id} is not part of the log")))?;
            if Some(*id) == last || self.dirty.contains(id) || seg.len != seg.checkpointed {
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
        let last = self.segments.last_key_value().map(|(&id, _)| id);
        self.segments
            .iter()
            .filter(|(id, s)| {
                Some(**id) != last && !self.dirty.contains(id) && s.len == s.checkpointed
            })
            .map(|(&id, _)| id)
            .collect()
    }
}
