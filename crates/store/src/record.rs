//! On-disk record format.
//!
//! A log directory holds `seg-00000001.log`, `seg-00000002.log`, ... and `MANIFEST` (JSON, see
//! [`crate::manifest`]). A segment is a plain concatenation of records; each record is:
//!
//! ```text
//! offset size field
//!      0    4 magic       u32 = 0x31525850 ("PXR1" little-endian)
//!      4    1 ndim        u8, 1..=MAX_DIMS
//!      5    3 reserved    zero
//!      8    8 object      u64
//!     16    8 txn         u64
//!     24    8 payload_len u64
//!     32    4 header_crc  u32 crc32c(these 40 bytes with header_crc zeroed ++ region bytes)
//!     36    4 payload_crc u32 crc32c(payload)
//!     40 16*n region      ndim x (offset u64, count u64)
//!      .    . payload     payload_len bytes
//! ```
//!
//! All integers are little-endian. The header crc covers the region so that a torn write can
//! never be mistaken for a record with a different shape; the payload has its own crc so it can
//! be verified on every read without re-reading the header.

use pdcx_core::{Error, Region, Result, MAX_DIMS};
use pdcx_fsio::{Fs, FsFile, OpenMode, OsFs};
use std::io;
use std::path::{Path, PathBuf};

pub const MAGIC: u32 = 0x3152_5850;
pub const HEADER_LEN: usize = 40;
const DIM_LEN: usize = 16;

/// Bytes a record of an `ndim`-dimensional region takes besides its payload.
pub fn record_overhead(ndim: usize) -> u64 {
    (HEADER_LEN + ndim * DIM_LEN) as u64
}
const HEADER_CRC_AT: usize = 32;

/// Where a record's payload lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Location {
    pub segment: u64,
    /// Byte offset of the payload (not the record header) within the segment.
    pub offset: u64,
    pub len: u64,
    pub crc: u32,
}

/// One record as found by [`scan_segment`].
#[derive(Debug, Clone, PartialEq)]
pub struct RecordInfo {
    pub object: u64,
    pub txn: u64,
    pub region: Region,
    pub location: Location,
}

/// How a segment file's name begins and ends; the id, zero-padded to 8 digits, sits between.
const SEGMENT_PREFIX: &str = "seg-";
const SEGMENT_SUFFIX: &str = ".log";

/// The file name of segment `id` in a log directory. Servers, same-node clients (one-copy
/// reads and writes) and tools all name segments through this function or [`segment_path`],
/// so the format is spelled here only.
pub fn segment_file_name(id: u64) -> String {
    format!("{SEGMENT_PREFIX}{id:08}{SEGMENT_SUFFIX}")
}

/// The path of segment `id` in the log directory `dir`.
pub fn segment_path(dir: impl AsRef<Path>, id: u64) -> PathBuf {
    dir.as_ref().join(segment_file_name(id))
}

/// The id of a segment file name, or None for anything else in the directory.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name
        .strip_prefix(SEGMENT_PREFIX)?
        .strip_suffix(SEGMENT_SUFFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether `payload` is a record's payload with checksum `crc` (readers that get a record's
/// bytes without [`crate::LogSpan::read_verified`]: mapped gathers, same-node clients).
pub fn payload_matches(payload: &[u8], crc: u32) -> bool {
    crc32c::crc32c(payload) == crc
}

/// Header plus region bytes for a payload of `payload_len` bytes with crc `payload_crc`. The
/// payload itself is written separately so large payloads are never copied.
pub fn encode_prefix(
    object: u64,
    txn: u64,
    region: &Region,
    payload_len: u64,
    payload_crc: u32,
) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN + region.ndim() * DIM_LEN);
    b.extend_from_slice(&MAGIC.to_le_bytes());
    b.push(region.ndim() as u8);
    b.extend_from_slice(&[0; 3]);
    b.extend_from_slice(&object.to_le_bytes());
    b.extend_from_slice(&txn.to_le_bytes());
    b.extend_from_slice(&payload_len.to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&payload_crc.to_le_bytes());
    for d in 0..region.ndim() {
        b.extend_from_slice(&region.offset[d].to_le_bytes());
        b.extend_from_slice(&region.count[d].to_le_bytes());
    }
    let crc = crc32c::crc32c(&b);
    b[HEADER_CRC_AT..HEADER_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    b
}

struct Header {
    ndim: usize,
    object: u64,
    txn: u64,
    payload_len: u64,
    header_crc: u32,
    payload_crc: u32,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

/// Parses the fixed header; None means "not a record start" (garbage or a torn write).
fn decode_header(b: &[u8; HEADER_LEN]) -> Option<Header> {
    let ndim = b[4] as usize;
    if u32_at(b, 0) != MAGIC || ndim == 0 || ndim > MAX_DIMS || b[5..8] != [0; 3] {
        return None;
    }
    Some(Header {
        ndim,
        object: u64_at(b, 8),
        txn: u64_at(b, 16),
        payload_len: u64_at(b, 24),
        header_crc: u32_at(b, HEADER_CRC_AT),
        payload_crc: u32_at(b, 36),
    })
}

/// Verifies the header crc over `prefix` (header + region bytes) and decodes the region.
fn check_prefix(prefix: &[u8], h: &Header) -> Option<Region> {
    let crc = crc32c::crc32c(&prefix[..HEADER_CRC_AT]);
    let crc = crc32c::crc32c_append(crc, &[0; 4]);
    let crc = crc32c::crc32c_append(crc, &prefix[HEADER_CRC_AT + 4..]);
    if crc != h.header_crc {
        return None;
    }
    let dims = &prefix[HEADER_LEN..];
    let offset = (0..h.ndim).map(|d| u64_at(dims, d * DIM_LEN)).collect();
    let count = (0..h.ndim).map(|d| u64_at(dims, d * DIM_LEN + 8)).collect();
    Region::new(offset, count).ok()
}

/// crc32c of `len` bytes at `at`, read in bounded chunks so a huge payload is never buffered.
pub(crate) fn crc_of_range(file: &dyn FsFile, at: u64, len: u64) -> io::Result<u32> {
    let mut buf = vec![0u8; len.min(1 << 20) as usize];
    let (mut crc, mut done) = (0u32, 0u64);
    while done < len {
        let n = (len - done).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..n], at + done)?;
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        done += n as u64;
    }
    Ok(crc)
}

/// The record starting at `pos` and the offset just past it, or None if it is not a whole,
/// valid record ending at or before `end`.
fn read_record(
    file: &dyn FsFile,
    segment: u64,
    pos: u64,
    end: u64,
) -> io::Result<Option<(RecordInfo, u64)>> {
    Ok(match read_record_or_damaged(file, segment, pos, end)? {
        Some((Scanned::Record(info), next)) => Some((info, next)),
        _ => None,
    })
}

/// What recovery finds at one position of a segment's tail.
#[derive(Debug, Clone, PartialEq)]
pub enum Scanned {
    /// A whole record whose header and payload checksums match.
    Record(RecordInfo),
    /// A record whose header is intact and whose payload is all there but does not match its
    /// checksum: its writer changed the bytes while they were written (a client scribbling on
    /// its shared-memory block) or the write was torn. Only that record is lost: the scan goes
    /// on after it, so one writer's damage never drops records that follow it.
    Damaged(Location),
}

/// Like [`read_record`], but a record with an intact header and a damaged payload is reported
/// ([`Scanned::Damaged`]) instead of ending the scan.
fn read_record_or_damaged(
    file: &dyn FsFile,
    segment: u64,
    pos: u64,
    end: u64,
) -> io::Result<Option<(Scanned, u64)>> {
    if end - pos < HEADER_LEN as u64 {
        return Ok(None);
    }
    let mut hb = [0u8; HEADER_LEN];
    file.read_exact_at(&mut hb, pos)?;
    let Some(h) = decode_header(&hb) else {
        return Ok(None);
    };
    let prefix_len = (HEADER_LEN + h.ndim * DIM_LEN) as u64;
    if end - pos < prefix_len {
        return Ok(None);
    }
    let mut prefix = vec![0u8; prefix_len as usize];
    prefix[..HEADER_LEN].copy_from_slice(&hb);
    file.read_exact_at(&mut prefix[HEADER_LEN..], pos + HEADER_LEN as u64)?;
    let Some(region) = check_prefix(&prefix, &h) else {
        return Ok(None);
    };
    let payload_at = pos + prefix_len;
    if end - payload_at < h.payload_len {
        return Ok(None);
    }
    let location = Location {
        segment,
        offset: payload_at,
        len: h.payload_len,
        crc: h.payload_crc,
    };
    let next = payload_at + h.payload_len;
    if crc_of_range(file, payload_at, h.payload_len)? != h.payload_crc {
        return Ok(Some((Scanned::Damaged(location), next)));
    }
    let info = RecordInfo {
        object: h.object,
        txn: h.txn,
        region,
        location,
    };
    Ok(Some((Scanned::Record(info), next)))
}

/// Recovery's scan of a segment from `from` (a record boundary) to at most `end`: every whole
/// record, damaged payloads included ([`Scanned::Damaged`], skipped over), up to the first
/// torn or garbage header. Returns them and the offset where the valid part ends.
pub fn scan_tail(
    file: &dyn FsFile,
    segment: u64,
    from: u64,
    end: u64,
) -> io::Result<(Vec<Scanned>, u64)> {
    let (mut out, mut pos) = (Vec::new(), from);
    while pos < end {
        match read_record_or_damaged(file, segment, pos, end)? {
            Some((s, next)) => {
                out.push(s);
                pos = next;
            }
            None => break,
        }
    }
    Ok((out, pos))
}

/// Walks the records of one segment file from offset 0 and returns them plus the length of the
/// valid prefix. Stops, without error, at the first torn or garbage record (short header, bad
/// magic, header crc mismatch, truncated payload, payload crc mismatch). `limit` caps how far
/// to scan. The segment id in each location comes from the file name (`seg-N.log`).
pub fn scan_segment(path: &Path, limit: Option<u64>) -> Result<(Vec<RecordInfo>, u64)> {
    scan_segment_in(&OsFs, path, limit)
}

/// [`scan_segment`] through the I/O seam `fs`.
pub fn scan_segment_in(
    fs: &dyn Fs,
    path: &Path,
    limit: Option<u64>,
) -> Result<(Vec<RecordInfo>, u64)> {
    let segment = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_segment_file_name)
        .ok_or_else(|| Error::invalid(format!("{} is not a segment file name", path.display())))?;
    let ctx = |what: &str| format!("{what} {}", path.display());
    let file = fs
        .open(path, OpenMode::Read)
        .map_err(|e| Error::io(&ctx("open"), &e))?;
    let len = file.size().map_err(|e| Error::io(&ctx("stat"), &e))?;
    let end = limit.map_or(len, |l| l.min(len));
    let (mut records, mut pos) = (Vec::new(), 0u64);
    while let Some((info, next)) =
        read_record(&*file, segment, pos, end).map_err(|e| Error::io(&ctx("scan"), &e))?
    {
        records.push(info);
        pos = next;
    }
    Ok((records, pos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    fn write_record(f: &mut File, object: u64, region: &Region, payload: &[u8]) -> u64 {
        let prefix = encode_prefix(
            object,
            7,
            region,
            payload.len() as u64,
            crc32c::crc32c(payload),
        );
        f.write_all(&prefix).unwrap();
        f.write_all(payload).unwrap();
        (prefix.len() + payload.len()) as u64
    }

    #[test]
    fn header_layout_is_as_documented() {
        let r = Region::new(vec![3, 4], vec![5, 6]).unwrap();
        let p = encode_prefix(9, 10, &r, 11, 0xdead_beef);
        assert_eq!(p.len(), 40 + 32);
        assert_eq!(&p[0..4], b"PXR1");
        assert_eq!((p[4], &p[5..8]), (2, &[0u8; 3][..]));
        assert_eq!((u64_at(&p, 8), u64_at(&p, 16), u64_at(&p, 24)), (9, 10, 11));
        assert_eq!(u32_at(&p, 36), 0xdead_beef);
        assert_eq!([u64_at(&p, 40), u64_at(&p, 48)], [3, 5]);
        let mut zeroed = p.clone();
        zeroed[32..36].fill(0);
        assert_eq!(u32_at(&p, 32), crc32c::crc32c(&zeroed));
        assert_eq!(parse_segment_file_name(&segment_file_name(42)), Some(42));
        assert_eq!(parse_segment_file_name("seg-.log"), None);
        assert_eq!(parse_segment_file_name("MANIFEST"), None);
    }

    #[test]
    fn segment_names_are_as_documented_and_parse_back() {
        // The module doc and docs/ARCHITECTURE.md promise this name to operators and tools.
        assert_eq!(segment_file_name(1), "seg-00000001.log");
        assert_eq!(segment_file_name(123_456_789), "seg-123456789.log");
        let p = segment_path("/srv/log", 7);
        assert_eq!(p, Path::new("/srv/log/seg-00000007.log"));
        for id in [1, 99_999_999, 100_000_000, u64::MAX] {
            let name = segment_path("d", id);
            let name = name.file_name().and_then(|n| n.to_str()).unwrap();
            assert_eq!(parse_segment_file_name(name), Some(id), "{name}");
        }
        assert_eq!(parse_segment_file_name("seg-00000001.log.tmp"), None);
        assert_eq!(parse_segment_file_name("seg-0000000x.log"), None);
    }

    #[test]
    fn scan_stops_at_garbage_and_at_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(segment_file_name(3));
        let mut f = File::create(&path).unwrap();
        let r1 = Region::new(vec![0], vec![4]).unwrap();
        let r3 = Region::new(vec![1, 2, 3], vec![2, 2, 2]).unwrap();
        let a = write_record(&mut f, 1, &r1, &[1; 16]);
        let b = write_record(&mut f, 2, &r3, &[2; 64]);
        // Trailing garbage, as left by a torn write over preallocated space.
        f.write_all(&[0x5a; 100]).unwrap();
        let (recs, valid) = scan_segment(&path, None).unwrap();
        assert_eq!(valid, a + b);
        assert_eq!(recs.len(), 2);
        assert_eq!((recs[1].object, recs[1].txn, &recs[1].region), (2, 7, &r3));
        assert_eq!(recs[1].location.segment, 3);
        assert_eq!(recs[1].location.offset, a + 40 + 48);
        assert_eq!(recs[1].location.len, 64);
        // A limit in the middle of record 2 counts as a tear.
        assert_eq!(scan_segment(&path, Some(a + 10)).unwrap().1, a);

        // Flip one payload byte of record 2: the scan must stop before it.
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&[3], recs[1].location.offset + 5)
            .unwrap();
        let (recs, valid) = scan_segment(&path, None).unwrap();
        assert_eq!((recs.len(), valid), (1, a));
        // A flipped region byte is caught by the header crc.
        file.write_all_at(&[9], 40 + 3).unwrap();
        assert_eq!(scan_segment(&path, None).unwrap(), (vec![], 0));
        assert!(scan_segment(&dir.path().join("other.log"), None).is_err());
    }
}
