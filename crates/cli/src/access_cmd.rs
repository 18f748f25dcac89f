//! Sharing a deployment with other users: `pdcx share` (an owner's grants on its objects and
//! containers) and `pdcx server user-key` (the key another user proves itself with between
//! nodes).

use crate::common::{connect, msg, resolve};
use anyhow::{anyhow, bail, Result};
use pdcx_client::cluster::{encode_hex, load_or_create_secret, SECRET_FILE};
use pdcx_core::protocol::{user_key, TagTarget};
use std::path::Path;

/// `pdcx share`: grants (or takes away) another user's access to an object or a container.
pub fn share(
    root: &Path,
    what: &str,
    user: Option<&str>,
    container: bool,
    write: bool,
    revoke: bool,
) -> Result<()> {
    let uid = user.map(uid_of).transpose()?;
    let access = (!revoke).then_some(write);
    let client = connect(root)?;
    let (target, shown) = if container {
        (
            TagTarget::Container(what.to_string()),
            format!("container {what:?}"),
        )
    } else {
        let o = resolve(&client, what)?;
        (TagTarget::Object(o.id), format!("{:?}", o.name))
    };
    client.share(target, uid, access).map_err(msg)?;
    let who = match (user, uid) {
        (Some(name), Some(uid)) if name != uid.to_string() => format!("{name} (uid {uid})"),
        (_, Some(uid)) => format!("uid {uid}"),
        _ => "every user of the deployment".to_string(),
    };
    match access {
        None => println!("{shown}: {who} no longer has access"),
        Some(false) => println!("{shown}: {who} may read"),
        Some(true) => println!("{shown}: {who} may read and write"),
    }
    Ok(())
}

/// `pdcx server user-key USER`: prints USER's key, which only a holder of the deployment
/// secret can make. USER stores it in a file only it can read and points `PDCX_USER_KEY` at
/// it to reach the deployment from other nodes.
pub fn user_key_cmd(root: &Path, user: &str) -> Result<()> {
    if !root.join(SECRET_FILE).exists() {
        bail!(
            "{} has no deployment secret: run this as the deployment's user, on a root whose \
             servers have started once",
            root.display()
        );
    }
    let secret = load_or_create_secret(root).map_err(msg)?;
    let uid = uid_of(user)?;
    println!("{}", encode_hex(&user_key(&secret, uid)));
    eprintln!(
        "the key of uid {uid}: give it to that user only; they keep it in a file only they can \
         read (chmod 600) and set PDCX_USER_KEY to its path. The deployment must list them in \
         `access.users`."
    );
    Ok(())
}

/// A user name or numeric uid, as this node's user database knows it.
fn uid_of(user: &str) -> Result<u32> {
    if let Ok(uid) = user.parse::<u32>() {
        return Ok(uid);
    }
    let cname = std::ffi::CString::new(user).map_err(|_| anyhow!("bad user name {user:?}"))?;
    // SAFETY: getpwnam returns a pointer to static storage or null; read at once, not kept.
    let pw = unsafe { libc::getpwnam(cname.as_ptr()) };
    if pw.is_null() {
        bail!("no user named {user:?} on this node (give a name it knows or a numeric uid)");
    }
    // SAFETY: non-null result of getpwnam, read before any other call could overwrite it.
    Ok(unsafe { (*pw).pw_uid })
}
