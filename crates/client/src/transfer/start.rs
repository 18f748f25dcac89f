//! Starting transfers: writes placed on their data servers and reads routed to the only
//! holder of their region when there is one, then one `Stage` and one `Read` job per
//! destination server (small transfers are kept for `wait`).

use super::job::Job;
use super::state::{Phase, ReadTarget, State};
use super::{Transfer, ONE_MESSAGE_MAX};
use crate::client::LOCATE_MIN_BYTES;
use crate::shm::Payload;
use pdcx_core::protocol::{Durability, ReadItem, StageItem};
use pdcx_core::{Error, Result};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Starts every transfer, sending one `Stage` and one `Read` message per destination server.
pub fn start_all(transfers: &mut [&mut Transfer]) -> Result<()> {
    for t in transfers.iter() {
        let g = t.state.phase.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(g.0, Phase::Deferred | Phase::InFlight | Phase::Delivered) {
            return Err(Error::invalid(format!(
                "transfer on region {} is already started; wait() before restarting",
                t.region
            )));
        }
        drop(g);
        if t.is_write && t.data.is_none() {
            return Err(Error::invalid("write transfer has no data loaded"));
        }
    }
    for t in transfers.iter_mut() {
        if t.is_write {
            t.dest = t.client.data_server(t.id, &t.region, t.byte_len as u64)?;
            // The caller's own buffer goes straight into the log of a server on this node;
            // for any other destination it is copied now, as `load_from` would have.
            if t.data.as_ref().is_some_and(|d| d.is_user())
                && !t.client.direct_transfers(t.dest, t.byte_len)
            {
                let src = t.data.take().expect("checked above");
                t.data =
                    Some(Arc::new(t.client.payload_with(t.byte_len, |dst| {
                        dst.copy_from_slice(src.as_slice())
                    })));
            }
        }
    }
    plan_reads(transfers)?;
    let mut per_server: BTreeMap<u32, Batch> = BTreeMap::new();
    for t in transfers.iter_mut() {
        if t.is_write {
            t.txn = t.client.next_txn();
        }
        // Whether the previous run landed in the read target says nothing about this one
        // (a deferred read shipped by `status` may land there, one sent by `wait` may not).
        t.state.landed.store(false, Ordering::Relaxed);
        if t.byte_len <= ONE_MESSAGE_MAX && !t.held {
            // Sent by `wait` on the calling thread (see the module comment).
            *t.state.phase.lock().unwrap_or_else(|p| p.into_inner()) = (Phase::Deferred, None);
            continue;
        }
        *t.state.phase.lock().unwrap_or_else(|p| p.into_inner()) = (Phase::InFlight, None);
        let b = per_server.entry(t.dest).or_default();
        if t.is_write {
            t.client.inner.in_flight[t.dest as usize]
                .fetch_add(t.byte_len as u64, Ordering::Relaxed);
            b.stage_items.push(t.stage_item());
            b.stage_data.push(t.data.clone().expect("checked above"));
            b.stage_states.push(t.state.clone());
            b.write_behind |= t.durability != Durability::Memory;
        } else {
            let r = &mut b.reads[t.held as usize];
            r.0.push(t.read_item());
            r.1.push(t.byte_len);
            r.2.push(t.state.clone());
            r.3.push(t.target);
        }
    }
    for (dest, batch) in per_server {
        let t = transfers
            .iter()
            .find(|t| t.dest == dest)
            .expect("destination from a transfer");
        if !batch.stage_items.is_empty() {
            t.submit(Job::Stage {
                items: batch.stage_items,
                data: batch.stage_data,
                states: batch.stage_states,
                write_behind: batch.write_behind,
            });
        }
        for (held, (items, lens, states, targets)) in batch.reads.into_iter().enumerate() {
            if !items.is_empty() {
                t.submit(Job::Read {
                    items,
                    lens,
                    targets,
                    states,
                    held: held == 1,
                });
            }
        }
    }
    Ok(())
}

/// What one `start_all` sends to one server: stages, and reads via the owner ([0]) or
/// straight to the only holder ([1]).
#[derive(Default)]
struct Batch {
    stage_items: Vec<StageItem>,
    stage_data: Vec<Arc<Payload>>,
    stage_states: Vec<Arc<State>>,
    write_behind: bool,
    reads: [ReadBatch; 2],
}

/// Read items, their byte lengths, the transfers waiting for them and their read targets.
type ReadBatch = (
    Vec<ReadItem>,
    Vec<usize>,
    Vec<Arc<State>>,
    Vec<Option<ReadTarget>>,
);

/// Routes each read: to the only server holding its region when the owner says there is one,
/// else to the owner.
fn plan_reads(transfers: &mut [&mut Transfer]) -> Result<()> {
    let mut by_owner: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, t) in transfers.iter_mut().enumerate() {
        if t.is_write {
            continue;
        }
        t.dest = t.client.id_owner(t.id)?;
        t.held = false;
        if t.byte_len >= LOCATE_MIN_BYTES && t.client.size() > 1 {
            by_owner.entry(t.dest).or_default().push(i);
        }
    }
    for (owner, idx) in by_owner {
        let items: Vec<ReadItem> = idx
            .iter()
            .map(|&i| ReadItem {
                id: transfers[i].id,
                region: transfers[i].region.clone(),
            })
            .collect();
        let holders = transfers[idx[0]].client.locate(owner, items)?;
        for (&i, h) in idx.iter().zip(holders) {
            if let [only] = h[..] {
                if only != owner {
                    transfers[i].dest = only;
                    transfers[i].held = true;
                }
            }
        }
    }
    Ok(())
}
