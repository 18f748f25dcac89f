//! The cluster file (`ROOT/cluster.json`, mode 0600) tells clients and servers where a
//! deployment's servers listen and holds the deployment secret every connection must prove it
//! knows.

use pdcx_core::protocol::Credential;
use pdcx_core::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub const CLUSTER_FILE: &str = "cluster.json";
pub const SECRET_FILE: &str = "secret";
/// The addresses alone, readable by everyone, for a deployment that serves other users too
/// (`users`): they cannot read `cluster.json`, which holds the secret.
pub const PUBLIC_FILE: &str = "cluster.pub.json";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerEntry {
    pub rank: u32,
    pub addr: String,
    pub pid: u32,
    pub host: String,
    /// The node this server serves as node-local server (`--node` / `PDCX_NODE`, else the
    /// host name). Clients on the same node send their data here.
    #[serde(default)]
    pub node: String,
    /// The server's Unix-domain listener for clients on its node: a path (mode 0600), or
    /// `@name` for an abstract socket. Empty when it has none (older servers, or none could
    /// be bound); clients then use `addr`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub unix: String,
}

impl ServerEntry {
    pub fn node(&self) -> &str {
        if self.node.is_empty() {
            &self.host
        } else {
            &self.node
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterFile {
    pub version: u32,
    pub size: u32,
    /// Hex of the deployment secret.
    pub secret: String,
    pub servers: Vec<ServerEntry>,
}

impl ClusterFile {
    pub fn path(root: &Path) -> PathBuf {
        root.join(CLUSTER_FILE)
    }

    pub fn load(root: &Path) -> Result<ClusterFile> {
        let path = Self::path(root);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::new(
                    ErrorKind::Unavailable,
                    format!(
                        "no pdcx deployment at {}: {} does not exist (start one with `pdcx server start -n 2 --root {}`)",
                        root.display(),
                        path.display(),
                        root.display()
                    ),
                )
            } else {
                Error::io(&format!("reading {}", path.display()), &e)
            }
        })?;
        let cf: ClusterFile = serde_json::from_str(&text).map_err(|e| {
            Error::invalid(format!(
                "{} is not a valid cluster file: {e}",
                path.display()
            ))
        })?;
        cf.validate()
            .map_err(|e| Error::invalid(format!("{}: {}", path.display(), e.message)))?;
        Ok(cf)
    }

    fn validate(&self) -> Result<()> {
        if self.size == 0 || self.servers.len() != self.size as usize {
            return Err(Error::invalid(format!(
                "lists {} servers but size is {}",
                self.servers.len(),
                self.size
            )));
        }
        for (i, s) in self.servers.iter().enumerate() {
            if s.rank as usize != i {
                return Err(Error::invalid(format!(
                    "server entry {i} has rank {}",
                    s.rank
                )));
            }
        }
        decode_hex(&self.secret).map(|_| ())
    }

    pub fn secret_bytes(&self) -> Result<Vec<u8>> {
        decode_hex(&self.secret)
    }

    /// Publishes the addresses without the secret, atomically, readable by everyone (for the
    /// other users a deployment serves).
    pub fn store_public(&self, root: &Path) -> Result<()> {
        let public = ClusterFile {
            secret: String::new(),
            ..self.clone()
        };
        let text =
            serde_json::to_string_pretty(&public).map_err(|e| Error::internal(e.to_string()))?;
        let path = root.join(PUBLIC_FILE);
        write_private_atomic(&path, text.as_bytes())?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
            .map_err(|e| Error::io(&format!("making {} readable", path.display()), &e))
    }

    /// The deployment at `root` as this process may join it, and what it proves itself with:
    /// the cluster file and the deployment secret for the deployment's own user; for another
    /// user (who cannot read the cluster file), the published addresses and its user key
    /// (`PDCX_USER_KEY`) or, on the servers' node, the kernel's word.
    pub fn join(root: &Path) -> Result<(ClusterFile, Credential)> {
        let denied = matches!(
            std::fs::File::open(Self::path(root)),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied
        );
        if !denied {
            let cf = Self::load(root)?;
            let cred = Credential::deployment(&cf.secret_bytes()?);
            return Ok((cf, cred));
        }
        let path = root.join(PUBLIC_FILE);
        let cannot = |e: std::io::Error| {
            Error::new(
                ErrorKind::Auth,
                format!(
                    "{} belongs to another user and {} cannot be read ({e}): this deployment \
                     does not serve other users (its operator lists them in `users`)",
                    Self::path(root).display(),
                    path.display()
                ),
            )
        };
        let text = std::fs::read_to_string(&path).map_err(cannot)?;
        let owner = std::fs::metadata(&path).map_err(cannot)?.uid();
        let cf: ClusterFile = serde_json::from_str(&text)
            .map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?;
        // SAFETY: getuid has no preconditions and cannot fail.
        let me = unsafe { libc::getuid() };
        let cred = match pdcx_core::config::USER_KEY.text() {
            Some(file) => {
                // A key is 64 hex digits: read no more than a small bound of whatever is there.
                let mut hex = String::new();
                std::io::Read::read_to_string(
                    &mut std::io::Read::take(
                        std::fs::File::open(&file).map_err(|e| {
                            Error::io(&format!("opening the user key PDCX_USER_KEY={file}"), &e)
                        })?,
                        4096,
                    ),
                    &mut hex,
                )
                .map_err(|e| {
                    Error::io(&format!("reading the user key PDCX_USER_KEY={file}"), &e)
                })?;
                Credential::user_key(me, decode_hex(hex.trim())?)
            }
            None => Credential::kernel(me, owner),
        };
        Ok((cf, cred))
    }

    /// Publishes atomically (temp file, fsync, rename) with mode 0600.
    pub fn store(&self, root: &Path) -> Result<()> {
        let text =
            serde_json::to_string_pretty(self).map_err(|e| Error::internal(e.to_string()))?;
        write_private_atomic(&Self::path(root), text.as_bytes())
    }
}

/// Writes `data` to `path` so that readers see either the old or the new file, never a torn one.
pub fn write_private_atomic(path: &Path, data: &[u8]) -> Result<()> {
    pdcx_fsio::publish_private(&pdcx_fsio::OsFs, path, data)
        .map_err(|e| Error::new(ErrorKind::Io, format!("writing {}: {e}", path.display())))
}

/// Reads the root's secret, creating it on first use. Several server ranks may race here; the
/// first `hard_link` wins and everybody reads the winner's secret.
pub fn load_or_create_secret(root: &Path) -> Result<Vec<u8>> {
    let path = root.join(SECRET_FILE);
    let ctx = |e: std::io::Error| Error::io(&format!("secret file {}", path.display()), &e);
    if !path.exists() {
        let mut bytes = [0u8; 32];
        rand::Rng::fill(&mut rand::thread_rng(), &mut bytes);
        // Several ranks may race here: the first to link its file wins, everybody reads it.
        pdcx_fsio::create_once(&pdcx_fsio::OsFs, &path, encode_hex(&bytes).as_bytes())
            .map_err(|e| Error::new(ErrorKind::Io, format!("secret file: {e}")))?;
    }
    let meta = std::fs::metadata(&path).map_err(ctx)?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(Error::new(
            ErrorKind::Auth,
            format!(
                "{} is readable by other users (mode {:o}); run chmod 600 on it",
                path.display(),
                meta.permissions().mode() & 0o777
            ),
        ));
    }
    decode_hex(std::fs::read_to_string(&path).map_err(ctx)?.trim())
}

pub fn encode_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn decode_hex(s: &str) -> Result<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.is_empty() {
        return Err(Error::invalid("secret is not a non-empty hex string"));
    }
    // from_str_radix alone would also take a sign ("+f"), so "+f" and "0f" were one secret.
    if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::invalid("secret is not hex"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(s.get(i..i + 2).unwrap_or("zz"), 16)
                .map_err(|_| Error::invalid("secret is not hex"))
        })
        .collect()
}

/// The root a client uses: an explicit one, else `PDCX_ROOT`.
pub fn root_from_env(explicit: Option<&Path>) -> Option<PathBuf> {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| pdcx_core::config::ROOT.path())
}

/// The node this process runs on: `PDCX_NODE`, else the host name.
pub fn this_node() -> String {
    match pdcx_core::config::NODE.text() {
        Some(n) => n.trim().to_string(),
        None => hostname(),
    }
}

/// This machine's host name.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    if unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        return String::from_utf8_lossy(&buf[..end]).into_owned();
    }
    "localhost".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by fuzz/ (target `cluster`): a sign was taken as a hex digit.
    #[test]
    fn hex_secret_takes_hex_digits_only() {
        assert_eq!(decode_hex("0fA0").unwrap(), vec![0x0f, 0xa0]);
        for bad in ["+f", "-1", "0x", " f", "f "] {
            assert!(decode_hex(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn secret_is_created_once_and_private() {
        let dir = std::env::temp_dir().join(format!("pdcx-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = load_or_create_secret(&dir).unwrap();
        let b = load_or_create_secret(&dir).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 32);
        std::fs::set_permissions(
            dir.join(SECRET_FILE),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        assert_eq!(
            load_or_create_secret(&dir).unwrap_err().kind,
            ErrorKind::Auth
        );
        let cf = ClusterFile {
            version: 1,
            size: 1,
            secret: encode_hex(&a),
            servers: vec![ServerEntry {
                rank: 0,
                addr: "127.0.0.1:1".into(),
                pid: 1,
                host: "h".into(),
                node: String::new(),
                unix: "/r/run/rank-0.sock".into(),
            }],
        };
        cf.store(&dir).unwrap();
        assert_eq!(ClusterFile::load(&dir).unwrap(), cf);
        assert_eq!(
            std::fs::metadata(ClusterFile::path(&dir))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
        // A cluster file written before servers had Unix listeners still loads.
        let old = r#"{"version":1,"size":1,"secret":"0f","servers":[{"rank":0,"addr":"127.0.0.1:1","pid":1,"host":"h","node":"n"}]}"#;
        std::fs::write(ClusterFile::path(&dir), old).unwrap();
        std::fs::set_permissions(
            ClusterFile::path(&dir),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        assert_eq!(ClusterFile::load(&dir).unwrap().servers[0].unix, "");
        std::fs::write(ClusterFile::path(&dir), "{\"version\":1}").unwrap();
        assert!(ClusterFile::load(&dir)
            .unwrap_err()
            .message
            .contains("not a valid cluster file"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            ClusterFile::load(&dir).unwrap_err().kind,
            ErrorKind::Unavailable
        );
    }
}
