//! Writing an open file: writes aggregated in its runs (or committed one by one), flushed
//! as one commit, by one handle or several at one consistency point (`flush_all`); `sync`
//! and `set_len`.

use super::{File, AGGREGATE_MAX};
use crate::bytestream::MAX_LEN;
use pdcx_core::{Error, ErrorKind, Region, Result};

impl File {
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
