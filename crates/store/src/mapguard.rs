//! Read-only file mappings whose reads survive the file being cut under them.
//!
//! Log segments are mapped to gather strided selections (the server's `mapped.rs`, a
//! same-node client's `SegFile::mapped`) and to hand out read-ahead windows. Reading a mapped
//! page that lies past the end of a file that was truncated after it was mapped raises
//! SIGBUS, which kills the process: one `truncate -s 0` of a segment (an operator, a buggy
//! tool, another program of the user) used to take the whole server down.
//!
//! Why a SIGBUS handler rather than `pread` instead of mapping: a strided gather touches only
//! the selected elements of each extent (a x20 downsampling of a 2-D array touches one row in
//! twenty), where a `pread` must copy every byte of every extent under the box first; and a
//! mapped read-ahead window costs no fresh memory (Montage's mAdd keeps 24 files open).
//! The handler costs nothing until a fault: a mapping is registered in a fixed table of
//! atomics ([`SLOTS`]) when made and unregistered before it is unmapped.
//!
//! What the handler does on a SIGBUS at an address inside a registered mapping: it marks the
//! mapping faulted, then maps anonymous zero pages over the whole mapping (`MAP_FIXED`), and
//! returns: the faulting load runs again and reads zeros, as does any other read of that
//! mapping from then on. Every reader checks [`MappedFile::faulted`] *after* it copied (and
//! verified) its bytes and reports an error instead of those bytes. The flag is set before the
//! zero pages go in, so a reader that saw a zero page of the replacement also sees the flag.
//! A SIGBUS anywhere else (or one sent by `kill`, which carries no fault address) goes to the
//! handler that was installed before (Rust's stack-overflow handler, Python's faulthandler,
//! or the default action: the process dies as it would have).
//!
//! `mmap` is not on POSIX's list of async-signal-safe functions, but on Linux it is one
//! system call with no user-space state (glibc's wrapper takes no lock), which is what makes
//! this safe here. With no free slot (more than [`SLOTS_MAX`] live mappings) a file is not
//! mapped at all and the caller reads it with `pread`.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

/// Live guarded mappings at most in one process (a server keeps 256 at most, a client 256
/// per connection set).
const SLOTS_MAX: usize = 1024;

struct Slot {
    /// Claimed by a mapping (set before `start`, cleared after).
    used: AtomicBool,
    /// First byte of the mapping; 0 when the slot is free.
    start: AtomicUsize,
    len: AtomicUsize,
    faulted: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    used: AtomicBool::new(false),
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    faulted: AtomicBool::new(false),
};

static SLOTS: [Slot; SLOTS_MAX] = [FREE; SLOTS_MAX];

/// Faults recovered from, process-wide (tests and diagnostics).
static FAULTS: AtomicUsize = AtomicUsize::new(0);

static INSTALL: Once = Once::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The SIGBUS action before ours, called for faults outside our mappings. Written once,
/// before our handler is installed.
static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();

/// A whole file (its first `len` bytes) mapped read-only and shared, guarded against SIGBUS.
pub struct MappedFile {
    ptr: *mut libc::c_void,
    len: usize,
    slot: usize,
}

// SAFETY: a read-only mapping; the slot is only touched through atomics.
unsafe impl Send for MappedFile {}
// SAFETY: as above.
unsafe impl Sync for MappedFile {}

impl MappedFile {
    /// Maps the first `len` bytes of `file` read-only. An error when `len` is 0, the mapping
    /// fails, or no guard slot is free (the caller then reads with `pread`).
    pub fn map(file: &File, len: u64) -> io::Result<MappedFile> {
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l > 0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "mapping length"))?;
        install()?;
        let slot = claim().ok_or_else(|| io::Error::other("no free mapping guard slot"))?;
        // SAFETY: a fresh read-only shared mapping of an open descriptor; the kernel picks the
        // address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            SLOTS[slot].used.store(false, Ordering::Release);
            return Err(e);
        }
        let s = &SLOTS[slot];
        s.faulted.store(false, Ordering::SeqCst);
        s.len.store(len, Ordering::SeqCst);
        s.start.store(ptr as usize, Ordering::SeqCst);
        Ok(MappedFile { ptr, len, slot })
    }

    /// Whether a read of this mapping hit bytes the file no longer has (it was cut after it
    /// was mapped): every byte read from it since may be a zero of the replacement, so a
    /// reader that sees this after copying must not return what it copied.
    pub fn faulted(&self) -> bool {
        SLOTS[self.slot].faulted.load(Ordering::SeqCst)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Maps the pages of bytes [`offset`, `offset + len`) now, in one call, instead of one
    /// fault per page as they are read (`MADV_POPULATE_READ`). Best effort: where the kernel
    /// lacks it (before Linux 5.14) the pages fault in as read.
    pub fn populate(&self, offset: usize, len: usize) {
        let page = page_size();
        let start = offset - offset % page;
        let end = offset.saturating_add(len).min(self.len);
        if end <= start {
            return;
        }
        // SAFETY: a range inside our own mapping; advice only, no memory is changed.
        unsafe {
            libc::madvise(
                (self.ptr as *mut u8).add(start) as *mut libc::c_void,
                end - start,
                libc::MADV_POPULATE_READ,
            );
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::ops::Deref for MappedFile {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` readable bytes for as long as `self` lives (a cut file reads as zeros,
        // see the module doc).
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        let s = &SLOTS[self.slot];
        // Unregistered before unmapping: the handler never maps over an address range that
        // may by then belong to another mapping.
        s.start.store(0, Ordering::SeqCst);
        s.len.store(0, Ordering::SeqCst);
        // SAFETY: our own mapping (or the zero pages that replaced it), unmapped once.
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
        s.used.store(false, Ordering::Release);
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    }
}

/// How many faults inside guarded mappings were recovered from in this process.
pub fn faults() -> usize {
    FAULTS.load(Ordering::Relaxed)
}

fn claim() -> Option<usize> {
    SLOTS.iter().position(|s| {
        s.used
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })
}

fn install() -> io::Result<()> {
    INSTALL.call_once(|| {
        // SAFETY: sigaction with a zeroed struct and our handler; PREVIOUS is written here
        // only, once, before the handler that reads it can run.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_sigbus as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
            libc::sigemptyset(&mut act.sa_mask);
            let prev = std::ptr::addr_of_mut!(PREVIOUS).cast::<libc::sigaction>();
            if libc::sigaction(libc::SIGBUS, &act, prev) == 0 {
                INSTALLED.store(true, Ordering::SeqCst);
            }
        }
    });
    if INSTALLED.load(Ordering::SeqCst) {
        Ok(())
    } else {
        Err(io::Error::other("cannot install the SIGBUS handler"))
    }
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel hands a valid siginfo to an SA_SIGINFO handler. A fault it raised
    // has si_code > 0 (BUS_ADRERR and friends); `kill` and `raise` send si_code <= 0 and no
    // address.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    if code > 0 {
        for s in &SLOTS {
            let start = s.start.load(Ordering::SeqCst);
            if start == 0 || addr < start {
                continue;
            }
            let len = s.len.load(Ordering::SeqCst);
            if addr - start >= len {
                continue;
            }
            s.faulted.store(true, Ordering::SeqCst);
            // SAFETY: replaces exactly the registered mapping, which the faulting thread
            // holds alive (it is reading it), with readable zero pages.
            let r = unsafe {
                libc::mmap(
                    start as *mut libc::c_void,
                    len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if r != libc::MAP_FAILED {
                FAULTS.fetch_add(1, Ordering::Relaxed);
                return;
            }
            break;
        }
    }
    // Not ours (or the zero pages could not be mapped): what would have happened without us.
    // SAFETY: PREVIOUS was written before this handler was installed.
    unsafe {
        let prev = &*std::ptr::addr_of!(PREVIOUS).cast::<libc::sigaction>();
        let h = prev.sa_sigaction;
        if h == libc::SIG_DFL || h == libc::SIG_IGN {
            // Back to the default action; returning re-runs the faulting load, which then
            // kills the process with SIGBUS (a sent signal is raised again).
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
            if code <= 0 {
                libc::raise(sig);
            }
        } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(h);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(h);
            f(sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_cut_under_its_mapping_reads_as_zeros_and_is_flagged() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("seg");
        let mut f = File::create(&path).unwrap();
        f.write_all(&vec![7u8; 3 * 4096]).unwrap();
        let f = File::open(&path).unwrap();
        let m = MappedFile::map(&f, 3 * 4096).unwrap();
        assert_eq!(m[4096], 7);
        assert!(!m.faulted());
        let before = faults();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(4096)
            .unwrap();
        // Past the new end: without the guard this load kills the test process.
        let past = std::hint::black_box(&m[..])[2 * 4096 + 5];
        assert_eq!(past, 0);
        assert!(
            m.faulted(),
            "the reader learns its bytes are not the file's"
        );
        assert!(faults() > before);
        assert_eq!(m[0], 0, "the whole mapping is zeros from then on");
        drop(m);
        // A fresh mapping of the same file, within its new length, reads it again.
        let m = MappedFile::map(&f, 4096).unwrap();
        assert_eq!(m[100], 7);
        assert!(!m.faulted());
    }

    #[test]
    fn slots_are_given_back() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        let f = File::open(&path).unwrap();
        for _ in 0..2 * SLOTS_MAX {
            let m = MappedFile::map(&f, 3).unwrap();
            assert_eq!(&m[..], b"abc");
        }
        assert!(MappedFile::map(&f, 0).is_err());
    }
}
