//! The read family: reads (whole regions, strided, points; into the reply or shared memory),
//! read plans for same-node clients, holders and extents.

use super::Session;
use crate::engine::analysis;
use crate::Server;
use pdcx_core::protocol::{
    ReadItem, ReadPlans, ReadRequest as Q, ReadResponse as A, Selection, ShmLoc,
};
use pdcx_core::{Error, Result};
use std::sync::atomic::Ordering;

pub(super) fn handle(server: &Server, req: Q, sess: &mut Session) -> Result<(A, Vec<u8>)> {
    let resp = match req {
        Q::Read(r) => {
            let at = Source {
                held: r.opts.held,
                version: r.opts.version,
            };
            if at.held && at.version.is_some() {
                return Err(Error::invalid(
                    "a read of a version goes to the owner (it knows which versions are kept)",
                ));
            }
            let data = match (r.opts.select, r.opts.shm) {
                (Selection::Region, None) => read(server, r.items, &mut sess.scratch, at)?,
                (Selection::Region, Some(locs)) => read_shm(server, r.items, at, &locs, sess)?,
                _ if at.version.is_some() => {
                    return Err(Error::invalid(
                        "a read of a version reads whole regions (not strided or by points)",
                    ))
                }
                (select, None) if !r.opts.held => {
                    let [item] = <[ReadItem; 1]>::try_from(r.items).map_err(|items| {
                        Error::invalid(format!(
                            "a strided or point read names one region, not {}",
                            items.len()
                        ))
                    })?;
                    let (engine, max) = (&server.engine, server.config.max_payload);
                    let data = match select {
                        Selection::Strided(step) => {
                            analysis::read_strided(engine, item.id, &item.region, &step, max)?
                        }
                        Selection::Points(coords) => {
                            analysis::read_points(engine, item.id, &coords, max)?
                        }
                        Selection::Region => unreachable!("matched above"),
                    };
                    server
                        .read_bytes
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                    data
                }
                _ => {
                    return Err(Error::invalid(
                        "strided and point reads go to the owner and answer in the reply",
                    ))
                }
            };
            return Ok((A::Data, data));
        }
        Q::PlanRead(r) => A::Plans(read_plans(server, &r.items, r.held)?),
        Q::PiecePlan(r) => {
            let selected = analysis::check_step(&r.region, &r.step)?;
            let plan = server.engine.piece_plan(r.id, &r.region, r.held)?;
            // Counted once, at the owner (a holder's part is counted there).
            if let Some(p) = plan.as_ref().filter(|_| !r.held) {
                server.metrics.piece_plans.fetch_add(1, Ordering::Relaxed);
                server
                    .read_bytes
                    .fetch_add(selected.saturating_mul(p.elem), Ordering::Relaxed);
            }
            A::PiecePlans(plan)
        }
        Q::Locate(r) => A::Located(
            r.items
                .iter()
                .map(|i| server.engine.locate(i.id, &i.region))
                .collect::<Result<_>>()?,
        ),
        Q::Versions(r) => A::Versions(server.engine.versions(r.id)?),
        Q::Extents(r) => {
            if server.meta.owns(r.id) {
                server.meta.object(r.id)?;
            }
            A::Extents(server.engine.extents(r.id))
        }
    };
    Ok((resp, Vec::new()))
}

/// Where a `Read` is answered from: with `held` at a data server the owner named as the
/// regions' only holder, else at the owner, which merges other holders' pieces, at `version`
/// or the latest.
#[derive(Clone, Copy)]
struct Source {
    held: bool,
    version: Option<u64>,
}

/// `Read` of whole regions into the reply.
fn read(
    server: &Server,
    items: Vec<ReadItem>,
    scratch: &mut Vec<u8>,
    source: Source,
) -> Result<Vec<u8>> {
    let (sizes, total) = plan_read(server, &items, source.held)?;
    let mut out = std::mem::take(scratch);
    out.clear();
    out.resize(total as usize, 0);
    let mut at = 0;
    for (item, n) in items.iter().zip(sizes) {
        read_item(server, item, source, &mut out[at..at + n])?;
        at += n;
    }
    server.read_bytes.fetch_add(total, Ordering::Relaxed);
    Ok(out)
}

/// A `Read` with each item written straight into the client's arena at
/// its location (checked, all of them, before the first byte is written).
fn read_shm(
    server: &Server,
    items: Vec<ReadItem>,
    at: Source,
    locs: &[ShmLoc],
    sess: &mut Session,
) -> Result<Vec<u8>> {
    if items.len() != locs.len() {
        return Err(Error::protocol(format!(
            "a shared-memory read has {} items but {} locations",
            items.len(),
            locs.len()
        )));
    }
    let (sizes, total) = plan_read(server, &items, at.held)?;
    for (loc, &n) in locs.iter().zip(&sizes) {
        sess.shm.check(*loc, n as u64)?;
    }
    for ((item, loc), &n) in items.iter().zip(locs).zip(&sizes) {
        read_item(server, item, at, sess.shm.slice_mut(*loc, n as u64)?)?;
    }
    server.read_bytes.fetch_add(total, Ordering::Relaxed);
    server.shm_bytes.fetch_add(total, Ordering::Relaxed);
    Ok(Vec::new())
}

/// `PlanRead`: where each item's bytes are in this server's log, for a
/// client on this node that reads them itself. Counted as read bytes when planned.
fn read_plans(server: &Server, items: &[ReadItem], held: bool) -> Result<ReadPlans> {
    use crate::engine::PlanOutcome;
    let mut plans = Vec::with_capacity(items.len());
    let mut holders = Vec::new();
    let mut segments: Vec<(u64, u64, u64)> = Vec::new();
    let mut files: Vec<(u64, String, u64, u64)> = Vec::new();
    let mut total = 0u64;
    for (k, item) in items.iter().enumerate() {
        match server.engine.read_plan(item.id, &item.region, held)? {
            PlanOutcome::Plan(plan, segs, refs) => {
                total += plan.len;
                segments.extend(segs);
                files.extend(refs);
                plans.push(Some(plan));
            }
            PlanOutcome::Holders(h) => {
                holders.resize(k, Vec::new());
                holders.push(h);
                plans.push(None);
            }
            PlanOutcome::None => plans.push(None),
        }
    }
    if !holders.is_empty() {
        holders.resize(items.len(), Vec::new());
    }
    segments.sort_unstable();
    segments.dedup();
    let dir = if segments.is_empty() {
        String::new()
    } else {
        server.engine.plan_dir()?.to_owned()
    };
    server.read_bytes.fetch_add(total, Ordering::Relaxed);
    Ok(ReadPlans {
        dir,
        segments,
        plans,
        holders,
        files,
    })
}

fn read_item(server: &Server, item: &ReadItem, from: Source, dst: &mut [u8]) -> Result<()> {
    match from {
        Source { held: true, .. } => server.engine.read_held(item.id, &item.region, dst),
        Source {
            version: Some(v), ..
        } => server.engine.read_at(item.id, &item.region, v, dst),
        _ => server.engine.read(item.id, &item.region, dst),
    }
}

/// Checks a read's items and returns each one's byte size and their total.
fn plan_read(server: &Server, items: &[ReadItem], held: bool) -> Result<(Vec<usize>, u64)> {
    let mut sizes = Vec::with_capacity(items.len());
    let mut total = 0u64;
    for item in items {
        let owner = server.meta.owner_of(item.id);
        let obj = if held {
            server.engine.checked_meta(item.id, &item.region)?
        } else if owner != server.config.rank {
            return Err(Error::invalid(format!(
                "object {:#x} is owned by server {owner}, not {}: read it there",
                item.id, server.config.rank
            )));
        } else {
            let obj = server.meta.object(item.id)?;
            item.region.check_within(&obj.dims)?;
            obj
        };
        let n = item.region.byte_len(obj.dtype.size())?;
        total = total.saturating_add(n);
        sizes.push(n as usize);
    }
    if total > server.config.max_payload {
        return Err(Error::invalid(format!(
            "read of {total} bytes exceeds the server's limit of {}",
            server.config.max_payload
        )));
    }
    Ok((sizes, total))
}
