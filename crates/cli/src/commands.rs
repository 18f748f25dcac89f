//! Client-side commands: ls, show, put, get, query, tag, and the formatting of objects and
//! tags they share (what every subcommand shares is in `common`).

use crate::common::{connect, human_bytes, iso8601, msg, print_table, resolve};
use anyhow::{anyhow, bail, Context, Result};
use pdcx_cli::{npy, region_arg};
use pdcx_client::Client;
use pdcx_core::model::Tags;
use pdcx_core::protocol::{Durability, ObjectSpec};
use pdcx_core::region::slabs;
use pdcx_core::{Condition, ContainerInfo, Dtype, ErrorKind, ObjectMeta, Region, TagValue};
use serde_json::{json, Value};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// Largest piece moved in one request.
pub const SLAB_BYTES: u64 = 64 << 20;

// ---------------------------------------------------------------- formatting helpers

pub use pdcx_cli::dims_str;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn id_str(id: u64) -> String {
    format!("{id:#018x}")
}

pub(crate) fn tags_str(tags: &Tags) -> String {
    tags.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn tag_json(v: &TagValue) -> Value {
    match v {
        TagValue::Str(s) => json!(s),
        TagValue::Int(i) => json!(i),
        TagValue::Float(f) => json!(f),
        TagValue::Bytes(b) => json!(format!("bytes:{}", hex(b))),
    }
}

fn tags_json(tags: &Tags) -> Value {
    Value::Object(tags.iter().map(|(k, v)| (k.clone(), tag_json(v))).collect())
}

/// One element's bytes shown as its value (for the fill value).
fn element_str(dtype: Dtype, b: &[u8]) -> String {
    fn arr<const N: usize>(b: &[u8]) -> Option<[u8; N]> {
        b.try_into().ok()
    }
    let v = match dtype {
        Dtype::Int8 => arr::<1>(b).map(|a| i8::from_le_bytes(a).to_string()),
        Dtype::Int16 => arr::<2>(b).map(|a| i16::from_le_bytes(a).to_string()),
        Dtype::Int32 => arr::<4>(b).map(|a| i32::from_le_bytes(a).to_string()),
        Dtype::Int64 => arr::<8>(b).map(|a| i64::from_le_bytes(a).to_string()),
        Dtype::UInt8 => arr::<1>(b).map(|a| a[0].to_string()),
        Dtype::UInt16 => arr::<2>(b).map(|a| u16::from_le_bytes(a).to_string()),
        Dtype::UInt32 => arr::<4>(b).map(|a| u32::from_le_bytes(a).to_string()),
        Dtype::UInt64 => arr::<8>(b).map(|a| u64::from_le_bytes(a).to_string()),
        Dtype::Float32 => arr::<4>(b).map(|a| f32::from_le_bytes(a).to_string()),
        Dtype::Float64 => arr::<8>(b).map(|a| f64::from_le_bytes(a).to_string()),
        Dtype::Bytes => arr::<1>(b).map(|a| format!("{:?}", a[0] as char)),
    };
    v.unwrap_or_else(|| format!("bytes:{}", hex(b)))
}

fn container_json(c: &ContainerInfo, objects: Option<usize>) -> Value {
    let mut v = json!({
        "id": id_str(c.id), "name": c.name, "owner": c.owner, "creator": c.creator,
        "ctime": c.ctime, "ctime_iso": iso8601(c.ctime), "tags": tags_json(&c.tags),
    });
    if let Some(n) = objects {
        v["objects"] = json!(n);
    }
    v
}

fn object_json(o: &ObjectMeta) -> Value {
    json!({
        "id": id_str(o.id), "name": o.name, "owner": o.owner, "creator": o.creator,
        "ctime": o.ctime, "ctime_iso": iso8601(o.ctime),
        "mtime": o.mtime, "mtime_iso": iso8601(o.mtime),
        "dims": o.dims, "dtype": o.dtype_name(),
        // An object without an element type has no numpy type either.
        "numpy_dtype": (!o.is_untyped()).then(|| o.dtype.numpy_str()),
        "size_bytes": o.size_bytes(), "fill": hex(&o.fill),
        "containers": o.containers, "tags": tags_json(&o.tags),
    })
}

// ---------------------------------------------------------------- ls / show

pub fn ls(root: &Path, container: Option<&str>, json_out: bool) -> Result<()> {
    let client = connect(root)?;
    let objects = client.list_objects(container).map_err(msg)?;
    let containers = match container {
        Some(c) => vec![client.get_container(c).map_err(msg)?],
        None => client.list_containers().map_err(msg)?,
    };
    let count = |c: &ContainerInfo| {
        objects
            .iter()
            .filter(|o| o.containers.contains(&c.name))
            .count()
    };
    if json_out {
        let doc = json!({
            "containers": containers.iter().map(|c| container_json(c, Some(count(c)))).collect::<Vec<_>>(),
            "objects": objects.iter().map(object_json).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    if container.is_none() {
        if containers.is_empty() && objects.is_empty() {
            println!("no containers yet (`pdcx put FILE.npy` creates \"default\")");
            return Ok(());
        }
        if !containers.is_empty() {
            let rows: Vec<Vec<String>> = containers
                .iter()
                .map(|c| vec![c.name.clone(), count(c).to_string(), tags_str(&c.tags)])
                .collect();
            print_table(&["CONTAINER", "OBJECTS", "TAGS"], &rows);
            println!();
        }
    }
    if objects.is_empty() {
        println!("no objects");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = objects
        .iter()
        .map(|o| {
            vec![
                o.name.clone(),
                dims_str(&o.dims),
                o.dtype_name().to_string(),
                human_bytes(o.size_bytes()),
                o.containers.join(","),
                tags_str(&o.tags),
            ]
        })
        .collect();
    print_table(
        &["OBJECT", "DIMS", "DTYPE", "SIZE", "CONTAINERS", "TAGS"],
        &rows,
    );
    if objects.iter().any(|o| o.is_byte_stream()) {
        println!();
        crate::mpiio_cmd::print_streams(&client, &objects)?;
    }
    Ok(())
}

/// How many of `total` elements the extents cover, counting overlaps twice (so an upper bound).
fn written_elements(extents: &[pdcx_core::protocol::ExtentInfo], total: u64) -> u64 {
    extents
        .iter()
        .fold(0u64, |a, e| a.saturating_add(e.region.num_elements()))
        .min(total)
}

/// Raw bytes of `extents`, and of those the bytes of extents newer ones cover entirely
/// (checked for up to 256 extents; beyond, identical regions only).
fn hidden_bytes(extents: &[pdcx_core::protocol::ExtentInfo]) -> (u64, u64) {
    let mut by_age: Vec<&pdcx_core::protocol::ExtentInfo> = extents.iter().collect();
    by_age.sort_unstable_by_key(|e| std::cmp::Reverse(e.seq));
    let total = by_age.iter().map(|e| e.len).sum();
    let hidden = by_age
        .iter()
        .enumerate()
        .filter(|(i, e)| {
            let newer = by_age[..*i].iter().map(|n| &n.region);
            if by_age.len() <= 256 {
                pdcx_core::cover::hidden_by(&e.region, newer)
            } else {
                newer.into_iter().any(|r| *r == e.region)
            }
        })
        .map(|(_, e)| e.len)
        .sum();
    (total, hidden)
}

pub fn show(root: &Path, what: &str, json_out: bool) -> Result<()> {
    let client = connect(root)?;
    let o = resolve(&client, what)?;
    let extents = client.extents(o.id).map_err(msg)?;
    let owner_addr = client
        .cluster()
        .servers
        .get(o.owner as usize)
        .map_or_else(|| "?".to_string(), |s| s.addr.clone());
    let total: u64 = o.dims.iter().product();
    let written = written_elements(&extents, total);
    let fraction = if total == 0 {
        1.0
    } else {
        written as f64 / total as f64
    };
    if json_out {
        let mut doc = object_json(&o);
        doc["owner_addr"] = json!(owner_addr);
        doc["written_fraction_upper_bound"] = json!(fraction);
        let (bytes, hidden) = hidden_bytes(&extents);
        doc["stored_bytes"] = json!(bytes);
        doc["hidden_bytes"] = json!(hidden);
        if !o.is_byte_stream() {
            doc["versions"] = crate::versions_cmd::summary(&client, &o)?.1;
        }
        doc["extents"] = extents
            .iter()
            .map(|e| {
                json!({
                    "seq": e.seq, "offset": e.region.offset, "count": e.region.count,
                    "server": e.holder, "segment": e.segment, "segment_file": pdcx_store::segment_file_name(e.segment),
                    "log_offset": e.offset, "len": e.len, "cached": e.cached,
                    "tier": e.tier, "codec": e.codec, "stored_len": e.stored_len,
                    "shard": e.shard, "durability": e.durability,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    let fill = element_str(o.dtype, &o.fill);
    let lines = [
        ("object", o.name.clone()),
        ("id", id_str(o.id)),
        ("owner", format!("server {} ({owner_addr})", o.owner)),
        ("creator", o.creator.clone()),
        ("created", iso8601(o.ctime)),
        ("modified", iso8601(o.mtime)),
        ("dims", format!("{} ({total} elements)", dims_str(&o.dims))),
        (
            "dtype",
            if o.is_untyped() {
                "untyped (created without an element type; no data until one is set)".into()
            } else {
                format!(
                    "{} ({} bytes/element, {} in all)",
                    o.dtype,
                    o.dtype.size(),
                    human_bytes(o.size_bytes())
                )
            },
        ),
        ("fill", fill),
        ("containers", o.containers.join(", ")),
        ("tags", tags_str(&o.tags)),
    ];
    for (k, v) in lines {
        println!("{k:<11}{v}");
    }
    println!(
        "{:<11}{:.1}% of elements (upper bound, overlaps counted)",
        "written",
        fraction * 100.0
    );
    if o.is_byte_stream() {
        crate::mpiio_cmd::print_versions(root, o.id)?;
    } else {
        println!(
            "{:<11}{}",
            "versions",
            crate::versions_cmd::summary(&client, &o)?.0
        );
    }
    println!("{:<11}{}", "extents", extents.len());
    let (bytes, hidden) = hidden_bytes(&extents);
    println!(
        "{:<11}{} in extents, {} of them hidden by newer writes (garbage the next compaction frees)",
        "stored",
        human_bytes(bytes),
        human_bytes(hidden)
    );
    const SHOWN: usize = 100;
    let rows: Vec<Vec<String>> = extents
        .iter()
        .take(SHOWN)
        .map(|e| {
            let mut tier = if e.codec.is_empty() || e.codec == "none" {
                e.tier.clone()
            } else {
                format!(
                    "{} {} {:.2}x",
                    e.tier,
                    e.codec,
                    e.len as f64 / e.stored_len.max(1) as f64
                )
            };
            if !e.shard.is_empty() {
                tier = format!("{tier} shard {}", e.shard);
            }
            vec![
                e.seq.to_string(),
                e.region.to_string(),
                durability_label(&e.durability).to_string(),
                tier,
                format!(
                    "server {} log {} @{} +{} ({})",
                    e.holder,
                    pdcx_store::segment_file_name(e.segment),
                    e.offset,
                    e.len,
                    if e.cached { "cached" } else { "on disk" }
                ),
            ]
        })
        .collect();
    if !rows.is_empty() {
        println!();
        print_table(&["SEQ", "REGION", "DURABILITY", "TIER", "BYTES AT"], &rows);
    }
    if extents.len() > SHOWN {
        println!("... and {} more (see --json)", extents.len() - SHOWN);
    }
    Ok(())
}

/// What each durability an extent has reached means, for `pdcx show`.
fn durability_label(d: &str) -> &str {
    match d {
        "memory" => "memory (not fsynced)",
        "local" => "local (log fsynced)",
        "remote" => "remote (durable home)",
        // Regions another server holds: that server knows.
        "" => "-",
        other => other,
    }
}

// ---------------------------------------------------------------- put / get

/// Percent and MB/s on stderr, for transfers larger than one slab.
struct Progress {
    what: String,
    total: u64,
    done: u64,
    started: Instant,
    last: Instant,
    enabled: bool,
    tty: bool,
}

impl Progress {
    fn new(what: String, total: u64) -> Progress {
        let now = Instant::now();
        Progress {
            what,
            total,
            done: 0,
            started: now,
            last: now,
            enabled: total > SLAB_BYTES,
            // SAFETY: isatty only inspects a descriptor.
            tty: unsafe { libc::isatty(2) } == 1,
        }
    }

    fn rate(&self) -> f64 {
        self.done as f64 / 1e6 / self.started.elapsed().as_secs_f64().max(1e-9)
    }

    fn add(&mut self, n: u64) {
        self.done += n;
        let every = if self.tty { 250 } else { 2000 };
        if self.enabled
            && self.done < self.total
            && self.last.elapsed() >= Duration::from_millis(every)
        {
            self.last = Instant::now();
            let pct = self.done as f64 * 100.0 / self.total.max(1) as f64;
            let end = if self.tty { "\r" } else { "\n" };
            eprint!("{}: {pct:5.1}% ({:.1} MB/s){end}", self.what, self.rate());
        }
    }

    fn finish(&self) {
        if self.enabled {
            eprintln!(
                "{}: 100.0% ({:.1} MB/s, {:.1} s)   ",
                self.what,
                self.rate(),
                self.started.elapsed().as_secs_f64()
            );
        }
    }
}

pub(crate) fn parse_tag(kv: &str) -> Result<(String, TagValue)> {
    let (k, v) = kv
        .split_once('=')
        .ok_or_else(|| anyhow!("tag {kv:?} is not key=value"))?;
    let k = k.trim();
    if k.is_empty() {
        bail!("tag {kv:?} has no key before '='");
    }
    Ok((k.to_string(), TagValue::parse_literal(v)))
}

fn ensure_container(client: &Client, name: &str) -> Result<()> {
    match client.get_container(name) {
        Ok(_) => Ok(()),
        Err(e) if e.kind == ErrorKind::NotFound => {
            match client.create_container(name, Vec::new()) {
                Ok(_) => {
                    eprintln!("created container {name:?}");
                    Ok(())
                }
                Err(e) if e.kind == ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(msg(e)),
            }
        }
        Err(e) => Err(msg(e)),
    }
}

pub fn put(
    root: &Path,
    file: &Path,
    name: Option<&str>,
    container: &str,
    tags: &[String],
) -> Result<()> {
    let tags: Tags = tags.iter().map(|t| parse_tag(t)).collect::<Result<_>>()?;
    let f = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let file_len = f
        .metadata()
        .with_context(|| format!("reading {}", file.display()))?
        .len();
    let mut reader = BufReader::with_capacity(1 << 20, f);
    let hdr = npy::read_header(&mut reader).with_context(|| file.display().to_string())?;
    let data_len = hdr
        .data_len()
        .ok_or_else(|| anyhow!("{}: shape {:?} is too large", file.display(), hdr.shape))?;
    if file_len < hdr.data_offset + data_len {
        bail!(
            "{} is truncated: its header promises {data_len} bytes of data, the file holds {}",
            file.display(),
            file_len.saturating_sub(hdr.data_offset)
        );
    }
    let name = match name {
        Some(n) => n.to_string(),
        None => file
            .file_stem()
            .and_then(|s| s.to_str())
            .map(str::to_string)
            .ok_or_else(|| {
                anyhow!(
                    "cannot derive an object name from {}; pass --name",
                    file.display()
                )
            })?,
    };
    // A 0-d array becomes a 1-element 1-d object (pdcx objects have 1..=8 dims).
    let dims = if hdr.shape.is_empty() {
        vec![1]
    } else {
        hdr.shape.clone()
    };

    let client = connect(root)?;
    ensure_container(&client, container)?;
    let spec = ObjectSpec {
        name: name.clone(),
        dims: dims.clone(),
        dtype: hdr.dtype,
        fill: None,
        containers: vec![container.to_string()],
        tags,
        creator: String::new(),
    };
    let meta = client.create_object(spec).map_err(|e| {
        if e.kind == ErrorKind::AlreadyExists {
            anyhow!("{} (pick another --name)", e.message)
        } else {
            msg(e)
        }
    })?;

    let elem = hdr.dtype.size();
    let pieces = slabs(&Region::whole(&dims), elem, SLAB_BYTES);
    let largest = pieces.iter().map(|p| p.num_elements()).max().unwrap_or(0) as usize * elem;
    let mut buf = vec![0u8; largest];
    let mut progress = Progress::new(format!("put {name}"), data_len);
    for piece in &pieces {
        let len = piece.num_elements() as usize * elem;
        reader
            .read_exact(&mut buf[..len])
            .with_context(|| format!("reading {}", file.display()))?;
        client
            .write(meta.id, piece, &buf[..len], Durability::Local)
            .map_err(|e| {
                anyhow!(
                    "writing {piece} of {name} failed after {} of {data_len} bytes: {} \
                     (the object exists with partial data)",
                    progress.done,
                    e.message
                )
            })?;
        progress.add(len as u64);
    }
    progress.finish();
    println!(
        "put {name}: {} {} ({}) in container {container}, id {}",
        dims_str(&dims),
        hdr.dtype,
        human_bytes(data_len),
        id_str(meta.id)
    );
    Ok(())
}

pub fn get(
    root: &Path,
    what: &str,
    region: Option<&str>,
    output: &Path,
    version: Option<&str>,
) -> Result<()> {
    let client = connect(root)?;
    let o = resolve(&client, what)?;
    let version = version
        .map(|v| crate::versions_cmd::resolve_version(&o, v))
        .transpose()?;
    let region = match region {
        Some(spec) => region_arg::parse(spec, &o.dims)?,
        None => Region::whole(&o.dims),
    };
    let elem = o.dtype.size();
    let total = region
        .count
        .iter()
        .try_fold(elem as u64, |a, &c| a.checked_mul(c))
        .ok_or_else(|| anyhow!("region {region} is too large"))?;

    let file_name = output
        .file_name()
        .ok_or_else(|| anyhow!("{} is not a file name", output.display()))?;
    let tmp = output.with_file_name(format!(
        ".{}.partial-{}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| -> Result<()> {
        let f =
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let mut w = BufWriter::with_capacity(1 << 20, f);
        // A byte stream (a file logged by `pdcx run`) comes out as its bytes, unless a
        // .npy file is asked for.
        let raw = o.is_byte_stream() && output.extension().is_none_or(|e| e != "npy");
        if !raw {
            w.write_all(&npy::encode_header(o.dtype, &region.count))?;
        }
        let pieces = slabs(&region, elem, SLAB_BYTES);
        let largest = pieces.iter().map(|p| p.num_elements()).max().unwrap_or(0) as usize * elem;
        let mut buf = vec![0u8; largest];
        let mut progress = Progress::new(format!("get {}", o.name), total);
        for piece in &pieces {
            let len = piece.num_elements() as usize * elem;
            match version {
                Some(v) => client.read_version(o.id, piece, v, &mut buf[..len]),
                None => client.read_into(o.id, piece, &mut buf[..len]),
            }
            .map_err(|e| anyhow!("reading {piece} of {}: {}", o.name, e.message))?;
            w.write_all(&buf[..len])
                .with_context(|| format!("writing {}", tmp.display()))?;
            progress.add(len as u64);
        }
        let f = w
            .into_inner()
            .map_err(|e| anyhow!("writing {}: {}", tmp.display(), e.error()))?;
        f.sync_all()
            .with_context(|| format!("writing {}", tmp.display()))?;
        progress.finish();
        std::fs::rename(&tmp, output).with_context(|| format!("renaming to {}", output.display()))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    println!(
        "wrote {}: {} {} ({}) from {} region {region}",
        output.display(),
        dims_str(&region.count),
        o.dtype,
        human_bytes(total),
        o.name
    );
    Ok(())
}

// ---------------------------------------------------------------- query / tag

pub fn query(root: &Path, conditions: &[String], json_out: bool) -> Result<()> {
    let conds: Vec<Condition> = conditions
        .iter()
        .map(|c| Condition::parse(c).map_err(msg))
        .collect::<Result<_>>()?;
    let client = connect(root)?;
    let matches = client.query(conds).map_err(msg)?;
    if json_out {
        let list: Vec<Value> = matches
            .iter()
            .map(|(id, name)| json!({"id": id_str(*id), "name": name}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else if matches.is_empty() {
        eprintln!("no matching objects");
    } else {
        for (_, name) in &matches {
            println!("{name}");
        }
    }
    Ok(())
}

/// Options of `pdcx query --values`.
pub struct ValueQueryOpts<'a> {
    pub region: Option<&'a str>,
    pub container: Option<&'a str>,
    pub count_only: bool,
    /// Hits to print; `None`: 20 as text, every hit as JSON (a program reads all of it).
    pub limit: Option<u64>,
    pub bins: u32,
    pub json: bool,
}

/// One element as JSON, exactly (int64 beyond 2^53 too; a float32 as the f32 it is).
fn elem_json(dtype: pdcx_core::Dtype, b: &[u8]) -> Value {
    use pdcx_core::Dtype as D;
    let a8 = |b: &[u8]| -> [u8; 8] { b[..8].try_into().unwrap_or([0; 8]) };
    let a4 = |b: &[u8]| -> [u8; 4] { b[..4].try_into().unwrap_or([0; 4]) };
    match dtype {
        D::Int8 => json!(b[0] as i8),
        D::UInt8 | D::Bytes => json!(b[0]),
        D::Int16 => json!(i16::from_le_bytes([b[0], b[1]])),
        D::UInt16 => json!(u16::from_le_bytes([b[0], b[1]])),
        D::Int32 => json!(i32::from_le_bytes(a4(b))),
        D::UInt32 => json!(u32::from_le_bytes(a4(b))),
        D::Int64 => json!(i64::from_le_bytes(a8(b))),
        D::UInt64 => json!(u64::from_le_bytes(a8(b))),
        D::Float32 => json!(f32::from_le_bytes(a4(b))),
        D::Float64 => json!(f64::from_le_bytes(a8(b))),
    }
}

/// Most hits `pdcx query --values` fetches coordinates and values of (--count has no limit).
const CLI_MAX_HITS: u64 = 10_000_000;

/// `pdcx query --values`: a value query evaluated by the servers.
pub fn value_query(root: &Path, text: &str, opts: &ValueQueryOpts) -> Result<()> {
    use pdcx_core::valuequery::{QueryWant, ValueExpr};
    let parsed = ValueExpr::parse(text).map_err(msg)?;
    let client = connect(root)?;
    let mut metas: Vec<ObjectMeta> = Vec::new();
    let expr = parsed.try_map(&mut |name: &String| -> Result<u64> {
        let meta = match (resolve(&client, name), opts.container) {
            (Ok(m), _) => m,
            (Err(e), Some(c)) => resolve(&client, &format!("{c}/{name}"))
                .map_err(|_| anyhow!("{e}; no {c}/{name} either"))?,
            (Err(e), None) => return Err(e),
        };
        let id = meta.id;
        if !metas.iter().any(|m| m.id == id) {
            metas.push(meta);
        }
        Ok(id)
    })?;
    let region = match opts.region {
        Some(spec) => Some(region_arg::parse(spec, &metas[0].dims)?),
        None => None,
    };
    let want = QueryWant {
        coords: !opts.count_only,
        values: if opts.count_only {
            Vec::new()
        } else {
            metas.iter().map(|m| m.id).collect()
        },
        histogram_bins: opts.bins,
        max_hits: if opts.count_only { 0 } else { CLI_MAX_HITS },
    };
    let (answer, payload) = client.value_query(expr, region, want).map_err(msg)?;
    let n = answer.nhits as usize;
    let nd = answer.ndim as usize;
    let shown = if opts.count_only {
        0
    } else {
        let default = if opts.json { u64::MAX } else { 20 };
        n.min(
            opts.limit
                .unwrap_or(default)
                .try_into()
                .unwrap_or(usize::MAX),
        )
    };
    let coord = |i: usize, d: usize| {
        let at = (i * nd + d) * 8;
        u64::from_le_bytes(payload[at..at + 8].try_into().unwrap_or([0; 8]))
    };
    let values_at = n * nd * 8;
    let value = |k: usize, i: usize| -> Value {
        let start = values_at + metas[..k].iter().map(|m| m.dtype.size() * n).sum::<usize>();
        let size = metas[k].dtype.size();
        let b = &payload[start + i * size..start + (i + 1) * size];
        elem_json(metas[k].dtype, b)
    };
    if opts.json {
        let hits: Vec<Value> = (0..shown)
            .map(|i| {
                let vals: serde_json::Map<String, Value> = metas
                    .iter()
                    .enumerate()
                    .map(|(k, m)| (m.name.clone(), value(k, i)))
                    .collect();
                json!({"coords": (0..nd).map(|d| coord(i, d)).collect::<Vec<_>>(), "values": vals})
            })
            .collect();
        let out = json!({
            "nhits": answer.nhits, "shown": shown, "min": answer.min, "max": answer.max,
            "histogram": answer.histogram, "scanned_bytes": answer.scanned_bytes,
            "skipped_bytes": answer.skipped_bytes, "hits": hits,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "{} hits{}",
        answer.nhits,
        match (answer.min, answer.max) {
            (Some(lo), Some(hi)) => format!(" ({} from {lo} to {hi})", metas[0].name),
            _ => String::new(),
        }
    );
    if shown > 0 {
        let names: Vec<&str> = metas.iter().map(|m| m.name.as_str()).collect();
        println!("coords\t{}", names.join("\t"));
        for i in 0..shown {
            let c: Vec<String> = (0..nd).map(|d| coord(i, d).to_string()).collect();
            let v: Vec<String> = (0..metas.len()).map(|k| value(k, i).to_string()).collect();
            println!("({})\t{}", c.join(","), v.join("\t"));
        }
        if shown < n {
            println!(
                "... {} more (--limit N shows more, --json for all fields)",
                n - shown
            );
        }
    }
    if !answer.histogram.is_empty() {
        let (lo, hi) = (answer.min.unwrap_or(0.0), answer.max.unwrap_or(0.0));
        let width = (hi - lo) / answer.histogram.len() as f64;
        println!("histogram of {}:", metas[0].name);
        for (b, c) in answer.histogram.iter().enumerate() {
            println!(
                "  [{:.6}, {:.6}{}\t{c}",
                lo + b as f64 * width,
                lo + (b + 1) as f64 * width,
                if b + 1 == answer.histogram.len() {
                    "]"
                } else {
                    ")"
                }
            );
        }
    }
    eprintln!(
        "servers read {} of object data{}",
        human_bytes(answer.scanned_bytes),
        if answer.skipped_bytes > 0 {
            format!(
                ", skipped {} (extent statistics)",
                human_bytes(answer.skipped_bytes)
            )
        } else {
            String::new()
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slabs must tile the region in layout order, each at most the limit.
    fn check_slabs(offset: &[u64], count: &[u64], elem: usize, max: u64) {
        let region = Region::new(offset.to_vec(), count.to_vec()).unwrap();
        let pieces = slabs(&region, elem, max);
        let mut next = 0u64;
        for p in &pieces {
            assert!(region.contains(p), "{p} outside {region}");
            assert!(
                p.num_elements() * elem as u64 <= max.max(elem as u64),
                "{p} too big"
            );
            let (lo, hi) = region.span_of(p);
            assert_eq!(lo, next, "{p} not contiguous after element {next}");
            assert_eq!(hi - lo, p.num_elements(), "{p} not contiguous");
            next = hi;
        }
        assert_eq!(next, region.num_elements());
    }

    #[test]
    fn slabs_tile_regions() {
        check_slabs(&[0, 0], &[1000, 3], 8, 64 << 20);
        check_slabs(&[0, 0], &[1000, 3], 8, 100);
        check_slabs(&[2, 1, 3], &[5, 7, 11], 4, 40);
        check_slabs(&[2, 1, 3], &[5, 7, 11], 4, 4);
        check_slabs(&[0], &[10], 8, 1);
        assert_eq!(
            slabs(&Region::new(vec![0, 0], vec![10, 4]).unwrap(), 8, 1 << 20).len(),
            1
        );
        assert!(slabs(&Region::whole(&[0, 3]), 8, 100).is_empty());
    }

    #[test]
    fn tags_parse() {
        assert_eq!(
            parse_tag("step=3").unwrap(),
            ("step".into(), TagValue::Int(3))
        );
        assert_eq!(
            parse_tag("s=a=b").unwrap(),
            ("s".into(), TagValue::Str("a=b".into()))
        );
        assert!(parse_tag("novalue").is_err());
        assert!(parse_tag("=3").is_err());
    }

    #[test]
    fn fill_values_print_as_numbers() {
        assert_eq!(element_str(Dtype::Float64, &1.5f64.to_le_bytes()), "1.5");
        assert_eq!(element_str(Dtype::Int16, &(-2i16).to_le_bytes()), "-2");
        assert_eq!(element_str(Dtype::Int32, &[1, 2]), "bytes:0102");
    }
}
