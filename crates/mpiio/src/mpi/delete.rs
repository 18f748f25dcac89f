//! `MPI_File_delete` of a logged file: the byte stream goes with the placeholder, and then its
//! home copy, once no version is still being copied there.

use super::{client, mpi, mpi_ffi, say, MPI_ERR_IO, MPI_ERR_OTHER, MPI_SUCCESS};
use crate::config::{self, Decision};
use crate::fdtab;
use crate::guard::{self, Passthrough};
use crate::real::Handle;
use libc::{c_char, c_int};
use pdcx_client::Client;
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

/// How long `MPI_File_delete` waits for the home copies of the stream's versions.
const DELETE_WAIT: Duration = Duration::from_secs(60);

/// Removes stream `name` once no version of it is still being copied to its home (deleting
/// it earlier would lose that copy). A stream still copying after [`DELETE_WAIT`] is kept.
fn remove_stream(c: &Client, name: &str) -> Result<(), String> {
    let bs = match c.bs_open(name, false) {
        Ok(bs) => bs,
        Err(e) if e.kind == pdcx_core::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.message),
    };
    // Every rank may delete the same file at once (ROMIO's `creat_excl` does): a stream
    // another process removed meanwhile is removed, not an error.
    let gone_is_done = |e: pdcx_core::Error| match e.kind {
        pdcx_core::ErrorKind::NotFound => Ok(()),
        _ => Err(e.message),
    };
    let t0 = Instant::now();
    loop {
        let v = match bs.versions() {
            Ok(v) => v,
            Err(e) => return gone_is_done(e),
        };
        if !v
            .iter()
            .any(|v| v.state == "sealed" || v.state == "writing")
        {
            return c.delete_object(bs.id()).or_else(gone_is_done);
        }
        if t0.elapsed() > DELETE_WAIT {
            return Err(format!(
                "its home copy is still being written after {} s; the stream is kept",
                DELETE_WAIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Removes the home copy `home` of a deleted stream; one that is not there is fine (the file
/// was never sealed, or was deleted before). An S3 home is left alone: the servers write it,
/// and this library holds no credentials for it.
fn remove_home(home: &str) -> Result<(), String> {
    if home.starts_with("s3://") {
        return Ok(());
    }
    match std::fs::remove_file(home) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("removing its home copy {home}: {e}")),
    }
}

/// `MPI_File_delete` and `PMPI_File_delete`.
///
/// # Safety
/// C `MPI_File_delete(filename, info)` of Open MPI.
pub(super) unsafe fn file_delete(filename: *const c_char, info: Handle) -> c_int {
    let Some(m) = mpi() else { return MPI_ERR_OTHER };
    // SAFETY: the caller's arguments.
    let pass = |f: *const c_char| unsafe { (m.file_delete)(f, info) };
    if m.coll.is_none() || guard::inside() || fdtab::forked() || filename.is_null() {
        return pass(filename);
    }
    mpi_ffi("MPI_File_delete", || {
        let cfg = config::get();
        // SAFETY: MPI's filename is a NUL-terminated string.
        let path = unsafe { CStr::from_ptr(filename) }.to_bytes();
        let cwd = {
            let _g = Passthrough::enter();
            std::env::current_dir().map_err(|_| MPI_ERR_IO)?
        };
        match config::decide(cfg, path, 0, &cwd) {
            Decision::Pass => Ok(pass(filename)),
            Decision::Fallback { target, .. } => {
                let c = CString::new(target.as_os_str().as_bytes()).map_err(|_| MPI_ERR_OTHER)?;
                Ok(pass(c.as_ptr()))
            }
            Decision::Log { name, home, .. } => {
                // The stream goes with the placeholder, and then its home copy (once no
                // version is still being copied there): a checkpointing code that deletes
                // its old checkpoints must not fill the home.
                let removed = client().and_then(|c| {
                    let _g = Passthrough::enter();
                    remove_stream(&c, &name)?;
                    remove_home(&home)
                });
                let rc = pass(filename);
                match removed {
                    Ok(()) => Ok(rc),
                    Err(e) => {
                        say(&format!(
                            "MPI_File_delete: removing byte stream {name} failed: {e}"
                        ));
                        Ok(if rc == MPI_SUCCESS { MPI_ERR_IO } else { rc })
                    }
                }
            }
        }
    })
}
