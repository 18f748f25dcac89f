//! Starting writes from the caller's bytes for callers that may reuse them at once (Python's
//! `start`, whose array may change as soon as it returns).
//!
//! `load_from` + `start` copy the bytes into the transfer's own payload first (an arena block),
//! then a worker writes that copy into the log: two copies of every byte in this process, and
//! on a fresh process the payload's pages are new memory, faulted in one by one (8 MiB: 7.6 ms
//! cold against 0.8 ms warm, measured). A write that can go straight into the log of a server
//! on this node (one-copy, `direct_write.rs`) is written from the caller's bytes instead, and
//! [`start_all_from`] returns only once the worker no longer reads them: the stage is done
//! (or failed) and the transfer keeps no pointer to them. The commit at `wait` sends no bytes.
//! Any other write is copied at start as before.

use super::state::Phase;
use super::{start_all, Transfer, ONE_MESSAGE_MAX};
use pdcx_core::{Error, Result};

/// Starts `transfers` (all writes) with `srcs[i]` as the bytes of `transfers[i]`. When this
/// returns, no transfer reads any of `srcs` any more: each may be changed or freed.
pub fn start_all_from(transfers: &mut [&mut Transfer], srcs: &[&[u8]]) -> Result<()> {
    if transfers.len() != srcs.len() {
        return Err(Error::invalid(format!(
            "{} transfers and {} buffers",
            transfers.len(),
            srcs.len()
        )));
    }
    let mut borrowed = Vec::new();
    for (i, (t, src)) in transfers.iter_mut().zip(srcs).enumerate() {
        if !t.is_write {
            return Err(Error::invalid("start_all_from starts writes only"));
        }
        // Large enough to be written by the worker (never kept for `wait`, which would read
        // the bytes after this returned) and to go one-copy to some server on this node.
        if t.byte_len > ONE_MESSAGE_MAX && t.client.direct_transfers_possible(t.byte_len) {
            // SAFETY: `src` is valid and unchanged for as long as this call runs (a shared
            // borrow), and the transfer reads it only until its stage is done, which this
            // call waits for below; then the transfer forgets the pointer.
            unsafe { t.set_write_source(src.as_ptr(), src.len())? };
            borrowed.push(i);
        } else {
            t.load_from(src)?;
        }
    }
    let started = start_all(transfers);
    for &i in &borrowed {
        let t = &mut *transfers[i];
        t.wait_staged();
        t.data = None;
    }
    started
}

impl Transfer {
    /// [`start_all_from`] for one write: starts it with `src` as its bytes; `src` may be
    /// reused once this returns.
    pub fn start_from(&mut self, src: &[u8]) -> Result<()> {
        start_all_from(&mut [self], &[src])
    }

    /// Blocks while this transfer's stage is with the worker (which may be reading its bytes).
    fn wait_staged(&self) {
        let mut g = self.state.phase.lock().unwrap_or_else(|p| p.into_inner());
        while matches!(g.0, Phase::InFlight) {
            g = self.state.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}
