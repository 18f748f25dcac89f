//! The native half of `import pdcx`. It exposes the Rust client almost one to one; shapes,
//! numpy dtypes and indexing live in the pure-Python layer (python/pdcx). Metadata crosses as
//! JSON text so this file needs no per-field conversions. Every blocking call releases the GIL.

use pdcx_client::shm::Payload;
use pdcx_client::{Client as RustClient, Status, Transfer as RustTransfer};
use pdcx_core::model::Tags;
use pdcx_core::protocol::{Consistency, Durability, ObjectSpec, TagTarget};
use pdcx_core::{Condition, ContainerInfo, Dtype, ErrorKind, ObjectMeta, Region, TagValue};
use pdcx_server::{Server, ServerConfig, ServerHandle};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::{json, Value};
use std::path::PathBuf;

mod files;

pyo3::create_exception!(_native, PdcxError, PyException);
pyo3::create_exception!(_native, NotFoundError, PdcxError);
pyo3::create_exception!(_native, AlreadyExistsError, PdcxError);
pyo3::create_exception!(_native, InvalidArgumentError, PdcxError);
pyo3::create_exception!(_native, OutOfBoundsError, InvalidArgumentError);
pyo3::create_exception!(_native, DtypeMismatchError, InvalidArgumentError);
pyo3::create_exception!(_native, UnavailableError, PdcxError);
pyo3::create_exception!(_native, AuthError, PdcxError);
pyo3::create_exception!(_native, NoSpaceError, PdcxError);
pyo3::create_exception!(_native, ProtocolError, PdcxError);

/// A transfer's report as the dict `Client.pull`/`push` return.
fn report_dict(r: &pdcx_xsite::transfer::Report) -> XsiteReport {
    [
        ("chunks", r.chunks as f64),
        ("moved_chunks", r.moved_chunks as f64),
        ("moved_bytes", r.moved_bytes as f64),
        ("published_bytes", r.published_bytes as f64),
        ("seconds", r.seconds),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn xsite_to_py(e: pdcx_xsite::XsiteError) -> PyErr {
    match e {
        pdcx_xsite::XsiteError::Pdcx(e) => to_py(e),
        pdcx_xsite::XsiteError::Invalid(m) => InvalidArgumentError::new_err(m),
        other => PdcxError::new_err(other.to_string()),
    }
}

fn to_py(e: pdcx_core::Error) -> PyErr {
    let m = e.message;
    match e.kind {
        ErrorKind::NotFound => NotFoundError::new_err(m),
        ErrorKind::AlreadyExists => AlreadyExistsError::new_err(m),
        ErrorKind::InvalidArgument => InvalidArgumentError::new_err(m),
        ErrorKind::OutOfBounds => OutOfBoundsError::new_err(m),
        ErrorKind::DtypeMismatch => DtypeMismatchError::new_err(m),
        ErrorKind::Unavailable => UnavailableError::new_err(m),
        ErrorKind::Auth => AuthError::new_err(m),
        ErrorKind::NoSpace => NoSpaceError::new_err(m),
        ErrorKind::Protocol => ProtocolError::new_err(m),
        ErrorKind::Io | ErrorKind::Internal => PdcxError::new_err(m),
    }
}

type R<T> = PyResult<T>;

fn tag_json(v: &TagValue) -> Value {
    match v {
        TagValue::Str(s) => json!(s),
        TagValue::Int(i) => json!(i),
        TagValue::Float(f) => json!(f),
        TagValue::Bytes(b) => json!({ "__bytes__": b }),
    }
}

fn tags_json(tags: &Tags) -> Value {
    Value::Object(tags.iter().map(|(k, v)| (k.clone(), tag_json(v))).collect())
}

fn object_json(o: &ObjectMeta) -> String {
    json!({
        "id": o.id, "name": o.name, "owner": o.owner, "creator": o.creator, "ctime": o.ctime,
        "mtime": o.mtime, "dims": o.dims, "dtype": o.dtype.name(), "fill": o.fill,
        "containers": o.containers, "tags": tags_json(&o.tags),
    })
    .to_string()
}

fn container_json(c: &ContainerInfo) -> Value {
    json!({"id": c.id, "name": c.name, "owner": c.owner, "creator": c.creator, "ctime": c.ctime, "tags": tags_json(&c.tags)})
}

/// Python tag values: str, int (bool counts as int), float, bytes.
fn extract_tags(items: Vec<(String, Bound<'_, PyAny>)>) -> R<Tags> {
    items
        .into_iter()
        .map(|(k, v)| {
            let value = if let Ok(b) = v.downcast::<PyBytes>() {
                TagValue::Bytes(b.as_bytes().to_vec())
            } else if let Ok(s) = v.extract::<String>() {
                TagValue::Str(s)
            } else if let Ok(i) = v.extract::<i64>() {
                TagValue::Int(i)
            } else if v.hasattr("__index__")? {
                // An integer beyond int64 would silently turn into a rounded float.
                return Err(InvalidArgumentError::new_err(format!(
                    "tag {k:?}: integer {v} does not fit in int64"
                )));
            } else if let Ok(f) = v.extract::<f64>() {
                TagValue::Float(f)
            } else {
                return Err(InvalidArgumentError::new_err(format!(
                    "tag {k:?}: values must be str, int, float or bytes, not {}",
                    v.get_type().name()?
                )));
            };
            Ok((k, value))
        })
        .collect()
}

fn region(offset: Vec<u64>, count: Vec<u64>) -> R<Region> {
    Region::new(offset, count).map_err(to_py)
}

fn durability(s: &str) -> R<Durability> {
    match s {
        "memory" => Ok(Durability::Memory),
        "local" => Ok(Durability::Local),
        "remote" => Ok(Durability::Remote),
        _ => Err(InvalidArgumentError::new_err(format!(
            "durability must be 'memory', 'local' or 'remote', not {s:?}"
        ))),
    }
}

fn consistency(mode: &str, expected_writes: u64) -> R<Consistency> {
    match mode {
        "strong" => Ok(Consistency::Strong),
        "relaxed" => Ok(Consistency::Relaxed { expected_writes }),
        _ => Err(InvalidArgumentError::new_err(format!(
            "consistency must be 'strong' or 'relaxed', not {mode:?}"
        ))),
    }
}

/// A contiguous byte view of a Python buffer (C-contiguous, format 'B').
fn byte_view(buf: &PyBuffer<u8>) -> R<(usize, usize)> {
    if !buf.is_c_contiguous() {
        return Err(InvalidArgumentError::new_err("buffer must be C-contiguous"));
    }
    Ok((buf.buf_ptr() as usize, buf.len_bytes()))
}

/// Runs `f` on the writable bytes of `out` (a C-contiguous buffer), without the GIL.
fn with_out<T: Send>(
    py: Python<'_>,
    out: &PyBuffer<u8>,
    f: impl FnOnce(&mut [u8]) -> pdcx_core::Result<T> + Send,
) -> R<T> {
    if out.readonly() {
        return Err(InvalidArgumentError::new_err("output buffer is read-only"));
    }
    let (ptr, len) = byte_view(out)?;
    py.allow_threads(|| {
        // SAFETY: `out` (a PyBuffer) keeps the exporter's memory alive and pinned until it
        // drops after this call; it is writable and exported to us alone for this call.
        let bytes = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) };
        f(bytes)
    })
    .map_err(to_py)
}

#[pyclass(module = "pdcx._native")]
struct Client {
    pub(crate) inner: RustClient,
}

impl Client {
    /// Runs cross-site work without the GIL, with this client and its deployment
    /// root (where the sites it is linked to are recorded).
    fn xsite(
        &self,
        py: Python<'_>,
        work: impl FnOnce(&RustClient, &std::path::Path) -> pdcx_xsite::Result<XsiteReport> + Send,
    ) -> R<XsiteReport> {
        let root = self
            .inner
            .root()
            .map(std::path::Path::to_path_buf)
            .ok_or_else(|| {
                InvalidArgumentError::new_err("this client was not opened on a deployment root")
            })?;
        let client = self.inner.clone();
        py.allow_threads(move || work(&client, &root))
            .map_err(xsite_to_py)
    }
}

/// What `Client.pull`/`push` return (names to numbers).
type XsiteReport = std::collections::HashMap<String, f64>;

/// Transfer options from Python's arguments: a step and a value query exclude each other.
fn xsite_options(
    streams: usize,
    step: Option<Vec<u64>>,
    query: bool,
) -> R<pdcx_xsite::transfer::Options> {
    if step.is_some() && query {
        return Err(InvalidArgumentError::new_err(
            "give step or where, not both",
        ));
    }
    Ok(pdcx_xsite::transfer::Options {
        streams,
        progress: false,
        step,
        ..Default::default()
    })
}

/// A `where` transfer's report as a dict.
fn where_dict(r: &pdcx_xsite::transfer::WhereReport) -> XsiteReport {
    XsiteReport::from([
        ("hits".into(), r.hits as f64),
        ("moved_bytes".into(), r.moved_bytes as f64),
        ("seconds".into(), r.seconds),
    ])
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (root=None))]
    fn new(py: Python<'_>, root: Option<PathBuf>) -> R<Self> {
        let inner = py
            .allow_threads(|| RustClient::connect(root.as_deref()))
            .map_err(to_py)?;
        Ok(Client { inner })
    }

    #[getter]
    fn size(&self) -> u32 {
        self.inner.size()
    }

    #[getter]
    fn root(&self) -> Option<PathBuf> {
        self.inner.root().map(|p| p.to_path_buf())
    }

    #[getter]
    fn local_server(&self) -> u32 {
        self.inner.local_server()
    }

    #[getter]
    fn get_aggregation(&self) -> bool {
        self.inner.aggregation()
    }

    #[setter]
    fn set_aggregation(&self, on: bool) {
        self.inner.set_aggregation(on)
    }

    /// Consistency of this client's later writes of object `id`: "strong" or "relaxed"
    /// (with the number of expected writes after which the data server registers them).
    #[pyo3(signature = (id, mode, expected_writes=0))]
    fn set_consistency(&self, id: u64, mode: &str, expected_writes: u64) -> R<()> {
        self.inner
            .set_consistency(id, consistency(mode, expected_writes)?);
        Ok(())
    }

    /// (mode, expected_writes) of object `id` for this client.
    fn consistency(&self, id: u64) -> (&'static str, u64) {
        match self.inner.consistency(id) {
            Consistency::Strong => ("strong", 0),
            Consistency::Relaxed { expected_writes } => ("relaxed", expected_writes),
        }
    }

    /// The consistency point of this client's relaxed writes of `ids` (all when None).
    #[pyo3(signature = (ids=None))]
    fn sync(&self, py: Python<'_>, ids: Option<Vec<u64>>) -> R<()> {
        py.allow_threads(|| match ids {
            Some(ids) => self.inner.sync(&ids),
            None => self.inner.sync_all(),
        })
        .map_err(to_py)
    }

    #[getter]
    fn get_placement(&self) -> &'static str {
        self.inner.placement().name()
    }

    #[setter]
    fn set_placement(&self, name: &str) -> R<()> {
        let p = pdcx_core::Placement::parse(name).map_err(to_py)?;
        self.inner.set_placement(p);
        Ok(())
    }

    fn create_container(
        &self,
        py: Python<'_>,
        name: String,
        tags: Vec<(String, Bound<'_, PyAny>)>,
    ) -> R<String> {
        let tags = extract_tags(tags)?;
        let c = py
            .allow_threads(|| self.inner.create_container(&name, tags))
            .map_err(to_py)?;
        Ok(container_json(&c).to_string())
    }

    fn get_container(&self, py: Python<'_>, name: String) -> R<String> {
        let c = py
            .allow_threads(|| self.inner.get_container(&name))
            .map_err(to_py)?;
        Ok(container_json(&c).to_string())
    }

    fn list_containers(&self, py: Python<'_>) -> R<String> {
        let cs = py
            .allow_threads(|| self.inner.list_containers())
            .map_err(to_py)?;
        Ok(Value::Array(cs.iter().map(container_json).collect()).to_string())
    }

    #[pyo3(signature = (name, dims, dtype, containers, tags, fill=None))]
    #[allow(clippy::too_many_arguments)]
    fn create_object(
        &self,
        py: Python<'_>,
        name: String,
        dims: Vec<u64>,
        dtype: &str,
        containers: Vec<String>,
        tags: Vec<(String, Bound<'_, PyAny>)>,
        fill: Option<Vec<u8>>,
    ) -> R<String> {
        let spec = ObjectSpec {
            name,
            dims,
            dtype: Dtype::parse(dtype).map_err(to_py)?,
            fill,
            containers,
            tags: extract_tags(tags)?,
            creator: String::new(),
        };
        let o = py
            .allow_threads(|| self.inner.create_object(spec))
            .map_err(to_py)?;
        Ok(object_json(&o))
    }

    /// Many objects in one go: specs are (name, dims, dtype, containers, tags, fill). Returns
    /// one item per spec, in order: the object's JSON, or the exception for that object (a
    /// duplicate or bad spec fails only itself). With `lazy`, durable at the next consistency
    /// point instead of at return (`Client::create_objects_lazy`).
    #[allow(clippy::type_complexity)]
    #[pyo3(signature = (specs, lazy = false))]
    fn create_objects(
        &self,
        py: Python<'_>,
        specs: Vec<(
            String,
            Vec<u64>,
            String,
            Vec<String>,
            Vec<(String, Bound<'_, PyAny>)>,
            Option<Vec<u8>>,
        )>,
        lazy: bool,
    ) -> R<Vec<PyObject>> {
        let mut parsed = Vec::with_capacity(specs.len());
        for (name, dims, dtype, containers, tags, fill) in specs {
            parsed.push(ObjectSpec {
                name,
                dims,
                dtype: Dtype::parse(&dtype).map_err(to_py)?,
                fill,
                containers,
                tags: extract_tags(tags)?,
                creator: String::new(),
            });
        }
        let results = py.allow_threads(|| {
            if lazy {
                self.inner.create_objects_lazy(parsed)
            } else {
                self.inner.create_objects(parsed)
            }
        });
        results
            .into_iter()
            .map(|r| match r {
                Ok(o) => Ok(object_json(&o).into_pyobject(py)?.into_any().unbind()),
                Err(e) => Ok(to_py(e).into_value(py).into_any()),
            })
            .collect()
    }

    fn open_object(&self, py: Python<'_>, name: String) -> R<String> {
        py.allow_threads(|| self.inner.open_object(&name))
            .map(|o| object_json(&o))
            .map_err(to_py)
    }

    fn get_object(&self, py: Python<'_>, id: u64) -> R<String> {
        py.allow_threads(|| self.inner.get_object(id))
            .map(|o| object_json(&o))
            .map_err(to_py)
    }

    #[pyo3(signature = (container=None))]
    fn list_objects(&self, py: Python<'_>, container: Option<String>) -> R<String> {
        let os = py
            .allow_threads(|| self.inner.list_objects(container.as_deref()))
            .map_err(to_py)?;
        Ok(format!(
            "[{}]",
            os.iter().map(object_json).collect::<Vec<_>>().join(",")
        ))
    }

    fn set_dims(&self, py: Python<'_>, id: u64, dims: Vec<u64>) -> R<String> {
        py.allow_threads(|| self.inner.set_dims(id, dims))
            .map(|o| object_json(&o))
            .map_err(to_py)
    }

    fn add_to_container(&self, py: Python<'_>, id: u64, container: String) -> R<()> {
        py.allow_threads(|| self.inner.add_to_container(id, &container))
            .map_err(to_py)
    }

    fn put_object_tags(
        &self,
        py: Python<'_>,
        id: u64,
        tags: Vec<(String, Bound<'_, PyAny>)>,
    ) -> R<()> {
        let tags = extract_tags(tags)?;
        py.allow_threads(|| self.inner.put_tags(TagTarget::Object(id), tags))
            .map_err(to_py)
    }

    fn put_container_tags(
        &self,
        py: Python<'_>,
        name: String,
        tags: Vec<(String, Bound<'_, PyAny>)>,
    ) -> R<()> {
        let tags = extract_tags(tags)?;
        py.allow_threads(|| self.inner.put_tags(TagTarget::Container(name), tags))
            .map_err(to_py)
    }

    /// Records regions of object `id` as read by reference from files (JSON list of
    /// `RefItem`s); returns (extents, raw bytes).
    fn import_refs(&self, py: Python<'_>, id: u64, items: &str) -> R<(u64, u64)> {
        let items: Vec<pdcx_core::protocol::RefItem> = serde_json::from_str(items)
            .map_err(|e| InvalidArgumentError::new_err(format!("bad reference items: {e}")))?;
        py.allow_threads(|| self.inner.import_refs(id, items))
            .map_err(to_py)
    }

    /// Copies the object's extents read by reference into pdcx; returns (extents, bytes).
    fn promote_refs(&self, py: Python<'_>, id: u64) -> R<(u64, u64)> {
        py.allow_threads(|| self.inner.promote_refs(id))
            .map_err(to_py)
    }

    /// Pulls from remote site `site` (or an `s3://BUCKET/KEY` bundle when `site` is
    /// that address and `name` is empty) into this deployment; returns a report dict.
    #[pyo3(signature = (site, name, region=None, as_name=None, step=None, where_=None, streams=4))]
    #[allow(clippy::too_many_arguments)]
    fn xsite_pull(
        &self,
        py: Python<'_>,
        site: String,
        name: String,
        region: Option<String>,
        as_name: Option<String>,
        step: Option<Vec<u64>>,
        where_: Option<String>,
        streams: usize,
    ) -> R<XsiteReport> {
        use pdcx_xsite::{meeting, transfer};
        let opts = xsite_options(streams, step, where_.is_some())?;
        self.xsite(py, move |client, root| {
            if site.starts_with("s3://") {
                let (objects, bytes) = meeting::pull(client, &site)?;
                return Ok(XsiteReport::from([
                    ("objects".into(), objects as f64),
                    ("published_bytes".into(), bytes as f64),
                ]));
            }
            let (region, as_name) = (region.as_deref(), as_name.as_deref());
            Ok(match where_ {
                Some(cond) => where_dict(&transfer::pull_where(
                    client, root, &site, &name, &cond, region, as_name,
                )?),
                None => report_dict(&transfer::pull(
                    client, root, &site, &name, region, as_name, &opts,
                )?),
            })
        })
    }

    /// Pushes object `name` (or its `region`) to remote site `to`, or as a bundle to
    /// `s3://BUCKET/PREFIX`; returns a report dict.
    #[pyo3(signature = (name, to, region=None, step=None, streams=4, site=None, where_=None, as_name=None))]
    #[allow(clippy::too_many_arguments)]
    fn xsite_push(
        &self,
        py: Python<'_>,
        name: String,
        to: String,
        region: Option<String>,
        step: Option<Vec<u64>>,
        streams: usize,
        site: Option<String>,
        where_: Option<String>,
        as_name: Option<String>,
    ) -> R<XsiteReport> {
        use pdcx_xsite::{meeting, transfer};
        if as_name.is_some() && (where_.is_some() || to.starts_with("s3://")) {
            return Err(InvalidArgumentError::new_err(
                "as_name names a region pushed to a linked site (not with where or s3://)",
            ));
        }
        let opts = transfer::Options {
            as_name,
            ..xsite_options(streams, step, where_.is_some())?
        };
        self.xsite(py, move |client, root| {
            let region = region.as_deref();
            if to.starts_with("s3://") {
                if where_.is_some() || opts.step.is_some() {
                    return Err(pdcx_xsite::XsiteError::Invalid(
                        "a push to s3:// moves a region (no step or where)".into(),
                    ));
                }
                let site = site.unwrap_or_else(|| "site".into());
                let (_, bytes) = meeting::push(client, &name, region, &site, &to)?;
                return Ok(XsiteReport::from([(
                    "published_bytes".into(),
                    bytes as f64,
                )]));
            }
            Ok(match where_ {
                Some(cond) => where_dict(&transfer::push_where(
                    client, root, &name, &cond, region, &to, &opts,
                )?),
                None => report_dict(&transfer::push(client, root, &name, region, &to, &opts)?),
            })
        })
    }

    /// Removes an object: metadata, memberships, tags and data.
    fn delete_object(&self, py: Python<'_>, id: u64) -> R<()> {
        py.allow_threads(|| self.inner.delete_object(id))
            .map_err(to_py)
    }

    /// Removes a container (its objects stay).
    fn delete_container(&self, py: Python<'_>, name: String) -> R<()> {
        py.allow_threads(|| self.inner.delete_container(&name))
            .map_err(to_py)
    }

    fn delete_object_tag(&self, py: Python<'_>, id: u64, key: String) -> R<()> {
        py.allow_threads(|| self.inner.delete_tag(TagTarget::Object(id), &key))
            .map_err(to_py)
    }

    fn delete_container_tag(&self, py: Python<'_>, name: String, key: String) -> R<()> {
        py.allow_threads(|| self.inner.delete_tag(TagTarget::Container(name), &key))
            .map_err(to_py)
    }

    /// Conditions as text (see `pdcx query --help`); all must hold.
    fn query(&self, py: Python<'_>, conditions: Vec<String>) -> R<Vec<(u64, String)>> {
        let conds = conditions
            .iter()
            .map(|c| Condition::parse(c))
            .collect::<Result<Vec<_>, _>>()
            .map_err(to_py)?;
        py.allow_threads(|| self.inner.query(conds)).map_err(to_py)
    }

    fn extents(&self, py: Python<'_>, id: u64) -> R<String> {
        let ex = py.allow_threads(|| self.inner.extents(id)).map_err(to_py)?;
        let v: Vec<Value> = ex
            .iter()
            .map(|e| json!({"seq": e.seq, "offset": e.region.offset, "count": e.region.count, "segment": e.segment, "log_offset": e.offset, "len": e.len, "cached": e.cached, "server": e.holder, "tier": e.tier, "codec": e.codec, "stored_len": e.stored_len, "shard": e.shard}))
            .collect();
        Ok(Value::Array(v).to_string())
    }

    fn stats(&self, py: Python<'_>, rank: u32) -> R<String> {
        let s = py.allow_threads(|| self.inner.stats(rank)).map_err(to_py)?;
        // Every field of the server's stats, tiers and flush queue included.
        serde_json::to_string(&s).map_err(|e| to_py(pdcx_core::Error::internal(e.to_string())))
    }

    /// Flushes server `rank`'s committed extents to its tiers (JSON report).
    fn flush(&self, py: Python<'_>, rank: u32, wait: bool) -> R<String> {
        let r = py
            .allow_threads(|| self.inner.flush_server(rank, wait))
            .map_err(to_py)?;
        serde_json::to_string(&r).map_err(|e| to_py(pdcx_core::Error::internal(e.to_string())))
    }

    /// Synchronous write of a C-contiguous byte buffer, sent without an intermediate copy.
    fn write(
        &self,
        py: Python<'_>,
        id: u64,
        offset: Vec<u64>,
        count: Vec<u64>,
        data: PyBuffer<u8>,
        durability_level: &str,
    ) -> R<()> {
        let r = region(offset, count)?;
        let d = durability(durability_level)?;
        let (ptr, len) = byte_view(&data)?;
        py.allow_threads(|| {
            // SAFETY: `data` (a PyBuffer) keeps the exporter's memory alive and pinned until it drops after this call.
            let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
            self.inner.write(id, &r, bytes, d)
        })
        .map_err(to_py)
    }

    /// Synchronous read straight into a writable C-contiguous byte buffer of the exact size.
    fn read_into(
        &self,
        py: Python<'_>,
        id: u64,
        offset: Vec<u64>,
        count: Vec<u64>,
        out: PyBuffer<u8>,
    ) -> R<()> {
        let r = region(offset, count)?;
        with_out(py, &out, |bytes| self.inner.read_into(id, &r, bytes))
    }

    /// Elements of the box `offset`/`count` taken every `step` in each dim, selected by the
    /// object's owner (only they travel), into a buffer of the selection's exact size.
    fn read_strided(
        &self,
        py: Python<'_>,
        id: u64,
        offset: Vec<u64>,
        count: Vec<u64>,
        step: Vec<u64>,
        out: PyBuffer<u8>,
    ) -> R<()> {
        let r = region(offset, count)?;
        with_out(py, &out, |bytes| {
            self.inner.read_strided(id, &r, &step, bytes)
        })
    }

    /// Elements at `coords` (little-endian u64 bytes, ndim per point), picked by the
    /// object's owner, into a buffer of exactly one element per point.
    fn read_points(
        &self,
        py: Python<'_>,
        id: u64,
        ndim: usize,
        coords: &[u8],
        out: PyBuffer<u8>,
    ) -> R<()> {
        if !coords.len().is_multiple_of(8) {
            return Err(InvalidArgumentError::new_err(
                "coordinates must be u64 bytes",
            ));
        }
        let coords: Vec<u64> = coords
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect();
        with_out(py, &out, |bytes| {
            self.inner.read_points(id, ndim, &coords, bytes)
        })
    }

    /// A value query (JSON of `pdcx_core::valuequery::ValueExpr`) over the box
    /// `offset`/`count` (whole objects when None): the answer as JSON and the payload
    /// (coordinates if `coords`, then the hit values of each object in `values`).
    #[pyo3(signature = (query, offset=None, count=None, coords=true, values=Vec::new(), bins=0, max_hits=0))]
    #[allow(clippy::too_many_arguments)]
    fn value_query<'py>(
        &self,
        py: Python<'py>,
        query: &str,
        offset: Option<Vec<u64>>,
        count: Option<Vec<u64>>,
        coords: bool,
        values: Vec<u64>,
        bins: u32,
        max_hits: u64,
    ) -> R<(String, Bound<'py, PyBytes>)> {
        let expr: pdcx_core::valuequery::ValueExpr = serde_json::from_str(query)
            .map_err(|e| InvalidArgumentError::new_err(format!("bad query {query:?}: {e}")))?;
        let reg = match (offset, count) {
            (Some(o), Some(c)) => Some(region(o, c)?),
            (None, None) => None,
            _ => {
                return Err(InvalidArgumentError::new_err(
                    "give both offset and count, or neither",
                ))
            }
        };
        let want = pdcx_core::valuequery::QueryWant {
            coords,
            values,
            histogram_bins: bins,
            max_hits,
        };
        let (answer, bytes) = py
            .allow_threads(|| self.inner.value_query(expr, reg, want))
            .map_err(to_py)?;
        let text = serde_json::to_string(&answer)
            .map_err(|e| PdcxError::new_err(format!("encoding the answer: {e}")))?;
        Ok((text, PyBytes::new(py, &bytes)))
    }

    #[pyo3(signature = (id, dtype, dims, offset, count, is_write, durability_level="local"))]
    #[allow(clippy::too_many_arguments)]
    fn transfer(
        &self,
        id: u64,
        dtype: &str,
        dims: Vec<u64>,
        offset: Vec<u64>,
        count: Vec<u64>,
        is_write: bool,
        durability_level: &str,
    ) -> R<Transfer> {
        let dtype = Dtype::parse(dtype).map_err(to_py)?;
        let mut t = RustTransfer::for_object(
            &self.inner,
            id,
            dtype,
            &dims,
            region(offset, count)?,
            is_write,
        )
        .map_err(to_py)?;
        t.durability = durability(durability_level)?;
        Ok(Transfer { inner: t })
    }
}

#[pyclass(module = "pdcx._native")]
struct Transfer {
    inner: RustTransfer,
}

#[pymethods]
impl Transfer {
    /// Copies the caller's data now: after this the caller may reuse its buffer.
    /// With shared memory in use the copy goes straight into the arena block that the server
    /// reads, so it is the only copy the data gets in this process.
    fn load(&mut self, py: Python<'_>, data: PyBuffer<u8>) -> R<()> {
        let (ptr, len) = byte_view(&data)?;
        let t = &mut self.inner;
        py.allow_threads(|| {
            // SAFETY: `data` keeps the memory alive for the duration of the copy.
            let src = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
            t.load_from(src)
        })
        .map_err(to_py)
    }

    fn start(&mut self) -> R<()> {
        self.inner.start().map_err(to_py)
    }

    fn wait(&mut self, py: Python<'_>) -> R<()> {
        let t = &mut self.inner;
        py.allow_threads(|| t.wait()).map_err(to_py)
    }

    /// ("idle"|"pending"|"complete"|"failed", error kind or None, message or None)
    fn status(&self) -> (String, Option<String>, Option<String>) {
        match self.inner.status() {
            Status::Idle => ("idle".into(), None, None),
            Status::Pending => ("pending".into(), None, None),
            Status::Complete => ("complete".into(), None, None),
            Status::Failed(e) => (
                "failed".into(),
                Some(format!("{:?}", e.kind)),
                Some(e.message),
            ),
        }
    }

    /// The bytes a read brought back, as a zero-copy buffer (once per wait): the received
    /// bytes, or the shared-memory block the server wrote them into.
    fn take_result(&mut self) -> Option<Buffer> {
        self.inner.take_payload().map(|data| Buffer { data })
    }

    #[getter]
    fn is_write(&self) -> bool {
        self.inner.is_write
    }
}

/// Bytes owned by Rust, exported through the buffer protocol so numpy can wrap them without
/// copying (`np.frombuffer`). A shared-memory block returns to its arena when the last view
/// of it is gone.
#[pyclass(module = "pdcx._native")]
struct Buffer {
    data: Payload,
}

#[pymethods]
impl Buffer {
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: std::os::raw::c_int,
    ) -> PyResult<()> {
        let (ptr, len) = {
            let mut b = slf.borrow_mut();
            let bytes = b.data.as_mut_slice();
            (bytes.as_mut_ptr(), bytes.len())
        };
        // SAFETY: the bytes are never resized or moved after creation; PyBuffer_FillInfo takes
        // a reference to `slf`, which keeps the memory alive as long as any view exists.
        if pyo3::ffi::PyBuffer_FillInfo(
            view,
            slf.as_ptr(),
            ptr as *mut std::ffi::c_void,
            len as isize,
            0,
            flags,
        ) != 0
        {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut pyo3::ffi::Py_buffer) {}

    fn __len__(&self) -> usize {
        self.data.len()
    }
}

fn with_transfers<T>(
    py: Python<'_>,
    list: Vec<PyRefMut<'_, Transfer>>,
    f: impl FnOnce(&mut [&mut RustTransfer]) -> pdcx_core::Result<T> + Send,
) -> R<T>
where
    T: Send,
{
    let mut list = list;
    let mut refs: Vec<&mut RustTransfer> = list.iter_mut().map(|t| &mut t.inner).collect();
    py.allow_threads(move || f(&mut refs)).map_err(to_py)
}

/// Starts transfers, one message per destination server.
#[pyfunction]
fn start_all(py: Python<'_>, transfers: Vec<PyRefMut<'_, Transfer>>) -> R<()> {
    with_transfers(py, transfers, pdcx_client::start_all)
}

/// Waits for transfers (one commit message per server); raises the first failure.
#[pyfunction]
fn wait_all(py: Python<'_>, transfers: Vec<PyRefMut<'_, Transfer>>) -> R<()> {
    with_transfers(py, transfers, pdcx_client::wait_all)
}

/// Requests this process has sent to servers so far (every client, every thread): the
/// difference across a call is its round trips (benchmarks print it per pattern).
#[pyfunction]
fn requests_sent() -> u64 {
    pdcx_client::transport_requests_sent()
}

/// Encodes a request given as serde JSON (externally tagged, e.g. `{"Write": {"Stage": {...}}}`) into
/// a frame body, for tests that speak the wire protocol by hand: variant numbers then come
/// from protocol.rs instead of being copied into the tests.
#[pyfunction]
fn _encode_request<'py>(py: Python<'py>, json: &str) -> R<Bound<'py, PyBytes>> {
    let req: pdcx_core::protocol::Request = serde_json::from_str(json)
        .map_err(|e| InvalidArgumentError::new_err(format!("not a request: {e}")))?;
    let body = pdcx_core::protocol::encode_body(&req).map_err(to_py)?;
    Ok(PyBytes::new(py, &body))
}

/// A private single-server deployment inside this process (the embedded default).
#[pyclass(module = "pdcx._native")]
struct EmbeddedServer {
    handle: Option<ServerHandle>,
    root: PathBuf,
}

#[pymethods]
impl EmbeddedServer {
    #[new]
    #[pyo3(signature = (root, cache_bytes=256 << 20))]
    fn new(py: Python<'_>, root: PathBuf, cache_bytes: u64) -> R<Self> {
        // Server messages go to stderr unless the host application installed its own
        // `tracing` subscriber (then they go through it).
        pdcx_server::logging::init();
        let r = root.clone();
        let handle = py
            .allow_threads(move || -> pdcx_core::Result<ServerHandle> {
                let mut cfg = ServerConfig::new(&r, 0, 1);
                cfg.cache_bytes = cache_bytes;
                let h = Server::start(cfg)?;
                h.server.publish_rank_file()?;
                pdcx_server::launch::assemble_cluster(&r, 1, std::time::Duration::from_secs(30))?;
                Ok(h)
            })
            .map_err(to_py)?;
        Ok(EmbeddedServer {
            handle: Some(handle),
            root,
        })
    }

    #[getter]
    fn root(&self) -> PathBuf {
        self.root.clone()
    }

    /// Makes everything durable and stops the server; idempotent.
    fn stop(&mut self, py: Python<'_>) -> R<()> {
        match self.handle.take() {
            Some(h) => py.allow_threads(|| h.shutdown()).map_err(to_py),
            None => Ok(()),
        }
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Client>()?;
    m.add_class::<files::File>()?;
    for f in [
        wrap_pyfunction!(files::file_open, m)?,
        wrap_pyfunction!(files::file_stat, m)?,
        wrap_pyfunction!(files::file_kind, m)?,
        wrap_pyfunction!(files::file_remove, m)?,
        wrap_pyfunction!(files::file_list, m)?,
        wrap_pyfunction!(files::file_dir, m)?,
        wrap_pyfunction!(files::file_mkdir, m)?,
        wrap_pyfunction!(files::file_rename, m)?,
        wrap_pyfunction!(files::file_flush_all, m)?,
        wrap_pyfunction!(files::file_rmdir, m)?,
    ] {
        m.add_function(f)?;
    }
    m.add_class::<Transfer>()?;
    m.add_class::<Buffer>()?;
    m.add_class::<EmbeddedServer>()?;
    m.add_function(wrap_pyfunction!(start_all, m)?)?;
    m.add_function(wrap_pyfunction!(wait_all, m)?)?;
    m.add_function(wrap_pyfunction!(_encode_request, m)?)?;
    m.add_function(wrap_pyfunction!(requests_sent, m)?)?;
    m.add("PdcxError", py.get_type::<PdcxError>())?;
    m.add("NotFoundError", py.get_type::<NotFoundError>())?;
    m.add("AlreadyExistsError", py.get_type::<AlreadyExistsError>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<InvalidArgumentError>(),
    )?;
    m.add("OutOfBoundsError", py.get_type::<OutOfBoundsError>())?;
    m.add("DtypeMismatchError", py.get_type::<DtypeMismatchError>())?;
    m.add("UnavailableError", py.get_type::<UnavailableError>())?;
    m.add("AuthError", py.get_type::<AuthError>())?;
    m.add("NoSpaceError", py.get_type::<NoSpaceError>())?;
    m.add("ProtocolError", py.get_type::<ProtocolError>())?;
    Ok(())
}
