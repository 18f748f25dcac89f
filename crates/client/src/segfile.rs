//! A server's log segment file as a same-node client opens it for one-copy reads
//! (`direct.rs`) and writes (`direct_write.rs`): by path, never following a symlink (the log
//! never contains one), and known by its (st_dev, st_ino), so a client never uses another file
//! that came to have the same path (a new log after node loss, another node's file).

use pdcx_store::MappedFile;
use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub(crate) struct SegFile {
    pub(crate) file: File,
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    /// The file mapped read-only (log segments only, see [`SegFile::mapped`]), made on the
    /// first small read and remade larger when a span lies past its end (the log grew).
    map: Mutex<Option<Arc<MappedFile>>>,
}

impl SegFile {
    /// The path of segment `seg` in the log directory `dir`.
    pub(crate) fn path(dir: &str, seg: u64) -> PathBuf {
        pdcx_store::segment_path(dir, seg)
    }

    /// Opens segment `seg` of `dir` read-only, or write-only with `write` (never created).
    /// Ok(None) when it is not a regular file.
    pub(crate) fn open(dir: &str, seg: u64, write: bool) -> io::Result<Option<SegFile>> {
        Self::open_at(&Self::path(dir, seg), write)
    }

    /// Opens the regular file at `path` read-only (not following a symlink at its end);
    /// Ok(None) when it is not a regular file.
    pub(crate) fn open_path(path: &Path) -> io::Result<Option<SegFile>> {
        Self::open_at(path, false)
    }

    fn open_at(path: &Path, write: bool) -> io::Result<Option<SegFile>> {
        let file = std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)?;
        let m = file.metadata()?;
        if !m.is_file() {
            return Ok(None);
        }
        Ok(Some(SegFile {
            file,
            dev: m.dev(),
            ino: m.ino(),
            map: Mutex::new(None),
        }))
    }

    /// The file mapped read-only with at least `end` bytes, or None (the file is shorter, or
    /// mapping failed: the caller `pread`s instead).
    ///
    /// Only for log segments, and only to read bytes of committed writes (whole records): the
    /// log never rewrites those nor cuts the file below them (recovery and a failed append cut
    /// only past the last whole record; retirement unlinks the whole file, which a mapping
    /// outlives). Something outside the log may (a stray one-copy `pwrite`, `truncate`), so a
    /// reader checks each record it copies from against its checksum, and the mapping is a
    /// [`MappedFile`]: a read past the end of a file cut under it reads zeros and flags the
    /// mapping instead of killing the client with SIGBUS; a reader that finds it
    /// [`faulted`](MappedFile::faulted) after copying drops it ([`SegFile::unmap`]) and does
    /// not return what it copied. A file outside the log (an HDF5 file read by reference) is
    /// never mapped.
    pub(crate) fn mapped(&self, end: u64) -> Option<Arc<MappedFile>> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = map.as_ref() {
            if m.len() as u64 >= end {
                return Some(m.clone());
            }
        }
        let size = self.file.metadata().ok()?.len();
        if size < end {
            return None;
        }
        let m = Arc::new(MappedFile::map(&self.file, size).ok()?);
        *map = Some(m.clone());
        Some(m)
    }

    /// Drops this file's mapping (a read found it cut under it); a later read maps it again
    /// as long as it then is, or falls back.
    pub(crate) fn unmap(&self) {
        *self.map.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Whether this is the file a server named by (st_dev, st_ino).
    pub(crate) fn is(&self, dev: u64, ino: u64) -> bool {
        (self.dev, self.ino) == (dev, ino)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_only_regular_files_and_knows_them_by_inode() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_str().unwrap();
        std::fs::write(SegFile::path(dir, 3), b"abc").unwrap();
        let f = SegFile::open(dir, 3, false).unwrap().unwrap();
        let m = std::fs::metadata(SegFile::path(dir, 3)).unwrap();
        assert!(f.is(m.dev(), m.ino()) && !f.is(m.dev(), m.ino() + 1));
        assert!(SegFile::open(dir, 4, true).is_err(), "never created");
        std::fs::create_dir(SegFile::path(dir, 5)).unwrap();
        assert!(SegFile::open(dir, 5, false).unwrap().is_none());
        std::os::unix::fs::symlink(SegFile::path(dir, 3), SegFile::path(dir, 6)).unwrap();
        assert!(SegFile::open(dir, 6, false).is_err(), "no symlinks");
    }

    #[test]
    fn a_mapping_grows_with_the_file_and_never_reaches_past_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_str().unwrap();
        std::fs::write(SegFile::path(dir, 1), b"abcdef").unwrap();
        let f = SegFile::open(dir, 1, false).unwrap().unwrap();
        assert_eq!(&f.mapped(3).unwrap()[..], b"abcdef");
        assert!(f.mapped(7).is_none(), "past the end of the file");
        let mut w = std::fs::OpenOptions::new()
            .append(true)
            .open(SegFile::path(dir, 1))
            .unwrap();
        std::io::Write::write_all(&mut w, b"gh").unwrap();
        assert_eq!(&f.mapped(8).unwrap()[..], b"abcdefgh", "remapped larger");
    }
}
