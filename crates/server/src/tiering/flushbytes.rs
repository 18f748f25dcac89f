//! An extent's bytes as a flush takes them to a tier: the log's own pages, mapped, or a copy.
//!
//! Why the log's pages: a flush used to read every extent into fresh memory before putting it,
//! and on a server that just took a burst the fresh pages' first-touch faults and the copy
//! cost 6-16 ms per 8 MiB (bench/RESULTS.md, "the flush from the log's pages"), as long as
//! the put itself. A mapped segment's pages are the page cache's: mapping them costs one
//! `madvise` per extent and the put's write is then the only copy.
//!
//! Why a second check: the mapped pages are the segment file's, which a same-node one-copy
//! writer (it has the whole segment open) or any other program of the deployment's user can
//! still write after the bytes were checked against the record's checksum when taken. A copy
//! made then would be the checked bytes; a mapping is whatever the file holds when the put
//! reads it. So the bytes are checked again after the put ([`FlushBytes::unchanged`]), and an
//! extent whose bytes changed meanwhile gets no home: it stays in the log, where its next
//! flush (or read) finds the mismatch, as it would have without the mapping. A file cut under
//! the mapping reads as zeros and flags it (`pdcx_store::mapguard`), which the checks see.

use bytes::Bytes;
use pdcx_core::{Error, ErrorKind, Result};
use pdcx_store::MappedFile;
use std::sync::Arc;

/// One extent's bytes for a put, with what shows they are still the log's checked bytes.
pub struct FlushBytes {
    pub bytes: Bytes,
    /// For mapped bytes: the mapping and the checksum the bytes must still match.
    mapped: Option<(Arc<MappedFile>, u32)>,
}

impl FlushBytes {
    /// Bytes read (and checked) into memory of their own: nothing can change them.
    pub fn copied(bytes: Bytes) -> FlushBytes {
        FlushBytes {
            bytes,
            mapped: None,
        }
    }

    /// Bytes [`offset`, `offset + len`) of a mapped log segment, checked against `crc` now.
    /// `what` names them in the error of a mismatch.
    pub fn mapped(
        map: Arc<MappedFile>,
        offset: usize,
        len: usize,
        crc: u32,
        what: &dyn Fn() -> String,
    ) -> Result<FlushBytes> {
        let end = offset
            .checked_add(len)
            .filter(|&end| end <= map.len())
            .ok_or_else(|| Error::internal(format!("{} lies past its mapping", what())))?;
        map.populate(offset, len);
        let got = crc32c::crc32c(&map[offset..end]);
        if map.faulted() {
            return Err(Error::new(
                ErrorKind::Io,
                format!("{}: the log segment was cut while it was read", what()),
            ));
        }
        if got != crc {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "{}: payload crc mismatch in the log: stored {crc:#010x}, read {got:#010x}",
                    what()
                ),
            ));
        }
        let bytes = Bytes::from_owner(MappedSlice {
            map: map.clone(),
            offset,
            len,
        });
        Ok(FlushBytes {
            bytes,
            mapped: Some((map, crc)),
        })
    }

    /// Whether these are the log's mapped pages (not a copy of their own).
    pub fn is_mapped(&self) -> bool {
        self.mapped.is_some()
    }

    /// Whether the bytes are still the ones checked when taken (always, for a copy). Called
    /// after the put that read them and before their home is recorded.
    pub fn unchanged(&self) -> bool {
        match &self.mapped {
            None => true,
            Some((map, crc)) => crc32c::crc32c(&self.bytes) == *crc && !map.faulted(),
        }
    }
}

/// A range of a mapped segment, owned by the `Bytes` that hand it to a put: the mapping lives
/// as long as any slice of it.
struct MappedSlice {
    map: Arc<MappedFile>,
    offset: usize,
    len: usize,
}

impl AsRef<[u8]> for MappedSlice {
    fn as_ref(&self) -> &[u8] {
        &self.map[self.offset..self.offset + self.len]
    }
}

/// `Bytes` over a buffer others may still hold (the read cache's), without copying it.
pub fn shared(v: Arc<Vec<u8>>) -> Bytes {
    match Arc::try_unwrap(v) {
        Ok(own) => Bytes::from(own),
        Err(shared) => Bytes::from_owner(SharedVec(shared)),
    }
}

struct SharedVec(Arc<Vec<u8>>);

impl AsRef<[u8]> for SharedVec {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// A file holding `data`, open for writing (as another writer of a segment has it), and its
/// mapping: the log segment the flush tests take bytes from.
#[cfg(test)]
pub(crate) fn mapped_test_file(data: &[u8]) -> (tempfile::TempDir, std::fs::File, Arc<MappedFile>) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("seg");
    std::fs::write(&path, data).unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let map = Arc::new(MappedFile::map(&f, data.len() as u64).unwrap());
    (tmp, f, map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn what() -> String {
        "extent 1".to_string()
    }

    #[test]
    fn mapped_bytes_are_checked_when_taken_and_a_later_change_is_seen() {
        let data: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i % 251) as u8).collect();
        let (_tmp, f, map) = mapped_test_file(&data);
        let (off, len) = (4000, 5000);
        let crc = crc32c::crc32c(&data[off..off + len]);

        let wrong = FlushBytes::mapped(map.clone(), off, len, crc ^ 1, &what);
        assert!(
            wrong.is_err_and(|e| e.message.contains("crc mismatch")),
            "a wrong checksum is refused when taken"
        );
        assert!(FlushBytes::mapped(map.clone(), off, data.len(), crc, &what).is_err());

        let taken = FlushBytes::mapped(map.clone(), off, len, crc, &what).unwrap();
        assert_eq!(&taken.bytes[..], &data[off..off + len], "the log's bytes");
        assert!(taken.unchanged());
        // Another writer of the segment changes a byte after the check: the mapping shows it.
        f.write_all_at(&[data[off + 10] ^ 0xff], (off + 10) as u64)
            .unwrap();
        assert!(!taken.unchanged(), "a change after the check is seen");
        assert!(FlushBytes::copied(Bytes::from_static(b"x")).unchanged());
    }

    #[test]
    fn a_shared_buffer_is_not_copied() {
        let v = Arc::new(vec![7u8; 10]);
        let b = shared(v.clone());
        assert_eq!(b.as_ptr(), v.as_ptr());
        let only = Arc::new(vec![1u8, 2]);
        let p = only.as_ptr();
        assert_eq!(shared(only).as_ptr(), p);
    }
}
