//! Group commit for the metadata shard's SQLite write-ahead log.
//!
//! SQLite runs in WAL mode with `synchronous=NORMAL`: a commit `write()`s its frames to the
//! `-wal` file (so it survives a kill -9 of the server: the bytes are in the kernel) but does not
//! fsync. Before a write is acknowledged the caller waits for a *shared* durability point: one
//! fdatasync of the `-wal` file covers every transaction committed before it started, so
//! concurrent and back-to-back requests from all connections share one fsync instead of paying
//! one each (what `synchronous=FULL` does). After the wait a transaction is as durable as under
//! `synchronous=FULL` (power loss included): WAL recovery replays the checksummed prefix of the
//! WAL, and a checkpoint (which may recycle the WAL) fsyncs the WAL and then the database first.
//!
//! Tickets are taken under the database lock right after `COMMIT`, so ticket order is commit
//! order and `written` never names a transaction whose frames are not yet written.

use pdcx_core::{Error, ErrorKind, Result};
use pdcx_fsio::Fs;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

const POISONED: &str = "the metadata device failed an fsync of its write-ahead log, so this \
server no longer accepts writes (fail-stop: what was durable is still served); check the device, \
then restart the server";

#[derive(Default)]
struct State {
    /// Last ticket handed out (= transactions committed to the WAL so far).
    written: u64,
    /// Every ticket up to this one is fsynced.
    synced: u64,
    /// A leader is inside fdatasync right now; others wait for its result.
    syncing: bool,
    poisoned: bool,
    /// Number of fdatasync calls (tests and stats: shows how well commits are grouped).
    syncs: u64,
}

pub struct GroupSync {
    wal: File,
    path: PathBuf,
    /// The fsync goes through the I/O seam (a simulated disk snapshots the database here).
    fs: Arc<dyn Fs>,
    /// The database and its WAL (made durable together) and the derived `-shm`.
    group: Vec<PathBuf>,
    derived: Vec<PathBuf>,
    state: Mutex<State>,
    cv: Condvar,
}

impl GroupSync {
    /// `wal` is the open `-wal` file of the database (it exists while a connection is open),
    /// `path` its name (the database is the same name without `-wal`); its fsyncs go through
    /// the I/O seam `fs`.
    pub fn with_fs(wal: File, path: &Path, fs: Arc<dyn Fs>) -> GroupSync {
        let base = path.to_string_lossy();
        let db = PathBuf::from(base.strip_suffix("-wal").unwrap_or(&base));
        let shm = PathBuf::from(format!("{}-shm", db.display()));
        GroupSync {
            wal,
            fs,
            group: vec![db, path.to_path_buf()],
            derived: vec![shm],
            path: path.to_path_buf(),
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes everything written so far durable now (one fsync through the seam), without
    /// tickets: at open, so the seam knows the database's files from the start.
    pub fn sync_now(&self) -> Result<()> {
        self.fs
            .sync_foreign(&self.wal, &self.group, &self.derived)
            .map_err(|e| Error::io(&format!("fdatasync {}", self.path.display()), &e))
    }

    /// A ticket for the transaction just committed. Call while still holding the database lock.
    pub fn ticket(&self) -> u64 {
        let mut s = self.state();
        s.written += 1;
        s.written
    }

    /// The newest ticket (everything committed so far).
    pub fn latest(&self) -> u64 {
        self.state().written
    }

    pub fn syncs(&self) -> u64 {
        self.state().syncs
    }

    /// Returns once the transaction of `ticket` is on stable storage. The first waiter to find
    /// no sync in flight becomes the leader: it fsyncs everything written so far (without the
    /// state lock, so others keep committing and queueing), then wakes every waiter it covered.
    /// A failed fsync poisons the shard: the kernel may have dropped the dirty pages, so a retry
    /// could report success for data that is gone.
    pub fn wait(&self, ticket: u64) -> Result<()> {
        let mut s = self.state();
        loop {
            if s.poisoned {
                return Err(Error::new(ErrorKind::Io, POISONED));
            }
            if s.synced >= ticket {
                return Ok(());
            }
            if s.syncing {
                s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            s.syncing = true;
            let target = s.written;
            drop(s);
            let r = self.fs.sync_foreign(&self.wal, &self.group, &self.derived);
            s = self.state();
            s.syncing = false;
            s.syncs += 1;
            match r {
                Ok(()) => s.synced = s.synced.max(target),
                Err(e) => {
                    s.poisoned = true;
                    self.cv.notify_all();
                    return Err(Error::new(
                        ErrorKind::Io,
                        format!("fdatasync {}: {e}; {POISONED}", self.path.display()),
                    ));
                }
            }
            self.cv.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn concurrent_waiters_share_fsyncs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w");
        let f = File::create(&path).unwrap();
        let g = Arc::new(GroupSync::with_fs(f, &path, pdcx_fsio::os()));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let t = g.ticket();
                        g.wait(t).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = g.state();
        assert_eq!(s.written, 400);
        assert_eq!(s.synced, 400);
        assert!(s.syncs <= 400, "{} syncs", s.syncs);
        // Already-synced tickets return at once without another fsync.
        drop(s);
        let before = g.syncs();
        g.wait(1).unwrap();
        assert_eq!(g.syncs(), before);
    }
}
