//! The native half of `import pdcx`. It exposes the Rust client almost one to one; shapes,
//! numpy dtypes and indexing live in the pure-Python layer (python/pdcx). Metadata crosses as
//! JSON text so this crate needs no per-field conversions. Every blocking call releases the GIL.
//!
//! Modules by job: `errors` (the exception classes and the mapping of Rust errors onto them),
//! `convert` (arguments and metadata between Python and Rust), `client` (the `Client` class),
//! `xsite` (cross-site transfers' options and reports), `transfer` (`Transfer`, `Buffer`,
//! `start_all`/`wait_all`), `files` (byte-stream files), `embedded` (`EmbeddedServer`); this
//! file registers them as the `_native` module.

use errors::{
    to_py, AlreadyExistsError, AuthError, DtypeMismatchError, InvalidArgumentError, NoSpaceError,
    NotFoundError, OutOfBoundsError, PdcxError, ProtocolError, UnavailableError, R,
};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

mod client;
mod convert;
mod embedded;
mod errors;
mod files;
mod transfer;
mod xsite;

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

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<client::Client>()?;
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
    m.add_class::<transfer::Transfer>()?;
    m.add_class::<transfer::Buffer>()?;
    m.add_class::<embedded::EmbeddedServer>()?;
    m.add_function(wrap_pyfunction!(transfer::start_all, m)?)?;
    m.add_function(wrap_pyfunction!(transfer::start_all_from, m)?)?;
    m.add_function(wrap_pyfunction!(transfer::wait_all, m)?)?;
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
