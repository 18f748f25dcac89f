//! What a client remembers between file opens (`file.rs`): how much of a file its
//! readers consume (adaptive read-ahead) and the bytes of files it read whole, revalidated
//! at each open.
//!
//! The data cache is close-to-open, as NFS's: an open asks the owner for the file's metadata
//! anyway, and cached bytes are used only when the file's size and mtime are what they were
//! when the bytes were fetched (every commit and resize moves the mtime). The bytes were
//! fetched after that metadata was read, so they are never older than it; a write in between
//! changes the mtime and the next open fetches again. Writes through this client drop the
//! file's entry. Bounded (`PDCX_FILE_CACHE_MB`, default 64; 0 turns it off), least recently
//! used first out.
//!
//! Buffers are recycled ([`FileMemory::take`], [`FileMemory::give`]): a buffer evicted from
//! the cache, a closed file's read-ahead window and flushed write runs go to a small pool
//! that later fetches and writes draw from. Fresh memory costs a page fault per 4 KiB on
//! first touch, which for a tool that streams many files through (Montage's mBgExec) cost
//! more than the data copies themselves.
//!
//! On the node of a file's owner a window is rarely memory of its own: it is a slice of the
//! owner's log, mapped ([`Window::Mapped`], `Client::stream_window`), which costs neither a
//! copy nor fresh pages (mAdd holds 24 files open at once; their windows were 57 MB of page
//! faults). Those are not cached: a reopen plans them again in one round trip.

use pdcx_core::ObjectId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Bytes of a file fetched ahead of its reader: in memory of this client, or a slice of the
/// mapped log of a server on this node (one extent there; see `Client::stream_window`).
pub(crate) enum Window {
    Heap(Vec<u8>),
    /// Committed log bytes, checked against their record's checksum when the window was made
    /// (`DirectReads::map_piece`); read through [`Window::copy_out`], which notices a segment
    /// cut under the mapping (`SegFile::mapped`).
    Mapped {
        map: Arc<pdcx_store::MappedFile>,
        start: usize,
        len: usize,
    },
}

impl Window {
    fn as_slice(&self) -> &[u8] {
        match self {
            Window::Heap(v) => v,
            Window::Mapped { map, start, len } => &map[*start..*start + *len],
        }
    }

    /// Copies bytes `at..at + out.len()` of the window into `out`. An error, instead of the
    /// bytes, when the window is a mapping of a log segment that was cut under it (the copy
    /// then read zeros of the replacement, see `pdcx_store::mapguard`).
    pub(crate) fn copy_out(&self, at: usize, out: &mut [u8]) -> pdcx_core::Result<()> {
        out.copy_from_slice(&self.as_slice()[at..at + out.len()]);
        if let Window::Mapped { map, .. } = self {
            if map.faulted() {
                return Err(pdcx_core::Error::new(
                    pdcx_core::ErrorKind::Io,
                    "a server's log segment was cut short under this file's read-ahead window",
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Window::Heap(v) => v.len(),
            Window::Mapped { len, .. } => *len,
        }
    }
}

/// Bytes of one file read whole, and the metadata they match.
struct Entry {
    mtime: f64,
    size: u64,
    data: Arc<Window>,
    used: u64,
}

#[derive(Default)]
struct Cache {
    map: HashMap<ObjectId, Entry>,
    bytes: usize,
    tick: u64,
}

pub(crate) struct FileMemory {
    /// Average fraction of a file its readers consumed per open (1.0 until learned).
    fraction: Mutex<f64>,
    cache: Mutex<Cache>,
    cap: usize,
    /// Spare buffers (their capacities add up to at most [`POOL_MAX`]).
    pool: Mutex<Vec<Vec<u8>>>,
}

/// The most spare buffer capacity kept.
const POOL_MAX: usize = 64 << 20;
/// Buffers smaller than this are not worth keeping.
const POOL_MIN: usize = 64 << 10;
/// Fresh buffers of at least [`POOL_MIN`] get a capacity of a whole number of these.
const ROUND: usize = 1 << 20;

impl FileMemory {
    pub(crate) fn from_env() -> FileMemory {
        let mb = usize::try_from(pdcx_core::config::FILE_CACHE_MB.count_or_default())
            .unwrap_or(usize::MAX);
        FileMemory {
            fraction: Mutex::new(1.0),
            cache: Mutex::new(Cache::default()),
            cap: mb.saturating_mul(1 << 20),
            pool: Mutex::new(Vec::new()),
        }
    }

    /// A zero-filled buffer of `len` bytes, recycled when the pool has one large enough.
    pub(crate) fn take(&self, len: usize) -> Vec<u8> {
        let mut v = self.take_empty(len);
        v.resize(len, 0);
        v
    }

    /// An empty buffer with room for at least `cap` bytes (recycled when possible).
    pub(crate) fn take_empty(&self, cap: usize) -> Vec<u8> {
        let mut p = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        // The smallest spare that fits.
        let best = p
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= cap)
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                let mut v = p.swap_remove(i);
                v.clear();
                v
            }
            // Rounded up to whole MiB, so buffers of files of similar sizes can stand in for
            // each other once recycled (a buffer of exactly one 2.12 MB file could never take
            // the next, 2.2 MB one: every fetch then faulted in fresh memory). The pages past
            // what is written are never touched.
            None if cap >= POOL_MIN => Vec::with_capacity(cap.next_multiple_of(ROUND)),
            None => Vec::with_capacity(cap),
        }
    }

    /// Returns a buffer to the pool (dropped when the pool is full or it is small).
    pub(crate) fn give(&self, v: Vec<u8>) {
        if v.capacity() < POOL_MIN {
            return;
        }
        let mut p = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        let held: usize = p.iter().map(Vec::capacity).sum();
        if held + v.capacity() <= POOL_MAX {
            p.push(v);
        } else if let Some(smallest) = p
            .iter()
            .enumerate()
            .min_by_key(|(_, b)| b.capacity())
            .filter(|(_, b)| b.capacity() < v.capacity())
            .map(|(i, _)| i)
        {
            // Keep the larger buffers: they serve any smaller request too.
            if held - p[smallest].capacity() + v.capacity() <= POOL_MAX {
                p[smallest] = v;
            }
        }
    }

    /// Gives `data`'s memory back when nobody else holds it (a mapped window just unmaps).
    pub(crate) fn give_shared(&self, data: Arc<Window>) {
        if let Ok(Window::Heap(v)) = Arc::try_unwrap(data) {
            self.give(v);
        }
    }

    fn cache(&self) -> MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fraction of a file readers consume, as learned so far.
    pub(crate) fn fraction(&self) -> f64 {
        *self.fraction.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Learns from a closed reader that consumed `consumed` bytes of a `size`-byte file.
    pub(crate) fn learn(&self, consumed: u64, size: u64) {
        if size == 0 {
            return;
        }
        let f = (consumed as f64 / size as f64).min(1.0);
        let mut g = self.fraction.lock().unwrap_or_else(|p| p.into_inner());
        *g = 0.5 * *g + 0.5 * f;
    }

    /// The cached bytes of `id` when they match `mtime` and `size`.
    pub(crate) fn get(&self, id: ObjectId, mtime: f64, size: u64) -> Option<Arc<Window>> {
        let mut c = self.cache();
        c.tick += 1;
        let tick = c.tick;
        match c.map.get_mut(&id) {
            Some(e) if e.mtime == mtime && e.size == size => {
                e.used = tick;
                Some(e.data.clone())
            }
            _ => None,
        }
    }

    /// Remembers the whole content of `id` as of metadata (`mtime`, `size`).
    pub(crate) fn put(&self, id: ObjectId, mtime: f64, data: Arc<Window>) {
        let len = data.len();
        if len > self.cap / 4 {
            return;
        }
        let mut c = self.cache();
        c.tick += 1;
        let tick = c.tick;
        if let Some(old) = c.map.remove(&id) {
            c.bytes -= old.data.len();
        }
        let mut evicted = Vec::new();
        while c.bytes + len > self.cap {
            let Some((&victim, _)) = c.map.iter().min_by_key(|(_, e)| e.used) else {
                break;
            };
            if let Some(e) = c.map.remove(&victim) {
                c.bytes -= e.data.len();
                evicted.push(e.data);
            }
        }
        c.bytes += len;
        c.map.insert(
            id,
            Entry {
                mtime,
                size: len as u64,
                data,
                used: tick,
            },
        );
        drop(c);
        for d in evicted {
            self.give_shared(d);
        }
    }

    /// Forgets `id` (this client changed it).
    pub(crate) fn forget(&self, id: ObjectId) {
        let mut c = self.cache();
        if let Some(e) = c.map.remove(&id) {
            c.bytes -= e.data.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_match_their_metadata_and_the_least_used_goes_first() {
        let m = FileMemory {
            fraction: Mutex::new(1.0),
            cache: Mutex::new(Cache::default()),
            cap: 400,
            pool: Mutex::new(Vec::new()),
        };
        m.put(1, 5.0, Arc::new(Window::Heap(vec![1; 100])));
        m.put(2, 5.0, Arc::new(Window::Heap(vec![2; 100])));
        assert!(m.get(1, 5.0, 100).is_some());
        assert!(m.get(1, 6.0, 100).is_none(), "a newer mtime used old bytes");
        assert!(m.get(1, 5.0, 99).is_none(), "another size used old bytes");
        m.put(3, 5.0, Arc::new(Window::Heap(vec![3; 100])));
        m.put(4, 5.0, Arc::new(Window::Heap(vec![4; 100]))); // 2 is the least recently used
        m.put(5, 5.0, Arc::new(Window::Heap(vec![5; 100])));
        assert!(m.get(2, 5.0, 100).is_none());
        assert!(m.get(1, 5.0, 100).is_some());
        m.forget(1);
        assert!(m.get(1, 5.0, 100).is_none());
        m.put(6, 5.0, Arc::new(Window::Heap(vec![6; 101]))); // more than a quarter of the cap: not kept
        assert!(m.get(6, 5.0, 101).is_none());
        m.learn(50, 100);
        assert!((m.fraction() - 0.75).abs() < 1e-9);
    }

    #[test]
    fn buffers_are_recycled_smallest_fit_first() {
        let m = FileMemory::from_env();
        m.give(Vec::with_capacity(1 << 20));
        m.give(Vec::with_capacity(4 << 20));
        m.give(Vec::with_capacity(1000)); // too small to keep
        let v = m.take(300_000);
        assert_eq!(v.len(), 300_000);
        assert!(v.iter().all(|&b| b == 0));
        assert_eq!(v.capacity(), 1 << 20, "not the smallest fit");
        assert_eq!(m.take_empty(2 << 20).capacity(), 4 << 20);
        assert_eq!(m.take_empty(1 << 20).capacity(), 1 << 20, "a fresh buffer");
        // Fresh buffers come in whole MiB, so similar files' buffers are interchangeable.
        assert_eq!(m.take(2_125_440).capacity(), 3 << 20);
        assert_eq!(
            m.take_empty(1000).capacity(),
            1000,
            "small ones are not rounded"
        );
    }
}
