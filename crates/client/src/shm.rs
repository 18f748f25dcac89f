//! Client side of the shared-memory bulk path to servers on the same node.
//!
//! Bulk data of stages and reads normally travels in the frame payload over TCP (two socket
//! copies plus the syscalls). When the chosen server runs on this client's node (its
//! `ServerEntry::node` equals [`this_node`](crate::cluster::this_node)) the bytes go through an
//! **arena** instead: one shared mapping both processes see.
//!
//! * An arena is a **sealed memfd**, not a named file under `/dev/shm`: it has no name anyone
//!   could collide with, nothing to unlink and nothing left behind when either process dies
//!   (the kernel frees it with the last mapping), and /dev/shm size limits (64 MiB in many
//!   containers) do not apply. The server reaches it as `/proc/{pid}/fd/{fd}`, which needs the
//!   same user (or root) and the same pid namespace; anything else makes the server refuse the
//!   attach and this client falls back to TCP for that server.
//! * It is sealed against shrinking (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`) before the
//!   server can see it, and the server refuses unsealed files: so no `ftruncate` can ever
//!   make the server's mapping point past the end of the file (SIGBUS). The server checks
//!   every offset and length against the size it mapped.
//! * Blocks are page-aligned pieces of an arena (first fit, coalescing free list). A write
//!   transfer copies the caller's data straight into a block at `load`, so the shared-memory
//!   path costs the client one copy; the server copies the block into private memory before
//!   checksumming and logging it (the client could otherwise change the bytes between the
//!   checksum and the write and leave a corrupt record in the log). Reads are written by the
//!   server into a block: a synchronous read copies it once into the caller's buffer, an
//!   asynchronous one hands the block itself over (Python's numpy result wraps it; it returns
//!   to the arena when the array is gone).
//! * Arenas grow by adding a new one of twice the size (64 MiB first). Freed blocks keep
//!   their pages for reuse up to [`KEEP_RESIDENT`] bytes; beyond that, large freed blocks are
//!   punched out of the memfd so an idle client does not pin memory. Never-used parts of a
//!   large block are faulted in with one `MADV_POPULATE_WRITE` instead of a fault per page.
//!
//! `PDCX_SHM=0` turns the path off; `PDCX_DEBUG=1` says on stderr why it is not used.

use pdcx_core::protocol::ShmLoc;
use pdcx_core::{Error, Result};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Environment variable: `0` (or `off`, `no`, `false`) disables the shared-memory path.
pub const ENV: &str = "PDCX_SHM";

/// Block granularity: whole pages, so a freed block can be handed back to the kernel.
pub const PAGE: usize = 4096;
/// Size of the first arena; each new one is at least twice the previous.
const ARENA_MIN: usize = 64 << 20;
/// Largest arena (virtual size; only touched pages use memory).
const ARENA_MAX: usize = 16 << 30;
/// Arenas per client; past that, blocks come from the heap and travel over TCP.
const MAX_ARENAS: usize = 16;
/// Freed blocks at least this large count against `KEEP_RESIDENT`; smaller ones always stay.
const RELEASE_MIN: usize = 1 << 20;
/// Bytes of freed large blocks whose pages stay resident for reuse.
pub const KEEP_RESIDENT: usize = 256 << 20;
/// Never-used parts of a block at least this large are populated in one call before the
/// caller writes them: cheaper than taking a page fault per 4 KiB page.
const POPULATE_MIN: usize = 64 << 10;

/// Whether `PDCX_SHM` allows the shared-memory path (it does unless set to a false value).
pub fn enabled_by_env() -> bool {
    pdcx_core::config::SHM.switch_or_default()
}

/// Prints `msg` on stderr when `PDCX_DEBUG` is set (to anything but `0`).
pub fn debug(msg: &str) {
    if pdcx_core::config::DEBUG.flag_on() {
        eprintln!("pdcx: {msg}");
    }
}

pub use pdcx_core::protocol::arena_prefix;

fn os_err(what: &str) -> Error {
    Error::io(what, &std::io::Error::last_os_error())
}

/// A client's shared mapping of one memfd.
pub struct Arena {
    /// Names the arena in `AttachShm` and `ShmLoc` (unique within one client).
    pub id: u32,
    /// The memfd's name (`arena_prefix` + pid + random), which the server checks.
    pub name: String,
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
    free: Mutex<FreeList>,
    /// Bytes of freed large blocks kept resident, shared by every arena of the pool.
    kept: Arc<AtomicUsize>,
    /// Every page below this offset has been handed out at least once (first fit fills the
    /// arena from the bottom), so a block above it is fresh memory worth populating.
    touched: AtomicUsize,
}

// SAFETY: `base` points to a MAP_SHARED mapping owned by the arena for its whole life; blocks
// hand out disjoint ranges of it (the free list is behind a mutex), so sharing the arena
// between threads shares nothing else.
unsafe impl Send for Arena {}
unsafe impl Sync for Arena {}

impl Arena {
    fn create(id: u32, name: String, len: usize, kept: Arc<AtomicUsize>) -> Result<Arena> {
        let cname = CString::new(name.clone())
            .map_err(|_| Error::internal("arena name contains a NUL byte"))?;
        // SAFETY: plain syscall with a NUL-terminated name.
        let raw = unsafe {
            libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if raw < 0 {
            return Err(os_err("memfd_create"));
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY (all four): plain syscalls on the descriptor `fd` keeps open.
        // memfds are created 0777; /proc access already needs our uid, but say it anyway.
        if unsafe { libc::fchmod(fd.as_raw_fd(), 0o600) } != 0 {
            return Err(os_err("fchmod of the shared-memory arena"));
        }
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(os_err("sizing the shared-memory arena"));
        }
        // Sealed before the server can open it: the size is fixed for good, so the server's
        // mapping can never reach past the end of the file.
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(os_err("sealing the shared-memory arena"));
        }
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(os_err("mapping the shared-memory arena"));
        }
        Ok(Arena {
            id,
            name,
            fd,
            base: base as *mut u8,
            len,
            free: Mutex::new(FreeList::new(len)),
            kept,
            touched: AtomicUsize::new(0),
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn take(&self, cap: usize) -> Option<usize> {
        let off = self
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(cap)?;
        let end = off + cap;
        let fresh = self.touched.fetch_max(end, Ordering::Relaxed).max(off);
        if end >= fresh + POPULATE_MIN {
            // SAFETY: [fresh, end) lies inside our mapping. MADV_POPULATE_WRITE only faults
            // pages in; on kernels without it (before 5.14) it fails and nothing changes.
            unsafe {
                libc::madvise(
                    self.base.add(fresh) as *mut libc::c_void,
                    end - fresh,
                    libc::MADV_POPULATE_WRITE,
                );
            }
        }
        if cap >= RELEASE_MIN {
            // Approximate: the block may or may not have been resident.
            let _ = self
                .kept
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| {
                    Some(k.saturating_sub(cap))
                });
        }
        Some(off)
    }

    fn give_back(&self, off: usize, cap: usize) {
        if cap >= RELEASE_MIN {
            let kept = self
                .kept
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| {
                    (k + cap <= KEEP_RESIDENT).then_some(k + cap)
                });
            if kept.is_err() {
                self.release_pages(off, cap);
            }
        }
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .give(off, cap);
    }

    /// Hands the pages of `[off, off + cap)` back to the kernel (they read as zeros after).
    fn release_pages(&self, off: usize, cap: usize) {
        // SAFETY: plain syscall on our descriptor; failure only means the memory stays.
        unsafe {
            libc::fallocate(
                self.fd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off as libc::off_t,
                cap as libc::off_t,
            );
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: the mapping was created in `create` with this length; every block holds an
        // Arc of the arena, so none outlives it.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}

/// Free ranges of an arena: offset -> length, coalesced, first fit.
#[derive(Debug)]
struct FreeList {
    blocks: BTreeMap<usize, usize>,
}

impl FreeList {
    fn new(len: usize) -> FreeList {
        FreeList {
            blocks: BTreeMap::from([(0, len)]),
        }
    }

    fn take(&mut self, len: usize) -> Option<usize> {
        let (&off, &blen) = self.blocks.iter().find(|(_, &l)| l >= len)?;
        self.blocks.remove(&off);
        if blen > len {
            self.blocks.insert(off + len, blen - len);
        }
        Some(off)
    }

    fn give(&mut self, mut off: usize, mut len: usize) {
        if let Some((&p, &plen)) = self.blocks.range(..off).next_back() {
            if p + plen == off {
                self.blocks.remove(&p);
                off = p;
                len += plen;
            }
        }
        if let Some(&nlen) = self.blocks.get(&(off + len)) {
            self.blocks.remove(&(off + len));
            len += nlen;
        }
        self.blocks.insert(off, len);
    }
}

/// One block of an arena, owned by one transfer (or one synchronous call) at a time.
pub struct ShmBuf {
    arena: Arc<Arena>,
    offset: usize,
    len: usize,
    cap: usize,
    forfeited: bool,
}

impl ShmBuf {
    pub fn arena(&self) -> &Arc<Arena> {
        &self.arena
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the block is, for the server.
    pub fn loc(&self) -> ShmLoc {
        ShmLoc {
            arena: self.arena.id,
            offset: self.offset as u64,
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: [offset, offset + len) lies inside the live mapping and belongs to this
        // block alone; the server only writes into it while a shared-memory `Read` naming it is in flight,
        // during which the owner does not look at it.
        unsafe { std::slice::from_raw_parts(self.arena.base.add(self.offset), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.arena.base.add(self.offset), self.len) }
    }

    /// Gives the block up without ever reusing its range: used when a request naming it
    /// broke off, since the server might still write into it. Its pages are released.
    pub fn forfeit(mut self) {
        self.forfeited = true;
    }
}

impl Drop for ShmBuf {
    fn drop(&mut self) {
        if self.forfeited {
            self.arena.release_pages(self.offset, self.cap);
        } else {
            self.arena.give_back(self.offset, self.cap);
        }
    }
}

/// The arenas of one client (created on first use).
pub struct ShmPool {
    prefix: String,
    /// The process that created the arenas: a forked child must not share them.
    pid: u32,
    arenas: Mutex<Vec<Arc<Arena>>>,
    kept: Arc<AtomicUsize>,
    /// Creating an arena failed before any existed: shared memory is unusable here.
    unusable: AtomicBool,
}

impl ShmPool {
    pub fn new(secret: &[u8]) -> ShmPool {
        ShmPool {
            prefix: arena_prefix(secret),
            pid: std::process::id(),
            arenas: Mutex::new(Vec::new()),
            kept: Arc::new(AtomicUsize::new(0)),
            unusable: AtomicBool::new(false),
        }
    }

    /// A block of `len` bytes, or None (the caller then uses the heap and TCP): empty
    /// requests, no shared memory here, or too much of it in use.
    pub fn alloc(&self, len: usize) -> Option<ShmBuf> {
        if len == 0 || self.unusable.load(Ordering::Relaxed) || std::process::id() != self.pid {
            return None;
        }
        let cap = len.checked_next_multiple_of(PAGE)?;
        let mut arenas = self.arenas.lock().unwrap_or_else(|p| p.into_inner());
        // Newest (largest) first: older arenas drain and keep few resident pages.
        for a in arenas.iter().rev() {
            if let Some(offset) = a.take(cap) {
                return Some(ShmBuf {
                    arena: a.clone(),
                    offset,
                    len,
                    cap,
                    forfeited: false,
                });
            }
        }
        if arenas.len() >= MAX_ARENAS {
            debug(&format!(
                "shm: {MAX_ARENAS} arenas in use; a block of {len} bytes goes over TCP"
            ));
            return None;
        }
        let grown = arenas.last().map_or(0, |a| a.len.saturating_mul(2));
        let size = ARENA_MIN
            .max(grown)
            .max(cap.checked_next_power_of_two()?)
            .min(ARENA_MAX);
        if size < cap {
            return None;
        }
        let id = arenas.len() as u32 + 1;
        let name = format!("{}{}-{:016x}", self.prefix, self.pid, rand::random::<u64>());
        match Arena::create(id, name, size, self.kept.clone()) {
            Ok(a) => {
                let a = Arc::new(a);
                let offset = a.take(cap)?;
                arenas.push(a.clone());
                Some(ShmBuf {
                    arena: a,
                    offset,
                    len,
                    cap,
                    forfeited: false,
                })
            }
            Err(e) => {
                if arenas.is_empty() {
                    self.unusable.store(true, Ordering::Relaxed);
                    debug(&format!(
                        "shm: shared memory unavailable ({e}); bulk data goes over TCP"
                    ));
                } else {
                    debug(&format!(
                        "shm: cannot add an arena ({e}); this block goes over TCP"
                    ));
                }
                None
            }
        }
    }

    /// The arenas created so far (tests, diagnostics).
    pub fn arena_count(&self) -> usize {
        self.arenas.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Bytes a write carries: an arena block when the shared-memory path may be used, else heap,
/// or the caller's own buffer (see [`UserBuf`]).
pub enum Payload {
    Heap(Vec<u8>),
    Shm(ShmBuf),
    User(UserBuf),
}

/// A caller's buffer a write transfer reads its bytes from without copying them first (the C
/// API's `PDCregion_transfer_start` for a write whose buffer is its region, C order): written
/// into the log of a server on this node with one copy (`direct_write.rs`). Created only by
/// [`Transfer::set_write_source`](crate::Transfer::set_write_source), whose caller promises
/// the buffer stays valid and unchanged until the transfer is waited for.
pub struct UserBuf {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the bytes are only read, and the creator guarantees they stay valid and unchanged
// while any thread may read them (until the transfer's wait).
unsafe impl Send for UserBuf {}
// SAFETY: as for Send: shared read-only access.
unsafe impl Sync for UserBuf {}

impl UserBuf {
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes, unchanged, for the life of this value.
    pub(crate) unsafe fn new(ptr: *const u8, len: usize) -> UserBuf {
        UserBuf { ptr, len }
    }

    pub fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `new`'s contract.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Payload {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Payload::Heap(v) => v,
            Payload::Shm(b) => b.as_slice(),
            Payload::User(u) => u.as_slice(),
        }
    }

    /// The bytes, writable. A caller's buffer is never written: it is copied first.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if let Payload::User(u) = self {
            *self = Payload::Heap(u.as_slice().to_vec());
        }
        match self {
            Payload::Heap(v) => v,
            Payload::Shm(b) => b.as_mut_slice(),
            Payload::User(_) => unreachable!("replaced by a copy above"),
        }
    }

    /// Whether this is the caller's own buffer.
    pub fn is_user(&self) -> bool {
        matches!(self, Payload::User(_))
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_list_is_first_fit_and_coalesces() {
        let mut f = FreeList::new(10 * PAGE);
        let a = f.take(2 * PAGE).unwrap();
        let b = f.take(3 * PAGE).unwrap();
        let c = f.take(5 * PAGE).unwrap();
        assert_eq!((a, b, c), (0, 2 * PAGE, 5 * PAGE));
        assert_eq!(f.take(PAGE), None, "full");
        f.give(a, 2 * PAGE);
        f.give(c, 5 * PAGE);
        assert_eq!(f.take(4 * PAGE), Some(5 * PAGE), "first block that fits");
        f.give(5 * PAGE, 4 * PAGE);
        f.give(b, 3 * PAGE);
        // Everything back, in any order: one block again.
        assert_eq!(f.blocks.len(), 1);
        assert_eq!(f.take(10 * PAGE), Some(0));
    }

    #[test]
    fn blocks_are_page_aligned_reused_and_sealed() {
        let pool = ShmPool::new(b"secret");
        let mut a = pool.alloc(100).expect("memfd works here");
        assert_eq!(a.len(), 100);
        assert_eq!(a.loc().offset % PAGE as u64, 0);
        a.as_mut_slice().copy_from_slice(&[7u8; 100]);
        let b = pool.alloc(PAGE + 1).unwrap();
        assert_eq!(
            b.loc().offset,
            PAGE as u64,
            "the 100-byte block took one page"
        );
        assert_eq!(a.as_slice(), &[7u8; 100]);
        let fd = a.arena().fd();
        let first = a.loc();
        drop(a);
        assert_eq!(
            pool.alloc(10).unwrap().loc(),
            first,
            "freed block is reused"
        );
        // The server relies on these seals: nobody can shrink the arena under its mapping.
        let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
        assert_ne!(seals & libc::F_SEAL_SHRINK, 0);
        assert_ne!(unsafe { libc::ftruncate(fd, 0) }, 0, "shrinking must fail");
        assert!(b.arena().name.starts_with(&arena_prefix(b"secret")));
        assert_eq!(pool.arena_count(), 1);
        assert!(pool.alloc(0).is_none(), "empty payloads need no block");
    }

    #[test]
    fn arenas_grow_when_full() {
        let pool = ShmPool::new(b"s");
        let a = pool.alloc(ARENA_MIN).unwrap();
        assert_eq!(a.arena().len(), ARENA_MIN);
        let b = pool.alloc(PAGE).unwrap();
        assert_eq!(pool.arena_count(), 2);
        assert_eq!(b.arena().len(), 2 * ARENA_MIN, "twice the previous one");
        assert_ne!(a.arena().id, b.arena().id);
        let big = pool.alloc(3 * ARENA_MIN).unwrap();
        assert_eq!(
            big.arena().len(),
            4 * ARENA_MIN,
            "at least the next power of two"
        );
        assert!(
            pool.alloc(ARENA_MAX + 1).is_none(),
            "larger than any arena: heap"
        );
    }

    #[test]
    fn freed_large_blocks_beyond_the_budget_release_their_pages() {
        let pool = ShmPool::new(b"s");
        let a = pool.alloc(KEEP_RESIDENT).unwrap();
        let mut b = pool.alloc(2 << 20).unwrap();
        b.as_mut_slice().fill(2);
        let (b_off, b_arena) = (b.loc().offset as usize, b.arena().clone());
        drop(a); // fills the budget: kept resident
        drop(b); // over the budget: punched
        assert_eq!(pool.kept.load(Ordering::Relaxed), KEEP_RESIDENT);
        // SAFETY: reading our own mapping inside its bounds.
        let after = unsafe { std::slice::from_raw_parts(b_arena.base.add(b_off), 2 << 20) };
        assert!(after.iter().all(|&x| x == 0), "punched pages read as zeros");
    }

    #[test]
    fn forfeited_blocks_are_never_handed_out_again() {
        let pool = ShmPool::new(b"s");
        let a = pool.alloc(PAGE).unwrap();
        let at = a.loc();
        a.forfeit();
        assert_ne!(pool.alloc(PAGE).unwrap().loc(), at);
    }

    #[test]
    fn env_switch() {
        // Only the parsing: the variable itself is process-global, so restore it.
        let saved = std::env::var_os(ENV);
        for (v, on) in [("0", false), ("off", false), ("1", true), ("", true)] {
            std::env::set_var(ENV, v);
            assert_eq!(enabled_by_env(), on, "{v:?}");
        }
        match saved {
            Some(v) => std::env::set_var(ENV, v),
            None => std::env::remove_var(ENV),
        }
    }
}
