//! Transfers for Python: the `Transfer` class (load, start, wait, status, result), the
//! zero-copy `Buffer` a read's bytes come back in, and the batched `start_all`/`wait_all`.

use crate::convert::byte_view;
use crate::errors::{to_py, R};
use pdcx_client::shm::Payload;
use pdcx_client::{Status, Transfer as RustTransfer};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

#[pyclass(module = "pdcx._native")]
pub(crate) struct Transfer {
    pub(crate) inner: RustTransfer,
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

    /// Starts a write with `data` as its bytes, which the caller may reuse once this returns:
    /// a write that goes straight into the log of a server on this node is written from
    /// `data` itself (no copy in this process), any other is copied first, as `load` does.
    /// Holds the GIL while the bytes are written, so no Python code changes them meanwhile.
    fn start_from(&mut self, data: PyBuffer<u8>) -> R<()> {
        let (ptr, len) = byte_view(&data)?;
        // SAFETY: `data` keeps the memory alive for the call, which returns only once the
        // transfer no longer reads it (`start_all_from`).
        let src = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
        self.inner.start_from(src).map_err(to_py)
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
pub(crate) struct Buffer {
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
pub(crate) fn start_all(py: Python<'_>, transfers: Vec<PyRefMut<'_, Transfer>>) -> R<()> {
    with_transfers(py, transfers, pdcx_client::start_all)
}

/// Starts writes with `buffers[i]` as the bytes of `transfers[i]`, one message per server;
/// the buffers may be reused once this returns (see `Transfer.start_from`).
#[pyfunction]
pub(crate) fn start_all_from(
    mut transfers: Vec<PyRefMut<'_, Transfer>>,
    buffers: Vec<PyBuffer<u8>>,
) -> R<()> {
    let mut srcs = Vec::with_capacity(buffers.len());
    for b in &buffers {
        let (ptr, len) = byte_view(b)?;
        // SAFETY: `buffers` keeps every buffer alive for the call, which returns only once no
        // transfer reads them (`start_all_from`).
        srcs.push(unsafe { std::slice::from_raw_parts(ptr as *const u8, len) });
    }
    let mut refs: Vec<&mut RustTransfer> = transfers.iter_mut().map(|t| &mut t.inner).collect();
    pdcx_client::start_all_from(&mut refs, &srcs).map_err(to_py)
}

/// Waits for transfers (one commit message per server); raises the first failure.
#[pyfunction]
pub(crate) fn wait_all(py: Python<'_>, transfers: Vec<PyRefMut<'_, Transfer>>) -> R<()> {
    with_transfers(py, transfers, pdcx_client::wait_all)
}
