//! The real functions behind the wrappers, looked up with `dlsym` once per symbol and cached in
//! an atomic (no lazy statics, no allocation: wrappers run before `main` and in foreign threads).
//!
//! libc functions come from `RTLD_NEXT` (the next definition after this library, i.e. glibc's).
//! MPI functions and data are only looked up once an MPI program has called an intercepted
//! MPI function, so the library loads into programs without MPI (`ls`, `python3`) with no
//! undefined symbols. The `PMPI_File_*` names this library defines too (open, sync,
//! close, delete and the shared-pointer calls) come from `RTLD_NEXT`, never back to us; the other `PMPI_*` names, which it
//! never defines, from `RTLD_DEFAULT`.

use libc::{c_char, c_int, c_void, iovec, off64_t, off_t, size_t, ssize_t};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Cache value of a symbol looked up and not found (0 means "not looked up yet").
const MISSING: usize = 1;

/// Looks `sym` (NUL-terminated) up in `handle`, caching the answer in `cache`.
#[inline]
fn lookup(cache: &AtomicUsize, handle: *mut c_void, sym: &'static str) -> Option<usize> {
    let mut p = cache.load(Ordering::Relaxed);
    if p == 0 {
        debug_assert!(sym.ends_with('\0'));
        // SAFETY: `sym` is a NUL-terminated static string; dlsym has no other precondition.
        let q = unsafe { libc::dlsym(handle, sym.as_ptr().cast()) } as usize;
        p = if q == 0 { MISSING } else { q };
        // Racing threads store the same value.
        cache.store(p, Ordering::Relaxed);
    }
    (p != MISSING).then_some(p)
}

macro_rules! real {
    ($handle:expr; $($name:ident : $ty:ty;)*) => {
        $(
            #[allow(non_snake_case, dead_code)]
            #[inline]
            pub fn $name() -> Option<$ty> {
                static CACHE: AtomicUsize = AtomicUsize::new(0);
                // SAFETY: the symbol has this C type in glibc / Open MPI 4.1 (`mpi.h`).
                lookup(&CACHE, $handle, concat!(stringify!($name), "\0"))
                    .map(|p| unsafe { std::mem::transmute::<usize, $ty>(p) })
            }
        )*
    };
}

// Variadic C functions are called through variadic pointer types (Rust can call them; only
// defining them needs nightly).
real! { libc::RTLD_NEXT;
    open: unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int;
    open64: unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int;
    openat: unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int;
    openat64: unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int;
    __open_2: unsafe extern "C" fn(*const c_char, c_int) -> c_int;
    __open64_2: unsafe extern "C" fn(*const c_char, c_int) -> c_int;
    __openat_2: unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int;
    __openat64_2: unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int;
    close: unsafe extern "C" fn(c_int) -> c_int;
    fopen: unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE;
    fopen64: unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE;
    write: unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t;
    writev: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t;
    pwrite: unsafe extern "C" fn(c_int, *const c_void, size_t, off_t) -> ssize_t;
    pwrite64: unsafe extern "C" fn(c_int, *const c_void, size_t, off64_t) -> ssize_t;
    pwritev: unsafe extern "C" fn(c_int, *const iovec, c_int, off_t) -> ssize_t;
    pwritev64: unsafe extern "C" fn(c_int, *const iovec, c_int, off64_t) -> ssize_t;
    pwritev2: unsafe extern "C" fn(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t;
    pwritev64v2: unsafe extern "C" fn(c_int, *const iovec, c_int, off64_t, c_int) -> ssize_t;
    read: unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t;
    readv: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t;
    pread: unsafe extern "C" fn(c_int, *mut c_void, size_t, off_t) -> ssize_t;
    pread64: unsafe extern "C" fn(c_int, *mut c_void, size_t, off64_t) -> ssize_t;
    preadv: unsafe extern "C" fn(c_int, *const iovec, c_int, off_t) -> ssize_t;
    preadv64: unsafe extern "C" fn(c_int, *const iovec, c_int, off64_t) -> ssize_t;
    preadv2: unsafe extern "C" fn(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t;
    preadv64v2: unsafe extern "C" fn(c_int, *const iovec, c_int, off64_t, c_int) -> ssize_t;
    lseek: unsafe extern "C" fn(c_int, off_t, c_int) -> off_t;
    lseek64: unsafe extern "C" fn(c_int, off64_t, c_int) -> off64_t;
    ftruncate: unsafe extern "C" fn(c_int, off_t) -> c_int;
    ftruncate64: unsafe extern "C" fn(c_int, off64_t) -> c_int;
    fstat: unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int;
    fstat64: unsafe extern "C" fn(c_int, *mut libc::stat64) -> c_int;
    __fxstat: unsafe extern "C" fn(c_int, c_int, *mut libc::stat) -> c_int;
    __fxstat64: unsafe extern "C" fn(c_int, c_int, *mut libc::stat64) -> c_int;
    fsync: unsafe extern "C" fn(c_int) -> c_int;
    fdatasync: unsafe extern "C" fn(c_int) -> c_int;
    fcntl: unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
    fcntl64: unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
    dup: unsafe extern "C" fn(c_int) -> c_int;
    dup2: unsafe extern "C" fn(c_int, c_int) -> c_int;
    dup3: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
    aio_write: unsafe extern "C" fn(*mut libc::aiocb) -> c_int;
    aio_write64: unsafe extern "C" fn(*mut libc::aiocb) -> c_int;
    aio_read: unsafe extern "C" fn(*mut libc::aiocb) -> c_int;
    aio_read64: unsafe extern "C" fn(*mut libc::aiocb) -> c_int;
    aio_error: unsafe extern "C" fn(*const libc::aiocb) -> c_int;
    aio_error64: unsafe extern "C" fn(*const libc::aiocb) -> c_int;
    aio_return: unsafe extern "C" fn(*mut libc::aiocb) -> ssize_t;
    aio_return64: unsafe extern "C" fn(*mut libc::aiocb) -> ssize_t;
    aio_suspend: unsafe extern "C" fn(*const *const libc::aiocb, c_int, *const libc::timespec) -> c_int;
    aio_suspend64: unsafe extern "C" fn(*const *const libc::aiocb, c_int, *const libc::timespec) -> c_int;
    aio_cancel: unsafe extern "C" fn(c_int, *mut libc::aiocb) -> c_int;
    aio_cancel64: unsafe extern "C" fn(c_int, *mut libc::aiocb) -> c_int;
}

/// Open MPI 4.1 handles (`MPI_Comm`, `MPI_File`, `MPI_Info`, `MPI_Datatype`, `MPI_Op`) are
/// pointers to structs.
pub type Handle = *mut c_void;

// The functions this library defines under both names: the next definition after ours (the
// MPI library's, or that of a tool preloaded after us), never our own.
real! { libc::RTLD_NEXT;
    PMPI_File_open: unsafe extern "C" fn(Handle, *const c_char, c_int, Handle, *mut Handle) -> c_int;
    PMPI_File_sync: unsafe extern "C" fn(Handle) -> c_int;
    PMPI_File_close: unsafe extern "C" fn(*mut Handle) -> c_int;
    PMPI_File_delete: unsafe extern "C" fn(*const c_char, Handle) -> c_int;
    PMPI_File_write_shared: unsafe extern "C" fn(Handle, *const c_void, c_int, Handle, Handle) -> c_int;
    PMPI_File_write_ordered: unsafe extern "C" fn(Handle, *const c_void, c_int, Handle, Handle) -> c_int;
    PMPI_File_read_shared: unsafe extern "C" fn(Handle, *mut c_void, c_int, Handle, Handle) -> c_int;
    PMPI_File_read_ordered: unsafe extern "C" fn(Handle, *mut c_void, c_int, Handle, Handle) -> c_int;
    PMPI_File_seek_shared: unsafe extern "C" fn(Handle, i64, c_int) -> c_int;
}

// Functions this library only defines under their `MPI_` name (or not at all).
real! { libc::RTLD_DEFAULT;
    PMPI_Barrier: unsafe extern "C" fn(Handle) -> c_int;
    PMPI_Comm_rank: unsafe extern "C" fn(Handle, *mut c_int) -> c_int;
    PMPI_Comm_dup: unsafe extern "C" fn(Handle, *mut Handle) -> c_int;
    PMPI_Comm_free: unsafe extern "C" fn(*mut Handle) -> c_int;
    PMPI_Bcast: unsafe extern "C" fn(*mut c_void, c_int, Handle, c_int, Handle) -> c_int;
    PMPI_Allreduce: unsafe extern "C" fn(*const c_void, *mut c_void, c_int, Handle, Handle, Handle) -> c_int;
}

/// Address of an MPI data symbol (`ompi_mpi_byte`: `MPI_BYTE` is `&ompi_mpi_byte`), cached.
fn data(cache: &AtomicUsize, sym: &'static str) -> Option<Handle> {
    lookup(cache, libc::RTLD_DEFAULT, sym).map(|p| p as Handle)
}

macro_rules! mpi_data {
    ($($name:ident = $sym:literal;)*) => {
        $(
            pub fn $name() -> Option<Handle> {
                static CACHE: AtomicUsize = AtomicUsize::new(0);
                data(&CACHE, concat!($sym, "\0"))
            }
        )*
    };
}

mpi_data! {
    mpi_byte = "ompi_mpi_byte";
    mpi_int = "ompi_mpi_int";
    mpi_op_max = "ompi_mpi_op_max";
    mpi_comm_world = "ompi_mpi_comm_world";
}

#[cfg(test)]
mod tests {
    #[test]
    fn libc_symbols_resolve_and_mpi_ones_do_not_in_a_plain_program() {
        assert!(super::pwrite().is_some());
        assert!(super::fcntl().is_some());
        assert!(super::__fxstat().is_some());
        // Twice: the second answer comes from the cache.
        assert!(super::lseek64().is_some());
        assert!(super::lseek64().is_some());
        // The unit-test binary does not link libmpi.
        assert!(super::PMPI_File_open().is_none());
        assert!(super::PMPI_File_open().is_none());
        assert!(super::mpi_byte().is_none());
    }
}
