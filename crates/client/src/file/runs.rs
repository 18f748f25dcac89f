//! The write-aggregation buffer of an open file: disjoint runs of bytes written and not
//! flushed yet, later writes replacing earlier ones.

use std::collections::BTreeMap;

/// Disjoint runs of written bytes: offset -> bytes, no two touching or overlapping.
#[derive(Default, Debug)]
pub(super) struct Runs {
    pub(super) map: BTreeMap<u64, Vec<u8>>,
    pub(super) bytes: usize,
    /// A recycled buffer the next new run starts in (no page faults for its first bytes).
    pub(super) spare: Option<Vec<u8>>,
}

impl Runs {
    pub(super) fn end(&self) -> u64 {
        self.map
            .iter()
            .next_back()
            .map(|(o, b)| o + b.len() as u64)
            .unwrap_or(0)
    }

    /// Writes `data` at `off`: later bytes replace earlier ones; touching runs merge.
    pub(super) fn write(&mut self, off: u64, data: &[u8]) {
        let end = off + data.len() as u64;
        // Fast path: appends to the last run (sequential writers).
        if let Some((&o, last)) = self.map.iter_mut().next_back() {
            if o + last.len() as u64 == off {
                last.extend_from_slice(data);
                self.bytes += data.len();
                return;
            }
        }
        // Every run that overlaps or touches [off, end) is merged into one.
        let touching: Vec<u64> = self
            .map
            .range(..=end)
            .filter(|(o, b)| **o + b.len() as u64 >= off)
            .map(|(o, _)| *o)
            .collect();
        let start = touching.first().map_or(off, |&o| o.min(off));
        let mut merged_end = end;
        for o in &touching {
            merged_end = merged_end.max(o + self.map[o].len() as u64);
        }
        let n = (merged_end - start) as usize;
        let mut merged = match self.spare.take() {
            Some(mut v) => {
                v.clear();
                v.resize(n, 0);
                v
            }
            None => vec![0u8; n],
        };
        for o in touching {
            let b = self.map.remove(&o).unwrap_or_default();
            self.bytes -= b.len();
            let at = (o - start) as usize;
            merged[at..at + b.len()].copy_from_slice(&b);
        }
        let at = (off - start) as usize;
        merged[at..at + data.len()].copy_from_slice(data);
        self.bytes += merged.len();
        self.map.insert(start, merged);
    }

    /// Copies the buffered bytes that fall in [off, off + out.len()) over `out`.
    pub(super) fn overlay(&self, off: u64, out: &mut [u8]) {
        let end = off + out.len() as u64;
        for (&o, b) in self.map.range(..end) {
            let bend = o + b.len() as u64;
            if bend <= off {
                continue;
            }
            let s = o.max(off);
            let e = bend.min(end);
            out[(s - off) as usize..(e - off) as usize]
                .copy_from_slice(&b[(s - o) as usize..(e - o) as usize]);
        }
    }

    /// Drops everything at or past `len`.
    pub(super) fn truncate(&mut self, len: u64) {
        let cut: Vec<u64> = self.map.range(..).map(|(o, _)| *o).collect();
        for o in cut {
            if o >= len {
                if let Some(b) = self.map.remove(&o) {
                    self.bytes -= b.len();
                }
            } else if let Some(b) = self.map.get_mut(&o) {
                let keep = (len - o).min(b.len() as u64) as usize;
                self.bytes -= b.len() - keep;
                b.truncate(keep);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_with_later_bytes_winning() {
        let mut r = Runs::default();
        r.write(0, b"aaaa");
        r.write(4, b"bbbb"); // appends
        r.write(10, b"cc"); // a hole
        r.write(2, b"XXXXXXXXX"); // over both runs and the hole's start, touching "cc"
        assert_eq!(r.map.len(), 1);
        let mut out = vec![b'.'; 14];
        r.overlay(0, &mut out);
        assert_eq!(&out, b"aaXXXXXXXXXc..");
        assert_eq!(r.bytes, 12);
        assert_eq!(r.end(), 12);
        r.truncate(5);
        assert_eq!(r.end(), 5);
        assert_eq!(r.bytes, 5);
        let mut out = vec![b'.'; 3];
        r.overlay(3, &mut out);
        assert_eq!(&out, b"XX.");
    }
}
