//! The real file system: `std::fs` plus the Linux calls the log relies on.

use crate::{Fs, FsFile, LockGuard, OpenMode};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The production [`Fs`]: every call is the corresponding system call.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsFs;

struct OsFile(File);

impl FsFile for OsFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }
    fn os_file(&self) -> Option<&File> {
        Some(&self.0)
    }
    fn identity(&self) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        let m = self.0.metadata().ok()?;
        Some((m.dev(), m.ino()))
    }
    fn allocate(&self, len: u64) {
        // SAFETY: plain syscall on an fd that `self.0` keeps open; failure only loses a hint.
        unsafe {
            libc::fallocate(
                self.0.as_raw_fd(),
                libc::FALLOC_FL_KEEP_SIZE,
                0,
                len as libc::off64_t,
            );
        }
    }
    fn write_behind(&self, offset: u64, len: u64) {
        // SAFETY: plain syscall on an fd that `self.0` keeps open; failure only loses a hint.
        unsafe {
            libc::sync_file_range(
                self.0.as_raw_fd(),
                offset as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }
}

struct Flock(#[allow(dead_code)] File);

impl Fs for OsFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn FsFile>> {
        let mut o = OpenOptions::new();
        o.read(true);
        match mode {
            OpenMode::Read => {}
            OpenMode::ReadWrite => {
                o.write(true);
            }
            OpenMode::CreateNew => {
                o.write(true).create_new(true);
            }
            OpenMode::Truncate => {
                use std::os::unix::fs::OpenOptionsExt;
                // A temp name is never a link: one planted there must not redirect the write.
                o.write(true)
                    .create(true)
                    .truncate(true)
                    .custom_flags(libc::O_NOFOLLOW);
            }
            OpenMode::TruncatePrivate => {
                use std::os::unix::fs::OpenOptionsExt;
                // Whatever is at the name (a crashed process's leftover, a planted link or
                // file someone else may hold open) is removed, never followed or truncated,
                // and the file is created afresh, exclusively: no other descriptor can be
                // open on what the secret is written into.
                match fs::remove_file(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
                o.write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW);
            }
        }
        Ok(Arc::new(OsFile(o.open(path)?)))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::hard_link(from, to)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn size(&self, path: &Path) -> io::Result<Option<u64>> {
        match fs::metadata(path) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }
    fn lock(&self, path: &Path) -> io::Result<LockGuard> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        // SAFETY: flock only reads the fd, which `file` keeps open for the call.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Box::new(Flock(file)))
    }
    fn sync_foreign(
        &self,
        file: &File,
        _group: &[PathBuf],
        _derived: &[PathBuf],
    ) -> io::Result<()> {
        file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn allocate_reserves_the_blocks_and_keeps_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let f = OsFs.open(&path, OpenMode::Truncate).unwrap();
        f.allocate(4 << 20);
        let m = fs::metadata(&path).unwrap();
        assert_eq!(m.len(), 0, "the size grows only as writes land");
        assert!(
            m.blocks() * 512 >= 4 << 20,
            "{} bytes of blocks allocated",
            m.blocks() * 512
        );
        f.write_all_at(&[7u8; 1000], 0).unwrap();
        assert_eq!(f.size().unwrap(), 1000);
    }

    #[test]
    fn a_large_publish_is_exactly_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blob");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
        let (a, b) = data.split_at(1_234_567);
        crate::publish_atomic_via(&OsFs, &path, &crate::temp_path(&path), &[a, b]).unwrap();
        assert_eq!(fs::read(&path).unwrap(), data);
        // Allocated for exactly its length: no blocks held past its end.
        let blocks = fs::metadata(&path).unwrap().blocks() * 512;
        assert!(
            blocks <= data.len() as u64 + 4096,
            "{blocks} bytes of blocks"
        );
        // Published over a larger file: nothing of it is left past the new end.
        crate::publish_atomic_via(
            &OsFs,
            &path,
            &crate::temp_path(&path),
            &[&data[..2_000_000]],
        )
        .unwrap();
        assert_eq!(fs::read(&path).unwrap(), &data[..2_000_000]);
    }
}
