//! How a site takes in a transfer (a pull it makes, or a push it receives).
//!
//! Chunks land in a hidden staging object, `xsite.staging/<key>` (the source object's shape,
//! dtype and fill), each written at `local` durability; then its CRC-32C joins the staging
//! object's journal (one tag per chunk, `xsite.done.INDEX`, synced; several gateways of one
//! site may receive chunks of one push side by side). A retry of the same transfer (same key)
//! finds the journal and asks only for the chunks missing. When every chunk is there the
//! transfer is *published*: each chunk is read back from the staging object and checked against
//! the CRC the source computed (end to end: source read → link → staging log → read back), then
//! written under the object's name (created with the source's shape, dtype, fill and tags if
//! it does not exist; a later pull of another region adds to it), and provenance tags are
//! added (`xsite.source` = `SITE:NAME`, `xsite.regions` = every region received with its time).
//! The staging object is deleted last. Until then nothing of the transfer is visible under
//! the object's name; a crash during publishing leaves the journal, and the retry publishes
//! again (the same bytes over the same region).
//!
//! When no object has the name yet (a first pull, a push of a new object) the verified
//! staging object itself becomes the object: its tags and containers are made the source's,
//! the journal dropped, and it is **renamed** to the name last (`Client::rename_object`), so the
//! bytes are written once. A crash before the rename leaves it staged (at worst without its
//! journal, and the retry moves the chunks again); after it, the object is complete.

use crate::wire::TransferSpec;
use crate::{invalid, Result, XsiteError};
use pdcx_client::Client;
use pdcx_core::model::{ObjectMeta, TagValue, Tags};
use pdcx_core::protocol::{Durability, ObjectSpec, TagTarget};
use pdcx_core::region::Region;
use pdcx_core::ErrorKind;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

pub const STAGING_PREFIX: &str = "xsite.staging/";
/// Journal entries on a staging object: `xsite.done.INDEX` = the chunk's CRC-32C (hex).
const DONE_TAG: &str = "xsite.done.";
/// Most chunks a transfer may have (bounds the journal).
pub const MAX_CHUNKS: usize = 1 << 16;

/// The chunks of a transfer stored so far: index -> CRC-32C.
type Journal = BTreeMap<u32, u32>;

/// Receives transfers into one deployment; shared by the gateway's connections.
pub struct Receiver {
    client: Client,
    /// Per transfer key: the staging object and its journal (one writer of the tags at a time).
    open: Mutex<HashMap<String, Arc<Mutex<Staged>>>>,
}

struct Staged {
    spec: TransferSpec,
    staging: ObjectMeta,
    done: Journal,
}

impl Receiver {
    pub fn new(client: Client) -> Receiver {
        Receiver {
            client,
            open: Mutex::new(HashMap::new()),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Starts or resumes transfer `spec`: the indices of the chunks still missing.
    pub fn begin(&self, spec: &TransferSpec) -> Result<Vec<u32>> {
        check_spec(spec)?;
        let staged = self.staged(spec)?;
        let s = staged.lock().unwrap_or_else(|p| p.into_inner());
        Ok((0..spec.chunks.len() as u32)
            .filter(|i| !s.done.contains_key(i))
            .collect())
    }

    fn staged(&self, spec: &TransferSpec) -> Result<Arc<Mutex<Staged>>> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = open.get(&spec.key) {
            let same = s.lock().unwrap_or_else(|p| p.into_inner()).spec == *spec;
            if !same {
                return Err(invalid(format!(
                    "transfer {} was begun with another description",
                    spec.key
                )));
            }
            return Ok(s.clone());
        }
        let name = format!("{STAGING_PREFIX}{}", spec.key);
        let (staging, done) = match self.client.open_object(&name) {
            Ok(m) => {
                let done = journal_of(&m, spec);
                (m, done)
            }
            Err(e) if e.kind == ErrorKind::NotFound => {
                let made = self.client.create_object(ObjectSpec {
                    name: name.clone(),
                    dims: spec.meta.dims.clone(),
                    dtype: spec.meta.dtype,
                    fill: Some(spec.meta.fill.clone()),
                    containers: vec![],
                    tags: vec![("xsite.spec".into(), TagValue::Str(spec_digest(spec)))],
                    creator: String::new(),
                });
                let m = match made {
                    Ok(m) => m,
                    // Another gateway of this site began the same transfer a moment ago.
                    Err(e) if e.kind == ErrorKind::AlreadyExists => {
                        self.client.open_object(&name)?
                    }
                    Err(e) => return Err(e.into()),
                };
                self.client.sync_metadata()?;
                let done = journal_of(&m, spec);
                (m, done)
            }
            Err(e) => return Err(e.into()),
        };
        let s = Arc::new(Mutex::new(Staged {
            spec: spec.clone(),
            staging,
            done,
        }));
        open.insert(spec.key.clone(), s.clone());
        Ok(s)
    }

    /// Transfer `key`, begun in this process.
    fn begun(&self, key: &str) -> Result<Arc<Mutex<Staged>>> {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
            .ok_or_else(|| invalid(format!("transfer {key} was not begun")))
    }

    /// Stores chunk `index` of transfer `key` (begun), after checking its size and CRC.
    pub fn store(&self, key: &str, index: u32, crc: u32, bytes: &[u8]) -> Result<()> {
        let staged = self.begun(key)?;
        let (id, region) = {
            let s = staged.lock().unwrap_or_else(|p| p.into_inner());
            let region = s
                .spec
                .chunks
                .get(index as usize)
                .cloned()
                .ok_or_else(|| invalid(format!("transfer {key} has no chunk {index}")))?;
            let want = region.byte_len(s.spec.meta.dtype.size())?;
            if bytes.len() as u64 != want {
                return Err(invalid(format!(
                    "chunk {index} of transfer {key}: {} bytes, expected {want}",
                    bytes.len()
                )));
            }
            (s.staging.id, region)
        };
        let got = crc32c::crc32c(bytes);
        if got != crc {
            return Err(invalid(format!(
                "chunk {index} of transfer {key} arrived damaged (CRC-32C {got:08x}, sent {crc:08x})"
            )));
        }
        // The bytes first (durable), then the journal entry: a chunk in the journal is stored.
        self.client.write(id, &region, bytes, Durability::Local)?;
        // One tag per chunk: gateways of one site receiving chunks of the same push side by
        // side never overwrite each other's entries.
        let tag = (
            format!("{DONE_TAG}{index}"),
            TagValue::Str(format!("{crc:08x}")),
        );
        self.client.put_tags(TagTarget::Object(id), vec![tag])?;
        self.client.sync_metadata()?;
        staged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .done
            .insert(index, crc);
        Ok(())
    }

    /// The source object's name of transfer `key` (begun).
    pub fn name_of(&self, key: &str) -> Result<String> {
        let staged = self.begun(key)?;
        let s = staged.lock().unwrap_or_else(|p| p.into_inner());
        let name = s
            .spec
            .as_name
            .clone()
            .unwrap_or_else(|| s.spec.meta.name.clone());
        pdcx_core::model::validate_name("object", &name)?;
        Ok(name)
    }

    /// Publishes transfer `key` once every chunk is stored: verifies each against its CRC,
    /// writes it under the object's name, adds provenance, deletes the staging object.
    /// Returns the bytes published.
    pub fn publish(&self, key: &str, local_name: &str) -> Result<u64> {
        let staged = self.begun(key)?;
        let mut s = staged.lock().unwrap_or_else(|p| p.into_inner());
        // Chunks other gateways of this site stored are in the journal, not in this map.
        let fresh = self.client.open_object(&s.staging.name)?;
        let theirs = journal_of(&fresh, &s.spec);
        s.done.extend(theirs);
        let missing = s.spec.chunks.len() - s.done.len();
        if missing > 0 {
            return Err(invalid(format!(
                "transfer {key}: {missing} chunks are still missing"
            )));
        }
        let meta = &s.spec.meta;
        let fresh_name = match self.client.open_object(local_name) {
            Err(e) if e.kind == ErrorKind::NotFound => true,
            Err(e) => return Err(e.into()),
            Ok(_) => false,
        };
        if fresh_name {
            let bytes = self.verified_chunks(key, &s, |_, _| Ok(()))?;
            if self.adopt(&s, local_name)? {
                drop(s);
                self.forget(key);
                return Ok(bytes);
            }
            // The name was taken meanwhile: publish into that object like any other.
        }
        let target = self.target(local_name, meta)?;
        let bytes = self.verified_chunks(key, &s, |chunk, buf| {
            self.client
                .write(target.id, chunk, buf, Durability::Local)
                .map_err(Into::into)
        })?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut regions = target
            .tags
            .iter()
            .find(|(k, _)| k == "xsite.regions")
            .and_then(|(_, v)| match v {
                TagValue::Str(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        if !regions.is_empty() {
            regions.push(';');
        }
        regions.push_str(&format!("{}@{now}", s.spec.region));
        self.client.put_tags(
            TagTarget::Object(target.id),
            vec![
                (
                    "xsite.source".into(),
                    TagValue::Str(format!("{}:{}", s.spec.source_site, meta.name)),
                ),
                ("xsite.regions".into(), TagValue::Str(regions)),
                ("xsite.received".into(), TagValue::Int(now as i64)),
            ],
        )?;
        self.client.sync_metadata()?;
        self.client.delete_object(s.staging.id)?;
        drop(s);
        self.forget(key);
        Ok(bytes)
    }

    fn forget(&self, key: &str) {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    /// Reads every chunk of the staging object back, checks it against the source's
    /// CRC-32C and hands it to `each`; returns the bytes.
    fn verified_chunks(
        &self,
        key: &str,
        s: &Staged,
        mut each: impl FnMut(&Region, &[u8]) -> Result<()>,
    ) -> Result<u64> {
        let elem = s.spec.meta.dtype.size();
        let mut buf = Vec::new();
        let mut bytes = 0u64;
        for (i, chunk) in s.spec.chunks.iter().enumerate() {
            buf.resize(chunk.byte_len(elem)? as usize, 0);
            self.client.read_into(s.staging.id, chunk, &mut buf)?;
            check_crc(key, i, &buf, &s.done)?;
            each(chunk, &buf)?;
            bytes += buf.len() as u64;
        }
        Ok(bytes)
    }

    /// Makes the verified staging object the object `name` (see the module doc): false when
    /// `name` was taken meanwhile (nothing is renamed then).
    fn adopt(&self, s: &Staged, name: &str) -> Result<bool> {
        let meta = &s.spec.meta;
        let id = s.staging.id;
        for c in &meta.containers {
            match self.client.create_container(c, Tags::new()) {
                Ok(_) => {}
                Err(e) if e.kind == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e.into()),
            }
            self.client.add_to_container(id, c)?;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut tags: Tags = meta
            .tags
            .iter()
            .filter(|(k, _)| !is_provenance(k))
            .cloned()
            .collect();
        tags.extend([
            (
                "xsite.source".into(),
                TagValue::Str(format!("{}:{}", s.spec.source_site, meta.name)),
            ),
            (
                "xsite.regions".into(),
                TagValue::Str(format!("{}@{now}", s.spec.region)),
            ),
            ("xsite.received".into(), TagValue::Int(now as i64)),
        ]);
        self.client.put_tags(TagTarget::Object(id), tags)?;
        let current = self.client.get_object(id)?;
        for (k, _) in &current.tags {
            if k == "xsite.spec" || k.starts_with(DONE_TAG) {
                self.client.delete_tag(TagTarget::Object(id), k)?;
            }
        }
        self.client.sync_metadata()?;
        match self.client.rename_object(id, name) {
            Ok(_) => Ok(true),
            Err(e) if e.kind == ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The object received data is published under: `name` as it is, or created like the
    /// source (shape, dtype, fill, tags; its containers created if missing).
    fn target(&self, name: &str, meta: &ObjectMeta) -> Result<ObjectMeta> {
        match self.client.open_object(name) {
            Ok(m) => {
                if m.dims != meta.dims || m.dtype != meta.dtype {
                    return Err(invalid(format!(
                        "{name} exists here with dims {:?} and dtype {}, the source's are {:?} and {}: pull it under another name (--as)",
                        m.dims, m.dtype, meta.dims, meta.dtype
                    )));
                }
                Ok(m)
            }
            Err(e) if e.kind == ErrorKind::NotFound => {
                for c in &meta.containers {
                    match self.client.create_container(c, Tags::new()) {
                        Ok(_) => {}
                        Err(e) if e.kind == ErrorKind::AlreadyExists => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                let tags = meta
                    .tags
                    .iter()
                    // The source's own provenance is replaced by this transfer's.
                    .filter(|(k, _)| !is_provenance(k))
                    .cloned()
                    .collect();
                let m = self.client.create_object(ObjectSpec {
                    name: name.to_string(),
                    dims: meta.dims.clone(),
                    dtype: meta.dtype,
                    fill: Some(meta.fill.clone()),
                    containers: meta.containers.clone(),
                    tags,
                    creator: String::new(),
                })?;
                self.client.sync_metadata()?;
                Ok(m)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Tags a transfer sets itself (the source's own are replaced).
fn is_provenance(k: &str) -> bool {
    matches!(k, "xsite.source" | "xsite.regions" | "xsite.received")
}

/// Chunk `i` read back must have the CRC-32C the source computed.
fn check_crc(key: &str, i: usize, buf: &[u8], done: &Journal) -> Result<()> {
    let crc = crc32c::crc32c(buf);
    if Some(&crc) != done.get(&(i as u32)) {
        return Err(XsiteError::Invalid(format!(
            "chunk {i} of transfer {key} reads back with CRC-32C {crc:08x}, not the source's: not published"
        )));
    }
    Ok(())
}

/// A transfer's key: the same source, object and region always give the same key, so a retry
/// resumes the earlier attempt.
pub fn transfer_key(source_site: &str, name: &str, region: &Region, chunks: usize) -> String {
    let s = format!("{source_site}\n{name}\n{region}\n{chunks}");
    crate::site::sha256_hex(s.as_bytes())[..32].to_string()
}

fn spec_digest(spec: &TransferSpec) -> String {
    let s = serde_json::to_string(&(&spec.region, &spec.chunks, &spec.meta.dims, spec.meta.dtype))
        .unwrap_or_default();
    crate::site::sha256_hex(s.as_bytes())
}

/// The journal of a staging object, if it was made for this very transfer: one tag
/// `xsite.done.INDEX` = CRC-32C (hex) per chunk stored.
fn journal_of(m: &ObjectMeta, spec: &TransferSpec) -> Journal {
    let digest = m
        .tags
        .iter()
        .find(|(n, _)| n == "xsite.spec")
        .map(|(_, v)| v);
    if !matches!(digest, Some(TagValue::Str(d)) if *d == spec_digest(spec)) {
        return Journal::new();
    }
    m.tags
        .iter()
        .filter_map(|(k, v)| {
            let i = k.strip_prefix(DONE_TAG)?.parse::<u32>().ok()?;
            let TagValue::Str(c) = v else { return None };
            let c = u32::from_str_radix(c, 16).ok()?;
            ((i as usize) < spec.chunks.len()).then_some((i, c))
        })
        .collect()
}

/// A transfer description from the other site is checked before anything is made of it:
/// region within the dims, chunks inside the region, disjoint in count and covering it.
pub fn check_spec(spec: &TransferSpec) -> Result<()> {
    pdcx_core::model::validate_name("object", &spec.meta.name)?;
    pdcx_core::model::validate_dims(&spec.meta.dims)?;
    if spec.meta.fill.len() != spec.meta.dtype.size() {
        return Err(invalid("the source's fill value does not match its dtype"));
    }
    if spec.key.len() != 32 || !spec.key.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(invalid(format!("transfer key {:?}", spec.key)));
    }
    crate::site::check_site_name(&spec.source_site)?;
    spec.region.check_within(&spec.meta.dims)?;
    if spec.chunks.is_empty() || spec.chunks.len() > MAX_CHUNKS {
        return Err(invalid(format!(
            "a transfer has 1..={MAX_CHUNKS} chunks, this one {}",
            spec.chunks.len()
        )));
    }
    let mut total = 0u64;
    for c in &spec.chunks {
        if c.ndim() != spec.region.ndim() || !spec.region.contains(c) {
            return Err(invalid(format!(
                "chunk {c} is not inside the region {}",
                spec.region
            )));
        }
        if c.byte_len(spec.meta.dtype.size())? > crate::wire::MAX_PAYLOAD {
            return Err(invalid(format!("chunk {c} is larger than a frame")));
        }
        total += c.num_elements();
    }
    if total != spec.region.num_elements() {
        return Err(invalid("the chunks do not cover the region exactly"));
    }
    Ok(())
}
