//! A simulated disk for crash tests: an in-memory file system that remembers, per file, the
//! bytes a completed fsync made durable and, per directory, the entries a directory fsync made
//! durable. [`SimFs::power_cut`] returns the disk as it would be found after the power failed
//! at that instant (LazyFS's "lose unsynced data" model), optionally with the last unsynced
//! write torn at a random byte; [`SimFs::cut`] also keeps a random subset of each file's
//! unsynced writes (in any order, as page write-back does) and can find SQLite's files newer
//! than their last durability point ([`Cut`]). [`Faults`] make fsync fail with EIO or writes
//! with ENOSPC.
//!
//! Simplifications, all on the side of keeping *less*: unsynced directory entries never
//! survive a cut (a real file system may keep some); directories themselves are durable once created (the durable
//! path creates its directories once, before its first commit, and fsyncs their parents'
//! contents through the files it publishes). Files outside the seam (SQLite's database and
//! WAL) are snapshotted at the durability points the seam sees ([`Fs::sync_foreign`]) and put
//! back by [`SimFs::restore_foreign`].

use crate::{Fs, FsFile, LockGuard, OpenMode};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Failures to inject. Applied to paths under `only_under` (everything when None).
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Every fsync, fdatasync and directory fsync fails with EIO (and, like Linux after a
    /// writeback error, does not make anything durable).
    pub sync_eio: bool,
    /// Writes that would grow the disk's total file bytes past this fail with ENOSPC.
    pub capacity: Option<u64>,
    pub only_under: Option<PathBuf>,
}

/// A small deterministic random source for crash tests (xorshift64*): a seed replays a run
/// exactly, with no dependency.
#[derive(Debug, Clone)]
pub struct SimRng(u64);

impl SimRng {
    pub fn new(seed: u64) -> SimRng {
        SimRng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform enough in `0..n` for tests (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// What the simulated disk has seen (for the harness's table).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    pub writes: u64,
    pub bytes_written: u64,
    pub syncs: u64,
    pub dir_syncs: u64,
    pub failed_syncs: u64,
    pub enospc: u64,
}

#[derive(Debug, Clone, Default)]
struct Inode {
    data: Vec<u8>,
    /// The content a completed fsync/fdatasync made durable.
    durable: Vec<u8>,
    /// Lowest offset changed since the last sync (None: clean).
    dirty_from: Option<usize>,
    /// The changes since the last sync, in order, for a cut that keeps a random subset of
    /// them. Past `UNSYNCED_KEEP_MAX` bytes the rest is not recorded (such a cut keeps none of
    /// it: less, never more, than a disk could).
    unsynced: Vec<Unsynced>,
    unsynced_bytes: usize,
}

/// Bytes of unsynced changes recorded per file.
const UNSYNCED_KEEP_MAX: usize = 64 << 20;

#[derive(Debug, Clone)]
enum Unsynced {
    Write { offset: usize, bytes: Vec<u8> },
    SetLen(usize),
}

/// How a power cut finds the disk ([`SimFs::cut`]). The default is LazyFS's "lose unsynced
/// data": every file as its last fsync left it, every directory as its last directory fsync.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cut {
    /// The most recent write, if not yet durable, persists partly: its first `r % len` bytes.
    pub torn: Option<u64>,
    /// Each change (write, length change) made to a file since its last fsync persists or not,
    /// at random from this seed, applied in order: the page cache writes back pages in any
    /// order, so a later write may be on disk and an earlier one not.
    pub keep_unsynced: Option<u64>,
    /// Files outside the seam (SQLite's database and WAL) are found as they are now, newer
    /// than their last durability point (the kernel may have written back everything SQLite
    /// wrote), instead of as that point left them.
    pub foreign_ahead: bool,
}

#[derive(Debug, Clone, Default)]
struct Dir {
    live: BTreeMap<String, u64>,
    durable: BTreeMap<String, u64>,
}

#[derive(Debug, Clone)]
struct LastWrite {
    ino: u64,
    offset: usize,
    len: usize,
}

#[derive(Default)]
struct State {
    inodes: HashMap<u64, Inode>,
    next_ino: u64,
    dirs: BTreeMap<PathBuf, Dir>,
    last_write: Option<LastWrite>,
    faults: Faults,
    stats: SimStats,
    /// Snapshots of files outside the seam at their last durability point (None: absent).
    foreign: BTreeMap<PathBuf, Option<Vec<u8>>>,
    /// Files outside the seam seen by `sync_foreign`: true for derived ones.
    tracked: BTreeMap<PathBuf, bool>,
}

/// An in-memory [`Fs`] that can lose power. Cheap to clone (clones share the disk).
#[derive(Clone, Default)]
pub struct SimFs {
    st: Arc<Mutex<State>>,
}

fn err(kind: io::ErrorKind, what: &str, path: &Path) -> io::Error {
    io::Error::new(kind, format!("{what}: {}", path.display()))
}

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// Lexically normalised absolute form of `path` (no `.`/`..`), so `a/./b` and `a/b` agree.
fn norm(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

fn split(path: &Path) -> io::Result<(PathBuf, String)> {
    let p = norm(path);
    let name = p
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| err(io::ErrorKind::InvalidInput, "no file name", path))?
        .to_string();
    let parent = p.parent().unwrap_or(Path::new("/")).to_path_buf();
    Ok((parent, name))
}

impl State {
    fn faulty(&self, path: &Path) -> bool {
        self.faults
            .only_under
            .as_ref()
            .is_none_or(|p| norm(path).starts_with(norm(p)))
    }

    fn lookup(&self, path: &Path) -> io::Result<u64> {
        let (dir, name) = split(path)?;
        self.dirs
            .get(&dir)
            .and_then(|d| d.live.get(&name))
            .copied()
            .ok_or_else(|| err(io::ErrorKind::NotFound, "no such file", path))
    }

    fn used(&self) -> u64 {
        let mut seen = std::collections::HashSet::new();
        self.dirs
            .values()
            .flat_map(|d| d.live.values())
            .filter(|ino| seen.insert(**ino))
            .filter_map(|ino| self.inodes.get(ino))
            .map(|i| i.data.len() as u64)
            .sum()
    }

    fn sync_inode(&mut self, ino: u64, path: &Path) -> io::Result<()> {
        if self.faults.sync_eio && self.faulty(path) {
            self.stats.failed_syncs += 1;
            return Err(errno(libc::EIO));
        }
        self.stats.syncs += 1;
        let inode = self
            .inodes
            .get_mut(&ino)
            .ok_or_else(|| err(io::ErrorKind::NotFound, "stale handle", path))?;
        if let Some(from) = inode.dirty_from.take() {
            let keep = from.min(inode.durable.len()).min(inode.data.len());
            inode.durable.truncate(keep);
            inode.durable.extend_from_slice(&inode.data[keep..]);
        }
        inode.unsynced.clear();
        inode.unsynced_bytes = 0;
        Ok(())
    }
}

impl Inode {
    fn record(&mut self, change: Unsynced) {
        let n = match &change {
            Unsynced::Write { bytes, .. } => bytes.len(),
            Unsynced::SetLen(_) => 0,
        };
        if self.unsynced_bytes + n <= UNSYNCED_KEEP_MAX {
            self.unsynced_bytes += n;
            self.unsynced.push(change);
        }
    }

    /// The durable content with a random subset of the unsynced changes applied, in order.
    fn durable_with_some_unsynced(&self, rng: &mut SimRng) -> Vec<u8> {
        let mut data = self.durable.clone();
        for change in &self.unsynced {
            if rng.below(2) == 0 {
                continue;
            }
            match change {
                Unsynced::Write { offset, bytes } => {
                    let end = offset + bytes.len();
                    if data.len() < end {
                        data.resize(end, 0);
                    }
                    data[*offset..end].copy_from_slice(bytes);
                }
                Unsynced::SetLen(len) => data.resize(*len, 0),
            }
        }
        data
    }
}

struct SimFile {
    st: Arc<Mutex<State>>,
    ino: u64,
    path: PathBuf,
    writable: bool,
}

impl SimFile {
    fn state(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl FsFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let st = self.state();
        let data = &st.inodes[&self.ino].data;
        let Ok(off) = usize::try_from(offset) else {
            return Ok(0);
        };
        if off >= data.len() {
            return Ok(0);
        }
        let n = buf.len().min(data.len() - off);
        buf[..n].copy_from_slice(&data[off..off + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if !self.writable {
            return Err(errno(libc::EBADF));
        }
        let mut st = self.state();
        let off = usize::try_from(offset).map_err(|_| errno(libc::EFBIG))?;
        let end = off + buf.len();
        let grow = end.saturating_sub(st.inodes[&self.ino].data.len()) as u64;
        if let Some(cap) = st.faults.capacity {
            if grow > 0 && st.faulty(&self.path) && st.used() + grow > cap {
                st.stats.enospc += 1;
                return Err(errno(libc::ENOSPC));
            }
        }
        st.stats.writes += 1;
        st.stats.bytes_written += buf.len() as u64;
        let inode = st.inodes.get_mut(&self.ino).expect("open inode exists");
        if inode.data.len() < end {
            inode.data.resize(end, 0);
        }
        inode.data[off..end].copy_from_slice(buf);
        inode.dirty_from = Some(inode.dirty_from.map_or(off, |d| d.min(off)));
        inode.record(Unsynced::Write {
            offset: off,
            bytes: buf.to_vec(),
        });
        st.last_write = Some(LastWrite {
            ino: self.ino,
            offset: off,
            len: buf.len(),
        });
        Ok(())
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.state().inodes[&self.ino].data.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if !self.writable {
            return Err(errno(libc::EINVAL));
        }
        let len = usize::try_from(len).map_err(|_| errno(libc::EFBIG))?;
        let mut st = self.state();
        let inode = st.inodes.get_mut(&self.ino).expect("open inode exists");
        let from = len.min(inode.data.len());
        inode.data.resize(len, 0);
        inode.dirty_from = Some(inode.dirty_from.map_or(from, |d| d.min(from)));
        inode.record(Unsynced::SetLen(len));
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let path = self.path.clone();
        self.state().sync_inode(self.ino, &path)
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }
}

/// The files outside the seam as they are on the real disk now (derived ones, such as
/// SQLite's `-shm`, as absent: SQLite rebuilds them).
fn current_foreign(
    tracked: &BTreeMap<PathBuf, bool>,
) -> io::Result<BTreeMap<PathBuf, Option<Vec<u8>>>> {
    let mut foreign = BTreeMap::new();
    for (path, derived) in tracked {
        let content = match (derived, std::fs::read(path)) {
            (true, _) => None,
            (false, Ok(b)) => Some(b),
            (false, Err(e)) if e.kind() == io::ErrorKind::NotFound => None,
            (false, Err(e)) => return Err(e),
        };
        foreign.insert(path.clone(), content);
    }
    Ok(foreign)
}

impl SimFs {
    pub fn new() -> SimFs {
        let fs = SimFs::default();
        fs.state().dirs.insert(PathBuf::from("/"), Dir::default());
        fs
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the injected faults (e.g. `Faults::default()` to heal the disk).
    pub fn set_faults(&self, faults: Faults) {
        self.state().faults = faults;
    }

    pub fn stats(&self) -> SimStats {
        self.state().stats
    }

    /// The disk as found after a power failure now: every directory lists what its last
    /// directory fsync made durable, every file holds what its last fsync made durable. With
    /// `torn = Some(r)` the most recent write, if it was not yet durable, persists partly: its
    /// first `r % len` bytes (a random byte position chosen by the caller). Returns a separate
    /// disk; this one goes on unchanged (the "dead" process may still be running).
    pub fn power_cut(&self, torn: Option<u64>) -> SimFs {
        let foreign = self.state().foreign.clone();
        self.cut_with(
            Cut {
                torn,
                ..Cut::default()
            },
            foreign,
        )
    }

    /// The disk as found after a power failure now, as `how` says ([`Cut`]). Returns a
    /// separate disk; this one goes on unchanged. Fails only when a file outside the seam
    /// cannot be read (`foreign_ahead`).
    pub fn cut(&self, how: Cut) -> io::Result<SimFs> {
        let foreign = if how.foreign_ahead {
            current_foreign(&self.state().tracked)?
        } else {
            self.state().foreign.clone()
        };
        Ok(self.cut_with(how, foreign))
    }

    fn cut_with(&self, how: Cut, foreign: BTreeMap<PathBuf, Option<Vec<u8>>>) -> SimFs {
        let st = self.state();
        let mut rng = how.keep_unsynced.map(SimRng::new);
        let mut next = State {
            next_ino: st.next_ino,
            foreign,
            tracked: st.tracked.clone(),
            ..State::default()
        };
        for (path, dir) in &st.dirs {
            next.dirs.insert(
                path.clone(),
                Dir {
                    live: dir.durable.clone(),
                    durable: dir.durable.clone(),
                },
            );
            for &ino in dir.durable.values() {
                if next.inodes.contains_key(&ino) {
                    continue; // a second name of the same file
                }
                let durable = match (st.inodes.get(&ino), rng.as_mut()) {
                    (Some(i), Some(rng)) => i.durable_with_some_unsynced(rng),
                    (Some(i), None) => i.durable.clone(),
                    (None, _) => Vec::new(),
                };
                next.inodes.insert(
                    ino,
                    Inode {
                        data: durable.clone(),
                        durable,
                        ..Inode::default()
                    },
                );
            }
        }
        if let (Some(r), Some(w)) = (how.torn, &st.last_write) {
            let unsynced = st
                .inodes
                .get(&w.ino)
                .is_some_and(|i| i.dirty_from.is_some());
            if let (true, Some(inode), Some(src)) = (
                unsynced && w.len > 0,
                next.inodes.get_mut(&w.ino),
                st.inodes.get(&w.ino),
            ) {
                let keep = (r % w.len as u64) as usize;
                let end = w.offset + keep;
                if src.data.len() >= end {
                    if inode.data.len() < end {
                        inode.data.resize(end, 0);
                    }
                    inode.data[w.offset..end].copy_from_slice(&src.data[w.offset..end]);
                    inode.durable = inode.data.clone();
                }
            }
        }
        SimFs {
            st: Arc::new(Mutex::new(next)),
        }
    }

    /// The disk as found after the *process* died now (kill -9) while the machine kept
    /// running: every completed write survives, synced or not, and so does the current content
    /// of the foreign files. Returns a separate disk; this one goes on unchanged.
    pub fn process_crash(&self) -> io::Result<SimFs> {
        let st = self.state();
        let foreign = current_foreign(&st.tracked)?;
        let mut inodes = HashMap::new();
        for (ino, inode) in &st.inodes {
            inodes.insert(
                *ino,
                Inode {
                    data: inode.data.clone(),
                    durable: inode.data.clone(),
                    ..Inode::default()
                },
            );
        }
        let dirs = st
            .dirs
            .iter()
            .map(|(p, d)| {
                let dir = Dir {
                    live: d.live.clone(),
                    durable: d.live.clone(),
                };
                (p.clone(), dir)
            })
            .collect();
        let next = State {
            inodes,
            next_ino: st.next_ino,
            dirs,
            foreign,
            tracked: st.tracked.clone(),
            ..State::default()
        };
        Ok(SimFs {
            st: Arc::new(Mutex::new(next)),
        })
    }

    /// Writes the snapshots of foreign files (taken at their last durability point) back to
    /// the real disk, and removes the ones that were absent then; call on the disk returned by
    /// [`power_cut`](Self::power_cut) after the old process's handles are closed.
    pub fn restore_foreign(&self) -> io::Result<()> {
        let foreign = self.state().foreign.clone();
        for (path, content) in foreign {
            match content {
                Some(bytes) => std::fs::write(&path, bytes)?,
                None => match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                },
            }
        }
        Ok(())
    }
}

impl Fs for SimFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn FsFile>> {
        let mut st = self.state();
        let (dir, name) = split(path)?;
        let existing = st.dirs.get(&dir).map(|d| d.live.get(&name).copied());
        let ino = match (existing, mode) {
            (None, _) => return Err(err(io::ErrorKind::NotFound, "no such directory", path)),
            (Some(Some(_)), OpenMode::CreateNew) => {
                return Err(err(io::ErrorKind::AlreadyExists, "file exists", path))
            }
            (Some(Some(ino)), OpenMode::Truncate | OpenMode::TruncatePrivate) => {
                let inode = st.inodes.get_mut(&ino).expect("listed inode exists");
                inode.data.clear();
                inode.dirty_from = Some(0);
                ino
            }
            (Some(Some(ino)), _) => ino,
            (Some(None), OpenMode::Read | OpenMode::ReadWrite) => {
                return Err(err(io::ErrorKind::NotFound, "no such file", path))
            }
            (Some(None), OpenMode::CreateNew | OpenMode::Truncate | OpenMode::TruncatePrivate) => {
                st.next_ino += 1;
                let ino = st.next_ino;
                st.inodes.insert(ino, Inode::default());
                st.dirs
                    .get_mut(&dir)
                    .expect("checked above")
                    .live
                    .insert(name, ino);
                ino
            }
        };
        Ok(Arc::new(SimFile {
            st: self.st.clone(),
            ino,
            path: norm(path),
            writable: mode != OpenMode::Read,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.state();
        let ino = st.lookup(from)?;
        let (fdir, fname) = split(from)?;
        let (tdir, tname) = split(to)?;
        if !st.dirs.contains_key(&tdir) {
            return Err(err(io::ErrorKind::NotFound, "no such directory", to));
        }
        st.dirs
            .get_mut(&fdir)
            .expect("looked up")
            .live
            .remove(&fname);
        st.dirs
            .get_mut(&tdir)
            .expect("checked")
            .live
            .insert(tname, ino);
        Ok(())
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.state();
        let ino = st.lookup(from)?;
        let (tdir, tname) = split(to)?;
        let dir = st
            .dirs
            .get_mut(&tdir)
            .ok_or_else(|| err(io::ErrorKind::NotFound, "no such directory", to))?;
        if dir.live.contains_key(&tname) {
            return Err(err(io::ErrorKind::AlreadyExists, "file exists", to));
        }
        dir.live.insert(tname, ino);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state();
        st.lookup(path)?;
        let (dir, name) = split(path)?;
        st.dirs.get_mut(&dir).expect("looked up").live.remove(&name);
        Ok(())
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state();
        let mut p = PathBuf::from("/");
        for c in norm(path).components().skip(1) {
            p.push(c);
            st.dirs.entry(p.clone()).or_default();
        }
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let st = self.state();
        let d = norm(dir);
        let entry = st
            .dirs
            .get(&d)
            .ok_or_else(|| err(io::ErrorKind::NotFound, "no such directory", dir))?;
        let mut names: Vec<String> = entry.live.keys().cloned().collect();
        names.extend(
            st.dirs
                .keys()
                .filter(|p| p.parent() == Some(d.as_path()))
                .filter_map(|p| p.file_name()?.to_str().map(String::from)),
        );
        Ok(names)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.state();
        if st.faults.sync_eio && st.faulty(dir) {
            st.stats.failed_syncs += 1;
            return Err(errno(libc::EIO));
        }
        st.stats.dir_syncs += 1;
        let d = st
            .dirs
            .get_mut(&norm(dir))
            .ok_or_else(|| err(io::ErrorKind::NotFound, "no such directory", dir))?;
        d.durable = d.live.clone();
        Ok(())
    }

    fn size(&self, path: &Path) -> io::Result<Option<u64>> {
        let st = self.state();
        match st.lookup(path) {
            Ok(ino) => Ok(Some(st.inodes[&ino].data.len() as u64)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.state().dirs.contains_key(&norm(path))
    }

    fn lock(&self, _path: &Path) -> io::Result<LockGuard> {
        // One simulated disk belongs to one test process; there is no one else to exclude.
        Ok(Box::new(()))
    }

    fn sync_foreign(
        &self,
        _file: &std::fs::File,
        group: &[PathBuf],
        derived: &[PathBuf],
    ) -> io::Result<()> {
        let mut st = self.state();
        if st.faults.sync_eio && group.iter().any(|p| st.faulty(p)) {
            st.stats.failed_syncs += 1;
            return Err(errno(libc::EIO));
        }
        st.stats.syncs += 1;
        for p in group {
            st.tracked.insert(p.clone(), false);
            let content = match std::fs::read(p) {
                Ok(b) => Some(b),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(e),
            };
            st.foreign.insert(p.clone(), content);
        }
        for p in derived {
            st.tracked.insert(p.clone(), true);
            st.foreign.insert(p.clone(), None);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (SimFs, PathBuf) {
        let fs = SimFs::new();
        let d = PathBuf::from("/data/log");
        fs.create_dir_all(&d).unwrap();
        (fs, d)
    }

    #[test]
    fn unsynced_bytes_and_entries_are_lost_synced_ones_kept() {
        let (fs, d) = setup();
        let a = d.join("a");
        let f = fs.open(&a, OpenMode::CreateNew).unwrap();
        f.write_all_at(b"hello", 0).unwrap();
        // Neither the data nor the name is durable yet.
        assert_eq!(fs.power_cut(None).size(&a).unwrap(), None);
        f.sync_data().unwrap();
        // Data durable, but the directory entry is not.
        assert_eq!(fs.power_cut(None).size(&a).unwrap(), None);
        fs.sync_dir(&d).unwrap();
        f.write_all_at(b" world", 5).unwrap();
        let cut = fs.power_cut(None);
        assert_eq!(cut.read_file(&a).unwrap().unwrap(), b"hello");
        // Overwrites in place are undone too.
        f.write_all_at(b"HE", 0).unwrap();
        assert_eq!(fs.power_cut(None).read_file(&a).unwrap().unwrap(), b"hello");
        f.sync_all().unwrap();
        assert_eq!(
            fs.power_cut(None).read_file(&a).unwrap().unwrap(),
            b"HEllo world"
        );
        // A truncate that was not synced is undone.
        f.set_len(2).unwrap();
        assert_eq!(
            fs.power_cut(None).read_file(&a).unwrap().unwrap(),
            b"HEllo world"
        );
    }

    #[test]
    fn renames_and_removes_need_a_directory_sync() {
        let (fs, d) = setup();
        let (tmp, dst) = (d.join("M.tmp"), d.join("M"));
        crate::publish_atomic(&fs, &dst, b"v1").unwrap();
        let f = fs.open(&tmp, OpenMode::Truncate).unwrap();
        f.write_all_at(b"v2", 0).unwrap();
        f.sync_all().unwrap();
        fs.rename(&tmp, &dst).unwrap();
        let cut = fs.power_cut(None);
        assert_eq!(cut.read_file(&dst).unwrap().unwrap(), b"v1");
        assert_eq!(cut.size(&tmp).unwrap(), None, "tmp was never made durable");
        fs.sync_dir(&d).unwrap();
        assert_eq!(fs.power_cut(None).read_file(&dst).unwrap().unwrap(), b"v2");
        fs.remove_file(&dst).unwrap();
        assert!(fs.power_cut(None).size(&dst).unwrap().is_some());
        fs.sync_dir(&d).unwrap();
        assert!(fs.power_cut(None).size(&dst).unwrap().is_none());
    }

    #[test]
    fn torn_write_keeps_a_prefix_of_the_last_unsynced_write() {
        let (fs, d) = setup();
        let a = d.join("seg");
        let f = fs.open(&a, OpenMode::CreateNew).unwrap();
        fs.sync_dir(&d).unwrap();
        f.write_all_at(b"0123", 0).unwrap();
        f.sync_data().unwrap();
        f.write_all_at(b"abcdefgh", 4).unwrap();
        let cut = fs.power_cut(Some(3));
        assert_eq!(cut.read_file(&a).unwrap().unwrap(), b"0123abc");
        let cut = fs.power_cut(Some(8));
        assert_eq!(cut.read_file(&a).unwrap().unwrap(), b"0123");
    }

    #[test]
    fn a_subset_cut_keeps_some_unsynced_writes_in_any_order_and_never_unwritten_bytes() {
        let (fs, d) = setup();
        let a = d.join("seg");
        let f = fs.open(&a, OpenMode::CreateNew).unwrap();
        fs.sync_dir(&d).unwrap();
        f.write_all_at(b"0000", 0).unwrap();
        f.sync_data().unwrap();
        // Four unsynced writes, one byte each, at distinct places.
        for (i, b) in [b"a", b"b", b"c", b"d"].into_iter().enumerate() {
            f.write_all_at(b, i as u64).unwrap();
        }
        let mut seen = std::collections::HashSet::new();
        for seed in 0..64 {
            let cut = fs
                .cut(Cut {
                    keep_unsynced: Some(seed),
                    ..Cut::default()
                })
                .unwrap();
            let got = cut.read_file(&a).unwrap().unwrap();
            assert_eq!(got.len(), 4);
            for (i, &c) in got.iter().enumerate() {
                assert!(
                    c == b'0' || c == b"abcd"[i],
                    "byte {i} is {c}: never written there"
                );
            }
            seen.insert(got);
        }
        // Later writes kept without earlier ones: far more than all-or-nothing.
        assert!(
            seen.len() > 8,
            "{} distinct states of 16: {seen:?}",
            seen.len()
        );
        // A sync makes them all durable: every cut then keeps all of them.
        f.sync_data().unwrap();
        let cut = fs
            .cut(Cut {
                keep_unsynced: Some(1),
                ..Cut::default()
            })
            .unwrap();
        assert_eq!(cut.read_file(&a).unwrap().unwrap(), b"abcd");
    }

    #[test]
    fn eio_makes_nothing_durable_and_enospc_refuses_growth() {
        let (fs, d) = setup();
        let a = d.join("a");
        let f = fs.open(&a, OpenMode::CreateNew).unwrap();
        fs.sync_dir(&d).unwrap();
        f.write_all_at(b"abc", 0).unwrap();
        fs.set_faults(Faults {
            sync_eio: true,
            only_under: Some(d.clone()),
            ..Faults::default()
        });
        assert_eq!(f.sync_data().unwrap_err().raw_os_error(), Some(libc::EIO));
        assert_eq!(fs.power_cut(None).read_file(&a).unwrap().unwrap(), b"");
        fs.set_faults(Faults {
            capacity: Some(4),
            ..Faults::default()
        });
        let e = f.write_all_at(b"de", 3).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        f.write_all_at(b"d", 3).unwrap();
        f.write_all_at(b"X", 0).unwrap(); // overwrites need no space
        assert_eq!(fs.stats().enospc, 1);
        assert_eq!(fs.stats().failed_syncs, 1);
    }
}
