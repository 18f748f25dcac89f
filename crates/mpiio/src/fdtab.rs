//! Which file descriptors are ours, and the state behind each.
//!
//! Every POSIX wrapper asks [`maybe_tracked`] first: one relaxed atomic load for fds below
//! 65536, so calls on every other fd (stdout, sockets, the MPI library's shared-memory files)
//! cost that load and nothing else. Only fds that answer yes take the lock of the map.

use libc::c_int;
use pdcx_client::ByteStream;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// One file logged into a byte stream, shared by every fd (and the `MPI_File`) that writes it.
pub struct FileState {
    pub bs: ByteStream,
    /// The object's name (`mpiio/REL`).
    pub name: String,
    /// Where the sealed versions go: `HOME/REL` (a directory path or `s3://bucket/prefix/REL`).
    pub home: String,
    /// Whether writes also go to the file at its path (`config::Config::write_through`).
    pub write_through: bool,
}

/// One open file description: fds made by `dup` share it (and so its offset), as in POSIX.
pub struct Tracked {
    pub file: Arc<FileState>,
    /// The offset `read`/`write`/`lseek(SEEK_CUR)` use.
    pub pos: Mutex<u64>,
}

impl Tracked {
    pub fn new(file: Arc<FileState>) -> Arc<Tracked> {
        Arc::new(Tracked {
            file,
            pos: Mutex::new(0),
        })
    }

    pub fn pos(&self) -> MutexGuard<'_, u64> {
        lock(&self.pos)
    }
}

const FAST: usize = 65536;

static TRACKED: [AtomicBool; FAST] = [const { AtomicBool::new(false) }; FAST];
/// How many tracked fds are >= `FAST` (those are only in the map).
static HIGH: AtomicUsize = AtomicUsize::new(0);
static MAP: Mutex<BTreeMap<c_int, Arc<Tracked>>> = Mutex::new(BTreeMap::new());
/// Set in the child of a `fork`: the parent's files and connections are not this process's.
static FORKED: AtomicBool = AtomicBool::new(false);

/// A poisoned lock only means another thread panicked (and its wrapper returned EIO); the data
/// is still consistent for what we do with it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The fast check: false means certainly not ours.
#[inline]
pub fn maybe_tracked(fd: c_int) -> bool {
    match usize::try_from(fd) {
        Ok(i) if i < FAST => TRACKED[i].load(Ordering::Relaxed),
        Ok(_) => HIGH.load(Ordering::Relaxed) > 0,
        Err(_) => false,
    }
}

/// The state of `fd` if it is ours.
pub fn get(fd: c_int) -> Option<Arc<Tracked>> {
    if !maybe_tracked(fd) {
        return None;
    }
    lock(&MAP).get(&fd).cloned()
}

/// Marks `fd` ours (replacing whatever an fd of that number was before).
pub fn insert(fd: c_int, t: Arc<Tracked>) {
    let Ok(i) = usize::try_from(fd) else { return };
    let mut map = lock(&MAP);
    let new = map.insert(fd, t).is_none();
    if i < FAST {
        TRACKED[i].store(true, Ordering::Relaxed);
    } else if new {
        HIGH.fetch_add(1, Ordering::Relaxed);
    }
}

/// Forgets `fd`; returns its state if it was ours.
pub fn remove(fd: c_int) -> Option<Arc<Tracked>> {
    let i = usize::try_from(fd).ok()?;
    let mut map = lock(&MAP);
    let t = map.remove(&fd);
    if i < FAST {
        TRACKED[i].store(false, Ordering::Relaxed);
    } else if t.is_some() {
        HIGH.fetch_sub(1, Ordering::Relaxed);
    }
    t
}

/// A new fd the kernel handed out to someone else: if its number is still marked ours, the
/// old fd was closed behind our back (`close_range`, a raw syscall), so forget it.
#[inline]
pub fn fresh_foreign(fd: c_int) {
    if maybe_tracked(fd) {
        remove(fd);
    }
}

/// How many fds are tracked (for the debug summary and tests).
pub fn count() -> usize {
    lock(&MAP).len()
}

/// `pthread_atfork` child handler: the child shares the parent's fds but not its pdcx
/// connections or threads, so its writes to inherited fds go to the (empty) placeholder file
/// and it never intercepts MPI. Only atomic stores: nothing else is safe after `fork`.
pub extern "C" fn after_fork_in_child() {
    FORKED.store(true, Ordering::Relaxed);
    for t in TRACKED.iter() {
        t.store(false, Ordering::Relaxed);
    }
    HIGH.store(0, Ordering::Relaxed);
    OPENING_ON.store(false, Ordering::Release);
}

/// True in a child process made by `fork` after the parent intercepted a file.
pub fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// A logged file, from the start of its `MPI_File_open` to the end of its `MPI_File_close`:
/// its normalised path and state. Every POSIX `open` of exactly that path in that time is the
/// MPI library opening the file (at `MPI_File_open`, or later: ROMIO's deferred open, a
/// reopen) or the program opening it by path, and its fd becomes ours: bytes written through
/// it must never land in the placeholder. A list, so that threads opening different files at
/// once (`MPI_THREAD_MULTIPLE`) never hold a lock across the collective open.
pub struct Opening {
    pub norm: std::path::PathBuf,
    pub file: Arc<FileState>,
}

static OPENING_ON: AtomicBool = AtomicBool::new(false);
static OPENING: Mutex<Vec<Opening>> = Mutex::new(Vec::new());

/// The fast check of the `open` wrappers: false while no logged file is open.
#[inline]
pub fn opening_active() -> bool {
    OPENING_ON.load(Ordering::Acquire)
}

/// A logged file is being opened (at the start of its `MPI_File_open`).
pub fn begin_opening(o: Opening) {
    let mut g = lock(&OPENING);
    g.push(o);
    OPENING_ON.store(true, Ordering::Release);
}

/// `file` is closed (after its `MPI_File_close`, or a failed open).
pub fn end_opening(file: &Arc<FileState>) {
    let mut g = lock(&OPENING);
    g.retain(|o| !Arc::ptr_eq(&o.file, file));
    OPENING_ON.store(!g.is_empty(), Ordering::Release);
}

/// The state of the open logged file whose path is `norm`.
pub fn opening_match(norm: &std::path::Path) -> Option<Arc<FileState>> {
    // The newest first: a second handle on the same file gets its own state.
    lock(&OPENING)
        .iter()
        .rev()
        .find(|o| o.norm == norm)
        .map(|o| o.file.clone())
}
