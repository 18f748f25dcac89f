//! pdcx-fsio: the I/O seam under pdcx's durable data path.
//!
//! Every file operation of the durable path (segment log, MANIFEST, local-directory tiers,
//! the cluster file) goes through the narrow [`Fs`] / [`FsFile`] traits, in the manner of
//! redb's `StorageBackend`: production uses [`OsFs`]; tests use [`SimFs`], an in-memory disk
//! that knows which bytes and which directory entries a completed fsync made durable, so a
//! test can cut the power ([`SimFs::power_cut`]) and reopen the store on exactly what a real
//! disk would have kept (optionally with the last write torn), or make fsync fail with EIO and
//! writes with ENOSPC on demand ([`Faults`]).
//!
//! [`publish_atomic`] is the one way a durable file is replaced: temp file, fsync, rename,
//! directory fsync. [`crash`] holds the named crash points compiled in by the `crash-points`
//! feature.

pub mod crash;
mod os;
mod publish;
mod sim;

pub use os::OsFs;
pub use publish::{
    allocate_ahead, create_once, publish_atomic, publish_atomic_via, publish_private, temp_path,
    write_parts, PublishError,
};
pub use sim::{Cut, Faults, SimFs, SimRng, SimStats};

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How [`Fs::open`] opens a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only; the file must exist.
    Read,
    /// Read and write; the file must exist.
    ReadWrite,
    /// Read and write; the file must not exist yet (`O_CREAT|O_EXCL`).
    CreateNew,
    /// Read and write; created if missing, emptied if present (`O_CREAT|O_TRUNC`).
    Truncate,
    /// A fresh file readable by its owner only (mode 0600: files holding the deployment's
    /// secret): whatever is at the path is removed first, and the file is created exclusively,
    /// never through a symlink.
    TruncatePrivate,
}

/// An open file. Positioned I/O only: the durable path never relies on a file offset.
pub trait FsFile: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; 0 at or past the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `offset` (extending the file, zero-filling any gap).
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    fn size(&self) -> io::Result<u64>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// fdatasync: the file's data (and size) are durable when this returns Ok.
    fn sync_data(&self) -> io::Result<()>;
    /// fsync: data and metadata.
    fn sync_all(&self) -> io::Result<()>;
    /// A hint to start writing `[offset, offset+len)` back now, without waiting (Linux
    /// `sync_file_range(SYNC_FILE_RANGE_WRITE)`); promises nothing about durability.
    fn write_behind(&self, _offset: u64, _len: u64) {}
    /// A hint that the file is about to be written with `len` bytes from its start: their
    /// blocks are allocated at once (Linux `fallocate` with `FALLOC_FL_KEEP_SIZE`: the size
    /// still grows only as the writes land), so the writes fill allocated space instead of
    /// reserving it page by page. Promises nothing: a file system without `fallocate`, or
    /// without room, leaves the writes to find out as they would have.
    fn allocate(&self, _len: u64) {}
    /// (st_dev, st_ino) when this is a real file another process can open by its path and
    /// find to be this very file; None for simulated files. A same-node client writes its
    /// payload into the log only through such a file (one-copy writes).
    fn identity(&self) -> Option<(u64, u64)> {
        None
    }
    /// The operating system's file, for what only a real file can do (a read-only mapping of
    /// log pages to flush them without copying); None for simulated files.
    fn os_file(&self) -> Option<&std::fs::File> {
        None
    }

    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset)? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "file ends before the requested range",
                    ))
                }
                n => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }

    /// The whole file.
    fn read_all(&self) -> io::Result<Vec<u8>> {
        let len = usize::try_from(self.size()?)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
        let mut buf = vec![0u8; len];
        self.read_exact_at(&mut buf, 0)?;
        Ok(buf)
    }
}

/// Held while a directory is locked by [`Fs::lock`]; dropping it unlocks.
pub type LockGuard = Box<dyn Send + Sync>;

/// The file-system operations of the durable path. Paths are absolute or relative to the
/// process's working directory, as with `std::fs`.
pub trait Fs: Send + Sync {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn FsFile>>;
    /// Atomically replaces `to` with `from` (POSIX rename); durable after [`Fs::sync_dir`] of
    /// the parent directory.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// A second name for a file; fails with `AlreadyExists` if `to` exists (so two processes
    /// racing to create a file agree on one winner).
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Names of the regular files and directories in `dir` (not `.`/`..`), in no order.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// fsync of a directory: makes creates, renames and removes in it durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Size of a file, or None when it does not exist.
    fn size(&self, path: &Path) -> io::Result<Option<u64>>;
    /// True when `path` is an existing directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// An exclusive lock on `path` (created if missing) that other processes respect; fails
    /// with `WouldBlock` when someone else holds it.
    fn lock(&self, path: &Path) -> io::Result<LockGuard>;
    /// fdatasync of a file this seam does not manage (SQLite's write-ahead log) at one of our
    /// durability points. `group` lists the files whose state that point makes durable
    /// together (the database and its WAL); `derived` lists files that are rebuilt from them
    /// (SQLite's `-shm`). [`SimFs`] snapshots `group` here and restores it at a power cut.
    fn sync_foreign(
        &self,
        file: &std::fs::File,
        group: &[PathBuf],
        derived: &[PathBuf],
    ) -> io::Result<()>;

    /// Reads a whole file; `Ok(None)` when it does not exist.
    fn read_file(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        match self.open(path, OpenMode::Read) {
            Ok(f) => f.read_all().map(Some),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Removes a file; a missing one is fine.
    fn remove_if_exists(&self, path: &Path) -> io::Result<()> {
        match self.remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// Creates `dir` and its missing parents so that each is durable: after creating a directory
/// its parent is fsynced (a new directory's entry is not durable until then, and a file
/// published inside it would vanish with it at a power cut).
pub fn create_dir_durable(fs: &dyn Fs, dir: &Path) -> io::Result<()> {
    if fs.is_dir(dir) {
        return Ok(());
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent {
        create_dir_durable(fs, parent)?;
    }
    fs.create_dir_all(dir)?;
    fs.sync_dir(parent.unwrap_or(Path::new(".")))
}

/// The production seam, shared.
pub fn os() -> Arc<dyn Fs> {
    Arc::new(OsFs)
}
