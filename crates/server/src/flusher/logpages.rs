//! Where a flush takes its extents' bytes: the log's own pages, each segment mapped once per
//! pass, so the put's write is the bytes' only copy (why, and why they are checked twice:
//! `tiering::flushbytes`). Extents not in the log (on a tier, in the read cache, read by
//! reference), small ones, and segments that cannot be mapped (a simulated disk, no free
//! mapping slot) are read the usual way.

use crate::datastore::{DataStore, Extent};
use crate::tiering::flushbytes::{self, FlushBytes};
use crate::tiering::Home;
use pdcx_core::{ObjectId, ObjectMeta, Result};
use pdcx_store::MappedFile;
use std::collections::HashMap;
use std::sync::Arc;

/// Extents smaller than this are read: their copy costs less than the `madvise` that maps
/// their pages, and a pass of many small extents keeps no mapping slots busy for them.
const MAP_MIN: u64 = 64 << 10;

/// One pass's mapped log segments, by segment number.
pub(super) struct LogPages<'a> {
    store: &'a DataStore,
    maps: HashMap<u64, Arc<MappedFile>>,
}

impl<'a> LogPages<'a> {
    pub(super) fn new(store: &'a DataStore) -> LogPages<'a> {
        LogPages {
            store,
            maps: HashMap::new(),
        }
    }

    /// Extent `e` of `meta`'s bytes, checked against its record's checksum.
    pub(super) fn take(&mut self, meta: &ObjectMeta, e: &Extent) -> Result<FlushBytes> {
        if e.loc.len >= MAP_MIN {
            if let Some((span, loc)) = self.store.extent_span(meta.id, e)? {
                let end = span.offset() + span.len();
                let map = match self.maps.get(&loc.segment) {
                    Some(m) if m.len() as u64 >= end => Some(m.clone()),
                    // Not mapped yet, or the segment grew past the mapping since.
                    _ => span.map_segment().map(Arc::new),
                };
                if let Some(map) = map {
                    self.maps.insert(loc.segment, map.clone());
                    let what = || format!("extent {} of {}", e.seq, meta.name);
                    return FlushBytes::mapped(
                        map,
                        span.offset() as usize,
                        span.len() as usize,
                        loc.crc,
                        &what,
                    );
                }
            }
        }
        let read = self.store.extent_bytes(meta, e)?;
        Ok(FlushBytes::copied(flushbytes::shared(read)))
    }
}

/// Drops from `done` the extents whose bytes changed in the log while they were put (see
/// `tiering::flushbytes`): they get no home and stay in the log. The error to report, if any.
pub(super) fn keep_unchanged(
    done: &mut Vec<(ObjectId, u64, Home)>,
    taken: &HashMap<(ObjectId, u64), FlushBytes>,
) -> Option<String> {
    let before = done.len();
    done.retain(|(id, seq, _)| taken.get(&(*id, *seq)).is_none_or(FlushBytes::unchanged));
    let changed = before - done.len();
    (changed > 0).then(|| {
        format!(
            "{changed} extent(s) changed in the log while they were flushed (another writer of \
             its segment files?); left in the log, not homed"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn an_extent_changed_in_the_log_after_it_was_taken_gets_no_home() {
        let data = vec![5u8; 8192];
        let (_tmp, f, map) = crate::tiering::flushbytes::mapped_test_file(&data);
        let crc = crc32c::crc32c(&data[..4096]);
        let what = String::new;
        let mut taken = HashMap::new();
        taken.insert(
            (1, 1),
            FlushBytes::mapped(map.clone(), 0, 4096, crc, &what).unwrap(),
        );
        taken.insert(
            (1, 2),
            FlushBytes::mapped(map, 4096, 4096, crc, &what).unwrap(),
        );
        let home = || Home::own(0, "none".into(), 4096);
        let mut done = vec![(1, 1, home()), (1, 2, home()), (2, 1, home())];
        assert_eq!(keep_unchanged(&mut done, &taken), None);
        assert_eq!(done.len(), 3);

        f.write_all_at(b"x", 4096 + 7).unwrap();
        let err = keep_unchanged(&mut done, &taken).expect("the change is reported");
        assert!(err.starts_with("1 extent(s) changed"), "{err}");
        let left: Vec<(ObjectId, u64)> = done.iter().map(|(i, s, _)| (*i, *s)).collect();
        assert_eq!(left, vec![(1, 1), (2, 1)], "a copy (2, 1) is never dropped");
    }
}
