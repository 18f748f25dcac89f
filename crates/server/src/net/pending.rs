//! Connections still in their handshake, bounded (`Limits::max_handshakes`), and who gets a
//! place among them when a flood wants them all.
//!
//! A connection that has proved nothing holds a thread until its handshake deadline. The
//! accept loop asks for a place (`Pending::enter`) before it spends a thread or a challenge on
//! a new connection. With room left, it gets one. At the limit, room is made by closing an
//! unverified connection, chosen by progress and by source:
//! - a connection that has sent a complete, well-formed `Hello` is being verified: it is never
//!   closed to make room (it is one HMAC away from done);
//! - a connection younger than the grace period is never closed either: every connection that
//!   gets a challenge has that long to answer it. An honest client answers in one round trip;
//!   a flood that reconnects the moment it is closed can only cycle its own connections that
//!   fast, not shorten anyone's window. The grace adapts to how long the handshakes that
//!   succeed take to send their `Hello` (`Pending::grace`): four times the slowest of the
//!   last 64, at least 20 ms, at most a tenth of the handshake timeout (and 1 s), which is
//!   also what it is until 8 have succeeded. A flood of connections that never answer
//!   cannot move it (only verified handshakes count), and places turn over as fast as honest
//!   clients actually answer instead of once a second;
//! - a source (remote IP for TCP, peer uid for a Unix socket) that holds its share of the
//!   places (`per_source`, a quarter) only makes room among its own connections, never
//!   another source's; a source under its share takes the place of the oldest unverified
//!   connection of the source that holds the most.
//!
//! When no connection may be closed yet, the new one waits (the accept loop with it, so later
//! connections queue in the kernel's accept queue, first come first served) until one may,
//! instead of being refused: a refused flood would reconnect at once and win the next place
//! by sheer numbers. A source at its share that has nothing of its own to close (all its
//! connections are being verified) is refused at once, before any challenge.

use pdcx_transport::Stream;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Where a connection comes from, as far as the kernel tells cheaply at accept time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// TCP: the remote address (each loopback address is its own source).
    Ip(IpAddr),
    /// A Unix socket: the peer's uid (`SO_PEERCRED`).
    Uid(u32),
    /// The kernel would not say; all such connections share one source.
    Unknown,
}

impl Source {
    pub(crate) fn of(stream: &Stream) -> Source {
        match stream {
            Stream::Unix(_) => match stream.peer_cred() {
                Ok(Some(c)) => Source::Uid(c.uid),
                _ => Source::Unknown,
            },
            // A new connection is never sealed yet.
            Stream::Tcp(t) => t
                .peer_addr()
                .map_or(Source::Unknown, |a| Source::Ip(a.ip().to_canonical())),
            Stream::Sealed(_) => Source::Unknown,
        }
    }
}

/// Why a connection gets no place (it is closed before its challenge).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Its source holds its share of the places, all of them being verified.
    SourceFull { share: usize },
    /// No place came free within the handshake timeout.
    Busy,
    /// The server is stopping.
    Stopping,
}

struct Waiting {
    id: u64,
    source: Source,
    since: Instant,
    /// A complete, well-formed `Hello` has arrived: being verified, never closed for room.
    hello: bool,
    /// How long after `since` it arrived.
    hello_after: Option<Duration>,
    /// A duplicate of the connection's descriptor, to close it from here.
    spare: Stream,
}

/// How many verified handshakes' answer times the grace is derived from, and how many must
/// have succeeded before it adapts at all.
const ANSWERED_KEPT: usize = 64;
const ANSWERED_MIN: usize = 8;
/// The grace is this many times the slowest recent verified answer...
const GRACE_FACTOR: u32 = 4;
/// ...and never less than this.
const GRACE_MIN: Duration = Duration::from_millis(20);

#[derive(Default)]
struct Table {
    waiting: Mutex<Vec<Waiting>>,
    /// Signalled when a place frees.
    freed: Condvar,
    /// How long the last verified handshakes took from their place to their `Hello`, newest
    /// last. Lock order: `waiting`, then this.
    answered: Mutex<VecDeque<Duration>>,
}

impl Table {
    fn lock(&self) -> MutexGuard<'_, Vec<Waiting>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn answered(&self) -> MutexGuard<'_, VecDeque<Duration>> {
        self.answered.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(crate) struct Pending {
    max: usize,
    per_source: usize,
    /// The longest grace, and the grace until enough handshakes have succeeded.
    grace_max: Duration,
    /// Longest a new connection waits for a place before it is refused.
    patience: Duration,
    table: Arc<Table>,
    next: AtomicU64,
    /// Connections closed to make room, for `stats`.
    pub(crate) evicted: AtomicU64,
    /// Connections refused before their challenge.
    pub(crate) refused: AtomicU64,
}

/// One connection in its handshake; dropping it (handshake over) frees its place.
pub(crate) struct Entry {
    id: u64,
    table: Arc<Table>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        CURRENT.with(|c| {
            let mut c = c.borrow_mut();
            if c.as_ref().is_some_and(|(_, id)| *id == self.id) {
                *c = None;
            }
        });
        let mut w = self.table.lock();
        if let Some(at) = w.iter().position(|x| x.id == self.id) {
            w.swap_remove(at);
        }
        drop(w);
        self.table.freed.notify_all();
    }
}

impl Entry {
    /// The handshake succeeded: its answer time now counts towards the grace. Frees the place.
    pub(crate) fn verified(self) {
        let after = self
            .table
            .lock()
            .iter()
            .find(|x| x.id == self.id)
            .and_then(|x| x.hello_after);
        if let Some(after) = after {
            let mut a = self.table.answered();
            if a.len() == ANSWERED_KEPT {
                a.pop_front();
            }
            a.push_back(after);
        }
    }

    /// Makes this the entry of the calling thread's handshake (`hello_received`).
    pub(crate) fn bind_thread(&self) {
        CURRENT.with(|c| *c.borrow_mut() = Some((self.table.clone(), self.id)));
    }
}

thread_local! {
    /// The entry of the handshake this thread runs, if any.
    static CURRENT: RefCell<Option<(Arc<Table>, u64)>> = const { RefCell::new(None) };
}

/// The handshake on this thread has read a complete, well-formed `Hello`: from now on its
/// connection is not closed to make room. (Called by `handshake`; a no-op on a thread without
/// an entry.)
pub(crate) fn hello_received() {
    CURRENT.with(|c| {
        if let Some((table, id)) = c.borrow().as_ref() {
            if let Some(x) = table.lock().iter_mut().find(|x| x.id == *id) {
                x.hello = true;
                x.hello_after = Some(x.since.elapsed());
            }
        }
    });
}

/// What to do with a new connection now.
#[derive(Debug, PartialEq)]
enum Decision {
    /// Take a place, closing the connection at this index first if there is one.
    Admit(Option<usize>),
    /// Ask again when a place frees or at this instant, whichever is first.
    Wait(Instant),
    Refuse(Refused),
}

impl Pending {
    /// At most `max` connections in their handshake, which must finish within
    /// `handshake_timeout`.
    pub(crate) fn new(max: usize, handshake_timeout: Duration) -> Pending {
        let max = max.max(1);
        Pending {
            max,
            per_source: (max / 4).max(1),
            grace_max: (handshake_timeout / 10)
                .clamp(Duration::from_millis(20), Duration::from_secs(1)),
            patience: handshake_timeout,
            table: Arc::default(),
            next: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// A place for `stream` from `source` in the handshakes, waiting for one if need be (see
    /// the module's comment); `stop` ends the wait. Err: the connection gets no place and
    /// should be closed before its challenge.
    pub(crate) fn enter(
        &self,
        stream: &Stream,
        source: Source,
        stop: &AtomicBool,
    ) -> Result<Entry, Refused> {
        let Ok(spare) = stream.try_clone() else {
            // Cannot be tracked (no descriptor left): nor served.
            return Err(Refused::Busy);
        };
        let give_up = Instant::now() + self.patience;
        let mut w = self.table.lock();
        loop {
            let now = Instant::now();
            let refuse = match self.decide(&w, source, now) {
                Decision::Admit(victim) => {
                    if let Some(at) = victim {
                        let v = w.swap_remove(at);
                        // Its thread's next read fails at once and the thread ends.
                        let _ = v.spare.shutdown(std::net::Shutdown::Both);
                        self.evicted.fetch_add(1, Ordering::Relaxed);
                    }
                    let id = self.next.fetch_add(1, Ordering::Relaxed);
                    w.push(Waiting {
                        id,
                        source,
                        since: now,
                        hello: false,
                        hello_after: None,
                        spare,
                    });
                    return Ok(Entry {
                        id,
                        table: self.table.clone(),
                    });
                }
                Decision::Refuse(why) => why,
                Decision::Wait(_) if stop.load(Ordering::Relaxed) => Refused::Stopping,
                Decision::Wait(_) if now >= give_up => Refused::Busy,
                Decision::Wait(until) => {
                    // Woken early to notice `stop` too.
                    let nap = until
                        .min(give_up)
                        .saturating_duration_since(now)
                        .clamp(Duration::from_millis(1), Duration::from_millis(200));
                    w = self
                        .table
                        .freed
                        .wait_timeout(w, nap)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                    continue;
                }
            };
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(refuse);
        }
    }

    /// How long a new connection has to answer its challenge before it may be closed for room
    /// (see the module's comment).
    fn grace(&self) -> Duration {
        let a = self.table.answered();
        if a.len() < ANSWERED_MIN {
            return self.grace_max;
        }
        let slowest = a.iter().copied().max().unwrap_or(self.grace_max);
        (slowest * GRACE_FACTOR).clamp(GRACE_MIN, self.grace_max.max(GRACE_MIN))
    }

    fn decide(&self, w: &[Waiting], source: Source, now: Instant) -> Decision {
        if w.len() < self.max {
            return Decision::Admit(None);
        }
        let grace = self.grace();
        let mut held: HashMap<Source, usize> = HashMap::new();
        for x in w {
            *held.entry(x.source).or_default() += 1;
        }
        let at_share = held.get(&source).copied().unwrap_or(0) >= self.per_source;
        // At its share a source makes room only among its own connections.
        let candidates = || {
            w.iter()
                .enumerate()
                .filter(move |(_, x)| !x.hello && (!at_share || x.source == source))
        };
        let ripe = candidates()
            .filter(|(_, x)| now.saturating_duration_since(x.since) >= grace)
            // The source holding the most first, then the oldest.
            .max_by_key(|(_, x)| (held[&x.source], std::cmp::Reverse(x.since)));
        if let Some((at, _)) = ripe {
            return Decision::Admit(Some(at));
        }
        match candidates().map(|(_, x)| x.since).min() {
            Some(first) => Decision::Wait(first + grace),
            None if at_share => Decision::Refuse(Refused::SourceFull {
                share: self.per_source,
            }),
            // Every place is being verified: one frees within a moment.
            None => Decision::Wait(now + grace),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    fn ip(last: u8) -> Source {
        Source::Ip(IpAddr::from([127, 0, 0, last]))
    }

    /// A tracked stream and its far end.
    fn pair() -> (Stream, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        (Stream::Unix(a), b)
    }

    fn closed(far: &mut UnixStream) -> bool {
        far.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let mut buf = [0u8; 1];
        matches!(far.read(&mut buf), Ok(0))
    }

    fn go() -> AtomicBool {
        AtomicBool::new(false)
    }

    #[test]
    fn room_is_made_only_past_the_grace_and_never_from_a_connection_with_its_hello() {
        // 1 s timeout: 100 ms grace.
        let p = Pending::new(2, Duration::from_secs(1));
        let (a, mut a_far) = pair();
        let (b, mut b_far) = pair();
        let (c, _c_far) = pair();
        let ea = p.enter(&a, ip(1), &go()).unwrap();
        let _eb = p.enter(&b, ip(2), &go()).unwrap();
        // `a` sent its Hello (on its own thread, as the handshake does).
        std::thread::scope(|s| {
            s.spawn(|| {
                ea.bind_thread();
                hello_received();
            });
        });
        let t0 = Instant::now();
        let _ec = p.enter(&c, ip(3), &go()).unwrap();
        // `b` was closed, but only once its grace had passed; `a` is untouched.
        assert!(
            t0.elapsed() >= Duration::from_millis(90),
            "{:?}",
            t0.elapsed()
        );
        assert!(closed(&mut b_far));
        assert!(!closed(&mut a_far));
        assert_eq!(p.evicted.load(Ordering::Relaxed), 1);
        drop(ea);
        assert_eq!(p.table.lock().len(), 1);
    }

    #[test]
    fn a_source_at_its_share_makes_room_only_among_its_own() {
        // 8 places, 2 per source while others want in.
        let p = Pending::new(8, Duration::from_millis(200));
        assert_eq!(p.per_source, 2);
        let (h, mut h_far) = pair();
        let _eh = p.enter(&h, ip(1), &go()).unwrap();
        let mut flood = Vec::new();
        // With room left a source may take more than its share...
        for _ in 0..7 {
            let (s, far) = pair();
            flood.push((p.enter(&s, ip(9), &go()).unwrap(), far));
        }
        std::thread::sleep(Duration::from_millis(30));
        // ...but when the places are full, it closes its own oldest, never `h`.
        let (s, _far) = pair();
        let _e = p.enter(&s, ip(9), &go()).unwrap();
        assert!(closed(&mut flood[0].1));
        assert!(!closed(&mut h_far));
        // A source at its share whose connections are all being verified is refused at once.
        let q = Pending::new(4, Duration::from_secs(10));
        let mut mine = Vec::new();
        for _ in 0..4 {
            let (s, far) = pair();
            let e = q.enter(&s, ip(5), &go()).unwrap();
            std::thread::scope(|sc| {
                sc.spawn(|| {
                    e.bind_thread();
                    hello_received();
                });
            });
            mine.push((e, far));
        }
        let (s, _far) = pair();
        let t0 = Instant::now();
        assert_eq!(
            q.enter(&s, ip(5), &go()).err(),
            Some(Refused::SourceFull { share: 1 })
        );
        assert!(t0.elapsed() < Duration::from_millis(100));
        assert_eq!(q.evicted.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_source_under_its_share_takes_the_place_of_the_biggest_source() {
        let p = Pending::new(4, Duration::from_millis(200));
        let (a, mut a_far) = pair();
        let _ea = p.enter(&a, ip(1), &go()).unwrap();
        let mut big = Vec::new();
        for _ in 0..3 {
            let (s, far) = pair();
            big.push((p.enter(&s, ip(2), &go()).unwrap(), far));
        }
        std::thread::sleep(Duration::from_millis(30));
        // `a` is the oldest, but ip(2) holds the most: its oldest goes.
        let (n, _n_far) = pair();
        let _en = p.enter(&n, ip(3), &go()).unwrap();
        assert!(closed(&mut big[0].1));
        assert!(!closed(&mut a_far));
    }

    #[test]
    fn a_wait_ends_when_a_place_frees_or_the_server_stops() {
        let p = Pending::new(1, Duration::from_secs(10));
        let (a, _a_far) = pair();
        let ea = p.enter(&a, ip(1), &go()).unwrap();
        let (b, _b_far) = pair();
        let t0 = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(100));
                drop(ea);
            });
            let _eb = p.enter(&b, ip(2), &go()).unwrap();
        });
        // Freed after 100 ms, long before the 1 s grace.
        assert!(
            t0.elapsed() < Duration::from_millis(800),
            "{:?}",
            t0.elapsed()
        );
        let stop = AtomicBool::new(true);
        let (c, _c_far) = pair();
        let (d, _d_far) = pair();
        let _ec = p.enter(&c, ip(1), &go()).unwrap();
        assert_eq!(p.enter(&d, ip(2), &stop).err(), Some(Refused::Stopping));
    }

    #[test]
    fn the_grace_follows_verified_answers_and_ignores_silent_connections() {
        let p = Pending::new(64, Duration::from_secs(10));
        assert_eq!(p.grace(), Duration::from_secs(1));
        // Connections that never answer (or answer and fail) do not count.
        for _ in 0..20 {
            let (s, _far) = pair();
            drop(p.enter(&s, ip(9), &go()).unwrap());
        }
        assert_eq!(p.grace(), Duration::from_secs(1));
        // Handshakes that answer within ~10 ms and succeed.
        for _ in 0..ANSWERED_MIN {
            let (s, _far) = pair();
            let e = p.enter(&s, ip(1), &go()).unwrap();
            std::thread::sleep(Duration::from_millis(10));
            std::thread::scope(|sc| {
                sc.spawn(|| {
                    e.bind_thread();
                    hello_received();
                });
            });
            e.verified();
        }
        let g = p.grace();
        assert!(
            g >= Duration::from_millis(40) && g < Duration::from_millis(400),
            "{g:?}"
        );
        // Never below the floor, never above the ceiling.
        p.table
            .answered()
            .iter_mut()
            .for_each(|d| *d = Duration::ZERO);
        assert_eq!(p.grace(), GRACE_MIN);
        p.table.answered().push_back(Duration::from_secs(5));
        assert_eq!(p.grace(), Duration::from_secs(1));
    }
}
