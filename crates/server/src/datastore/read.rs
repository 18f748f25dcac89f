//! The read path below the index: each piece's bytes from the cache, the log (merged reads),
//! or the extent's home tier once its segment was retired.

use super::index::Extent;
use super::DataStore;
use crate::tiering::{codec, Home};
use pdcx_core::{Error, ErrorKind, ObjectId, ObjectMeta, Region, Result};
use std::sync::Arc;

/// Reads within this many bytes of each other are merged into one log read.
const MERGE_GAP: u64 = 64 << 10;

impl DataStore {
    /// Gets each piece's span (`spans[i]`: bytes [lo, hi) of its extent's payload) from the
    /// cache, the log or the home tier. Uncached log spans are sorted by location and merged so
    /// the log sees few large reads. With `direct` (the requested region), a lone piece that is
    /// exactly that region and contiguous in its extent is read straight into `out` (returned
    /// as None).
    pub fn fetch(
        &self,
        obj: &ObjectMeta,
        direct: Option<&Region>,
        pieces: &[(Arc<Extent>, Region)],
        spans: &[(u64, u64)],
        out: &mut [u8],
    ) -> Result<Vec<Option<Arc<Vec<u8>>>>> {
        let mut fetched: Vec<Option<Arc<Vec<u8>>>> = vec![None; pieces.len()];
        let mut misses: Vec<usize> = Vec::new();
        for (i, (e, _)) in pieces.iter().enumerate() {
            match self.cache.get(&e.loc) {
                Some(data) => {
                    if e.external.is_some() && e.home.is_none() {
                        self.note_ref_read(obj.id, e.seq); // read often, even if cached
                    }
                    let (lo, hi) = spans[i];
                    fetched[i] = Some(if lo == 0 && hi == data.len() as u64 {
                        data
                    } else {
                        Arc::new(data[lo as usize..hi as usize].to_vec())
                    });
                }
                None => misses.push(i),
            }
        }
        self.io
            .cache_lookups(pieces.len() - misses.len(), misses.len());
        // Extents read by reference come from their files, not the log or a tier.
        let (refs, rest): (Vec<usize>, Vec<usize>) = misses
            .into_iter()
            .partition(|&i| pieces[i].0.external.is_some() && pieces[i].0.home.is_none());
        misses = rest;
        for &i in &refs {
            let e = &pieces[i].0;
            if let Some(r) = &e.external {
                fetched[i] = Some(self.read_reference(obj, e, r, spans[i])?);
            }
        }
        let any_ref = !refs.is_empty();
        let mut log = self.log();
        // Extents whose segment was retired are read from their home tier, after the log
        // lock is released (a tier read may be a slow network request; the log lock is a leaf).
        // While it is released the flusher may retire more segments, so the pieces left for the
        // log are checked again each time the lock is re-taken, until none moved.
        // Without tiers a piece whose segment is gone was moved or dropped by compaction
        // after the reader looked it up: `read_home` answers `lost`, and the read starts
        // again (`again_if_moved`).
        let mut any_from_tier = false;
        loop {
            let (in_log, gone): (Vec<usize>, Vec<usize>) = misses.into_iter().partition(|&i| {
                let e = &pieces[i].0;
                e.in_log && log.has_segment(e.loc.segment)
            });
            misses = in_log;
            if gone.is_empty() {
                break;
            }
            any_from_tier = true;
            drop(log);
            for &i in &gone {
                fetched[i] = Some(self.read_home(obj, &pieces[i].0, spans[i])?);
            }
            log = self.log();
        }
        // The bytes are read after the lock is released (`SegmentLog::span`): a large read
        // must not hold up the appends and reservations of writers meanwhile.
        if let (Some(region), 1, 1, true) = (
            direct,
            pieces.len(),
            misses.len(),
            !any_from_tier && !any_ref,
        ) {
            let (e, inter) = &pieces[0];
            let (lo, hi) = spans[0];
            if inter == region && hi - lo == out.len() as u64 {
                let span = log.span(e.loc.segment, e.loc.offset + lo, hi - lo)?;
                drop(log);
                span.read_into(out)?;
                if (lo, hi) == (0, e.loc.len) {
                    pdcx_store::verify_payload(&e.loc, out)?;
                }
                return Ok(fetched);
            }
        }
        misses.sort_by_key(|&i| (pieces[i].0.loc.segment, pieces[i].0.loc.offset + spans[i].0));
        // Merged reads: (span, the misses it serves, its first byte's log offset).
        let mut reads = Vec::new();
        let mut k = 0;
        while k < misses.len() {
            let first = misses[k];
            let seg = pieces[first].0.loc.segment;
            let start = pieces[first].0.loc.offset + spans[first].0;
            let mut end = pieces[first].0.loc.offset + spans[first].1;
            let mut j = k + 1;
            while j < misses.len() {
                let m = misses[j];
                let (s, e) = (
                    pieces[m].0.loc.offset + spans[m].0,
                    pieces[m].0.loc.offset + spans[m].1,
                );
                if pieces[m].0.loc.segment != seg || s > end + MERGE_GAP {
                    break;
                }
                end = end.max(e);
                j += 1;
            }
            reads.push((log.span(seg, start, end - start)?, k..j, start));
            k = j;
        }
        drop(log);
        for (span, served, start) in reads {
            let mut buf = vec![0u8; span.len() as usize];
            span.read_into(&mut buf)?;
            for &m in &misses[served] {
                let s = (pieces[m].0.loc.offset + spans[m].0 - start) as usize;
                let e = (pieces[m].0.loc.offset + spans[m].1 - start) as usize;
                if spans[m] == (0, pieces[m].0.loc.len) {
                    pdcx_store::verify_payload(&pieces[m].0.loc, &buf[s..e])?;
                }
                fetched[m] = Some(Arc::new(buf[s..e].to_vec()));
            }
        }
        Ok(fetched)
    }

    /// One copy on the server's own read path: reads each span (`len`
    /// bytes at `offset` of `segment`, to byte `dest` of `out`, in order) straight from the
    /// log into `out`, when every piece is uncached and in a live log segment. False, with
    /// nothing read, otherwise (the caller uses [`fetch`](Self::fetch)). The spans must lie
    /// inside `out` (the engine derives them from the pieces and the region).
    pub fn read_spans_into(
        &self,
        id: ObjectId,
        pieces: &[(Arc<Extent>, Region)],
        spans: &[pdcx_core::protocol::PlanSpan],
        out: &mut [u8],
    ) -> Result<bool> {
        if pieces.iter().any(|(e, _)| self.cache.contains(&e.loc)) {
            return Ok(false);
        }
        // Extents read by reference whose stored chunk is exactly their raw bytes (no filter,
        // not an edge chunk) are read the same way, from their files.
        let refs: std::collections::HashMap<u64, (&Extent, &super::ExternalRef)> = pieces
            .iter()
            .filter_map(|(e, _)| match (&e.external, &e.home) {
                (Some(r), None) => Some((e.seq, (&**e, &**r))),
                _ => None,
            })
            .collect();
        if refs
            .values()
            .any(|(e, r)| !r.filters.is_empty() || r.chunk != e.region.count || e.loc.crc != 0)
        {
            return Ok(false);
        }
        let log = self.log();
        if !pieces
            .iter()
            .all(|(e, _)| refs.contains_key(&e.seq) || (e.in_log && log.has_segment(e.loc.segment)))
        {
            return Ok(false);
        }
        let mut reads = Vec::with_capacity(spans.len());
        for s in spans {
            if let Some((e, r)) = refs.get(&s.seq) {
                reads.push((
                    None,
                    (s.segment, s.offset),
                    Some((*r, r.offset + (s.offset - e.loc.offset), s.len)),
                    s.dest,
                ));
            } else {
                reads.push((
                    Some(log.span(s.segment, s.offset, s.len)?),
                    (s.segment, s.offset),
                    None,
                    s.dest,
                ));
            }
        }
        drop(log);
        for (e, _) in refs.values() {
            self.note_ref_read(id, e.seq);
        }
        let mut files: std::collections::HashMap<&str, std::fs::File> =
            std::collections::HashMap::new();
        // Spans that are whole records are checked against their checksums as read.
        let whole: std::collections::HashMap<(u64, u64, u64), &pdcx_store::Location> = pieces
            .iter()
            .filter(|(e, _)| e.external.is_none() || e.home.is_some())
            .map(|(e, _)| ((e.loc.segment, e.loc.offset, e.loc.len), &e.loc))
            .collect();
        for (span, span_at, file_span, dest) in reads {
            let len = span
                .as_ref()
                .map_or_else(|| file_span.map_or(0, |f| f.2), |s| s.len());
            let dst = out
                .get_mut(dest as usize..(dest + len) as usize)
                .ok_or_else(|| Error::internal("read span outside the output"))?;
            match (span, file_span) {
                (Some(span), _) => {
                    span.read_into(dst)?;
                    if let Some(whole) = whole.get(&(span_at.0, span_at.1, len)) {
                        pdcx_store::verify_payload(whole, dst)?;
                    }
                }
                (None, Some((r, offset, _))) => {
                    use std::os::unix::fs::FileExt;
                    let f = match files.entry(r.path.as_str()) {
                        std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                        std::collections::hash_map::Entry::Vacant(v) => {
                            v.insert(std::fs::File::open(&r.path).map_err(|err| {
                                Error::io(
                                    &format!(
                                        "opening {} (an object imported by reference)",
                                        r.path
                                    ),
                                    &err,
                                )
                            })?)
                        }
                    };
                    f.read_exact_at(dst, offset).map_err(|err| {
                        Error::io(
                            &format!("reading {} (an object imported by reference)", r.path),
                            &err,
                        )
                    })?;
                }
                (None, None) => {}
            }
        }
        self.io.cache_lookups(0, pieces.len());
        Ok(true)
    }

    /// For a read a same-node client performs itself: the (segment,
    /// st_dev, st_ino) of every log segment holding `pieces`, if each piece's bytes are whole
    /// records in a live segment (`SegmentLog::is_written`: synced or not), else None (the
    /// caller serves that read itself). Such bytes are never rewritten or cut: the log only
    /// appends, a failed append and recovery cut only past the last whole record (a server
    /// killed mid-append leaves every earlier record in the page cache), and retirement
    /// deletes whole files (see `docs/ARCHITECTURE.md`, "One read"). So a client reading such
    /// a span later gets exactly these bytes, or finds the file gone (then it falls back).
    /// Unsynced bytes are planned too (a workflow step reads the files the previous
    /// one closed without fsync): only losing the node loses them, and its clients with it.
    pub fn committed_segments(
        &self,
        pieces: &[(Arc<Extent>, Region)],
    ) -> Option<Vec<(u64, u64, u64)>> {
        use std::os::unix::fs::MetadataExt;
        let log = self.log();
        let mut segs: Vec<u64> = Vec::new();
        for (e, _) in pieces {
            if !e.in_log || !log.has_segment(e.loc.segment) || !log.is_written(&e.loc) {
                return None;
            }
            segs.push(e.loc.segment);
        }
        segs.sort_unstable();
        segs.dedup();
        // Stat under the log lock: the files cannot be retired (unlinked) meanwhile. A log on
        // a simulated file system (crash tests) has no such files: no plan.
        let mut known = self.segment_files.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() > 4 * segs.len() + 256 {
            known.retain(|s, _| log.has_segment(*s)); // drop retired segments
        }
        segs.into_iter()
            .map(|s| {
                if let Some(&(dev, ino)) = known.get(&s) {
                    return Some((s, dev, ino));
                }
                let m = std::fs::metadata(log.segment_path(s)).ok()?;
                known.insert(s, (m.dev(), m.ino()));
                Some((s, m.dev(), m.ino()))
            })
            .collect()
    }

    /// Bytes `span` of `e` from its home tier. A blob that is gone may have been moved (the
    /// rebalancer demotes a blob, records the new home, then deletes the old one) after this
    /// reader copied `e`: then the home is looked up again in the index and read there.
    pub(super) fn read_home(
        &self,
        obj: &ObjectMeta,
        e: &Extent,
        span: (u64, u64),
    ) -> Result<Arc<Vec<u8>>> {
        let home = self.current_home(obj.id, e)?;
        match self.read_from_tier(obj, e, &home, span) {
            Err(err) if err.kind == ErrorKind::NotFound => {
                let now = self
                    .index()
                    .get(&obj.id)
                    .and_then(|v| v.iter().find(|x| x.seq == e.seq))
                    .and_then(|x| x.home.clone());
                let still = self
                    .index()
                    .get(&obj.id)
                    .is_some_and(|v| v.iter().any(|x| x.seq == e.seq));
                match now {
                    Some(moved) if moved != home => self.read_from_tier(obj, e, &moved, span),
                    // Dropped (hidden by newer writes, or its object deleted) since the
                    // reader looked it up: the read starts again (`again_if_moved`).
                    _ if !still => Err(Self::lost(obj.id, e.seq)),
                    _ => Err(err),
                }
            }
            r => r,
        }
    }

    /// The home of `e` as the index knows it now (a reader's copy of `e` may predate it).
    pub fn current_home(&self, id: ObjectId, e: &Extent) -> Result<Home> {
        if let Some(h) = &e.home {
            return Ok(h.clone());
        }
        self.index()
            .get(&id)
            .and_then(|v| v.iter().find(|x| x.seq == e.seq))
            .and_then(|x| x.home.clone())
            .ok_or_else(|| Self::lost(id, e.seq))
    }

    /// Bytes `[lo, hi)` of extent `e`'s raw payload from its home tier: a byte-range read for
    /// uncompressed blobs, else the whole blob decoded (and cached, so neighbouring pieces of
    /// the same read hit the cache).
    pub fn read_from_tier(
        &self,
        obj: &ObjectMeta,
        e: &Extent,
        home: &Home,
        (lo, hi): (u64, u64),
    ) -> Result<Arc<Vec<u8>>> {
        let t = self.tiers()?;
        let key = t.blob_key(obj.id, e.seq, home);
        t.note_read(obj.id, e.seq);
        if home.codec == "none" {
            let mut buf = vec![0u8; (hi - lo) as usize];
            t.get_range(home.tier, &key, home.offset + lo, &mut buf)?;
            return Ok(Arc::new(buf));
        }
        let mut blob = vec![0u8; home.stored_len as usize];
        t.get_range(home.tier, &key, home.offset, &mut blob)?;
        let raw = codec::decode(&home.codec, obj.dtype, &e.region, &blob, e.loc.len)?;
        if raw.len() as u64 != e.loc.len {
            return Err(Error::internal(format!(
                "extent {} of object {:#x} decoded to {} bytes, not {}",
                e.seq,
                obj.id,
                raw.len(),
                e.loc.len
            )));
        }
        Ok(self.cache_whole(e, raw, (lo, hi)))
    }

    /// Caches an extent's whole raw payload (read from a tier or a file and decoded, so the
    /// neighbouring pieces of the same read hit the cache) and returns bytes `[lo, hi)` of it.
    pub(super) fn cache_whole(
        &self,
        e: &Extent,
        raw: Vec<u8>,
        (lo, hi): (u64, u64),
    ) -> Arc<Vec<u8>> {
        let raw = Arc::new(raw);
        self.cache.insert(e.loc, raw.clone());
        if lo == 0 && hi == raw.len() as u64 {
            raw
        } else {
            Arc::new(raw[lo as usize..hi as usize].to_vec())
        }
    }
}
