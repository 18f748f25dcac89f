//! Reading an open file: its own unflushed writes over the servers' bytes, which come
//! through the read-ahead window (adaptive, fixed or off) or, for files read whole, the
//! client's cache of them.

use super::{File, Prefetch, OWNER_READ_MAX, PREFETCH_MAX, PREFETCH_MIN};
use crate::filecache::Window;
use pdcx_core::{Region, Result};
use std::sync::Arc;

impl File {
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
                let r = b.copy_out(at, out);
                if r.is_err() {
                    // Its segment was cut: the next read plans again (and fails or falls back).
                    self.ahead = None;
                }
                return r;
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
        buf.copy_out(0, out)?;
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
}
