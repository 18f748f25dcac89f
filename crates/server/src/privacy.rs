//! A deployment's files are private to the user who runs it: its root must be a directory
//! that user owns and nobody else can write (as OpenSSH's `StrictModes` refuses a home others
//! can write), a missing root is created 0700, and the server processes create every file
//! 0600 and directory 0700 ([`private_umask`]). A root planted by another user (the
//! documented `/tmp/pdcx` example, created first by someone else) or opened to group or
//! others is refused before anything is read from it or written into it, and so is a root
//! holding an entry (the log or socket directory, a segment directory) that another user owns
//! or others can write. Group access is an explicit setting (`PDCX_GROUP_ACCESS=read`: the
//! group may read, 0640/0750); nobody but the user may ever write.

use pdcx_core::{Error, Result};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

/// Whether the deployment's group may read its files (`PDCX_GROUP_ACCESS`).
fn group_reads() -> Result<bool> {
    let word = pdcx_core::config::GROUP_ACCESS
        .word()
        .map_err(|e| Error::invalid(e.to_string()))?;
    Ok(word == "read")
}

/// Creates `root` (and missing parents) 0700 (0750 with group access) if it does not exist;
/// refuses an existing root that is not a directory, is owned by another user, or that group
/// or others can write, and one holding an entry another user owns or others can write.
pub fn prepare_root(root: &Path) -> Result<()> {
    let dir_mode = if group_reads()? { 0o750 } else { 0o700 };
    match std::fs::metadata(root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(dir_mode)
            .create(root)
            .map_err(|e| {
                Error::io(
                    &format!("creating the deployment root {}", root.display()),
                    &e,
                )
            }),
        Err(e) => Err(Error::io(
            &format!("the deployment root {}", root.display()),
            &e,
        )),
        Ok(m) => {
            check_root(root, &m)?;
            check_entries(root)
        }
    }
}

/// Every entry directly under the root (logs, sockets, segments, metadata, tiers) must be the
/// user's and not writable by others: one planted there before the root was made private
/// (or by a mistaken `chmod`) would redirect or expose what the server writes.
fn check_entries(root: &Path) -> Result<()> {
    let entries = std::fs::read_dir(root).map_err(|e| {
        Error::io(
            &format!("listing the deployment root {}", root.display()),
            &e,
        )
    })?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("listing the deployment root", &e))?;
        if entry.file_name() == "pdcx.toml" {
            continue; // `check_config` says what is wrong with it, and how to fix it
        }
        let path = entry.path();
        let m = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            // Replaced or removed since the listing (another rank publishing the cluster
            // file, a temp file renamed): nothing to judge.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(&format!("{}", path.display()), &e)),
        };
        let shown = path.display();
        if m.uid() != me {
            return Err(Error::invalid(format!(
                "{shown} in the deployment root is owned by uid {}, not by you (uid {me}):                  another user could read or redirect what the server writes there; remove it                  (as its owner or root) or use a fresh root",
                m.uid()
            )));
        }
        // A link's own mode means nothing; what it points to is what is written.
        let target_mode = if m.file_type().is_symlink() {
            match std::fs::metadata(&path) {
                Ok(t) => t.mode(),
                Err(_) => continue, // dangling: the server recreates or refuses it
            }
        } else {
            m.mode()
        };
        let mode = target_mode & 0o7777;
        // A sticky shared directory such as /tmp is still not the user's own.
        if mode & 0o022 != 0 {
            return Err(Error::invalid(format!(
                "{shown} in the deployment root can be written by other users (mode {mode:o});                  `chmod go-w {shown}` makes it yours alone"
            )));
        }
    }
    Ok(())
}

fn check_root(root: &Path, m: &std::fs::Metadata) -> Result<()> {
    let shown = root.display();
    if !m.is_dir() {
        return Err(Error::invalid(format!(
            "the deployment root {shown} is not a directory"
        )));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if m.uid() != me {
        return Err(Error::invalid(format!(
            "the deployment root {shown} is owned by uid {}, not by you (uid {me}): another user \
             could read or plant files in it; use a directory of your own, e.g. \
             `mkdir -m 700 ~/pdcx-root`",
            m.uid()
        )));
    }
    let mode = m.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(Error::invalid(format!(
            "the deployment root {shown} can be written by {} (mode {mode:o}): another user \
             could plant files in it; `chmod 700 {shown}` makes it yours alone",
            if mode & 0o002 != 0 {
                "anyone"
            } else {
                "its group"
            }
        )));
    }
    Ok(())
}

/// Refuses a configuration file that another user owns or that group or others can write:
/// whoever can change it chooses where this server's data goes (a tier directory, a bucket).
/// A missing file is fine (the defaults apply).
pub fn check_config(path: &Path) -> Result<()> {
    let m = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(Error::io(
                &format!("the configuration {}", path.display()),
                &e,
            ))
        }
        Ok(m) => m,
    };
    let shown = path.display();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if m.uid() != me {
        return Err(Error::invalid(format!(
            "the configuration {shown} is owned by uid {}, not by you (uid {me}): whoever \
             owns it decides where this deployment's data goes; use a file of your own",
            m.uid()
        )));
    }
    let mode = m.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(Error::invalid(format!(
            "the configuration {shown} can be changed by other users (mode {mode:o}); \
             `chmod 600 {shown}` makes it yours alone"
        )));
    }
    Ok(())
}

/// Makes this process create files 0600 and directories 0700 (umask 077), or with
/// `PDCX_GROUP_ACCESS=read` 0640 and 0750 (umask 027). For the server processes only
/// (`pdcx server`): an embedded server runs inside the user's program, whose umask is the
/// user's; its root is a fresh 0700 directory instead. A malformed setting keeps 077 here
/// and is reported by [`prepare_root`].
pub fn private_umask() {
    let mask = if group_reads().unwrap_or(false) {
        0o027
    } else {
        0o077
    };
    // SAFETY: umask only sets the process's file-mode creation mask.
    unsafe { libc::umask(mask) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_missing_root_is_created_private() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("a/b");
        prepare_root(&root).unwrap();
        let mode = std::fs::metadata(&root).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // Again: an existing private root is accepted.
        prepare_root(&root).unwrap();
    }

    #[test]
    fn a_root_others_can_write_is_refused_with_the_fix() {
        let d = tempfile::tempdir().unwrap();
        for (mode, who) in [(0o777, "anyone"), (0o770, "its group")] {
            std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let e = prepare_root(d.path()).unwrap_err().to_string();
            assert!(e.contains(who) && e.contains("chmod 700"), "{e}");
        }
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        prepare_root(d.path()).unwrap();
    }

    #[test]
    fn a_config_others_can_change_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("pdcx.toml");
        check_config(&f).unwrap(); // missing: the defaults
        std::fs::write(&f, b"").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        check_config(&f).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = check_config(&f).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
    }

    #[test]
    fn an_entry_others_own_or_can_write_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let logs = d.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o700)).unwrap();
        prepare_root(d.path()).unwrap();
        std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare_root(d.path()).unwrap_err().to_string();
        assert!(e.contains("logs") && e.contains("chmod go-w"), "{e}");
        std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o700)).unwrap();
        // A link of the user's to a directory others can write: what it points to counts.
        let shared = tempfile::tempdir().unwrap();
        std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        std::os::unix::fs::symlink(shared.path(), d.path().join("run")).unwrap();
        let e = prepare_root(d.path()).unwrap_err().to_string();
        assert!(e.contains("run"), "{e}");
    }

    #[test]
    fn a_file_is_not_a_root() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        assert!(prepare_root(&f)
            .unwrap_err()
            .to_string()
            .contains("not a directory"));
    }
}
