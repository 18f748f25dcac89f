//! The MPI wrappers: `MPI_File_open` decides (collectively) whether a file is logged,
//! `MPI_File_sync` and `MPI_File_close` are its consistency points, `MPI_File_delete` removes
//! the byte stream. Only the `MPI_` names are defined: the real functions are the MPI
//! library's `PMPI_` twins, looked up at the first call (so non-MPI programs never need them).
//!
//! Open MPI 4.1 ABI only: handles are pointers (checked through the `ompi_mpi_comm_world`
//! symbol; without it every call passes through untouched).

// The exported names are MPI's.
#![allow(non_snake_case)]

mod delete;

use delete::file_delete;

use crate::config::{self, Decision};
use crate::fdtab::{self, FileState, Opening};
use crate::guard::{self, Passthrough};
use crate::real::{self, Handle};
use libc::{c_char, c_int, c_void};
use pdcx_client::{ByteStream, Client};
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::{Arc, Mutex, Once, OnceLock};

/// `mpi.h` of Open MPI 4.1 (a test checks them against the header).
pub const MPI_SUCCESS: c_int = 0;
pub const MPI_ERR_OTHER: c_int = 16;
pub const MPI_ERR_IO: c_int = 35;

/// The MPI functions and constants this library calls, resolved once.
struct Mpi {
    file_open: unsafe extern "C" fn(Handle, *const c_char, c_int, Handle, *mut Handle) -> c_int,
    file_sync: unsafe extern "C" fn(Handle) -> c_int,
    file_close: unsafe extern "C" fn(*mut Handle) -> c_int,
    file_delete: unsafe extern "C" fn(*const c_char, Handle) -> c_int,
    /// None when this is not Open MPI's ABI (or a symbol is missing): pass everything through.
    coll: Option<Coll>,
}

struct Coll {
    comm_rank: unsafe extern "C" fn(Handle, *mut c_int) -> c_int,
    comm_dup: unsafe extern "C" fn(Handle, *mut Handle) -> c_int,
    comm_free: unsafe extern "C" fn(*mut Handle) -> c_int,
    bcast: unsafe extern "C" fn(*mut c_void, c_int, Handle, c_int, Handle) -> c_int,
    allreduce:
        unsafe extern "C" fn(*const c_void, *mut c_void, c_int, Handle, Handle, Handle) -> c_int,
    /// `MPI_BYTE`, `MPI_INT`, `MPI_MAX` (addresses, kept as integers to be `Sync`).
    byte: usize,
    int: usize,
    max: usize,
}

fn say(msg: &str) {
    say_line(&format!("pdcx mpiio: {msg}"));
}

fn say_line(line: &str) {
    let _g = Passthrough::enter();
    eprintln!("{line}");
}

/// Resolves the MPI symbols at the first intercepted call; None if even `PMPI_File_open` and
/// friends are missing (then the calls fail with one line: there is nothing to pass to).
fn mpi() -> Option<&'static Mpi> {
    static MPI: OnceLock<Option<Mpi>> = OnceLock::new();
    MPI.get_or_init(|| {
        let m = (|| {
            Some(Mpi {
                file_open: real::PMPI_File_open()?,
                file_sync: real::PMPI_File_sync()?,
                file_close: real::PMPI_File_close()?,
                file_delete: real::PMPI_File_delete()?,
                coll: None,
            })
        })();
        let Some(mut m) = m else {
            say("PMPI_File_open/sync/close/delete not found (not an MPI program?); MPI-IO calls fail");
            return None;
        };
        m.coll = (|| {
            real::mpi_comm_world()?;
            Some(Coll {
                comm_rank: real::PMPI_Comm_rank()?,
                comm_dup: real::PMPI_Comm_dup()?,
                comm_free: real::PMPI_Comm_free()?,
                bcast: real::PMPI_Bcast()?,
                allreduce: real::PMPI_Allreduce()?,
                byte: real::mpi_byte()? as usize,
                int: real::mpi_int()? as usize,
                max: real::mpi_op_max()? as usize,
            })
        })();
        if m.coll.is_none() {
            say("this MPI library is not Open MPI 4.x (no ompi_mpi_comm_world); MPI-IO is not intercepted");
        }
        Some(m)
    })
    .as_ref()
}

impl Coll {
    fn rank(&self, comm: Handle) -> Result<c_int, c_int> {
        let mut r = 0;
        // SAFETY: a valid communicator (the caller's) and an int out-parameter.
        check(unsafe { (self.comm_rank)(comm, &mut r) })?;
        Ok(r)
    }

    /// The maximum of `v` over `comm` (also a barrier).
    fn max_of(&self, v: c_int, comm: Handle) -> Result<c_int, c_int> {
        let mut out: c_int = 0;
        // SAFETY: one int in, one int out, Open MPI's MPI_INT and MPI_MAX.
        check(unsafe {
            (self.allreduce)(
                (&v as *const c_int).cast(),
                (&mut out as *mut c_int).cast(),
                1,
                self.int as Handle,
                self.max as Handle,
                comm,
            )
        })?;
        Ok(out)
    }

    /// Broadcasts `buf`'s bytes from rank 0 of `comm`.
    fn bcast<T: Copy>(&self, buf: &mut T, comm: Handle) -> Result<(), c_int> {
        let n = c_int::try_from(std::mem::size_of::<T>()).map_err(|_| MPI_ERR_OTHER)?;
        // SAFETY: `buf` is `n` plain bytes on every rank.
        check(unsafe { (self.bcast)((buf as *mut T).cast(), n, self.byte as Handle, 0, comm) })
    }
}

fn check(rc: c_int) -> Result<(), c_int> {
    if rc == MPI_SUCCESS {
        Ok(())
    } else {
        Err(rc)
    }
}

/// Runs one MPI wrapper: a panic prints one line and returns `MPI_ERR_IO`.
pub(crate) fn mpi_ffi(name: &str, body: impl FnOnce() -> Result<c_int, c_int>) -> c_int {
    match std::panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(rc)) | Ok(Err(rc)) => rc,
        Err(_) => {
            say(&format!(
                "{name}: internal error (a bug in libpdcx_mpiio); the call failed"
            ));
            MPI_ERR_IO
        }
    }
}

// ---------------------------------------------------------------------------------------------
// the client (one per process, connected at the first logged open)

fn client() -> Result<Client, String> {
    static CLIENT: Mutex<Option<(u32, Result<Client, String>)>> = Mutex::new(None);
    let _g = Passthrough::enter();
    let pid = std::process::id();
    let mut c = fdtab::lock(&CLIENT);
    match c.as_ref() {
        // A forked child never reuses its parent's connections.
        Some((p, r)) if *p == pid => r.clone(),
        _ => {
            let r = Client::connect(None)
                .inspect(|c| {
                    // Each rank's bytes go to its node's server, whatever PDCX_PLACEMENT says
                    // for the program's other pdcx use: commit makes them durable there.
                    c.set_placement(pdcx_core::Placement::RegionLocal);
                })
                .map_err(|e| {
                    let root = pdcx_core::config::ROOT
                        .text()
                        .unwrap_or_else(|| "(unset)".into());
                    format!("no pdcx server reachable (PDCX_ROOT={root}): {}", e.message)
                });
            *c = Some((pid, r.clone()));
            r
        }
    }
}

fn open_stream(name: &str, create: bool) -> Result<ByteStream, String> {
    let c = client()?;
    let _g = Passthrough::enter();
    c.bs_open(name, create)
        .map_err(|e| format!("cannot open byte stream {name}: {}", e.message))
}

// ---------------------------------------------------------------------------------------------
// open files

/// One `MPI_File` we log.
struct OpenFile {
    file: Arc<FileState>,
    /// A private duplicate of the file's communicator for our collectives.
    dup: usize,
    rank: c_int,
    /// Opened `MPI_MODE_RDONLY`: no writes, so close is no consistency point (and no `dup`).
    readonly: bool,
}

static FILES: Mutex<Option<HashMap<usize, OpenFile>>> = Mutex::new(None);

fn files_insert(fh: Handle, of: OpenFile) {
    fdtab::lock(&FILES)
        .get_or_insert_with(HashMap::new)
        .insert(fh as usize, of);
}

fn files_take(fh: Handle) -> Option<OpenFile> {
    fdtab::lock(&FILES).as_mut()?.remove(&(fh as usize))
}

fn files_with<T>(fh: Handle, f: impl FnOnce(&OpenFile) -> T) -> Option<T> {
    fdtab::lock(&FILES).as_ref()?.get(&(fh as usize)).map(f)
}

/// Sends this process's queued writes of `file` to the servers, where every rank's reads
/// see them (a write on a local file system is visible at once). Inside `MPI_File_sync` or
/// `MPI_File_close` it does nothing: the consistency point that follows commits them.
fn flush_one(file: &FileState) -> Result<(), String> {
    if guard::in_sync_or_close() {
        return Ok(());
    }
    let _g = Passthrough::enter();
    file.bs
        .flush()
        .map_err(|e| format!("flush of {} failed: {e}", file.name))
}

/// [`flush_one`] of the file behind `fh`, when this process logs it for writing; an error
/// is printed (one line) and returned as `MPI_ERR_IO`.
pub(crate) fn flush_handle(fh: Handle, what: &str) -> Result<(), c_int> {
    let Some(file) = files_with(fh, |o| (!o.readonly).then(|| o.file.clone())).flatten() else {
        return Ok(());
    };
    flush_one(&file).map_err(|e| {
        say(&format!("{what}: {e}"));
        MPI_ERR_IO
    })
}

/// [`flush_one`] of every file this process logs for writing (before a barrier: what a
/// rank wrote before it is visible to every rank after it). Errors are printed; the writes
/// stay queued for the next consistency point, which reports the failure to the program.
pub(crate) fn flush_all(what: &str) {
    let files: Vec<Arc<FileState>> = match fdtab::lock(&FILES).as_ref() {
        Some(m) => m
            .values()
            .filter(|o| !o.readonly)
            .map(|o| o.file.clone())
            .collect(),
        None => return,
    };
    for f in files {
        if let Err(e) = flush_one(&f) {
            say(&format!("{what}: {e}"));
        }
    }
}

fn debug_line(rank: c_int, what: &str) {
    if config::get().debug {
        say(&format!("[rank {rank} pid {}] {what}", std::process::id()));
    }
}

/// `MPI_File_open` and `PMPI_File_open`.
///
/// # Safety
/// C `MPI_File_open(comm, filename, amode, info, fh)` of Open MPI.
unsafe fn file_open(
    comm: Handle,
    filename: *const c_char,
    amode: c_int,
    info: Handle,
    fh: *mut Handle,
) -> c_int {
    let Some(m) = mpi() else { return MPI_ERR_OTHER };
    // SAFETY: the caller's arguments, passed on unchanged.
    let pass = || unsafe { (m.file_open)(comm, filename, amode, info, fh) };
    let Some(coll) = m.coll.as_ref() else {
        return pass();
    };
    if guard::inside() || fdtab::forked() || filename.is_null() || fh.is_null() {
        return pass();
    }
    mpi_ffi("MPI_File_open", || {
        let cfg = config::get();
        // SAFETY: MPI's filename is a NUL-terminated string.
        let path = unsafe { CStr::from_ptr(filename) }.to_bytes();
        let cwd = {
            let _g = Passthrough::enter();
            std::env::current_dir().map_err(|_| MPI_ERR_IO)?
        };
        match config::decide(cfg, path, amode, &cwd) {
            Decision::Pass => {
                report_problem_once(cfg, coll, comm);
                Ok(pass())
            }
            Decision::Fallback { reason, target } => {
                let norm = config::normalise(path, &cwd);
                if amode & config::amode::RDONLY != 0 {
                    return fallback_open(m, comm, &read_target(&norm, target), amode, info, fh);
                }
                let rank = coll.rank(comm)?;
                let line = config::fallback_line(&reason, &norm, &target, cfg.home.as_ref());
                // Redirect is asked for (by `pdcx run`, which already printed the job's one
                // line saying why, or by the user): only the debug output repeats it.
                if cfg.mode == config::Mode::Redirect {
                    debug_line(rank, &line);
                } else if rank == 0 {
                    say_line(&line);
                }
                fallback_open(m, comm, &target, amode, info, fh)
            }
            Decision::Log { norm, name, home } => {
                log_open(m, coll, comm, filename, amode, info, fh, norm, name, home)
            }
        }
    })
}

/// Prints a configuration problem once per process, from rank 0 of the first file's comm.
fn report_problem_once(cfg: &config::Config, coll: &Coll, comm: Handle) {
    static ONCE: Once = Once::new();
    // A missing home only matters for prefix files (their fallback line says so).
    if let Some(p) = cfg
        .problem
        .as_ref()
        .filter(|_| cfg.mode == config::Mode::Off)
    {
        ONCE.call_once(|| {
            if coll.rank(comm) == Ok(0) {
                say(p);
            }
        });
    }
}

/// Where a prefix file that is not logged is read from: its home copy if there is one, else
/// the file in place (an input file put into the prefix directory by other means).
fn read_target(norm: &Path, target: std::path::PathBuf) -> std::path::PathBuf {
    let _g = Passthrough::enter();
    if !target.exists() && norm.exists() {
        norm.to_path_buf()
    } else {
        target
    }
}

/// Opens `target` directly (creating its parent directories): the program's file, unlogged.
fn fallback_open(
    m: &Mpi,
    comm: Handle,
    target: &Path,
    amode: c_int,
    info: Handle,
    fh: *mut Handle,
) -> Result<c_int, c_int> {
    {
        let _g = Passthrough::enter();
        if let Some(dir) = target.parent() {
            // Every rank may race to create them; that is harmless. A failure shows at open.
            let _ = std::fs::create_dir_all(dir);
        }
    }
    let c = CString::new(target.as_os_str().as_bytes()).map_err(|_| MPI_ERR_OTHER)?;
    // SAFETY: the caller's communicator, info and handle; our path string.
    Ok(unsafe { (m.file_open)(comm, c.as_ptr(), amode, info, fh) })
}

/// Decides with every rank of `comm` whether the file is logged, then opens it.
#[allow(clippy::too_many_arguments)]
fn log_open(
    m: &Mpi,
    coll: &Coll,
    comm: Handle,
    filename: *const c_char,
    amode: c_int,
    info: Handle,
    fh: *mut Handle,
    norm: std::path::PathBuf,
    name: String,
    home: String,
) -> Result<c_int, c_int> {
    let rank = coll.rank(comm)?;
    // Reading: from the stream if the program logged the file, else from the file itself.
    let readonly = amode & config::amode::RDONLY != 0;
    // Rank 0 opens (creates) the stream first; the others open it by name once it exists.
    let mut head: [u64; 2] = [0, 0]; // [failed, id]
    let mut why = String::new();
    let mut mine = None;
    if !readonly {
        // A barrier first: a rank still inside an earlier `MPI_File_delete` of this name
        // (every rank may call it, without a barrier after it) must not remove the stream
        // rank 0 is about to create. On a file system that window is an unlink's
        // microseconds; a stream's delete takes round trips.
        coll.max_of(0, comm)?;
    }
    if rank == 0 {
        let r = open_stream(&name, !readonly).and_then(|bs| {
            // A stream this open created is empty and has no versions: nothing to reset.
            if readonly || bs.created() {
                return Ok(bs);
            }
            let _g = Passthrough::enter();
            let fail = |what: &str, e: pdcx_core::Error| {
                format!("cannot {what} byte stream {name}: {}", e.message)
            };
            // Writes after the last seal (a run that crashed or stopped before its consistency
            // point) never become part of the file: start from the last version.
            bs.discard_incomplete().map_err(|e| fail("reset", e))?;
            // No placeholder: the program creates a new file, so an earlier run's version
            // must not show through either (a direct run would start from an empty file).
            if amode & config::amode::CREATE != 0 && !norm.exists() {
                bs.set_size(0).map_err(|e| fail("empty", e))?;
            }
            Ok(bs)
        });
        match r {
            Ok(bs) => {
                head = [0, bs.id()];
                mine = Some(bs);
            }
            Err(e) => {
                head[0] = 1;
                why = e;
            }
        }
    }
    coll.bcast(&mut head, comm)?;
    let mut failed = head[0] as c_int;
    if rank != 0 && failed == 0 {
        match open_stream(&name, false) {
            Ok(bs) if bs.id() == head[1] => mine = Some(bs),
            Ok(bs) => {
                failed = 1;
                why = format!(
                    "{name} is object {:#x} here but {:#x} on rank 0",
                    bs.id(),
                    head[1]
                );
            }
            Err(e) => {
                failed = 1;
                why = e;
            }
        }
    }
    if failed != 0 && rank != 0 {
        debug_line(rank, &why);
    }
    let all = coll.max_of(failed, comm)?;
    let (Some(bs), 0) = (mine, all) else {
        // Every rank falls back together: never part of a file logged and part written.
        let cfg = config::get();
        let rel = config::relative(cfg, &norm).unwrap_or_default();
        let target = config::fallback_target(cfg.home.as_ref(), &rel, &norm);
        if readonly {
            return fallback_open(m, comm, &read_target(&norm, target), amode, info, fh);
        }
        if rank == 0 {
            let reason = if why.is_empty() {
                format!(
                    "another rank could not open byte stream {name} (PDCX_MPIIO_DEBUG=1 says why)"
                )
            } else {
                why
            };
            say_line(&config::fallback_line(
                &reason,
                &norm,
                &target,
                cfg.home.as_ref(),
            ));
        }
        return fallback_open(m, comm, &target, amode, info, fh);
    };
    let mut dup: Handle = std::ptr::null_mut();
    if !readonly {
        // SAFETY: the caller's communicator; `dup` receives the new one.
        check(unsafe { (coll.comm_dup)(comm, &mut dup) })?;
    }
    let file = Arc::new(FileState {
        bs,
        name,
        home,
        write_through: config::get().write_through,
    });
    let norm_display = norm.display().to_string();
    fdtab::begin_opening(Opening {
        norm,
        file: file.clone(),
    });
    // The MPI library opens the ORIGINAL path; the open wrappers track its fds (until the
    // file's MPI_File_close: ROMIO may open it later).
    // SAFETY: the caller's arguments.
    let rc = unsafe { (m.file_open)(comm, filename, amode, info, fh) };
    if rc != MPI_SUCCESS {
        fdtab::end_opening(&file);
        if rank == 0 && file.bs.created() {
            // The open failed (an MPI_MODE_EXCL open of an existing file, a missing
            // directory): the stream this call created must not outlive it, as no file does.
            let _g = Passthrough::enter();
            if let Err(e) = file.bs.client().delete_object(file.bs.id()) {
                debug_line(rank, &format!("removing unused {}: {e}", file.name));
            }
        }
        if !dup.is_null() {
            // SAFETY: our own duplicate.
            unsafe { (coll.comm_free)(&mut dup) };
        }
        return Ok(rc);
    }
    static ATFORK: Once = Once::new();
    ATFORK.call_once(|| {
        // SAFETY: registers a handler that only does atomic stores.
        unsafe { libc::pthread_atfork(None, None, Some(fdtab::after_fork_in_child)) };
    });
    let verb = if readonly { "reading" } else { "logging" };
    debug_line(rank, &format!("{verb} {} in {}", norm_display, file.name));
    // SAFETY: the real open succeeded, so `*fh` is the new file handle.
    files_insert(
        unsafe { *fh },
        OpenFile {
            file,
            dup: dup as usize,
            rank,
            readonly,
        },
    );
    Ok(MPI_SUCCESS)
}

// ---------------------------------------------------------------------------------------------
// consistency points

/// After the program's sync or close on every rank: commit this rank's writes (durable on its
/// node), agree that every rank did, and rank 0 seals the version if any rank changed the
/// file since the last consistency point (a close right after a sync seals nothing). Rank 0
/// leaves what is due on the owner's node to the seal (`prepare_seal`: one round trip
/// less). `rc` is the real call's result; returns what the program sees.
fn consistency_point(
    coll: &Coll,
    file: &FileState,
    dup: Handle,
    rank: c_int,
    rc: c_int,
    what: &str,
) -> Result<c_int, c_int> {
    /// Reduced with MAX: any failure outranks "changed", which outranks "unchanged".
    const FAILED: c_int = 2;
    const CHANGED: c_int = 1;
    let mut mine = if rc != MPI_SUCCESS { FAILED } else { 0 };
    {
        let _g = Passthrough::enter();
        let r = if rank == 0 {
            file.bs.prepare_seal()
        } else {
            file.bs.commit()
        };
        if let Err(e) = r {
            say(&format!("{what}: commit of {} failed: {e}", file.name));
            mine = FAILED;
        }
    }
    if file.bs.take_changed() {
        mine = mine.max(CHANGED);
    }
    // Doubles as the barrier: after it every rank's writes are durable on its node (rank
    // 0's on the owner's node once sealed).
    let all = coll.max_of(mine, dup)?;
    if all >= FAILED {
        // Sealed at a later consistency point, then.
        file.bs.mark_changed();
        // The details are on stderr (each failing rank's lines); the program sees an I/O
        // error, as from a failing file system, on every rank.
        return Ok(MPI_ERR_IO);
    }
    let mut sealed: c_int = 0;
    if rank == 0 && all != CHANGED {
        // Nothing to seal; whatever `prepare_seal` left for the seal becomes durable now
        // (normally nothing is left, and this sends nothing).
        let _g = Passthrough::enter();
        if let Err(e) = file.bs.commit() {
            say(&format!("{what}: commit of {} failed: {e}", file.name));
            sealed = 1;
        }
    } else if rank == 0 {
        let _g = Passthrough::enter();
        match file.bs.seal(&file.home) {
            Ok(epoch) => debug_line(
                rank,
                &format!(
                    "{what}: sealed {} version {epoch} for {}",
                    file.name, file.home
                ),
            ),
            Err(e) => {
                say(&format!(
                    "{what}: sealing {} for {} failed: {e}",
                    file.name, file.home
                ));
                file.bs.mark_changed();
                sealed = 1;
            }
        }
    }
    coll.bcast(&mut sealed, dup)?;
    Ok(if sealed != 0 { MPI_ERR_IO } else { MPI_SUCCESS })
}

/// `MPI_File_sync` and `PMPI_File_sync`.
///
/// # Safety
/// C `MPI_File_sync(fh)` of Open MPI.
unsafe fn file_sync(fh: Handle) -> c_int {
    let Some(m) = mpi() else { return MPI_ERR_OTHER };
    // SAFETY: the caller's handle.
    let pass = || unsafe { (m.file_sync)(fh) };
    let Some(coll) = m.coll.as_ref() else {
        return pass();
    };
    if guard::inside() || fdtab::forked() {
        return pass();
    }
    let Some((file, dup, rank)) =
        files_with(fh, |o| (o.file.clone(), o.dup, o.rank)).filter(|&(_, dup, _)| dup != 0)
    else {
        return pass();
    };
    mpi_ffi("MPI_File_sync", || {
        let rc = {
            let _s = guard::SyncOrClose::enter();
            pass()
        };
        consistency_point(coll, &file, dup as Handle, rank, rc, "MPI_File_sync")
    })
}

/// `MPI_File_close` and `PMPI_File_close`.
///
/// # Safety
/// C `MPI_File_close(fh)` of Open MPI.
unsafe fn file_close(fh: *mut Handle) -> c_int {
    let Some(m) = mpi() else { return MPI_ERR_OTHER };
    // SAFETY: the caller's handle.
    let pass = || unsafe { (m.file_close)(fh) };
    let Some(coll) = m.coll.as_ref() else {
        return pass();
    };
    if guard::inside() || fdtab::forked() || fh.is_null() {
        return pass();
    }
    // SAFETY: a non-NULL pointer to the caller's file handle.
    let Some(of) = files_take(unsafe { *fh }) else {
        return pass();
    };
    mpi_ffi("MPI_File_close", || {
        // The library closes its fds (each flushes this process's queued writes) and may write
        // before that (HDF5 rewrites its superblock at close): close is a consistency point.
        let rc = {
            let _s = guard::SyncOrClose::enter();
            pass()
        };
        fdtab::end_opening(&of.file);
        if of.readonly {
            return Ok(rc);
        }
        let r = consistency_point(
            coll,
            &of.file,
            of.dup as Handle,
            of.rank,
            rc,
            "MPI_File_close",
        );
        let mut dup = of.dup as Handle;
        // SAFETY: our own duplicate, freed once.
        unsafe { (coll.comm_free)(&mut dup) };
        debug_line(
            of.rank,
            &format!("{}: {}", of.file.name, crate::stats::summary()),
        );
        r
    })
}

// ---------------------------------------------------------------------------------------------
// the exported names: each MPI function under both of its names, as tools like Darshan wrap
// them, so a program or library calling the profiling interface (`PMPI_File_open`; Open
// MPI's Fortran bindings do) is logged exactly as one calling `MPI_File_open`

/// Defines `$mpi` and `$pmpi` as the same wrapper `$imp`.
macro_rules! both_names {
    ($($mpi:ident, $pmpi:ident => $imp:ident($($a:ident: $t:ty),*);)*) => {
        $(
            /// # Safety
            /// The C function of the same name of Open MPI 4.1.
            #[cfg_attr(not(test), no_mangle)]
            pub unsafe extern "C" fn $mpi($($a: $t),*) -> c_int {
                let _m = guard::InMpi::enter();
                // SAFETY: the caller's arguments, passed on.
                unsafe { $imp($($a),*) }
            }

            /// # Safety
            /// The C function of the same name of Open MPI 4.1.
            #[cfg_attr(not(test), no_mangle)]
            pub unsafe extern "C" fn $pmpi($($a: $t),*) -> c_int {
                let _m = guard::InMpi::enter();
                // SAFETY: the caller's arguments, passed on.
                unsafe { $imp($($a),*) }
            }
        )*
    };
}

both_names! {
    MPI_File_open, PMPI_File_open =>
        file_open(comm: Handle, filename: *const c_char, amode: c_int, info: Handle, fh: *mut Handle);
    MPI_File_sync, PMPI_File_sync => file_sync(fh: Handle);
    MPI_File_close, PMPI_File_close => file_close(fh: *mut Handle);
    MPI_File_delete, PMPI_File_delete => file_delete(filename: *const c_char, info: Handle);
}

#[cfg(test)]
mod tests {
    //! The Open MPI constants this file and `config::amode` hard-code are the ones in this
    //! machine's `mpi.h`.
    use super::*;
    use crate::config::amode;
    use std::process::Command;

    fn header() -> Option<String> {
        let o = Command::new("mpicc")
            .arg("--showme:incdirs")
            .output()
            .ok()?;
        let dirs = String::from_utf8_lossy(&o.stdout).to_string();
        dirs.split_whitespace()
            .map(|d| std::path::Path::new(d).join("mpi.h"))
            .find(|p| p.is_file())
            .and_then(|p| std::fs::read_to_string(p).ok())
    }

    fn define(h: &str, name: &str) -> i32 {
        h.lines()
            .filter_map(|l| l.trim().strip_prefix("#define "))
            .find_map(|l| {
                let mut it = l.split_whitespace();
                (it.next() == Some(name)).then(|| it.next().unwrap().parse::<i32>().unwrap())
            })
            .unwrap_or_else(|| panic!("{name} not defined in mpi.h"))
    }

    #[test]
    fn constants_match_mpi_h() {
        let Some(h) = header() else {
            eprintln!("SKIPPED constants_match_mpi_h: no mpi.h (mpicc --showme:incdirs)");
            return;
        };
        assert!(h.contains("OMPI_MAJOR_VERSION"), "not Open MPI's mpi.h");
        for (name, v) in [
            ("MPI_MODE_CREATE", amode::CREATE),
            ("MPI_MODE_RDONLY", amode::RDONLY),
            ("MPI_MODE_WRONLY", amode::WRONLY),
            ("MPI_MODE_RDWR", amode::RDWR),
            ("MPI_MODE_DELETE_ON_CLOSE", amode::DELETE_ON_CLOSE),
            ("MPI_MODE_UNIQUE_OPEN", amode::UNIQUE_OPEN),
            ("MPI_MODE_EXCL", amode::EXCL),
            ("MPI_MODE_APPEND", amode::APPEND),
            ("MPI_MODE_SEQUENTIAL", amode::SEQUENTIAL),
            ("MPI_SUCCESS", MPI_SUCCESS),
            ("MPI_ERR_OTHER", MPI_ERR_OTHER),
            ("MPI_ERR_IO", MPI_ERR_IO),
        ] {
            assert_eq!(define(&h, name), v, "{name}");
        }
        // Handles are pointers in this ABI (MPI_BYTE is the address of a predefined object).
        assert!(h.contains("typedef struct ompi_communicator_t *MPI_Comm;"));
        assert!(h.contains("typedef struct ompi_file_t *MPI_File;"));
        assert!(h.contains("OMPI_PREDEFINED_GLOBAL(MPI_Datatype, ompi_mpi_byte)"));
        assert!(h.contains("OMPI_PREDEFINED_GLOBAL(MPI_Op, ompi_mpi_op_max)"));
    }
}
