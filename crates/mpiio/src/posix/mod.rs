//! The libc wrappers. Each one first asks whether the call can concern a logged file (for fd
//! calls: one atomic load in [`fdtab::maybe_tracked`]; for `open`: one atomic load in
//! [`fdtab::opening_active`], false while no logged file is open) and otherwise calls the real
//! function at once. On a tracked fd
//! the data goes to the file's byte stream, never to the (empty) placeholder file.
//!
//! ## Variadic entry points
//! `open`, `openat` (and their 64 forms) and `fcntl` are variadic in C; defining a C variadic
//! function needs nightly Rust. They are defined here with a fixed extra argument instead
//! (`mode` as `mode_t`, fcntl's `arg` as `usize`): on x86-64 and aarch64 Linux (SysV ABIs)
//! variadic integer/pointer arguments travel in the same registers as fixed ones, so the
//! callee sees the caller's value when one was passed, and an unspecified register value when
//! none was. Like glibc, `mode` is only used with `O_CREAT`/`O_TMPFILE` (otherwise 0 is
//! passed on), and fcntl's `arg` is handed on unchanged for the command to interpret.
//!
//! This file holds the check every fd wrapper starts with (`tracked_or_real!`). One job per
//! child:
//! - `open.rs`: the `open` family, which decides whether an fd is ours;
//! - `descriptors.rs`: `close`, `dup`, `fcntl` (an fd's life, and locks);
//! - `write.rs` / `read.rs`: the data calls, to and from the file's byte stream;
//! - `size.rs`: `lseek`, `ftruncate`, `fstat` (size and position);
//! - `durability.rs`: flush and commit (`fsync`, `fdatasync`);
//! - `args.rs`: C buffers, iovecs, offsets and `RWF_*` flags as Rust values.

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the fixed-arity definitions of open/fcntl assume the x86-64 or aarch64 SysV ABI");

/// The tracked state of `$fd`, or returns `$real` (the real call) when the fd is not ours.
macro_rules! tracked_or_real {
    ($fd:expr, $real:expr) => {{
        if !fdtab::maybe_tracked($fd) || guard::inside() {
            return $real;
        }
        match fdtab::get($fd) {
            Some(t) => t,
            None => return $real,
        }
    }};
}

mod args;
mod descriptors;
mod durability;
mod open;
mod plain;
mod read;
mod size;
mod write;

// The wrappers keep their old paths (`posix::open`, ...); `aio.rs` reads and writes through
// `read_at`/`write_at`.
pub use descriptors::*;
pub use durability::*;
pub use open::*;
pub use plain::{fopen, fopen64};
pub use read::*;
pub use size::*;
pub use write::*;
