//! The jobs a server's transfer worker runs: stages (one-copy into the log of a server on
//! this node when it can), commits and reads (one-copy from that log when it can), with a
//! retry on a fresh connection when a pooled one died.

use super::state::{Phase, ReadTarget, State};
use crate::client::read_plans;
use crate::client::Client;
use crate::conn::Conn;
use crate::shm::Payload;
use crate::worker::Task;
use pdcx_core::protocol::{write, ReadItem, StageItem};
use pdcx_core::{Error, ErrorKind, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub(super) enum Job {
    Stage {
        items: Vec<StageItem>,
        data: Vec<Arc<Payload>>,
        states: Vec<Arc<State>>,
        /// Some write of the job will be committed at `local` or `remote`: one-copy writes
        /// then start their writeback once all are written (see `DirectWrites::write`).
        write_behind: bool,
    },
    Commit {
        request: write::Commit,
        states: Vec<Arc<State>>,
    },
    Read {
        items: Vec<ReadItem>,
        lens: Vec<usize>,
        /// Where each item may be read straight into (see `Transfer::set_read_target`).
        targets: Vec<Option<ReadTarget>>,
        states: Vec<Arc<State>>,
        /// Sent to the regions' only holder (`Read` with `held`) rather than the owner (`Read`).
        held: bool,
    },
}

/// A job queued on a server's worker. It holds only a weak handle to the client, so a
/// worker never keeps a dropped client alive.
pub(super) struct Queued {
    pub(super) client: std::sync::Weak<crate::client::Inner>,
    pub(super) rank: u32,
    pub(super) job: Job,
}

impl Task for Queued {
    fn run(self: Box<Self>, conn: &mut Option<Conn>) {
        if let Some(inner) = self.client.upgrade() {
            run_job(&Client { inner }, self.rank, conn, self.job);
        }
    }

    fn abandon(self: Box<Self>) {
        let err = Error::internal("transfer worker has stopped");
        for s in job_states(&self.job) {
            s.set(Phase::Failed(err.clone()), None);
        }
    }
}

fn job_states(job: &Job) -> &[Arc<State>] {
    match job {
        Job::Stage { states, .. } | Job::Commit { states, .. } | Job::Read { states, .. } => states,
    }
}

fn run_job(client: &Client, rank: u32, conn: &mut Option<Conn>, job: Job) {
    if let Job::Stage { data, .. } = &job {
        let bytes: u64 = data.iter().map(|d| d.len() as u64).sum();
        let _done = InFlightGuard {
            counter: &client.inner.in_flight[rank as usize],
            bytes,
        };
        return run_job_inner(client, rank, conn, &job);
    }
    run_job_inner(client, rank, conn, &job)
}

/// Takes a stage's bytes off its server's in-flight count however the job ends.
struct InFlightGuard<'a> {
    counter: &'a AtomicU64,
    bytes: u64,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

fn run_job_inner(client: &Client, rank: u32, conn: &mut Option<Conn>, job: &Job) {
    let pooled = conn.is_some();
    if conn.is_none() {
        match client.open_conn(rank) {
            Ok(c) => *conn = Some(c),
            Err(e) => {
                job_states(job)
                    .iter()
                    .for_each(|s| s.set(Phase::Failed(e.clone()), None));
                return;
            }
        }
    }
    let c = conn.as_mut().expect("connection just opened");
    let mut result = execute(client, rank, c, job);
    // A pooled connection may have died with a server restart. A stage or a read is safe to
    // send once more on a new connection; a commit is not (its writes were staged on the dead
    // connection and are gone, which the original error says).
    if let Err(e) = &result {
        if pooled && e.kind == ErrorKind::Unavailable && !matches!(job, Job::Commit { .. }) {
            result = client.open_conn(rank).and_then(|c| {
                let c = conn.insert(c);
                execute(client, rank, c, job)
            });
        }
    }
    if let Err(e) = result {
        if matches!(
            e.kind,
            ErrorKind::Unavailable | ErrorKind::Io | ErrorKind::Protocol
        ) {
            *conn = None;
        }
        job_states(job)
            .iter()
            .for_each(|s| s.set(Phase::Failed(e.clone()), None));
    }
}

fn execute(client: &Client, rank: u32, c: &mut Conn, job: &Job) -> Result<()> {
    match job {
        Job::Stage {
            items,
            data,
            states,
            write_behind,
        } => {
            stage(client, rank, c, items, data, *write_behind)?;
            states.iter().for_each(|s| s.set(Phase::Delivered, None));
            Ok(())
        }
        Job::Commit { request, states } => {
            // A write whose stage failed (a one-copy payload the device refused, its space
            // punched out again) is not committed: its reservation holds no payload, and
            // committing it would publish a record whose bytes were never written.
            let failed = |s: &State| {
                matches!(
                    s.phase.lock().unwrap_or_else(|p| p.into_inner()).0,
                    Phase::Failed(_)
                )
            };
            let mut request = request.clone();
            if request.txns.len() == states.len() {
                request.txns = request
                    .txns
                    .iter()
                    .zip(states.iter())
                    .filter(|(_, s)| !failed(s))
                    .map(|(t, _)| *t)
                    .collect();
                if request.txns.is_empty() {
                    return Ok(());
                }
            }
            c.ask(request, &[]).map(|_| {
                states.iter().for_each(|s| s.set(Phase::Done, None));
            })
        }
        Job::Read {
            items,
            lens,
            targets,
            states,
            held,
        } => read_job(client, rank, c, items, *held, lens, targets).map(|parts| {
            for (s, data) in states.iter().zip(parts) {
                s.landed.store(data.is_none(), Ordering::Relaxed);
                s.set(Phase::Done, data);
            }
        }),
    }
}

/// Stages `items` on `c`: the large ones a server on this node lets this client write into
/// its log itself are reserved and written (one copy, `direct_write.rs`), the others (all of
/// them if the server turns that down) are staged the usual way.
fn stage(
    client: &Client,
    rank: u32,
    c: &mut Conn,
    items: &[StageItem],
    data: &[Arc<Payload>],
    write_behind: bool,
) -> Result<()> {
    let (mut direct, mut usual): (Vec<usize>, Vec<usize>) =
        (0..items.len()).partition(|&i| client.direct_transfers(rank, items[i].len as usize));
    if let (false, Some(dw)) = (direct.is_empty(), client.inner.direct_write.as_ref()) {
        let d_items: Vec<StageItem> = direct.iter().map(|&i| items[i].clone()).collect();
        let d_parts: Vec<&[u8]> = direct.iter().map(|&i| data[i].as_slice()).collect();
        let write_behind = if write_behind {
            crate::direct_write::WriteBehind::Pipelined
        } else {
            crate::direct_write::WriteBehind::Never
        };
        if dw.write(c, rank, &d_items, &d_parts, write_behind, false)?
            == crate::direct_write::Outcome::Fallback
        {
            usual.append(&mut direct);
            usual.sort_unstable();
        }
    }
    if usual.is_empty() {
        return Ok(());
    }
    let u_items: Vec<StageItem> = usual.iter().map(|&i| items[i].clone()).collect();
    let u_parts: Vec<&Payload> = usual.iter().map(|&i| &*data[i]).collect();
    c.stage(&u_items, &u_parts, None).map(|_| ())
}

/// A read job: with the server on this node, one-copy reads of its log for every item it can
/// plan (see `direct.rs`), the rest (and any whose plan went stale) read
/// through the server. An item read straight into its read target has no payload (None).
fn read_job(
    client: &Client,
    rank: u32,
    c: &mut Conn,
    items: &[ReadItem],
    held: bool,
    lens: &[usize],
    targets: &[Option<ReadTarget>],
) -> Result<Vec<Option<Payload>>> {
    if !client.direct_reads(rank) {
        return Ok(c.read(items, held, lens)?.into_iter().map(Some).collect());
    }
    let plans = read_plans(client, c, items, held)?;
    let mut out: Vec<Option<Payload>> = (0..items.len()).map(|_| None).collect();
    let mut rest: Vec<usize> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if client.direct_possible(&plans, i) {
            match targets
                .get(i)
                .copied()
                .flatten()
                .filter(|t| t.len == lens[i])
            {
                Some(t) => {
                    // SAFETY: `set_read_target`'s contract: the memory is the caller's, valid
                    // and not otherwise accessed until the transfer is waited for.
                    let dst = unsafe { std::slice::from_raw_parts_mut(t.ptr as *mut u8, t.len) };
                    if client.direct_read(rank, &plans, i, item, dst)? {
                        continue;
                    }
                }
                None => {
                    // An arena block when there is an arena: its pages are recycled, already
                    // faulted in (fresh heap pages cost the kernel a fault and a zeroing each,
                    // about as much as the copy itself). The caller gets the block as is.
                    let mut p = match client.inner.shm.as_ref().and_then(|s| s.alloc(lens[i])) {
                        Some(b) => Payload::Shm(b),
                        None => Payload::Heap(vec![0u8; lens[i]]),
                    };
                    if client.direct_read(rank, &plans, i, item, p.as_mut_slice())? {
                        out[i] = Some(p);
                        continue;
                    }
                }
            }
        }
        rest.push(i);
    }
    if !rest.is_empty() {
        let its: Vec<ReadItem> = rest.iter().map(|&i| items[i].clone()).collect();
        let ls: Vec<usize> = rest.iter().map(|&i| lens[i]).collect();
        for (&i, p) in rest.iter().zip(c.read(&its, held, &ls)?) {
            out[i] = Some(p);
        }
    }
    Ok(out)
}
