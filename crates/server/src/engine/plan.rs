//! Read plans: which servers hold which pieces of a region, and how a client reads them
//! (from here, from holders, or straight from the log or a tier).

use super::read::*;
use super::*;

impl Engine {
    /// The one-copy read plan of `region` of `id` for a client on this
    /// node (see `protocol::ReadPlan`), with `Read` semantics at the owner or, with `held`,
    /// `ReadHeld` semantics (this server's pieces only, each span with its write's sequence
    /// number so a client can merge several holders' plans). See [`PlanOutcome`].
    pub fn read_plan(&self, id: ObjectId, region: &Region, held: bool) -> Result<PlanOutcome> {
        let obj = if held {
            self.checked_meta(id, region)?
        } else {
            let obj = self.owned_meta(id, region)?;
            let mut holders = self.remote_holders(id, region);
            if obj.is_byte_stream() && (self.base_of(&obj).is_some() || !holders.is_empty()) {
                // Part of it is at the home, or a base may drop the holders' writes before
                // the client reads them: read through the server.
                return Ok(PlanOutcome::None);
            }
            if !holders.is_empty() {
                if !self.store.local_pieces(id, region).is_empty() {
                    holders.push(self.rank);
                    holders.sort_unstable();
                }
                return Ok(PlanOutcome::Holders(holders));
            }
            obj
        };
        let elem = obj.dtype.size() as u64;
        let len = region.byte_len(elem as usize)?;
        let pieces = self.store.local_pieces(id, region);
        // Pieces read by reference are planned as spans of their files when their
        // stored chunk is exactly their raw bytes; the rest must be committed log bytes.
        let (refs, in_log): (Vec<_>, Vec<_>) = pieces
            .iter()
            .cloned()
            .partition(|(e, _)| e.external.is_some() && e.home.is_none());
        let Some(segments) = self.store.committed_segments(&in_log) else {
            return Ok(PlanOutcome::None);
        };
        let Some((files, remap)) = ref_files(&refs) else {
            return Ok(PlanOutcome::None);
        };
        let mut spans: Vec<PlanSpan> = Vec::new();
        for (e, inter) in &pieces {
            if !plan_piece(e, inter, region, elem, &mut spans) {
                return Ok(PlanOutcome::None);
            }
        }
        // A file read by reference in many small spans (a box cutting across chunk rows) is
        // better read by the server, one read per chunk (`read_reference`), than by the client
        // in thousands of small preads.
        let ref_spans: Vec<&PlanSpan> = spans
            .iter()
            .filter(|s| remap.contains_key(&s.seq))
            .collect();
        if ref_spans.len() > 8
            && ref_spans.iter().map(|s| s.len).sum::<u64>() / (ref_spans.len() as u64)
                < DIRECT_MIN_SPAN
        {
            return Ok(PlanOutcome::None);
        }
        for seq in remap.keys() {
            self.store.note_ref_read(id, *seq);
        }
        for s in &mut spans {
            if let Some(&(key, base, start)) = remap.get(&s.seq) {
                s.segment = key;
                s.offset = base + (s.offset - start);
            }
        }
        let fill = (!covers(region, &pieces)).then(|| obj.fill.clone());
        // Every log record a span reads from, whole, with its checksum: the client checks
        // them before it returns their bytes (a record damaged after its commit, by a
        // one-copy writer's stray `pwrite` or anything else, is an error, never its bytes).
        let mut records: Vec<(u64, u64, u64, u32)> = in_log
            .iter()
            .map(|(e, _)| (e.loc.segment, e.loc.offset, e.loc.len, e.loc.crc))
            .collect();
        records.sort_unstable();
        records.dedup();
        Ok(PlanOutcome::Plan(
            ReadPlan {
                len,
                fill,
                spans,
                records,
            },
            segments,
            files,
        ))
    }

    /// `Request::PiecePlan`: every extent under `region` of `id`, whole, with
    /// where it lies in the committed log, for a same-node client that gathers a strided
    /// selection itself. At the owner (`held` false) the holders instead, when other servers
    /// hold parts; at a holder (`held`) its own extents. None where
    /// [`read_plan`](Self::read_plan) would not plan the region (a stream's base, extents
    /// not in the committed log) and for extents read by reference (their file is not a log
    /// segment).
    pub fn piece_plan(
        &self,
        id: ObjectId,
        region: &Region,
        held: bool,
    ) -> Result<Option<PiecePlans>> {
        let obj = if held {
            self.checked_meta(id, region)?
        } else {
            self.owned_meta(id, region)?
        };
        if obj.is_byte_stream() && !held && self.base_of(&obj).is_some() {
            // Part of it may be at the home, and the copier drops writes below a base: the
            // owner reads. Without a base (a file) its holders are asked as for any
            // object; a holder is asked only after the owner answered without a base.
            return Ok(None);
        }
        if !held {
            let mut holders = self.remote_holders(id, region);
            if !holders.is_empty() {
                if !self.store.local_pieces(id, region).is_empty() {
                    holders.push(self.rank);
                    holders.sort_unstable();
                }
                return Ok(Some(PiecePlans {
                    dir: String::new(),
                    segments: Vec::new(),
                    elem: obj.dtype.size() as u64,
                    fill: None,
                    pieces: Vec::new(),
                    holders,
                }));
            }
        }
        let pieces = self.store.local_pieces(id, region);
        if pieces.iter().any(|(e, _)| e.external.is_some()) || pieces.len() > PLAN_MAX_SPANS {
            return Ok(None);
        }
        let Some(segments) = self.store.committed_segments(&pieces) else {
            return Ok(None);
        };
        let dir = if segments.is_empty() {
            String::new()
        } else {
            self.plan_dir()?.to_owned()
        };
        Ok(Some(PiecePlans {
            dir,
            segments,
            elem: obj.dtype.size() as u64,
            fill: (!covers(region, &pieces)).then(|| obj.fill.clone()),
            pieces: pieces
                .iter()
                .map(|(e, _)| PlanPiece {
                    seq: e.seq,
                    segment: e.loc.segment,
                    offset: e.loc.offset,
                    region: e.region.clone(),
                    crc: e.loc.crc,
                })
                .collect(),
            holders: Vec::new(),
        }))
    }

    /// Holder side of a merged read: this server's committed pieces of `region` of `id`,
    /// each with its sequence number, bytes back to back.
    pub fn pieces(&self, id: ObjectId, region: &Region) -> Result<Pieces> {
        let obj = self.object_meta(id, false)?;
        crate::datastore::again_if_moved(|| self.pieces_once(&obj, region))
    }

    fn pieces_once(&self, obj: &ObjectMeta, region: &Region) -> Result<Pieces> {
        let id = obj.id;
        let elem = obj.dtype.size();
        let pieces = self.store.local_pieces(id, region);
        let list: Vec<(u64, Region)> = pieces.iter().map(|(e, i)| (e.seq, i.clone())).collect();
        // One copy (log → reply) when the pieces' spans are few or large, as in `read_here`.
        let mut direct = Vec::new();
        let mut at = 0u64;
        let mut planned = true;
        for (e, inter) in &pieces {
            let first = direct.len();
            planned &= plan_piece(e, inter, inter, elem as u64, &mut direct);
            for s in &mut direct[first..] {
                s.dest += at;
            }
            at += inter.byte_len(elem)?;
        }
        let avg = at / (direct.len() as u64).max(1);
        if planned && !pieces.is_empty() && (direct.len() <= 8 || avg >= DIRECT_MIN_SPAN) {
            let mut out = vec![0u8; at as usize];
            if self.store.read_spans_into(id, &pieces, &direct, &mut out)? {
                return Ok((list, out));
            }
        }
        let spans = piece_spans(&pieces, elem);
        let fetched = self.store.fetch(obj, None, &pieces, &spans, &mut [])?;
        let mut out = Vec::new();
        for (i, (e, inter)) in pieces.iter().enumerate() {
            let bytes = fetched[i]
                .as_deref()
                .ok_or_else(|| Error::internal("piece read fetched no bytes"))?;
            let at = out.len();
            out.resize(at + inter.byte_len(elem)? as usize, 0);
            let src = Layout {
                region: &e.region,
                base: spans[i].0 / elem as u64,
            };
            let dst = Layout {
                region: inter,
                base: 0,
            };
            copy_region(elem, inter, (&src, bytes), (&dst, &mut out[at..]));
        }
        Ok((list, out))
    }
}

/// Bytes [lo, hi) of its extent's payload that each piece needs.
pub(super) fn piece_spans(pieces: &[(Arc<Extent>, Region)], elem: usize) -> Vec<(u64, u64)> {
    pieces
        .iter()
        .map(|(e, inter)| {
            let (lo, hi) = e.region.span_of(inter);
            (lo * elem as u64, hi * elem as u64)
        })
        .collect()
}

/// What [`Engine::read_plan`] found.
#[derive(Debug)]
pub enum PlanOutcome {
    /// The plan, (segment, st_dev, st_ino) of every segment it names, and (key, path, st_dev,
    /// st_ino) of every file outside the log it names (`ReadPlans::files`).
    Plan(ReadPlan, Vec<(u64, u64, u64)>, Vec<(u64, String, u64, u64)>),
    /// At the owner: other servers hold parts of the region; these all hold some of it.
    Holders(Vec<u32>),
    /// Not plannable (extents on a tier, bytes not committed to the log, too many spans).
    None,
}

/// Average span size from which the server reads a region span by span straight into the
/// output rather than with `DataStore::fetch`'s merged reads and a copy.
pub(super) const DIRECT_MIN_SPAN: u64 = 64 << 10;

/// Most spans one read plan may have (an N-D read crossing many rows of many extents is
/// served by the server instead: one request per span would cost more than the copy).
pub(super) const PLAN_MAX_SPANS: usize = 1 << 16;

/// Row-major element index of global point `p` inside box `r` (which contains it).
pub(super) fn linear_index(r: &Region, p: &[u64]) -> u64 {
    (0..r.ndim()).fold(0u64, |idx, d| idx * r.count[d] + (p[d] - r.offset[d]))
}

/// Appends the log spans copying piece `inter` of extent `e` into the layout of `region`:
/// one per row of the piece, rows contiguous in both the log and the output merged. False
/// when the plan would exceed [`PLAN_MAX_SPANS`].
/// For pieces read by reference: each one's file as a plan names it (key `REF_SEGMENT +
/// seq`, path, st_dev, st_ino) and, by seq, (key, the chunk's file offset, its log location's
/// offset) to rewrite its spans with; None when one cannot be planned (a filtered or edge
/// chunk must be decoded by the server, or the file cannot be stat'ed).
#[allow(clippy::type_complexity)]
pub(super) fn ref_files(
    refs: &[(Arc<Extent>, Region)],
) -> Option<(Vec<(u64, String, u64, u64)>, HashMap<u64, (u64, u64, u64)>)> {
    use std::os::unix::fs::MetadataExt;
    let mut files = Vec::new();
    let mut remap = HashMap::new();
    for (e, _) in refs {
        let r = e.external.as_ref()?;
        // A record adopted from a retired server's log is checked whole by the server.
        if !r.filters.is_empty() || r.chunk != e.region.count || e.loc.crc != 0 {
            return None;
        }
        let m = std::fs::metadata(&r.path).ok()?;
        let key = crate::datastore::REF_SEGMENT + e.seq;
        files.push((key, r.path.clone(), m.dev(), m.ino()));
        remap.insert(e.seq, (key, r.offset, e.loc.offset));
    }
    Some((files, remap))
}

pub(super) fn plan_piece(
    e: &Extent,
    inter: &Region,
    region: &Region,
    elem: u64,
    spans: &mut Vec<PlanSpan>,
) -> bool {
    let n = inter.ndim();
    let run = inter.count[n - 1] * elem;
    let mut point = inter.offset.clone();
    loop {
        let src = e.loc.offset + linear_index(&e.region, &point) * elem;
        let dst = linear_index(region, &point) * elem;
        match spans.last_mut() {
            Some(last)
                if last.seq == e.seq
                    && last.segment == e.loc.segment
                    && last.offset + last.len == src
                    && last.dest + last.len == dst =>
            {
                last.len += run
            }
            _ => {
                if spans.len() >= PLAN_MAX_SPANS {
                    return false;
                }
                spans.push(PlanSpan {
                    seq: e.seq,
                    segment: e.loc.segment,
                    offset: src,
                    len: run,
                    dest: dst,
                });
            }
        }
        let mut d = n - 1;
        loop {
            if d == 0 {
                return true;
            }
            d -= 1;
            point[d] += 1;
            if point[d] < inter.end(d) {
                break;
            }
            point[d] = inter.offset[d];
        }
    }
}
