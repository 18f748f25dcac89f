//! Files for the Python layer: the native half of `pdcx.Client.open`, which wraps
//! [`File`] in `io.BufferedReader`/`BufferedWriter` (python/pdcx/files.py). Every call
//! releases the GIL.

use crate::client::Client;
use crate::convert::with_out;
use crate::errors::{to_py, InvalidArgumentError, R};
use pdcx_client::file::{FileOptions, FileStat, Prefetch};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use std::io::SeekFrom;
use std::sync::{Mutex, MutexGuard};

#[pyclass(module = "pdcx._native")]
pub struct File {
    inner: Mutex<Option<pdcx_client::File>>,
    name: String,
}

impl File {
    fn lock(&self) -> MutexGuard<'_, Option<pdcx_client::File>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the open file without the GIL.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut pdcx_client::File) -> pdcx_core::Result<T> + Send,
    ) -> R<T> {
        py.allow_threads(|| {
            let mut g = self.lock();
            match g.as_mut() {
                Some(file) => f(file),
                None => Err(pdcx_core::Error::invalid(format!(
                    "file {:?} is closed",
                    self.name
                ))),
            }
        })
        .map_err(to_py)
    }
}

fn stat_tuple(s: &FileStat) -> (String, u64, f64, f64) {
    (s.name.clone(), s.size, s.ctime, s.mtime)
}

#[pymethods]
impl File {
    #[getter]
    fn name(&self) -> String {
        self.name.clone()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.lock().is_none()
    }

    /// (readable, writable, append)
    #[getter]
    fn mode(&self) -> R<(bool, bool, bool)> {
        let g = self.lock();
        let m = g
            .as_ref()
            .map(|f| f.mode())
            .ok_or_else(|| InvalidArgumentError::new_err("file is closed"))?;
        Ok((m.read, m.write, m.append))
    }

    /// Reads into `out` at the position; returns the count (0 at the end).
    fn readinto(&self, py: Python<'_>, out: PyBuffer<u8>) -> R<usize> {
        let mut g = self.lock();
        let Some(file) = g.as_mut() else {
            return Err(InvalidArgumentError::new_err("file is closed"));
        };
        with_out(py, &out, |bytes| file.read(bytes))
    }

    fn write(&self, py: Python<'_>, data: PyBuffer<u8>) -> R<usize> {
        let bytes = data.to_vec(py)?;
        self.with(py, move |f| f.write(&bytes))
    }

    /// Moves the position like `io.IOBase.seek` (whence 0, 1 or 2); returns it.
    fn seek(&self, py: Python<'_>, offset: i64, whence: i32) -> R<u64> {
        let to = match whence {
            0 => SeekFrom::Start(
                u64::try_from(offset)
                    .map_err(|_| InvalidArgumentError::new_err("negative seek position"))?,
            ),
            1 => SeekFrom::Current(offset),
            2 => SeekFrom::End(offset),
            _ => return Err(InvalidArgumentError::new_err("whence must be 0, 1 or 2")),
        };
        self.with(py, move |f| f.seek(to))
    }

    fn tell(&self, py: Python<'_>) -> R<u64> {
        self.with(py, |f| Ok(f.tell()))
    }

    fn size(&self, py: Python<'_>) -> R<u64> {
        self.with(py, |f| Ok(f.size()))
    }

    fn truncate(&self, py: Python<'_>, size: u64) -> R<()> {
        self.with(py, move |f| f.set_len(size))
    }

    fn flush(&self, py: Python<'_>) -> R<()> {
        self.with(py, |f| f.flush())
    }

    /// Flush, then durable on the servers (`os.fsync`).
    fn sync(&self, py: Python<'_>) -> R<()> {
        self.with(py, |f| f.sync())
    }

    /// Round trips this handle's reads made.
    fn fetches(&self, py: Python<'_>) -> R<u64> {
        self.with(py, |f| Ok(f.fetches()))
    }

    fn close(&self, py: Python<'_>) -> R<()> {
        let taken = self.lock().take();
        match taken {
            Some(mut f) => py.allow_threads(move || f.close()).map_err(to_py),
            None => Ok(()),
        }
    }
}

/// Opens file `name` with a Python mode (binary; text is the Python layer's).
#[pyfunction]
#[pyo3(signature = (client, name, mode, aggregate=true, prefetch="adaptive"))]
pub fn file_open(
    py: Python<'_>,
    client: &Client,
    name: String,
    mode: String,
    aggregate: bool,
    prefetch: &str,
) -> R<File> {
    let prefetch = Prefetch::parse(prefetch)
        .map_err(|e| InvalidArgumentError::new_err(format!("prefetch={prefetch:?}: {e}")))?;
    let opts = FileOptions {
        aggregate,
        prefetch,
    };
    let f = py
        .allow_threads(|| client.inner.file_open(&name, &mode, opts))
        .map_err(to_py)?;
    Ok(File {
        name: f.name().to_string(),
        inner: Mutex::new(Some(f)),
    })
}

/// Flushes several files at one consistency point (`pdcx_client::flush_all`).
#[pyfunction]
pub fn file_flush_all(py: Python<'_>, files: Vec<PyRef<'_, File>>) -> R<()> {
    let mut seen = std::collections::HashSet::new();
    for f in &files {
        if !seen.insert(&**f as *const File as usize) {
            return Err(InvalidArgumentError::new_err("a file is listed twice"));
        }
    }
    let mut guards: Vec<_> = files.iter().map(|f| f.lock()).collect();
    let mut open: Vec<&mut pdcx_client::File> = Vec::with_capacity(guards.len());
    for (g, f) in guards.iter_mut().zip(&files) {
        match g.as_mut() {
            Some(file) => open.push(file),
            None => {
                return Err(InvalidArgumentError::new_err(format!(
                    "file {:?} is closed",
                    f.name
                )))
            }
        }
    }
    py.allow_threads(move || pdcx_client::flush_all(&mut open))
        .map_err(to_py)
}

/// (name, size, ctime, mtime) of a file.
#[pyfunction]
pub fn file_stat(py: Python<'_>, client: &Client, name: String) -> R<(String, u64, f64, f64)> {
    py.allow_threads(|| client.inner.file_stat(&name))
        .map(|s| stat_tuple(&s))
        .map_err(to_py)
}

/// What a name is: "file", "dir" or None.
#[pyfunction]
pub fn file_kind(py: Python<'_>, client: &Client, name: String) -> R<Option<&'static str>> {
    use pdcx_client::file::Kind;
    let name = if name.trim_matches('/').is_empty() {
        String::new()
    } else {
        pdcx_client::file::normalize(&name).map_err(to_py)?
    };
    py.allow_threads(|| client.inner.file_kind(&name))
        .map(|k| {
            k.map(|k| match k {
                Kind::File(_) => "file",
                Kind::Dir => "dir",
            })
        })
        .map_err(to_py)
}

#[pyfunction]
pub fn file_remove(py: Python<'_>, client: &Client, name: String) -> R<()> {
    py.allow_threads(|| client.inner.file_remove(&name))
        .map_err(to_py)
}

/// Files whose names start with `prefix`: (name, size, ctime, mtime).
#[pyfunction]
pub fn file_list(
    py: Python<'_>,
    client: &Client,
    prefix: String,
) -> R<Vec<(String, u64, f64, f64)>> {
    py.allow_threads(|| client.inner.file_list(&prefix))
        .map(|v| v.iter().map(stat_tuple).collect())
        .map_err(to_py)
}

/// Entries directly under directory `dir`: (name, is_dir).
#[pyfunction]
pub fn file_dir(py: Python<'_>, client: &Client, dir: String) -> R<Vec<(String, bool)>> {
    let dir = if dir.trim_matches('/').is_empty() {
        String::new()
    } else {
        pdcx_client::file::normalize(&dir).map_err(to_py)?
    };
    py.allow_threads(|| client.inner.file_dir(&dir))
        .map(|v| v.into_iter().map(|e| (e.name, e.stat.is_none())).collect())
        .map_err(to_py)
}

/// Renames a file (replacing a file at `to`).
#[pyfunction]
pub fn file_rename(py: Python<'_>, client: &Client, from: String, to: String) -> R<()> {
    py.allow_threads(|| client.inner.file_rename(&from, &to))
        .map_err(to_py)
}

#[pyfunction]
pub fn file_mkdir(py: Python<'_>, client: &Client, dir: String) -> R<()> {
    py.allow_threads(|| client.inner.file_mkdir(&dir))
        .map_err(to_py)
}

#[pyfunction]
pub fn file_rmdir(py: Python<'_>, client: &Client, dir: String) -> R<()> {
    py.allow_threads(|| client.inner.file_rmdir(&dir))
        .map_err(to_py)
}
