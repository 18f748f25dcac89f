//! Waiting for transfers, the consistency point: one `Commit` per server and durability for
//! the started writes, the small transfers `start` kept sent on the calling thread, then a
//! wait for every transfer.

use super::job::Job;
use super::state::{Phase, State};
use super::Transfer;
use crate::client::commit_opts;
use crate::shm::Payload;
use pdcx_core::model::owner_of_id;
use pdcx_core::protocol::{write, Consistency, Durability, ReadItem, StageItem};
use pdcx_core::{Error, ObjectId, Result};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Commits grouped by (server, local durability?, relaxed with this expected count?): txns,
/// the transfers waiting on them and their objects.
type Commits = BTreeMap<(u32, u8, Option<u64>), (Vec<u64>, Vec<Arc<State>>, Vec<ObjectId>)>;

/// A durability as a map key (memory < local < remote).
fn durability_code(d: Durability) -> u8 {
    match d {
        Durability::Memory => 0,
        Durability::Local => 1,
        Durability::Remote => 2,
    }
}

fn durability_of_code(c: u8) -> Durability {
    match c {
        0 => Durability::Memory,
        1 => Durability::Local,
        _ => Durability::Remote,
    }
}

/// The consistency point for a batch: one `Commit` per server for the started writes, then
/// blocks until every transfer is done. Small transfers `start` kept are sent here on this
/// thread: a server's small writes as one committing `Stage`, its small reads as one `Read`;
/// small writes that share a commit with large ones in the worker join the worker's queue
/// instead, so one commit still covers them all. Returns the first failure (all are still
/// waited for).
pub fn wait_all(transfers: &mut [&mut Transfer]) -> Result<()> {
    let mut commits: Commits = BTreeMap::new();
    // Per commit group: the transfers (indices) still kept by `start`.
    let mut kept: BTreeMap<(u32, u8, Option<u64>), Vec<usize>> = BTreeMap::new();
    let mut kept_reads: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, t) in transfers.iter().enumerate() {
        let g = t.state.phase.lock().unwrap_or_else(|p| p.into_inner());
        let deferred = matches!(g.0, Phase::Deferred);
        if t.is_write && (deferred || matches!(g.0, Phase::InFlight | Phase::Delivered)) {
            let relaxed = match t.consistency {
                Consistency::Relaxed { expected_writes } => Some(expected_writes),
                Consistency::Strong => None,
            };
            let key = (t.dest, durability_code(t.durability), relaxed);
            let c = commits.entry(key).or_default();
            c.0.push(t.txn);
            c.1.push(t.state.clone());
            c.2.push(t.id);
            if deferred {
                kept.entry(key).or_default().push(i);
            }
        } else if deferred {
            kept_reads.entry(t.dest).or_default().push(i);
        }
    }
    // One message per group of small writes alone, sent after the worker's jobs are queued.
    let mut one_message = Vec::new();
    for (key, (txns, states, ids)) in commits {
        let (dest, durability, relaxed) = key;
        let t = transfers
            .iter()
            .find(|t| t.dest == dest)
            .expect("destination from a transfer");
        let durability = durability_of_code(durability);
        let foreign: Vec<ObjectId> = ids
            .into_iter()
            .filter(|&id| owner_of_id(id, t.client.size()) != dest)
            .collect();
        let consistency = relaxed.map_or(Consistency::Strong, |expected_writes| {
            Consistency::Relaxed { expected_writes }
        });
        let opts = commit_opts(durability, consistency, !foreign.is_empty());
        if opts.consistency != Consistency::Strong {
            // Noted before the outcome is known: a sync sent for a write that failed costs
            // one request and changes nothing.
            for id in foreign {
                t.client.note_relaxed(id, dest);
            }
        }
        let small = kept.remove(&key).unwrap_or_default();
        if small.len() == states.len() {
            one_message.push((dest, opts, small));
            continue;
        }
        // Mixed with writes already in the worker: stage the small ones there too, ahead of
        // the commit in the same queue.
        for &i in &small {
            transfers[i].ship_deferred();
        }
        let request = write::Commit { txns, opts };
        t.submit(Job::Commit { request, states });
    }
    for (dest, opts, small) in one_message {
        let items: Vec<StageItem> = small.iter().map(|&i| transfers[i].stage_item()).collect();
        let mut data: Vec<Arc<Payload>> = Vec::with_capacity(small.len());
        for &i in &small {
            match transfers[i].data.clone() {
                Some(d) => data.push(d),
                None => {
                    let e = Error::invalid("write transfer has no data loaded");
                    small
                        .iter()
                        .for_each(|&i| transfers[i].state.set(Phase::Failed(e.clone()), None));
                    continue;
                }
            }
        }
        if data.len() != small.len() {
            continue;
        }
        let parts: Vec<&Payload> = data.iter().map(|d| &**d).collect();
        let client = transfers[small[0]].client.clone();
        let r = client.with_conn(dest, &mut |c| c.stage(&items, &parts, Some(opts.clone())));
        for &i in &small {
            let phase = match &r {
                Ok(_) => Phase::Done,
                Err(e) => Phase::Failed(e.clone()),
            };
            transfers[i].state.set_here(phase, None);
        }
    }
    for (dest, idx) in kept_reads {
        let items: Vec<ReadItem> = idx.iter().map(|&i| transfers[i].read_item()).collect();
        let lens: Vec<usize> = idx.iter().map(|&i| transfers[i].byte_len).collect();
        let client = transfers[idx[0]].client.clone();
        match client.with_conn(dest, &mut |c| c.read(&items, false, &lens)) {
            Ok(parts) => {
                for (&i, data) in idx.iter().zip(parts) {
                    transfers[i].state.set_here(Phase::Done, Some(data));
                }
            }
            Err(e) => idx
                .iter()
                .for_each(|&i| transfers[i].state.set_here(Phase::Failed(e.clone()), None)),
        }
    }
    // Creates: a write acknowledged here must not outlive the create of its
    // object in a power loss, so this client's creates and tags answered at commit are made
    // durable before the wait returns (nothing to send when there are none). Done here, not at
    // start: start never blocks on a server.
    let mut first_err = transfers
        .iter()
        .find(|t| t.is_write)
        .and_then(|t| t.client.sync_metadata().err());
    for t in transfers.iter_mut() {
        let mut g = t.state.phase.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match &g.0 {
                Phase::InFlight | Phase::Delivered => {
                    g = t.state.cv.wait(g).unwrap_or_else(|p| p.into_inner())
                }
                Phase::Failed(e) => {
                    first_err.get_or_insert_with(|| e.clone());
                    break;
                }
                // Not started (or kept and then not sent, which cannot happen here).
                Phase::Done | Phase::Idle | Phase::Deferred => break,
            }
        }
    }
    // The caller's buffer is the transfer's only until this wait: never keep a pointer to it.
    for t in transfers.iter_mut() {
        if t.data.as_ref().is_some_and(|d| d.is_user()) {
            t.data = None;
        }
    }
    first_err.map_or(Ok(()), Err)
}
