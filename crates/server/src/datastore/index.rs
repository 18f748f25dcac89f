//! The in-memory extent index (what reads consult), staged writes and the segment pins that
//! keep their log segments from being retired, and the deferred (relaxed, unregistered) list.

use crate::tiering::Home;
use pdcx_core::protocol::RegisterItem;
use pdcx_core::{ObjectId, Region};
use pdcx_store::Location;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Visible extents per object whose bytes this server holds (log or tiers), in seq order.
pub(super) type Index = HashMap<ObjectId, Vec<Arc<Extent>>>;

/// Provisional sequence numbers (of deferred writes, in `extent_map`) start here; the owners'
/// real numbers never get near it.
pub(crate) const PROVISIONAL_BASE: u64 = 1 << 62;

/// One committed, visible extent held by this server.
#[derive(Debug, Clone)]
pub struct Extent {
    pub seq: u64,
    pub region: Region,
    pub loc: Location,
    /// The tier copy made by the flusher, if any.
    pub home: Option<Home>,
    /// False once the log segment holding it was retired (then `home` is durable).
    pub in_log: bool,
    /// Smallest and largest element (as f64, NaNs ignored) once computed (value
    /// queries skip extents that cannot match): by the flusher, which has the bytes in hand.
    pub stats: Option<(f64, f64)>,
    /// For an extent read by reference: where its bytes are outside pdcx.
    pub external: Option<Arc<super::refs::ExternalRef>>,
    /// When this server made it visible (unix seconds; after a restart, the restart: a
    /// retention by duration then keeps it longer, never shorter).
    pub since: f64,
}

/// Now, in unix seconds.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A write that reached the log but is not visible until committed.
#[derive(Debug, Clone)]
pub struct Staged {
    pub txn: u64,
    pub id: ObjectId,
    pub region: Region,
    pub loc: Location,
    /// Reserved without its payload checksum (`Reserve` with `crcs: None`): it cannot be committed
    /// until [`DataStore::set_reserved_crc`](super::DataStore::set_reserved_crc) gave it one.
    pub crc_late: bool,
    /// Keeps the segment from being retired until the write is committed or dropped.
    pub(super) _pin: Arc<SegmentPin>,
}

/// Counts staged-but-uncommitted writes per log segment: a segment with any is not retired.
/// Pinning happens under the log lock (at append), and retirement checks pins under it too.
#[derive(Debug, Default)]
pub(super) struct Pins(Mutex<HashMap<u64, usize>>);

#[derive(Debug)]
pub(super) struct SegmentPin {
    pins: Arc<Pins>,
    segment: u64,
}

impl Pins {
    pub(super) fn pin(self: &Arc<Self>, segment: u64) -> Arc<SegmentPin> {
        *self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(segment)
            .or_default() += 1;
        Arc::new(SegmentPin {
            pins: self.clone(),
            segment,
        })
    }

    pub(super) fn pinned(&self, segment: u64) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&segment)
            .is_some_and(|&n| n > 0)
    }
}

impl Drop for SegmentPin {
    fn drop(&mut self) {
        let mut m = self.pins.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.segment) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.segment);
            }
        }
    }
}

/// A relaxed write of a foreign object: committed (durable per its durability, stored under
/// a provisional sequence number) but not registered with the owner yet, so invisible.
#[derive(Debug, Clone)]
pub(super) struct Deferred {
    pub(super) id: ObjectId,
    pub(super) region: Region,
    pub(super) loc: Location,
    pub(super) provisional: u64,
}

/// Bits of a token's segment field that carry the log incarnation (segment ids stay far below).
pub(super) const INCARNATION_SHIFT: u32 = 40;

impl Deferred {
    /// The registration of this deferred write. Its token (what the owner remembers it by, so a
    /// re-registration after a crash gets the same number) is its log location, tagged with the
    /// log's incarnation: a log recreated after the node lost it reuses locations.
    pub(super) fn item(&self, incarnation: u64) -> RegisterItem {
        RegisterItem {
            id: self.id,
            region: self.region.clone(),
            token: Some((
                self.loc.segment | (incarnation << INCARNATION_SHIFT),
                self.loc.offset,
            )),
        }
    }
}

/// Inserts an extent into an object's index list, which is kept in sequence order (reads paint
/// in that order). Usually an append: numbers grow; a deferred write registered again after a
/// crash may get back an older number.
pub(super) fn insert_by_seq(list: &mut Vec<Arc<Extent>>, seq: u64, region: Region, loc: Location) {
    let at = list.partition_point(|e| e.seq < seq);
    list.insert(
        at,
        Arc::new(Extent {
            seq,
            region,
            loc,
            home: None,
            in_log: true,
            stats: None,
            external: None,
            since: unix_now(),
        }),
    );
}
