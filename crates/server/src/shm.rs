//! Server side of the shared-memory bulk path (client side and design: `pdcx_client::shm`;
//! the arena names both check, `arena_prefix`, are part of the protocol).
//!
//! A connection's client announces an arena with `AttachShm {arena, pid, fd, name, len}`.
//! The server opens `/proc/{pid}/fd/{fd}` and maps it only if what it opened (checked on the
//! opened descriptor, so the client cannot swap the file in between) is
//! * a memfd named `name`, which starts with this deployment's arena prefix;
//! * on tmpfs (not hugetlbfs, whose faults can SIGBUS when huge pages run out);
//! * a regular file owned by the server's own effective uid;
//! * sealed against shrinking (`F_SEAL_SHRINK`), and at least `len` bytes long.
//!
//! The seal is what makes the mapping safe to touch: once it is set nobody, the client
//! included, can make the file shorter than the `len` bytes mapped, so no access inside the
//! mapping can raise SIGBUS (an `ftruncate` fails with EPERM; a punched hole reads as zeros).
//! The server therefore owns the size: it is fixed at attach, and every `ShmLoc` of a request
//! is checked against it before any byte is touched.
//!
//! Mappings belong to the connection and are unmapped when it ends, including when the client
//! died: the memfd then disappears with the last mapping, nothing stays behind on disk.

use pdcx_core::protocol::{arena_prefix, ShmLoc};
use pdcx_core::{Error, ErrorKind, Result};
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

/// Arenas one connection may have mapped at once (a client creates at most 16).
const MAX_ARENAS: usize = 64;
/// Largest single arena the server maps (virtual size).
const MAX_ARENA_BYTES: u64 = 1 << 40;

/// One client arena mapped into this server. The descriptor is closed right after mapping
/// (the mapping keeps the memfd alive): a server with many clients must not run out of fds.
struct Mapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is only touched by the connection thread that owns `Attached`.
unsafe impl Send for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the range mapped in `open_arena`.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}

/// The arenas a connection's client has attached, by the client's arena id.
#[derive(Default)]
pub(crate) struct Attached {
    maps: HashMap<u32, Mapping>,
}

fn bad(msg: String) -> Error {
    Error::new(ErrorKind::InvalidArgument, msg)
}

impl Attached {
    /// Validates and maps a client's arena (see the module comment for the checks).
    pub fn attach(
        &mut self,
        secret: &[u8],
        arena: u32,
        pid: u32,
        fd: i32,
        name: &str,
        len: u64,
    ) -> Result<()> {
        if self.maps.contains_key(&arena) {
            return Err(bad(format!(
                "shared-memory arena {arena} is already attached"
            )));
        }
        if self.maps.len() >= MAX_ARENAS {
            return Err(bad(format!(
                "a connection may attach at most {MAX_ARENAS} shared-memory arenas"
            )));
        }
        let m = open_arena(&arena_prefix(secret), pid, fd, name, len)?;
        self.maps.insert(arena, m);
        Ok(())
    }

    /// Checks that `len` bytes at `loc` lie inside an attached arena; returns the mapping.
    fn span(&self, loc: ShmLoc, len: u64) -> Result<(&Mapping, usize)> {
        let m = self.maps.get(&loc.arena).ok_or_else(|| {
            bad(format!(
                "shared-memory arena {} is not attached on this connection",
                loc.arena
            ))
        })?;
        match loc.offset.checked_add(len) {
            Some(end) if end <= m.len as u64 => Ok((m, loc.offset as usize)),
            _ => Err(bad(format!(
                "{len} bytes at offset {} lie outside shared-memory arena {} ({} bytes)",
                loc.offset, loc.arena, m.len
            ))),
        }
    }

    /// Validates a location without touching memory.
    pub fn check(&self, loc: ShmLoc, len: u64) -> Result<()> {
        self.span(loc, len).map(|_| ())
    }

    /// The `len` bytes at `loc`, read in place: a stage checksums and logs them straight from
    /// the client's arena (no copy). The client may change them meanwhile; then the log holds
    /// a record whose payload does not match its checksum, which reads refuse and recovery
    /// skips (`pdcx_store::Scanned::Damaged`): the client ruins only its own write.
    pub fn slice(&self, loc: ShmLoc, len: u64) -> Result<&[u8]> {
        let (m, off) = self.span(loc, len)?;
        // SAFETY: inside the mapping, which cannot shrink below it (F_SEAL_SHRINK, checked at
        // attach), so reading it cannot fault; concurrent writes by the client can only make
        // the bytes inconsistent with each other, which the checksum catches (see above).
        Ok(unsafe { std::slice::from_raw_parts(m.base.add(off), len as usize) })
    }

    /// The `len` bytes at `loc`, for the server to write a read's result into.
    pub fn slice_mut(&mut self, loc: ShmLoc, len: u64) -> Result<&mut [u8]> {
        let (m, off) = self.span(loc, len)?;
        // SAFETY: inside the mapping, which cannot shrink (as in `slice`). The memory is
        // shared with the client, which leaves the range alone until the reply; if it does
        // not, only its own read result is garbled. `&mut self` keeps this the server's only
        // view of it.
        Ok(unsafe { std::slice::from_raw_parts_mut(m.base.add(off), len as usize) })
    }

    #[cfg(test)]
    fn count(&self) -> usize {
        self.maps.len()
    }
}

fn open_arena(prefix: &str, pid: u32, fd: i32, name: &str, len: u64) -> Result<Mapping> {
    let name_ok = name.len() <= 200
        && name.starts_with(prefix)
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !name_ok {
        return Err(bad(format!(
            "{name:?} is not a shared-memory arena of this deployment"
        )));
    }
    if len == 0 || len > MAX_ARENA_BYTES || usize::try_from(len).is_err() {
        return Err(bad(format!(
            "shared-memory arena length {len} is not allowed"
        )));
    }
    if pid == 0 || fd < 0 {
        return Err(bad(format!("bad arena descriptor: pid {pid}, fd {fd}")));
    }
    let path = format!("/proc/{pid}/fd/{fd}");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| {
            bad(format!(
                "cannot open the client's arena {path}: {e} (another user, another pid namespace or another node?)"
            ))
        })?;
    let raw = file.as_raw_fd();
    // What we opened, not what the client's descriptor names now.
    let link = std::fs::read_link(format!("/proc/self/fd/{raw}"))
        .map_err(|e| Error::io("reading the arena's name", &e))?;
    if link.as_os_str() != format!("/memfd:{name} (deleted)").as_str() {
        return Err(bad(format!(
            "{path} is {}, not the memfd {name:?}",
            link.display()
        )));
    }
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes into `fs` only.
    if unsafe { libc::fstatfs(raw, &mut fs) } != 0 {
        return Err(Error::io(
            "fstatfs of the arena",
            &std::io::Error::last_os_error(),
        ));
    }
    if fs.f_type != libc::TMPFS_MAGIC {
        return Err(bad(format!(
            "{name:?} is not on tmpfs (filesystem type {:#x})",
            fs.f_type
        )));
    }
    // SAFETY: plain fcntl on our descriptor.
    let seals = unsafe { libc::fcntl(raw, libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return Err(bad(format!(
            "{name:?} is not sealed against shrinking (F_SEAL_SHRINK): refusing to map it"
        )));
    }
    // The size is read after the seal check: from here on it can only stay or grow.
    let meta = file
        .metadata()
        .map_err(|e| Error::io("fstat of the arena", &e))?;
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    if !meta.file_type().is_file() || meta.uid() != euid {
        return Err(bad(format!(
            "{name:?} is not a regular file owned by uid {euid}"
        )));
    }
    if meta.len() < len {
        return Err(bad(format!(
            "{name:?} has {} bytes, fewer than the {len} announced",
            meta.len()
        )));
    }
    // SAFETY: maps `len` bytes of a file at least that long that cannot shrink.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            raw,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(bad(format!(
            "cannot map {name:?}: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(Mapping {
        base: base as *mut u8,
        len: len as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pdcx_client::shm::ShmPool;

    fn attach(pool_secret: &[u8], server_secret: &[u8]) -> (Result<()>, Attached, ShmPool) {
        let pool = ShmPool::new(pool_secret);
        let b = pool.alloc(4096).unwrap();
        let a = b.arena().clone();
        let mut att = Attached::default();
        let r = att.attach(
            server_secret,
            a.id,
            std::process::id(),
            a.fd(),
            &a.name,
            a.len() as u64,
        );
        (r, att, pool)
    }

    #[test]
    fn a_sealed_arena_attaches_and_bounds_are_enforced() {
        let (r, mut att, pool) = attach(b"k", b"k");
        r.unwrap();
        let mut b = pool.alloc(10).unwrap();
        b.as_mut_slice().copy_from_slice(b"0123456789");
        assert_eq!(att.slice(b.loc(), 10).unwrap(), b"0123456789");
        att.slice_mut(b.loc(), 3).unwrap().copy_from_slice(b"abc");
        assert_eq!(&b.as_slice()[..4], b"abc3");
        let len = b.arena().len() as u64;
        let id = b.loc().arena;
        for (off, n) in [(len, 1), (len - 4, 5), (u64::MAX, 2), (1, u64::MAX)] {
            let e = att
                .check(
                    ShmLoc {
                        arena: id,
                        offset: off,
                    },
                    n,
                )
                .unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument);
            assert!(e.message.contains("outside"), "{e}");
        }
        att.check(
            ShmLoc {
                arena: id,
                offset: len,
            },
            0,
        )
        .unwrap();
        let e = att
            .check(
                ShmLoc {
                    arena: id + 1,
                    offset: 0,
                },
                1,
            )
            .unwrap_err();
        assert!(e.message.contains("not attached"), "{e}");
        let a = b.arena();
        let again = att.attach(b"k", id, std::process::id(), a.fd(), &a.name, len);
        assert!(again.unwrap_err().message.contains("already attached"));
    }

    #[test]
    fn arenas_of_other_deployments_and_bad_descriptors_are_refused() {
        let (r, _, _) = attach(b"mine", b"theirs");
        assert!(r.unwrap_err().message.contains("not a shared-memory arena"));
        let pool = ShmPool::new(b"k");
        let b = pool.alloc(1).unwrap();
        let a = b.arena();
        let pid = std::process::id();
        let mut att = Attached::default();
        let e = att.attach(b"k", 1, pid, a.fd(), &a.name, a.len() as u64 + 1);
        assert!(e.unwrap_err().message.contains("fewer than"));
        // Right name, wrong descriptor (stdin is not the memfd).
        let e = att.attach(b"k", 1, pid, 0, &a.name, 4096).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        let e = att
            .attach(b"k", 1, pid, 999_999, &a.name, 4096)
            .unwrap_err();
        assert!(e.message.contains("cannot open"), "{e}");
        let e = att.attach(b"k", 1, pid, a.fd(), "../../etc/passwd", 4096);
        assert!(e.is_err());
        assert_eq!(att.count(), 0);
    }

    #[test]
    fn an_unsealed_memfd_is_refused() {
        let prefix = arena_prefix(b"k");
        let name = format!("{prefix}{}-unsealed", std::process::id());
        let cname = std::ffi::CString::new(name.clone()).unwrap();
        // SAFETY: test-only syscalls on a descriptor we own and close.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        assert_eq!(unsafe { libc::ftruncate(fd, 8192) }, 0);
        let mut att = Attached::default();
        let e = att.attach(b"k", 1, std::process::id(), fd, &name, 8192);
        assert!(e.unwrap_err().message.contains("F_SEAL_SHRINK"));
        unsafe { libc::close(fd) };
    }
}
