//! Conversions between Python's arguments and the client's types: metadata as JSON text
//! (no per-field conversions), tag values, regions, durability and consistency names, and
//! the bytes of Python buffers (borrowed, the GIL released while they are used).

use crate::errors::{to_py, InvalidArgumentError, R};
use pdcx_core::model::Tags;
use pdcx_core::protocol::{Consistency, Durability};
use pdcx_core::{ContainerInfo, ObjectMeta, Region, TagValue};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::{json, Value};

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

pub(crate) fn object_json(o: &ObjectMeta) -> String {
    json!({
        "id": o.id, "name": o.name, "owner": o.owner, "creator": o.creator, "ctime": o.ctime,
        "mtime": o.mtime, "dims": o.dims, "dtype": o.dtype_name(), "fill": o.fill,
        "containers": o.containers, "tags": tags_json(&o.tags),
    })
    .to_string()
}

pub(crate) fn container_json(c: &ContainerInfo) -> Value {
    json!({"id": c.id, "name": c.name, "owner": c.owner, "creator": c.creator, "ctime": c.ctime, "tags": tags_json(&c.tags)})
}

/// Python tag values: str, int (bool counts as int), float, bytes.
pub(crate) fn extract_tags(items: Vec<(String, Bound<'_, PyAny>)>) -> R<Tags> {
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

pub(crate) fn region(offset: Vec<u64>, count: Vec<u64>) -> R<Region> {
    Region::new(offset, count).map_err(to_py)
}

pub(crate) fn durability(s: &str) -> R<Durability> {
    match s {
        "memory" => Ok(Durability::Memory),
        "local" => Ok(Durability::Local),
        "remote" => Ok(Durability::Remote),
        _ => Err(InvalidArgumentError::new_err(format!(
            "durability must be 'memory', 'local' or 'remote', not {s:?}"
        ))),
    }
}

pub(crate) fn consistency(mode: &str, expected_writes: u64) -> R<Consistency> {
    match mode {
        "strong" => Ok(Consistency::Strong),
        "relaxed" => Ok(Consistency::Relaxed { expected_writes }),
        _ => Err(InvalidArgumentError::new_err(format!(
            "consistency must be 'strong' or 'relaxed', not {mode:?}"
        ))),
    }
}

/// A contiguous byte view of a Python buffer (C-contiguous, format 'B').
pub(crate) fn byte_view(buf: &PyBuffer<u8>) -> R<(usize, usize)> {
    if !buf.is_c_contiguous() {
        return Err(InvalidArgumentError::new_err("buffer must be C-contiguous"));
    }
    Ok((buf.buf_ptr() as usize, buf.len_bytes()))
}

/// Runs `f` on the writable bytes of `out` (a C-contiguous buffer), without the GIL.
pub(crate) fn with_out<T: Send>(
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
