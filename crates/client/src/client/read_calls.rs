//! Reads: through the owner, from holders, or straight from the logs of servers on this
//! node (read plans); strided and point reads.

use super::*;

impl Client {
    /// Reads the elements of object `id` at `coords` (ndim u64 per point, `ndim` the
    /// object's) into `out` (one element per point, in the order given); the owner picks
    /// them, so only they travel. Sent in batches that keep each request small.
    pub fn read_points(
        &self,
        id: ObjectId,
        ndim: usize,
        coords: &[u64],
        out: &mut [u8],
    ) -> Result<()> {
        if ndim == 0 || !coords.len().is_multiple_of(ndim) {
            return Err(Error::invalid(format!(
                "{} coordinates do not make points of {ndim} dims",
                coords.len()
            )));
        }
        let points = coords.len() / ndim;
        if points == 0 {
            return Ok(());
        }
        if !out.len().is_multiple_of(points) {
            return Err(Error::invalid(format!(
                "an output of {} bytes does not hold {points} elements",
                out.len()
            )));
        }
        let elem = out.len() / points;
        let owner = self.id_owner(id)?;
        // About 8 MiB of coordinates per request (the body limit is 64 MiB).
        let per_call = ((1usize << 20) / ndim).max(1);
        for (k, chunk) in coords.chunks(per_call * ndim).enumerate() {
            let first = k * per_call;
            let dst = &mut out[first * elem..(first + chunk.len() / ndim) * elem];
            // A point read names its elements by coordinates: the region is not used.
            let item = ReadItem {
                id,
                region: Region::whole(&[]),
            };
            let req: Request = read::Read {
                items: vec![item],
                opts: ReadOpts {
                    select: Selection::Points(chunk.to_vec()),
                    ..ReadOpts::default()
                },
            }
            .into();
            let resp = self.with_conn(owner, &mut |c| c.call_into(&req, &[], dst))?;
            <read::Read as Call>::reply(resp)?;
        }
        Ok(())
    }

    /// Reads `region` of object `id` as of version `version` (its writes numbered up to it)
    /// into `out`, from its owner. A version compaction dropped is refused (NotFound).
    pub fn read_version(
        &self,
        id: ObjectId,
        region: &Region,
        version: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let owner = self.id_owner(id)?;
        let req: Request = read::Read {
            items: vec![ReadItem {
                id,
                region: region.clone(),
            }],
            opts: ReadOpts {
                version: Some(version),
                ..ReadOpts::default()
            },
        }
        .into();
        let resp = self.with_conn(owner, &mut |c| c.call_into(&req, &[], out))?;
        <read::Read as Call>::reply(resp)
    }

    /// Reads the elements of `region` taken every `step[d]` in each dim (`region` is the
    /// bounding box) into `out` (the selection's byte size, C order). The owner selects them,
    /// so only the selected bytes travel.
    pub fn read_strided(
        &self,
        id: ObjectId,
        region: &Region,
        step: &[u64],
        out: &mut [u8],
    ) -> Result<()> {
        if step.iter().all(|&s| s == 1) {
            return self.read_into(id, region, out);
        }
        let owner = self.id_owner(id)?;
        if self.gather_direct(id, owner, region, step, out)? {
            return Ok(());
        }
        let req: Request = read::Read {
            items: vec![ReadItem {
                id,
                region: region.clone(),
            }],
            opts: ReadOpts {
                select: Selection::Strided(step.to_vec()),
                ..ReadOpts::default()
            },
        }
        .into();
        let resp = self.with_conn(owner, &mut |c| c.call_into(&req, &[], out))?;
        <read::Read as Call>::reply(resp)
    }

    /// A strided read by a client on owner `owner`'s node: gathered from the
    /// mapped log of the owner, or of every holder when others hold parts, touching only the
    /// selected bytes. False when it cannot be done so (not the same node, no plan, the log
    /// moved meanwhile): the caller asks the owner (`out` may be partly written).
    fn gather_direct(
        &self,
        id: ObjectId,
        owner: u32,
        region: &Region,
        step: &[u64],
        out: &mut [u8],
    ) -> Result<bool> {
        let Some(direct) = self.direct_to(owner) else {
            return Ok(false);
        };
        // Same node: gather the selection from the mapped log, which touches
        // only the selected bytes; else, or when the log moved meanwhile, the owner does.
        match self.piece_parts(id, owner, region, step)? {
            Some(parts) => Ok(direct.gather(&parts, region, step, out)? == Outcome::Done),
            None => Ok(false),
        }
    }

    /// The piece plans of `region` of `id` (taken every `step`) from each server holding
    /// part of it, all on this node: the owner's alone, or, when it names other holders,
    /// each holder's own (asked with `held`). None when there is no such set of plans.
    fn piece_parts(
        &self,
        id: ObjectId,
        owner: u32,
        region: &Region,
        step: &[u64],
    ) -> Result<Option<Vec<(u32, pdcx_core::protocol::PiecePlans)>>> {
        let ask = |rank: u32, held: bool| self.piece_plan(rank, id, region, step, held);
        let Some(plan) = ask(owner, false)? else {
            return Ok(None);
        };
        if plan.holders.is_empty() {
            return Ok(Some(vec![(owner, plan)]));
        }
        if plan.holders.len() > MERGE_MAX_HOLDERS
            || !plan.holders.iter().all(|&h| self.direct_reads(h))
        {
            return Ok(None);
        }
        let mut parts = Vec::with_capacity(plan.holders.len());
        for &h in &plan.holders {
            // Any failure here (a holder restarting, say) leaves it to the owner.
            match ask(h, true) {
                Ok(Some(p)) if p.holders.is_empty() => parts.push((h, p)),
                _ => return Ok(None),
            }
        }
        Ok(Some(parts))
    }

    /// Bytes `[off, off + len)` of byte stream `id`, for a file's read-ahead
    /// window, from the mapped logs of the servers holding them, all on this node: a slice
    /// of the mapping when they are one committed extent (no copy, no fresh memory), else
    /// gathered from the mappings (one copy). None when that cannot be done (another node, a
    /// holder elsewhere, a base, bytes not in a log): the caller reads through the owner.
    pub(crate) fn stream_window(
        &self,
        id: ObjectId,
        off: u64,
        len: usize,
    ) -> Result<Option<Window>> {
        let owner = self.id_owner(id)?;
        let Some(direct) = self.direct_to(owner) else {
            return Ok(None);
        };
        let region = Region::new(vec![off], vec![len as u64])?;
        let Some(parts) = self.piece_parts(id, owner, &region, &[1])? else {
            shm::debug(&format!("object {id:#x}: no piece plan for bytes {region}"));
            return Ok(None);
        };
        // One holder, one extent holding all the bytes: the window is a slice of its log.
        if let [(rank, plan)] = &parts[..] {
            if let ([p], None) = (&plan.pieces[..], &plan.fill) {
                if let Some(w) = direct.map_piece(*rank, plan, p, &region)? {
                    return Ok(Some(w));
                }
            }
        }
        shm::debug(&format!(
            "object {id:#x}: bytes {region} are in {} pieces on {} servers: gathered",
            parts.iter().map(|(_, p)| p.pieces.len()).sum::<usize>(),
            parts.len()
        ));
        let mut buf = self.inner.files.take(len);
        if direct.gather(&parts, &region, &[1], &mut buf)? == Outcome::Done {
            return Ok(Some(Window::Heap(buf)));
        }
        self.inner.files.give(buf);
        Ok(None)
    }

    /// The servers holding committed data of each region, from the objects' `owner`.
    pub fn locate(&self, owner: u32, items: Vec<ReadItem>) -> Result<Vec<Vec<u32>>> {
        let n = items.len();
        let holders = self.call(owner, read::Locate { items })?;
        if holders.len() != n {
            return Err(Error::protocol(format!(
                "holders of {} regions located for {n}",
                holders.len()
            )));
        }
        Ok(holders)
    }

    /// Synchronous read straight into `out` (exactly the region's byte size). A large region
    /// that one server other than the owner holds alone is read from that server directly.
    pub fn read_into(&self, id: ObjectId, region: &Region, out: &mut [u8]) -> Result<()> {
        let owner = self.id_owner(id)?;
        if pdcx_core::region::short_rows(region, out.len()) {
            // A point's history, a small box across chunk rows: a read plan would hold one
            // span per short row; the extents' whole locations are fewer, and copying from
            // the mapped log costs no system call per row.
            let ones = vec![1; region.ndim()];
            if self.gather_direct(id, owner, region, &ones, out)? {
                return Ok(());
            }
        }
        let items = vec![ReadItem {
            id,
            region: region.clone(),
        }];
        let mut dest = owner;
        if out.len() >= crate::client::LOCATE_MIN_BYTES && self.size() > 1 {
            if let [only] = self.locate(owner, items.clone())?[0][..] {
                dest = only;
            }
        }
        let held = dest != owner;
        if self.direct_reads(dest) {
            let plans = self.with_conn(dest, &mut |c| read_plans(self, c, &items, held))?;
            if self.direct_read(dest, &plans, 0, &items[0], out)? {
                return Ok(());
            }
        }
        self.with_conn(dest, &mut |c| c.read_into(&items[0], held, out))
    }

    /// Reads `region` of `id` through its owner in one round trip (the owner fetches parts
    /// other servers hold): no location query and no read plan, which is what a small read
    /// wants (a file's read-ahead window); large reads use [`read_into`](Self::read_into).
    pub fn read_via_owner(&self, id: ObjectId, region: &Region, out: &mut [u8]) -> Result<()> {
        let owner = self.id_owner(id)?;
        let item = ReadItem {
            id,
            region: region.clone(),
        };
        self.with_conn(owner, &mut |c| c.read_into(&item, false, out))
    }

    /// Whether item `i` of a read can be a one-copy read given the plans
    /// server `rank` answered: planned there, or (asked at the owner) held in parts by
    /// servers that are all on this node.
    pub(crate) fn direct_possible(&self, plans: &ReadPlans, i: usize) -> bool {
        plans.plans.get(i).is_some_and(Option::is_some)
            || plans.holders.get(i).is_some_and(|h| {
                !h.is_empty()
                    && h.len() <= MERGE_MAX_HOLDERS
                    && h.iter().all(|&r| self.direct_reads(r))
            })
    }

    /// Reads item `i` (`item`) of a read straight into `out` (its byte size) when
    /// [`direct_possible`](Self::direct_possible): from the plan server `rank` gave, or by
    /// asking every holder for its part (`held`) and merging the spans by sequence number.
    /// False when it was not possible or a plan went stale: the caller reads the item through
    /// the server (`out` may be partly written).
    pub(crate) fn direct_read(
        &self,
        rank: u32,
        plans: &ReadPlans,
        i: usize,
        item: &ReadItem,
        out: &mut [u8],
    ) -> Result<bool> {
        let Some(direct) = self.inner.direct.as_ref() else {
            return Ok(false);
        };
        if !self.direct_possible(plans, i) {
            return Ok(false);
        }
        if let Some(Some(p)) = plans.plans.get(i) {
            return Ok(direct.execute(rank, plans, p, out)? == Outcome::Done);
        }
        let holders = &plans.holders[i];
        let mut parts = Vec::with_capacity(holders.len());
        for &h in holders {
            // Any failure here (a holder restarting, say) leaves the item to the owner.
            match self.with_conn(h, &mut |c| {
                read_plans(self, c, std::slice::from_ref(item), true)
            }) {
                Ok(p) if p.plans[0].is_some() => parts.push((h, p)),
                _ => return Ok(false),
            }
        }
        Ok(direct.execute_merged(&parts, out)? == Outcome::Done)
    }

    /// This client's reader of server `rank`'s log files, when it may read them itself.
    fn direct_to(&self, rank: u32) -> Option<&crate::direct::DirectReads> {
        self.inner
            .direct
            .as_ref()
            .filter(|_| self.direct_reads(rank))
    }

    /// `PiecePlan` to server `rank`: every extent of `id` under `region` whole,
    /// with where it lies in that server's log (None: it cannot be planned).
    fn piece_plan(
        &self,
        rank: u32,
        id: ObjectId,
        region: &Region,
        step: &[u64],
        held: bool,
    ) -> Result<Option<pdcx_core::protocol::PiecePlans>> {
        let req = read::PiecePlan {
            id,
            region: region.clone(),
            step: step.to_vec(),
            held,
        };
        self.call(rank, req)
    }

    /// Whether reads from server `rank` may be one-copy reads of its log (same node).
    pub(crate) fn direct_reads(&self, rank: u32) -> bool {
        self.inner.same_node.get(rank as usize) == Some(&true)
            && self.inner.direct.as_ref().is_some_and(|d| d.allowed(rank))
    }
}

/// Most holders whose plans a client merges for one read (beyond that the owner merges).
const MERGE_MAX_HOLDERS: usize = 8;

/// Asks the server on `c` for the read plans of `items`, and lets
/// `client`'s descriptor cache see the answer.
pub(crate) fn read_plans(
    client: &Client,
    c: &mut Conn,
    items: &[ReadItem],
    held: bool,
) -> Result<ReadPlans> {
    let req = read::PlanRead {
        items: items.to_vec(),
        held,
    };
    let p = c.ask(req, &[])?;
    if p.plans.len() != items.len() || !(p.holders.is_empty() || p.holders.len() == items.len()) {
        return Err(Error::protocol(format!(
            "{} read plans for {} items",
            p.plans.len(),
            items.len()
        )));
    }
    if let Some(d) = &client.inner.direct {
        d.note_plans(&p);
    }
    Ok(p)
}
