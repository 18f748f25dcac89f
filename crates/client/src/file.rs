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

use crate::bytestream::{ByteStream, MAX_LEN};
use crate::client::Client;
use crate::filecache::Window;
use pdcx_core::{Error, ErrorKind, ObjectMeta, Region, Result};
use std::collections::BTreeMap;
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

/// How a file is read ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefetch {
    /// Every read fetches exactly what it asks for.
    Off,
    /// Every miss fetches this many bytes (at least what the read asks for).
    Fixed(usize),
    /// The window learns from what readers consume (see the module doc).
    Adaptive,
}

/// Per-open switches (each can be turned off, to measure it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileOptions {
    pub aggregate: bool,
    pub prefetch: Prefetch,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            aggregate: true,
            prefetch: Prefetch::Adaptive,
        }
    }
}

impl FileOptions {
    /// The defaults, changed by `PDCX_FILE_AGGREGATE` (`0`/`1`) and `PDCX_FILE_PREFETCH`
    /// (`off`, `adaptive` or a size such as `256K`, `4M`).
    pub fn from_env() -> Result<FileOptions> {
        let mut o = FileOptions {
            aggregate: pdcx_core::config::FILE_AGGREGATE.switch()?,
            ..FileOptions::default()
        };
        if let Some(v) = pdcx_core::config::FILE_PREFETCH.text() {
            o.prefetch = Prefetch::parse(&v)
                .map_err(|e| Error::invalid(format!("PDCX_FILE_PREFETCH={v:?}: {e}")))?;
        }
        Ok(o)
    }
}

impl Prefetch {
    /// `off`, `adaptive`, or a window size in bytes with an optional K/M/G suffix.
    pub fn parse(s: &str) -> std::result::Result<Prefetch, String> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "off" | "0" | "none" => return Ok(Prefetch::Off),
            "adaptive" | "auto" | "on" => return Ok(Prefetch::Adaptive),
            _ => {}
        }
        let (num, mul) = match t.char_indices().last() {
            Some((i, 'k')) => (&t[..i], 1usize << 10),
            Some((i, 'm')) => (&t[..i], 1 << 20),
            Some((i, 'g')) => (&t[..i], 1 << 30),
            _ => (t.as_str(), 1),
        };
        let n: usize = num
            .parse()
            .map_err(|_| "expected off, adaptive or a size such as 256K".to_string())?;
        let n = n
            .checked_mul(mul)
            .filter(|&n| n <= PREFETCH_MAX)
            .ok_or_else(|| format!("a window larger than {PREFETCH_MAX} bytes"))?;
        Ok(Prefetch::Fixed(n))
    }
}

/// How a file is opened (Python's modes: `r`, `w`, `a`, `x`, each with an optional `+`;
/// `b` is accepted and ignored, a file is always bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenMode {
    pub read: bool,
    pub write: bool,
    /// Every write goes to the end.
    pub append: bool,
    pub create: bool,
    /// Fail if it exists.
    pub exclusive: bool,
    pub truncate: bool,
}

impl OpenMode {
    pub fn parse(mode: &str) -> Result<OpenMode> {
        let bad = || {
            Error::invalid(format!(
                "open mode {mode:?}: expected one of r, w, a, x, optionally with + and b"
            ))
        };
        let mut m = OpenMode::default();
        let mut kinds = 0;
        let mut plus = false;
        for c in mode.chars() {
            match c {
                'r' => {
                    kinds += 1;
                    m.read = true;
                }
                'w' => {
                    kinds += 1;
                    m.write = true;
                    m.create = true;
                    m.truncate = true;
                }
                'a' => {
                    kinds += 1;
                    m.write = true;
                    m.create = true;
                    m.append = true;
                }
                'x' => {
                    kinds += 1;
                    m.write = true;
                    m.create = true;
                    m.exclusive = true;
                }
                '+' if !plus => plus = true,
                'b' => {}
                _ => return Err(bad()),
            }
        }
        if kinds != 1 {
            return Err(bad());
        }
        if plus {
            m.read = true;
            m.write = true;
        }
        Ok(m)
    }
}

/// What `stat` tells of a file.
#[derive(Debug, Clone, PartialEq)]
pub struct FileStat {
    pub name: String,
    pub size: u64,
    /// Seconds since the epoch.
    pub ctime: f64,
    pub mtime: f64,
}

impl From<&ObjectMeta> for FileStat {
    fn from(m: &ObjectMeta) -> Self {
        FileStat {
            name: m.name.clone(),
            size: m.dims.first().copied().unwrap_or(0),
            ctime: m.ctime,
            mtime: m.mtime,
        }
    }
}

/// The canonical object name of a path-like file name: empty and `.` components and repeated
/// slashes dropped; refused when empty, absolute-looking after the scheme was stripped is
/// fine (`/a/b` is `a/b`), or when a `..` component would leave its prefix.
pub fn normalize(name: &str) -> Result<String> {
    let mut parts: Vec<&str> = Vec::new();
    for p in name.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                return Err(Error::invalid(format!(
                    "file name {name:?}: '..' is not allowed (a name may not leave its prefix)"
                )))
            }
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err(Error::invalid(format!("file name {name:?} names nothing")));
    }
    let out = parts.join("/");
    pdcx_core::model::validate_name("file", &out)?;
    Ok(out)
}

/// Disjoint runs of written bytes: offset -> bytes, no two touching or overlapping.
#[derive(Default, Debug)]
struct Runs {
    map: BTreeMap<u64, Vec<u8>>,
    bytes: usize,
    /// A recycled buffer the next new run starts in (no page faults for its first bytes).
    spare: Option<Vec<u8>>,
}

impl Runs {
    fn end(&self) -> u64 {
        self.map
            .iter()
            .next_back()
            .map(|(o, b)| o + b.len() as u64)
            .unwrap_or(0)
    }

    /// Writes `data` at `off`: later bytes replace earlier ones; touching runs merge.
    fn write(&mut self, off: u64, data: &[u8]) {
        let end = off + data.len() as u64;
        // Fast path: appends to the last run (sequential writers).
        if let Some((&o, last)) = self.map.iter_mut().next_back() {
            if o + last.len() as u64 == off {
                last.extend_from_slice(data);
                self.bytes += data.len();
                return;
            }
        }
        // Every run that overlaps or touches [off, end) is merged into one.
        let touching: Vec<u64> = self
            .map
            .range(..=end)
            .filter(|(o, b)| **o + b.len() as u64 >= off)
            .map(|(o, _)| *o)
            .collect();
        let start = touching.first().map_or(off, |&o| o.min(off));
        let mut merged_end = end;
        for o in &touching {
            merged_end = merged_end.max(o + self.map[o].len() as u64);
        }
        let n = (merged_end - start) as usize;
        let mut merged = match self.spare.take() {
            Some(mut v) => {
                v.clear();
                v.resize(n, 0);
                v
            }
            None => vec![0u8; n],
        };
        for o in touching {
            let b = self.map.remove(&o).unwrap_or_default();
            self.bytes -= b.len();
            let at = (o - start) as usize;
            merged[at..at + b.len()].copy_from_slice(&b);
        }
        let at = (off - start) as usize;
        merged[at..at + data.len()].copy_from_slice(data);
        self.bytes += merged.len();
        self.map.insert(start, merged);
    }

    /// Copies the buffered bytes that fall in [off, off + out.len()) over `out`.
    fn overlay(&self, off: u64, out: &mut [u8]) {
        let end = off + out.len() as u64;
        for (&o, b) in self.map.range(..end) {
            let bend = o + b.len() as u64;
            if bend <= off {
                continue;
            }
            let s = o.max(off);
            let e = bend.min(end);
            out[(s - off) as usize..(e - off) as usize]
                .copy_from_slice(&b[(s - o) as usize..(e - o) as usize]);
        }
    }

    /// Drops everything at or past `len`.
    fn truncate(&mut self, len: u64) {
        let cut: Vec<u64> = self.map.range(..).map(|(o, _)| *o).collect();
        for o in cut {
            if o >= len {
                if let Some(b) = self.map.remove(&o) {
                    self.bytes -= b.len();
                }
            } else if let Some(b) = self.map.get_mut(&o) {
                let keep = (len - o).min(b.len() as u64) as usize;
                self.bytes -= b.len() - keep;
                b.truncate(keep);
            }
        }
    }
}

/// What a name is: a file, or a directory (a name prefix; see [`Client::file_kind`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    File(FileStat),
    Dir,
}

/// One entry of a directory listing ([`Client::file_dir`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DirEntry {
    /// The name under the directory (one component).
    pub name: String,
    /// None for a subdirectory.
    pub stat: Option<FileStat>,
}

/// The marker object [`Client::file_mkdir`] creates for directory `dir`: its name and a
/// slash, an empty byte stream (so a directory exists before anything is written in it).
pub fn dir_marker(dir: &str) -> String {
    format!("{dir}/")
}

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

    /// Size and times of file `name`.
    pub fn file_stat(&self, name: &str) -> Result<FileStat> {
        let m = self.open_object(&normalize(name)?)?;
        if !m.is_byte_stream() {
            return Err(Error::invalid(format!(
                "object {:?} is not a file (a {:?} array of dims {:?})",
                m.name, m.dtype, m.dims
            )));
        }
        Ok(FileStat::from(&m))
    }

    /// Deletes file `name`.
    pub fn file_remove(&self, name: &str) -> Result<()> {
        let m = self.open_object(&normalize(name)?)?;
        if !m.is_byte_stream() {
            return Err(Error::invalid(format!(
                "object {:?} is not a file; delete it with `pdcx rm`",
                m.name
            )));
        }
        self.delete_object(m.id)
    }

    /// Renames file `from` to `to`, replacing a file `to` as POSIX `rename` does (the
    /// replaced file is removed first, so unlike POSIX a crash in between can leave neither
    /// at `to`; `from` is never lost). The data does not move.
    pub fn file_rename(&self, from: &str, to: &str) -> Result<()> {
        let (from, to) = (normalize(from)?, normalize(to)?);
        let m = self.open_object(&from)?;
        if !m.is_byte_stream() {
            return Err(Error::invalid(format!("object {from:?} is not a file")));
        }
        if from == to {
            return Ok(());
        }
        match self.open_object(&to) {
            Ok(t) if t.is_byte_stream() => self.delete_object(t.id)?,
            Ok(_) => {
                return Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!("{to:?} is an object that is not a file"),
                ))
            }
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.rename_object(m.id, &to).map(drop)
    }

    /// Files whose names start with `prefix`, sorted by name.
    pub fn file_list(&self, prefix: &str) -> Result<Vec<FileStat>> {
        Ok(self.bs_list(prefix)?.iter().map(FileStat::from).collect())
    }
}

impl Client {
    /// What canonical name `name` is ("" is the root, always a directory): a file, a
    /// directory (some file's name starts with it and a slash, or `file_mkdir` made it), or
    /// nothing.
    pub fn file_kind(&self, name: &str) -> Result<Option<Kind>> {
        if name.is_empty() {
            return Ok(Some(Kind::Dir));
        }
        match self.file_stat(name) {
            Ok(s) => return Ok(Some(Kind::File(s))),
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let under = self.file_list(&dir_marker(name))?;
        Ok((!under.is_empty()).then_some(Kind::Dir))
    }

    /// The entries directly under directory `dir` ("" for the root), sorted by name.
    pub fn file_dir(&self, dir: &str) -> Result<Vec<DirEntry>> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            dir_marker(dir)
        };
        // (name, is a directory) -> stat: a name may be a file and a directory at once.
        let mut seen: BTreeMap<(String, bool), Option<FileStat>> = BTreeMap::new();
        for f in self.file_list(&prefix)? {
            let rest = &f.name[prefix.len()..];
            match rest.split_once('/') {
                None if rest.is_empty() => {} // this directory's own marker
                None => {
                    seen.insert((rest.to_string(), false), Some(f.clone()));
                }
                Some((sub, _)) => {
                    seen.insert((sub.to_string(), true), None);
                }
            }
        }
        let out = seen
            .into_iter()
            .map(|((name, _), stat)| DirEntry { name, stat })
            .collect();
        Ok(out)
    }

    /// Makes directory `dir` (canonical) exist: its marker object. Fails if the name is
    /// taken by a file or a directory.
    pub fn file_mkdir(&self, dir: &str) -> Result<()> {
        let dir = normalize(dir)?;
        if self.file_kind(&dir)?.is_some() {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("{dir:?} exists"),
            ));
        }
        self.bs_open(&dir_marker(&dir), true).map(drop)
    }

    /// Removes empty directory `dir` (its marker; a directory that exists only through the
    /// files under it goes away with them).
    pub fn file_rmdir(&self, dir: &str) -> Result<()> {
        let dir = normalize(dir)?;
        match self.file_kind(&dir)? {
            None => Err(Error::new(
                ErrorKind::NotFound,
                format!("no directory {dir:?}"),
            )),
            Some(Kind::File(_)) => Err(Error::invalid(format!("{dir:?} is a file"))),
            Some(Kind::Dir) => {
                if !self.file_dir(&dir)?.is_empty() {
                    return Err(Error::invalid(format!("directory {dir:?} is not empty")));
                }
                let m = self.open_object(&dir_marker(&dir))?;
                self.delete_object(m.id)
            }
        }
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

    /// Reads at the position and advances it; 0 at the end.
    pub fn read(&mut self, out: &mut [u8]) -> Result<usize> {
        let n = self.pread(self.pos, out)?;
        self.pos += n as u64;
        Ok(n)
    }

    /// Reads until `out` is full or the end; returns how many bytes it read.
    pub fn read_full(&mut self, out: &mut [u8]) -> Result<usize> {
        let mut got = 0;
        while got < out.len() {
            let n = self.read(&mut out[got..])?;
            if n == 0 {
                break;
            }
            got += n;
        }
        Ok(got)
    }

    /// Reads up to `out.len()` bytes at `off` (fewer at the end), position unchanged.
    pub fn pread(&mut self, off: u64, out: &mut [u8]) -> Result<usize> {
        self.check(false)?;
        let size = self.size();
        if off >= size || out.is_empty() {
            return Ok(0);
        }
        let n = (size - off).min(out.len() as u64) as usize;
        let out = &mut out[..n];
        // What the servers hold (below their size); past it only unflushed writes (and zeros
        // in holes).
        let remote = self.remote_size.saturating_sub(off).min(n as u64) as usize;
        if remote > 0 {
            self.fetch_into(off, &mut out[..remote])?;
        }
        out[remote..].fill(0);
        self.pending.overlay(off, out);
        self.consumed += n as u64;
        self.last_end = off + n as u64;
        Ok(n)
    }

    /// Fills `out` with the servers' bytes at `off` (all below `remote_size`), through the
    /// read-ahead window.
    fn fetch_into(&mut self, off: u64, out: &mut [u8]) -> Result<()> {
        let want = out.len();
        if let Some((o, b)) = &self.ahead {
            if off >= *o && off + want as u64 <= o + b.len() as u64 {
                let at = (off - o) as usize;
                out.copy_from_slice(&b.as_slice()[at..at + want]);
                return Ok(());
            }
        }
        if self.opts.prefetch == Prefetch::Off {
            self.fetches += 1;
            return self.stream_read(off, out);
        }
        if self.opts.prefetch == Prefetch::Adaptive && self.fetches > 0 {
            if off == self.last_end {
                self.window = (self.window * 4).min(PREFETCH_MAX);
            } else {
                self.window = (self.window / 4).max(PREFETCH_MIN);
            }
        }
        let len = (want.max(self.window) as u64).min(self.remote_size - off) as usize;
        let mem = &self.stream.client().inner.files;
        self.fetches += 1;
        // Same node: the window is the server's log itself, mapped (or gathered from it),
        // rather than bytes copied through shared memory into fresh memory here (mAdd keeps
        // 24 files open at once: 57 MB of page faults).
        let client = self.stream.client();
        let buf = match client.stream_window(self.stream.id(), off, len)? {
            Some(w) => w,
            None => {
                let mut buf = mem.take(len);
                self.stream_read(off, &mut buf)?;
                Window::Heap(buf)
            }
        };
        out.copy_from_slice(&buf.as_slice()[..want]);
        let buf = Arc::new(buf);
        // A mapped window is not cached: reading it again costs one plan, and a cached
        // mapping would keep a retired segment's disk space allocated.
        let heap = matches!(*buf, Window::Heap(_));
        if heap && off == 0 && len as u64 == self.remote_size && !self.mode.write {
            mem.put(self.stream.id(), self.mtime, buf.clone());
        }
        if let Some((_, old)) = self.ahead.replace((off, buf)) {
            mem.give_shared(old);
        }
        Ok(())
    }

    fn stream_read(&self, off: u64, out: &mut [u8]) -> Result<()> {
        let region = Region::new(vec![off], vec![out.len() as u64])?;
        let client = self.stream.client();
        if out.len() < OWNER_READ_MAX {
            client.read_via_owner(self.stream.id(), &region, out)
        } else {
            client.read_into(self.stream.id(), &region, out)
        }
    }

    /// Writes at the position (at the end in append mode) and advances it.
    pub fn write(&mut self, data: &[u8]) -> Result<usize> {
        if self.mode.append {
            self.pos = self.size();
        }
        self.pwrite(self.pos, data)?;
        self.pos += data.len() as u64;
        Ok(data.len())
    }

    /// Writes all of `data` at `off`, position unchanged.
    pub fn pwrite(&mut self, off: u64, data: &[u8]) -> Result<()> {
        self.check(true)?;
        if data.is_empty() {
            return Ok(());
        }
        let end = off
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_LEN)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::OutOfBounds,
                    format!(
                        "write at {off} of {} bytes passes the largest file",
                        data.len()
                    ),
                )
            })?;
        // The window no longer shows these bytes.
        if let Some((o, b)) = &self.ahead {
            if off < o + b.len() as u64 && end > *o {
                self.ahead = None;
            }
        }
        if self.opts.aggregate {
            if self.pending.map.is_empty() && self.pending.spare.is_none() {
                let mem = &self.stream.client().inner.files;
                self.pending.spare = Some(mem.take_empty(data.len().max(1 << 20)));
            }
            self.pending.write(off, data);
            if self.pending.bytes >= AGGREGATE_MAX {
                self.flush()?;
            }
        } else {
            self.stream.pwrite(off, data)?;
            self.stream.flush()?;
            self.stream.client().inner.files.forget(self.stream.id());
            self.remote_size = self.remote_size.max(end);
        }
        Ok(())
    }

    /// Makes every write of this handle visible to every reader (one commit for all of them).
    pub fn flush(&mut self) -> Result<()> {
        self.check_open()?;
        if self.pending.map.is_empty() {
            return Ok(());
        }
        let end = self.pending.end();
        for (off, bytes) in &self.pending.map {
            self.stream.pwrite(*off, bytes)?;
        }
        self.stream.flush()?;
        debug_assert_eq!(end, self.pending.end());
        // Written: only now leave the buffer (a failure keeps them for the next attempt).
        self.flushed();
        Ok(())
    }

    /// Hands this file's unflushed writes over as write transfers (the stream grown first
    /// to hold them); `flush_all` starts and waits for them with other files'.
    fn pending_transfers(&mut self) -> Result<Vec<crate::Transfer>> {
        self.check_open()?;
        if self.pending.map.is_empty() {
            return Ok(Vec::new());
        }
        let end = self.pending.end();
        let client = self.stream.client().clone();
        let id = self.stream.id();
        let dims = if end > self.remote_size {
            client.extend_dims(id, vec![end])?.dims
        } else {
            vec![self.remote_size]
        };
        let mut out = Vec::with_capacity(self.pending.map.len());
        for (off, bytes) in &self.pending.map {
            let region = Region::new(vec![*off], vec![bytes.len() as u64])?;
            let mut t = crate::Transfer::for_object(
                &client,
                id,
                self.stream.meta().dtype,
                &dims,
                region,
                true,
            )?;
            t.load_from(bytes)?;
            out.push(t);
        }
        Ok(out)
    }

    /// The unflushed writes reached the servers: they leave the buffer (its memory goes
    /// back to the pool), the size grows to cover them, cached bytes are stale.
    fn flushed(&mut self) {
        let end = self.pending.end();
        let mem = &self.stream.client().inner.files;
        mem.forget(self.stream.id());
        self.pending.bytes = 0;
        // The largest buffer stays with this handle as the next run's start: a file written
        // past AGGREGATE_MAX refills the memory it already touched instead of growing a
        // fresh run (mAdd's 32 MiB mosaic: a page fault per 4 KiB of every new run).
        let mut runs: Vec<Vec<u8>> = std::mem::take(&mut self.pending.map)
            .into_values()
            .collect();
        runs.extend(self.pending.spare.take());
        if let Some(i) = (0..runs.len()).max_by_key(|&i| runs[i].capacity()) {
            self.pending.spare = Some(runs.swap_remove(i));
        }
        for v in runs {
            mem.give(v);
        }
        self.remote_size = self.remote_size.max(end);
    }

    /// [`flush`](Self::flush), then durable on the servers that took the writes (`fsync`).
    pub fn sync(&mut self) -> Result<()> {
        self.flush()?;
        self.stream.commit()
    }

    /// Sets the size to exactly `len` (grown bytes read as zeros).
    pub fn set_len(&mut self, len: u64) -> Result<()> {
        self.check(true)?;
        self.pending.truncate(len);
        self.flush()?;
        self.stream.set_size(len)?;
        self.stream.client().inner.files.forget(self.stream.id());
        self.remote_size = len;
        self.ahead = None;
        Ok(())
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

/// Flushes several files at one consistency point: their unflushed writes become write
/// transfers started together and waited for together (`start_all`/`wait_all`: one commit
/// per server for all of them, the `transfer_all`/`wait_all` of "Montage on PDC"), instead of
/// a write and a commit per file. On failure no file's buffer is dropped (a retry writes them
/// all again; writing the same bytes twice is harmless).
pub fn flush_all(files: &mut [&mut File]) -> Result<()> {
    let mut transfers = Vec::new();
    for f in files.iter_mut() {
        transfers.extend(f.pending_transfers()?);
    }
    if !transfers.is_empty() {
        let mut refs: Vec<&mut crate::Transfer> = transfers.iter_mut().collect();
        crate::start_all(&mut refs)?;
        crate::wait_all(&mut refs)?;
    }
    for f in files.iter_mut() {
        f.flushed();
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_like_python() {
        let r = OpenMode::parse("rb").unwrap();
        assert!(r.read && !r.write && !r.create);
        let w = OpenMode::parse("w").unwrap();
        assert!(w.write && w.create && w.truncate && !w.read);
        let a = OpenMode::parse("a+").unwrap();
        assert!(a.append && a.read && a.write && !a.truncate);
        let x = OpenMode::parse("xb").unwrap();
        assert!(x.exclusive && x.create);
        for bad in ["", "rw", "q", "r++", "wa"] {
            assert!(OpenMode::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn names_are_canonical_and_stay_in_their_prefix() {
        assert_eq!(normalize("raw//a/./b.fits").unwrap(), "raw/a/b.fits");
        assert_eq!(normalize("/raw/a").unwrap(), "raw/a");
        assert!(normalize("raw/../etc/passwd").is_err());
        assert!(normalize("..").is_err());
        assert!(normalize("//").is_err());
        assert!(normalize("a\nb").is_err());
    }

    #[test]
    fn prefetch_sizes_parse() {
        assert_eq!(Prefetch::parse("off").unwrap(), Prefetch::Off);
        assert_eq!(Prefetch::parse("Adaptive").unwrap(), Prefetch::Adaptive);
        assert_eq!(Prefetch::parse("256K").unwrap(), Prefetch::Fixed(256 << 10));
        assert_eq!(Prefetch::parse("4m").unwrap(), Prefetch::Fixed(4 << 20));
        assert!(Prefetch::parse("1G").is_err());
        assert!(Prefetch::parse("lots").is_err());
    }

    #[test]
    fn runs_merge_with_later_bytes_winning() {
        let mut r = Runs::default();
        r.write(0, b"aaaa");
        r.write(4, b"bbbb"); // appends
        r.write(10, b"cc"); // a hole
        r.write(2, b"XXXXXXXXX"); // over both runs and the hole's start, touching "cc"
        assert_eq!(r.map.len(), 1);
        let mut out = vec![b'.'; 14];
        r.overlay(0, &mut out);
        assert_eq!(&out, b"aaXXXXXXXXXc..");
        assert_eq!(r.bytes, 12);
        assert_eq!(r.end(), 12);
        r.truncate(5);
        assert_eq!(r.end(), 5);
        assert_eq!(r.bytes, 5);
        let mut out = vec![b'.'; 3];
        r.overlay(3, &mut out);
        assert_eq!(&out, b"XX.");
    }
}
