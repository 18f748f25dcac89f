//! Commit records: the extents one commit made visible, written into the log itself so that a
//! commit is durable with ONE fdatasync of the log (data records and the commit record that
//! names them share it). The metadata shard (SQLite) records the same extents without waiting
//! for its own fsync; recovery replays the commit records found past the last checkpoint into
//! it (see `SegmentLog::open` and the server's `DataStore::open`).
//!
//! A commit record is an ordinary log record (same header, checksums, scan) whose object is
//! [`COMMIT_OBJECT`], which no object id can be (ids are `owner << 48 | local id`, and no
//! deployment has 65,536 servers), with region `[0, entries)` and this payload:
//!
//! ```text
//! u8  version = 1
//! per entry: object u64, seq u64, segment u64, offset u64, len u64, crc u32, ndim u8,
//!            ndim x (offset u64, count u64)
//! ```
//! All integers little-endian.

use crate::record::Location;
use pdcx_core::{Region, MAX_DIMS};

/// The object field of a commit record.
pub const COMMIT_OBJECT: u64 = u64::MAX;
const VERSION: u8 = 1;

/// One extent a commit made visible: object, sequence number, region and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitEntry {
    pub object: u64,
    pub seq: u64,
    pub region: Region,
    pub loc: Location,
}

/// A commit record's payload for `entries`.
pub fn encode(entries: &[CommitEntry]) -> Vec<u8> {
    let mut b = Vec::with_capacity(1 + entries.len() * (45 + 16 * 2));
    b.push(VERSION);
    for e in entries {
        for v in [e.object, e.seq, e.loc.segment, e.loc.offset, e.loc.len] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&e.loc.crc.to_le_bytes());
        b.push(e.region.ndim() as u8);
        for d in 0..e.region.ndim() {
            b.extend_from_slice(&e.region.offset[d].to_le_bytes());
            b.extend_from_slice(&e.region.count[d].to_le_bytes());
        }
    }
    b
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_at_checked(N)?;
        self.0 = rest;
        head.try_into().ok()
    }
    fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_le_bytes)
    }
}

/// Decodes a commit record's payload; None when it is not one this version wrote (its checksum
/// matched, so that means a newer format: recovery refuses rather than guesses).
pub fn decode(payload: &[u8]) -> Option<Vec<CommitEntry>> {
    let mut c = Cursor(payload);
    if c.take::<1>()?[0] != VERSION {
        return None;
    }
    let mut out = Vec::new();
    while !c.0.is_empty() {
        let (object, seq, segment, offset, len) =
            (c.u64()?, c.u64()?, c.u64()?, c.u64()?, c.u64()?);
        let crc = u32::from_le_bytes(c.take::<4>()?);
        let ndim = c.take::<1>()?[0] as usize;
        if ndim == 0 || ndim > MAX_DIMS {
            return None;
        }
        let (mut o, mut n) = (Vec::with_capacity(ndim), Vec::with_capacity(ndim));
        for _ in 0..ndim {
            o.push(c.u64()?);
            n.push(c.u64()?);
        }
        let region = Region::new(o, n).ok()?;
        out.push(CommitEntry {
            object,
            seq,
            region,
            loc: Location {
                segment,
                offset,
                len,
                crc,
            },
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damage_is_refused() {
        let entries = vec![
            CommitEntry {
                object: 3 << 48 | 7,
                seq: 42,
                region: Region::new(vec![1, 2], vec![3, 4]).unwrap(),
                loc: Location {
                    segment: 9,
                    offset: 123,
                    len: 96,
                    crc: 0xdead_beef,
                },
            },
            CommitEntry {
                object: 1,
                seq: 1 << 62,
                region: Region::new(vec![0], vec![1]).unwrap(),
                loc: Location {
                    segment: 1,
                    offset: 40,
                    len: 4,
                    crc: 1,
                },
            },
        ];
        let b = encode(&entries);
        assert_eq!(decode(&b), Some(entries));
        assert_eq!(decode(&encode(&[])), Some(vec![]));
        assert_eq!(decode(&b[..b.len() - 1]), None, "a cut entry is refused");
        let mut newer = b.clone();
        newer[0] = 2;
        assert_eq!(decode(&newer), None, "an unknown version is refused");
        assert_eq!(decode(&[]), None);
    }
}
