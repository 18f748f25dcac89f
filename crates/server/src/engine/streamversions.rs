//! The versions of a byte stream, in the same numbering as an N-d object's: a stream's
//! version is one of its sealed versions (`meta/versions.rs`, a consistency point of `pdcx
//! run` or a file's close), numbered by the newest write it holds (`seal_seq - 1`), so `read_at`
//! (writes up to the number), naming and listing work alike. Versions below the newest one
//! whose home copy freed the log are recorded as dropped (`homecopy.rs`), unless the stream's
//! retention tags keep an older one, in which case nothing is freed.

use super::drop::ContainerTags;
use super::retention::Retention;
use super::Engine;
use pdcx_core::{Error, ObjectMeta, Result};

impl Engine {
    /// A byte stream's sealed versions, oldest first: (number, size, sealed at). None below
    /// the stream's base (`streambase.rs`): their writes left the log, whatever the dropped
    /// ranges say (a crash may come between the base and their record).
    pub(super) fn stream_versions(&self, id: pdcx_core::ObjectId) -> Result<Vec<(u64, u64, f64)>> {
        let floor = self.bases.get(id).map_or(0, |b| b.seal_seq);
        Ok(self
            .meta
            .versions(Some(id))?
            .into_iter()
            .filter(|v| v.seal_seq > 0 && v.seal_seq >= floor)
            .map(|v| (v.seal_seq - 1, v.size, v.sealed_at))
            .collect())
    }

    /// The size of version `v` of byte stream `obj`, or why `v` is not one of its versions.
    pub(super) fn stream_version_size(&self, obj: &ObjectMeta, v: u64) -> Result<u64> {
        let versions = self.stream_versions(obj.id)?;
        match versions.iter().find(|(n, _, _)| *n == v) {
            Some((_, size, _)) => Ok(*size),
            None => Err(Error::not_found(format!(
                "{} has no version {v}: a byte stream's versions are its consistency points ({})",
                obj.name,
                if versions.is_empty() {
                    "none yet".to_string()
                } else {
                    versions
                        .iter()
                        .map(|(n, _, _)| n.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ))),
        }
    }

    /// Whether byte stream `id`'s retention tags (its own, else its containers') keep a
    /// version older than `newest` (a version number): then its home copy frees nothing. A
    /// policy that cannot be read, or a container whose tags cannot be read now, keeps
    /// everything.
    pub fn stream_keeps_older(&self, id: pdcx_core::ObjectId, newest: u64) -> Result<bool> {
        let obj = self.meta.object(id)?;
        let Some(containers) = ContainerTags::default().of(self, &obj.containers) else {
            return Ok(true);
        };
        let Some(policy) = Retention::of_in(&obj, &containers.iter().collect::<Vec<_>>()) else {
            return Ok(true);
        };
        let versions: Vec<(u64, f64)> = self
            .stream_versions(id)?
            .into_iter()
            .map(|(n, _, at)| (n, at))
            .collect();
        let kept = policy.boundaries(&versions, crate::datastore::unix_now());
        Ok(kept.iter().any(|&k| k < newest))
    }
}
