//! One-copy writes for a client on its server's node.
//!
//! A large write to a server on this node does not hand its bytes to the server at all. The
//! client checksums the payload and sends a `write::Reserve`; the server checks the write
//! as it checks a stage, writes the record's header into its segment log and reserves room
//! for the payload (`SegmentLog::reserve`). The client then `pwrite`s the payload into the
//! segment file, straight from its buffer: user buffer → page cache, the only copy of the
//! bytes on the node, and no server CPU for them. The write is then committed like any staged
//! one (same connection, same txn), so the commit's fdatasync covers the payload.
//!
//! Why this keeps the log's guarantees:
//! - The client writes only inside the range the server reserved for that write, into the
//!   file the server named (checked by st_dev and st_ino, so never another file that came to
//!   have the same path). That file is the connection's own segment (`pdcx_store::WriterLease`):
//!   no one else's record is in it.
//! - A payload that does not match the checksum in its header (never written because the
//!   client died, torn, or changed by its writer while written) is refused by reads and
//!   skipped by recovery, which goes on to the records after it: a writer can ruin only its
//!   own write.
//! - The commit is sent only after every `pwrite` returned, and the commit's fdatasync is of
//!   the whole file, so "acknowledged means durable" holds at `local` as for staged writes.
//!
//! Anything that stops the client from writing the file itself (another user owns the log, a
//! server on a simulated disk, an older server) makes it stage the write the usual way and
//! stop trying with that server. `PDCX_DIRECT_WRITE=0` turns the path off.

use crate::conn::Conn;
use crate::segfile::SegFile;
use pdcx_core::protocol::{write, Request, Reservations, Response, StageItem, WriteResponse};
use pdcx_core::{Error, ErrorKind, Result};
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::sync::{Arc, Mutex};

/// A write sent on its own with its commit (a synchronous write, a byte stream's write) goes
/// straight into the log from this size; a smaller one is staged with its commit in one
/// message, since reserving first would add a round trip that costs more than the copy it
/// saves.
pub const DIRECT_WRITE_MIN: usize = 256 << 10;

/// A transfer's write goes straight into the log from this size. A transfer this large is
/// sent by a worker and committed at `wait` in messages of its own (`transfer::ONE_MESSAGE_MAX`),
/// so reserving instead of staging costs no round trip and saves two copies: into the
/// transfer's payload (fresh pages in a fresh process) and the server's into its log. The
/// sharding bench's VPIC kernel writes 128 KiB chunks: one-copy cut its write phase from
/// 73-86 ms to 66-75 ms (4 ranks, `write_async`; bench/RESULTS.md).
pub const DIRECT_TRANSFER_MIN: usize = 64 << 10;

/// Open segment files kept per client; beyond this many the cache is emptied.
const MAX_OPEN: usize = 64;

/// A payload is written in pieces of this size (and [`WriteBehind::Pipelined`] starts the
/// writeback of each). Also without the hint: on this kernel (6.18, ext4) one `pwrite` of
/// 32 MiB into a log segment took 80-150 ms where the same bytes in 1 MiB pieces took 21 ms
/// (Montage's mAdd writing its mosaic).
const PIPELINE_CHUNK: usize = 1 << 20;

/// When the writeback of a one-copy write's payload is started (`sync_file_range`,
/// asynchronous).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteBehind {
    /// Left to the kernel: writes no sync follows soon (`memory`). Measured on the C VPIC
    /// kernel, a hint after each `pwrite` blocks the writer while the device queue is busy
    /// and made `memory` writes 1.5-3x slower (bench/RESULTS.md, "Fast path: small writes",
    /// 2026-11-24).
    Never,
    /// Each [`PIPELINE_CHUNK`] of a payload as soon as it is written, so the device writes
    /// one piece while the next is copied: for writes a sync follows (a `local` write, a
    /// transfer at `local` or `remote`, a byte stream's write before its consistency point).
    /// The fdatasync then finds only the last piece left, where writing the whole payload
    /// first and syncing it after pays the copy and the device one after the other. Transfers
    /// used to start the writeback once every payload of a stage was written (so the device
    /// sat idle while the first payloads were copied): the C VPIC kernel's `wait_all` at
    /// `local` took 97-109 ms that way against 84-95 ms pipelined (bench/RESULTS.md, "the
    /// VPIC `local` row: writeback started as the payload is copied").
    Pipelined,
}

pub(crate) fn enabled_by_env() -> bool {
    pdcx_core::config::DIRECT_WRITE.switch_or_default()
}

/// The segment files this client writes into, per (server, segment), and the servers it
/// may not write to.
#[derive(Default)]
pub(crate) struct DirectWrites {
    files: Mutex<HashMap<(u32, u64), Arc<SegFile>>>,
    refused: Mutex<HashSet<u32>>,
}

/// How one attempt ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Every payload is in the log, reserved under its txn: commit as usual (with these
    /// checksums, one per item, when they were computed as written; else empty).
    Written(Vec<u32>),
    /// This server's log cannot be written by this client: stage the items the usual way
    /// (same txns; a stage replaces the reservation in the server's session).
    Fallback,
}

/// Starts the writeback of `len` bytes at `offset` of `f` without waiting for it. A failure
/// only loses the hint: the commit's fdatasync writes the bytes anyway.
fn start_writeback(f: &SegFile, offset: u64, len: usize) {
    // SAFETY: plain syscall on an fd `f` keeps open.
    unsafe {
        libc::sync_file_range(
            f.file.as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

impl DirectWrites {
    /// Whether this client may try to write server `rank`'s log (not refused so far).
    pub(crate) fn allowed(&self, rank: u32) -> bool {
        !self
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&rank)
    }

    fn refuse(&self, rank: u32, why: &str) {
        crate::shm::debug(&format!(
            "one-copy writes to server {rank} are off from now on: {why}"
        ));
        self.refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(rank);
    }

    /// Reserves `items` on `c` (server `rank`), then writes each payload into the log. An
    /// error is the write's own (a bad region, a full device, the connection gone);
    /// `Fallback` means the caller stages the items instead.
    ///
    /// `write_behind` says when the payloads' writeback is started ([`WriteBehind`]). With
    /// `late_crcs` the payloads' checksums are computed as they are written, piece by piece
    /// (while the device writes the pieces before: with [`WriteBehind::Pipelined`] a large
    /// payload's checksum then costs no time of its own), and the items are reserved with
    /// `Reserve` with `crcs: None`: the caller must commit them with those checksums
    /// (`Outcome::Written`), with a `Commit` carrying `checksums` (and possibly a `seal`).
    pub(crate) fn write(
        &self,
        c: &mut Conn,
        rank: u32,
        items: &[StageItem],
        data: &[&[u8]],
        write_behind: WriteBehind,
        late_crcs: bool,
    ) -> Result<Outcome> {
        let req: Request = write::Reserve {
            items: items.to_vec(),
            crcs: (!late_crcs).then(|| data.iter().map(|d| crc32c::crc32c(d)).collect()),
        }
        .into();
        c.send(&req, &[])?;
        // `read_reply` tells an error the server answered from a failed connection.
        let reply = c.read_reply(&mut |_, len| {
            Err(Error::protocol(format!(
                "a Reserve answer carries {len} payload bytes"
            )))
        })?;
        let resv = match reply {
            Response::Write(WriteResponse::Reserved(r)) => r,
            // An older server does not know the request; a server on a simulated disk has no
            // files to give: the writes go the usual way.
            Response::Error(e)
                if matches!(e.kind, ErrorKind::Protocol | ErrorKind::Unavailable) =>
            {
                self.refuse(rank, &e.message);
                return Ok(Outcome::Fallback);
            }
            Response::Error(e) => return Err(e),
            other => {
                self.refuse(rank, &format!("unexpected answer {other:?}"));
                return Ok(Outcome::Fallback);
            }
        };
        if resv.spans.len() != items.len() {
            return Err(Error::protocol(format!(
                "Reserve of {} items answered with {} spans",
                items.len(),
                resv.spans.len()
            )));
        }
        let mut crcs = Vec::with_capacity(if late_crcs { data.len() } else { 0 });
        for (i, d) in data.iter().enumerate() {
            let (seg, dev, ino, offset) = resv.spans[i];
            let Some(f) = self.file(rank, &resv, seg, dev, ino) else {
                return Ok(Outcome::Fallback);
            };
            let bytes: &[u8] = d;
            let piece_len = PIPELINE_CHUNK;
            let mut crc = 0u32;
            let written: std::io::Result<()> = bytes
                .chunks(piece_len)
                .zip((offset..).step_by(piece_len))
                .try_for_each(|(piece, at)| {
                    f.file.write_all_at(piece, at)?;
                    if write_behind == WriteBehind::Pipelined {
                        start_writeback(&f, at, piece.len());
                    }
                    if late_crcs {
                        crc = crc32c::crc32c_append(crc, piece);
                    }
                    Ok(())
                });
            crcs.push(crc);
            if let Err(e) = written {
                // Give back what the partial write took (on a full device, the space the
                // server needs to go on): the record is then damaged, never committed, and
                // skipped by recovery like any unwritten reservation.
                // SAFETY: plain syscall on an fd `f` keeps open, inside the reserved range.
                unsafe {
                    libc::fallocate(
                        f.file.as_raw_fd(),
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        offset as libc::off_t,
                        bytes.len() as libc::off_t,
                    );
                }
                let kind = if e.raw_os_error() == Some(libc::ENOSPC) {
                    ErrorKind::NoSpace
                } else {
                    ErrorKind::Io
                };
                return Err(Error::new(
                    kind,
                    format!("write {} bytes into server {rank}'s log: {e}", bytes.len()),
                ));
            }
        }
        if !late_crcs {
            crcs.clear();
        }
        Ok(Outcome::Written(crcs))
    }

    /// Segment `seg` of server `rank`, opened for writing unless the open file is already
    /// that very file. None (and the server refused from then on) when it cannot be opened
    /// or is not the file the server named.
    fn file(
        &self,
        rank: u32,
        resv: &Reservations,
        seg: u64,
        dev: u64,
        ino: u64,
    ) -> Option<Arc<SegFile>> {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = files.get(&(rank, seg)) {
            if f.is(dev, ino) {
                return Some(f.clone());
            }
        }
        let why = match SegFile::open(&resv.dir, seg, true) {
            Ok(Some(f)) if f.is(dev, ino) => Ok(f),
            // The server is on another node after all (the same path is another file here),
            // or the log was replaced: this client cannot write it.
            Ok(_) => Err("is not the server's file".to_string()),
            Err(e) => Err(e.to_string()),
        };
        let file = match why {
            Ok(f) => f,
            Err(why) => {
                drop(files);
                let path = SegFile::path(&resv.dir, seg);
                self.refuse(rank, &format!("{}: {why}", path.display()));
                return None;
            }
        };
        // The server reserves in each connection's own segment, a new one once it is full:
        // older ones are rarely written again (another pooled connection's segment is
        // reopened when needed), and an open descriptor would keep a retired one's space.
        files.retain(|&(r, s), _| r != rank || s > seg);
        if files.len() >= MAX_OPEN {
            files.clear();
        }
        let f = Arc::new(file);
        files.insert((rank, seg), f.clone());
        Some(f)
    }
}
