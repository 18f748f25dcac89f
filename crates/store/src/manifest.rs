//! The MANIFEST: the single source of truth for which log bytes are committed.
//!
//! `{"version":1,"segments":[{"id":1,"committed_len":N}, ...]}` lists every segment and the
//! length up to which it is durable and valid. It is replaced atomically (write a temp file,
//! fsync, rename, fsync the directory), so after a crash it always describes one complete
//! commit: bytes past `committed_len`, and segments it does not list, were never committed.

use pdcx_core::{Error, ErrorKind, Result};
use pdcx_fsio::{publish_atomic, Fs, OsFs, PublishError};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::Path;

pub const MANIFEST: &str = "MANIFEST";
pub const MANIFEST_TMP: &str = "MANIFEST.tmp";
pub const VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentEntry {
    pub id: u64,
    pub committed_len: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    pub segments: Vec<SegmentEntry>,
}

/// Reads `dir/MANIFEST` from the real disk; see [`load_in`].
pub fn load(dir: &Path) -> Result<Option<Manifest>> {
    load_in(&OsFs, dir)
}

/// Reads `dir/MANIFEST`; Ok(None) if there is none yet. A MANIFEST that exists but does not
/// parse is an error: resetting would silently drop every committed byte.
pub fn load_in(fs: &dyn Fs, dir: &Path) -> Result<Option<Manifest>> {
    let path = dir.join(MANIFEST);
    let text = match fs.read_file(&path) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(None),
        Err(e) => return Err(Error::io(&format!("read {}", path.display()), &e)),
    };
    parse(&text).map(Some).map_err(|why| {
        Error::new(
            ErrorKind::Io,
            format!(
                "{} is corrupt ({why}); refusing to open the log rather than lose committed data",
                path.display()
            ),
        )
    })
}

/// Parses and checks a MANIFEST's bytes; the error says what is wrong.
pub fn parse(text: &[u8]) -> std::result::Result<Manifest, String> {
    let m: Manifest = serde_json::from_slice(text).map_err(|e| e.to_string())?;
    if m.version != VERSION {
        return Err(format!("unsupported version {}", m.version));
    }
    if m.segments.windows(2).any(|w| w[0].id >= w[1].id) || m.segments.iter().any(|s| s.id == 0) {
        return Err("segment ids are not positive and increasing".into());
    }
    Ok(m)
}

/// Why a commit of the manifest failed, which decides whether the log can go on.
pub(crate) enum StoreError {
    /// The old MANIFEST is intact and nothing was fsynced badly; the commit may be retried.
    Write(Error),
    /// An fsync failed. The kernel may have dropped the dirty pages and will report success
    /// next time, so no later fsync can be trusted to prove durability.
    Sync(String, io::Error),
}

/// Atomically replaces `dir/MANIFEST` with `m` through [`publish_atomic`] (write
/// MANIFEST.tmp, fsync it, rename it over MANIFEST, fsync the directory, which also makes
/// newly created segment files durable).
pub(crate) fn store_in(fs: &dyn Fs, dir: &Path, m: &Manifest) -> Result<(), StoreError> {
    let json = serde_json::to_vec(m)
        .map_err(|e| StoreError::Write(Error::internal(format!("encode manifest: {e}"))))?;
    publish_atomic(fs, &dir.join(MANIFEST), &json).map_err(|e| match e {
        PublishError::Sync { path, source } => {
            StoreError::Sync(format!("fsync {}", path.display()), source)
        }
        PublishError::Write { what, path, source } => {
            StoreError::Write(Error::io(&format!("{what} {}", path.display()), &source))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn store_then_load_roundtrips_and_corruption_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), None);
        let m = Manifest {
            version: VERSION,
            segments: vec![
                SegmentEntry {
                    id: 1,
                    committed_len: 100,
                },
                SegmentEntry {
                    id: 2,
                    committed_len: 7,
                },
            ],
        };
        assert!(store_in(&OsFs, dir.path(), &m).is_ok());
        assert_eq!(load(dir.path()).unwrap(), Some(m));
        assert!(!dir.path().join(MANIFEST_TMP).exists());
        let text = fs::read_to_string(dir.path().join(MANIFEST)).unwrap();
        assert!(text.contains(r#""committed_len":100"#), "{text}");

        fs::write(dir.path().join(MANIFEST), b"{\"version\":1,\"segm").unwrap();
        let e = load(dir.path()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io);
        assert!(e.message.contains("corrupt"), "{e}");
        let unordered =
            r#"{"version":1,"segments":[{"id":2,"committed_len":1},{"id":1,"committed_len":1}]}"#;
        fs::write(dir.path().join(MANIFEST), unordered).unwrap();
        assert!(load(dir.path()).is_err());
        fs::write(dir.path().join(MANIFEST), r#"{"version":2,"segments":[]}"#).unwrap();
        assert!(load(dir.path()).is_err());
    }
}
