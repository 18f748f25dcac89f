//! Reads: of committed data held here, of versions, gathered from the holders of an object,
//! and merged from pieces.

use super::plan::*;
use super::*;
use pdcx_core::region::fill_elements;

impl Engine {
    /// Refuses a request for object `id` that only its owner answers, saying where to go
    /// (`then`: "read it there").
    fn owned_here(&self, id: ObjectId, then: &str) -> Result<()> {
        let owner = self.meta.owner_of(id);
        if owner != self.rank {
            return Err(Error::invalid(format!(
                "object {id:#x} is owned by server {owner}, not {}: {then}",
                self.rank
            )));
        }
        Ok(())
    }

    /// Fills `out` with `region` of object `id`: fill value where nothing was written, else the
    /// last committed write covering each element, wherever it is held. Reads are served by the
    /// owner, which knows every holder from its region map.
    pub fn read(&self, id: ObjectId, region: &Region, out: &mut [u8]) -> Result<()> {
        self.owned_here(id, "read it there")?;
        if pdcx_core::region::short_rows(region, out.len())
            && self.read_gathered(id, region, &vec![1; region.ndim()], out)?
        {
            return Ok(());
        }
        let obj = self.meta.object(id)?;
        if obj.is_untyped() {
            return Err(obj.untyped_error());
        }
        region.check_within(&obj.dims)?;
        let holders = self.remote_holders(id, region);
        self.read_here(&obj, region, out, &holders, None)
    }

    /// Fills `out` with `region` of object `id` (owned here) as of version `v`: the writes
    /// numbered up to `v` (a client's `Read` with a version). Refused when compaction dropped
    /// a write the version reads (`meta/dropped.rs`): checked again after the read, since a
    /// drop is recorded before it happens, so a drop that raced the read is seen.
    pub fn read_at(&self, id: ObjectId, region: &Region, v: u64, out: &mut [u8]) -> Result<()> {
        self.owned_here(id, "read its versions there")?;
        let obj = self.meta.object(id)?;
        if obj.is_untyped() {
            return Err(obj.untyped_error());
        }
        if obj.is_byte_stream() {
            let size = self.stream_version_size(&obj, v)?;
            region.check_within(&[size])?;
        } else {
            region.check_within(&obj.dims)?;
        }
        self.check_version_kept(&obj, v)?;
        let holders = self.remote_holders(id, region);
        self.read_here(&obj, region, out, &holders, Some(v.saturating_add(1)))?;
        self.check_version_kept(&obj, v)
    }

    /// The versions of `id` (owned here) a read can ask for: the numbers of the writes held
    /// anywhere, less those inside a range compaction dropped; and those ranges.
    pub fn versions(&self, id: ObjectId) -> Result<pdcx_core::protocol::VersionList> {
        self.owned_here(id, "list its versions there")?;
        let obj = self.meta.object(id)?;
        let dropped = self.meta.dropped_versions(id)?;
        if obj.is_byte_stream() {
            let (readable, sizes) = self
                .stream_versions(id)?
                .into_iter()
                .filter(|(v, _, _)| !dropped.iter().any(|&(from, to)| from <= *v && *v < to))
                .map(|(v, size, _)| (v, size))
                .unzip();
            return Ok(pdcx_core::protocol::VersionList {
                readable,
                dropped,
                sizes,
            });
        }
        let mut seqs: Vec<u64> = self.store.extents_of(id).iter().map(|e| e.seq).collect();
        if let Some(list) = self
            .remote
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
        {
            seqs.extend(list.iter().map(|r| r.seq));
        }
        seqs.sort_unstable();
        seqs.dedup();
        seqs.retain(|s| !dropped.iter().any(|&(from, to)| from <= *s && *s < to));
        Ok(pdcx_core::protocol::VersionList {
            readable: seqs,
            dropped,
            sizes: Vec::new(),
        })
    }

    /// Refuses to name (`pdcx.version.NAME`) a version of `id` (owned here) that compaction
    /// already dropped.
    pub fn check_names_kept(&self, id: ObjectId, tags: &pdcx_core::model::Tags) -> Result<()> {
        for (key, value) in tags {
            if let (true, pdcx_core::model::TagValue::Int(v)) =
                (key.starts_with(super::retention::VERSION_TAG_PREFIX), value)
            {
                let obj = self.meta.object(id)?;
                if obj.is_byte_stream() {
                    self.stream_version_size(&obj, *v as u64)?;
                }
                self.check_version_kept(&obj, *v as u64)?;
            }
        }
        Ok(())
    }

    fn check_version_kept(&self, obj: &ObjectMeta, v: u64) -> Result<()> {
        match self.meta.dropped_version(obj.id, v)? {
            None => Ok(()),
            Some((from, to)) => Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "version {v} of {} was dropped by compaction (versions {from} to {} are gone): \
                     name a version to keep it (pdcx tag --version), or keep the last N versions \
                     or those of the last D seconds (tags pdcx.keep.last, pdcx.keep.seconds)",
                    obj.name,
                    to - 1
                ),
            )),
        }
    }

    /// Reads `region` of object `id` (owned here) as of a version: only writes with a
    /// sequence number below `seq_below` count (a byte stream's sealed version,
    /// whatever was written after it). The caller checks the region against the version's
    /// size, which the object's current dims may be smaller than after a truncate.
    pub fn read_version(
        &self,
        id: ObjectId,
        region: &Region,
        seq_below: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let obj = self.meta.object(id)?;
        region.validate()?;
        let holders = self.remote_holders(id, region);
        self.read_here(&obj, region, out, &holders, Some(seq_below))
    }

    /// For version `seq_below` of object `id` (owned here): every server holding writes of
    /// `region` below that number, with how many bytes of the region it holds (overlaps
    /// counted), this server included. Picks the server that uploads a part.
    pub fn version_holders(
        &self,
        id: ObjectId,
        region: &Region,
        seq_below: u64,
    ) -> Vec<(u32, u64)> {
        let mut bytes: HashMap<u32, u64> = HashMap::new();
        // Writes below a base are not part of any version after it.
        let from = self.bases.get(id).map_or(0, |b| b.seal_seq);
        let seq_below_base = |seq: u64| seq < from;
        for (e, inter) in self.store.local_pieces(id, region) {
            if e.seq < seq_below && !seq_below_base(e.seq) {
                *bytes.entry(self.rank).or_default() += inter.num_elements();
            }
        }
        let remote = self.remote.read().unwrap_or_else(|p| p.into_inner());
        for r in remote.get(&id).into_iter().flatten() {
            if r.seq < seq_below && !seq_below_base(r.seq) && r.holder != self.rank {
                if let Some(i) = r.region.intersect(region) {
                    *bytes.entry(r.holder).or_default() += i.num_elements();
                }
            }
        }
        let mut v: Vec<(u32, u64)> = bytes.into_iter().collect();
        v.sort_unstable();
        v
    }

    /// The 1-D ranges `[start, end)` of every write of object `id` (owned here) numbered
    /// `seq_from` or later, wherever it is held, merged (a crashed run's writes after
    /// its last version).
    pub fn ranges_since(&self, id: ObjectId, seq_from: u64) -> Vec<(u64, u64)> {
        let mut r: Vec<(u64, u64)> = self
            .store
            .extents_of(id)
            .iter()
            .filter(|e| e.seq >= seq_from && e.region.ndim() == 1)
            .map(|e| (e.region.offset[0], e.region.end(0)))
            .collect();
        let remote = self.remote.read().unwrap_or_else(|p| p.into_inner());
        r.extend(
            remote
                .get(&id)
                .into_iter()
                .flatten()
                .filter(|x| x.seq >= seq_from && x.region.ndim() == 1)
                .map(|x| (x.region.offset[0], x.region.end(0))),
        );
        r.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (a, b) in r {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        merged
    }

    /// [`read_version`](Self::read_version) on any server (not only the owner), given the
    /// other servers holding writes of the region (`holders`, from the owner's
    /// [`version_holders`](Self::version_holders)). A server uploading a part reads it so.
    pub fn read_version_from(
        &self,
        id: ObjectId,
        region: &Region,
        seq_below: u64,
        holders: &[u32],
        out: &mut [u8],
    ) -> Result<()> {
        let obj = self.object_meta(id, false)?;
        region.validate()?;
        let others: Vec<u32> = holders
            .iter()
            .copied()
            .filter(|&h| h != self.rank)
            .collect();
        self.read_here(&obj, region, out, &others, Some(seq_below))
    }

    /// Read of a region the client learned (from the owner's `locate`) is held by this server
    /// alone: fill value plus this server's extents, also for objects owned elsewhere.
    pub fn read_held(&self, id: ObjectId, region: &Region, out: &mut [u8]) -> Result<()> {
        let obj = self.checked_meta(id, region)?;
        self.read_here(&obj, region, out, &[], None)
    }

    /// Owner side of a client's read planning: the servers holding committed data of each
    /// region (this one included when it does), so a region with one holder is read there
    /// directly.
    pub fn locate(&self, id: ObjectId, region: &Region) -> Result<Vec<u32>> {
        let obj = self.owned_meta(id, region)?;
        let mut holders = self.remote_holders(id, region);
        // A byte stream owned here is always read here: its base, if any, is read
        // here, only this server knows which writes are below it, and a base may be set
        // (and the writes below it dropped on their holders) between a locate and a read at
        // a holder.
        let stream = obj.is_byte_stream();
        if stream || !self.store.local_pieces(id, region).is_empty() {
            holders.push(self.rank);
            holders.sort_unstable();
        }
        Ok(holders)
    }

    /// The metadata of object `id`, which this server must own, with `region` checked
    /// against its dims (reads and read plans at the owner).
    pub(super) fn owned_meta(&self, id: ObjectId, region: &Region) -> Result<ObjectMeta> {
        self.owned_here(id, "read it there")?;
        let obj = self.meta.object(id)?;
        if obj.is_untyped() {
            return Err(obj.untyped_error());
        }
        region.check_within(&obj.dims)?;
        Ok(obj)
    }

    /// `region` of `id` (owned here) taken every `step[d]` into `out` (C order),
    /// copied by extent from the mapped log, so only the selected elements are touched.
    /// False when the region cannot be read so (other holders, extents not in the committed
    /// log, a segment retired meanwhile): the caller reads the usual way (`out` may be
    /// partly written). An error when an extent's bytes no longer match its record's
    /// checksum or its segment was cut under the mapping (see `mapped.rs`).
    pub fn read_gathered(
        &self,
        id: ObjectId,
        region: &Region,
        step: &[u64],
        out: &mut [u8],
    ) -> Result<bool> {
        let Some(plan) = self.piece_plan(id, region, false)? else {
            return Ok(false);
        };
        let elem = plan.elem as usize;
        let selected = (0..region.ndim())
            .map(|d| region.count[d].div_ceil(step[d]))
            .fold(1u64, u64::saturating_mul);
        if !plan.holders.is_empty() || selected.saturating_mul(plan.elem) != out.len() as u64 {
            return Ok(false);
        }
        let mut maps = Vec::with_capacity(plan.pieces.len());
        for p in &plan.pieces {
            let Some(&(_, dev, ino)) = plan.segments.iter().find(|s| s.0 == p.segment) else {
                return Ok(false);
            };
            let len = p.region.byte_len(elem)?;
            match self
                .mapped
                .get(&plan.dir, p.segment, dev, ino, p.offset + len)
            {
                Some(m) => maps.push((m, p.offset as usize, len as usize)),
                None => return Ok(false),
            }
        }
        if let Some(f) = &plan.fill {
            fill_elements(out, f);
        }
        let srcs: Vec<(&[u8], &Region)> = plan
            .pieces
            .iter()
            .zip(&maps)
            .map(|(p, (m, at, len))| (&m[*at..at + len], &p.region))
            .collect();
        gather_pieces(&srcs, region, step, elem, out);
        // Checked after the copy, so a change made before or while it ran is seen.
        let damaged = plan
            .pieces
            .iter()
            .zip(&srcs)
            .find(|(p, (src, _))| !pdcx_store::payload_matches(src, p.crc));
        if let Some((p, _)) = plan
            .pieces
            .iter()
            .zip(&maps)
            .find(|(_, (m, _, _))| m.faulted())
        {
            self.mapped.forget(p.segment);
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "log segment {} of this server was cut short while object {id:#x} was read from it",
                    p.segment
                ),
            ));
        }
        if let Some((p, _)) = damaged {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "write {} of object {id:#x} (log segment {}, offset {}) no longer matches its checksum: its bytes were changed after it was committed",
                    p.seq, p.segment, p.offset
                ),
            ));
        }
        Ok(true)
    }

    /// [`read_here_once`](Self::read_here_once), again if compaction moved or dropped an
    /// extent it had looked up.
    pub(super) fn read_here(
        &self,
        obj: &ObjectMeta,
        region: &Region,
        out: &mut [u8],
        holders: &[u32],
        seq_below: Option<u64>,
    ) -> Result<()> {
        crate::datastore::again_if_moved(|| {
            self.read_here_once(obj, region, out, holders, seq_below)
        })
    }

    fn read_here_once(
        &self,
        obj: &ObjectMeta,
        region: &Region,
        out: &mut [u8],
        holders: &[u32],
        seq_below: Option<u64>,
    ) -> Result<()> {
        let elem = obj.dtype.size();
        if out.len() as u64 != region.byte_len(elem)? {
            return Err(Error::internal("read buffer size does not match region"));
        }
        // A base is not set (and writes below it not dropped) while a stream read runs.
        let _no_base_change = obj
            .is_byte_stream()
            .then(|| self.bases.change.read().unwrap_or_else(|p| p.into_inner()));
        // A stream whose base is at its home: writes below the base's seal are not
        // part of it any more (dropped, or about to be), and the base is read where the
        // region meets it.
        let base = self.base_of(obj);
        let window = Window {
            below: seq_below,
            from: base.as_ref().map_or(0, |b| b.seal_seq),
            base: base.filter(|b| region.offset[0] < b.size),
        };
        let mut pieces = self.store.local_pieces(obj.id, region);
        pieces.retain(|(e, _)| window.counts(e.seq));
        let spans = piece_spans(&pieces, elem);
        if !holders.is_empty() || (window.base.is_some() && !covers(region, &pieces)) {
            return self.read_merged(obj, region, out, &pieces, &spans, holders, &window);
        }
        // One copy: log → `out` (the reply buffer or the client's arena), span by span, when
        // the spans are few or large (many small extents are better served by the merged
        // reads of `fetch`, one large pread for many of them).
        if !pieces.is_empty() {
            let mut spans = Vec::new();
            let planned = pieces
                .iter()
                .all(|(e, i)| plan_piece(e, i, region, elem as u64, &mut spans));
            let bytes: u64 = spans.iter().map(|s| s.len).sum();
            if planned && (spans.len() <= 8 || bytes / spans.len() as u64 >= DIRECT_MIN_SPAN) {
                if !covers(region, &pieces) {
                    fill_elements(out, &obj.fill);
                }
                if self.store.read_spans_into(obj.id, &pieces, &spans, out)? {
                    return Ok(());
                }
            }
        }
        if !covers(region, &pieces) {
            fill_elements(out, &obj.fill);
        }
        let out_layout = Layout { region, base: 0 };
        let fetched = self.store.fetch(obj, Some(region), &pieces, &spans, out)?;
        for (i, (e, inter)) in pieces.iter().enumerate() {
            let Some(bytes) = &fetched[i] else { continue }; // read directly into `out`
            let src_layout = Layout {
                region: &e.region,
                base: spans[i].0 / elem as u64,
            };
            copy_region(elem, inter, (&src_layout, &bytes[..]), (&out_layout, out));
        }
        Ok(())
    }

    /// Read of a region that other servers hold parts of: gathers every holder's pieces and
    /// paints them with the local ones in sequence order (newest last).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn read_merged(
        &self,
        obj: &ObjectMeta,
        region: &Region,
        out: &mut [u8],
        pieces: &[(Arc<Extent>, Region)],
        spans: &[(u64, u64)],
        holders: &[u32],
        window: &Window,
    ) -> Result<()> {
        let elem = obj.dtype.size();
        fill_elements(out, &obj.fill);
        if let Some(b) = &window.base {
            // 1-D bytes: the region is a byte range.
            self.bases.read(b, region.offset[0], out)?;
        }
        let fetched = self.store.fetch(obj, None, pieces, spans, out)?;
        let remote: Vec<Pieces> = holders
            .iter()
            .map(|&h| self.peers()?.pieces(h, obj.id, region))
            .collect::<Result<_>>()?;
        // (seq, bytes, layout region, base element of the piece within its bytes, piece)
        let mut paint: Vec<(u64, &[u8], &Region, u64, &Region)> = Vec::new();
        for (i, (e, inter)) in pieces.iter().enumerate() {
            let bytes = fetched[i]
                .as_deref()
                .ok_or_else(|| Error::internal("merged read fetched no bytes"))?;
            paint.push((e.seq, bytes, &e.region, spans[i].0 / elem as u64, inter));
        }
        for (h, (list, bytes)) in holders.iter().zip(&remote) {
            let mut at = 0usize;
            for (seq, piece) in list {
                // A peer's region is a claim: one whose offset and count disagree in length,
                // or whose end overflows, must not reach `intersect` (it indexes and adds).
                if piece.validate().is_err() {
                    return Err(Error::protocol(format!(
                        "server {h} sent a malformed piece {piece:?} for the read of {region}"
                    )));
                }
                let n = piece.byte_len(elem)? as usize;
                let inside = piece.intersect(region).as_ref() == Some(piece);
                if !inside || at + n > bytes.len() {
                    return Err(Error::protocol(format!(
                        "server {h} sent a piece {piece} that does not fit the read of {region}"
                    )));
                }
                if window.counts(*seq) {
                    paint.push((*seq, &bytes[at..at + n], piece, 0, piece));
                }
                at += n;
            }
        }
        paint.sort_by_key(|p| p.0);
        let out_layout = Layout { region, base: 0 };
        for (_, bytes, src_region, base, piece) in paint {
            let src = Layout {
                region: src_region,
                base,
            };
            copy_region(elem, piece, (&src, bytes), (&out_layout, out));
        }
        Ok(())
    }
}

/// Whether the pieces together cover every element of `region` (then no fill is needed):
/// exactly for 1-D (the union of intervals); in more dims when one piece is the whole
/// region or the pieces tile it without overlapping ([`tiles`](pdcx_core::region::tiles)).
pub(super) fn covers(region: &Region, pieces: &[(Arc<Extent>, Region)]) -> bool {
    if pieces.iter().any(|(_, i)| i == region) {
        return true;
    }
    if region.ndim() != 1 {
        return pdcx_core::region::tiles(region, pieces.iter().map(|(_, i)| i));
    }
    let mut iv: Vec<(u64, u64)> = pieces
        .iter()
        .map(|(_, i)| (i.offset[0], i.end(0)))
        .collect();
    iv.sort_unstable();
    let mut reached = region.offset[0];
    for (lo, hi) in iv {
        if lo > reached {
            return false;
        }
        reached = reached.max(hi);
    }
    reached >= region.end(0)
}

/// A set of disjoint 1-D intervals `[start, end)` (start → end), merged on insert.
#[derive(Default)]
pub(super) struct Coverage(std::collections::BTreeMap<u64, u64>);

impl Coverage {
    /// Whether `[start, end)` lies inside one interval of the set.
    pub(super) fn contains(&self, start: u64, end: u64) -> bool {
        self.0
            .range(..=start)
            .next_back()
            .is_some_and(|(_, &e)| e >= end)
    }

    pub(super) fn insert(&mut self, mut start: u64, mut end: u64) {
        if let Some((&s, &e)) = self.0.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
            }
        }
        let overlapping: Vec<u64> = self.0.range(start..=end).map(|(&s, _)| s).collect();
        for s in overlapping {
            if let Some(e) = self.0.remove(&s) {
                end = end.max(e);
            }
        }
        self.0.insert(start, end);
    }
}

#[cfg(test)]
mod coverage_tests {
    use super::Coverage;

    #[test]
    fn intervals_merge_and_cover() {
        let mut c = Coverage::default();
        c.insert(10, 20);
        c.insert(30, 40);
        assert!(c.contains(12, 20) && !c.contains(15, 25) && !c.contains(0, 5));
        c.insert(20, 30);
        assert!(c.contains(10, 40), "adjacent intervals merge");
        c.insert(0, 100);
        assert!(c.contains(0, 100) && c.0.len() == 1);
        c.insert(200, 300);
        c.insert(150, 250);
        assert!(c.contains(150, 300) && !c.contains(90, 160));
    }
}
