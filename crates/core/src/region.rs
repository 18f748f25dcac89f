//! N-d boxes and the copies between buffers laid out over them (C order, last dim fastest).

use crate::error::{Error, ErrorKind, Result};
use crate::model::MAX_DIMS;
use serde::{Deserialize, Serialize};

/// A box `offset[d] .. offset[d] + count[d]` in an object's global index space.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Region {
    pub offset: Vec<u64>,
    pub count: Vec<u64>,
}

impl Region {
    pub fn new(offset: Vec<u64>, count: Vec<u64>) -> Result<Region> {
        let r = Region { offset, count };
        r.validate()?;
        Ok(r)
    }

    /// The whole of an object with these dims.
    pub fn whole(dims: &[u64]) -> Region {
        Region {
            offset: vec![0; dims.len()],
            count: dims.to_vec(),
        }
    }

    pub fn ndim(&self) -> usize {
        self.count.len()
    }

    /// Checks shape sanity that does not depend on an object: rank, emptiness, overflow.
    pub fn validate(&self) -> Result<()> {
        let n = self.count.len();
        if n == 0 || n > MAX_DIMS {
            return Err(Error::invalid(format!(
                "a region needs 1..={MAX_DIMS} dims, got {n}"
            )));
        }
        if self.offset.len() != n {
            return Err(Error::invalid(format!(
                "region offset has {} dims but count has {n}",
                self.offset.len()
            )));
        }
        if let Some(d) = self.count.iter().position(|&c| c == 0) {
            return Err(Error::invalid(format!("region is empty (count[{d}] = 0)")));
        }
        for d in 0..n {
            if self.offset[d].checked_add(self.count[d]).is_none() {
                return Err(Error::invalid(format!("region overflows u64 in dim {d}")));
            }
        }
        self.checked_num_elements().map(|_| ())
    }

    fn checked_num_elements(&self) -> Result<u64> {
        self.count
            .iter()
            .try_fold(1u64, |acc, &c| acc.checked_mul(c))
            .ok_or_else(|| Error::invalid("region has more than 2^64 elements"))
    }

    pub fn num_elements(&self) -> u64 {
        self.count.iter().product()
    }

    /// Bytes needed for this region at `elem_size`, or an error if that overflows.
    pub fn byte_len(&self, elem_size: usize) -> Result<u64> {
        self.checked_num_elements()?
            .checked_mul(elem_size as u64)
            .ok_or_else(|| Error::invalid("region byte size overflows u64"))
    }

    /// Validates this region against an object's current dims.
    pub fn check_within(&self, dims: &[u64]) -> Result<()> {
        self.validate()?;
        if self.ndim() != dims.len() {
            return Err(Error::new(
                ErrorKind::OutOfBounds,
                format!(
                    "region has {} dims but the object has {}",
                    self.ndim(),
                    dims.len()
                ),
            ));
        }
        for d in 0..dims.len() {
            if self.offset[d] + self.count[d] > dims[d] {
                return Err(Error::new(
                    ErrorKind::OutOfBounds,
                    format!(
                        "region {} is outside the object's dims {:?} (dim {d}: {}..{} > {})",
                        self,
                        dims,
                        self.offset[d],
                        self.offset[d] + self.count[d],
                        dims[d]
                    ),
                ));
            }
        }
        Ok(())
    }

    pub fn end(&self, d: usize) -> u64 {
        self.offset[d] + self.count[d]
    }

    /// Whether the two regions share an element, without allocating (reads test every
    /// extent of an object against the region they read: most do not overlap).
    pub fn overlaps(&self, other: &Region) -> bool {
        self.ndim() == other.ndim()
            && (0..self.ndim())
                .all(|d| self.offset[d].max(other.offset[d]) < self.end(d).min(other.end(d)))
    }

    pub fn intersect(&self, other: &Region) -> Option<Region> {
        if !self.overlaps(other) {
            return None;
        }
        let mut offset = Vec::with_capacity(self.ndim());
        let mut count = Vec::with_capacity(self.ndim());
        for d in 0..self.ndim() {
            let lo = self.offset[d].max(other.offset[d]);
            let hi = self.end(d).min(other.end(d));
            if lo >= hi {
                return None;
            }
            offset.push(lo);
            count.push(hi - lo);
        }
        Some(Region { offset, count })
    }

    pub fn contains(&self, other: &Region) -> bool {
        self.ndim() == other.ndim()
            && (0..self.ndim())
                .all(|d| other.offset[d] >= self.offset[d] && other.end(d) <= self.end(d))
    }

    /// Row-major element index of global point `p` inside this box.
    fn linear_index(&self, p: &[u64]) -> u64 {
        (0..self.ndim()).fold(0u64, |idx, d| idx * self.count[d] + (p[d] - self.offset[d]))
    }

    /// Element range `[first, last + 1)` of this box's layout that covers `sub` (which it contains).
    /// Reading just this span is enough to copy `sub` out of data stored over `self`.
    pub fn span_of(&self, sub: &Region) -> (u64, u64) {
        let last: Vec<u64> = (0..sub.ndim()).map(|d| sub.end(d) - 1).collect();
        (self.linear_index(&sub.offset), self.linear_index(&last) + 1)
    }
}

impl std::fmt::Display for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[")?;
        for d in 0..self.ndim() {
            if d > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}:{}", self.offset[d], self.end(d))?;
        }
        f.write_str("]")
    }
}

/// A buffer holding the elements of `region` in row-major order, starting at element `base`
/// of that layout (so a partial read of a stored extent can be used without padding it).
pub struct Layout<'a> {
    pub region: &'a Region,
    pub base: u64,
}

/// Copies the elements of `what` (contained in both layouts' regions) from `src` to `dst`,
/// one contiguous run of the last dimension at a time.
pub fn copy_region(elem: usize, what: &Region, src: (&Layout, &[u8]), dst: (&Layout, &mut [u8])) {
    let (src_layout, src_buf) = src;
    let (dst_layout, dst_buf) = dst;
    let n = what.ndim();
    let run = what.count[n - 1] as usize * elem;
    let mut point = what.offset.clone();
    loop {
        let s = ((src_layout.region.linear_index(&point) - src_layout.base) as usize) * elem;
        let t = ((dst_layout.region.linear_index(&point) - dst_layout.base) as usize) * elem;
        dst_buf[t..t + run].copy_from_slice(&src_buf[s..s + run]);
        // Advance the odometer over every dim but the last.
        let mut d = n - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            point[d] += 1;
            if point[d] < what.end(d) {
                break;
            }
            point[d] = what.offset[d];
        }
    }
}

/// Paints `out` with an object's fill value `pattern` (one element's bytes), element by
/// element: what a read returns where nothing was written. An all-zero (or empty) pattern is
/// one `memset`. Bytes past the last whole element are left as they are.
pub fn fill_elements(out: &mut [u8], pattern: &[u8]) {
    if pattern.iter().all(|&b| b == 0) {
        out.fill(0);
    } else {
        for chunk in out.chunks_exact_mut(pattern.len()) {
            chunk.copy_from_slice(pattern);
        }
    }
}

/// How [`slabs`] cuts a box of shape `count` into pieces of at most `max_bytes` (elements of
/// `elem` bytes): the dim cut into runs of `rows` indices (the first whose inner box, the dims
/// after it, fits), the dims before it taken one index at a time.
pub fn slab_cut(count: &[u64], elem: usize, max_bytes: u64) -> (usize, u64) {
    let n = count.len();
    // inner[k]: bytes of one step along dim k (all of dims k+1.. at one index of dim k).
    let mut inner = vec![elem as u64; n];
    for k in (0..n.saturating_sub(1)).rev() {
        inner[k] = inner[k + 1].saturating_mul(count[k + 1]);
    }
    let k = (0..n)
        .find(|&k| inner[k] <= max_bytes)
        .unwrap_or(n.saturating_sub(1));
    let rows = (max_bytes / inner[k].max(1)).clamp(1, count[k].max(1));
    (k, rows)
}

/// Splits `region` into pieces of at most `max_bytes` (when one element fits), each contiguous
/// in the region's C-order layout and listed in layout order: bounded reads of a large region
/// (CLI `get`, value queries and strided reads on a server, chunks of a cross-site transfer).
pub fn slabs(region: &Region, elem: usize, max_bytes: u64) -> Vec<Region> {
    let n = region.ndim();
    if n == 0 || region.count.contains(&0) {
        return Vec::new();
    }
    let (k, rows) = slab_cut(&region.count, elem, max_bytes);
    let mut out = Vec::new();
    let mut outer = vec![0u64; k];
    loop {
        let mut start = 0;
        while start < region.count[k] {
            let len = rows.min(region.count[k] - start);
            let mut offset = region.offset.clone();
            let mut count = region.count.clone();
            for d in 0..k {
                offset[d] += outer[d];
                count[d] = 1;
            }
            offset[k] += start;
            count[k] = len;
            out.push(Region { offset, count });
            start += len;
        }
        // Next index over dims 0..k (odometer); done when it wraps.
        let mut d = k;
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            outer[d] += 1;
            if outer[d] < region.count[d] {
                break;
            }
            outer[d] = 0;
        }
    }
}

/// Whether a read of `region` (`len` bytes) is made of many short rows (more than 16
/// innermost runs, each under 4 KiB): a point's history, a small box across chunk rows. Such
/// reads are gathered by extent from the mapped log rather than run by run.
pub fn short_rows(region: &Region, len: usize) -> bool {
    let n = region.num_elements();
    let last = region.count.last().copied().unwrap_or(0);
    n > 0 && last > 0 && n / last > 16 && (len as u64 / n) * last < 4096
}

/// Most pairs of parts [`tiles`] compares before giving up (answering false).
const TILES_MAX_PAIRS: usize = 1 << 16;

/// Whether `parts`, each inside `whole`, tile it: their volumes add up to its volume and no
/// two overlap. Conservative: parts that overlap, or more pairs to compare than a budget
/// allows, answer false. Readers use it to skip painting the fill value under a selection
/// its pieces cover (a box over 64 chunks was zero-filled, 1 MiB, before the
/// gather wrote every byte again).
pub fn tiles<'a>(whole: &Region, parts: impl IntoIterator<Item = &'a Region>) -> bool {
    let mut parts: Vec<&Region> = parts.into_iter().collect();
    let total = parts
        .iter()
        .try_fold(0u64, |acc, p| acc.checked_add(p.num_elements()));
    if parts.is_empty() || total != Some(whole.num_elements()) {
        return false;
    }
    if parts
        .iter()
        .any(|p| p.ndim() != whole.ndim() || !whole.contains(p))
    {
        return false;
    }
    // Sweep along the first dim: only parts whose first-dim ranges meet can overlap.
    parts.sort_unstable_by_key(|p| p.offset.first().copied().unwrap_or(0));
    let mut pairs = 0usize;
    for (i, a) in parts.iter().enumerate() {
        for b in &parts[i + 1..] {
            if a.ndim() > 0 && b.offset[0] >= a.end(0) {
                break;
            }
            pairs += 1;
            if pairs > TILES_MAX_PAIRS || a.overlaps(b) {
                return false;
            }
        }
    }
    true
}

/// Outputs smaller than this are gathered on the calling thread: handing slabs to the pool
/// and waiting for them costs tens of microseconds.
const PARALLEL_GATHER_MIN: usize = 256 << 10;
/// Most threads one gather uses.
const PARALLEL_GATHER_MAX_THREADS: usize = 4;

/// The process that first used rayon's pool (0: none yet).
static POOL_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Whether this process may hand work to rayon's pool: not in a child forked after the pool
/// started (libpdcx and the CFITSIO driver live in programs that fork), where the pool's
/// threads do not exist and a scope would wait for them forever.
fn pool_usable() -> bool {
    use std::sync::atomic::Ordering;
    let me = std::process::id();
    match POOL_PID.compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => true,
        Err(first) => first == me,
    }
}

/// [`gather_strided`] of every `(src, piece)` in order, as one pass would paint them (later
/// pieces over earlier ones where they overlap). A large output is split into slabs of the
/// selection's first dim, one per thread of rayon's pool (one per core, at most 4): each slab
/// is a contiguous range of `out`, and each thread paints its slab with every piece in the
/// same order, so overlaps resolve exactly as in one pass. A gather out of the page cache is
/// bound by memory latency, which more cores hide (measured on a x3 downsampling of 256 MiB).
/// The pool's threads persist: spawning two per gather made a x20 downsampling 2.5 ms
/// instead of 1.8.
pub fn gather_pieces(
    pieces: &[(&[u8], &Region)],
    bbox: &Region,
    step: &[u64],
    elem: usize,
    out: &mut [u8],
) {
    let picked0 = bbox.count.first().map_or(1, |&c| c.div_ceil(step[0])) as usize;
    let threads = if out.len() < PARALLEL_GATHER_MIN || picked0 < 2 {
        1
    } else {
        rayon::current_num_threads()
            .min(PARALLEL_GATHER_MAX_THREADS)
            .min(picked0)
    };
    let paint = |slab: &Region, out: &mut [u8]| {
        for (src, piece) in pieces {
            gather_strided(src, piece, slab, step, elem, out);
        }
    };
    if threads < 2 || !pool_usable() {
        return paint(bbox, out);
    }
    // rayon's pool: its threads persist, where spawning one per gather cost ~20-30 us.
    let row_bytes = out.len() / picked0; // one index of the first dim, in the output
    rayon::scope(|scope| {
        let mut rest = out;
        let mut done = 0usize; // first-dim selection indices handed out
        for t in 0..threads {
            let take = (picked0 - done) / (threads - t);
            let (mine, tail) = rest.split_at_mut(take * row_bytes);
            rest = tail;
            let mut slab = bbox.clone();
            slab.offset[0] = bbox.offset[0] + done as u64 * step[0];
            slab.count[0] = (take as u64 - 1) * step[0] + 1;
            done += take;
            let paint = &paint;
            scope.spawn(move |_| paint(&slab, mine));
        }
    });
}

/// A strided selection: the elements of `bbox` taken every `step[d]` in each dim,
/// `out` holding them in C order (shape `ceil(bbox.count[d] / step[d])`). Copies those that
/// lie in `piece` (a box whose elements `src` holds in C order) to their places in `out`,
/// touching no other byte of `src`. Callers check that `src` and `out` have the sizes
/// `piece` and the selection have.
pub fn gather_strided(
    src: &[u8],
    piece: &Region,
    bbox: &Region,
    step: &[u64],
    elem: usize,
    out: &mut [u8],
) {
    let n = bbox.ndim();
    // Fixed arrays, not vectors: a point's history gathers 16 pieces of 16 elements, where
    // six allocations per piece showed.
    if n == 0 || n > MAX_DIMS {
        debug_assert!(false, "a validated region has 1..=MAX_DIMS dims");
        return;
    }
    let mut picked = [0u64; MAX_DIMS];
    for d in 0..n {
        picked[d] = bbox.count[d].div_ceil(step[d]);
    }
    // Per dim: the selected indices inside the piece, as the first and last selection index.
    let mut first = [0u64; MAX_DIMS];
    let mut last = [0u64; MAX_DIMS];
    for d in 0..n {
        let lo = piece.offset[d].max(bbox.offset[d]);
        let hi = (piece.offset[d] + piece.count[d]).min(bbox.offset[d] + bbox.count[d]);
        if lo >= hi {
            return;
        }
        let k0 = (lo - bbox.offset[d]).div_ceil(step[d]);
        let k1 = (hi - 1 - bbox.offset[d]) / step[d];
        if k0 > k1 || k0 >= picked[d] {
            return;
        }
        first[d] = k0;
        last[d] = k1.min(picked[d] - 1);
    }
    let mut src_stride = [1u64; MAX_DIMS];
    let mut out_stride = [1u64; MAX_DIMS];
    for d in (0..n - 1).rev() {
        src_stride[d] = src_stride[d + 1] * piece.count[d + 1];
        out_stride[d] = out_stride[d + 1] * picked[d + 1];
    }
    let src_at =
        |d: usize, k: u64| (bbox.offset[d] + k * step[d] - piece.offset[d]) * src_stride[d];
    let inner = n - 1;
    let run = (last[inner] - first[inner] + 1) as usize;
    let stride = step[inner] as usize;
    // The rows first (source and output element of each), so each row's source lines can be
    // prefetched a few rows ahead: rows of a strided selection are short and far apart, which
    // the hardware prefetchers do not follow, and a gather from the page cache then waits on
    // memory at every row (measured: x3 downsampling ran at 2.7 GB/s of lines touched).
    // In batches, so a selection of many rows needs no list of them all.
    let mut rows = [(0usize, 0usize); ROW_BATCH];
    // Source bytes of a row to prefetch: long rows the hardware prefetchers follow.
    let row_span = (((run - 1) * stride + 1) * elem).min(PREFETCH_MAX);
    let mut k = first;
    let mut more = true;
    while more {
        let mut len = 0;
        while more && len < ROW_BATCH {
            let (mut s, mut o) = (0u64, 0u64);
            for d in 0..inner {
                s += src_at(d, k[d]);
                o += k[d] * out_stride[d];
            }
            rows[len] = (
                (s + src_at(inner, first[inner])) as usize,
                (o + first[inner]) as usize,
            );
            len += 1;
            let mut d = inner;
            more = loop {
                if d == 0 {
                    break false;
                }
                d -= 1;
                k[d] += 1;
                if k[d] <= last[d] {
                    break true;
                }
                k[d] = first[d];
            };
        }
        let rows = &rows[..len];
        for (i, &(s0, o0)) in rows.iter().enumerate() {
            if let Some(&(ahead, _)) = rows.get(i + PREFETCH_ROWS) {
                prefetch(&src[ahead * elem..ahead * elem + row_span]);
            }
            copy_row(src, s0, stride, elem, out, o0, run);
        }
    }
}

/// Row `run` elements of `elem` bytes: element `s0 + j * stride` of `src` to element `o0 + j`
/// of `out`.
fn copy_row(
    src: &[u8],
    s0: usize,
    stride: usize,
    elem: usize,
    out: &mut [u8],
    o0: usize,
    run: usize,
) {
    if stride == 1 && run * elem >= 64 {
        out[o0 * elem..(o0 + run) * elem].copy_from_slice(&src[s0 * elem..(s0 + run) * elem]);
        return;
    }
    // Fixed-size copies for the usual element sizes: a 4-byte `memmove` call per element
    // cost half the gather (and short contiguous rows, a point's history, are such too).
    match elem {
        1 => copy_run::<1>(src, s0, stride, out, o0, run),
        2 => copy_run::<2>(src, s0, stride, out, o0, run),
        4 => copy_run::<4>(src, s0, stride, out, o0, run),
        8 => copy_run::<8>(src, s0, stride, out, o0, run),
        _ => {
            for j in 0..run {
                let (si, oi) = ((s0 + j * stride) * elem, (o0 + j) * elem);
                out[oi..oi + elem].copy_from_slice(&src[si..si + elem]);
            }
        }
    }
}

/// Most bytes of one row [`gather_strided`] prefetches.
const PREFETCH_MAX: usize = 1024;
/// Rows [`gather_strided`] lists at a time.
const ROW_BATCH: usize = 256;
/// How many rows ahead [`gather_strided`] prefetches.
const PREFETCH_ROWS: usize = 12;

/// Asks the CPU to bring the cache lines of `bytes` in (a hint: no effect on results).
#[inline]
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        // SAFETY: a prefetch of an address inside a live slice; it never faults (SSE is part
        // of x86_64's baseline).
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// `run` elements of `N` bytes: element `s0 + j * stride` of `src` to element `o0 + j` of
/// `out`.
fn copy_run<const N: usize>(
    src: &[u8],
    s0: usize,
    stride: usize,
    out: &mut [u8],
    o0: usize,
    run: usize,
) {
    let out = &mut out[o0 * N..(o0 + run) * N];
    for (j, dst) in out.chunks_exact_mut(N).enumerate() {
        let si = (s0 + j * stride) * N;
        let v: [u8; N] = src[si..si + N].try_into().expect("N bytes");
        dst.copy_from_slice(&v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(o: &[u64], c: &[u64]) -> Region {
        Region::new(o.to_vec(), c.to_vec()).unwrap()
    }

    #[test]
    fn fill_elements_repeats_the_pattern_and_zeroes_for_zero() {
        let mut out = [9u8; 7];
        fill_elements(&mut out, &[1, 2, 3]);
        assert_eq!(out, [1, 2, 3, 1, 2, 3, 9]);
        let mut out = [9u8; 5];
        fill_elements(&mut out, &[0, 0]);
        assert_eq!(out, [0; 5]);
        let mut out = [9u8; 3];
        fill_elements(&mut out, &[]);
        assert_eq!(out, [0; 3]);
    }

    /// Value of element `p` of the test arrays: its C-order index in a 7 x 9 x 11 array.
    fn val(p: &[u64]) -> u32 {
        ((p[0] * 9 + p[1]) * 11 + p[2]) as u32
    }

    #[test]
    fn tiles_needs_every_element_covered_exactly_once() {
        let whole = r(&[2, 0, 5], &[4, 6, 3]);
        // A 2 x 3 grid of boxes over dims 0 and 1, given out of order.
        let grid: Vec<Region> = [(4, 3), (2, 0), (4, 0), (2, 3)]
            .iter()
            .map(|&(a, b)| r(&[a, b, 5], &[2, 3, 3]))
            .collect();
        assert!(tiles(&whole, &grid));
        assert!(tiles(&whole, [&whole]));
        // One box short: a hole.
        assert!(!tiles(&whole, &grid[1..]));
        // The same volume with an overlap (and so a hole).
        let mut overlapping = grid.clone();
        overlapping[0] = r(&[3, 3, 5], &[2, 3, 3]);
        assert!(!tiles(&whole, &overlapping));
        // A part reaching outside, with the right volume.
        let mut outside = grid.clone();
        outside[0] = r(&[6, 3, 5], &[2, 3, 3]);
        assert!(!tiles(&whole, &outside));
        // No parts cover nothing.
        assert!(!tiles(&whole, &[]));
        // Past the pair budget the answer is the safe one: not covered.
        let strips: Vec<Region> = (0..1024).map(|c| r(&[0, c], &[1, 1])).collect();
        assert!(!tiles(&r(&[0, 0], &[1, 1024]), &strips));
        let rows: Vec<Region> = (0..1024).map(|c| r(&[c, 0], &[1, 4])).collect();
        assert!(tiles(&r(&[0, 0], &[1024, 4]), &rows));
    }

    #[test]
    fn strided_gather_from_pieces_equals_taking_every_step_th_element() {
        let dims = [7u64, 9, 11];
        // Pieces tiling the array (3 x 4 x 5 boxes, clipped), for every element size the
        // gather specialises and one it does not (values widened to `elem` bytes).
        let mut pieces = Vec::new();
        for a in (0..7).step_by(3) {
            for b in (0..9).step_by(4) {
                for c in (0..11).step_by(5) {
                    let o = [a, b, c];
                    let cnt: Vec<u64> =
                        (0..3).map(|d| (dims[d] - o[d]).min([3, 4, 5][d])).collect();
                    pieces.push(r(&o, &cnt));
                }
            }
        }
        for elem in [1usize, 2, 4, 8, 3] {
            let bytes =
                |v: u32| -> Vec<u8> { (0..elem).map(|i| (v >> (8 * (i % 4))) as u8).collect() };
            for (bbox, step) in [
                (r(&[0, 0, 0], &[7, 9, 11]), [1u64, 1, 1]),
                (r(&[1, 2, 3], &[6, 7, 8]), [2, 3, 4]),
                (r(&[0, 5, 10], &[7, 1, 1]), [1, 1, 1]),
                (r(&[2, 0, 1], &[5, 9, 10]), [20, 20, 20]),
            ] {
                let picked: Vec<u64> = (0..3).map(|d| bbox.count[d].div_ceil(step[d])).collect();
                let n = picked.iter().product::<u64>() as usize;
                let mut want = Vec::new();
                for i in 0..picked[0] {
                    for j in 0..picked[1] {
                        for k in 0..picked[2] {
                            let p = [i, j, k];
                            let q: Vec<u64> =
                                (0..3).map(|d| bbox.offset[d] + p[d] * step[d]).collect();
                            want.extend(bytes(val(&q)));
                        }
                    }
                }
                let mut out = vec![0u8; n * elem];
                for piece in &pieces {
                    let mut src = Vec::new();
                    for i in 0..piece.count[0] {
                        for j in 0..piece.count[1] {
                            for k in 0..piece.count[2] {
                                let q = [
                                    piece.offset[0] + i,
                                    piece.offset[1] + j,
                                    piece.offset[2] + k,
                                ];
                                src.extend(bytes(val(&q)));
                            }
                        }
                    }
                    gather_strided(&src, piece, &bbox, &step, elem, &mut out);
                }
                assert_eq!(out, want, "elem {elem}, {bbox} step {step:?}");
            }
        }
    }

    #[test]
    fn parallel_gather_paints_as_one_pass_including_overlaps() {
        // 64 x 128 x 128 u32 in chunks of 16 x 64 x 64, then a piece over part of them with
        // other values (written later: it must win in every slab).
        let dims = [64u64, 128, 128];
        let mut pieces: Vec<(Vec<u8>, Region)> = Vec::new();
        for t in (0..64).step_by(16) {
            for x in (0..128).step_by(64) {
                for y in (0..128).step_by(64) {
                    let piece = r(&[t, x, y], &[16, 64, 64]);
                    let mut src = Vec::new();
                    for i in 0..16 {
                        for j in 0..64 {
                            for k in 0..64 {
                                let q = [t + i, x + j, y + k];
                                src.extend(
                                    (Region::whole(&dims).linear_index(&q) as u32).to_le_bytes(),
                                );
                            }
                        }
                    }
                    pieces.push((src, piece));
                }
            }
        }
        let over = r(&[5, 10, 20], &[50, 90, 70]);
        pieces.push((vec![0xAB; over.byte_len(4).unwrap() as usize], over));
        let refs: Vec<(&[u8], &Region)> = pieces.iter().map(|(s, p)| (s.as_slice(), p)).collect();
        for (bbox, step) in [
            (Region::whole(&dims), vec![1u64, 3, 3]),
            (r(&[1, 2, 3], &[63, 120, 101]), vec![2, 1, 5]),
        ] {
            let n: u64 = (0..3).map(|d| bbox.count[d].div_ceil(step[d])).product();
            let mut one = vec![0u8; n as usize * 4];
            for (src, piece) in &refs {
                gather_strided(src, piece, &bbox, &step, 4, &mut one);
            }
            assert!(one.len() >= PARALLEL_GATHER_MIN, "large enough to be split");
            let mut split = vec![0u8; one.len()];
            gather_pieces(&refs, &bbox, &step, 4, &mut split);
            assert!(one == split, "{bbox} step {step:?}");
            assert!(one.contains(&0xAB), "the overlapping piece shows");
        }
    }

    /// Reference: fill a dense `dims` array of u16 ids, extract a box element by element.
    fn extract(dims: &[u64], b: &Region) -> Vec<u8> {
        let whole = Region::whole(dims);
        let mut out = Vec::new();
        let mut p = b.offset.clone();
        'outer: loop {
            let v = whole.linear_index(&p) as u16;
            out.extend_from_slice(&v.to_le_bytes());
            let mut d = b.ndim();
            loop {
                if d == 0 {
                    break 'outer;
                }
                d -= 1;
                p[d] += 1;
                if p[d] < b.end(d) {
                    break;
                }
                p[d] = b.offset[d];
            }
        }
        out
    }

    #[test]
    fn validation_rejects_bad_shapes() {
        assert!(Region::new(vec![], vec![]).is_err());
        assert!(Region::new(vec![0; 9], vec![1; 9]).is_err());
        assert!(Region::new(vec![0], vec![1, 2]).is_err());
        assert!(Region::new(vec![0, 0], vec![3, 0]).is_err());
        assert!(Region::new(vec![u64::MAX], vec![2]).is_err());
        assert!(Region::new(vec![0, 0], vec![u64::MAX / 2, 4]).is_err());
        let e = r(&[5, 0], &[6, 2]).check_within(&[10, 10]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::OutOfBounds);
        assert!(e.message.contains("dim 0"), "{e}");
        assert!(r(&[4, 0], &[6, 2]).check_within(&[10, 10]).is_ok());
        assert_eq!(
            r(&[0], &[1]).check_within(&[4, 4]).unwrap_err().kind,
            ErrorKind::OutOfBounds
        );
    }

    #[test]
    fn intersection_and_containment() {
        let a = r(&[0, 0], &[4, 4]);
        let b = r(&[2, 3], &[5, 5]);
        assert_eq!(a.intersect(&b), Some(r(&[2, 3], &[2, 1])));
        assert_eq!(a.intersect(&r(&[4, 0], &[1, 1])), None);
        assert!(a.contains(&r(&[1, 1], &[3, 3])));
        assert!(!a.contains(&b));
    }

    #[test]
    fn copy_matches_elementwise_reference_in_3d() {
        let dims = [5u64, 6, 7];
        let src_box = r(&[1, 0, 2], &[4, 5, 5]);
        let dst_box = r(&[0, 2, 0], &[3, 4, 7]);
        let what = src_box.intersect(&dst_box).unwrap();
        let src = extract(&dims, &src_box);
        let mut dst = vec![0u8; dst_box.num_elements() as usize * 2];
        let (sl, dl) = (
            Layout {
                region: &src_box,
                base: 0,
            },
            Layout {
                region: &dst_box,
                base: 0,
            },
        );
        copy_region(2, &what, (&sl, &src), (&dl, &mut dst));
        // Every element of `what` now holds its global id; every other one is still 0.
        let whole = Region::whole(&dims);
        for (i, chunk) in dst.chunks(2).enumerate() {
            let i = i as u64;
            let p = [i / 28, (i / 7) % 4 + 2, i % 7];
            let got = u16::from_le_bytes([chunk[0], chunk[1]]);
            let inside = (0..3).all(|d| p[d] >= what.offset[d] && p[d] < what.end(d));
            let want = if inside {
                whole.linear_index(&p) as u16
            } else {
                0
            };
            assert_eq!(got, want, "at {p:?}");
        }
    }

    #[test]
    fn span_covers_exactly_the_sub_box() {
        let b = r(&[0, 0], &[10, 10]);
        assert_eq!(b.span_of(&r(&[2, 3], &[2, 4])), (23, 37));
        let src = extract(&[10, 10], &b);
        let sub = r(&[2, 3], &[2, 4]);
        let (lo, hi) = b.span_of(&sub);
        let part = &src[lo as usize * 2..hi as usize * 2];
        let mut out = vec![0u8; 16];
        copy_region(
            2,
            &sub,
            (
                &Layout {
                    region: &b,
                    base: lo,
                },
                part,
            ),
            (
                &Layout {
                    region: &sub,
                    base: 0,
                },
                &mut out,
            ),
        );
        assert_eq!(out, extract(&[10, 10], &sub));
    }
}
