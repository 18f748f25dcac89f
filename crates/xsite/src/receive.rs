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
//! **Whose transfer**: every transfer belongs to an [`Origin`], this site's own (a pull, an
//! import) or the remote site that pushes it, as its gateway connection authenticated it (never
//! a name the sender writes into its messages). Keys are looked up within their origin and
//! a pushed transfer's staging object is `xsite.staging/@SITE/<key>`, so one site can neither
//! send chunks into, nor finish, nor resume another's transfer, even knowing its key. Where a
//! transfer is published is a [`Placement`]: a pull's is the puller's choice; a push from site
//! S lands under `S/` (objects and containers) unless this site granted S the name (see
//! [`push_placement`]), and never writes into an object there that S did not send.
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

pub use crate::{is_staging, STAGING_PREFIX};

/// Who a transfer belongs to: transfers of different origins never share a key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Origin {
    /// This site's own: a pull or an import.
    Local,
    /// A push from this remote site (the one its gateway connection authenticated).
    Site(String),
}

impl Origin {
    /// The staging object of transfer `key`: `@` cannot begin a site name, so a remote site's
    /// staging names never meet this site's own.
    fn staging_name(&self, key: &str) -> String {
        match self {
            Origin::Local => format!("{STAGING_PREFIX}{key}"),
            Origin::Site(s) => format!("{STAGING_PREFIX}@{s}/{key}"),
        }
    }
}

/// Where a transfer is published: the object's name, the containers it joins, and whose
/// received data an existing object of that name must hold to be written into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub name: String,
    pub containers: Vec<String>,
    /// `Some(S)`: an existing object is written into only if its `xsite.source` says site S
    /// sent it (a push never writes over what it did not send); `None`: any (this site's own
    /// choice, or a grant).
    pub owner: Option<String>,
}

impl Placement {
    /// Under `name` with the source's containers: what this site chose itself.
    pub fn local(name: &str, meta: &ObjectMeta) -> Placement {
        Placement {
            name: name.to_string(),
            containers: meta.containers.clone(),
            owner: None,
        }
    }
}

/// Whether grant `g` covers `name`: `g` names it exactly, or ends with `/` and prefixes it.
fn granted(grants: &[String], name: &str) -> bool {
    grants
        .iter()
        .any(|g| g == name || (g.ends_with('/') && name.starts_with(g.as_str())))
}

/// Where a push of `spec` from site `site` lands, `grants` being the names this site granted
/// `site`: a granted name as it is (joining the source's containers that are granted too);
/// any other under `SITE/` (its containers `SITE/C`), written into only if `site` sent it.
pub fn push_placement(site: &str, spec: &TransferSpec, grants: &[String]) -> Result<Placement> {
    let name = spec.as_name.as_deref().unwrap_or(&spec.meta.name);
    let p = if granted(grants, name) {
        Placement {
            name: name.to_string(),
            containers: spec
                .meta
                .containers
                .iter()
                .filter(|c| granted(grants, c) || granted(grants, &format!("{c}/")))
                .cloned()
                .collect(),
            owner: None,
        }
    } else {
        Placement {
            name: format!("{site}/{name}"),
            containers: spec
                .meta
                .containers
                .iter()
                .map(|c| format!("{site}/{c}"))
                .collect(),
            owner: Some(site.to_string()),
        }
    };
    pdcx_core::model::validate_name("object", &p.name)?;
    for c in &p.containers {
        pdcx_core::model::validate_name("container", c)?;
    }
    if is_staging(&p.name) {
        return Err(invalid(format!("{} is a staging name", p.name)));
    }
    Ok(p)
}
/// Journal entries on a staging object: `xsite.done.INDEX` = the chunk's CRC-32C (hex).
const DONE_TAG: &str = "xsite.done.";
/// Most chunks a transfer may have (bounds the journal).
pub const MAX_CHUNKS: usize = 1 << 16;

/// The chunks of a transfer stored so far: index -> CRC-32C.
type Journal = BTreeMap<u32, u32>;

/// The transfers begun in this process, by origin and key.
type Open = HashMap<(Origin, String), Arc<Mutex<Staged>>>;

/// Receives transfers into one deployment; shared by the gateway's connections.
pub struct Receiver {
    client: Client,
    /// Per origin and transfer key: the staging object and its journal (one writer of the tags
    /// at a time).
    open: Mutex<Open>,
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

    /// Starts or resumes transfer `spec` of `origin`: the indices of the chunks still missing.
    pub fn begin(&self, origin: &Origin, spec: &TransferSpec) -> Result<Vec<u32>> {
        check_spec(spec)?;
        if let Origin::Site(site) = origin {
            if spec.source_site != *site {
                return Err(invalid(format!(
                    "site {site} pushes as {:?}",
                    spec.source_site
                )));
            }
        }
        let staged = self.staged(origin, spec)?;
        let s = staged.lock().unwrap_or_else(|p| p.into_inner());
        Ok((0..spec.chunks.len() as u32)
            .filter(|i| !s.done.contains_key(i))
            .collect())
    }

    fn staged(&self, origin: &Origin, spec: &TransferSpec) -> Result<Arc<Mutex<Staged>>> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let slot = (origin.clone(), spec.key.clone());
        if let Some(s) = open.get(&slot) {
            let same = s.lock().unwrap_or_else(|p| p.into_inner()).spec == *spec;
            if !same {
                return Err(invalid(format!(
                    "transfer {} was begun with another description",
                    spec.key
                )));
            }
            return Ok(s.clone());
        }
        let name = origin.staging_name(&spec.key);
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
        open.insert(slot, s.clone());
        Ok(s)
    }

    /// Transfer `key` of `origin`, begun in this process (another origin's is not found).
    fn begun(&self, origin: &Origin, key: &str) -> Result<Arc<Mutex<Staged>>> {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(origin.clone(), key.to_string()))
            .cloned()
            .ok_or_else(|| invalid(format!("transfer {key} was not begun")))
    }

    /// Stores chunk `index` of transfer `key` of `origin` (begun), after checking its size and
    /// CRC.
    pub fn store(
        &self,
        origin: &Origin,
        key: &str,
        index: u32,
        crc: u32,
        bytes: &[u8],
    ) -> Result<()> {
        let staged = self.begun(origin, key)?;
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

    /// The description transfer `key` of `origin` (begun) was begun with.
    pub fn spec_of(&self, origin: &Origin, key: &str) -> Result<TransferSpec> {
        let staged = self.begun(origin, key)?;
        let s = staged.lock().unwrap_or_else(|p| p.into_inner());
        Ok(s.spec.clone())
    }

    /// Publishes transfer `key` of `origin` once every chunk is stored: verifies each against
    /// its CRC, writes it at `place`, adds provenance, deletes the staging object. Returns the
    /// bytes published.
    pub fn publish(&self, origin: &Origin, key: &str, place: &Placement) -> Result<u64> {
        let staged = self.begun(origin, key)?;
        let mut s = staged.lock().unwrap_or_else(|p| p.into_inner());
        let local_name = place.name.as_str();
        pdcx_core::model::validate_name("object", local_name)?;
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
            if self.adopt(&s, place)? {
                drop(s);
                self.forget(origin, key);
                return Ok(bytes);
            }
            // The name was taken meanwhile: publish into that object like any other.
        }
        let target = self.target(place, meta)?;
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
        self.forget(origin, key);
        Ok(bytes)
    }

    fn forget(&self, origin: &Origin, key: &str) {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(origin.clone(), key.to_string()));
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

    /// Makes the verified staging object the object at `place` (see the module doc): false
    /// when its name was taken meanwhile (nothing is renamed then).
    fn adopt(&self, s: &Staged, place: &Placement) -> Result<bool> {
        let meta = &s.spec.meta;
        let id = s.staging.id;
        let name = place.name.as_str();
        for c in &place.containers {
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

    /// The object received data is published under: `place`'s as it is (if the placement's
    /// owner sent it), or created like the source (shape, dtype, fill, tags; the placement's
    /// containers created if missing).
    fn target(&self, place: &Placement, meta: &ObjectMeta) -> Result<ObjectMeta> {
        let name = place.name.as_str();
        match self.client.open_object(name) {
            Ok(m) => {
                if let Some(site) = &place.owner {
                    if !sent_by(&m, site) {
                        return Err(invalid(format!(
                            "{name} exists here and was not received from site {site}: a push from {site} does not write into it (this site may grant it with `pdcx remote grant {site} {name}`)"
                        )));
                    }
                }
                if m.dims != meta.dims || m.dtype != meta.dtype {
                    return Err(invalid(format!(
                        "{name} exists here with dims {:?} and dtype {}, the source's are {:?} and {}: pull it under another name (--as)",
                        m.dims, m.dtype, meta.dims, meta.dtype
                    )));
                }
                Ok(m)
            }
            Err(e) if e.kind == ErrorKind::NotFound => {
                for c in &place.containers {
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
                    containers: place.containers.clone(),
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

/// Whether object `m` holds data received from site `site` (its provenance says so).
fn sent_by(m: &ObjectMeta, site: &str) -> bool {
    m.tags.iter().any(|(k, v)| {
        k == "xsite.source"
            && matches!(v, TagValue::Str(s) if s.split_once(':').is_some_and(|(from, _)| from == site))
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use pdcx_core::Dtype;

    fn spec(name: &str, containers: &[&str], as_name: Option<&str>) -> TransferSpec {
        let region = Region::new(vec![0], vec![8]).unwrap();
        TransferSpec {
            key: "ab".repeat(16),
            source_site: "hpc".into(),
            meta: ObjectMeta {
                id: 1,
                name: name.into(),
                owner: 0,
                creator: String::new(),
                ctime: 0.0,
                mtime: 0.0,
                dims: vec![8],
                dtype: Dtype::Int8,
                fill: vec![0],
                containers: containers.iter().map(|c| c.to_string()).collect(),
                tags: Tags::new(),
                access: Default::default(),
            },
            region: region.clone(),
            chunks: vec![region],
            as_name: as_name.map(str::to_string),
        }
    }

    #[test]
    fn a_push_lands_under_its_sites_names_unless_granted() {
        let p = push_placement("hpc", &spec("run/x", &["run"], None), &[]).unwrap();
        assert_eq!(p.name, "hpc/run/x");
        assert_eq!(p.containers, ["hpc/run"]);
        assert_eq!(p.owner.as_deref(), Some("hpc"));
        // `--as` names the object within the site's names, never outside them.
        let p = push_placement("hpc", &spec("run/x", &[], Some("etc/x")), &[]).unwrap();
        assert_eq!(p.name, "hpc/etc/x");
        let p = push_placement("hpc", &spec("xsite.staging/k", &[], None), &[]).unwrap();
        assert_eq!(p.name, "hpc/xsite.staging/k", "never a staging name itself");
        // Granted: a prefix or an exact name; containers only where granted too.
        let grants = vec!["run/".to_string(), "solo".to_string()];
        let p = push_placement("hpc", &spec("run/x", &["run", "other"], None), &grants).unwrap();
        assert_eq!((p.name.as_str(), p.owner), ("run/x", None));
        assert_eq!(p.containers, ["run"]);
        assert_eq!(
            push_placement("hpc", &spec("solo", &[], None), &grants)
                .unwrap()
                .name,
            "solo"
        );
        for not in ["solo2", "run", "runx/y"] {
            let p = push_placement("hpc", &spec(not, &[], None), &grants).unwrap();
            assert_eq!(p.name, format!("hpc/{not}"), "{not} is not granted");
        }
    }

    #[test]
    fn staging_names_are_per_origin() {
        let local = Origin::Local.staging_name("k");
        let hpc = Origin::Site("hpc".into()).staging_name("k");
        let cloud = Origin::Site("cloud".into()).staging_name("k");
        assert!(is_staging(&local) && is_staging(&hpc) && is_staging(&cloud));
        assert!(local != hpc && hpc != cloud && local != cloud);
        assert_eq!(hpc, "xsite.staging/@hpc/k");
    }

    #[test]
    fn sent_by_reads_the_provenance_site() {
        let mut m = spec("hpc/x", &[], None).meta;
        assert!(!sent_by(&m, "hpc"));
        m.tags
            .push(("xsite.source".into(), TagValue::Str("hpc:run/x".into())));
        assert!(sent_by(&m, "hpc") && !sent_by(&m, "hp") && !sent_by(&m, "cloud"));
    }
}
