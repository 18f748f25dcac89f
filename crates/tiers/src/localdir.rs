//! Directory tiers: a node-local directory (SSD, burst buffer) or a shared one (parallel file
//! system). A blob is a file under the tier's path, published with
//! [`pdcx_fsio::publish_atomic_via`] (a temporary name, fsync, rename, directory fsync), so a
//! crash leaves the old blob or the new one. Every file operation goes through the I/O seam
//! ([`pdcx_fsio::Fs`]), so crash tests can run a tier on a simulated disk.

use crate::config::TierConfig;
use crate::{check_key, Tier, TierKind};
use pdcx_core::{Error, ErrorKind, Result};
use pdcx_fsio::{create_dir_durable, publish_atomic_via, Fs, FsFile, OpenMode};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Temporary files carry this marker; they are never listed and are removed at open.
pub(crate) const TMP_MARK: &str = ".pdcx-tmp-";

/// Room reserved for a put: the bytes of the blob it replaces, and how much it grows `used`.
struct Room {
    old: u64,
    grow: u64,
}

/// Makes a put's temporary file on the real file system before it is written (see
/// [`DirTier::put_with`]).
pub type PrepareTemp<'a> = &'a dyn Fn(&Path) -> std::io::Result<()>;

pub struct DirTier {
    fs: Arc<dyn Fs>,
    name: String,
    kind: TierKind,
    root: PathBuf,
    capacity: Option<u64>,
    used: AtomicU64,
    /// Serialises capacity checks with the puts that pass them.
    reserve: Mutex<()>,
    tmp_counter: AtomicU64,
    /// Marks this server's temporary files in a shared directory (empty: node-local).
    owner: String,
    throttle: Option<Throttle>,
}

/// Emulates a slower device (`max_mbps`): reads and writes share one byte budget per second,
/// each waiting for its turn. For benchmarks of tier splits on machines whose disks are as
/// fast as tmpfs; never set on a real deployment.
struct Throttle {
    bytes_per_sec: f64,
    next_free: Mutex<std::time::Instant>,
}

impl Throttle {
    fn wait(&self, bytes: usize) {
        let done = {
            let mut next = self.next_free.lock().unwrap_or_else(|p| p.into_inner());
            let start = (*next).max(std::time::Instant::now());
            *next = start + std::time::Duration::from_secs_f64(bytes as f64 / self.bytes_per_sec);
            *next
        };
        let now = std::time::Instant::now();
        if done > now {
            std::thread::sleep(done - now);
        }
    }
}

impl DirTier {
    pub fn open(cfg: &TierConfig) -> Result<Self> {
        Self::open_with_fs(cfg, pdcx_fsio::os())
    }

    /// [`open`](Self::open) on the file system `fs` (a simulated disk in crash tests).
    pub fn open_with_fs(cfg: &TierConfig, fs: Arc<dyn Fs>) -> Result<Self> {
        Self::open_owned(cfg, fs, "")
    }

    /// Opens a directory several servers share: `owner` (e.g. `r3`) goes into this server's
    /// temporary names, and only temporaries with it are removed at open (others belong to
    /// puts of live servers). A file another server removes during the scan is skipped.
    pub fn open_owned(cfg: &TierConfig, fs: Arc<dyn Fs>, owner: &str) -> Result<Self> {
        let root = cfg
            .path
            .clone()
            .ok_or_else(|| Error::invalid(format!("tier {:?}: no path", cfg.name)))?;
        create_dir_durable(&*fs, &root).map_err(|e| {
            Error::io(
                &format!("tier {:?}: creating {}", cfg.name, root.display()),
                &e,
            )
        })?;
        let mut used = 0;
        let mine = format!("{TMP_MARK}{owner}");
        scan(&*fs, &root, &mut |p, len| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.contains(&mine) {
                let _ = fs.remove_file(p); // a put of ours that died before its rename
            } else if !name.contains(TMP_MARK) {
                used += len;
            }
        })
        .map_err(|e| {
            Error::io(
                &format!("tier {:?}: scanning {}", cfg.name, root.display()),
                &e,
            )
        })?;
        Ok(DirTier {
            fs,
            name: cfg.name.clone(),
            kind: cfg.kind,
            root,
            capacity: cfg.capacity,
            used: AtomicU64::new(used),
            reserve: Mutex::new(()),
            tmp_counter: AtomicU64::new(0),
            owner: owner.to_string(),
            throttle: cfg.max_mbps.map(|mbps| Throttle {
                bytes_per_sec: mbps * 1e6,
                next_free: Mutex::new(std::time::Instant::now()),
            }),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// [`Tier::put_parts`] with the temporary file first made by `create` (which must create
    /// it, empty, on the real file system). The shared tier uses this to give a file its Lustre
    /// layout before the first byte is written, which is the only time a layout can be set.
    pub fn put_with(
        &self,
        key: &str,
        parts: &[&[u8]],
        create: Option<PrepareTemp<'_>>,
    ) -> Result<()> {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        let path = self.path(key)?;
        if let Some(t) = &self.throttle {
            t.wait(len as usize);
        }
        let room = self.reserve(&path, len)?;
        let tmp = self
            .temp_beside(&path)
            .inspect_err(|_| self.release(room.grow))?;
        let created = match create {
            Some(create) => create(&tmp).map_err(|e| Error::io(&self.ctx("creating", key), &e)),
            None => Ok(()),
        };
        let published = created.and_then(|()| {
            publish_atomic_via(&*self.fs, &path, &tmp, parts)
                .map_err(|e| self.publish_error(key, e))
        });
        if let Err(e) = published {
            let _ = self.fs.remove_file(&tmp);
            self.release(room.grow);
            return Err(e);
        }
        self.release(room.old.saturating_sub(len));
        Ok(())
    }

    /// Counts `len` bytes about to replace the blob at `path` in `used` at once (so puts in
    /// parallel see each other's), or `NoSpace` if the capacity cannot take them. The caller
    /// [`release`](Self::release)s the growth if the put fails, and the shrink if it succeeds.
    fn reserve(&self, path: &Path, len: u64) -> Result<Room> {
        let old = self.fs.size(path).ok().flatten().unwrap_or(0);
        let grow = len.saturating_sub(old);
        let _reserve = self.reserve.lock().unwrap_or_else(|p| p.into_inner());
        let used = self.used.load(Ordering::Relaxed);
        if let Some(cap) = self.capacity {
            if used + grow > cap {
                return Err(Error::new(
                    ErrorKind::NoSpace,
                    format!(
                        "tier {:?} ({}) is full: {used} of {cap} bytes used, {} more needed",
                        self.name,
                        self.root.display(),
                        grow
                    ),
                ));
            }
        }
        self.used.fetch_add(grow, Ordering::Relaxed);
        Ok(Room { old, grow })
    }

    fn release(&self, bytes: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.saturating_sub(bytes))
            });
    }

    /// A fresh temporary name beside `path` (its directory created), marked as this server's.
    fn temp_beside(&self, path: &Path) -> Result<PathBuf> {
        let parent = path.parent().unwrap_or(&self.root).to_path_buf();
        create_dir_durable(&*self.fs, &parent).map_err(|e| {
            Error::io(
                &format!("tier {:?}: creating {}", self.name, parent.display()),
                &e,
            )
        })?;
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("blob");
        Ok(parent.join(format!(
            "{file_name}{TMP_MARK}{}{}-{n}",
            self.owner,
            std::process::id()
        )))
    }

    fn publish_error(&self, key: &str, e: pdcx_fsio::PublishError) -> Error {
        let (what, at, source) = match e {
            pdcx_fsio::PublishError::Write { what, path, source } => (what, path, source),
            pdcx_fsio::PublishError::Sync { path, source } => ("fsync", path, source),
        };
        let ctx = format!("{}: {what} {}", self.ctx("writing", key), at.display());
        Error::io(&ctx, &source)
    }

    /// [`PartWriter::begin`], the temporary first made by `create` (a Lustre layout).
    pub fn begin_parts(
        &self,
        key: &str,
        len: u64,
        create: Option<PrepareTemp<'_>>,
    ) -> Result<String> {
        let path = self.path(key)?;
        let room = self.reserve(&path, len)?;
        // Nothing is written yet: the reservation only checks that `len` bytes fit now.
        self.release(room.grow);
        let tmp = self.temp_beside(&path)?;
        let created = match create {
            Some(create) => create(&tmp).map_err(|e| Error::io(&self.ctx("creating", key), &e)),
            None => Ok(()),
        };
        created.and_then(|()| {
            self.fs
                .open(&tmp, OpenMode::CreateNew)
                .or_else(|e| match e.kind() {
                    // `create` made it (empty, with its layout).
                    std::io::ErrorKind::AlreadyExists => self.fs.open(&tmp, OpenMode::ReadWrite),
                    _ => Err(e),
                })
                // Its writers fill allocated blocks (the size still grows as parts land, so
                // `publish_parts` can tell a writer that did not finish).
                .map(|f| pdcx_fsio::allocate_ahead(&*f, len))
                .map_err(|e| Error::io(&self.ctx("creating a temporary for", key), &e))
        })?;
        let rel = tmp
            .strip_prefix(&self.root)
            .ok()
            .and_then(|r| r.to_str())
            .ok_or_else(|| {
                Error::internal(format!("temporary {} outside the tier", tmp.display()))
            })?;
        Ok(rel.to_string())
    }

    /// The path of temporary `temp` (a name [`begin_parts`](Self::begin_parts) returned).
    fn temp_path(&self, temp: &str) -> Result<PathBuf> {
        let name = temp.rsplit('/').next().unwrap_or(temp);
        if !name.contains(TMP_MARK) {
            return Err(Error::invalid(format!(
                "tier {:?}: {temp:?} is not a temporary blob",
                self.name
            )));
        }
        self.path(temp)
    }

    /// [`PartWriter::write`].
    pub fn write_part(&self, temp: &str, at: u64, parts: &[&[u8]]) -> Result<()> {
        let path = self.temp_path(temp)?;
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        if let Some(t) = &self.throttle {
            t.wait(len as usize);
        }
        let ctx = || self.ctx("writing part of", temp);
        let file = self
            .fs
            .open(&path, OpenMode::ReadWrite)
            .map_err(|e| Error::io(&ctx(), &e))?;
        pdcx_fsio::write_parts(&*file, at, parts).map_err(|e| Error::io(&ctx(), &e))?;
        file.sync_data().map_err(|e| Error::io(&ctx(), &e))
    }

    /// [`PartWriter::publish`].
    pub fn publish_parts(&self, temp: &str, key: &str, len: u64) -> Result<()> {
        let tmp = self.temp_path(temp)?;
        let path = self.path(key)?;
        let ctx = || self.ctx("publishing", key);
        let file = self
            .fs
            .open(&tmp, OpenMode::ReadWrite)
            .map_err(|e| Error::io(&ctx(), &e))?;
        let size = file.size().map_err(|e| Error::io(&ctx(), &e))?;
        if size != len {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "{}: its temporary holds {size} of {len} bytes (a writer did not finish)",
                    ctx()
                ),
            ));
        }
        let room = self.reserve(&path, len)?;
        let published = file
            .sync_all()
            .map_err(|e| Error::io(&ctx(), &e))
            .and_then(|()| {
                drop(file);
                self.fs
                    .rename(&tmp, &path)
                    .map_err(|e| Error::io(&ctx(), &e))
            })
            .and_then(|()| {
                let dir = path.parent().unwrap_or(&self.root);
                self.fs.sync_dir(dir).map_err(|e| Error::io(&ctx(), &e))
            });
        match published {
            Ok(()) => {
                self.release(room.old.saturating_sub(len));
                Ok(())
            }
            Err(e) => {
                self.release(room.grow);
                Err(e)
            }
        }
    }

    /// [`PartWriter::abort`].
    pub fn abort_parts(&self, temp: &str) {
        if let Ok(p) = self.temp_path(temp) {
            let _ = self.fs.remove_file(&p);
        }
    }

    fn path(&self, key: &str) -> Result<PathBuf> {
        check_key(key)?;
        Ok(self.root.join(key))
    }

    fn ctx(&self, what: &str, key: &str) -> String {
        format!("tier {:?}: {what} {key:?}", self.name)
    }

    fn not_found(&self, key: &str) -> Error {
        Error::not_found(format!("tier {:?}: no blob {key:?}", self.name))
    }

    fn open_blob(&self, key: &str) -> Result<Arc<dyn FsFile>> {
        self.fs.open(&self.path(key)?, OpenMode::Read).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                self.not_found(key)
            } else {
                Error::io(&self.ctx("opening", key), &e)
            }
        })
    }
}

/// Calls `f(path, len)` for every regular file under `dir`.
/// Files and directories another server removes meanwhile are skipped (a shared directory).
fn scan(fs: &dyn Fs, dir: &Path, f: &mut dyn FnMut(&Path, u64)) -> std::io::Result<()> {
    let names = match fs.list_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        names => names?,
    };
    for name in names {
        let path = dir.join(name);
        if fs.is_dir(&path) {
            scan(fs, &path, f)?;
        } else if let Some(len) = fs.size(&path)? {
            f(&path, len);
        }
    }
    Ok(())
}

impl Tier for DirTier {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> TierKind {
        self.kind
    }

    fn put(&self, key: &str, data: &[u8]) -> Result<()> {
        self.put_with(key, &[data], None)
    }

    fn put_parts(&self, key: &str, parts: &[&[u8]]) -> Result<()> {
        self.put_with(key, parts, None)
    }

    fn get_range(&self, key: &str, offset: u64, out: &mut [u8]) -> Result<()> {
        let f = self.open_blob(key)?;
        let len = f
            .size()
            .map_err(|e| Error::io(&self.ctx("stat", key), &e))?;
        if offset
            .checked_add(out.len() as u64)
            .is_none_or(|end| end > len)
        {
            return Err(Error::new(
                ErrorKind::OutOfBounds,
                format!(
                    "tier {:?}: range {offset}+{} past the end of {key:?} ({len} bytes)",
                    self.name,
                    out.len()
                ),
            ));
        }
        if let Some(t) = &self.throttle {
            t.wait(out.len());
        }
        f.read_exact_at(out, offset)
            .map_err(|e| Error::io(&self.ctx("reading", key), &e))
    }

    fn len(&self, key: &str) -> Result<u64> {
        self.open_blob(key)?
            .size()
            .map_err(|e| Error::io(&self.ctx("stat", key), &e))
    }

    fn delete(&self, key: &str) -> Result<()> {
        let path = self.path(key)?;
        let _reserve = self.reserve.lock().unwrap_or_else(|p| p.into_inner());
        match self.fs.size(&path) {
            Ok(Some(len)) => {
                self.fs
                    .remove_file(&path)
                    .map_err(|e| Error::io(&self.ctx("deleting", key), &e))?;
                let _ = self
                    .used
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                        Some(u.saturating_sub(len))
                    });
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => Err(Error::io(&self.ctx("deleting", key), &e)),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        let mut out = Vec::new();
        // Only the directory that can contain the prefix is walked.
        let dir_part = prefix.rfind('/').map_or("", |i| &prefix[..i]);
        let start = if dir_part.is_empty() {
            self.root.clone()
        } else {
            self.root.join(dir_part)
        };
        if !self.fs.is_dir(&start) {
            return Ok(out);
        }
        scan(&*self.fs, &start, &mut |p, len| {
            let Ok(rel) = p.strip_prefix(&self.root) else {
                return;
            };
            let Some(key) = rel.to_str() else { return };
            if key.starts_with(prefix) && !key.contains(TMP_MARK) {
                out.push((key.to_string(), len));
            }
        })
        .map_err(|e| Error::io(&format!("tier {:?}: listing {prefix:?}", self.name), &e))?;
        out.sort();
        Ok(out)
    }

    fn capacity(&self) -> Option<u64> {
        self.capacity
    }
    fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance;

    fn cfg(dir: &Path, capacity: Option<u64>) -> TierConfig {
        TierConfig {
            name: "ssd".into(),
            kind: TierKind::Local,
            path: Some(dir.to_path_buf()),
            capacity,
            ..Default::default()
        }
    }

    #[test]
    fn behaves_like_a_tier() {
        let dir = tempfile::tempdir().unwrap();
        conformance::check(&DirTier::open(&cfg(dir.path(), None)).unwrap());
    }

    #[test]
    fn on_a_simulated_disk_acknowledged_puts_survive_power_cuts_and_torn_ones_never_show() {
        let disk = pdcx_fsio::SimFs::new();
        let open = |d: &pdcx_fsio::SimFs| {
            DirTier::open_with_fs(&cfg(Path::new("/pfs/tier"), None), Arc::new(d.clone())).unwrap()
        };
        let t = open(&disk);
        conformance::check(&t);
        t.put("srv-1/obj-7/ext-1", &[1; 5000]).unwrap();
        t.put("srv-1/obj-7/ext-2", &[2; 300]).unwrap();
        for seed in 0..50u64 {
            // A put cut short at any write: never a torn blob, the old one stays readable.
            let after = disk.power_cut(Some(seed * 7919));
            let t2 = open(&after);
            assert_eq!(t2.get("srv-1/obj-7/ext-1").unwrap(), vec![1; 5000]);
            assert_eq!(t2.get("srv-1/obj-7/ext-2").unwrap(), vec![2; 300]);
            assert!(t2
                .list("")
                .unwrap()
                .iter()
                .all(|(k, _)| !k.contains(TMP_MARK)));
            t.put("srv-1/obj-7/ext-2", &[seed as u8; 300]).ok();
            t.put("srv-1/obj-7/ext-2", &[2; 300]).unwrap();
        }
        // A failed fsync is reported, and what it did not make durable is not claimed.
        disk.set_faults(pdcx_fsio::Faults {
            sync_eio: true,
            ..Default::default()
        });
        let e = t.put("srv-1/obj-8/ext-1", &[3; 10]).unwrap_err();
        assert!(e.message.contains("Input/output error"), "{e}");
        let after = disk.power_cut(None);
        assert_eq!(
            open(&after).len("srv-1/obj-8/ext-1").unwrap_err().kind,
            ErrorKind::NotFound
        );
    }

    #[test]
    fn a_blob_written_in_parts_is_whole_or_absent_after_power_cuts() {
        let disk = pdcx_fsio::SimFs::new();
        let open = |d: &pdcx_fsio::SimFs, owner: &str| {
            let c = cfg(Path::new("/pfs/tier"), None);
            DirTier::open_owned(&c, Arc::new(d.clone()), owner).unwrap()
        };
        let (leader, member) = (open(&disk, "r0"), open(&disk, "r1"));
        let data: Vec<u8> = (0..9000u32).map(|i| i as u8).collect();
        for seed in 0..20u64 {
            let key = format!("g0000/shard/{seed}");
            let temp = leader.begin_parts(&key, 9000, None).unwrap();
            member.write_part(&temp, 4000, &[&data[4000..]]).unwrap();
            leader.write_part(&temp, 0, &[&data[..4000]]).unwrap();
            // Cut before the publish, at any write: the key is absent, and the leader's next
            // open removes the temporary (the member's open leaves it alone).
            let cut = disk.power_cut(Some(seed * 104_729));
            assert_eq!(
                open(&cut, "r1").len(&key).unwrap_err().kind,
                ErrorKind::NotFound
            );
            let reopened = open(&cut, "r0");
            assert_eq!(reopened.len(&key).unwrap_err().kind, ErrorKind::NotFound);
            assert!(cut
                .list_dir(Path::new("/pfs/tier/g0000/shard"))
                .unwrap_or_default()
                .iter()
                .all(|n| !n.contains(TMP_MARK)));
            // Published: whole after any cut.
            leader.publish_parts(&temp, &key, 9000).unwrap();
            let cut = disk.power_cut(Some(seed * 7919));
            assert_eq!(open(&cut, "r1").get(&key).unwrap(), data);
        }
    }

    #[test]
    fn an_emulated_slow_device_takes_at_least_its_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = cfg(dir.path(), None);
        c.max_mbps = Some(20.0);
        let t = DirTier::open(&c).unwrap();
        let start = std::time::Instant::now();
        t.put("a", &[7u8; 2_000_000]).unwrap(); // 0.1 s at 20 MB/s
        let mut back = vec![0u8; 2_000_000];
        t.get_range("a", 0, &mut back).unwrap(); // another 0.1 s
        assert!(start.elapsed() >= std::time::Duration::from_millis(190));
        assert!(back.iter().all(|&b| b == 7));
    }

    #[test]
    fn capacity_survives_reopen_and_leftover_temporaries_go() {
        let dir = tempfile::tempdir().unwrap();
        let t = DirTier::open(&cfg(dir.path(), Some(1000))).unwrap();
        t.put("a/b", &[1; 600]).unwrap();
        assert_eq!(
            t.put("a/c", &[1; 600]).unwrap_err().kind,
            ErrorKind::NoSpace
        );
        std::fs::write(dir.path().join(format!("a/c{TMP_MARK}1-1")), [0u8; 10]).unwrap();
        drop(t);
        let t = DirTier::open(&cfg(dir.path(), Some(1000))).unwrap();
        assert_eq!(t.used(), 600);
        assert_eq!(t.list("a/").unwrap(), vec![("a/b".to_string(), 600)]);
        t.put("a/b", &[2; 1000]).unwrap(); // replacing: only the growth counts
        assert_eq!(t.used(), 1000);
    }
}
