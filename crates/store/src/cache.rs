//! A bounded, thread-safe LRU cache of payloads keyed by their log location. Locations are
//! never reused for different bytes (the log is append-only), so entries never go stale.

use crate::record::Location;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub struct Cache {
    capacity: u64,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    map: HashMap<Location, (Arc<Vec<u8>>, u64)>,
    /// Recency stamp -> key; the first entry is the least recently used.
    order: BTreeMap<u64, Location>,
    clock: u64,
    bytes: u64,
}

/// Bytes an entry is charged; empty payloads still cost one so they cannot pile up unbounded.
fn charge(data: &[u8]) -> u64 {
    (data.len() as u64).max(1)
}

impl Inner {
    fn touch(&mut self, loc: Location) -> u64 {
        self.clock += 1;
        self.order.insert(self.clock, loc);
        self.clock
    }

    fn remove(&mut self, loc: &Location) {
        if let Some((data, stamp)) = self.map.remove(loc) {
            self.order.remove(&stamp);
            self.bytes -= charge(&data);
        }
    }
}

impl Cache {
    /// A cache holding at most `capacity_bytes` of payload; 0 disables caching.
    pub fn new(capacity_bytes: u64) -> Cache {
        Cache {
            capacity: capacity_bytes,
            inner: Mutex::new(Inner::default()),
        }
    }

    // Every update leaves `Inner` consistent before anything that could panic, so a poisoned
    // lock still guards valid state and a panicking reader should not take the cache down.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn get(&self, loc: &Location) -> Option<Arc<Vec<u8>>> {
        let mut inner = self.lock();
        let (data, old) = inner.map.get(loc).map(|(d, s)| (d.clone(), *s))?;
        inner.order.remove(&old);
        let stamp = inner.touch(*loc);
        if let Some(entry) = inner.map.get_mut(loc) {
            entry.1 = stamp;
        }
        Some(data)
    }

    /// Caches `data`, evicting least recently used entries to stay within capacity. Payloads
    /// larger than the whole capacity are not cached (they would only flush everything else).
    pub fn insert(&self, loc: Location, data: Arc<Vec<u8>>) {
        let size = charge(&data);
        if size > self.capacity {
            return;
        }
        let mut inner = self.lock();
        inner.remove(&loc);
        while inner.bytes + size > self.capacity {
            let Some((_, victim)) = inner.order.pop_first() else {
                break;
            };
            if let Some((old, _)) = inner.map.remove(&victim) {
                inner.bytes -= charge(&old);
            }
        }
        let stamp = inner.touch(loc);
        inner.bytes += size;
        inner.map.insert(loc, (data, stamp));
    }

    /// Whether `loc` is cached, without counting as a use.
    pub fn contains(&self, loc: &Location) -> bool {
        self.lock().map.contains_key(loc)
    }

    /// Bytes currently charged to cached entries.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(offset: u64) -> Location {
        Location {
            segment: 1,
            offset,
            len: 0,
            crc: 0,
        }
    }

    fn data(n: usize) -> Arc<Vec<u8>> {
        Arc::new(vec![n as u8; n])
    }

    #[test]
    fn evicts_least_recently_used_by_bytes() {
        let c = Cache::new(100);
        c.insert(loc(1), data(40));
        c.insert(loc(2), data(40));
        assert_eq!(c.bytes(), 80);
        // Using 1 makes 2 the eviction victim.
        assert_eq!(c.get(&loc(1)).unwrap().len(), 40);
        c.insert(loc(3), data(30));
        assert!(c.contains(&loc(1)) && !c.contains(&loc(2)) && c.contains(&loc(3)));
        assert_eq!(c.bytes(), 70);
        // Re-inserting a key replaces it without double-charging.
        c.insert(loc(3), data(30));
        assert_eq!(c.bytes(), 70);
        // Needs room for 60: evicts 1 (least recent) and then 3.
        c.insert(loc(4), data(60));
        assert_eq!(c.bytes(), 90);
        assert!(!c.contains(&loc(1)) && c.contains(&loc(3)) && c.contains(&loc(4)));
        c.insert(loc(5), data(100));
        assert_eq!(c.bytes(), 100);
        assert!(c.contains(&loc(5)) && !c.contains(&loc(3)) && !c.contains(&loc(4)));
        assert!(c.get(&loc(4)).is_none());
    }

    #[test]
    fn oversize_and_zero_capacity_are_not_cached() {
        let c = Cache::new(100);
        c.insert(loc(1), data(50));
        c.insert(loc(2), data(101));
        assert!(!c.contains(&loc(2)) && c.contains(&loc(1)));
        assert_eq!(c.bytes(), 50);
        let off = Cache::new(0);
        off.insert(loc(1), data(1));
        off.insert(loc(2), data(0));
        assert_eq!((off.bytes(), off.capacity()), (0, 0));
        assert!(off.get(&loc(1)).is_none() && !off.contains(&loc(2)));
    }

    #[test]
    fn shared_across_threads() {
        let c = Arc::new(Cache::new(1000));
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for i in 0..200 {
                        c.insert(loc(t * 1000 + i), data(10));
                        c.get(&loc(t * 1000 + i / 2));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert!(c.bytes() <= 1000);
        let entries = c.lock().map.len() as u64;
        assert_eq!(entries * 10, c.bytes());
    }
}
