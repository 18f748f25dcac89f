//! Data a resize adopted from a retired server (`resize/holdings.rs`): read by reference from
//! the retired log, and moved into this server's own log in the background, keeping every
//! sequence number (`promote_references`), so the retired log can go.

use super::Engine;
use pdcx_core::{ErrorKind, Result};
use std::path::Path;

impl Engine {
    /// Moves extents read from the retired logs under `retired` (`ROOT/retired`) into the
    /// log, object by object, until `budget` bytes moved (a whole object at least). An object
    /// deleted meanwhile is skipped. Returns (extents, bytes) moved.
    pub fn promote_adopted(&self, retired: &Path, budget: u64) -> Result<(u64, u64)> {
        let (mut extents, mut bytes) = (0u64, 0u64);
        for id in self.store.objects_with_refs_under(retired) {
            if bytes >= budget {
                break;
            }
            let obj = match self.object_meta(id, false) {
                Ok(o) => o,
                Err(e) if e.kind == ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let (n, b) = self.store.promote_references(&obj)?;
            extents += n;
            bytes += b;
        }
        if extents > 0 {
            tracing::info!(
                extents,
                bytes,
                "moved data adopted from retired servers into this server's log"
            );
        }
        Ok((extents, bytes))
    }
}
