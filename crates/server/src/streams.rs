//! Byte-stream operations at the owner that change content, not only metadata:
//! truncation, and discarding a crashed run's incomplete version.
//!
//! Both shadow bytes rather than delete extents: the owner commits new writes over the
//! affected ranges (zeros, or the last version's bytes), numbered after everything there, so
//! every reader and every later version sees the intended content whichever servers hold the
//! old bytes. The old bytes stay in their logs as history (an incomplete version is kept, as
//! ParaLog asks, but never becomes visible or reaches a home).

use crate::Server;
use pdcx_core::protocol::{Durability, TagTarget};
use pdcx_core::{Error, ObjectId, ObjectMeta, Region, Result, TagValue};

/// Tag of a byte stream: writes numbered below it were made after a version and discarded
/// (overwritten with the version's bytes), so they are not incomplete any more.
pub const DISCARD_MARK_TAG: &str = "pdcx.discarded_below";

/// Serialises size changes and discards on this server (they are rare: truncates and opens).
static SIZE_CHANGES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Bytes rewritten per commit.
const CHUNK: u64 = 16 << 20;

/// `Request::SetSize`: the stream's size becomes exactly `len`. Shrinking first overwrites
/// the written bytes past `len` with zeros, so a later growth reads zeros there, as a file
/// grown after `ftruncate` does.
pub fn set_size(server: &Server, id: ObjectId, len: u64) -> Result<ObjectMeta> {
    // One size change at a time: OMPIO truncates from every rank at once, and a shrink
    // reads the size it zeroes from (another shrink must not cut it meanwhile).
    let _one = SIZE_CHANGES.lock().unwrap_or_else(|p| p.into_inner());
    let obj = byte_stream(server, id)?;
    let old = obj.dims[0];
    if len == old {
        // Nothing to change (a new file's truncate to 0): no metadata write, no fsync.
        return Ok(obj);
    }
    if len < old {
        // What is written: the writes in the logs, and a base at the home (whose writes
        // left the logs; `streambase.rs`).
        let base = server.engine.bases.get(id);
        let mut ranges = server
            .engine
            .ranges_since(id, base.as_ref().map_or(0, |b| b.seal_seq));
        ranges.extend(base.map(|b| (0, b.size)));
        for (a, b) in merge(ranges) {
            overwrite(server, &obj, a.max(len), b.min(old), None)?;
        }
    }
    server.meta.set_size(id, len)
}

/// `Request::DiscardIncomplete`: makes the stream's content its last version again. Writes
/// numbered after the last seal (a run that crashed, or stopped, before its consistency
/// point) are overwritten with the version's bytes (zeros past its end) and the size is reset
/// to the version's. Returns the bytes rewritten; 0 when there was nothing incomplete.
pub fn discard_incomplete(server: &Server, id: ObjectId) -> Result<u64> {
    let _one = SIZE_CHANGES.lock().unwrap_or_else(|p| p.into_inner());
    let obj = byte_stream(server, id)?;
    let (seal_seq, size) = server
        .meta
        .versions(Some(id))?
        .last()
        .map_or((0, 0), |v| (v.seal_seq, v.size));
    // Writes below the mark were discarded before (the rewrite's own writes included).
    let mark = match server.meta.object_tag(id, DISCARD_MARK_TAG) {
        Some(TagValue::Int(m)) => m.max(0) as u64,
        _ => 0,
    };
    let mut rewritten = 0;
    for (a, b) in server.engine.ranges_since(id, seal_seq.max(mark)) {
        let b = b.min(obj.dims[0]);
        if a < size.min(b) {
            overwrite(server, &obj, a, b.min(size), Some(seal_seq))?;
        }
        if b > size {
            overwrite(server, &obj, a.max(size), b, None)?;
        }
        rewritten += b.saturating_sub(a);
    }
    if obj.dims[0] != size {
        server.meta.set_size(id, size)?;
    }
    if rewritten > 0 {
        let next = server.engine.store().next_seq();
        server.meta.put_tags(
            &TagTarget::Object(id),
            &vec![(DISCARD_MARK_TAG.to_string(), TagValue::Int(next as i64))],
        )?;
    }
    Ok(rewritten)
}

/// `ranges` sorted and merged where they overlap or touch.
fn merge(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (a, b) in ranges {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

fn byte_stream(server: &Server, id: ObjectId) -> Result<ObjectMeta> {
    let obj = server.meta.object(id)?;
    if !obj.is_byte_stream() {
        return Err(Error::invalid(format!(
            "object {} is not a byte stream",
            obj.name
        )));
    }
    Ok(obj)
}

/// Commits `[from, to)` of `obj` as new writes here (durable on this node): zeros, or the
/// bytes of the version below `version`.
fn overwrite(
    server: &Server,
    obj: &ObjectMeta,
    from: u64,
    to: u64,
    version: Option<u64>,
) -> Result<()> {
    let mut off = from;
    let mut buf = Vec::new();
    while off < to {
        let n = CHUNK.min(to - off);
        buf.clear();
        buf.resize(n as usize, 0);
        let region = Region::new(vec![off], vec![n])?;
        if let Some(seq) = version {
            server.engine.read_version(obj.id, &region, seq, &mut buf)?;
        }
        let staged = server.engine.stage(0, obj.id, &region, &buf)?;
        server.engine.commit(&[staged], Durability::Local)?;
        off += n;
    }
    Ok(())
}
