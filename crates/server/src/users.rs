//! The users a deployment serves besides its own (`access.users` / `PDCX_USERS`), resolved to uids
//! once at start-up.
//!
//! A deployment runs as one user, holds that user's files and acts with its rights. Another
//! user listed here may connect (proving who it is by the kernel's word on this node or with
//! its user key between nodes: `net::handshake`) and reaches only its own objects and what
//! their owners share (`crate::access`). Nobody else gets past the handshake.

use pdcx_core::{Error, Result};
use std::collections::BTreeSet;

#[derive(Debug, Default, Clone)]
pub struct Users {
    uids: BTreeSet<u32>,
}

impl Users {
    /// The users named by the `access.users` setting: `PDCX_USERS` (names or uids,
    /// comma-separated) where set, else the config file's list.
    pub fn from_config(access: &pdcx_tiers::config::AccessConfig) -> Result<Users> {
        match pdcx_core::config::USERS.text() {
            Some(text) if !text.trim().is_empty() => Users::parse(&text),
            _ => Users::parse(&access.users.join(",")),
        }
    }

    /// [`from_config`](Self::from_config) with the config file of `root` (`ROOT/pdcx.toml`).
    pub fn of_root(root: &std::path::Path) -> Result<Users> {
        let deployment = pdcx_tiers::DeploymentConfig::load(&root.join("pdcx.toml"))?;
        Users::from_config(&deployment.access)
    }

    pub fn parse(text: &str) -> Result<Users> {
        let mut uids = BTreeSet::new();
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let uid = match word.parse::<u32>() {
                Ok(uid) => uid,
                Err(_) => uid_of(word).ok_or_else(|| {
                    Error::invalid(format!(
                        "access.users: no user named {word:?} on this node (give a name the \
                         node knows or a numeric uid)"
                    ))
                })?,
            };
            uids.insert(uid);
        }
        Ok(Users { uids })
    }

    pub fn allows(&self, uid: u32) -> bool {
        self.uids.contains(&uid)
    }

    pub fn is_empty(&self) -> bool {
        self.uids.is_empty()
    }
}

/// Lets the deployment's other users reach what they need under the root and nothing else:
/// the root and `run/` become 0711 (enter, not list), so they can open the published
/// addresses (`cluster.pub.json`) and the Unix sockets; every other entry stays private.
pub fn open_root_to_users(root: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let run = root.join("run");
    std::fs::create_dir_all(&run)
        .map_err(|e| Error::io(&format!("creating {}", run.display()), &e))?;
    for dir in [root, run.as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).map_err(|e| {
            Error::io(
                &format!("opening {} to the deployment's users", dir.display()),
                &e,
            )
        })?;
    }
    Ok(())
}

/// The uid of user `name` in the node's user database.
fn uid_of(name: &str) -> Option<u32> {
    let cname = std::ffi::CString::new(name).ok()?;
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to a live buffer of the stated size; `out` is set to `&pwd` or
    // null by getpwnam_r, which does not keep any of them.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut out,
        )
    };
    (rc == 0 && !out.is_null()).then_some(pwd.pw_uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_uids_resolve_and_unknown_names_are_refused() {
        let u = Users::parse(" root , 65534,").unwrap();
        assert!(u.allows(0) && u.allows(65534) && !u.allows(1));
        assert!(Users::parse("").unwrap().is_empty());
        let e = Users::parse("no-such-user-here").unwrap_err();
        assert!(e.message.contains("no-such-user-here"), "{}", e.message);
    }
}
