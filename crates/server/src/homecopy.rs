//! Home copies of byte-stream versions (issue 11, ParaLog's background checkpoint).
//!
//! A program's consistency point (`MPI_File_sync`/`close` under `libpdcx_mpiio`) seals a
//! version of its byte stream at the object's owner ([`seal`]). This server's `pdcx-home`
//! thread ([`run`]) then writes each sealed version to its home while the program computes:
//!
//! 1. state `writing`; create `DIR/.NAME.pdcx-e<epoch>` next to the home file, sized to the
//!    version (never-written ranges stay holes: zeros, as in a direct run);
//! 2. read the version chunk by chunk (`Engine::read_version`: writes below the seal's
//!    sequence number, from every holder) and write the non-zero chunks into it;
//! 3. fsync it, rename it over `DIR/NAME`, fsync `DIR` — a reader of the home file sees the
//!    previous complete version or this one, never a mix;
//! 4. state `done`, durable.
//!
//! A crash anywhere replays from step 1 at the next start (the tmp name carries the epoch;
//! the rename is atomic), so recovery is idempotent. Versions are copied in epoch order; a
//! version sealed before the previous one started is `superseded` (the home needs the
//! newest only).

use crate::meta::versions::{self, Sealed};
use crate::Server;
use pdcx_core::protocol::VersionInfo;
use pdcx_core::{Error, ErrorKind, ObjectId, Region, Result};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, Weak};
use std::time::Duration;

/// Bytes read and written per step of a copy.
const CHUNK: u64 = 16 << 20;
/// How long the copier waits before retrying a failed copy.
const RETRY: Duration = Duration::from_secs(2);

/// Wakes the copier thread; tells it to stop.
#[derive(Default)]
pub struct HomeCopier {
    state: Mutex<(bool, bool)>, // (kicked, stop)
    cv: Condvar,
}

impl HomeCopier {
    pub fn kick(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 = true;
        self.cv.notify_all();
    }

    pub fn stop(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.1 = true;
        self.cv.notify_all();
    }

    /// Waits for a kick or `d`; true if stopping.
    fn wait(&self, d: Duration) -> bool {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (mut s, _) = self
            .cv
            .wait_timeout_while(s, d, |s| !s.0 && !s.1)
            .unwrap_or_else(|p| p.into_inner());
        s.0 = false;
        s.1
    }
}

/// Where a version goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Home {
    /// An ordinary file at this absolute path (a shared directory: the "PFS").
    File(PathBuf),
    /// An S3 object.
    S3 { bucket: String, key: String },
}

impl Home {
    pub fn parse(s: &str) -> Result<Home> {
        if s.contains('\0') {
            return Err(Error::invalid("a home must not contain NUL bytes"));
        }
        if let Some(rest) = s.strip_prefix("s3://") {
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() || key.is_empty() || key.ends_with('/') {
                return Err(Error::invalid(format!(
                    "home {s:?}: an S3 home is s3://BUCKET/KEY with a non-empty key"
                )));
            }
            return Ok(Home::S3 {
                bucket: bucket.into(),
                key: key.into(),
            });
        }
        let p = Path::new(s);
        if !p.is_absolute() || p.file_name().is_none() {
            return Err(Error::invalid(format!(
                "home {s:?}: a file home is an absolute path naming a file"
            )));
        }
        if p.components().any(|c| c == std::path::Component::ParentDir) {
            return Err(Error::invalid(format!("home {s:?} must not contain `..`")));
        }
        Ok(Home::File(p.to_path_buf()))
    }
}

/// `Request::Seal` at the owner: records the current content of byte stream `id` as its next
/// version for `home` and wakes the copier. Returns the epoch (the previous one when nothing
/// changed since it).
pub fn seal(server: &Server, id: ObjectId, home: &str) -> Result<u64> {
    Home::parse(home)?;
    let obj = server.meta.object(id)?;
    if !obj.is_byte_stream() {
        return Err(Error::invalid(format!(
            "object {} is not a byte stream: only byte streams have versions",
            obj.name
        )));
    }
    let store = server.engine.store();
    // Every write committed before this call has a smaller number (the owner numbers them
    // all), and the sealing client waited for all of them first.
    let seal_seq = store.next_seq();
    let newest = store.newest_seq(id).max(server.meta.newest_region_seq(id)?);
    match server
        .meta
        .seal_version(id, seal_seq, newest, obj.dims[0], home)?
    {
        Sealed::New(epoch) => {
            server.homecopy.kick();
            Ok(epoch)
        }
        Sealed::Unchanged(epoch) => Ok(epoch),
    }
}

/// The `pdcx-home` thread: copies sealed versions to their homes until the server stops.
pub fn run(server: Weak<Server>) {
    let mut delay = Duration::from_millis(0);
    loop {
        {
            let Some(s) = server.upgrade() else { return };
            if !delay.is_zero() && s.homecopy.wait(delay) {
                return;
            }
        }
        let Some(s) = server.upgrade() else { return };
        delay = match copy_pending(&s) {
            Ok(()) => Duration::from_secs(3600),
            Err(e) => {
                tracing::warn!(rank = s.config.rank, "home copy: {}", e.message);
                RETRY
            }
        };
    }
}

/// Copies every version waiting for its home, in epoch order; stops at the first failure
/// (recorded in the version's row, retried later).
fn copy_pending(server: &Server) -> Result<()> {
    for v in server.meta.versions_to_copy()? {
        if server.stopping() {
            return Ok(());
        }
        if let Err(e) = copy_version(server, &v) {
            // Still to be copied: a later attempt (or the next start) tries again.
            let _ = server
                .meta
                .set_version_state(v.id, v.epoch, versions::SEALED, &e.message);
            return Err(e);
        }
    }
    Ok(())
}

fn copy_version(server: &Server, v: &VersionInfo) -> Result<()> {
    server
        .meta
        .set_version_state(v.id, v.epoch, versions::WRITING, "")?;
    match Home::parse(&v.home)? {
        Home::File(path) => copy_to_file(server, v, &path)?,
        Home::S3 { .. } => {
            return Err(Error::invalid(format!(
                "home {}: S3 homes are not supported yet",
                v.home
            )))
        }
    }
    server
        .meta
        .set_version_state(v.id, v.epoch, versions::DONE, "")
}

fn copy_to_file(server: &Server, v: &VersionInfo, dst: &Path) -> Result<()> {
    let io =
        |what: &str, p: &Path, e: std::io::Error| Error::io(&format!("{what} {}", p.display()), &e);
    let dir = dst
        .parent()
        .ok_or_else(|| Error::invalid(format!("home {} has no directory", dst.display())))?;
    std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
    let name = dst
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.pdcx-e{}", v.epoch));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| io("creating", &tmp, e))?;
    f.set_len(v.size).map_err(|e| io("sizing", &tmp, e))?;
    let mut buf = vec![0u8; CHUNK.min(v.size) as usize];
    let mut off = 0u64;
    while off < v.size {
        if server.stopping() {
            return Err(Error::new(ErrorKind::Unavailable, "server stopping"));
        }
        let n = CHUNK.min(v.size - off);
        let out = &mut buf[..n as usize];
        let region = Region::new(vec![off], vec![n])?;
        server.engine.read_version(v.id, &region, v.seal_seq, out)?;
        // Never-written ranges stay holes, as in a direct run's file.
        if out.iter().any(|&b| b != 0) {
            f.write_all_at(out, off)
                .map_err(|e| io("writing", &tmp, e))?;
        }
        off += n;
    }
    f.sync_all().map_err(|e| io("syncing", &tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, dst).map_err(|e| io("renaming onto", dst, e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("syncing directory", dir, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn homes_parse_and_bad_ones_are_refused() {
        assert_eq!(
            Home::parse("/pfs/out/a.h5").unwrap(),
            Home::File("/pfs/out/a.h5".into())
        );
        assert_eq!(
            Home::parse("s3://b/run/a.h5").unwrap(),
            Home::S3 {
                bucket: "b".into(),
                key: "run/a.h5".into()
            }
        );
        for bad in [
            "rel/a",
            "/pfs/../etc/x",
            "s3://b",
            "s3://b/",
            "s3:///k",
            "/a\0b",
            "/",
        ] {
            assert!(Home::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
