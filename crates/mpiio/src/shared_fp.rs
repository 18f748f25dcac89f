//! Visibility across ranks as on a local file system: a rank's writes are queued in its
//! process until a flush point, but a program written for a file system expects a write to be
//! visible to every rank once it returns. Two places make that hold where programs rely on
//! it: `MPI_Barrier` flushes every file this process logs before the barrier (a rank reading
//! after a barrier sees what the others wrote before it), and the shared-file-pointer calls
//! flush their file (`write_shared`/`write_ordered` after writing; `read_shared`,
//! `read_ordered` and `seek_shared` before, so this rank's own writes are in place first).
//! Everything else about these calls is the MPI library's: the shared pointer itself lives
//! where its `sharedfp` component keeps it.

// The exported names are MPI's.
#![allow(non_snake_case)]

use crate::fdtab;
use crate::guard;
use crate::mpi::{flush_all, flush_handle, mpi_ffi, MPI_ERR_OTHER, MPI_SUCCESS};
use crate::real::{self, Handle};
use libc::{c_int, c_void};

/// Whether this process may flush at all (not inside pdcx, not a forked child). Only files
/// a logged `MPI_File_open` registered are flushed, so a program that logs nothing (or whose
/// MPI is not Open MPI) only pays a lookup, and never sees a line from here.
fn active() -> bool {
    !guard::inside() && !fdtab::forked()
}

/// Only the `MPI_` name: `PMPI_Barrier` is what MPI-IO components call inside their own
/// collective operations (ROMIO's), and a flush there would only add round trips to every
/// collective write; a program calling the profiling name for its own barrier is rare.
///
/// # Safety
/// C `MPI_Barrier(comm)` of Open MPI.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn MPI_Barrier(comm: Handle) -> c_int {
    let Some(real) = real::PMPI_Barrier() else {
        return MPI_ERR_OTHER;
    };
    let _m = guard::InMpi::enter();
    if active() {
        flush_all("MPI_Barrier");
    }
    // SAFETY: the caller's communicator.
    unsafe { real(comm) }
}

/// Defines the shared-pointer data calls under both of their names (`MPI_` and `PMPI_`, as
/// for open and close): `flush_before` flushes the file before the real call, else after it
/// (when it succeeded). The real call is always the MPI library's `PMPI_` one.
macro_rules! shared_data_call {
    ($($name:ident, $real:ident, $buf:ty, $flush_before:expr;)*) => {
        $(
            /// # Safety
            /// The C function of the same name of Open MPI 4.1.
            #[cfg_attr(not(test), no_mangle)]
            pub unsafe extern "C" fn $real(
                fh: Handle,
                buf: $buf,
                count: c_int,
                datatype: Handle,
                status: Handle,
            ) -> c_int {
                // SAFETY: the caller's arguments, passed on.
                unsafe { $name(fh, buf, count, datatype, status) }
            }

            /// # Safety
            /// The C function of the same name of Open MPI 4.1.
            #[cfg_attr(not(test), no_mangle)]
            pub unsafe extern "C" fn $name(
                fh: Handle,
                buf: $buf,
                count: c_int,
                datatype: Handle,
                status: Handle,
            ) -> c_int {
                let Some(real) = real::$real() else {
                    return MPI_ERR_OTHER;
                };
                let _m = guard::InMpi::enter();
                // SAFETY: the caller's arguments, passed on unchanged.
                let call = || unsafe { real(fh, buf, count, datatype, status) };
                if !active() {
                    return call();
                }
                mpi_ffi(stringify!($name), || {
                    if $flush_before {
                        flush_handle(fh, stringify!($name))?;
                        return Ok(call());
                    }
                    let rc = call();
                    if rc == MPI_SUCCESS {
                        flush_handle(fh, stringify!($name))?;
                    }
                    Ok(rc)
                })
            }
        )*
    };
}

shared_data_call! {
    MPI_File_write_shared, PMPI_File_write_shared, *const c_void, false;
    MPI_File_write_ordered, PMPI_File_write_ordered, *const c_void, false;
    MPI_File_read_shared, PMPI_File_read_shared, *mut c_void, true;
    MPI_File_read_ordered, PMPI_File_read_ordered, *mut c_void, true;
}

/// # Safety
/// C `PMPI_File_seek_shared(fh, offset, whence)` of Open MPI.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn PMPI_File_seek_shared(fh: Handle, offset: i64, whence: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { MPI_File_seek_shared(fh, offset, whence) }
}

/// # Safety
/// C `MPI_File_seek_shared(fh, offset, whence)` of Open MPI.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn MPI_File_seek_shared(fh: Handle, offset: i64, whence: c_int) -> c_int {
    let Some(real) = real::PMPI_File_seek_shared() else {
        return MPI_ERR_OTHER;
    };
    let _m = guard::InMpi::enter();
    // SAFETY: the caller's arguments, passed on unchanged.
    let call = || unsafe { real(fh, offset, whence) };
    if !active() {
        return call();
    }
    mpi_ffi("MPI_File_seek_shared", || {
        flush_handle(fh, "MPI_File_seek_shared")?;
        Ok(call())
    })
}
