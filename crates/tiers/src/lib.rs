//! Storage tiers behind one interface.
//!
//! A tier stores immutable blobs under `/`-separated keys and serves byte ranges of them.
//! The server's segment log is where writes land first (crash-consistent, host-side); tiers
//! are where committed extents live after a flush: memory (fast, volatile), a node-local
//! directory (SSD / burst buffer), a shared directory (parallel file system) and S3-compatible
//! object storage. One module per backend; [`open`] builds one from its [`TierConfig`].
//!
//! Blobs are written whole and never modified in place (a new version gets a new key), which
//! is what lets every backend, including S3, be used the same way.

pub mod config;
#[doc(hidden)]
pub mod conformance;
pub mod localdir;
pub mod lustre;
pub mod memory;
pub mod s3;
pub mod shareddir;

pub use config::{
    parse_size, DeploymentConfig, MetricsConfig, ShardConfig, ShardServers, TierConfig, TierKind,
};
pub use pdcx_core::{Error, ErrorKind, Result};

use std::sync::Arc;

/// One storage tier. Implementations are thread-safe; calls block the calling thread.
pub trait Tier: Send + Sync {
    /// The name the deployment config gave this tier (`pdcx show` prints it).
    fn name(&self) -> &str;
    fn kind(&self) -> TierKind;
    /// True if a blob survives the death of the server process (everything but memory).
    fn durable(&self) -> bool {
        self.kind() != TierKind::Memory
    }
    /// Stores `data` under `key`, replacing any blob there. Atomic: a reader sees the old
    /// blob, the new one or none, never a torn one. `NoSpace` if the tier's configured capacity
    /// (or the device) cannot take it; the caller then spills to the next tier.
    fn put(&self, key: &str, data: &[u8]) -> Result<()>;
    /// [`Tier::put`] of `parts` back to back (a shard of many extents). Directory tiers write
    /// the parts where they lie; the default joins them first.
    fn put_parts(&self, key: &str, parts: &[&[u8]]) -> Result<()> {
        match parts {
            [one] => self.put(key, one),
            _ => self.put(key, &parts.concat()),
        }
    }
    /// Fills `out` with the bytes of `key` starting at `offset`. `OutOfBounds` if the blob is
    /// shorter than `offset + out.len()`.
    fn get_range(&self, key: &str, offset: u64, out: &mut [u8]) -> Result<()>;
    /// The whole blob.
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        let len = self.len(key)?;
        let mut out =
            vec![0u8; usize::try_from(len).map_err(|_| Error::internal("blob too large"))?];
        self.get_range(key, 0, &mut out)?;
        Ok(out)
    }
    /// Length of the blob under `key` (`NotFound` if there is none).
    fn len(&self, key: &str) -> Result<u64>;
    /// Removes `key`; removing a missing key is not an error (deletes are retried after crashes).
    fn delete(&self, key: &str) -> Result<()>;
    /// Keys under `prefix` with their lengths, sorted.
    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>>;
    /// Configured capacity in bytes, `None` if unbounded.
    fn capacity(&self) -> Option<u64>;
    /// Bytes this tier currently holds for this deployment (as far as this process knows).
    fn used(&self) -> u64;
    /// Blobs several servers write together, where every server reaches the tier as one file
    /// system (shared directories); `None` elsewhere.
    fn part_writer(&self) -> Option<&dyn PartWriter> {
        None
    }
}

/// A blob several servers write together, each its own bytes at their offset, as collective
/// I/O does (a group shard whose members write their extents): the leader [`begin`]s it (an
/// empty temporary file), every writer [`write`]s its bytes and makes them durable, and the
/// leader [`publish`]es it under its key once every write succeeded, or [`abort`]s it. Until
/// the publish nobody sees the key; a crash leaves only the temporary, which the leader's next
/// open of the tier removes.
///
/// [`begin`]: PartWriter::begin
/// [`write`]: PartWriter::write
/// [`publish`]: PartWriter::publish
/// [`abort`]: PartWriter::abort
pub trait PartWriter: Send + Sync {
    /// Creates the temporary of a `len`-byte blob for `key`; returns its name, which the
    /// writers pass to [`PartWriter::write`]. `NoSpace` if the tier cannot take `len` bytes.
    fn begin(&self, key: &str, len: u64) -> Result<String>;
    /// Writes `parts` back to back at byte `at` of temporary `temp` (which must exist: a
    /// writer never creates one) and makes them durable.
    fn write(&self, temp: &str, at: u64, parts: &[&[u8]]) -> Result<()>;
    /// Publishes temporary `temp` as `key`: durable, then renamed, then the rename made
    /// durable. The caller publishes only once every writer succeeded; a temporary that does
    /// not hold `len` bytes (its last writer failed) is refused all the same.
    fn publish(&self, temp: &str, key: &str, len: u64) -> Result<()>;
    /// Removes temporary `temp` (best effort).
    fn abort(&self, temp: &str);
}

/// Facts about the server opening a tier that are not in the tier's config: the shared tier's
/// Lustre striping depends on how many servers write and which one this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenContext {
    /// This server's rank.
    pub rank: u32,
    /// Number of servers in the deployment (the writers of a shared tier).
    pub size: u32,
}

impl Default for OpenContext {
    fn default() -> Self {
        OpenContext { rank: 0, size: 1 }
    }
}

/// Builds the tier a config entry describes, as the only server of a deployment.
pub fn open(cfg: &TierConfig) -> Result<Arc<dyn Tier>> {
    open_in(cfg, &OpenContext::default())
}

/// Builds the tier a config entry describes for server `ctx.rank` of `ctx.size`.
pub fn open_in(cfg: &TierConfig, ctx: &OpenContext) -> Result<Arc<dyn Tier>> {
    open_with_fs(cfg, ctx, pdcx_fsio::os())
}

/// [`open_in`] with the directory tiers on the file system `fs` (a simulated disk in crash
/// tests).
pub fn open_with_fs(
    cfg: &TierConfig,
    ctx: &OpenContext,
    fs: Arc<dyn pdcx_fsio::Fs>,
) -> Result<Arc<dyn Tier>> {
    match cfg.kind {
        TierKind::Memory => Ok(Arc::new(memory::MemoryTier::new(&cfg.name, cfg.capacity))),
        TierKind::Local => Ok(Arc::new(localdir::DirTier::open_with_fs(cfg, fs)?)),
        TierKind::Shared => Ok(Arc::new(shareddir::SharedTier::open_with_fs(cfg, ctx, fs)?)),
        TierKind::S3 => Ok(Arc::new(s3::S3Tier::open(cfg)?)),
    }
}

/// Rejects keys that could escape a directory tier or that S3 would treat differently from a
/// file system: empty segments, `.`/`..`, a leading `/`, and characters outside a safe set.
pub fn check_key(key: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::invalid(format!("bad tier key {key:?}: {why}")));
    if key.is_empty() || key.len() > 1024 {
        return bad("length must be 1..=1024");
    }
    for seg in key.split('/') {
        if seg.is_empty() || seg == "." || seg == ".." {
            return bad("empty, '.' or '..' path segment");
        }
        if !seg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return bad("only ASCII letters, digits, '-', '_', '.' and '/' are allowed");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_cannot_escape() {
        for bad in [
            "", "/a", "a//b", "a/../b", "..", "a/./b", "a b", "a\\b", "a/b/",
        ] {
            assert!(check_key(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["a", "srv-0001/obj-12/ext-5.z", "x_y-z.bin"] {
            check_key(good).unwrap();
        }
    }
}
