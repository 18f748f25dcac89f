//! Byte streams whose older bytes live only at their home ("log space").
//!
//! Once version *e* of a byte stream is at its home (`done`), the home file (or S3 object)
//! holds exactly what every write numbered below *e*'s seal adds up to. The owner then makes
//! *e* the stream's **base** (durably: `bs_versions.evicted`, then in memory here) and drops
//! every write below that seal from the logs (`Engine::drop_below`). A read of the stream is
//! the base's bytes (clipped to its size; zeros past it), painted over by the writes numbered
//! at or after the seal, in order; only the owner reads a base, so reads of a stream with one
//! go through the owner (`Engine::locate` names it, `read_plan` declines one-copy plans).
//!
//! Why reading a newer home is still right: each later version's home copy is the base's
//! content with the writes between the two seals applied. So a reader that finds the home
//! already replaced by version *e+1* (the rename happened, the base not yet moved; or a crash
//! in between) and paints the writes numbered from *e*'s seal on top gets the same bytes.
//! The home must not be changed by anyone else while it is a base: pdcx then reads what is
//! there (a missing or shortened home is an error, not zeros).

use pdcx_core::{Error, ErrorKind, ObjectId, Result};
use pdcx_tiers::config::TierConfig;
use pdcx_tiers::s3::S3Tier;
use pdcx_tiers::{Tier, TierKind};
use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

/// Where a version goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Home {
    /// An ordinary file at this absolute path (a shared directory: the "PFS").
    File(PathBuf),
    /// An S3 object.
    S3 { bucket: String, key: String },
}

impl Home {
    pub fn parse(s: &str) -> Result<Home> {
        if s.contains('\0') {
            return Err(Error::invalid("a home must not contain NUL bytes"));
        }
        if let Some(rest) = s.strip_prefix("s3://") {
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() || key.is_empty() || key.ends_with('/') {
                return Err(Error::invalid(format!(
                    "home {s:?}: an S3 home is s3://BUCKET/KEY with a non-empty key"
                )));
            }
            return Ok(Home::S3 {
                bucket: bucket.into(),
                key: key.into(),
            });
        }
        let p = Path::new(s);
        if !p.is_absolute() || p.file_name().is_none() {
            return Err(Error::invalid(format!(
                "home {s:?}: a file home is an absolute path naming a file"
            )));
        }
        if p.components().any(|c| c == std::path::Component::ParentDir) {
            return Err(Error::invalid(format!("home {s:?} must not contain `..`")));
        }
        Ok(Home::File(p.to_path_buf()))
    }
}

/// The version a stream's reads start from (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    pub epoch: u64,
    /// Writes numbered below this are the base's; only later ones are painted over it.
    pub seal_seq: u64,
    /// The base's size: its home holds exactly this many bytes.
    pub size: u64,
    pub home: String,
}

/// The bases of the byte streams this server owns, and the S3 clients of home buckets
/// (shared with the home copier).
#[derive(Default)]
pub struct StreamBases {
    bases: RwLock<HashMap<ObjectId, Base>>,
    /// Taken (shared) by stream reads and (exclusive) while a base is set and the writes
    /// below it are dropped: a read sees the writes or the base, never neither.
    pub change: RwLock<()>,
    buckets: Mutex<HashMap<String, Arc<S3Tier>>>,
}

impl StreamBases {
    pub fn get(&self, id: ObjectId) -> Option<Base> {
        self.bases
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    /// Makes `base` the stream's base unless it already has a newer one.
    pub fn set(&self, id: ObjectId, base: Base) {
        let mut m = self.bases.write().unwrap_or_else(|p| p.into_inner());
        if m.get(&id).is_none_or(|b| b.epoch < base.epoch) {
            m.insert(id, base);
        }
    }

    pub fn remove(&self, id: ObjectId) {
        self.bases
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// Every base, for the drop at start.
    pub fn all(&self) -> Vec<(ObjectId, Base)> {
        self.bases
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(id, b)| (*id, b.clone()))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.bases.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The S3 client for home bucket `bucket` (endpoint and credentials from the server's
    /// `AWS_*` environment, as for an S3 tier).
    pub fn s3(&self, bucket: &str) -> Result<Arc<S3Tier>> {
        let mut b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = b.get(bucket) {
            return Ok(t.clone());
        }
        let cfg = TierConfig {
            name: format!("home s3://{bucket}"),
            kind: TierKind::S3,
            bucket: Some(bucket.to_string()),
            ..TierConfig::default()
        };
        let t = Arc::new(S3Tier::open_destination(&cfg)?);
        b.insert(bucket.to_string(), t.clone());
        Ok(t)
    }

    /// Paints the base's bytes `[offset, offset + out.len())` into `out`; the part past the
    /// base's size is left as it is (the caller filled it).
    pub fn read(&self, base: &Base, offset: u64, out: &mut [u8]) -> Result<()> {
        if offset >= base.size || out.is_empty() {
            return Ok(());
        }
        let n = (base.size - offset).min(out.len() as u64) as usize;
        let out = &mut out[..n];
        match Home::parse(&base.home)? {
            Home::File(path) => read_file(&path, base, offset, out),
            Home::S3 { bucket, key } => self.s3(&bucket)?.get_range(&key, offset, out),
        }
    }
}

fn read_file(path: &Path, base: &Base, offset: u64, out: &mut [u8]) -> Result<()> {
    let gone = |e: std::io::Error| {
        let kind = if e.kind() == std::io::ErrorKind::NotFound {
            ErrorKind::NotFound
        } else {
            ErrorKind::Io
        };
        Error::new(
            kind,
            format!(
                "reading version {} from its home {}: {e} (the log no longer holds it; \
                 the home file must not be removed or changed while pdcx uses it)",
                base.epoch,
                path.display()
            ),
        )
    };
    let f = std::fs::File::open(path).map_err(gone)?;
    f.read_exact_at(out, offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            gone(std::io::Error::other(format!(
                "shorter than the version's {} bytes",
                base.size
            )))
        } else {
            gone(e)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn homes_parse_and_bad_ones_are_refused() {
        assert_eq!(
            Home::parse("/pfs/out/a.h5").unwrap(),
            Home::File("/pfs/out/a.h5".into())
        );
        assert_eq!(
            Home::parse("s3://b/run/a.h5").unwrap(),
            Home::S3 {
                bucket: "b".into(),
                key: "run/a.h5".into()
            }
        );
        for bad in [
            "rel/a",
            "/pfs/../etc/x",
            "s3://b",
            "s3://b/",
            "s3:///k",
            "/a\0b",
            "/",
        ] {
            assert!(Home::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
