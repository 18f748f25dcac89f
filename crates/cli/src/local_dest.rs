//! How `pdcx cp` writes a local destination: as `/bin/cp` does, never damaging it.
//!
//! - A symlink is written through: its target is what changes, the link stays. A dangling
//!   symlink is refused, as GNU cp refuses it ("not writing through dangling symlink").
//! - A device, FIFO or socket is opened for writing and written to; it is never replaced
//!   (`/dev/stdout`, `/dev/null`, a named pipe another process reads).
//! - A regular file (new or existing) appears only complete: the bytes go to a private
//!   temporary in the same directory, are fsynced, and the temporary is renamed over the final
//!   name, then the directory is fsynced. An existing file keeps its permission bits. Unlike
//!   cp's in-place rewrite this gives the final name a new inode, so hard links to the old file
//!   keep the old bytes.
//! - `-` is standard output.

use anyhow::{bail, Context, Result};
use std::fs::{File, OpenOptions, Permissions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What a local destination name turns out to be.
#[derive(Debug, PartialEq)]
pub enum LocalDest {
    /// `-`.
    Stdout,
    /// A device or FIFO (possibly behind symlinks), or a descriptor named through `/proc`
    /// (`/dev/stdout`): written in place.
    Special(PathBuf),
    /// A regular file at `path` (the symlink's target, if the name was a symlink), replaced
    /// atomically; `mode` is the existing file's permission bits.
    Regular { path: PathBuf, mode: Option<u32> },
}

/// Looks at the destination without changing it.
pub fn classify(name: &Path) -> Result<LocalDest> {
    if name.as_os_str() == "-" {
        return Ok(LocalDest::Stdout);
    }
    let link = match std::fs::symlink_metadata(name) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Ok(LocalDest::Regular {
                path: name.to_path_buf(),
                mode: None,
            })
        }
        Err(e) => return Err(e).with_context(|| format!("looking at {}", name.display())),
    };
    let (meta, is_link) = if link.file_type().is_symlink() {
        match std::fs::metadata(name) {
            Ok(m) => (m, true),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                bail!("not writing through dangling symlink {}", name.display())
            }
            Err(e) => return Err(e).with_context(|| format!("following {}", name.display())),
        }
    } else {
        (link, false)
    };
    let ft = meta.file_type();
    if ft.is_dir() {
        bail!("{} is a directory", name.display());
    }
    if ft.is_file() {
        let path = if is_link {
            let target = std::fs::canonicalize(name)
                .with_context(|| format!("resolving the symlink {}", name.display()))?;
            if target.starts_with("/proc") {
                // `/dev/stdout`, `/dev/fd/N`: a descriptor another process opened (the shell's
                // redirection). Renaming over its file would detach that descriptor, so it is
                // written in place, as cp does.
                return Ok(LocalDest::Special(name.to_path_buf()));
            }
            target
        } else {
            name.to_path_buf()
        };
        return Ok(LocalDest::Regular {
            path,
            mode: Some(meta.permissions().mode() & 0o7777),
        });
    }
    if ft.is_socket() {
        bail!("cannot write to {}: it is a socket", name.display());
    }
    // Character and block devices, FIFOs.
    Ok(LocalDest::Special(name.to_path_buf()))
}

/// An open local destination. [`LocalWriter::finish`] makes the bytes final; dropping it
/// unfinished removes a regular destination's temporary (the final name is untouched).
pub struct LocalWriter {
    out: Out,
    shown: String,
}

enum Out {
    Stdout(std::io::Stdout),
    Special(File),
    Regular {
        tmp: tempfile::NamedTempFile,
        path: PathBuf,
        guard: crate::interrupt::Armed,
    },
}

impl LocalWriter {
    /// Opens `name` for a copy (see the module notes for what each kind does).
    pub fn open(name: &Path) -> Result<LocalWriter> {
        let shown = name.display().to_string();
        let out = match classify(name)? {
            LocalDest::Stdout => Out::Stdout(std::io::stdout()),
            LocalDest::Special(p) => Out::Special(
                // O_TRUNC as cp uses; devices and FIFOs ignore it. Never O_CREAT here.
                OpenOptions::new()
                    .write(true)
                    .truncate(true)
                    .open(&p)
                    .with_context(|| format!("opening {}", p.display()))?,
            ),
            LocalDest::Regular { path, mode } => {
                let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    Some(d) => {
                        std::fs::create_dir_all(d)
                            .with_context(|| format!("creating {}", d.display()))?;
                        d.to_path_buf()
                    }
                    None => PathBuf::from("."),
                };
                let base = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                // O_EXCL with a random suffix: no other writer's file is ever truncated.
                let tmp = tempfile::Builder::new()
                    .prefix(&format!(".{base}."))
                    .suffix(".pdcx-cp")
                    .permissions(Permissions::from_mode(mode.unwrap_or(0o666)))
                    .tempfile_in(&dir)
                    .with_context(|| format!("creating a temporary in {}", dir.display()))?;
                if let Some(m) = mode {
                    // The umask applied at creation; an existing file keeps its exact bits.
                    tmp.as_file()
                        .set_permissions(Permissions::from_mode(m))
                        .with_context(|| format!("setting the mode of {}", tmp.path().display()))?;
                }
                let guard = crate::interrupt::arm(
                    crate::interrupt::Temporary::Local(tmp.path().to_path_buf()),
                    shown.clone(),
                );
                Out::Regular { tmp, path, guard }
            }
        };
        Ok(LocalWriter { out, shown })
    }

    /// Writes all of `buf`. A closed pipe on standard output is [`Closed`], not an error
    /// worth a message (`pdcx cp pdcx://f - | head`).
    pub fn write_all(&mut self, buf: &[u8]) -> Result<()> {
        let r = match &mut self.out {
            Out::Stdout(s) => s.lock().write_all(buf),
            Out::Special(f) => f.write_all(buf),
            Out::Regular { tmp, .. } => tmp.as_file_mut().write_all(buf),
        };
        match r {
            Err(e) if e.kind() == ErrorKind::BrokenPipe && matches!(self.out, Out::Stdout(_)) => {
                Err(Closed.into())
            }
            r => r.with_context(|| format!("writing {}", self.shown)),
        }
    }

    /// Makes the copy final: a regular file is fsynced, renamed over its name, and its
    /// directory fsynced; other destinations are flushed.
    pub fn finish(self) -> Result<()> {
        let shown = self.shown;
        match self.out {
            Out::Stdout(s) => match s.lock().flush() {
                Err(e) if e.kind() == ErrorKind::BrokenPipe => Err(Closed.into()),
                r => r.context("flushing standard output"),
            },
            Out::Special(mut f) => f.flush().with_context(|| format!("writing {shown}")),
            Out::Regular { tmp, path, guard } => {
                tmp.as_file()
                    .sync_all()
                    .with_context(|| format!("syncing the copy of {shown}"))?;
                guard.publish(|| {
                    tmp.persist(&path)
                        .map_err(|e| e.error)
                        .with_context(|| format!("renaming the copy to {}", path.display()))
                })?;
                let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
                pdcx_fsio::os()
                    .sync_dir(dir.unwrap_or(Path::new(".")))
                    .with_context(|| format!("syncing the directory of {}", path.display()))?;
                Ok(())
            }
        }
    }
}

/// Standard output was closed by its reader: the copy stops quietly.
#[derive(Debug, thiserror::Error)]
#[error("standard output closed")]
pub struct Closed;

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn kinds() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        std::fs::set_permissions(&f, Permissions::from_mode(0o640)).unwrap();
        assert_eq!(
            classify(&f).unwrap(),
            LocalDest::Regular {
                path: f.clone(),
                mode: Some(0o640)
            }
        );
        let l = d.path().join("l");
        symlink(&f, &l).unwrap();
        assert!(
            matches!(classify(&l).unwrap(), LocalDest::Regular { path, .. } if path == std::fs::canonicalize(&f).unwrap())
        );
        let dangling = d.path().join("dangling");
        symlink(d.path().join("nowhere"), &dangling).unwrap();
        let e = classify(&dangling).unwrap_err().to_string();
        assert!(e.contains("dangling symlink"), "{e}");
        assert_eq!(
            classify(Path::new("/dev/null")).unwrap(),
            LocalDest::Special("/dev/null".into())
        );
        assert_eq!(classify(Path::new("-")).unwrap(), LocalDest::Stdout);
        assert!(classify(d.path()).is_err());
    }

    #[test]
    fn regular_copy_keeps_mode_and_leaves_no_temporary_on_drop() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"old").unwrap();
        std::fs::set_permissions(&f, Permissions::from_mode(0o604)).unwrap();
        let mut w = LocalWriter::open(&f).unwrap();
        w.write_all(b"new bytes").unwrap();
        drop(w); // an error mid-copy: the old file stays, no temporary is left
        assert_eq!(std::fs::read(&f).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
        let mut w = LocalWriter::open(&f).unwrap();
        w.write_all(b"new bytes").unwrap();
        w.finish().unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"new bytes");
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o604);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }
}
