//! Connections still in their handshake, bounded (`Limits::max_handshakes`).
//!
//! A connection that has proved nothing holds a thread until its handshake deadline. When
//! that many are waiting, a new connection does not wait behind them and is not refused
//! either: the oldest unauthenticated connection is closed to make room. An honest client
//! finishes its handshake in one round trip, so the oldest ones are those that stall on
//! purpose; a flood of them keeps cycling among itself while honest connections get through.

use pdcx_transport::Stream;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub(crate) struct Pending {
    max: usize,
    waiting: Arc<Mutex<VecDeque<(u64, Stream)>>>,
    next: AtomicU64,
    /// Connections closed to make room, for `stats`.
    pub(crate) evicted: AtomicU64,
}

/// One connection in its handshake; dropping it (handshake over) frees its place.
pub(crate) struct Entry {
    id: u64,
    waiting: Arc<Mutex<VecDeque<(u64, Stream)>>>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut w = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = w.iter().position(|(id, _)| *id == self.id) {
            w.remove(at);
        }
    }
}

impl Pending {
    pub(crate) fn new(max: usize) -> Pending {
        Pending {
            max: max.max(1),
            waiting: Arc::default(),
            next: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        }
    }

    /// Registers `stream` as in its handshake, closing the oldest waiting one if `max` are.
    /// None: the stream cannot be tracked (its descriptor could not be duplicated).
    pub(crate) fn enter(&self, stream: &Stream) -> Option<Entry> {
        let spare = stream.try_clone().ok()?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut w = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        while w.len() >= self.max {
            if let Some((_, oldest)) = w.pop_front() {
                // Its thread's next read fails at once and the thread ends.
                let _ = oldest.shutdown(std::net::Shutdown::Both);
                self.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        w.push_back((id, spare));
        Some(Entry {
            id,
            waiting: self.waiting.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    #[test]
    fn the_oldest_waiting_connection_makes_room_and_finished_ones_leave() {
        let p = Pending::new(2);
        let (a, mut a_far) = UnixStream::pair().unwrap();
        let (b, _b_far) = UnixStream::pair().unwrap();
        let (c, _c_far) = UnixStream::pair().unwrap();
        let (a, b, c) = (Stream::Unix(a), Stream::Unix(b), Stream::Unix(c));
        let _ea = p.enter(&a).unwrap();
        let eb = p.enter(&b).unwrap();
        drop(eb); // b finished its handshake: it leaves, nothing is evicted
        let _ec = p.enter(&c).unwrap();
        assert_eq!(p.evicted.load(Ordering::Relaxed), 0);
        let (d, _d_far) = UnixStream::pair().unwrap();
        let _ed = p.enter(&Stream::Unix(d)).unwrap();
        // a was the oldest: closed (its far end reads end of stream).
        assert_eq!(p.evicted.load(Ordering::Relaxed), 1);
        let mut buf = [0u8; 1];
        assert_eq!(a_far.read(&mut buf).unwrap(), 0);
        assert_eq!(p.waiting.lock().unwrap().len(), 2);
    }
}
