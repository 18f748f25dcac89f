//! The shared-directory tier (`kind = "shared"`): a directory on a parallel file system that
//! every server of the deployment sees. Blob I/O is the directory tier's (temporary file,
//! fsync, rename); what this adds is the Lustre striping policy of [`crate::lustre`].
//!
//! A Lustre layout can only be chosen when a file is created, and the policy depends on the
//! size of the data (stripe size 1 MiB below 1 GiB, else 16 MiB), so each blob of at least one
//! stripe gets its layout when its temporary file is created: stripe count
//! ⌊OSTs / servers⌋ starting at OST (rank × count) % OSTs. Smaller blobs fit in one stripe,
//! where a layout changes nothing, and are created plainly (saving a fork of `lfs`).
//! On other file systems the tier is exactly the directory tier.

use crate::config::TierConfig;
use crate::localdir::DirTier;
use crate::lustre;
use crate::{OpenContext, PartWriter, Tier, TierKind};
use pdcx_core::Result;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

pub struct SharedTier {
    dir: DirTier,
    ctx: OpenContext,
    /// OSTs of the Lustre file system under the directory; `None` when it is not Lustre.
    osts: Option<u32>,
    /// Cleared after `lfs setstripe` fails once: blobs are then written with the directory's
    /// default layout instead of failing (striping is a performance hint, not correctness).
    striping: AtomicBool,
}

impl SharedTier {
    pub fn open(cfg: &TierConfig, ctx: &OpenContext) -> Result<Self> {
        Self::open_with_fs(cfg, ctx, pdcx_fsio::os())
    }

    /// [`open`](Self::open) on the file system `fs` (a simulated disk in crash tests, whose
    /// paths do not exist on the real one: no Lustre there).
    pub fn open_with_fs(
        cfg: &TierConfig,
        ctx: &OpenContext,
        fs: std::sync::Arc<dyn pdcx_fsio::Fs>,
    ) -> Result<Self> {
        // Other servers put into the same directory: clean only this rank's leftovers.
        let dir = DirTier::open_owned(cfg, fs, &format!("r{}-", ctx.rank))?;
        let osts = if dir.root().exists() && lustre::is_lustre(dir.root())? {
            match lustre::ost_count(dir.root()) {
                Ok(n) => Some(n),
                Err(e) => {
                    tracing::warn!(
                        tier = %cfg.name,
                        "tier {:?}: {} is on Lustre but its OSTs are unknown ({}); \
                         using the directory's default striping",
                        cfg.name,
                        dir.root().display(),
                        e.message
                    );
                    None
                }
            }
        } else {
            tracing::debug!(path = %dir.root().display(), "not Lustre: striping is a no-op");
            None
        };
        Ok(SharedTier {
            dir,
            ctx: *ctx,
            osts,
            striping: AtomicBool::new(osts.is_some()),
        })
    }

    pub fn root(&self) -> &Path {
        self.dir.root()
    }

    /// Creates temporary `tmp`, empty, with layout `stripe` (lfs), before its first byte is
    /// written; when lfs cannot, striping is off for the rest of the run and the writer
    /// creates the file plainly.
    fn lay_out(&self, tmp: &Path, stripe: &lustre::Stripe) -> std::io::Result<()> {
        if let Err(e) = lustre::apply(tmp, stripe) {
            if self.striping.swap(false, Ordering::Relaxed) {
                tracing::warn!(
                    tier = %self.dir.name(),
                    "tier {:?}: striping disabled for this run: {}",
                    self.dir.name(),
                    e.message
                );
            }
            let _ = std::fs::remove_file(tmp);
        }
        Ok(())
    }

    /// The layout a blob of `bytes` gets, or `None` if it gets the directory's default.
    pub fn stripe_for(&self, bytes: u64) -> Option<lustre::Stripe> {
        let osts = self.osts?;
        let stripe = lustre::policy(osts, self.ctx.size, bytes, self.ctx.rank);
        (bytes >= stripe.size && self.striping.load(Ordering::Relaxed)).then_some(stripe)
    }
}

impl Tier for SharedTier {
    fn name(&self) -> &str {
        self.dir.name()
    }
    fn kind(&self) -> TierKind {
        TierKind::Shared
    }

    fn put(&self, key: &str, data: &[u8]) -> Result<()> {
        self.put_parts(key, &[data])
    }

    fn put_parts(&self, key: &str, parts: &[&[u8]]) -> Result<()> {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        match self.stripe_for(len) {
            None => self.dir.put_parts(key, parts),
            Some(stripe) => {
                self.dir
                    .put_with(key, parts, Some(&|tmp: &Path| self.lay_out(tmp, &stripe)))
            }
        }
    }

    fn get_range(&self, key: &str, offset: u64, out: &mut [u8]) -> Result<()> {
        self.dir.get_range(key, offset, out)
    }
    fn len(&self, key: &str) -> Result<u64> {
        self.dir.len(key)
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.dir.delete(key)
    }
    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        self.dir.list(prefix)
    }
    fn capacity(&self) -> Option<u64> {
        self.dir.capacity()
    }
    fn used(&self) -> u64 {
        self.dir.used()
    }
    fn part_writer(&self) -> Option<&dyn PartWriter> {
        Some(self)
    }
}

/// Every server of a deployment sees the directory as one file system: a group shard's
/// members write their own extents into it.
impl PartWriter for SharedTier {
    fn begin(&self, key: &str, len: u64) -> Result<String> {
        match self.stripe_for(len) {
            None => self.dir.begin_parts(key, len, None),
            Some(stripe) => {
                self.dir
                    .begin_parts(key, len, Some(&|tmp: &Path| self.lay_out(tmp, &stripe)))
            }
        }
    }
    fn write(&self, temp: &str, at: u64, parts: &[&[u8]]) -> Result<()> {
        self.dir.write_part(temp, at, parts)
    }
    fn publish(&self, temp: &str, key: &str, len: u64) -> Result<()> {
        self.dir.publish_parts(temp, key, len)
    }
    fn abort(&self, temp: &str) {
        self.dir.abort_parts(temp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance;

    fn cfg(dir: &Path) -> TierConfig {
        TierConfig {
            name: "pfs".into(),
            kind: TierKind::Shared,
            path: Some(dir.to_path_buf()),
            ..Default::default()
        }
    }

    #[test]
    fn behaves_like_a_tier() {
        let dir = tempfile::tempdir().unwrap();
        let t = SharedTier::open(&cfg(dir.path()), &OpenContext { rank: 1, size: 4 }).unwrap();
        assert_eq!(t.kind(), TierKind::Shared);
        conformance::check(&t);
        let other = SharedTier::open(&cfg(dir.path()), &OpenContext { rank: 2, size: 4 }).unwrap();
        conformance::check_part_writer(&t, &other);
    }

    #[test]
    fn a_restart_cleans_only_its_own_leftovers_in_the_shared_directory() {
        use crate::localdir::TMP_MARK;
        let dir = tempfile::tempdir().unwrap();
        let ctx = |rank| OpenContext { rank, size: 2 };
        let t0 = SharedTier::open(&cfg(dir.path()), &ctx(0)).unwrap();
        t0.put("d/s0000/a", &[1; 100]).unwrap();
        // A put of server 1 in flight, and one of server 0 that died before its rename.
        let theirs = dir.path().join(format!("d/s0001/b{TMP_MARK}r1-77-0"));
        let ours = dir.path().join(format!("d/s0000/c{TMP_MARK}r0-66-0"));
        for p in [&theirs, &ours] {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, [0u8; 10]).unwrap();
        }
        drop(t0);
        let t0 = SharedTier::open(&cfg(dir.path()), &ctx(0)).unwrap();
        assert!(
            theirs.exists(),
            "another server's in-flight put was removed"
        );
        assert!(!ours.exists(), "our own leftover stayed");
        assert_eq!(t0.get("d/s0000/a").unwrap(), vec![1; 100]);
    }

    #[test]
    fn off_lustre_no_blob_gets_a_layout() {
        let dir = tempfile::tempdir().unwrap();
        let t = SharedTier::open(&cfg(dir.path()), &OpenContext::default()).unwrap();
        assert_eq!(t.stripe_for(1 << 40), None);
    }

    #[test]
    fn open_builds_the_shared_kind() {
        let dir = tempfile::tempdir().unwrap();
        let t = crate::open_in(&cfg(dir.path()), &OpenContext { rank: 0, size: 2 }).unwrap();
        assert_eq!(t.kind(), TierKind::Shared);
        t.put("a/b", b"x").unwrap();
        assert_eq!(t.get("a/b").unwrap(), b"x");
    }
}
