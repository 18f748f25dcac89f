//! Extents read by reference (HDF5 import by reference): their bytes stay in a file
//! outside pdcx (an HDF5 chunk: `size` bytes at `offset`, after HDF5's filters), and are read
//! and decoded when a read needs them. The owner records them (`add_references`) like a
//! commit of its own writes: sequence numbers under the commit lock, the `extent_map` and
//! `extent_refs` rows in one transaction waited durable, then the index. They have no log
//! bytes (their location is outside any log's numbering) and no tier home; the flusher leaves
//! them alone. A later write over the same region shadows them as any later write does, which
//! is how an object is promoted into pdcx (`pdcx.hdf5 promote`).
//!
//! The file is trusted to stay as it was imported: a changed or truncated file reads as an
//! error (short read, corrupt deflate stream, wrong decoded size), never as other data silently
//! when its size changed, but a same-size rewrite is not detected (HDF5 chunks carry no
//! checksum unless Fletcher32 is on, which is imported by copy).

use super::index::{insert_by_seq, Extent};
use super::DataStore;
use crate::meta::{ExtentRow, RefRow};
use pdcx_core::protocol::{RefFilter, RefItem};
use pdcx_core::region::{copy_region, Layout};
use pdcx_core::{Error, ObjectId, ObjectMeta, Region, Result};
use pdcx_store::Location;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// The segment number of every reference extent's location: far above any log segment and
/// above the off-log numbers (`OFF_LOG` + segment), so no log ever seems to hold its bytes.
/// The offset is the extent's sequence number, which makes each location (the cache's key)
/// unique.
pub const REF_SEGMENT: u64 = 1 << 60;

/// Reads of one reference extent after which its object is promoted into the log in the
/// background (`PDCX_REF_PROMOTE_READS`, default 4; 0: never): data read often should not keep
/// paying the file's reads and decoding.
pub fn promote_after_reads() -> u32 {
    static N: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let setting = &pdcx_core::config::REF_PROMOTE_READS;
    *N.get_or_init(|| match setting.count() {
        // The declared bounds keep it within u32.
        Ok(n) => n as u32,
        Err(e) => {
            tracing::warn!("{e}; using {}", setting.default);
            setting.default_count() as u32
        }
    })
}

/// Largest stored chunk read by reference (a bad item cannot make the server allocate more).
const MAX_REF_BYTES: u64 = 1 << 30;

/// Largest chunk read by reference once decoded (its shape × element size). A filtered chunk's
/// decoded size is the item's claim, not the file's: without this bound a chunk of 2^40
/// elements behind a few bytes of deflate would make a read ask for a terabyte. HDF5 itself
/// keeps chunks under 4 GiB; real ones are far smaller.
pub const MAX_REF_CHUNK_BYTES: u64 = 1 << 30;

/// The decoded size of a chunk of shape `chunk` of `elem`-byte elements, refused (before any
/// allocation) when it overflows or is over [`MAX_REF_CHUNK_BYTES`].
pub fn ref_chunk_bytes(chunk: &[u64], elem: usize) -> Result<u64> {
    let n = Region::whole(chunk).byte_len(elem).map_err(|_| {
        Error::invalid(format!(
            "a chunk of shape {chunk:?} read by reference has more bytes than fit in 64 bits"
        ))
    })?;
    if n > MAX_REF_CHUNK_BYTES {
        return Err(Error::invalid(format!(
            "a chunk of shape {chunk:?} of {elem}-byte elements is {n} bytes decoded; chunks read by reference are at most {MAX_REF_CHUNK_BYTES} bytes (import this dataset by copy)"
        )));
    }
    Ok(n)
}

/// Where a reference extent's bytes are, as the index keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExternalRef {
    pub path: String,
    pub offset: u64,
    pub size: u64,
    pub chunk: Vec<u64>,
    pub filters: Vec<RefFilter>,
}

impl ExternalRef {
    pub(super) fn from_row(r: &RefRow) -> Result<ExternalRef> {
        let bad = |what: &str, e: serde_json::Error| {
            Error::internal(format!("stored reference {what}: {e}"))
        };
        Ok(ExternalRef {
            path: r.path.clone(),
            offset: r.offset,
            size: r.size,
            chunk: serde_json::from_str(&r.chunk).map_err(|e| bad("chunk", e))?,
            filters: serde_json::from_str(&r.filters).map_err(|e| bad("filters", e))?,
        })
    }

    fn row(&self) -> Result<RefRow> {
        let enc = |e: serde_json::Error| Error::internal(e.to_string());
        Ok(RefRow {
            path: self.path.clone(),
            offset: self.offset,
            size: self.size,
            chunk: serde_json::to_string(&self.chunk).map_err(enc)?,
            filters: serde_json::to_string(&self.filters).map_err(enc)?,
        })
    }
}

/// Checks an item against its object before anything is recorded: the region within the
/// dims, the chunk at least the region in every dim and at most [`MAX_REF_CHUNK_BYTES`]
/// decoded, the file readable and long enough, and an unfiltered chunk exactly its raw size.
fn check_item(obj: &ObjectMeta, item: &RefItem) -> Result<()> {
    item.region.check_within(&obj.dims)?;
    let n = item.region.ndim();
    if item.chunk.len() != n || (0..n).any(|d| item.chunk[d] < item.region.count[d]) {
        return Err(Error::invalid(format!(
            "chunk {:?} does not hold region {} of {}",
            item.chunk, item.region, obj.name
        )));
    }
    let chunk_bytes = ref_chunk_bytes(&item.chunk, obj.dtype.size())?;
    if item.size == 0 || item.size > MAX_REF_BYTES {
        return Err(Error::invalid(format!(
            "a chunk read by reference is 1 byte to {MAX_REF_BYTES} bytes, not {}",
            item.size
        )));
    }
    if item.filters.is_empty() && item.size != chunk_bytes {
        return Err(Error::invalid(format!(
            "an unfiltered chunk of shape {:?} is {chunk_bytes} bytes, not {}",
            item.chunk, item.size
        )));
    }
    for f in &item.filters {
        if let RefFilter::Shuffle { elem } = f {
            if *elem as usize != obj.dtype.size() {
                return Err(Error::invalid(format!(
                    "shuffle of {elem}-byte elements on {} ({}-byte elements)",
                    obj.name,
                    obj.dtype.size()
                )));
            }
        }
    }
    if !item.path.starts_with('/') {
        return Err(Error::invalid(format!(
            "{:?} is not an absolute path",
            item.path
        )));
    }
    let len = std::fs::metadata(&item.path)
        .map_err(|e| Error::io(&format!("server cannot read {}", item.path), &e))?
        .len();
    if item
        .offset
        .checked_add(item.size)
        .is_none_or(|end| end > len)
    {
        return Err(Error::invalid(format!(
            "bytes {}..{} are past the end of {} ({len} bytes)",
            item.offset,
            item.offset.saturating_add(item.size),
            item.path
        )));
    }
    Ok(())
}

/// Undoes `filters` (applied in order when the chunk was written) on `stored`, expecting
/// `raw_len` bytes out.
pub fn decode_chunk(filters: &[RefFilter], stored: Vec<u8>, raw_len: usize) -> Result<Vec<u8>> {
    if raw_len as u64 > MAX_REF_CHUNK_BYTES {
        return Err(Error::invalid(format!(
            "a chunk read by reference of {raw_len} bytes decoded is over the limit of {MAX_REF_CHUNK_BYTES}"
        )));
    }
    let mut data = stored;
    for f in filters.iter().rev() {
        data = match *f {
            RefFilter::Deflate => {
                let mut out = Vec::with_capacity(raw_len);
                flate2::read::ZlibDecoder::new(&data[..])
                    .take(raw_len as u64 + 1)
                    .read_to_end(&mut out)
                    .map_err(|e| {
                        Error::invalid(format!("inflating a chunk read by reference: {e}"))
                    })?;
                out
            }
            RefFilter::Shuffle { elem } => unshuffle(&data, elem as usize),
        };
    }
    if data.len() != raw_len {
        return Err(Error::invalid(format!(
            "a chunk read by reference decoded to {} bytes, not {raw_len} (the file changed since it was imported?)",
            data.len()
        )));
    }
    Ok(data)
}

/// HDF5's shuffle undone: byte `b` of element `i` is at `b * n + i` (n elements); a tail
/// shorter than one element is left as it is.
pub fn unshuffle(data: &[u8], elem: usize) -> Vec<u8> {
    if elem <= 1 || data.len() < elem {
        return data.to_vec();
    }
    let n = data.len() / elem;
    let mut out = vec![0u8; data.len()];
    for b in 0..elem {
        let plane = &data[b * n..(b + 1) * n];
        for (i, &v) in plane.iter().enumerate() {
            out[i * elem + b] = v;
        }
    }
    out[n * elem..].copy_from_slice(&data[n * elem..]);
    out
}

impl DataStore {
    /// Counts a read of reference extent `seq` of `id`; at the threshold its object is queued
    /// for promotion ([`promote_hot_references`](Self::promote_hot_references)).
    pub(crate) fn note_ref_read(&self, id: ObjectId, seq: u64) {
        let limit = promote_after_reads();
        if limit == 0 {
            return;
        }
        let mut reads = self.ref_reads.lock().unwrap_or_else(|p| p.into_inner());
        let n = reads.entry((id, seq)).or_insert(0);
        *n += 1;
        if *n == limit {
            reads.retain(|k, _| k.0 != id);
            drop(reads);
            self.hot_refs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id);
        }
    }

    /// Promotes the objects whose reference extents were read often (the checkpointer thread
    /// calls this); an object deleted meanwhile is skipped. Returns the objects promoted.
    pub fn promote_hot_references(&self) -> Result<u64> {
        let hot: Vec<ObjectId> =
            std::mem::take(&mut *self.hot_refs.lock().unwrap_or_else(|p| p.into_inner()))
                .into_iter()
                .collect();
        let mut done = 0;
        for id in hot {
            let Ok(obj) = self.meta.object(id) else {
                continue;
            };
            let (n, bytes) = self.promote_references(&obj)?;
            tracing::info!(object = %obj.name, extents = n, bytes, "promoted an object read often from its file into the log");
            done += 1;
        }
        Ok(done)
    }

    /// Records `items` as extents of `obj` (owned here) read from their files; returns how
    /// many and the raw bytes they stand for. Every item is checked first: nothing is recorded
    /// unless all are good.
    pub fn add_references(&self, obj: &ObjectMeta, items: &[RefItem]) -> Result<(u64, u64)> {
        for item in items {
            check_item(obj, item)?;
        }
        let elem = obj.dtype.size() as u64;
        let c = self.lock_commit();
        let mut rows = Vec::with_capacity(items.len());
        let mut refs = Vec::with_capacity(items.len());
        {
            let mut next_seq = self.next_seq.lock().unwrap_or_else(|p| p.into_inner());
            for item in items {
                let seq = *next_seq;
                *next_seq += 1;
                let len = item.region.num_elements() * elem;
                let r = ExternalRef {
                    path: item.path.clone(),
                    offset: item.offset,
                    size: item.size,
                    chunk: item.chunk.clone(),
                    filters: item.filters.clone(),
                };
                rows.push((
                    ExtentRow {
                        id: obj.id,
                        seq,
                        region: item.region.clone(),
                        loc: Location {
                            segment: REF_SEGMENT,
                            offset: seq,
                            len,
                            crc: 0,
                        },
                    },
                    r.row()?,
                ));
                refs.push(Arc::new(r));
            }
        }
        let ticket = self.meta.insert_refs(&rows)?;
        self.meta.wait_durable(ticket)?;
        let bytes = rows.iter().map(|(r, _)| r.loc.len).sum();
        let mut index = self.index_mut();
        let list = index.entry(obj.id).or_default();
        for ((r, _), ext) in rows.into_iter().zip(refs) {
            insert_by_seq(list, r.seq, r.region, r.loc);
            if let Some(e) = list.iter_mut().find(|e| e.seq == r.seq) {
                let e = Arc::make_mut(e);
                e.in_log = false;
                e.external = Some(ext);
            }
        }
        drop(c);
        Ok((items.len() as u64, bytes))
    }

    /// Promotes `obj`'s extents read by reference into the log, keeping their sequence
    /// numbers (so a newer write over the same region stays newer: nothing is shadowed that
    /// should not be). In batches of about 64 MiB: each extent's bytes are read and decoded,
    /// appended to the log and, under the commit lock, the log is fsynced before the rows are
    /// changed to name the log bytes (one durable transaction); a crash before that leaves the
    /// reference as it was and the appended bytes unreferenced. Returns the extents and bytes
    /// promoted.
    pub fn promote_references(&self, obj: &ObjectMeta) -> Result<(u64, u64)> {
        let todo: Vec<Extent> = self
            .index()
            .get(&obj.id)
            .map(|v| {
                v.iter()
                    .filter(|e| e.external.is_some() && e.home.is_none())
                    .map(|e| (**e).clone())
                    .collect()
            })
            .unwrap_or_default();
        let (mut count, mut bytes) = (0u64, 0u64);
        let mut k = 0;
        while k < todo.len() {
            let mut batch = Vec::new();
            let mut size = 0u64;
            while k < todo.len() && (batch.is_empty() || size < 64 << 20) {
                let e = &todo[k];
                k += 1;
                let Some(r) = &e.external else { continue };
                let raw = self.read_reference(obj, e, r, (0, e.loc.len))?;
                let staged = self.stage(0, obj.id, &e.region, &raw, false)?;
                size += e.loc.len;
                batch.push((e.seq, staged));
            }
            let c = self.lock_commit();
            self.sync_log(&c)?;
            let moved: Vec<(ObjectId, u64, Location)> = batch
                .iter()
                .map(|(seq, st)| (obj.id, *seq, st.loc))
                .collect();
            let ticket = self.meta.rehome_refs(&moved)?;
            self.meta.wait_durable(ticket)?;
            {
                let mut index = self.index_mut();
                if let Some(list) = index.get_mut(&obj.id) {
                    for (_, seq, loc) in &moved {
                        if let Some(e) = list.iter_mut().find(|e| e.seq == *seq) {
                            let e = Arc::make_mut(e);
                            e.loc = *loc;
                            e.in_log = true;
                            e.external = None;
                            count += 1;
                            bytes += loc.len;
                        }
                    }
                }
            }
            drop(c);
        }
        Ok((count, bytes))
    }

    /// Bytes `[lo, hi)` of a reference extent's raw payload: the stored chunk read from its
    /// file and decoded (cached whole, as tier reads are), or for an unfiltered chunk that is
    /// exactly the extent, just the span.
    pub(super) fn read_reference(
        &self,
        obj: &ObjectMeta,
        e: &Extent,
        r: &ExternalRef,
        (lo, hi): (u64, u64),
    ) -> Result<Arc<Vec<u8>>> {
        self.note_ref_read(obj.id, e.seq);
        let file = std::fs::File::open(&r.path).map_err(|err| {
            Error::io(
                &format!("opening {} (an object imported by reference)", r.path),
                &err,
            )
        })?;
        let read_at = |off: u64, len: u64| -> Result<Vec<u8>> {
            let mut buf = vec![0u8; len as usize];
            file.read_exact_at(&mut buf, off).map_err(|err| {
                Error::io(
                    &format!("reading {} (an object imported by reference)", r.path),
                    &err,
                )
            })?;
            Ok(buf)
        };
        let elem = obj.dtype.size();
        let exact = r.chunk == e.region.count;
        // A log record adopted from a retired server keeps its crc (an HDF5 chunk has none:
        // 0): read whole and checked, whatever part is wanted (it moves into the log soon).
        if r.filters.is_empty() && exact && e.loc.crc != 0 {
            let bytes = read_at(r.offset, e.loc.len)?;
            if !pdcx_store::record::payload_matches(&bytes, e.loc.crc) {
                return Err(Error::new(
                    pdcx_core::ErrorKind::Io,
                    format!(
                        "{} bytes at {} of {} do not match their checksum",
                        e.loc.len, r.offset, r.path
                    ),
                ));
            }
            return Ok(Arc::new(bytes[lo as usize..hi as usize].to_vec()));
        }
        if r.filters.is_empty() && exact {
            return Ok(Arc::new(read_at(r.offset + lo, hi - lo)?));
        }
        // Checked again here: a reference recorded before the bound existed may claim more.
        let chunk_len = ref_chunk_bytes(&r.chunk, elem)? as usize;
        let full = decode_chunk(&r.filters, read_at(r.offset, r.size)?, chunk_len)?;
        let raw = if exact {
            full
        } else {
            // An edge chunk: HDF5 stores the whole chunk; the extent is its part inside the dims.
            let mut out = vec![0u8; e.loc.len as usize];
            let origin = vec![0; r.chunk.len()];
            let whole = Region {
                offset: origin.clone(),
                count: r.chunk.clone(),
            };
            let want = Region {
                offset: origin,
                count: e.region.count.clone(),
            };
            copy_region(
                elem,
                &want,
                (
                    &Layout {
                        region: &whole,
                        base: 0,
                    },
                    &full,
                ),
                (
                    &Layout {
                        region: &want,
                        base: 0,
                    },
                    &mut out,
                ),
            );
            out
        };
        Ok(self.cache_whole(e, raw, (lo, hi)))
    }
}

impl DataStore {
    /// Objects with extents read by reference from files under `dir` (a resize's retired
    /// logs: `resize/holdings.rs`).
    pub fn objects_with_refs_under(&self, dir: &std::path::Path) -> Vec<ObjectId> {
        let dir = dir.to_string_lossy();
        let dir = format!("{}/", dir.trim_end_matches('/'));
        self.index()
            .iter()
            .filter(|(_, list)| {
                list.iter().any(|e| {
                    e.external
                        .as_ref()
                        .is_some_and(|r| r.path.starts_with(&dir))
                })
            })
            .map(|(id, _)| *id)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn shuffle(data: &[u8], elem: usize) -> Vec<u8> {
        let n = data.len() / elem;
        let mut out = vec![0u8; data.len()];
        for i in 0..n {
            for b in 0..elem {
                out[b * n + i] = data[i * elem + b];
            }
        }
        out[n * elem..].copy_from_slice(&data[n * elem..]);
        out
    }

    #[test]
    fn chunk_sizes_are_bounded_before_anything_is_allocated() {
        assert_eq!(ref_chunk_bytes(&[64, 64], 8).unwrap(), 32768);
        assert_eq!(
            ref_chunk_bytes(&[MAX_REF_CHUNK_BYTES / 4], 4).unwrap(),
            MAX_REF_CHUNK_BYTES
        );
        let e = ref_chunk_bytes(&[1 << 40], 1).unwrap_err();
        assert!(e.message.contains("at most"), "{}", e.message);
        let e = ref_chunk_bytes(&[u64::MAX, 2], 1).unwrap_err();
        assert!(e.message.contains("64 bits"), "{}", e.message);
        // decode_chunk refuses a size over the limit whatever its caller checked.
        let e = decode_chunk(&[RefFilter::Deflate], vec![0u8; 8], 1 << 40).unwrap_err();
        assert!(e.message.contains("over the limit"), "{}", e.message);
    }

    #[test]
    fn shuffle_and_deflate_are_undone_in_reverse_order() {
        let raw: Vec<u8> = (0..4000u32).flat_map(|v| (v * 7).to_le_bytes()).collect();
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&shuffle(&raw, 4)).unwrap();
        let stored = z.finish().unwrap();
        let filters = [RefFilter::Shuffle { elem: 4 }, RefFilter::Deflate];
        assert_eq!(
            decode_chunk(&filters, stored.clone(), raw.len()).unwrap(),
            raw
        );
        // The wrong size out, a corrupt stream: errors, not data.
        assert!(decode_chunk(&filters, stored.clone(), raw.len() - 4).is_err());
        let mut bad = stored;
        bad[10] ^= 0xff;
        bad[11] ^= 0xff;
        assert!(decode_chunk(&filters, bad, raw.len()).is_err());
        assert_eq!(unshuffle(&shuffle(&raw[..13], 4), 4), raw[..13]);
    }
}
