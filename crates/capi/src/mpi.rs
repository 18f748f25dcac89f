//! MPI without linking MPI: the collective calls look up `MPI_Initialized`, `MPI_Comm_rank`
//! and `MPI_Bcast` in the running process (`dlsym(RTLD_DEFAULT)`), which has them when the
//! program was built with mpicc. Open MPI's handles are pointers to exported objects
//! (`ompi_mpi_byte`, `ompi_mpi_comm_world`); MPICH-family handles are integer constants.
//! Without MPI in the process the collective calls act locally.

use libc::{c_int, c_void};
use std::ffi::CStr;

type InitializedFn = unsafe extern "C" fn(*mut c_int) -> c_int;
type OmpiRankFn = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;
type OmpiBcastFn =
    unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, c_int, *mut c_void) -> c_int;
type MpichRankFn = unsafe extern "C" fn(c_int, *mut c_int) -> c_int;
type MpichBcastFn = unsafe extern "C" fn(*mut c_void, c_int, c_int, c_int, c_int) -> c_int;

const MPICH_BYTE: c_int = 0x4c00_010d;
const MPICH_COMM_WORLD: c_int = 0x4400_0000;

fn sym(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks the symbol up.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

/// A communicator as the C caller passed it (a pointer for Open MPI, an int for MPICH).
#[derive(Clone, Copy)]
pub struct Comm(pub *mut c_void);

impl Comm {
    pub fn world() -> Comm {
        let w = sym(c"ompi_mpi_comm_world");
        if w.is_null() {
            Comm(MPICH_COMM_WORLD as usize as *mut c_void)
        } else {
            Comm(w)
        }
    }
}

/// True if MPI is linked into this process and initialized.
pub fn active() -> bool {
    let f = sym(c"MPI_Initialized");
    if f.is_null() {
        return false;
    }
    let mut flag: c_int = 0;
    // SAFETY: MPI_Initialized(int*) may be called at any time.
    let f: InitializedFn = unsafe { std::mem::transmute::<*mut c_void, InitializedFn>(f) };
    unsafe { f(&mut flag) == 0 && flag != 0 }
}

fn is_ompi() -> bool {
    !sym(c"ompi_mpi_byte").is_null()
}

pub fn rank(comm: Comm) -> Result<c_int, String> {
    let f = sym(c"MPI_Comm_rank");
    if f.is_null() {
        return Err("MPI_Comm_rank not found".into());
    }
    let mut r: c_int = -1;
    // SAFETY: the symbol is MPI_Comm_rank; the handle ABI matches the detected library.
    let rc = unsafe {
        if is_ompi() {
            std::mem::transmute::<*mut c_void, OmpiRankFn>(f)(comm.0, &mut r)
        } else {
            std::mem::transmute::<*mut c_void, MpichRankFn>(f)(comm.0 as usize as c_int, &mut r)
        }
    };
    if rc != 0 {
        return Err(format!("MPI_Comm_rank failed ({rc})"));
    }
    Ok(r)
}

/// Broadcasts `buf` from `root` to every rank of `comm`.
pub fn bcast(buf: &mut [u8], root: c_int, comm: Comm) -> Result<(), String> {
    let f = sym(c"MPI_Bcast");
    if f.is_null() {
        return Err("MPI_Bcast not found".into());
    }
    let n = c_int::try_from(buf.len()).map_err(|_| "broadcast too large".to_string())?;
    // SAFETY: the symbol is MPI_Bcast; `buf` holds `n` bytes; the handle ABI matches.
    let rc = unsafe {
        if is_ompi() {
            let byte = sym(c"ompi_mpi_byte");
            std::mem::transmute::<*mut c_void, OmpiBcastFn>(f)(
                buf.as_mut_ptr() as *mut c_void,
                n,
                byte,
                root,
                comm.0,
            )
        } else {
            std::mem::transmute::<*mut c_void, MpichBcastFn>(f)(
                buf.as_mut_ptr() as *mut c_void,
                n,
                MPICH_BYTE,
                root,
                comm.0 as usize as c_int,
            )
        }
    };
    if rc != 0 {
        return Err(format!("MPI_Bcast failed ({rc})"));
    }
    Ok(())
}

/// Bytes of an answer that travel in [`bcast_result`]'s first broadcast: an object's metadata
/// fits, so most answers take one collective (under oversubscription each costs a wake-up of
/// every rank).
const INLINE_ANSWER: usize = 1015;

/// Broadcasts `root`'s variable-length answer — its bytes, or its error text, so every rank
/// fails with the root's reason — to every rank of `comm`: one broadcast of its status, length
/// and first [`INLINE_ANSWER`] bytes, and a second one for the rest of a longer answer. What
/// the other ranks pass is ignored.
pub fn bcast_result(
    msg: Result<Vec<u8>, String>,
    root: c_int,
    comm: Comm,
) -> Result<Result<Vec<u8>, String>, String> {
    let me = rank(comm)?;
    let (ok, body) = match msg {
        Ok(b) => (1u8, b),
        Err(e) => (0u8, e.into_bytes()),
    };
    let mut head = [0u8; 9 + INLINE_ANSWER];
    if me == root {
        head[0] = ok;
        head[1..9].copy_from_slice(&(body.len() as u64).to_le_bytes());
        let inline = body.len().min(INLINE_ANSWER);
        head[9..9 + inline].copy_from_slice(&body[..inline]);
    }
    bcast(&mut head, root, comm)?;
    let mut len = [0u8; 8];
    len.copy_from_slice(&head[1..9]);
    let n = usize::try_from(u64::from_le_bytes(len))
        .map_err(|_| "broadcast length does not fit in memory".to_string())?;
    let buf = if n <= INLINE_ANSWER {
        head[9..9 + n].to_vec()
    } else {
        let mut rest = if me == root {
            body[INLINE_ANSWER..].to_vec()
        } else {
            vec![0u8; n - INLINE_ANSWER]
        };
        bcast(&mut rest, root, comm)?;
        let mut all = head[9..].to_vec();
        all.extend_from_slice(&rest);
        all
    };
    Ok(if head[0] == 1 {
        Ok(buf)
    } else {
        Err(String::from_utf8_lossy(&buf).into_owned())
    })
}

/// Rank 0 of MPI_COMM_WORLD runs `f` (say, one lookup at the servers) and every rank returns
/// its answer or its error: the collective `*_open_col` calls.
pub fn root_answers(f: impl FnOnce() -> Result<Vec<u8>, String>) -> Result<Vec<u8>, String> {
    let comm = Comm::world();
    let msg = if rank(comm)? == 0 {
        f()
    } else {
        Ok(Vec::new())
    };
    bcast_result(msg, 0, comm)?
}
