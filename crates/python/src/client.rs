//! The `Client` class: the Rust client almost one to one (containers, objects, tags,
//! synchronous reads and writes, queries, server stats and flushes, cross-site transfers),
//! every blocking call without the GIL.

use crate::convert::{
    byte_view, consistency, container_json, durability, extract_tags, object_json, region, with_out,
};
use crate::errors::{to_py, InvalidArgumentError, PdcxError, R};
use crate::transfer::Transfer;
use crate::xsite::{report_dict, where_dict, xsite_options, xsite_to_py, XsiteReport};
use pdcx_client::{Client as RustClient, Transfer as RustTransfer};
use pdcx_core::protocol::{Consistency, ObjectSpec, TagTarget};
use pdcx_core::{Condition, Dtype};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::{json, Value};
use std::path::PathBuf;

#[pyclass(module = "pdcx._native")]
pub(crate) struct Client {
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

    /// The box `offset`/`count` as of version `version` (the writes numbered up to it), read
    /// by the object's owner into a buffer of the exact size.
    fn read_version(
        &self,
        py: Python<'_>,
        id: u64,
        offset: Vec<u64>,
        count: Vec<u64>,
        version: u64,
        out: PyBuffer<u8>,
    ) -> R<()> {
        let r = region(offset, count)?;
        with_out(py, &out, |bytes| {
            self.inner.read_version(id, &r, version, bytes)
        })
    }

    /// The object's readable versions and dropped ranges (JSON).
    fn versions(&self, py: Python<'_>, id: u64) -> R<String> {
        let v = py
            .allow_threads(|| self.inner.versions(id))
            .map_err(to_py)?;
        Ok(json!({"readable": v.readable, "dropped": v.dropped, "sizes": v.sizes}).to_string())
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
