//! Cross-site transfers for `Client.xsite_pull`/`xsite_push`: their options from Python's
//! arguments, their reports as dicts and their errors as exceptions.

use crate::errors::{to_py, InvalidArgumentError, PdcxError, R};
use pyo3::prelude::*;

/// What `Client.pull`/`push` return (names to numbers).
pub(crate) type XsiteReport = std::collections::HashMap<String, f64>;

/// A transfer's report as the dict `Client.pull`/`push` return.
pub(crate) fn report_dict(r: &pdcx_xsite::transfer::Report) -> XsiteReport {
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

pub(crate) fn xsite_to_py(e: pdcx_xsite::XsiteError) -> PyErr {
    match e {
        pdcx_xsite::XsiteError::Pdcx(e) => to_py(e),
        pdcx_xsite::XsiteError::Invalid(m) => InvalidArgumentError::new_err(m),
        other => PdcxError::new_err(other.to_string()),
    }
}

/// Transfer options from Python's arguments: a step and a value query exclude each other.
pub(crate) fn xsite_options(
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
pub(crate) fn where_dict(r: &pdcx_xsite::transfer::WhereReport) -> XsiteReport {
    XsiteReport::from([
        ("hits".into(), r.hits as f64),
        ("moved_bytes".into(), r.moved_bytes as f64),
        ("seconds".into(), r.seconds),
    ])
}
