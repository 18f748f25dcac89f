//! The engine's analysis job: value queries, strided and point reads, answered by an
//! object's owner, which reads the data through `Engine::read` (its cache and log, other
//! holders' pieces, tier homes) in bounded slabs and returns only what was selected, in the
//! protocol's analysis types. It knows nothing of connections or counters: the api layer
//! sends the answer and counts the bytes. `max_payload` bounds every answer.

use super::Engine;
use crate::datastore::ExtentRanges;
use pdcx_core::region::{gather_strided, Region};
use pdcx_core::valuequery::{element_f64, QueryAnswer, QueryWant, ValueExpr, MAX_CONDITIONS};
use pdcx_core::{Dtype, Error, ObjectId, ObjectMeta, Result};

/// Elements read per slab: bounds the server's memory per query or strided read whatever the
/// object's size (a few MiB of each object at a time).
const SLAB_ELEMS: u64 = 1 << 20;

/// Most objects a value query may name (conditions and values together).
const MAX_QUERY_OBJECTS: usize = 16;

/// Splits `region` into boxes of at most about `max` elements (one element row at least), in
/// C order.
pub fn slabs(region: &Region, max: u64) -> Vec<Region> {
    pdcx_core::region::slabs(region, 1, max)
}

/// How [`slabs`] cuts a box of shape `count` (see `region::slab_cut`).
fn slab_shape(count: &[u64], max: u64) -> (usize, u64) {
    pdcx_core::region::slab_cut(count, 1, max)
}

/// The object's metadata wherever it is owned; an object without a type has no values.
fn meta_of(engine: &Engine, id: ObjectId) -> Result<ObjectMeta> {
    let obj = if engine.meta.owner_of(id) == engine.rank {
        engine.meta.object(id)?
    } else {
        engine.peers()?.object(id, true)?
    };
    typed(obj)
}

/// `obj` if it has an element type (values to compute with), else the error naming it.
fn typed(obj: ObjectMeta) -> Result<ObjectMeta> {
    if obj.is_untyped() {
        return Err(obj.untyped_error());
    }
    Ok(obj)
}

/// `region` of `id` as a client's read would see it: through this server's engine when it
/// owns the object, else from its owner.
fn read_any(engine: &Engine, id: ObjectId, region: &Region, out: &mut [u8]) -> Result<()> {
    let owner = engine.meta.owner_of(id);
    if owner == engine.rank {
        return engine.read(id, region, out);
    }
    let bytes = engine.peers()?.read_owned(owner, id, region)?;
    if bytes.len() != out.len() {
        return Err(Error::protocol(format!(
            "server {owner} answered {} bytes for region {region} of object {id:#x}, expected {}",
            bytes.len(),
            out.len()
        )));
    }
    out.copy_from_slice(&bytes);
    Ok(())
}

/// `PeerRequest::ReadOwned`: the owner's read of its object for another server's query.
pub fn read_owned(
    engine: &Engine,
    id: ObjectId,
    region: &Region,
    max_payload: u64,
) -> Result<Vec<u8>> {
    let obj = typed(engine.meta.object(id)?)?;
    let n = region.byte_len(obj.dtype.size())?;
    if n > max_payload {
        return Err(Error::invalid(format!(
            "region {region} is {n} bytes, over the server's limit of {}",
            max_payload
        )));
    }
    let mut out = vec![0u8; n as usize];
    engine.read(id, region, &mut out)?;
    Ok(out)
}

/// `ValueQuery` at the owner of the query's first object.
pub fn value_query(
    engine: &Engine,
    query: &ValueExpr,
    region: Option<Region>,
    want: &QueryWant,
    max_payload: u64,
) -> Result<(QueryAnswer, Vec<u8>)> {
    if query.len() > MAX_CONDITIONS {
        return Err(Error::invalid(format!(
            "a query has at most {MAX_CONDITIONS} conditions, this one has {}",
            query.len()
        )));
    }
    let mut ids = query.objects();
    for v in &want.values {
        if !ids.contains(v) {
            ids.push(*v);
        }
    }
    if ids.len() > MAX_QUERY_OBJECTS {
        return Err(Error::invalid(format!(
            "a query reads at most {MAX_QUERY_OBJECTS} objects, this one {}",
            ids.len()
        )));
    }
    let first = ids[0];
    if engine.meta.owner_of(first) != engine.rank {
        return Err(Error::invalid(format!(
            "a value query goes to the owner of its first object {first:#x}, server {}, not {}",
            engine.meta.owner_of(first),
            engine.rank
        )));
    }
    let metas: Vec<ObjectMeta> = ids
        .iter()
        .map(|&id| meta_of(engine, id))
        .collect::<Result<_>>()?;
    let dims = metas[0].dims.clone();
    for m in &metas {
        if m.dims != dims {
            return Err(Error::invalid(format!(
                "the objects of one query must have the same shape: {} is {:?}, {} is {:?}",
                metas[0].name, dims, m.name, m.dims
            )));
        }
    }
    for m in metas.iter().take(query.objects().len()) {
        if m.dtype == Dtype::Bytes {
            return Err(Error::invalid(format!(
                "{} holds bytes: value queries compare numbers",
                m.name
            )));
        }
    }
    let ndim = dims.len();
    let mut answer = QueryAnswer {
        ndim: ndim as u32,
        ..QueryAnswer::default()
    };
    let hist_bins = want.histogram_bins.min(1 << 16) as usize;
    if dims.contains(&0) {
        answer.histogram = vec![0; hist_bins];
        return Ok((answer, Vec::new()));
    }
    let region = match region {
        Some(r) => {
            r.check_within(&dims)?;
            r
        }
        None => Region::whole(&dims),
    };
    let max_hits = match want.max_hits {
        0 => u64::MAX,
        m => m,
    };
    let hit_bytes = if want.coords { 8 * ndim as u64 } else { 0 }
        + want
            .values
            .iter()
            .map(|v| {
                metas[ids.iter().position(|i| i == v).unwrap_or(0)]
                    .dtype
                    .size() as u64
            })
            .sum::<u64>();
    let mut coords: Vec<u8> = Vec::new();
    let mut values: Vec<Vec<u8>> = vec![Vec::new(); want.values.len()];
    let mut hist_values: Vec<f64> = Vec::new();
    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); ids.len()];
    let mut mask = Vec::new();
    let first_dtype = metas[0].dtype;
    let size0 = first_dtype.size();
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    // Which value-bytes of which object each asked value comes from.
    let value_src: Vec<(usize, usize)> = want
        .values
        .iter()
        .map(|v| {
            let k = ids.iter().position(|x| x == v).unwrap_or(0);
            (k, metas[k].dtype.size())
        })
        .collect();
    // Hits of one slab, put in C order before they are appended (a slab's units need not be
    // in C order): (C-order position in the slab, index of the hit), with each hit's
    // coordinates (`ndim` each) and values (`val_bytes` each) in flat arrays. No allocation
    // per hit: pattern 3 of EQSIM returns 672k hits, and two small vectors each were a third
    // of the server's time.
    let val_bytes: usize = value_src.iter().map(|&(_, sz)| sz).sum();
    let mut slab_order: Vec<(u64, u32)> = Vec::new();
    let mut slab_coords: Vec<u64> = Vec::new();
    let mut slab_vals: Vec<u8> = Vec::new();
    let mut c = vec![0u64; ndim];
    for slab in slabs(&region, SLAB_ELEMS) {
        slab_order.clear();
        slab_coords.clear();
        slab_vals.clear();
        let pieces: Vec<Option<ExtentRanges>> =
            metas.iter().map(|m| pieces_of(engine, m, &slab)).collect();
        for unit in units(&slab, &pieces) {
            let n = unit.num_elements() as usize;
            // Skip the unit when the extents' statistics show no element can match.
            let ranges: Vec<Option<(f64, f64)>> = metas
                .iter()
                .zip(&pieces)
                .map(|(m, p)| value_range(m, &unit, p.as_ref()))
                .collect();
            let range_of = |id: ObjectId| ids.iter().position(|&i| i == id).and_then(|k| ranges[k]);
            if !query.may_match(&range_of) {
                answer.skipped_bytes += metas
                    .iter()
                    .map(|m| (n * m.dtype.size()) as u64)
                    .sum::<u64>();
                continue;
            }
            for (k, m) in metas.iter().enumerate() {
                bufs[k].resize(n * m.dtype.size(), 0);
                read_any(engine, ids[k], &unit, &mut bufs[k])?;
                answer.scanned_bytes += bufs[k].len() as u64;
            }
            let data = |id: ObjectId| {
                ids.iter()
                    .position(|&i| i == id)
                    .map(|k| (metas[k].dtype, &bufs[k][..]))
            };
            query.eval(n, &data, &mut mask)?;
            let hits = mask.iter().filter(|&&m| m).count() as u64;
            if hits == 0 {
                continue;
            }
            answer.nhits += hits;
            if hit_bytes > 0 {
                let total = answer.nhits.saturating_mul(hit_bytes);
                if answer.nhits > max_hits || total > max_payload {
                    return Err(Error::invalid(format!(
                        "the query has more than {} hits, too many to return their coordinates or values \
                         (limit {}); ask for the count only or restrict the region",
                        answer.nhits - hits,
                        if max_hits == u64::MAX { max_payload / hit_bytes } else { max_hits }
                    )));
                }
            }
            for (i, _) in mask.iter().enumerate().filter(|(_, &m)| m) {
                let v = element_f64(first_dtype, &bufs[0][i * size0..(i + 1) * size0]);
                lo = lo.min(v);
                hi = hi.max(v);
                if hist_bins > 0 {
                    hist_values.push(v);
                }
                if hit_bytes == 0 {
                    continue;
                }
                let mut rem = i as u64;
                for d in (0..ndim).rev() {
                    c[d] = unit.offset[d] + rem % unit.count[d];
                    rem /= unit.count[d];
                }
                let pos = c
                    .iter()
                    .zip(slab.offset.iter().zip(&slab.count))
                    .fold(0u64, |p, (&x, (&o, &n))| p * n + (x - o));
                let index = u32::try_from(slab_order.len())
                    .map_err(|_| Error::internal("more than 2^32 hits in one query slab"))?;
                slab_order.push((pos, index));
                slab_coords.extend_from_slice(&c);
                for &(k, sz) in &value_src {
                    slab_vals.extend_from_slice(&bufs[k][i * sz..(i + 1) * sz]);
                }
            }
        }
        slab_order.sort_unstable_by_key(|h| h.0);
        for &(_, index) in &slab_order {
            let h = index as usize;
            if want.coords {
                for x in &slab_coords[h * ndim..(h + 1) * ndim] {
                    coords.extend_from_slice(&x.to_le_bytes());
                }
            }
            let mut at = h * val_bytes;
            for (j, &(_, sz)) in value_src.iter().enumerate() {
                values[j].extend_from_slice(&slab_vals[at..at + sz]);
                at += sz;
            }
        }
    }
    if answer.nhits > 0 && lo <= hi {
        answer.min = Some(lo);
        answer.max = Some(hi);
    }
    if hist_bins > 0 {
        answer.histogram = histogram(&hist_values, lo, hi, hist_bins);
    }
    let mut payload = coords;
    for v in values {
        payload.extend_from_slice(&v);
    }
    Ok((answer, payload))
}

/// The parts of `slab` covered by `obj`'s extents (on every holder) with their statistics, or
/// None when they cannot be known here: an object another server owns, a holder that did not
/// answer.
fn pieces_of(engine: &Engine, obj: &ObjectMeta, slab: &Region) -> Option<ExtentRanges> {
    if engine.meta.owner_of(obj.id) != engine.rank || obj.dtype == Dtype::Bytes {
        return None;
    }
    let mut pieces = engine.store().extent_ranges(obj.id, slab);
    let holders = engine.remote_holders(obj.id, slab);
    if !holders.is_empty() {
        let peers = engine.peers().ok()?;
        for h in holders {
            pieces.extend(peers.extent_ranges(h, obj.id, slab).ok()?);
        }
    }
    Some(pieces)
}

/// The boxes a slab is evaluated in: for a query on one object whose extents cut the slab into
/// disjoint pieces covering it, those pieces (so statistics skip each extent that cannot
/// match, and only candidate extents are read); otherwise the slab.
fn units(slab: &Region, pieces: &[Option<ExtentRanges>]) -> Vec<Region> {
    match pieces {
        [Some(p)] if p.len() > 1 && covers(slab, p) => p.iter().map(|(r, _)| r.clone()).collect(),
        _ => vec![slab.clone()],
    }
}

/// The range of `obj`'s values inside `unit` from the statistics of the extent pieces around
/// it (the fill value counts where they do not cover it), or None when unknown (no pieces
/// known, or an extent without statistics).
fn value_range(
    obj: &ObjectMeta,
    unit: &Region,
    pieces: Option<&ExtentRanges>,
) -> Option<(f64, f64)> {
    let inside: ExtentRanges = pieces?
        .iter()
        .filter_map(|(r, st)| r.intersect(unit).map(|x| (x, *st)))
        .collect();
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for (_, stats) in &inside {
        let (a, b) = (*stats)?;
        lo = lo.min(a);
        hi = hi.max(b);
    }
    if !covers(unit, &inside) && obj.fill.len() == obj.dtype.size() {
        let fill = element_f64(obj.dtype, &obj.fill);
        lo = lo.min(fill);
        hi = hi.max(fill);
    }
    (lo <= hi).then_some((lo, hi))
}

/// Whether `pieces` (parts of `slab`) cover all of it, no two overlapping.
fn covers(slab: &Region, pieces: &[(Region, Option<(f64, f64)>)]) -> bool {
    pdcx_core::region::tiles(slab, pieces.iter().map(|(r, _)| r))
}

/// `bins` equal bins over [lo, hi], the last one closed (all values in one bin when lo == hi).
fn histogram(values: &[f64], lo: f64, hi: f64, bins: usize) -> Vec<u64> {
    let mut h = vec![0u64; bins];
    if values.is_empty() {
        return h;
    }
    let width = (hi - lo) / bins as f64;
    for &v in values {
        let b = if width > 0.0 {
            (((v - lo) / width) as usize).min(bins - 1)
        } else {
            0
        };
        h[b] += 1;
    }
    h
}

/// A strided `Read` at the owner: the elements at `region.offset + k * step` (C order).
pub fn read_strided(
    engine: &Engine,
    id: ObjectId,
    region: &Region,
    step: &[u64],
    max_payload: u64,
) -> Result<Vec<u8>> {
    let obj = typed(engine.meta.object(id)?)?;
    region.check_within(&obj.dims)?;
    check_step(region, step)?;
    let n = region.ndim();
    let elem = obj.dtype.size();
    // The selection's shape, and the same box in selected-element coordinates.
    let picked: Vec<u64> = (0..n).map(|d| region.count[d].div_ceil(step[d])).collect();
    let out_box = Region {
        offset: vec![0; n],
        count: picked.clone(),
    };
    let out_len = out_box.byte_len(elem)?;
    if out_len > max_payload {
        return Err(Error::invalid(format!(
            "the selection is {out_len} bytes, over the server's limit of {}; read it in parts",
            max_payload
        )));
    }
    let mut out = vec![0u8; out_len as usize];
    // Copied by extent from the mapped log when it all is there (only the selected bytes
    // are touched), else read in slabs.
    if engine.read_gathered(id, region, step, &mut out)? {
        return Ok(out);
    }
    if read_by_extent(engine, &obj, region, step, &mut out)? {
        return Ok(out);
    }
    // Slabs of the output sized so the source box each one reads stays bounded.
    let spread: u64 = step.iter().product::<u64>().max(1);
    let budget = (SLAB_ELEMS / spread).max(1);
    let mut src = Vec::new();
    for part in slabs(&out_box, budget) {
        // Source bounding box of this part of the output.
        let offset: Vec<u64> = (0..n)
            .map(|d| region.offset[d] + part.offset[d] * step[d])
            .collect();
        let count: Vec<u64> = (0..n).map(|d| (part.count[d] - 1) * step[d] + 1).collect();
        let sbox = Region { offset, count };
        src.resize(sbox.byte_len(elem)? as usize, 0);
        engine.read(id, &sbox, &mut src)?;
        gather_strided(&src, &sbox, region, step, elem, &mut out);
    }
    Ok(out)
}

/// Most extents a strided read is read extent by extent from (beyond, in slabs).
const MAX_UNITS: usize = 1 << 14;

/// A strided read of data on a tier (not all in the log): each extent under `region` held
/// here is read once, just the box of its selected elements (one tier read each), and its
/// selected elements gathered; elements no extent covers take the fill value. Slabs of the
/// bounding box would read an extent again for each slab crossing it (on S3, each time a
/// request). Where extents overlap, both boxes are read through `Engine::read`, which
/// resolves the overlap, so the same right value is gathered twice. False (nothing read)
/// when other servers hold parts or there are very many extents.
fn read_by_extent(
    engine: &Engine,
    obj: &ObjectMeta,
    region: &Region,
    step: &[u64],
    out: &mut [u8],
) -> Result<bool> {
    if !engine.remote_holders(obj.id, region).is_empty() {
        return Ok(false);
    }
    let ranges = engine.store().extent_ranges(obj.id, region);
    if ranges.len() > MAX_UNITS {
        return Ok(false);
    }
    let elem = obj.dtype.size();
    if obj.fill.len() == elem {
        for chunk in out.chunks_exact_mut(elem) {
            chunk.copy_from_slice(&obj.fill);
        }
    } else {
        out.fill(0);
    }
    let mut buf = Vec::new();
    for (r, _) in ranges {
        // The box of the selected elements inside r (none: skip it).
        let dims: Option<Vec<(u64, u64)>> = (0..r.ndim())
            .map(|d| {
                let k0 = (r.offset[d] - region.offset[d]).div_ceil(step[d]);
                let k1 = (r.offset[d] + r.count[d] - 1 - region.offset[d]) / step[d];
                (k0 <= k1).then(|| (region.offset[d] + k0 * step[d], (k1 - k0) * step[d] + 1))
            })
            .collect();
        let Some(dims) = dims else { continue };
        let (offset, count) = dims.into_iter().unzip();
        let sub = Region { offset, count };
        buf.resize(sub.byte_len(elem)? as usize, 0);
        engine.read(obj.id, &sub, &mut buf)?;
        gather_strided(&buf, &sub, region, step, elem, out);
    }
    Ok(true)
}

/// Checks a strided read's steps (one >= 1 per dim of `region`); the number of elements it
/// selects.
pub fn check_step(region: &Region, step: &[u64]) -> Result<u64> {
    let n = region.ndim();
    if step.len() != n || step.contains(&0) {
        return Err(Error::invalid(format!(
            "a strided read needs one step >= 1 per dim ({n} dims), got {step:?}"
        )));
    }
    Ok((0..n)
        .map(|d| region.count[d].div_ceil(step[d]))
        .fold(1u64, u64::saturating_mul))
}

/// A point `Read` at the owner: the elements at `coords` (ndim per point), in order.
/// Points are grouped by the slab of the object they fall in, and each group's bounding box
/// is read once, so scattered points cost one small read each and clustered ones share one.
pub fn read_points(
    engine: &Engine,
    id: ObjectId,
    coords: &[u64],
    max_payload: u64,
) -> Result<Vec<u8>> {
    let obj = typed(engine.meta.object(id)?)?;
    let n = obj.dims.len();
    if n == 0 || !coords.len().is_multiple_of(n) {
        return Err(Error::invalid(format!(
            "{} coordinates do not make points of {n} dims",
            coords.len()
        )));
    }
    let points = coords.len() / n;
    for (p, c) in coords.chunks_exact(n).enumerate() {
        if let Some(d) = (0..n).find(|&d| c[d] >= obj.dims[d]) {
            return Err(Error::new(
                pdcx_core::ErrorKind::OutOfBounds,
                format!(
                    "point {p} {c:?} is outside {} (dims {:?}) in dim {d}",
                    obj.name, obj.dims
                ),
            ));
        }
    }
    let elem = obj.dtype.size();
    let out_len = (points as u64).saturating_mul(elem as u64);
    if out_len > max_payload {
        return Err(Error::invalid(format!(
            "{points} points are {out_len} bytes, over the server's limit of {}",
            max_payload
        )));
    }
    let (cut, rows) = slab_shape(&obj.dims, SLAB_ELEMS);
    let key = |p: usize| {
        let c = &coords[p * n..(p + 1) * n];
        let mut k = c[..cut].to_vec();
        k.push(c[cut] / rows);
        k
    };
    let mut order: Vec<usize> = (0..points).collect();
    order.sort_by_cached_key(|&p| key(p));
    let mut out = vec![0u8; out_len as usize];
    let mut buf = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let k = key(order[start]);
        let mut end = start + 1;
        while end < order.len() && key(order[end]) == k {
            end += 1;
        }
        let group = &order[start..end];
        let mut lo = coords[group[0] * n..(group[0] + 1) * n].to_vec();
        let mut hi = lo.clone();
        for &p in group {
            for d in 0..n {
                lo[d] = lo[d].min(coords[p * n + d]);
                hi[d] = hi[d].max(coords[p * n + d]);
            }
        }
        let count: Vec<u64> = (0..n).map(|d| hi[d] - lo[d] + 1).collect();
        let bbox = Region { offset: lo, count };
        buf.resize(bbox.byte_len(elem)? as usize, 0);
        engine.read(id, &bbox, &mut buf)?;
        for &p in group {
            let mut at = 0u64;
            for d in 0..n {
                at = at * bbox.count[d] + (coords[p * n + d] - bbox.offset[d]);
            }
            let at = at as usize * elem;
            out[p * elem..(p + 1) * elem].copy_from_slice(&buf[at..at + elem]);
        }
        start = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slabs_cover_the_region_once_in_c_order() {
        let r = Region::new(vec![1, 2, 3], vec![3, 4, 5]).unwrap();
        for max in [1, 4, 5, 7, 20, 21, 60, 1000] {
            let s = slabs(&r, max);
            let total: u64 = s.iter().map(|x| x.num_elements()).sum();
            assert_eq!(total, 60, "max {max}");
            for x in &s {
                assert!(r.contains(x));
                assert!(x.num_elements() <= max.max(5), "max {max}: {x}");
            }
            for (i, a) in s.iter().enumerate() {
                for b in &s[i + 1..] {
                    assert!(!a.overlaps(b), "{a} and {b} overlap (max {max})");
                }
            }
        }
        assert_eq!(slabs(&r, 1000).len(), 1);
    }
}
