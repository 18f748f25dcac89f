//! Publishing MANIFESTs: each computed under the log's lock as the next generation, written
//! one at a time and never an older one over a newer one.

use super::{SegmentLog, POISONED};
use crate::manifest::{self, Manifest, SegmentEntry, StoreError};
use pdcx_core::{Error, ErrorKind, Result};
use pdcx_fsio::Fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A MANIFEST computed under the log's lock, to be published ([`ManifestPublisher`]),
/// possibly after the lock is released.
pub struct PendingManifest {
    /// Its place in the order MANIFESTs were computed in.
    generation: u64,
    manifest: Manifest,
}

/// Writes MANIFESTs, one at a time and never an older one over a newer one: each is computed
/// under the log's lock from the log's state then, with the next generation number, and a
/// newer one lists everything an older one does (the checkpointed lengths only grow, and a
/// segment leaves only by retirement, which computes a newer one). So a checkpoint publishes
/// its MANIFEST (two fsyncs and a rename) after releasing the log's lock, and appends and
/// reservations go on meanwhile; creating and retiring segments publish theirs holding the
/// lock (they must be listed or unlisted before the log goes on). A failed fsync poisons the
/// log.
pub struct ManifestPublisher {
    pub(super) fs: Arc<dyn Fs>,
    pub(super) dir: PathBuf,
    pub(super) poisoned: Arc<AtomicBool>,
    /// The generation of the newest MANIFEST written.
    pub(super) published: std::sync::Mutex<u64>,
}

impl ManifestPublisher {
    /// Writes `m` unless a newer MANIFEST was written meanwhile (it lists all `m` does).
    pub fn publish(&self, m: PendingManifest) -> Result<()> {
        let mut published = self.published.lock().unwrap_or_else(|p| p.into_inner());
        if m.generation <= *published {
            return Ok(());
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::Io, POISONED));
        }
        match manifest::store_in(&*self.fs, &self.dir, &m.manifest) {
            Ok(()) => {
                *published = m.generation;
                Ok(())
            }
            Err(StoreError::Write(e)) => Err(e),
            Err(StoreError::Sync(what, e)) => {
                self.poisoned.store(true, Ordering::Release);
                Err(Error::new(
                    ErrorKind::Io,
                    format!("{what}: {e}; {POISONED}"),
                ))
            }
        }
    }
}

impl SegmentLog {
    /// The MANIFEST of the log's state now, less the segments `leaving`, as the next
    /// generation.
    pub(super) fn next_manifest(&mut self, leaving: &[u64]) -> PendingManifest {
        self.manifest_generation += 1;
        PendingManifest {
            generation: self.manifest_generation,
            manifest: Manifest {
                version: manifest::VERSION,
                segments: self
                    .segments
                    .iter()
                    .filter(|(id, _)| !leaving.contains(id))
                    .map(|(&id, s)| SegmentEntry {
                        id,
                        committed_len: s.checkpointed,
                    })
                    .collect(),
            },
        }
    }

    /// Who publishes this log's MANIFESTs, usable without the log's lock.
    pub fn manifests(&self) -> Arc<ManifestPublisher> {
        self.manifests.clone()
    }

    /// Publishes the MANIFEST: every segment with its checkpointed length. A failed fsync
    /// poisons the log.
    pub(super) fn store_manifest(&mut self) -> Result<()> {
        let m = self.next_manifest(&[]);
        self.manifests.publish(m)
    }
}
