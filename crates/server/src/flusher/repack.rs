//! Compaction of tier blobs: a shard (several extents packed into one blob, "object sharding
//! across storage layers") is deleted only with its last extent, so one whose extents were
//! mostly dropped (overwritten, deleted) keeps their bytes. Once its live bytes fall below
//! the compaction threshold, its live extents are moved out, each to a blob of its own on the
//! same tier (`move_extent`: put, home recorded durably, then published, which releases the
//! shard), and the shard is deleted with its last reference. A crash between the put and the
//! home leaves an orphan blob that the extent's next move overwrites (same key); after the
//! home, the shard holds one reference less. Group shards (several servers' extents) are
//! repacked by their leader, which asks every server its live bytes in them (`group/repack.rs`).

use super::Flusher;
use crate::datastore::Extent;
use crate::tiering::Tiering;
use pdcx_core::{ObjectId, Result};
use std::collections::HashMap;

/// One shard of this server's: its live stored bytes and its extents.
type ShardUse = (u64, Vec<(ObjectId, Extent)>);

impl Flusher<'_> {
    /// Moves the live extents out of this server's own shards whose live stored bytes are
    /// below `threshold` of their size and, as a group leader, has its group shards below it
    /// repacked. Returns (extents moved, their stored bytes), over every server for the
    /// group shards.
    pub fn repack(&self, threshold: f64) -> Result<(u64, u64)> {
        let Some(t) = self.host.tiering().cloned() else {
            return Ok((0, 0));
        };
        let (moved, bytes) = self.repack_own(&t, threshold)?;
        // Without `moves`: the leader asks other servers, which may be asking it.
        let (g_moved, g_bytes) = self.repack_group(&t, threshold)?;
        Ok((moved + g_moved, bytes + g_bytes))
    }

    fn repack_own(&self, t: &Tiering, threshold: f64) -> Result<(u64, u64)> {
        let _moves = t.moves.lock().unwrap_or_else(|p| p.into_inner());
        let mut shards: HashMap<(usize, String), ShardUse> = HashMap::new();
        for (id, e) in self.host.store().homed_extents() {
            let Some(h) = &e.home else { continue };
            let Some(shard) = &h.shard else { continue };
            if t.group_leader_of(shard).is_some() {
                continue;
            }
            let key = t.blob_key(id, e.seq, h);
            let entry = shards.entry((h.tier, key)).or_default();
            entry.0 += h.stored_len;
            entry.1.push((id, e));
        }
        let (mut moved, mut bytes) = (0, 0);
        for ((tier, key), (live, extents)) in shards {
            let size = t.tiers[tier].len(&key)?;
            if size == 0 || live as f64 >= threshold * size as f64 {
                continue;
            }
            for (id, e) in extents {
                let meta = self.host.object_meta(id, false)?;
                self.move_extent(t, &meta, &e, tier)?;
                moved += 1;
                bytes += e.home.as_ref().map_or(0, |h| h.stored_len);
            }
        }
        Ok((moved, bytes))
    }
}
