//! Opening the log: recovery of the listed segments (the checkpointed range verified, the
//! valid tail past it kept and made durable, torn tails cut off, unlisted segments deleted)
//! and the commit records found in the tails.

use super::publish::ManifestPublisher;
use super::{LogOptions, Recovery, Segment, SegmentLog};
use crate::commit_record::{self, COMMIT_OBJECT};
use crate::manifest::{self, MANIFEST_TMP};
use crate::record::{parse_segment_file_name, scan_tail, segment_file_name, Scanned};
use pdcx_core::{Error, ErrorKind, Result};
use pdcx_fsio::{Fs, FsFile, LockGuard, OpenMode};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

fn lock_dir(fs: &dyn Fs, dir: &Path) -> Result<LockGuard> {
    let path = dir.join("LOCK");
    match fs.lock(&path) {
        Ok(g) => Ok(g),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(Error::new(
            ErrorKind::Unavailable,
            format!("log {} is already open in another process", dir.display()),
        )),
        Err(e) => Err(Error::io(&format!("lock {}", path.display()), &e)),
    }
}

fn missing(path: &Path, committed: u64, what: &str) -> Error {
    Error::new(
        ErrorKind::Io,
        format!(
            "{} {what} but MANIFEST says {committed} bytes of it are committed: committed data is missing",
            path.display()
        ),
    )
}

/// The end of the last byte in `[from, to)` of `file` that is not zero (`from` if none).
fn written_end(file: &dyn FsFile, from: u64, to: u64) -> io::Result<u64> {
    let mut buf = vec![0u8; (to - from).min(1 << 20) as usize];
    let (mut end, mut at) = (from, from);
    while at < to {
        let n = (to - at).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..n], at)?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b != 0) {
            end = at + i as u64 + 1;
        }
        at += n as u64;
    }
    Ok(end)
}

impl SegmentLog {
    /// Opens or creates the log in `dir`. Recovery: segments not in the MANIFEST are deleted;
    /// the last segment's checkpointed range is verified; every listed segment's tail past its
    /// checkpoint is scanned (see the module doc), its valid part made durable (fdatasync) and
    /// kept, the rest cut off; the commit records found there are returned
    /// ([`Recovery::commits`]). Missing checkpointed bytes or a torn header inside the
    /// checkpointed range are errors, never silently dropped. Nothing is changed on disk until
    /// every listed segment has passed those checks, so a failed open leaves the evidence.
    /// The MANIFEST is not rewritten here: the caller checkpoints once it has replayed the
    /// commits ([`checkpoint`](Self::checkpoint)).
    pub fn open(dir: &Path, opts: LogOptions) -> Result<(SegmentLog, Recovery)> {
        let fs = opts.fs.clone();
        fs.create_dir_all(dir)
            .map_err(|e| Error::io(&format!("create {}", dir.display()), &e))?;
        let lock = lock_dir(&*fs, dir)?;
        let listed = manifest::load_in(&*fs, dir)?.map_or_else(Vec::new, |m| m.segments);
        let mut rec = Recovery {
            segments: listed.len(),
            ..Recovery::default()
        };

        let mut segments = BTreeMap::new();
        // (segment, valid end) of each listed segment, from its scanned tail.
        let mut valid_ends = Vec::with_capacity(listed.len());
        for entry in &listed {
            let path = dir.join(segment_file_name(entry.id));
            let file = match fs.open(&path, OpenMode::ReadWrite) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(missing(&path, entry.committed_len, "does not exist"))
                }
                Err(e) => return Err(Error::io(&format!("open {}", path.display()), &e)),
            };
            let len = file
                .size()
                .map_err(|e| Error::io(&format!("stat {}", path.display()), &e))?;
            if len < entry.committed_len {
                return Err(missing(
                    &path,
                    entry.committed_len,
                    &format!("is {len} bytes"),
                ));
            }
            let ctx = |what: &str| format!("{what} {}", path.display());
            // Earlier segments were verified when they were the last one; re-reading every
            // segment at startup would cost a full pass over the data.
            if Some(entry.id) == listed.last().map(|l| l.id) {
                let (_, valid) = scan_tail(&*file, entry.id, 0, entry.committed_len)
                    .map_err(|e| Error::io(&ctx("scan"), &e))?;
                if valid != entry.committed_len {
                    return Err(Error::new(
                        ErrorKind::Io,
                        format!(
                            "{}: record at offset {valid} is corrupt (header) inside the checkpointed range of {} bytes",
                            path.display(),
                            entry.committed_len
                        ),
                    ));
                }
            }
            let (found, valid) = scan_tail(&*file, entry.id, entry.committed_len, len)
                .map_err(|e| Error::io(&ctx("scan the tail of"), &e))?;
            for s in found {
                match s {
                    Scanned::Record(r) if r.object == COMMIT_OBJECT => {
                        let mut payload = vec![0u8; r.location.len as usize];
                        file.read_exact_at(&mut payload, r.location.offset)
                            .map_err(|e| Error::io(&ctx("read a commit record of"), &e))?;
                        let entries = commit_record::decode(&payload).ok_or_else(|| {
                            Error::new(
                                ErrorKind::Io,
                                format!(
                                    "{}: the commit record at offset {} is of an unknown format (written by a newer pdcx?)",
                                    path.display(),
                                    r.location.offset
                                ),
                            )
                        })?;
                        rec.commits.extend(entries);
                    }
                    Scanned::Record(_) => {}
                    Scanned::Damaged(loc) => rec.damaged.push(loc),
                }
            }
            rec.tail_bytes += valid - entry.committed_len;
            valid_ends.push((entry.id, valid));
            let seg = Segment {
                file,
                len,
                synced: valid,
                checkpointed: entry.committed_len,
                zeroed: len,
            };
            segments.insert(entry.id, seg);
        }

        let names = fs
            .list_dir(dir)
            .map_err(|e| Error::io(&format!("list {}", dir.display()), &e))?;
        for name in names {
            let Some(id) = parse_segment_file_name(&name) else {
                continue;
            };
            if segments.contains_key(&id) {
                continue;
            }
            let path = dir.join(&name);
            let len = fs.size(&path).ok().flatten().unwrap_or(0);
            fs.remove_file(&path)
                .map_err(|e| Error::io(&format!("remove {}", path.display()), &e))?;
            rec.removed_segments += 1;
            rec.discarded_bytes += len;
        }
        fs.remove_if_exists(&dir.join(MANIFEST_TMP))
            .map_err(|e| Error::io("remove leftover MANIFEST.tmp", &e))?;
        for (id, valid) in valid_ends {
            let seg = segments
                .get_mut(&id)
                .ok_or_else(|| Error::internal(format!("segment {id} vanished")))?;
            let path = dir.join(segment_file_name(id));
            let torn = seg.len > valid;
            if torn {
                let ctx = format!("truncate the torn tail of {}", path.display());
                // Zeros written ahead of appends are not lost data: count up to the last
                // byte that is not zero.
                let written =
                    written_end(&*seg.file, valid, seg.len).map_err(|e| Error::io(&ctx, &e))?;
                seg.file.set_len(valid).map_err(|e| Error::io(&ctx, &e))?;
                rec.discarded_bytes += written - valid;
                seg.len = valid;
                seg.zeroed = valid;
            }
            if torn || valid > seg.checkpointed {
                // The valid tail may only be in the page cache (the process died, the machine
                // did not): make it durable before anything relies on it.
                let ctx = format!("fdatasync the tail of {}", path.display());
                seg.file.sync_data().map_err(|e| Error::io(&ctx, &e))?;
            }
            rec.committed_bytes += valid;
        }

        let poisoned = Arc::new(AtomicBool::new(false));
        let manifests = Arc::new(ManifestPublisher {
            fs: fs.clone(),
            dir: dir.to_path_buf(),
            poisoned: poisoned.clone(),
            published: std::sync::Mutex::new(0),
        });
        // Empty listed segments (spares made ahead for writers, never used) are spares again.
        let spares: Vec<u64> = segments
            .iter()
            .filter(|(_, s)| s.len == 0)
            .map(|(&id, _)| id)
            .rev()
            .collect();
        let made_here_from = segments.last_key_value().map_or(1, |(&id, _)| id + 1);
        let log = SegmentLog {
            dir: dir.to_path_buf(),
            opts,
            fs,
            segments,
            active: None,
            leased: Default::default(),
            wants_spares: !spares.is_empty(),
            spares,
            made_here_from,
            dirty: BTreeSet::new(),
            poisoned,
            manifests,
            manifest_generation: 0,
            _lock: lock,
        };
        Ok((log, rec))
    }
}
