//! Whether newer writes hide an older one completely: the test compaction uses to find
//! extents no read of the latest data can reach (their log bytes are garbage).
//!
//! A region is cut by each newer region in turn (box difference: at most two boxes per
//! dimension survive a cut); it is hidden when nothing is left. The number of boxes is
//! bounded, so a pathological pattern of writes answers "not hidden" (kept: conservative)
//! rather than using unbounded memory or time.

use crate::region::Region;

/// Most boxes [`hidden_by`] tracks before giving up (answering false).
const MAX_BOXES: usize = 4096;

/// `a` minus `b`: disjoint boxes covering exactly the elements of `a` outside `b` (empty
/// when `b` contains `a`). Same number of dims assumed.
pub fn subtract(a: &Region, b: &Region) -> Vec<Region> {
    let Some(inter) = a.intersect(b) else {
        return vec![a.clone()];
    };
    let mut out = Vec::new();
    // Peel slabs off `rest` one dimension at a time: below and above the intersection.
    let mut rest = a.clone();
    for d in 0..a.ndim() {
        let (lo, hi) = (inter.offset[d], inter.end(d));
        if rest.offset[d] < lo {
            let mut below = rest.clone();
            below.count[d] = lo - rest.offset[d];
            out.push(below);
        }
        if hi < rest.end(d) {
            let mut above = rest.clone();
            above.offset[d] = hi;
            above.count[d] = rest.end(d) - hi;
            out.push(above);
        }
        rest.offset[d] = lo;
        rest.count[d] = hi - lo;
    }
    out
}

/// Whether the union of `newer` covers every element of `old`. Conservative: false when
/// the work would pass [`MAX_BOXES`] boxes.
pub fn hidden_by<'a>(old: &Region, newer: impl IntoIterator<Item = &'a Region>) -> bool {
    let mut left = vec![old.clone()];
    for n in newer {
        if n.ndim() != old.ndim() || !n.overlaps(old) {
            continue;
        }
        let mut next = Vec::with_capacity(left.len());
        for piece in &left {
            if n.overlaps(piece) {
                next.extend(subtract(piece, n));
            } else {
                next.push(piece.clone());
            }
            if next.len() > MAX_BOXES {
                return false;
            }
        }
        left = next;
        if left.is_empty() {
            return true;
        }
    }
    left.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(offset: &[u64], count: &[u64]) -> Region {
        Region {
            offset: offset.to_vec(),
            count: count.to_vec(),
        }
    }

    #[test]
    fn subtraction_keeps_exactly_the_elements_outside() {
        let a = r(&[0, 0], &[10, 10]);
        let b = r(&[2, 3], &[4, 4]);
        let parts = subtract(&a, &b);
        let total: u64 = parts.iter().map(Region::num_elements).sum();
        assert_eq!(total, 100 - 16);
        for (i, p) in parts.iter().enumerate() {
            assert!(a.contains(p) && !p.overlaps(&b));
            for q in &parts[i + 1..] {
                assert!(!p.overlaps(q), "{p:?} overlaps {q:?}");
            }
        }
        assert!(subtract(&b, &a).is_empty());
        assert_eq!(subtract(&a, &r(&[20, 20], &[1, 1])), vec![a.clone()]);
    }

    #[test]
    fn hidden_only_when_every_element_is_covered() {
        let old = r(&[0, 0], &[4, 4]);
        // The same region written again (a checkpoint overwrite).
        assert!(hidden_by(&old, [&old.clone()]));
        // Two halves together.
        let top = r(&[0, 0], &[2, 4]);
        let bottom = r(&[2, 0], &[2, 4]);
        assert!(hidden_by(&old, [&top, &bottom]));
        assert!(!hidden_by(&old, [&top]));
        // Three quadrants and half of the fourth, then the rest of it.
        let almost = [
            r(&[0, 0], &[2, 2]),
            r(&[0, 2], &[2, 2]),
            r(&[2, 0], &[2, 2]),
            r(&[2, 2], &[2, 1]),
            r(&[2, 3], &[2, 1]),
        ];
        assert!(!hidden_by(&old, &almost[..4]));
        assert!(hidden_by(&old, &almost));
        // 1-d, and regions of another rank never count.
        assert!(hidden_by(&r(&[5], &[10]), [&r(&[0], &[8]), &r(&[8], &[9])]));
        assert!(!hidden_by(&r(&[5], &[10]), [&r(&[0, 0], &[100, 100])]));
        assert!(!hidden_by(&old, std::iter::empty()));
    }

    #[test]
    fn a_pathological_pattern_gives_up_as_not_hidden() {
        // Single-element holes in a 3-d box: each cut multiplies the pieces.
        let old = r(&[0, 0, 0], &[64, 64, 64]);
        let holes: Vec<Region> = (0..4000u64)
            .map(|i| r(&[i % 64, (i / 64) % 64, (i * 7) % 64], &[1, 1, 1]))
            .collect();
        assert!(!hidden_by(&old, &holes));
    }
}
