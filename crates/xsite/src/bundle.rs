//! Bundles: one self-describing file carrying regions of objects to another site when no link
//! is allowed (`pdcx export --bundle FILE OBJ...`, `pdcx import FILE`).
//!
//! Layout: `PDCXBNDL`, u32 version, u64 header length, the header (JSON: per item the
//! transfer description — object metadata, region, chunks — and each chunk's offset in the
//! data section), the data section (the chunks' bytes, C order each), the trailer (JSON: each
//! chunk's CRC-32C, computed as it was read), u64 trailer length, `PDCXEND!`. The file is
//! written to `FILE.tmp` and renamed when complete, so a bundle that exists is whole.
//! Importing runs each item through a [`Receiver`] exactly like a pull: staging object,
//! journal, CRC checked as read from the file and again after the write, published under the
//! object's name with provenance; an import stopped midway resumes with the chunks missing.

use crate::receive::{transfer_key, Origin, Placement, Receiver};
use crate::transfer::{chunks, region_of, CHUNK_BYTES};
use crate::wire::{TransferSpec, MAX_PAYLOAD};
use crate::{invalid, io, Result};
use pdcx_client::Client;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

const MAGIC: &[u8; 8] = b"PDCXBNDL";
const END: &[u8; 8] = b"PDCXEND!";
const VERSION: u32 = 1;
const MAX_META: u64 = 64 << 20;

#[derive(Debug, Serialize, Deserialize)]
struct Item {
    spec: TransferSpec,
    /// Offset of each chunk in the data section.
    offsets: Vec<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    created: u64,
    items: Vec<Item>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Trailer {
    /// Per item, per chunk.
    crcs: Vec<Vec<u32>>,
}

/// Whether `path` starts like a bundle.
pub fn is_bundle(path: &Path) -> bool {
    let mut m = [0u8; 8];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut m))
        .is_ok()
        && &m == MAGIC
}

/// What an export or import did: (objects, bytes).
pub type Counts = (usize, u64);

/// Writes `region` (whole objects when None) of each of `names` into bundle `path`, naming
/// this site `site` in their provenance.
pub fn export(
    client: &Client,
    names: &[String],
    region: Option<&str>,
    site: &str,
    path: &Path,
) -> Result<Counts> {
    crate::site::check_site_name(site)?;
    if names.is_empty() {
        return Err(invalid("name at least one object to bundle"));
    }
    let mut items = Vec::new();
    let mut at = 0u64;
    for name in names {
        let meta = client.open_object(name)?;
        let region = region_of(&meta, region)?;
        let elem = meta.dtype.size();
        let chunks = chunks(&region, elem, CHUNK_BYTES);
        let mut offsets = Vec::with_capacity(chunks.len());
        for c in &chunks {
            offsets.push(at);
            at += c.byte_len(elem)?;
        }
        items.push(Item {
            spec: TransferSpec {
                key: transfer_key(site, &meta.name, &region, chunks.len()),
                source_site: site.to_string(),
                meta,
                region,
                chunks,
                as_name: None,
            },
            offsets,
        });
    }
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let header =
        serde_json::to_vec(&Header { created, items }).map_err(|e| invalid(e.to_string()))?;
    let items = serde_json::from_slice::<Header>(&header)
        .map_err(|e| invalid(e.to_string()))?
        .items;
    let tmp = path.with_extension("tmp");
    let file = File::create(&tmp).map_err(io(format!("create {}", tmp.display())))?;
    let mut w = BufWriter::with_capacity(8 << 20, file);
    let mut crcs = Vec::new();
    let mut bytes = 0u64;
    let written = (|| -> Result<()> {
        w.write_all(MAGIC)
            .and_then(|()| w.write_all(&VERSION.to_le_bytes()))
            .and_then(|()| w.write_all(&(header.len() as u64).to_le_bytes()))
            .and_then(|()| w.write_all(&header))
            .map_err(io(format!("write {}", tmp.display())))?;
        let mut buf = Vec::new();
        for item in &items {
            let elem = item.spec.meta.dtype.size();
            let mut these = Vec::with_capacity(item.spec.chunks.len());
            for c in &item.spec.chunks {
                buf.resize(c.byte_len(elem)? as usize, 0);
                client.read_into(item.spec.meta.id, c, &mut buf)?;
                these.push(crc32c::crc32c(&buf));
                w.write_all(&buf)
                    .map_err(io(format!("write {}", tmp.display())))?;
                bytes += buf.len() as u64;
            }
            crcs.push(these);
        }
        let trailer = serde_json::to_vec(&Trailer { crcs }).map_err(|e| invalid(e.to_string()))?;
        w.write_all(&trailer)
            .and_then(|()| w.write_all(&(trailer.len() as u64).to_le_bytes()))
            .and_then(|()| w.write_all(END))
            .and_then(|()| w.flush())
            .and_then(|()| w.get_ref().sync_all())
            .map_err(io(format!("write {}", tmp.display())))?;
        Ok(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path).map_err(io(format!("rename to {}", path.display())))?;
    Ok((items.len(), bytes))
}

/// Imports every item of bundle `path` into the deployment of `client`.
pub fn import(client: &Client, path: &Path) -> Result<Counts> {
    let f = File::open(path).map_err(io(format!("open {}", path.display())))?;
    let size = f
        .metadata()
        .map_err(io(format!("stat {}", path.display())))?
        .len();
    let bad = |what: &str| {
        invalid(format!(
            "{} is not a whole pdcx bundle: {what}",
            path.display()
        ))
    };
    let read_at = |off: u64, len: u64| -> Result<Vec<u8>> {
        let mut b = vec![0u8; len as usize];
        f.read_exact_at(&mut b, off)
            .map_err(io(format!("read {}", path.display())))?;
        Ok(b)
    };
    if size < 20 + 16 {
        return Err(bad("too short"));
    }
    let head = read_at(0, 20)?;
    if &head[..8] != MAGIC {
        return Err(bad("no bundle header"));
    }
    let version = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(bad(&format!(
            "version {version}, this pdcx reads {VERSION}"
        )));
    }
    let hlen = u64::from_le_bytes(head[12..20].try_into().expect("8 bytes"));
    if hlen > MAX_META || 20 + hlen + 16 > size {
        return Err(bad("header length"));
    }
    let tail = read_at(size - 16, 16)?;
    if &tail[8..] != END {
        return Err(bad("no end marker (cut short?)"));
    }
    let tlen = u64::from_le_bytes(tail[..8].try_into().expect("8 bytes"));
    if tlen > MAX_META || 20 + hlen + tlen + 16 > size {
        return Err(bad("trailer length"));
    }
    let header: Header =
        serde_json::from_slice(&read_at(20, hlen)?).map_err(|e| bad(&e.to_string()))?;
    let trailer: Trailer = serde_json::from_slice(&read_at(size - 16 - tlen, tlen)?)
        .map_err(|e| bad(&e.to_string()))?;
    let data_start = 20 + hlen;
    let data_len = size - 16 - tlen - data_start;
    if trailer.crcs.len() != header.items.len() {
        return Err(bad("checksums do not match the items"));
    }
    // Everything is checked before anything is received.
    for (item, crcs) in header.items.iter().zip(&trailer.crcs) {
        crate::receive::check_spec(&item.spec)?;
        let elem = item.spec.meta.dtype.size();
        if item.offsets.len() != item.spec.chunks.len() || crcs.len() != item.spec.chunks.len() {
            return Err(bad("chunk offsets or checksums missing"));
        }
        for (c, &off) in item.spec.chunks.iter().zip(&item.offsets) {
            let len = c.byte_len(elem)?;
            if len > MAX_PAYLOAD || off.checked_add(len).is_none_or(|end| end > data_len) {
                return Err(bad("a chunk lies outside the data"));
            }
        }
    }
    let receiver = Receiver::new(client.clone());
    let mut bytes = 0u64;
    let mut file = f.try_clone().map_err(io("dup"))?;
    for (item, crcs) in header.items.iter().zip(&trailer.crcs) {
        let missing = receiver.begin(&Origin::Local, &item.spec)?;
        let elem = item.spec.meta.dtype.size();
        let mut buf = Vec::new();
        for i in missing {
            let c = &item.spec.chunks[i as usize];
            buf.resize(c.byte_len(elem)? as usize, 0);
            file.seek(SeekFrom::Start(data_start + item.offsets[i as usize]))
                .and_then(|_| file.read_exact(&mut buf))
                .map_err(io(format!("read {}", path.display())))?;
            receiver.store(&Origin::Local, &item.spec.key, i, crcs[i as usize], &buf)?;
        }
        let place = Placement::local(&item.spec.meta.name, &item.spec.meta);
        bytes += receiver.publish(&Origin::Local, &item.spec.key, &place)?;
    }
    Ok((header.items.len(), bytes))
}
