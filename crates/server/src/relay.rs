//! Per-node aggregation of metadata lookups (PDC paper §II-F.2): a client sends lookups of
//! objects owned elsewhere (`LookupObject`) to its node-local server, which forwards them to the
//! owner. Identical lookups that arrive together share one forwarded request:
//!
//! - the first lookup of a key opens a *flight* and waits `window` (default 1 ms) so a burst
//!   from many ranks released by a barrier can board it;
//! - at most one flight per key is on the wire at a time; lookups arriving meanwhile board the
//!   next flight, which leaves when the previous one lands (as group commit does with fsyncs);
//! - a flight stops boarding the moment it is sent, and nothing is cached.
//!
//! So every answer was computed by the owner after the lookup it answers arrived here: a
//! lookup never sees an object state older than its own start (an object created or deleted
//! before the lookup began is seen as such). Coalescing is the only saving; a later lookup
//! of the same key always goes to the owner again.

use pdcx_core::protocol::ObjectKey;
use pdcx_core::{Error, ObjectMeta, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

pub struct Relay {
    window: Duration,
    keys: Mutex<HashMap<ObjectKey, Slot>>,
    /// Lookups forwarded to owners (one per flight).
    pub relayed: AtomicU64,
    /// Client lookups that boarded another client's flight.
    pub coalesced: AtomicU64,
}

#[derive(Default)]
struct Slot {
    /// The flight of this key still taking riders, if any.
    boarding: Option<Arc<Flight>>,
    /// Held while a flight of this key is on the wire.
    wire: Arc<Mutex<()>>,
}

struct Flight {
    riders: AtomicU32,
    landed: Mutex<Option<Result<ObjectMeta>>>,
    cv: Condvar,
}

impl Flight {
    fn new() -> Flight {
        Flight {
            riders: AtomicU32::new(1),
            landed: Mutex::new(None),
            cv: Condvar::new(),
        }
    }

    fn wait(&self) -> Result<ObjectMeta> {
        let mut g = self.landed.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = g.as_ref() {
                return r.clone();
            }
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Lands a flight however its leader leaves (an early return or a panic must not strand the
/// riders).
struct Landing<'a> {
    flight: &'a Flight,
    result: Option<Result<ObjectMeta>>,
}

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        let r = self
            .result
            .take()
            .unwrap_or_else(|| Err(Error::internal("a forwarded lookup was abandoned")));
        *self.flight.landed.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        self.flight.cv.notify_all();
    }
}

impl Relay {
    pub fn new(window: Duration) -> Relay {
        Relay {
            window,
            keys: Mutex::new(HashMap::new()),
            relayed: AtomicU64::new(0),
            coalesced: AtomicU64::new(0),
        }
    }

    /// Answers a lookup of `key` with the result of one forwarded request shared by every
    /// identical lookup that boards the same flight. `send(riders)` forwards it to the owner.
    pub fn lookup(
        &self,
        key: &ObjectKey,
        send: impl FnOnce(u32) -> Result<ObjectMeta>,
    ) -> Result<ObjectMeta> {
        let (flight, wire) = {
            let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
            let slot = keys.entry(key.clone()).or_default();
            if let Some(f) = &slot.boarding {
                f.riders.fetch_add(1, Ordering::Relaxed);
                let f = f.clone();
                drop(keys);
                self.coalesced.fetch_add(1, Ordering::Relaxed);
                return f.wait();
            }
            let f = Arc::new(Flight::new());
            slot.boarding = Some(f.clone());
            (f, slot.wire.clone())
        };
        let mut landing = Landing {
            flight: &flight,
            result: None,
        };
        if !self.window.is_zero() {
            std::thread::sleep(self.window);
        }
        let on_wire = wire.lock().unwrap_or_else(|p| p.into_inner());
        let riders = {
            let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(slot) = keys.get_mut(key) {
                slot.boarding = None;
            }
            flight.riders.load(Ordering::Relaxed)
        };
        self.relayed.fetch_add(1, Ordering::Relaxed);
        let r = send(riders);
        drop(on_wire);
        landing.result = Some(r.clone());
        drop(landing);
        // Forget the key once nobody is boarding or waiting for the wire (the map holds one
        // reference to `wire`, this function the other).
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if keys
            .get(key)
            .is_some_and(|s| s.boarding.is_none() && Arc::strong_count(&s.wire) == 2)
        {
            keys.remove(key);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pdcx_core::ErrorKind;
    use std::sync::Barrier;

    #[test]
    fn a_burst_shares_one_forwarded_lookup_and_later_ones_go_again() {
        let relay = Relay::new(Duration::from_millis(50));
        let sent = AtomicU64::new(0);
        let riders_seen = AtomicU64::new(0);
        let n = 8;
        let barrier = Barrier::new(n);
        let key = ObjectKey::Name("a/b".into());
        std::thread::scope(|s| {
            for _ in 0..n {
                s.spawn(|| {
                    barrier.wait();
                    let r = relay.lookup(&key, |riders| {
                        sent.fetch_add(1, Ordering::SeqCst);
                        riders_seen.fetch_add(riders as u64, Ordering::SeqCst);
                        Err(Error::not_found("no object named \"a/b\""))
                    });
                    assert_eq!(r.unwrap_err().kind, ErrorKind::NotFound);
                });
            }
        });
        assert_eq!(sent.load(Ordering::SeqCst), 1);
        assert_eq!(riders_seen.load(Ordering::SeqCst), n as u64);
        assert_eq!(relay.coalesced.load(Ordering::SeqCst), n as u64 - 1);
        // Nothing is cached: the next lookup is forwarded again, and the key was forgotten.
        let again = relay.lookup(&key, |_| Err(Error::internal("x")));
        assert_eq!(again.unwrap_err().kind, ErrorKind::Internal);
        assert_eq!(relay.relayed.load(Ordering::SeqCst), 2);
        assert!(relay.keys.lock().unwrap().is_empty());
    }

    #[test]
    fn lookups_arriving_while_a_flight_is_on_the_wire_board_the_next_one() {
        let relay = Relay::new(Duration::ZERO);
        let key = ObjectKey::Id(7);
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (sent_tx, sent_rx) = std::sync::mpsc::channel::<u32>();
        std::thread::scope(|s| {
            let (relay_ref, key_ref, first_tx) = (&relay, &key, sent_tx.clone());
            let first = s.spawn(move || {
                relay_ref.lookup(key_ref, |riders| {
                    let sent_tx = first_tx;
                    sent_tx.send(riders).unwrap();
                    go_rx.recv().unwrap(); // on the wire until released
                    Err(Error::not_found("first"))
                })
            });
            assert_eq!(sent_rx.recv().unwrap(), 1);
            // These arrive while the first flight is on the wire: they must not get its
            // (possibly older) answer, but one shared later request.
            let later: Vec<_> = (0..3)
                .map(|_| {
                    let tx = sent_tx.clone();
                    let relay = &relay;
                    let key = &key;
                    s.spawn(move || {
                        relay.lookup(key, |riders| {
                            tx.send(riders).unwrap();
                            Err(Error::not_found("second"))
                        })
                    })
                })
                .collect();
            while relay.coalesced.load(Ordering::SeqCst) < 2 {
                std::thread::yield_now();
            }
            go_tx.send(()).unwrap();
            assert_eq!(first.join().unwrap().unwrap_err().message, "first");
            for h in later {
                assert_eq!(h.join().unwrap().unwrap_err().message, "second");
            }
        });
        assert_eq!(sent_rx.recv().unwrap(), 3);
        assert_eq!(relay.relayed.load(Ordering::SeqCst), 2);
    }
}
