//! `EmbeddedServer`: a private single-server deployment inside this process.

use crate::errors::{to_py, R};
use pdcx_server::{Server, ServerConfig, ServerHandle};
use pyo3::prelude::*;
use std::path::PathBuf;

/// A private single-server deployment inside this process (the embedded default).
#[pyclass(module = "pdcx._native")]
pub(crate) struct EmbeddedServer {
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
