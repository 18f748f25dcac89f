//! Log segments the server maps read-only to gather selections: a strided read or a
//! read of many short rows copies only the selected elements out of the mapped extents,
//! instead of reading each extent's span (most of it unselected) into a buffer first.
//!
//! Why a mapped committed byte is the right byte, or an error: committed bytes of a segment
//! are never rewritten *by the log* and the file is never cut below them by it (recovery and
//! a failed append cut only an uncommitted tail); retirement unlinks the whole file, which a
//! mapping outlives. Only committed bytes are read
//! ([`Engine::piece_plan`](crate::engine::Engine::piece_plan) plans only those). But the
//! file is an ordinary file of the deployment's user: a one-copy writer's stray `pwrite`
//! (it has the whole segment open) or any other program may change committed bytes, and
//! `truncate` may cut them off. So every extent a gather copies from is checked whole
//! against its record's payload checksum after the copy (`Engine::read_gathered`), and
//! mappings are [`MappedFile`]s: a read past the end of a file cut after it was mapped reads
//! zeros and flags the mapping ([`MappedFile::faulted`]) instead of killing the server with
//! SIGBUS (see `pdcx_store::mapguard` for why a handler rather than `pread`); the read then
//! fails with an error and the mapping is dropped ([`MappedSegments::forget`]).
//!
//! A mapping is known by the file's (st_dev, st_ino) and dropped once that file is no longer
//! at its path, so a retired segment's disk space is freed.

use pdcx_store::MappedFile;
use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Mappings kept; beyond this many they are all dropped (remapping costs an open and mmap).
const MAX_MAPS: usize = 256;
/// How often at most the mappings are checked for retired segments.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

struct Mapped {
    dev: u64,
    ino: u64,
    map: Arc<MappedFile>,
}

#[derive(Default)]
pub struct MappedSegments {
    maps: Mutex<HashMap<u64, Mapped>>,
    swept: Mutex<Option<Instant>>,
}

impl MappedSegments {
    /// Segment `seg` of the log directory `dir`, mapped with at least `end` bytes, if it is
    /// the file (`dev`, `ino`) and that long; None otherwise (the caller reads the usual way).
    pub fn get(
        &self,
        dir: &str,
        seg: u64,
        dev: u64,
        ino: u64,
        end: u64,
    ) -> Option<Arc<MappedFile>> {
        let path = pdcx_store::segment_path(dir, seg);
        self.sweep(dir);
        let mut maps = self.maps.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = maps.get(&seg) {
            if (m.dev, m.ino) == (dev, ino) && m.map.len() as u64 >= end {
                return Some(m.map.clone());
            }
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() || (meta.dev(), meta.ino()) != (dev, ino) || meta.len() < end {
            return None;
        }
        let map = Arc::new(MappedFile::map(&file, meta.len()).ok()?);
        if maps.len() >= MAX_MAPS {
            maps.clear();
        }
        maps.insert(
            seg,
            Mapped {
                dev,
                ino,
                map: map.clone(),
            },
        );
        Some(map)
    }

    /// Drops the mapping of segment `seg` (a read found it cut: the next read maps the file
    /// again, as long as it is now, or reads it the usual way).
    pub fn forget(&self, seg: u64) {
        self.maps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&seg);
    }

    /// At most every [`SWEEP_EVERY`]: drops the mappings of segments no longer at their path
    /// (retired), so their disk space is freed.
    fn sweep(&self, dir: &str) {
        let now = Instant::now();
        {
            let mut last = self.swept.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| now.duration_since(t) < SWEEP_EVERY) {
                return;
            }
            *last = Some(now);
        }
        let mut maps = self.maps.lock().unwrap_or_else(|p| p.into_inner());
        maps.retain(|seg, m| {
            std::fs::symlink_metadata(pdcx_store::segment_path(dir, *seg))
                .is_ok_and(|x| (x.dev(), x.ino()) == (m.dev, m.ino))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_only_the_named_file_and_forgets_it_once_retired() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_str().unwrap();
        let path = pdcx_store::segment_path(tmp.path(), 2);
        std::fs::write(&path, b"committed").unwrap();
        let m = std::fs::metadata(&path).unwrap();
        let segs = MappedSegments::default();
        assert_eq!(
            &segs.get(dir, 2, m.dev(), m.ino(), 9).unwrap()[..],
            b"committed"
        );
        assert!(
            segs.get(dir, 2, m.dev(), m.ino(), 10).is_none(),
            "past the end"
        );
        assert!(
            segs.get(dir, 2, m.dev(), m.ino() + 1, 1).is_none(),
            "another file"
        );
        assert!(
            segs.get(dir, 3, m.dev(), m.ino(), 1).is_none(),
            "no such segment"
        );
        std::fs::remove_file(&path).unwrap();
        *segs.swept.lock().unwrap() = None;
        segs.sweep(dir);
        assert!(segs.maps.lock().unwrap().is_empty(), "retired: unmapped");
    }
}
