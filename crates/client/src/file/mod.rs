//! Files: byte-stream objects opened like POSIX or Python files, with a position,
//! client-side write aggregation and adaptive read-ahead ("Montage on PDC" §IV-B).
//!
//! A [`File`] wraps one [`ByteStream`] handle. Its semantics are close-to-open, which is what
//! workflows passing files between steps rely on ("Montage on PDC" §VI: Montage never reads a file
//! back while another process writes it):
//! - **writes** are kept on the client ([`FileOptions::aggregate`]) as disjoint runs (a later
//!   write over an earlier one replaces its bytes, as CFITSIO's header rewrites do) and
//!   committed together at [`File::flush`], [`File::close`] or when they pass
//!   [`AGGREGATE_MAX`]; this handle's own reads see them at once. With aggregation off,
//!   every write is committed before it returns (one transfer and wait per write: PDC's
//!   behaviour without the paper's optimisation);
//! - **reads** come from a read-ahead window ([`FileOptions::prefetch`]). Adaptive mode
//!   learns the fraction of a file this client's readers consume: while they read files
//!   whole (at least [`WHOLE_FILE_FRACTION`] on average) the first read fetches the whole
//!   file (its size is known from the open), so reading a file whole costs the open and one
//!   read; when they read only headers, it fetches that fraction of the file ("Montage on PDC" §V:
//!   blind prefetching hurts tools that read a small part). The window grows 4x at each
//!   sequential miss and shrinks after a seek elsewhere. Files fetched whole are kept by the
//!   client and reused while unchanged (`filecache.rs`, revalidated at each open), which is
//!   what a tool that reopens its inputs (CFITSIO opens a file twice) or reads the same
//!   image for several pairs needs;
//! - **durability** is the caller's: `close` makes the writes visible (committed at
//!   `memory`, as a POSIX close does not fsync), [`File::sync`] makes them durable on the
//!   servers (`local`), like `fsync`.
//!
//! Names are object names; [`normalize`] is the one place a path-like name (`a//b/./c`) is
//! made canonical and refused when it tries to leave its prefix (`..`).
//!
//! This module is the handle (open, position, close); by job: `options` (modes and switches),
//! `namespace` (names, stat, directories), `runs` (the aggregation buffer), `read` (the
//! read-ahead window), `write` (aggregation, flush, `flush_all`).

mod namespace;
mod options;
mod read;
mod runs;
mod write;

pub use namespace::{dir_marker, normalize, DirEntry, FileStat, Kind};
pub use options::{FileOptions, OpenMode, Prefetch};
pub use write::flush_all;

use crate::bytestream::{ByteStream, MAX_LEN};
use crate::client::Client;
use crate::filecache::Window;
use pdcx_core::{Error, ErrorKind, Result};
use runs::Runs;
use std::io::SeekFrom;
use std::sync::Arc;

/// Aggregated writes are committed once they hold this many bytes, whatever the caller does.
pub const AGGREGATE_MAX: usize = 8 << 20;
/// Reads smaller than this go to the owner in one round trip; larger ones may be one-copy
/// reads from the log (a location query and a plan first).
pub const OWNER_READ_MAX: usize = 4 << 20;
/// The largest read-ahead window.
pub const PREFETCH_MAX: usize = 16 << 20;
/// The smallest window adaptive prefetching uses (one FITS block is 2880 bytes: 16 of them).
pub const PREFETCH_MIN: usize = 2880 * 16;
/// Adaptive prefetching fetches a file whole at its first read when readers have been
/// consuming at least this fraction of their files.
pub const WHOLE_FILE_FRACTION: f64 = 0.25;

/// An open file (see the module doc). Not shared between threads: each thread opens its own.
pub struct File {
    stream: ByteStream,
    mode: OpenMode,
    opts: FileOptions,
    pos: u64,
    /// The stream's size at the servers as this handle knows it (from the open, its own
    /// flushes and truncates).
    remote_size: u64,
    /// Aggregated writes not flushed yet.
    pending: Runs,
    /// The read-ahead window: (offset, bytes) fetched from the servers (or the client's
    /// cache of files read whole).
    ahead: Option<(u64, Arc<Window>)>,
    /// The metadata's mtime at the open (what cached bytes must match).
    mtime: f64,
    window: usize,
    /// Where the last read ended (sequential detection) and how many bytes reads returned.
    last_end: u64,
    consumed: u64,
    /// Round trips of reads (for the benchmark's per-file counts).
    fetches: u64,
    closed: bool,
}

impl Client {
    /// Opens file `name` (an object name; see [`normalize`]) with a Python-style `mode`.
    pub fn file_open(&self, name: &str, mode: &str, opts: FileOptions) -> Result<File> {
        let mode = OpenMode::parse(mode)?;
        let name = normalize(name)?;
        let stream = if mode.create {
            let s = self.bs_open(&name, true)?;
            if mode.exclusive && !s.created() {
                return Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!("file {name:?} exists (mode x)"),
                ));
            }
            s
        } else {
            self.bs_open(&name, false)?
        };
        // A close commits without fsync, as POSIX's does: no sync follows the writes soon.
        stream.set_syncs_soon(false);
        let mut remote_size = stream.known_size();
        if mode.truncate && !stream.created() && remote_size > 0 {
            stream.set_size(0)?;
            self.inner.files.forget(stream.id());
            remote_size = 0;
        }
        let mtime = stream.meta().mtime;
        let mem = &self.inner.files;
        // A file read before and unchanged since (close-to-open, `filecache.rs`).
        let ahead = (opts.prefetch != Prefetch::Off && remote_size > 0)
            .then(|| mem.get(stream.id(), mtime, remote_size))
            .flatten()
            .map(|d| (0, d));
        let window = match opts.prefetch {
            Prefetch::Off => 0,
            Prefetch::Fixed(n) => n,
            Prefetch::Adaptive => {
                let f = mem.fraction();
                if f >= WHOLE_FILE_FRACTION {
                    remote_size as usize
                } else {
                    (f * remote_size as f64) as usize
                }
                .clamp(PREFETCH_MIN, PREFETCH_MAX)
            }
        };
        Ok(File {
            stream,
            mode,
            opts,
            pos: 0,
            remote_size,
            pending: Runs::default(),
            ahead,
            mtime,
            window,
            last_end: 0,
            consumed: 0,
            fetches: 0,
            closed: false,
        })
    }
}

impl File {
    pub fn name(&self) -> &str {
        self.stream.name()
    }

    pub fn mode(&self) -> OpenMode {
        self.mode
    }

    pub fn options(&self) -> FileOptions {
        self.opts
    }

    /// Round trips this handle's reads made to the servers.
    pub fn fetches(&self) -> u64 {
        self.fetches
    }

    fn check_open(&self) -> Result<()> {
        if self.closed {
            return Err(Error::invalid(format!("file {:?} is closed", self.name())));
        }
        Ok(())
    }

    fn check(&self, write: bool) -> Result<()> {
        self.check_open()?;
        let ok = if write {
            self.mode.write
        } else {
            self.mode.read
        };
        if !ok {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "file {:?} is not open for {}",
                    self.name(),
                    if write { "writing" } else { "reading" }
                ),
            ));
        }
        Ok(())
    }

    /// The file's size as this handle sees it (its own unflushed writes included).
    pub fn size(&self) -> u64 {
        self.remote_size.max(self.pending.end())
    }

    pub fn tell(&self) -> u64 {
        self.pos
    }

    pub fn seek(&mut self, to: SeekFrom) -> Result<u64> {
        self.check_open()?;
        let base = match to {
            SeekFrom::Start(o) => Some(o),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            SeekFrom::End(d) => self.size().checked_add_signed(d),
        };
        match base {
            Some(p) if p <= MAX_LEN => {
                self.pos = p;
                Ok(p)
            }
            _ => Err(Error::invalid(format!(
                "seek in {:?} to {to:?} lands before the start or past the largest file",
                self.name()
            ))),
        }
    }

    /// Flushes and closes; later calls fail. Dropping a file closes it too, but only `close`
    /// reports a failure.
    pub fn close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        let r = self.flush();
        self.closed = true;
        if self.opts.prefetch == Prefetch::Adaptive && self.consumed > 0 {
            let mem = &self.stream.client().inner.files;
            mem.learn(self.consumed, self.size());
        }
        if let Some((_, b)) = self.ahead.take() {
            self.stream.client().inner.files.give_shared(b);
        }
        if let Some(v) = self.pending.spare.take() {
            self.stream.client().inner.files.give(v);
        }
        r
    }
}

impl Drop for File {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            crate::shm::debug(&format!(
                "{}: writes not flushed when the file was dropped: {e}",
                self.name()
            ));
        }
    }
}

impl std::io::Read for File {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        File::read(self, buf).map_err(std::io::Error::other)
    }
}

impl std::io::Write for File {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        File::write(self, buf).map_err(std::io::Error::other)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        File::flush(self).map_err(std::io::Error::other)
    }
}

impl std::io::Seek for File {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        File::seek(self, pos).map_err(std::io::Error::other)
    }
}
