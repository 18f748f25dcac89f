//! The one atomic publish of a durable file.

use crate::{Fs, FsFile, OpenMode};
use std::io;
use std::path::{Path, PathBuf};

/// Why [`publish_atomic`] failed, which decides what the caller may do next.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// Creating, writing or renaming failed before anything was claimed durable: the old file
    /// is intact and the publish may be retried.
    #[error("{what} {path}: {source}")]
    Write {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// An fsync failed. The kernel may have dropped the dirty pages and report success next
    /// time, so no later fsync of this file system can be trusted to prove durability: the
    /// caller must stop claiming durability (fail stop), never retry and call it safe.
    #[error("fsync {path}: {source}")]
    Sync { path: PathBuf, source: io::Error },
}

impl PublishError {
    pub fn is_sync(&self) -> bool {
        matches!(self, PublishError::Sync { .. })
    }
}

/// Bytes of a file being published after which its writeback is started (see `publish`).
const WRITE_BEHIND_BYTES: u64 = 1 << 20;

/// A file published from this many bytes has its blocks allocated before it is written
/// ([`FsFile::allocate`]). Measured on this VM's ext4 (16 files of 8 MiB written in 1 MiB
/// pieces, then fdatasync'ed): 36-39 ms of CPU in the writes without, 27-29 ms with, and the
/// whole 99-106 ms against 106-128 ms; the page-by-page delayed allocation was the flush
/// threads' largest kernel cost after the copy itself (bench/RESULTS.md). Small files (the
/// MANIFEST, metadata) keep one syscall fewer.
const ALLOCATE_MIN: u64 = 1 << 20;

/// Allocates the blocks of a file about to be written with `len` bytes from its start
/// ([`FsFile::allocate`]), when it is large enough for that to pay ([`ALLOCATE_MIN`]): every
/// writer of a durable file that knows its length first (a publish, a temporary written in
/// parts) goes through here.
pub fn allocate_ahead(file: &dyn FsFile, len: u64) {
    if len >= ALLOCATE_MIN {
        file.allocate(len);
    }
}

/// Writes `parts` back to back into `file` from byte `at`, starting the writeback of every
/// MiB written: the device works on it while the next parts are copied, so the fsync that
/// follows waits for the tail only (a hint: durability is still that fsync's).
pub fn write_parts(file: &dyn FsFile, at: u64, parts: &[&[u8]]) -> io::Result<()> {
    let (mut end, mut behind) = (at, at);
    for part in parts {
        file.write_all_at(part, end)?;
        end += part.len() as u64;
        if end - behind >= WRITE_BEHIND_BYTES {
            file.write_behind(behind, end - behind);
            behind = end;
        }
    }
    Ok(())
}

/// The temp file `publish_atomic` writes before renaming it over `path`.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Atomically replaces `path` with `bytes`, durably, in this order:
/// 1. write `NAME.tmp` (created or emptied) and fsync it;
/// 2. rename it over `path`;
/// 3. fsync the parent directory (making the rename, and any file created in that directory
///    since its last fsync, durable).
///
/// After a crash at any point `path` holds either its old content or `bytes`, never a mix;
/// a leftover `NAME.tmp` is garbage the owner removes at open. On a write error the temp file
/// is removed (best effort).
pub fn publish_atomic(fs: &dyn Fs, path: &Path, bytes: &[u8]) -> Result<(), PublishError> {
    publish_atomic_via(fs, path, &temp_path(path), &[bytes])
}

/// [`publish_atomic`] through a temp file of the caller's choosing (in the same directory):
/// for writers that may publish the same name concurrently, or that create the temp file
/// themselves first (e.g. to give it a Lustre layout; an existing `tmp` is emptied, keeping
/// its layout). The content is `parts` back to back, written where they lie: a shard of
/// many extents is never first copied into one buffer.
pub fn publish_atomic_via(
    fs: &dyn Fs,
    path: &Path,
    tmp: &Path,
    parts: &[&[u8]],
) -> Result<(), PublishError> {
    publish(fs, path, tmp, parts, OpenMode::Truncate)
}

/// [`publish_atomic`] of a file only its owner may read (mode 0600, e.g. the cluster file with
/// the deployment secret), through a per-process temp name (several processes may publish it).
pub fn publish_private(fs: &dyn Fs, path: &Path, bytes: &[u8]) -> Result<(), PublishError> {
    let mut tmp = temp_path(path).into_os_string();
    tmp.push(format!(".{}", std::process::id()));
    publish(
        fs,
        path,
        Path::new(&tmp),
        &[bytes],
        OpenMode::TruncatePrivate,
    )
}

/// Creates `path` with `bytes` unless it exists, durably, with one winner among racing
/// processes: write a private temp file and fsync it, hard-link it to `path` (fails if someone
/// was first), remove the temp name, fsync the directory. Returns whether this call created
/// it. Used for files written once and never replaced (the deployment secret and id).
pub fn create_once(fs: &dyn Fs, path: &Path, bytes: &[u8]) -> Result<bool, PublishError> {
    let mut tmp = temp_path(path).into_os_string();
    tmp.push(format!(".{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let write_err = |what: &'static str, p: &Path, source: io::Error| PublishError::Write {
        what,
        path: p.to_path_buf(),
        source,
    };
    let file = fs
        .open(&tmp, OpenMode::TruncatePrivate)
        .map_err(|e| write_err("create", &tmp, e))?;
    let written = file
        .write_all_at(bytes, 0)
        .map_err(|e| write_err("write", &tmp, e));
    let synced = written.and_then(|()| {
        file.sync_all().map_err(|source| PublishError::Sync {
            path: tmp.clone(),
            source,
        })
    });
    drop(file);
    let linked = synced.and_then(|()| match fs.hard_link(&tmp, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(write_err("link", path, e)),
    });
    let _ = fs.remove_file(&tmp);
    let created = linked?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // Also when someone else won: their link may not be durable yet, and we are about to use
    // what it names.
    fs.sync_dir(dir).map_err(|source| PublishError::Sync {
        path: dir.to_path_buf(),
        source,
    })?;
    Ok(created)
}

fn publish(
    fs: &dyn Fs,
    path: &Path,
    tmp: &Path,
    parts: &[&[u8]],
    mode: OpenMode,
) -> Result<(), PublishError> {
    let tmp = tmp.to_path_buf();
    let write_err = |what: &'static str, path: &Path, source: io::Error| PublishError::Write {
        what,
        path: path.to_path_buf(),
        source,
    };
    let file = fs
        .open(&tmp, mode)
        .map_err(|e| write_err("create", &tmp, e))?;
    allocate_ahead(&*file, parts.iter().map(|p| p.len() as u64).sum());
    if let Err(e) = write_parts(&*file, 0, parts) {
        drop(file);
        let _ = fs.remove_file(&tmp);
        return Err(write_err("write", &tmp, e));
    }
    file.sync_all().map_err(|source| PublishError::Sync {
        path: tmp.clone(),
        source,
    })?;
    drop(file);
    fs.rename(&tmp, path)
        .map_err(|e| write_err("rename", &tmp, e))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    fs.sync_dir(dir).map_err(|source| PublishError::Sync {
        path: dir.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Faults, SimFs};

    #[test]
    fn publish_survives_a_power_cut_only_once_complete() {
        let fs = SimFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let p = Path::new("/d/f");
        publish_atomic(&fs, p, b"one").unwrap();
        let after = fs.power_cut(None);
        assert_eq!(after.read_file(p).unwrap().as_deref(), Some(&b"one"[..]));
        // A publish that fails at the directory fsync may or may not be visible after a cut,
        // but never torn.
        fs.set_faults(Faults {
            sync_eio: true,
            ..Faults::default()
        });
        let e = publish_atomic(&fs, p, b"two").unwrap_err();
        assert!(e.is_sync(), "{e}");
        let after = fs.power_cut(None);
        assert_eq!(after.read_file(p).unwrap().as_deref(), Some(&b"one"[..]));
    }

    #[test]
    fn parts_land_back_to_back_and_a_failure_between_them_leaves_the_old_file() {
        let fs = SimFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let (p, tmp) = (Path::new("/d/shard"), Path::new("/d/shard.tmp-1"));
        publish_atomic_via(&fs, p, tmp, &[b"ab", b"", b"cde"]).unwrap();
        assert_eq!(fs.read_file(p).unwrap().as_deref(), Some(&b"abcde"[..]));
        // The disk fills during the second part: the publish fails before the rename, the
        // old shard stays whole (also after a power cut) and the temp file is gone.
        // (The disk holds the 5-byte shard; room for 6 more.)
        fs.set_faults(Faults {
            capacity: Some(5 + 6),
            ..Faults::default()
        });
        let e = publish_atomic_via(&fs, p, tmp, &[b"12345", b"67890"]).unwrap_err();
        assert!(!e.is_sync(), "{e}");
        assert_eq!(fs.read_file(p).unwrap().as_deref(), Some(&b"abcde"[..]));
        assert_eq!(fs.list_dir(Path::new("/d")).unwrap(), vec!["shard"]);
        let after = fs.power_cut(None);
        assert_eq!(after.read_file(p).unwrap().as_deref(), Some(&b"abcde"[..]));
    }

    #[test]
    fn create_once_has_one_winner_and_survives_a_power_cut() {
        let fs = SimFs::new();
        fs.create_dir_all(Path::new("/root")).unwrap();
        let p = Path::new("/root/deployment-id");
        assert!(create_once(&fs, p, b"first").unwrap());
        assert!(!create_once(&fs, p, b"second").unwrap());
        let after = fs.power_cut(None);
        assert_eq!(after.read_file(p).unwrap().as_deref(), Some(&b"first"[..]));
        assert_eq!(
            after.list_dir(Path::new("/root")).unwrap(),
            vec!["deployment-id"]
        );
    }

    #[test]
    fn private_files_are_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cluster.json");
        publish_private(&crate::OsFs, &p, b"secret").unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(create_once(&crate::OsFs, &dir.path().join("secret"), b"s").unwrap());
        let mode = std::fs::metadata(dir.path().join("secret"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn publish_on_the_real_disk_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cluster.json");
        publish_atomic(&crate::OsFs, &p, b"{}").unwrap();
        publish_atomic(&crate::OsFs, &p, b"{\"a\":1}").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"{\"a\":1}");
        assert!(!temp_path(&p).exists());
    }

    #[test]
    fn a_link_planted_at_a_temp_name_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("someone-elses-file");
        std::fs::write(&victim, b"theirs").unwrap();
        // The per-process temp name of a private publish and of a create-once: the link is
        // removed, the secret lands in a fresh 0600 file, the link's target is untouched.
        let p = dir.path().join("cluster.json");
        let mut tmp = temp_path(&p).into_os_string();
        tmp.push(format!(".{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        publish_private(&crate::OsFs, &p, b"secret").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"secret");
        let s = dir.path().join("secret");
        let mut tmp = temp_path(&s).into_os_string();
        tmp.push(format!(".{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        assert!(create_once(&crate::OsFs, &s, b"key").unwrap());
        assert_eq!(std::fs::read(&victim).unwrap(), b"theirs");
        // The shared temp name of an ordinary publish: refused rather than followed.
        let q = dir.path().join("manifest");
        std::os::unix::fs::symlink(&victim, temp_path(&q)).unwrap();
        assert!(publish_atomic(&crate::OsFs, &q, b"data").is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"theirs");
    }
}
