//! Listening: binding a rank's Unix-domain listener and admitting each accepted connection
//! (a connection slot, a handshake place, a thread). The accept loops are in the crate root.

use crate::{limits, Server};
use pdcx_transport::Stream;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::Arc;

/// Binds rank `rank`'s Unix-domain listener: `ROOT/run/rank-N.sock` (mode 0600, or 0666 when
/// the deployment serves other users, whom the handshake then tells apart by the kernel's
/// word), replacing a stale one (the caller holds the rank's lock, so no live server of this
/// rank owns it); an abstract socket named from the root when that path does not fit in
/// `sun_path`. Returns the listener and how clients name it.
pub(crate) fn bind_unix(
    root: &Path,
    rank: u32,
    for_users: bool,
) -> std::io::Result<(UnixListener, String)> {
    use std::os::unix::fs::PermissionsExt;
    let path = crate::unix_socket_path(root, rank);
    // sun_path holds 108 bytes with the terminating NUL.
    if path.as_os_str().len() < 108 {
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let l = UnixListener::bind(&path)?;
        let mode = if for_users { 0o666 } else { 0o600 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
        return Ok((l, path.to_string_lossy().into_owned()));
    }
    // Named after the canonical root so that two deployments never share a name; the kernel
    // removes it with the last descriptor, so it is never stale.
    let canon = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canon.as_os_str().as_encoded_bytes() {
        h = (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    let spec = format!(
        "{}pdcx-{h:016x}-{rank}",
        pdcx_transport::stream::ABSTRACT_PREFIX
    );
    let addr = pdcx_transport::stream::unix_addr(&spec)?;
    Ok((UnixListener::bind_addr(&addr)?, spec))
}

/// Serves a new connection on its own thread, or refuses it with a message (at the connection
/// limit, or when no thread can be started).
pub(crate) fn accept(server: &Arc<Server>, admission: &limits::Admission, stream: Stream) {
    let rank = server.config.rank;
    let Some(slot) = admission.admit() else {
        limits::refuse(
            stream,
            format!(
                "pdcx server {rank} is at its limit of {} connections ({}); try again later",
                admission.max(),
                limits::ENV_MAX_CONNECTIONS
            ),
        );
        return;
    };
    // A place among the handshakes before any thread or challenge is spent on it; this may
    // wait (and the accept loop with it) while a flood holds every place (`net::Pending`).
    let source = super::Source::of(&stream);
    let pending = match server
        .handshakes
        .enter(&stream, source, &server.shutdown_requested)
    {
        Ok(p) => p,
        Err(why) => {
            let why = match why {
                super::Refused::SourceFull { share } => format!(
                    "pdcx server {rank} already has {share} connections from this source \
                     authenticating ({}={}, a quarter per source); try again later",
                    "PDCX_MAX_HANDSHAKES", server.config.limits.max_handshakes
                ),
                super::Refused::Busy => format!(
                    "pdcx server {rank} has no room for another handshake ({} connections \
                     authenticating, PDCX_MAX_HANDSHAKES); try again later",
                    server.config.limits.max_handshakes
                ),
                super::Refused::Stopping => format!("pdcx server {rank} is shutting down"),
            };
            limits::refuse(stream, why);
            return;
        }
    };
    let Ok(spare) = stream.try_clone() else {
        return;
    };
    let s = server.clone();
    let spawned = std::thread::Builder::new()
        .name("pdcx-conn".into())
        .spawn(move || {
            let _slot = slot;
            super::serve_connection(&s, stream, pending)
        });
    if let Err(e) = spawned {
        limits::refuse(
            spare,
            format!("pdcx server {rank} cannot start a thread for this connection: {e}"),
        );
    }
}
