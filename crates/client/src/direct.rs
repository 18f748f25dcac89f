//! One-copy reads for a client on its server's node.
//!
//! Instead of asking the server for the bytes, the client asks it for a *read plan*
//! (`Request::ReadPlan`): where each part of the region lives in the server's segment log,
//! in the writes' sequence order, and whether the rest takes the fill value. The client opens
//! the segment files read-only (same node, same user) and `pread`s each span straight into
//! the caller's buffer: page cache → user buffer, one copy, no server CPU for the bytes.
//!
//! Why a plan stays true until the client has read it: the server plans only spans inside a
//! segment's *committed* length, and the log never rewrites committed bytes of a segment file
//! (it only appends; recovery truncates only uncommitted tails; retirement and node loss
//! remove whole files). So a span read later is either exactly the planned bytes, or its
//! file is gone (ENOENT) or is another file at the same path (a new log after node loss:
//! caught by the (st_dev, st_ino) the plan names). In both cases, and on a short read, the
//! client reads that item the usual way. A plan is never trusted blindly: every span is
//! checked against the output buffer before a byte is read, and must lie inside one of the
//! log records the plan names.
//!
//! What the log does not do, something else on the node may: a segment file is an ordinary
//! file of the deployment's user, and a one-copy writer has a segment open for writing
//! (its own, `pdcx_store::WriterLease`, so it reaches only its own records), so a stray
//! `pwrite` may change committed records and `truncate` may cut them. So nothing is returned unchecked: after its bytes are copied, every log record
//! a span or piece read from is checked whole against its payload checksum (the plan carries
//! each record's location and crc32c). A span that is a whole record is checked as it is
//! read (1 MiB `pread`s folded into the checksum while in cache); any other record is
//! checked from the mapped segment (or read again when it does not map). A mismatch is an
//! error (the server would return the same damaged bytes); a segment cut under a mapping
//! reads zeros instead of killing the client with SIGBUS (`pdcx_store::mapguard`) and the
//! item is read the usual way, where the server reports the short file.
//!
//! `PDCX_DIRECT_READ=0` turns it off (reads then go through the server as before).

use crate::filecache::Window;
use crate::segfile::SegFile;
use pdcx_core::protocol::{PiecePlans, PlanPiece, PlanSpan, ReadPlan, ReadPlans};
use pdcx_core::region::{fill_elements, gather_pieces, Region};
use pdcx_core::{Error, ErrorKind, Result};
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Open segment files kept per client; beyond this many the cache is emptied (a client
/// reading from very many segments reopens them, which costs an `open` each).
const MAX_OPEN: usize = 256;

pub(crate) fn enabled_by_env() -> bool {
    pdcx_core::config::DIRECT_READ.switch_or_default()
}

/// The segment files this client has open, per (server, segment).
#[derive(Default)]
pub(crate) struct DirectReads {
    files: Mutex<HashMap<(u32, u64), Arc<SegFile>>>,
    /// Files outside the logs that plans named (objects imported by reference), by path.
    ref_files: Mutex<HashMap<String, Arc<SegFile>>>,
    /// When descriptors of unlinked (retired) segments were last closed.
    swept: Mutex<Option<Instant>>,
    /// Servers whose log this client may not open (another user, another mount namespace):
    /// their reads go through the server from then on, without asking for plans.
    refused: Mutex<HashSet<u32>>,
}

/// How often at most the open descriptors are checked for retired segments, unless a plan
/// answer suggests a retirement.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How executing one plan ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Done,
    /// A segment file is gone, changed or shorter than planned: read this item the usual way.
    Fallback,
}

impl DirectReads {
    /// Whether this client may read server `rank`'s log files (not refused so far).
    pub(crate) fn allowed(&self, rank: u32) -> bool {
        !self
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&rank)
    }

    /// Called with every plan answer: closes the descriptors of segments that were retired
    /// (unlinked) since they were opened, so they do not keep the disk space allocated. Right
    /// away when an item got no plan and no holders (its extents may have moved to a tier),
    /// else at most every [`SWEEP_EVERY`].
    pub(crate) fn note_plans(&self, plans: &ReadPlans) {
        let hint = plans
            .plans
            .iter()
            .enumerate()
            .any(|(i, p)| p.is_none() && plans.holders.get(i).is_none_or(Vec::is_empty));
        let now = Instant::now();
        {
            let mut last = self.swept.lock().unwrap_or_else(|p| p.into_inner());
            if !hint && last.is_some_and(|t| now.duration_since(t) < SWEEP_EVERY) {
                return;
            }
            *last = Some(now);
        }
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        files.retain(|_, f| f.file.metadata().is_ok_and(|m| m.nlink() > 0));
    }

    /// Segment `seg` of server `rank`, opened read-only from `dir` unless the open file is
    /// already that very file (same device and inode as the plan names). None when the file
    /// is gone or is not the file the plan means.
    fn file(&self, rank: u32, dir: &str, seg: u64, dev: u64, ino: u64) -> Option<Arc<SegFile>> {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = files.get(&(rank, seg)).cloned() {
            if f.is(dev, ino) {
                // A retired segment stays readable through this descriptor (its bytes are
                // exactly what the plan means), but the disk space is only freed once it is
                // closed: stop caching it.
                if f.file.metadata().map_or(true, |m| m.nlink() == 0) {
                    files.remove(&(rank, seg));
                }
                return Some(f);
            }
        }
        let file = match SegFile::open(dir, seg, false) {
            Ok(Some(f)) if f.is(dev, ino) => f,
            Ok(_) => {
                files.remove(&(rank, seg));
                return None;
            }
            Err(e) => {
                if e.kind() == std::io::ErrorKind::PermissionDenied {
                    crate::shm::debug(&format!(
                        "direct reads: cannot open {} ({e}); reads from server {rank} go through it",
                        SegFile::path(dir, seg).display()
                    ));
                    self.refused
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(rank);
                }
                return None;
            }
        };
        if files.len() >= MAX_OPEN {
            files.clear();
        }
        let f = Arc::new(file);
        files.insert((rank, seg), f.clone());
        Some(f)
    }

    /// Segment `seg` as [`file`](Self::file) opens it, once per read of `part`.
    fn part_file(&self, part: &Part, seg: u64, dev: u64, ino: u64) -> Option<Arc<SegFile>> {
        if let Some(f) = part.opened.borrow().get(&seg) {
            return Some(f.clone());
        }
        let f = self.file(part.rank, &part.plans.dir, seg, dev, ino)?;
        part.opened.borrow_mut().insert(seg, f.clone());
        Some(f)
    }

    /// A file outside the log a plan names, opened read-only unless the open one
    /// is already that very file; None when it is gone or another file.
    fn ref_file(&self, path: &str, dev: u64, ino: u64) -> Option<Arc<SegFile>> {
        let mut files = self.ref_files.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = files.get(path).cloned() {
            if f.is(dev, ino) {
                return Some(f);
            }
        }
        let file = SegFile::open_path(std::path::Path::new(path))
            .ok()
            .flatten()?;
        if !file.is(dev, ino) {
            files.remove(path);
            return None;
        }
        if files.len() >= MAX_OPEN {
            files.clear();
        }
        let f = Arc::new(file);
        files.insert(path.to_owned(), f.clone());
        Some(f)
    }

    /// Executes `plan` (one item of `plans`, from server `rank`) into `out`. An error when the
    /// plan does not fit `out` (a server bug: nothing is read); `Fallback` when the log
    /// changed under it (`out` may be partly written: the caller overwrites it all).
    pub(crate) fn execute(
        &self,
        rank: u32,
        plans: &ReadPlans,
        plan: &ReadPlan,
        out: &mut [u8],
    ) -> Result<Outcome> {
        check(plans, plan, out.len())?;
        if let Some(pattern) = &plan.fill {
            fill_elements(out, pattern);
        }
        let part = Part::new(rank, plans, &plan.records);
        if small_spans(&plan.spans) {
            if let Some(maps) = self.maps(
                rank,
                &plans.dir,
                &plans.segments,
                plan.spans.iter().map(|s| (s.segment, s.offset + s.len)),
            )? {
                // Each span copied from the mapped segment: no system call per span.
                for s in &plan.spans {
                    let m = &maps[&s.segment];
                    out[s.dest as usize..(s.dest + s.len) as usize]
                        .copy_from_slice(&m[s.offset as usize..(s.offset + s.len) as usize]);
                }
                return self.verify(&part, &plan.spans, &[]);
            }
            return self.execute_coalesced(&part, &plan.spans, out);
        }
        let mut checked = Vec::new();
        for s in &plan.spans {
            if !self.read_span(&part, s, out, &mut checked)? {
                return Ok(Outcome::Fallback);
            }
        }
        self.verify(&part, &plan.spans, &checked)
    }

    /// Checks whole every log record of `part` that `spans` read from, after their bytes
    /// were copied, except those in `checked` (verified as they were read): `Done` when all
    /// match their checksums; `Fallback` when a segment is gone, short or was cut under its
    /// mapping (the caller reads the usual way); an error when a record's bytes do not match
    /// its checksum (changed after it was committed: the server has the same bytes).
    fn verify(&self, part: &Part, spans: &[PlanSpan], checked: &[usize]) -> Result<Outcome> {
        let mut todo: Vec<usize> = Vec::new();
        for s in spans {
            if let Some(r) = record_of(part.records, s) {
                todo.push(r);
            }
        }
        todo.sort_unstable();
        todo.dedup();
        todo.retain(|r| !checked.contains(r));
        for r in todo {
            let (seg, offset, len, crc) = part.records[r];
            let Some(&(_, dev, ino)) = part.plans.segments.iter().find(|x| x.0 == seg) else {
                return Err(Error::protocol(
                    "refused read plan: it names a segment it does not identify",
                ));
            };
            let Some(f) = self.part_file(part, seg, dev, ino) else {
                return Ok(Outcome::Fallback);
            };
            let (Ok(at), Ok(n)) = (usize::try_from(offset), usize::try_from(len)) else {
                return Ok(Outcome::Fallback);
            };
            let ok = match offset.checked_add(len).and_then(|end| f.mapped(end)) {
                Some(m) => {
                    let ok = pdcx_store::payload_matches(&m[at..at + n], crc);
                    if m.faulted() {
                        f.unmap();
                        return Ok(Outcome::Fallback);
                    }
                    ok
                }
                None => {
                    let mut buf = vec![0u8; n];
                    if f.file.read_exact_at(&mut buf, offset).is_err() {
                        return Ok(Outcome::Fallback);
                    }
                    pdcx_store::payload_matches(&buf, crc)
                }
            };
            if !ok {
                return Err(damaged(part.rank, seg, offset, len));
            }
        }
        Ok(Outcome::Done)
    }

    /// Many small spans (a point's history, a small box across chunk rows: one span per row
    /// of the output): the file ranges they need are merged (gaps up to [`COALESCE_GAP`]) and
    /// each merged range is read with one `pread`; then every span is copied from those
    /// buffers in the plan's order, so overlapping writes still resolve as planned.
    fn execute_coalesced(
        &self,
        part: &Part,
        spans: &[PlanSpan],
        out: &mut [u8],
    ) -> Result<Outcome> {
        let mut order: Vec<usize> = (0..spans.len()).collect();
        order.sort_by_key(|&i| (spans[i].segment, spans[i].offset));
        // Merged ranges: (segment, start, end), and for each span the range it lies in.
        let mut ranges: Vec<(u64, u64, u64)> = Vec::new();
        let mut in_range = vec![0usize; spans.len()];
        for &i in &order {
            let s = &spans[i];
            match ranges.last_mut() {
                Some(r)
                    if r.0 == s.segment
                        && s.offset <= r.2 + COALESCE_GAP
                        && s.offset + s.len - r.1 <= COALESCE_MAX =>
                {
                    r.2 = r.2.max(s.offset + s.len)
                }
                _ => ranges.push((s.segment, s.offset, s.offset + s.len)),
            }
            in_range[i] = ranges.len() - 1;
        }
        let mut bufs = Vec::with_capacity(ranges.len());
        for &(segment, start, end) in &ranges {
            let mut buf = vec![0u8; (end - start) as usize];
            let whole = PlanSpan {
                seq: 0,
                segment,
                offset: start,
                len: end - start,
                dest: 0,
            };
            if !self.read_span(part, &whole, &mut buf, &mut Vec::new())? {
                return Ok(Outcome::Fallback);
            }
            bufs.push(buf);
        }
        for (i, s) in spans.iter().enumerate() {
            let (_, start, _) = ranges[in_range[i]];
            let from = (s.offset - start) as usize;
            out[s.dest as usize..(s.dest + s.len) as usize]
                .copy_from_slice(&bufs[in_range[i]][from..from + s.len as usize]);
        }
        self.verify(part, spans, &[])
    }

    /// Executes the plans several holders gave for their parts of one item (each asked with
    /// `held`): fill when any part needs it, then every span of every part in the order of
    /// the writes' sequence numbers, so overlaps between holders resolve as at the owner.
    pub(crate) fn execute_merged(
        &self,
        parts: &[(u32, ReadPlans)],
        out: &mut [u8],
    ) -> Result<Outcome> {
        let mut spans: Vec<(u64, usize, PlanSpan)> = Vec::new();
        let mut pattern: Option<&[u8]> = None;
        let mut checks: Vec<(Part, Vec<usize>)> = Vec::with_capacity(parts.len());
        for (k, (rank, plans)) in parts.iter().enumerate() {
            let plan = plans
                .plans
                .first()
                .and_then(Option::as_ref)
                .ok_or_else(|| Error::internal("merged read of a part without a plan"))?;
            check(plans, plan, out.len())?;
            checks.push((Part::new(*rank, plans, &plan.records), Vec::new()));
            if let Some(p) = &plan.fill {
                pattern = Some(p);
            }
            spans.extend(plan.spans.iter().map(|s| (s.seq, k, *s)));
        }
        // Stable: spans of one write keep their order.
        spans.sort_by_key(|x| x.0);
        if let Some(p) = pattern {
            fill_elements(out, p);
        }
        for (_, k, s) in &spans {
            let (part, checked) = &mut checks[*k];
            if !self.read_span(part, s, out, checked)? {
                return Ok(Outcome::Fallback);
            }
        }
        for (k, (part, checked)) in checks.iter().enumerate() {
            let mine: Vec<PlanSpan> = spans.iter().filter(|x| x.1 == k).map(|x| x.2).collect();
            if self.verify(part, &mine, checked)? == Outcome::Fallback {
                return Ok(Outcome::Fallback);
            }
        }
        Ok(Outcome::Done)
    }

    /// The bytes of 1-D byte region `want` as a slice of the mapped log segment
    /// holding piece `p` of `plan` (server `rank`'s answer), when `p` holds them all; None
    /// when it does not, or the segment cannot be mapped (the caller reads another way).
    pub(crate) fn map_piece(
        &self,
        rank: u32,
        plan: &PiecePlans,
        p: &PlanPiece,
        want: &Region,
    ) -> Result<Option<Window>> {
        if plan.elem != 1 || p.region.ndim() != 1 || want.ndim() != 1 || !p.region.contains(want) {
            return Ok(None);
        }
        if !plan.dir.starts_with('/') {
            return Err(Error::protocol(format!(
                "refused piece plan: log directory {:?} is not absolute",
                plan.dir
            )));
        }
        let (len, skip) = (want.count[0], want.offset[0] - p.region.offset[0]);
        let (Some(start), Ok(n)) = (p.offset.checked_add(skip), usize::try_from(len)) else {
            return Ok(None);
        };
        let Some(end) = start.checked_add(len) else {
            return Ok(None);
        };
        let Some(whole) = p
            .region
            .byte_len(1)
            .ok()
            .and_then(|l| p.offset.checked_add(l))
        else {
            return Ok(None);
        };
        let Some(mut maps) = self.maps(
            rank,
            &plan.dir,
            &plan.segments,
            std::iter::once((p.segment, end.max(whole))),
        )?
        else {
            return Ok(None);
        };
        let Some(map) = maps.remove(&p.segment) else {
            return Ok(None);
        };
        // The whole record is checked once, when the window is made: the window is then read
        // within one file read-ahead (a later change to the record is not seen; a cut is).
        let ok = pdcx_store::payload_matches(&map[p.offset as usize..whole as usize], p.crc);
        if map.faulted() {
            self.forget_map(rank, &plan.segments, p.segment);
            return Ok(None);
        }
        if !ok {
            return Err(damaged(rank, p.segment, p.offset, whole - p.offset));
        }
        Ok(Some(Window::Mapped {
            map,
            start: start as usize,
            len: n,
        }))
    }

    /// Drops the mapping of segment `seg` of server `rank` (a read found it cut under it).
    fn forget_map(&self, rank: u32, segments: &[(u64, u64, u64)], seg: u64) {
        let files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        if let (Some(f), Some(&(_, dev, ino))) = (
            files.get(&(rank, seg)),
            segments.iter().find(|x| x.0 == seg),
        ) {
            if f.is(dev, ino) {
                f.unmap();
            }
        }
    }

    /// The log segments `ends` name (segment, end of the bytes needed), each mapped with at
    /// least the bytes needed (`SegFile::mapped`), or None when one is not a log segment of
    /// `segments`, is gone, is another file or is too short: then the caller reads the usual
    /// way. An error when a segment is not identified (a server bug).
    fn maps(
        &self,
        rank: u32,
        dir: &str,
        segments: &[(u64, u64, u64)],
        ends: impl Iterator<Item = (u64, u64)>,
    ) -> Result<Option<HashMap<u64, Arc<pdcx_store::MappedFile>>>> {
        let mut need: HashMap<u64, u64> = HashMap::new();
        for (seg, end) in ends {
            let e = need.entry(seg).or_default();
            *e = (*e).max(end);
        }
        let mut maps = HashMap::with_capacity(need.len());
        for (seg, end) in need {
            let Some(&(_, dev, ino)) = segments.iter().find(|x| x.0 == seg) else {
                return Err(Error::protocol(
                    "refused read plan: it names a segment it does not identify",
                ));
            };
            let Some(m) = self
                .file(rank, dir, seg, dev, ino)
                .and_then(|f| f.mapped(end))
            else {
                return Ok(None);
            };
            maps.insert(seg, m);
        }
        Ok(Some(maps))
    }

    /// The elements of `bbox` taken every `step[d]` (C order) into `out`,
    /// gathered from the mapped log segments that `parts` (servers' answers to `PiecePlan`:
    /// the owner's alone, or each holder's) name, touching only the selected bytes. Pieces of
    /// several holders are painted in sequence order, as the owner merges them. `Fallback`
    /// when a segment cannot be mapped (the caller asks the owner).
    pub(crate) fn gather(
        &self,
        parts: &[(u32, PiecePlans)],
        bbox: &Region,
        step: &[u64],
        out: &mut [u8],
    ) -> Result<Outcome> {
        let n = bbox.ndim();
        let bad = |what: String| Err(Error::protocol(format!("refused piece plan: {what}")));
        let Some(elem) = parts.first().map(|p| p.1.elem) else {
            return Ok(Outcome::Fallback);
        };
        let selected = (0..n)
            .map(|d| bbox.count[d].div_ceil(step[d]))
            .fold(1u64, u64::saturating_mul);
        if elem == 0 || elem > 1 << 20 || parts.iter().any(|p| p.1.elem != elem) {
            return bad(format!("elements of {elem} bytes"));
        }
        if selected.saturating_mul(elem) != out.len() as u64 {
            return Err(Error::invalid(format!(
                "a strided read of {selected} elements of {elem} bytes needs {} bytes, the buffer has {}",
                selected.saturating_mul(elem),
                out.len()
            )));
        }
        let elem = elem as usize;
        let mut pieces: Vec<(u64, usize, &PlanPiece)> = Vec::new();
        let mut maps = Vec::with_capacity(parts.len());
        for (k, (rank, plan)) in parts.iter().enumerate() {
            if !plan.pieces.is_empty() && !plan.dir.starts_with('/') {
                return bad(format!("log directory {:?} is not absolute", plan.dir));
            }
            let mut ends = Vec::with_capacity(plan.pieces.len());
            for p in &plan.pieces {
                let len = p.region.byte_len(elem).ok();
                match (
                    p.region.ndim() == n,
                    len.and_then(|l| p.offset.checked_add(l)),
                ) {
                    (true, Some(end)) => ends.push((p.segment, end)),
                    _ => return bad(format!("piece {} does not fit", p.region)),
                }
                pieces.push((p.seq, k, p));
            }
            let Some(m) = self.maps(*rank, &plan.dir, &plan.segments, ends.into_iter())? else {
                return Ok(Outcome::Fallback);
            };
            maps.push(m);
        }
        // A part whose pieces do not cover the region carries the fill; where the parts
        // together cover it, their pieces paint over it.
        if let Some(p) = parts.iter().find_map(|p| p.1.fill.as_ref()) {
            if p.len() != elem {
                return bad(format!(
                    "fill of {} bytes for {elem}-byte elements",
                    p.len()
                ));
            }
            fill_elements(out, p);
        }
        // Stable: pieces of one part keep their order.
        pieces.sort_by_key(|x| x.0);
        let mut srcs = Vec::with_capacity(pieces.len());
        let mut whose = Vec::with_capacity(pieces.len());
        for (_, k, p) in pieces {
            let m = &maps[k][&p.segment];
            let src = &m[p.offset as usize..p.offset as usize + p.region.byte_len(elem)? as usize];
            srcs.push((src, &p.region));
            whose.push((k, p));
        }
        gather_pieces(&srcs, bbox, step, elem, out);
        // Every extent checked whole after the copy, so a change made before or while it ran
        // is seen; then whether a segment was cut under its mapping meanwhile.
        let bad = srcs
            .iter()
            .zip(&whose)
            .find(|((src, _), (_, p))| !pdcx_store::payload_matches(src, p.crc))
            .map(|(_, &(k, p))| (k, p));
        for (k, m) in maps.iter().enumerate() {
            for (seg, map) in m {
                if map.faulted() {
                    self.forget_map(parts[k].0, &parts[k].1.segments, *seg);
                    return Ok(Outcome::Fallback);
                }
            }
        }
        if let Some((k, p)) = bad {
            let len = p.region.byte_len(elem)?;
            return Err(damaged(parts[k].0, p.segment, p.offset, len));
        }
        Ok(Outcome::Done)
    }

    /// Reads span `s` of a checked plan into `out`; false if its file is gone, another file
    /// or too short. A span that is a whole log record of `part` is checked against its
    /// checksum as it is read (and the record added to `checked`): a mismatch is an error.
    fn read_span(
        &self,
        part: &Part,
        s: &PlanSpan,
        out: &mut [u8],
        checked: &mut Vec<usize>,
    ) -> Result<bool> {
        let (rank, plans) = (part.rank, part.plans);
        if let Some((_, path, dev, ino)) = plans.files.iter().find(|x| x.0 == s.segment) {
            // A file outside the log (an object imported by reference).
            let Some(f) = self.ref_file(path, *dev, *ino) else {
                return Ok(false);
            };
            let dst = &mut out[s.dest as usize..(s.dest + s.len) as usize];
            return Ok(f.file.read_exact_at(dst, s.offset).is_ok());
        }
        let Some(&(_, dev, ino)) = plans.segments.iter().find(|x| x.0 == s.segment) else {
            return Err(Error::protocol(
                "refused read plan: it names a segment it does not identify",
            ));
        };
        let Some(f) = self.part_file(part, s.segment, dev, ino) else {
            return Ok(false);
        };
        let dst = &mut out[s.dest as usize..(s.dest + s.len) as usize];
        let whole = record_of(part.records, s).filter(|&r| {
            let (_, offset, len, _) = part.records[r];
            (offset, len) == (s.offset, s.len)
        });
        let Some(r) = whole else {
            return Ok(f.file.read_exact_at(dst, s.offset).is_ok());
        };
        // Read in pieces, each folded into the checksum while it is still in cache.
        let mut crc = 0u32;
        for (piece, at) in dst
            .chunks_mut(CHECK_PIECE)
            .zip((s.offset..).step_by(CHECK_PIECE))
        {
            if f.file.read_exact_at(piece, at).is_err() {
                return Ok(false);
            }
            crc = crc32c::crc32c_append(crc, piece);
        }
        if crc != part.records[r].3 {
            return Err(damaged(rank, s.segment, s.offset, s.len));
        }
        checked.push(r);
        Ok(true)
    }
}

/// One server's plan as a read executes it: which server, its answer (log directory,
/// segment identities) and the log records the plan reads from.
struct Part<'a> {
    rank: u32,
    plans: &'a ReadPlans,
    records: &'a [(u64, u64, u64, u32)],
    /// The segment files this read opened: a record is checked through the very descriptor
    /// its bytes were read through (a retired segment is no longer at its path).
    opened: std::cell::RefCell<HashMap<u64, Arc<SegFile>>>,
}

impl<'a> Part<'a> {
    fn new(rank: u32, plans: &'a ReadPlans, records: &'a [(u64, u64, u64, u32)]) -> Self {
        Part {
            rank,
            plans,
            records,
            opened: Default::default(),
        }
    }
}

/// A span that is a whole record is read in pieces of this size, each checksummed as read.
const CHECK_PIECE: usize = 1 << 20;

/// The index of the record of `records` (sorted, see [`check`]) that span `s` lies in.
fn record_of(records: &[(u64, u64, u64, u32)], s: &PlanSpan) -> Option<usize> {
    let i = records.partition_point(|r| (r.0, r.1) <= (s.segment, s.offset));
    let r = i.checked_sub(1)?;
    let (seg, offset, len, _) = records[r];
    (seg == s.segment && s.offset.checked_add(s.len)? <= offset.checked_add(len)?).then_some(r)
}

/// The error for a log record whose bytes no longer match its checksum.
fn damaged(rank: u32, seg: u64, offset: u64, len: u64) -> Error {
    Error::new(
        ErrorKind::Io,
        format!(
            "the {len} bytes at offset {offset} of server {rank}'s log segment {seg} no longer match their checksum: a committed write was changed (a stray one-copy write?); the server returns the same damaged bytes"
        ),
    )
}

/// Spans closer than this in one file are read with one `pread` (the bytes between are read
/// and dropped) when a plan has many small spans.
const COALESCE_GAP: u64 = 4 << 10;
/// Largest merged read.
const COALESCE_MAX: u64 = 4 << 20;

/// Whether a plan's spans are many and small enough to be read in merged ranges.
fn small_spans(spans: &[PlanSpan]) -> bool {
    spans.len() > 16 && spans.iter().map(|s| s.len).sum::<u64>() / (spans.len() as u64) < 4096
}

/// Refuses a plan that does not describe exactly an `len`-byte output: every span inside it,
/// a fill pattern that tiles it.
fn check(plans: &ReadPlans, plan: &ReadPlan, len: usize) -> Result<()> {
    let bad = |what: String| Err(Error::protocol(format!("refused read plan: {what}")));
    if plan.len != len as u64 {
        return bad(format!(
            "it is for {} bytes, the buffer has {len}",
            plan.len
        ));
    }
    if let Some(p) = &plan.fill {
        if p.is_empty() || !len.is_multiple_of(p.len()) {
            return bad(format!(
                "fill pattern of {} bytes does not tile {len} bytes",
                p.len()
            ));
        }
    }
    let in_log = |s: &PlanSpan| !plans.files.iter().any(|f| f.0 == s.segment);
    if plan.spans.iter().any(in_log) && !plans.dir.starts_with('/') {
        return bad(format!("log directory {:?} is not absolute", plans.dir));
    }
    if let Some(f) = plans.files.iter().find(|f| !f.1.starts_with('/')) {
        return bad(format!("file {:?} is not absolute", f.1));
    }
    if plan
        .records
        .windows(2)
        .any(|w| (w[0].0, w[0].1) >= (w[1].0, w[1].1))
    {
        return bad("its records are not in order".into());
    }
    for s in &plan.spans {
        let end = s.dest.checked_add(s.len);
        if !matches!(end, Some(e) if e <= len as u64) || s.offset.checked_add(s.len).is_none() {
            return bad(format!(
                "span of {} bytes to {} is outside the {len}-byte buffer",
                s.len, s.dest
            ));
        }
        // Nothing is returned unchecked: a log span must lie in a record the plan names.
        if in_log(s) && record_of(&plan.records, s).is_none() {
            return bad(format!(
                "span of {} bytes at {} of segment {} is in no record it names",
                s.len, s.offset, s.segment
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn plans_for(dir: &str, seg: u64) -> ReadPlans {
        let path = pdcx_store::segment_path(dir, seg);
        let m = std::fs::metadata(path).unwrap();
        ReadPlans {
            dir: dir.to_owned(),
            segments: vec![(seg, m.dev(), m.ino())],
            plans: vec![],
            holders: vec![],
            files: vec![],
        }
    }

    fn span(offset: u64, len: u64, dest: u64) -> PlanSpan {
        PlanSpan {
            seq: 1,
            segment: 1,
            offset,
            len,
            dest,
        }
    }

    const DATA: &[u8] = b"0123456789abcdef";

    /// The one record the tests' segment holds: all of it.
    fn whole() -> Vec<(u64, u64, u64, u32)> {
        vec![(1, 0, 16, crc32c::crc32c(DATA))]
    }

    fn setup() -> (tempfile::TempDir, String) {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(pdcx_store::segment_path(d.path(), 1), DATA).unwrap();
        let s = d.path().to_str().unwrap().to_owned();
        (d, s)
    }

    #[test]
    fn spans_land_in_order_over_the_fill() {
        let (_d, dir) = setup();
        let plans = plans_for(&dir, 1);
        let plan = ReadPlan {
            len: 8,
            fill: Some(vec![b'.', b'-']),
            spans: vec![span(0, 4, 0), span(10, 2, 2)],
            records: whole(),
        };
        let mut out = [0u8; 8];
        let r = DirectReads::default().execute(0, &plans, &plan, &mut out);
        assert_eq!(r.unwrap(), Outcome::Done);
        assert_eq!(&out, b"01ab.-.-");
    }

    #[test]
    fn many_small_spans_are_read_in_merged_ranges_and_land_in_plan_order() {
        let (_d, dir) = setup();
        let plans = plans_for(&dir, 1);
        // 20 one-byte spans read backwards (file offset 15 - i % 16 to byte i), then two
        // spans onto byte 0: the later one in the plan wins, as a later write does.
        let mut spans: Vec<PlanSpan> = (0..20).map(|i| span(15 - i % 16, 1, i)).collect();
        spans.push(span(3, 1, 0));
        spans.push(span(7, 1, 0));
        assert!(small_spans(&spans));
        let plan = ReadPlan {
            len: 20,
            fill: None,
            spans,
            records: whole(),
        };
        let mut out = [0u8; 20];
        let r = DirectReads::default().execute(0, &plans, &plan, &mut out);
        assert_eq!(r.unwrap(), Outcome::Done);
        assert_eq!(&out, b"7edcba9876543210fedc");
    }

    #[test]
    fn a_span_outside_the_buffer_is_refused_before_reading() {
        let (_d, dir) = setup();
        let plans = plans_for(&dir, 1);
        let mut out = [7u8; 8];
        for bad in [span(0, 4, 5), span(0, 1, u64::MAX), span(u64::MAX, 2, 0)] {
            let plan = ReadPlan {
                len: 8,
                fill: None,
                spans: vec![span(0, 1, 0), bad],
                records: whole(),
            };
            let err = DirectReads::default()
                .execute(0, &plans, &plan, &mut out)
                .unwrap_err();
            assert_eq!(err.kind, ErrorKind::Protocol, "{err}");
            assert_eq!(out, [7u8; 8], "nothing read before the check");
        }
        let wrong_len = ReadPlan {
            len: 9,
            fill: None,
            spans: vec![],
            records: whole(),
        };
        assert!(DirectReads::default()
            .execute(0, &plans, &wrong_len, &mut out)
            .is_err());
        let bad_fill = ReadPlan {
            len: 8,
            fill: Some(vec![1, 2, 3]),
            spans: vec![],
            records: whole(),
        };
        assert!(DirectReads::default()
            .execute(0, &plans, &bad_fill, &mut out)
            .is_err());
    }

    #[test]
    fn a_gone_replaced_or_short_file_falls_back() {
        let (d, dir) = setup();
        let plans = plans_for(&dir, 1);
        let reads = DirectReads::default();
        let plan = ReadPlan {
            len: 4,
            fill: None,
            spans: vec![span(0, 4, 0)],
            records: whole(),
        };
        let mut out = [0u8; 4];
        assert_eq!(
            reads.execute(0, &plans, &plan, &mut out).unwrap(),
            Outcome::Done
        );
        // Past the end of the file: a short read.
        let short = ReadPlan {
            len: 4,
            fill: None,
            spans: vec![span(14, 4, 0)],
            // A record the file was cut inside of.
            records: vec![(1, 14, 4, 0)],
        };
        assert_eq!(
            reads.execute(0, &plans, &short, &mut out).unwrap(),
            Outcome::Fallback
        );
        // Retired (unlinked) after this client opened it: the open descriptor still has the
        // planned bytes, and is then dropped from the cache.
        let p = pdcx_store::segment_path(d.path(), 1);
        std::fs::remove_file(&p).unwrap();
        assert_eq!(
            reads.execute(0, &plans, &plan, &mut out).unwrap(),
            Outcome::Done
        );
        assert_eq!(&out, b"0123");
        assert!(reads.files.lock().unwrap().is_empty());
        // Gone, for a client that had not opened it: fall back.
        assert_eq!(
            reads.execute(0, &plans, &plan, &mut out).unwrap(),
            Outcome::Fallback
        );
        // Another file at the same path (a new log after node loss): not the planned file.
        std::fs::write(&p, b"XXXXXXXXXXXXXXXX").unwrap();
        let now = std::fs::metadata(&p).unwrap();
        if (now.dev(), now.ino()) != (plans.segments[0].1, plans.segments[0].2) {
            let r = DirectReads::default().execute(0, &plans, &plan, &mut out);
            assert_eq!(r.unwrap(), Outcome::Fallback);
        }
    }

    fn piece_plans(dir: &str, pieces: Vec<PlanPiece>, fill: Option<Vec<u8>>) -> PiecePlans {
        let p = plans_for(dir, 1);
        PiecePlans {
            dir: p.dir,
            segments: p.segments,
            elem: 1,
            fill,
            pieces,
            holders: vec![],
        }
    }

    fn piece(seq: u64, offset: u64, o: u64, c: u64) -> PlanPiece {
        PlanPiece {
            seq,
            segment: 1,
            offset,
            region: Region::new(vec![o], vec![c]).unwrap(),
            crc: crc32c::crc32c(
                DATA.get(offset as usize..(offset + c) as usize)
                    .unwrap_or(b""),
            ),
        }
    }

    #[test]
    fn strided_gather_paints_holders_pieces_in_sequence_order_over_the_fill() {
        let (_d, dir) = setup();
        let reads = DirectReads::default();
        let bbox = Region::new(vec![0], vec![10]).unwrap();
        // Holder A: elements 0..4 = "0123" (seq 5); holder B: 2..6 = "abcd" (seq 3, older).
        let a = piece_plans(&dir, vec![piece(5, 0, 0, 4)], Some(vec![b'.']));
        let b = piece_plans(&dir, vec![piece(3, 10, 2, 4)], Some(vec![b'.']));
        let mut out = [0u8; 5];
        let r = reads.gather(&[(0, a.clone()), (1, b)], &bbox, &[2], &mut out);
        assert_eq!(r.unwrap(), Outcome::Done);
        assert_eq!(&out, b"02c..", "elements 0, 2, 4, 6, 8");
        // What a server must not get away with: a piece past the file's end (fall back), a
        // piece of another rank, a buffer of another size, a fill of the wrong size.
        let far = piece_plans(&dir, vec![piece(1, 14, 0, 4)], None);
        assert_eq!(
            reads.gather(&[(0, far)], &bbox, &[2], &mut out).unwrap(),
            Outcome::Fallback
        );
        let mut flat = a.clone();
        flat.pieces[0].region = Region::new(vec![0, 0], vec![1, 4]).unwrap();
        assert_eq!(
            reads
                .gather(&[(0, flat)], &bbox, &[2], &mut out)
                .unwrap_err()
                .kind,
            ErrorKind::Protocol
        );
        let mut small = [0u8; 4];
        assert_eq!(
            reads
                .gather(&[(0, a.clone())], &bbox, &[2], &mut small)
                .unwrap_err()
                .kind,
            ErrorKind::InvalidArgument
        );
        let mut wide = a;
        wide.fill = Some(vec![0, 0]);
        assert_eq!(
            reads
                .gather(&[(0, wide)], &bbox, &[2], &mut out)
                .unwrap_err()
                .kind,
            ErrorKind::Protocol
        );
    }

    /// Overwrites bytes of the tests' segment the way a stray one-copy `pwrite` does.
    fn scribble(dir: &str, at: u64, bytes: &[u8]) {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(pdcx_store::segment_path(dir, 1))
            .unwrap();
        f.write_all_at(bytes, at).unwrap();
    }

    #[test]
    fn a_record_changed_after_its_commit_is_an_error_on_every_path() {
        let (_d, dir) = setup();
        let plans = plans_for(&dir, 1);
        let reads = DirectReads::default();
        let read = |plan: &ReadPlan| {
            let mut out = vec![0u8; plan.len as usize];
            reads.execute(0, &plans, plan, &mut out).map(|o| (o, out))
        };
        let whole_span = ReadPlan {
            len: 16,
            fill: None,
            spans: vec![span(0, 16, 0)],
            records: whole(),
        };
        let part_span = ReadPlan {
            len: 2,
            fill: None,
            spans: vec![span(3, 2, 0)],
            records: whole(),
        };
        let many_small = ReadPlan {
            len: 20,
            fill: None,
            spans: (0..20).map(|i| span(i % 16, 1, i)).collect(),
            records: whole(),
        };
        for plan in [&whole_span, &part_span, &many_small] {
            assert_eq!(read(plan).unwrap().0, Outcome::Done);
        }
        assert_eq!(&read(&part_span).unwrap().1, b"34");
        // Bytes the plan does not return, in the record it reads from: still refused (the
        // record is checked whole).
        scribble(&dir, 12, b"XY");
        for plan in [&whole_span, &part_span, &many_small] {
            let err = read(plan).unwrap_err();
            assert_eq!(err.kind, ErrorKind::Io, "{err}");
            assert!(err.message.contains("checksum"), "{err}");
        }
        let bbox = Region::new(vec![0], vec![16]).unwrap();
        let mut out = [0u8; 8];
        let pieces = piece_plans(&dir, vec![piece(1, 0, 0, 16)], None);
        // `piece` computed the checksum of the original bytes.
        let err = reads
            .gather(&[(0, pieces.clone())], &bbox, &[2], &mut out)
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Io, "{err}");
        let err = reads
            .map_piece(0, &pieces, &pieces.pieces[0], &bbox)
            .err()
            .expect("a damaged window is refused");
        assert_eq!(err.kind, ErrorKind::Io, "{err}");
        // Put back as committed: read again.
        scribble(&dir, 12, b"cd");
        assert_eq!(read(&whole_span).unwrap().1, DATA);
    }

    #[test]
    fn a_span_in_no_named_record_is_refused_before_reading() {
        let (_d, dir) = setup();
        let plans = plans_for(&dir, 1);
        let mut out = [7u8; 4];
        for records in [
            vec![],
            vec![(1, 0, 2, 0)],
            vec![(2, 0, 16, 0)],
            vec![(1, 8, 8, 0), (1, 0, 8, 0)],
        ] {
            let plan = ReadPlan {
                len: 4,
                fill: None,
                spans: vec![span(0, 4, 0)],
                records,
            };
            let err = DirectReads::default()
                .execute(0, &plans, &plan, &mut out)
                .unwrap_err();
            assert_eq!(err.kind, ErrorKind::Protocol, "{err}");
            assert_eq!(out, [7u8; 4]);
        }
    }

    #[test]
    fn a_segment_cut_under_its_mapping_falls_back_instead_of_crashing() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_str().unwrap().to_owned();
        let path = pdcx_store::segment_path(&dir, 1);
        let data: Vec<u8> = (0..3 * 4096u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let plans = plans_for(&dir, 1);
        let reads = DirectReads::default();
        let p = PlanPiece {
            seq: 1,
            segment: 1,
            offset: 0,
            region: Region::new(vec![0], vec![data.len() as u64]).unwrap(),
            crc: crc32c::crc32c(&data),
        };
        let pp = PiecePlans {
            dir: plans.dir.clone(),
            segments: plans.segments.clone(),
            elem: 1,
            fill: None,
            pieces: vec![p],
            holders: vec![],
        };
        let bbox = Region::new(vec![0], vec![data.len() as u64]).unwrap();
        let mut out = vec![0u8; data.len() / 3];
        assert_eq!(
            reads
                .gather(&[(0, pp.clone())], &bbox, &[3], &mut out)
                .unwrap(),
            Outcome::Done
        );
        // Mapped now (and a window of it handed out); cut the file to one page.
        let w = reads
            .map_piece(0, &pp, &pp.pieces[0], &bbox)
            .unwrap()
            .unwrap();
        let cut = std::fs::OpenOptions::new().write(true).open(&path);
        cut.and_then(|f| f.set_len(4096)).unwrap();
        assert_eq!(
            reads
                .gather(&[(0, pp.clone())], &bbox, &[3], &mut out)
                .unwrap(),
            Outcome::Fallback,
            "the gather faulted past the new end: read the usual way"
        );
        let mut buf = vec![0u8; data.len()];
        let err = w.copy_out(0, &mut buf).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Io, "{err}");
        // The cut mapping was dropped: the next gather maps no more than the file has.
        assert_eq!(
            reads.gather(&[(0, pp)], &bbox, &[3], &mut out).unwrap(),
            Outcome::Fallback
        );
    }
}
