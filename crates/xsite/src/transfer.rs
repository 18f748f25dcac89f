//! `pull` and `push`: a region of an object moved between sites in chunks over several
//! parallel TLS connections, each chunk checksummed where it is read, received through a
//! [`Receiver`](crate::receive::Receiver) (staging, journal, verified publish), with progress.

use crate::progress::Progress;
use crate::receive::{is_staging, transfer_key, Origin, Placement, Receiver};
use crate::site::Remote;
use crate::wire::{self, Msg, TransferSpec};
use crate::{invalid, io, Result, XsiteError};
use pdcx_client::Client;
use pdcx_core::model::ObjectMeta;
use pdcx_core::region::Region;
use rustls::{ClientConnection, StreamOwned};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Bytes per chunk (at most): big enough to fill a long link, small enough that a retry
/// after a kill repeats little.
pub const CHUNK_BYTES: u64 = 8 << 20;

/// One TLS connection to a remote gateway, past `Hello`.
pub struct Link {
    stream: StreamOwned<ClientConnection, TcpStream>,
    pub remote_site: String,
}

impl Link {
    /// Connects to the remote's first gateway.
    pub fn connect(remote: &Remote) -> Result<Link> {
        Self::connect_to(remote, 0)
    }

    /// Connects to gateway `i` (modulo their number) of the remote site.
    pub fn connect_to(remote: &Remote, i: usize) -> Result<Link> {
        let urls: Vec<&str> = remote.url.split(',').collect();
        let url = urls[i % urls.len()];
        let tcp = TcpStream::connect(url).map_err(io(format!("connect to {url}")))?;
        tcp.set_nodelay(true).ok();
        let conn = ClientConnection::new(
            crate::tls::client_config(&remote.fingerprint)?,
            crate::tls::server_name(),
        )
        .map_err(|e| XsiteError::Tls(e.to_string()))?;
        let mut link = Link {
            stream: StreamOwned::new(conn, tcp),
            remote_site: String::new(),
        };
        let hello = Msg::Hello {
            site: remote.as_site.clone(),
            token: remote.token.clone(),
            version: wire::VERSION,
        };
        match link.call(&hello, &[])? {
            (Msg::Welcome { site }, _) => link.remote_site = site,
            (m, _) => return Err(unexpected(&m)),
        }
        Ok(link)
    }

    /// Sends a request and reads its answer; an `Error` answer becomes an error.
    pub fn call(&mut self, msg: &Msg, payload: &[u8]) -> Result<(Msg, Vec<u8>)> {
        wire::send(&mut self.stream, msg, payload)?;
        match wire::recv(&mut self.stream)? {
            Some((Msg::Error { message }, _)) => Err(XsiteError::Remote(message)),
            Some(x) => Ok(x),
            None => Err(XsiteError::Remote(
                "the gateway closed the connection".into(),
            )),
        }
    }
}

fn unexpected(m: &Msg) -> XsiteError {
    XsiteError::Remote(format!("unexpected answer {m:?}"))
}

/// Cuts `region` into chunks of at most `max` bytes (one element at least), each contiguous
/// in the region's C order, in that order.
pub fn chunks(region: &Region, elem: usize, max: u64) -> Vec<Region> {
    pdcx_core::region::slabs(region, elem, max)
}

/// Options of a transfer.
#[derive(Debug, Clone)]
pub struct Options {
    /// Parallel connections.
    pub streams: usize,
    /// Print progress to stderr.
    pub progress: bool,
    /// Bytes per chunk.
    pub chunk_bytes: u64,
    /// Move every `step[d]`-th element of the region only (a downsampled copy, received as
    /// its own object `NAME@stepAxBx...`, see [`plan`]).
    pub step: Option<Vec<u64>>,
    /// A push's name at the receiving site (default: the same name).
    pub as_name: Option<String>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            streams: 4,
            progress: true,
            chunk_bytes: CHUNK_BYTES,
            step: None,
            as_name: None,
        }
    }
}

/// What a transfer did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub chunks: usize,
    /// Chunks moved now (the rest were there from an earlier attempt).
    pub moved_chunks: usize,
    pub moved_bytes: u64,
    pub published_bytes: u64,
    pub seconds: f64,
}

/// Runs `work(link, chunk index)` for every index in `todo` over `streams` connections.
fn parallel(
    remote: &Remote,
    streams: usize,
    todo: &[u32],
    init: &(dyn Fn(&mut Link) -> Result<()> + Sync),
    work: &(dyn Fn(&mut Link, u32) -> Result<()> + Sync),
) -> Result<()> {
    let next = AtomicUsize::new(0);
    let first_err: Mutex<Option<XsiteError>> = Mutex::new(None);
    std::thread::scope(|s| {
        for k in 0..streams.clamp(1, 64).min(todo.len().max(1)) {
            let (first_err, next) = (&first_err, &next);
            s.spawn(move || {
                // Stream k to gateway k (modulo): a site with one gateway per node receives
                // and sends on all of them.
                let linked = Link::connect_to(remote, k).and_then(|mut l| init(&mut l).map(|()| l));
                let mut link = match linked {
                    Ok(l) => l,
                    Err(e) => {
                        first_err
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                        return;
                    }
                };
                loop {
                    if first_err
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .is_some()
                    {
                        return;
                    }
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&i) = todo.get(k) else { return };
                    if let Err(e) = work(&mut link, i) {
                        first_err
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                        return;
                    }
                }
            });
        }
    });
    match first_err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// What a transfer moves and how each chunk is read at the source.
pub struct Plan {
    /// The object as received: the source's, or with a step the downsampled one (name
    /// `NAME@stepAxB...`, dims the selection's, tags `xsite.step` and `xsite.origin` added).
    pub meta: ObjectMeta,
    /// The region received (with a step: all of the downsampled object).
    pub region: Region,
    pub chunks: Vec<Region>,
    /// The source's object and region; the step.
    pub source: ObjectMeta,
    pub source_region: Region,
    pub step: Option<Vec<u64>>,
}

impl Plan {
    /// The transfer's description, with `source_site` as the site the data comes from.
    pub fn spec(&self, source_site: &str) -> TransferSpec {
        TransferSpec {
            key: transfer_key(
                source_site,
                &self.meta.name,
                &self.source_region,
                self.chunks.len(),
            ),
            source_site: source_site.to_string(),
            meta: self.meta.clone(),
            region: self.region.clone(),
            chunks: self.chunks.clone(),
            as_name: None,
        }
    }

    /// The box of the source read for `chunk` (with a step: the selection's bounding box).
    pub fn source_box(&self, chunk: &Region) -> Region {
        match &self.step {
            None => chunk.clone(),
            Some(step) => Region {
                offset: (0..chunk.ndim())
                    .map(|d| self.source_region.offset[d] + chunk.offset[d] * step[d])
                    .collect(),
                count: (0..chunk.ndim())
                    .map(|d| (chunk.count[d] - 1) * step[d] + 1)
                    .collect(),
            },
        }
    }
}

/// Plans moving `region` of `source`, every `step[d]` element when a step is given.
pub fn plan(
    source: ObjectMeta,
    region: Region,
    step: Option<&[u64]>,
    chunk_bytes: u64,
) -> Result<Plan> {
    let elem = source.dtype.size();
    let Some(step) = step else {
        let chunks = chunks(&region, elem, chunk_bytes);
        return Ok(Plan {
            meta: source.clone(),
            region: region.clone(),
            chunks,
            source,
            source_region: region,
            step: None,
        });
    };
    if step.len() != region.ndim() || step.contains(&0) {
        return Err(invalid(format!(
            "--step needs one step >= 1 per dim ({} dims), got {step:?}",
            region.ndim()
        )));
    }
    let picked: Vec<u64> = (0..region.ndim())
        .map(|d| region.count[d].div_ceil(step[d]))
        .collect();
    let join = |v: &[u64], sep: &str| v.iter().map(u64::to_string).collect::<Vec<_>>().join(sep);
    let mut meta = source.clone();
    meta.name = format!("{}@step{}", source.name, join(step, "x"));
    meta.dims = picked.clone();
    meta.tags
        .retain(|(k, _)| k != "xsite.step" && k != "xsite.origin");
    meta.tags.push((
        "xsite.step".into(),
        pdcx_core::model::TagValue::Str(join(step, ",")),
    ));
    meta.tags.push((
        "xsite.origin".into(),
        pdcx_core::model::TagValue::Str(join(&region.offset, ",")),
    ));
    let all = Region::new(vec![0; picked.len()], picked)?;
    Ok(Plan {
        chunks: chunks(&all, elem, chunk_bytes),
        meta,
        region: all,
        source,
        source_region: region,
        step: Some(step.to_vec()),
    })
}

/// Bytes of chunks `todo` of transfer `spec`.
fn bytes_of(spec: &TransferSpec, todo: &[u32]) -> u64 {
    let elem = spec.meta.dtype.size() as u64;
    todo.iter()
        .map(|&i| spec.chunks[i as usize].num_elements() * elem)
        .sum()
}

/// Remote site `site`, a link to it, and the metadata of its object `name`.
fn open_remote(root: &Path, site: &str, name: &str) -> Result<(Remote, Link, ObjectMeta)> {
    let remote = crate::site::remote(root, site)?;
    let mut link = Link::connect(&remote)?;
    let meta = match link.call(&Msg::Meta { name: name.into() }, &[])? {
        (Msg::MetaIs { meta }, _) => meta,
        (m, _) => return Err(unexpected(&m)),
    };
    // The local name of a pull derives from the name asked for, never from the answer: a
    // gateway answering with another name would choose where the data lands here.
    if meta.name != name {
        return Err(XsiteError::Remote(format!(
            "asked for {name:?}, the gateway answered with the metadata of {:?}",
            meta.name
        )));
    }
    Ok((remote, link, meta))
}

/// Pulls `region` (the whole object when None) of object `name` at remote site `site` into the
/// local deployment, under `local_name` (default: the same name).
pub fn pull(
    local: &Client,
    root: &Path,
    site: &str,
    name: &str,
    region: Option<&str>,
    local_name: Option<&str>,
    opts: &Options,
) -> Result<Report> {
    let t0 = Instant::now();
    let (remote, _, meta) = open_remote(root, site, name)?;
    let region = region_of(&meta, region)?;
    let plan = plan(meta, region, opts.step.as_deref(), opts.chunk_bytes)?;
    let spec = plan.spec(site);
    let receiver = Receiver::new(local.clone());
    let todo = receiver.begin(&Origin::Local, &spec)?;
    let total = bytes_of(&spec, &todo);
    let progress = Progress::new(
        format!("pull {site}:{}", spec.meta.name),
        total,
        opts.progress,
    );
    parallel(&remote, opts.streams, &todo, &|_| Ok(()), &|link, i| {
        let chunk = &spec.chunks[i as usize];
        let read = Msg::Read {
            name: plan.source.name.clone(),
            region: plan.source_box(chunk),
            step: plan.step.clone(),
        };
        let (crc, bytes) = match link.call(&read, &[])? {
            (Msg::Data { crc }, bytes) => (crc, bytes),
            (m, _) => return Err(unexpected(&m)),
        };
        receiver.store(&Origin::Local, &spec.key, i, crc, &bytes)?;
        progress.add(bytes.len() as u64);
        Ok(())
    })?;
    // The name is this side's choice: the remote's answer named the very object asked for.
    let place = Placement::local(local_name.unwrap_or(&spec.meta.name), &spec.meta);
    let published = receiver.publish(&Origin::Local, &spec.key, &place)?;
    Ok(Report {
        chunks: spec.chunks.len(),
        moved_chunks: todo.len(),
        moved_bytes: progress.done.load(Ordering::Relaxed),
        published_bytes: published,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// What a `--where` pull found and moved.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WhereReport {
    pub hits: u64,
    /// The objects made here: coordinates, values (none without hits).
    pub objects: Vec<String>,
    pub moved_bytes: u64,
    pub seconds: f64,
}

/// Pulls the elements of object `name` at `site` that satisfy value query `expr` (inside
/// `region` when given), evaluated by the servers there; only the hits move. They are received
/// as two objects, `BASE/coords` (uint64, hits x ndim) and `BASE/values` (the object's dtype),
/// BASE being `local_name` or `NAME@where`, tagged `xsite.where` (the query) and `xsite.of`
/// (the object), staged and verified like any pull.
pub fn pull_where(
    local: &Client,
    root: &Path,
    site: &str,
    name: &str,
    expr: &str,
    region: Option<&str>,
    local_name: Option<&str>,
) -> Result<WhereReport> {
    let t0 = Instant::now();
    let (_, mut link, meta) = open_remote(root, site, name)?;
    let region = region.map(|r| region_of(&meta, Some(r))).transpose()?;
    let query = Msg::Query {
        name: meta.name.clone(),
        expr: expr.to_string(),
        region: region.clone(),
    };
    let (nhits, ndim, crc, bytes) = match link.call(&query, &[])? {
        (Msg::Hits { nhits, ndim, crc }, bytes) => (nhits, ndim as u64, crc, bytes),
        (m, _) => return Err(unexpected(&m)),
    };
    let elem = meta.dtype.size() as u64;
    // `nhits` is the remote's word: checked, so a huge one cannot wrap into a match.
    let want = nhits.checked_mul(8 * ndim + elem);
    if ndim != meta.dims.len() as u64 || want != Some(bytes.len() as u64) {
        return Err(invalid(format!(
            "the answer holds {} bytes for {nhits} hits of {ndim} dims",
            bytes.len()
        )));
    }
    if crc32c::crc32c(&bytes) != crc {
        return Err(invalid("the query's answer arrived damaged (CRC-32C)"));
    }
    let mut report = WhereReport {
        hits: nhits,
        moved_bytes: bytes.len() as u64,
        ..WhereReport::default()
    };
    if nhits == 0 {
        report.seconds = t0.elapsed().as_secs_f64();
        return Ok(report);
    }
    let receiver = Receiver::new(local.clone());
    for (spec, data) in where_specs(
        site,
        &meta,
        expr,
        region.as_ref(),
        local_name,
        nhits,
        ndim,
        &bytes,
    )? {
        let elem = spec.meta.dtype.size() as u64;
        for i in receiver.begin(&Origin::Local, &spec)? {
            let c = &spec.chunks[i as usize];
            let start = linear(&spec.region, c) * elem;
            let part = &data[start as usize..(start + c.num_elements() * elem) as usize];
            receiver.store(&Origin::Local, &spec.key, i, crc32c::crc32c(part), part)?;
        }
        let place = Placement::local(&spec.meta.name, &spec.meta);
        receiver.publish(&Origin::Local, &spec.key, &place)?;
        report.objects.push(spec.meta.name.clone());
    }
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}

/// The two transfers of a value query's answer (`bytes`: `nhits` coordinates of `ndim` u64,
/// then the values of `meta`): objects `BASE/coords` (uint64, hits x ndim) and `BASE/values`
/// (`meta`'s dtype), BASE = `base` or `NAME@where`, tagged `xsite.where` and `xsite.of`; each
/// with the part of `bytes` it carries. None without hits.
#[allow(clippy::too_many_arguments)]
fn where_specs<'a>(
    site: &str,
    meta: &ObjectMeta,
    expr: &str,
    region: Option<&Region>,
    base: Option<&str>,
    nhits: u64,
    ndim: u64,
    bytes: &'a [u8],
) -> Result<Vec<(TransferSpec, &'a [u8])>> {
    if nhits == 0 {
        return Ok(Vec::new());
    }
    let base = base.map_or_else(|| format!("{}@where", meta.name), str::to_string);
    let (coords, values) = bytes.split_at((nhits * 8 * ndim) as usize);
    let tags: pdcx_core::model::Tags = vec![
        (
            "xsite.where".into(),
            pdcx_core::model::TagValue::Str(expr.to_string()),
        ),
        (
            "xsite.of".into(),
            pdcx_core::model::TagValue::Str(meta.name.clone()),
        ),
    ];
    let mut out = Vec::new();
    for (suffix, dims, dtype, fill, data) in [
        (
            "coords",
            vec![nhits, ndim],
            pdcx_core::Dtype::UInt64,
            vec![0u8; 8],
            coords,
        ),
        ("values", vec![nhits], meta.dtype, meta.fill.clone(), values),
    ] {
        let mut m = meta.clone();
        m.name = format!("{base}/{suffix}");
        m.dims = dims;
        m.dtype = dtype;
        m.fill = fill;
        m.containers = Vec::new();
        m.tags = tags.clone();
        let all = Region::new(vec![0; m.dims.len()], m.dims.clone())?;
        // Chunks of a C-order array cut along leading dims are contiguous runs of it.
        let chunks = chunks(&all, dtype.size(), CHUNK_BYTES);
        let what = format!("{}?{expr}@{region:?}/{suffix}", meta.name);
        let spec = TransferSpec {
            key: transfer_key(site, &what, &all, chunks.len()),
            source_site: site.to_string(),
            meta: m,
            region: all,
            chunks,
            as_name: None,
        };
        out.push((spec, data));
    }
    Ok(out)
}

/// Index in C order of `c`'s first element within `all` (a box at the origin).
fn linear(all: &Region, c: &Region) -> u64 {
    c.offset
        .iter()
        .zip(&all.count)
        .fold(0u64, |acc, (o, n)| acc * n + o)
}

/// Pushes `region` (whole object when None) of local object `name` to remote site `site`,
/// which publishes it under the same name.
pub fn push(
    local: &Client,
    root: &Path,
    name: &str,
    region: Option<&str>,
    site: &str,
    opts: &Options,
) -> Result<Report> {
    let remote = crate::site::remote(root, site)?;
    let meta = local.open_object(name)?;
    let region = region_of(&meta, region)?;
    let elem = meta.dtype.size();
    let plan = plan(meta, region, opts.step.as_deref(), opts.chunk_bytes)?;
    let mut spec = plan.spec(&remote.as_site);
    if let Some(n) = &opts.as_name {
        pdcx_core::model::validate_name("object", n)?;
        spec.as_name = Some(n.clone());
        // Another name is another transfer: the same key would resume (or clash with) the
        // push under the source's name.
        spec.key = transfer_key(
            &remote.as_site,
            &format!("{}\n--as {n}", plan.meta.name),
            &plan.source_region,
            plan.chunks.len(),
        );
    }
    send(&remote, site, &spec, opts, &|chunk| {
        let mut buf = vec![0u8; chunk.byte_len(elem)? as usize];
        match &plan.step {
            Some(step) => {
                local.read_strided(plan.source.id, &plan.source_box(chunk), step, &mut buf)?
            }
            None => local.read_into(plan.source.id, chunk, &mut buf)?,
        }
        Ok(buf)
    })
}

/// Pushes the elements of local object `name` satisfying value query `expr` (inside `region`
/// when given), evaluated by this site's servers: the remote site receives them as
/// `BASE/coords` and `BASE/values` (BASE = `NAME@where`), as a `--where` pull would.
pub fn push_where(
    local: &Client,
    root: &Path,
    name: &str,
    expr: &str,
    region: Option<&str>,
    site: &str,
    opts: &Options,
) -> Result<WhereReport> {
    let t0 = Instant::now();
    let remote = crate::site::remote(root, site)?;
    let meta = local.open_object(name)?;
    let region = region.map(|r| region_of(&meta, Some(r))).transpose()?;
    let (nhits, ndim, bytes) = where_query(local, &meta, expr, region.clone())?;
    let mut report = WhereReport {
        hits: nhits,
        moved_bytes: bytes.len() as u64,
        ..WhereReport::default()
    };
    for (spec, data) in where_specs(
        &remote.as_site,
        &meta,
        expr,
        region.as_ref(),
        None,
        nhits,
        ndim,
        &bytes,
    )? {
        let elem = spec.meta.dtype.size() as u64;
        send(&remote, site, &spec, opts, &|chunk| {
            let start = linear(&spec.region, chunk) * elem;
            Ok(data[start as usize..(start + chunk.num_elements() * elem) as usize].to_vec())
        })?;
        report.objects.push(spec.meta.name.clone());
    }
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}

/// Sends transfer `spec` to `remote` (named `site`), each chunk's bytes from `read`: begins it
/// there (learning what is missing), sends the missing chunks over parallel streams, and
/// has it published.
fn send(
    remote: &Remote,
    site: &str,
    spec: &TransferSpec,
    opts: &Options,
    read: &(dyn Fn(&Region) -> Result<Vec<u8>> + Sync),
) -> Result<Report> {
    let t0 = Instant::now();
    let todo = match Link::connect(remote)?.call(&Msg::Begin { spec: spec.clone() }, &[])? {
        (Msg::Missing { chunks }, _) => chunks,
        (m, _) => return Err(unexpected(&m)),
    };
    if todo.iter().any(|&i| i as usize >= spec.chunks.len()) {
        return Err(invalid(
            "the remote asked for a chunk the transfer does not have",
        ));
    }
    let progress = Progress::new(
        format!("push {} to {site}", spec.meta.name),
        bytes_of(spec, &todo),
        opts.progress,
    );
    // Each stream's gateway learns the transfer first (the journal they share is in the
    // staging object).
    let begin = |link: &mut Link| match link.call(&Msg::Begin { spec: spec.clone() }, &[])? {
        (Msg::Missing { .. }, _) => Ok(()),
        (m, _) => Err(unexpected(&m)),
    };
    parallel(remote, opts.streams, &todo, &begin, &|link, i| {
        let buf = read(&spec.chunks[i as usize])?;
        let msg = Msg::Chunk {
            key: spec.key.clone(),
            index: i,
            crc: crc32c::crc32c(&buf),
        };
        match link.call(&msg, &buf)? {
            (Msg::Stored, _) => {}
            (m, _) => return Err(unexpected(&m)),
        }
        progress.add(buf.len() as u64);
        Ok(())
    })?;
    // A new link for the end: one idle for the whole transfer would outlive the gateway's
    // read timeout. `Begin` again, for a gateway restarted meanwhile (it resumes from the
    // journal, finding every chunk there).
    let mut link = Link::connect(remote)?;
    begin(&mut link)?;
    let published = match link.call(
        &Msg::Finish {
            key: spec.key.clone(),
        },
        &[],
    )? {
        (Msg::Published { bytes }, _) => bytes,
        (m, _) => return Err(unexpected(&m)),
    };
    Ok(Report {
        chunks: spec.chunks.len(),
        moved_chunks: todo.len(),
        moved_bytes: progress.done.load(Ordering::Relaxed),
        published_bytes: published,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// Runs value query `expr` over object `meta` (names in it not found are tried in `meta`'s
/// containers) on this deployment's servers: (hits, ndim, payload of the hits' coordinates
/// then `meta`'s values at them), bounded by one frame. Used by the gateway for a `--where`
/// pull and locally for a `--where` push.
pub fn where_query(
    client: &Client,
    meta: &ObjectMeta,
    expr: &str,
    region: Option<Region>,
) -> Result<(u64, u64, Vec<u8>)> {
    let parsed = pdcx_core::valuequery::ValueExpr::parse(expr)?;
    // Staging objects hold transfers not yet verified (and other sites' pushes): a query
    // never reads them, under any name it resolves to.
    let not_staging = |m: ObjectMeta| -> pdcx_core::Result<u64> {
        if is_staging(&m.name) {
            return Err(pdcx_core::Error::invalid(format!(
                "{} is a staging object, not one a query may read",
                m.name
            )));
        }
        Ok(m.id)
    };
    not_staging(meta.clone())?;
    let query = parsed.try_map(&mut |n: &String| -> pdcx_core::Result<u64> {
        let found = match client.open_object(n) {
            Ok(m) => Ok(m),
            Err(e) => meta
                .containers
                .iter()
                .find_map(|c| client.open_object(&format!("{c}/{n}")).ok())
                .ok_or(e),
        };
        not_staging(found?)
    })?;
    if let Some(r) = &region {
        r.check_within(&meta.dims)?;
    }
    let per_hit = 8 * meta.dims.len() as u64 + meta.dtype.size() as u64;
    let want = pdcx_core::valuequery::QueryWant {
        coords: true,
        values: vec![meta.id],
        histogram_bins: 0,
        max_hits: crate::wire::MAX_PAYLOAD / per_hit,
    };
    let (answer, bytes) = client.value_query(query, region, want)?;
    Ok((answer.nhits, answer.ndim as u64, bytes))
}

/// The region a `--region` spec names in `meta` (whole object when None): one item per dim,
/// `START:END`, `:` or `INDEX`.
pub fn region_of(meta: &ObjectMeta, spec: Option<&str>) -> Result<Region> {
    let Some(spec) = spec else {
        return Ok(Region::new(vec![0; meta.dims.len()], meta.dims.clone())?);
    };
    let parts: Vec<&str> = spec.split(',').map(str::trim).collect();
    if parts.len() != meta.dims.len() {
        return Err(invalid(format!(
            "region {spec:?} has {} dims, {} has {} (dims {:?})",
            parts.len(),
            meta.name,
            meta.dims.len(),
            meta.dims
        )));
    }
    let num = |s: &str| {
        s.trim().parse::<u64>().map_err(|_| {
            invalid(format!(
                "region {spec:?}: {s:?} is not a non-negative integer"
            ))
        })
    };
    let mut offset = Vec::new();
    let mut count = Vec::new();
    for (part, &dim) in parts.iter().zip(&meta.dims) {
        let (lo, hi) = match part.split_once(':') {
            Some((a, b)) => (
                if a.trim().is_empty() { 0 } else { num(a)? },
                if b.trim().is_empty() { dim } else { num(b)? },
            ),
            None => {
                let i = num(part)?;
                (i, i.saturating_add(1))
            }
        };
        if lo >= hi || hi > dim {
            return Err(invalid(format!(
                "region {spec:?}: {lo}:{hi} is empty or outside 0:{dim}"
            )));
        }
        offset.push(lo);
        count.push(hi - lo);
    }
    Ok(Region::new(offset, count)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_region_once_within_the_size() {
        let r = Region::new(vec![3, 0, 5], vec![10, 300, 70]).unwrap();
        for max in [4 * 30u64, 4 * 70, 4 * 70 * 300, 1 << 30, 4 * 1000] {
            let c = chunks(&r, 4, max);
            assert_eq!(
                c.iter().map(Region::num_elements).sum::<u64>(),
                r.num_elements()
            );
            for (i, a) in c.iter().enumerate() {
                assert!(r.contains(a));
                assert!(a.num_elements() * 4 <= max.max(4), "{a} over {max}");
                assert!(c[i + 1..].iter().all(|b| !a.overlaps(b)));
            }
        }
    }
}
