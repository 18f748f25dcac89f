//! Group shards: shards holding the extents of several servers (`[shard] servers = N | "all"`,
//! the object-sharding paper's strategy 1 and composite strategies 3-5).
//!
//! Servers are grouped by rank: group k is ranks [k*g, (k+1)*g) (one server per node in real
//! deployments); its lowest rank is the **leader**. Only tiers every member reaches qualify
//! (`shared`, `s3`: [`Tiering::off_node`]); elsewhere each server keeps its own blobs.
//!
//! - A member's flush pass leaves the extents whose first placement choice is such a tier in
//!   its log ([`Tiering::waits_for_group`]).
//! - The leader's pass asks every member for them (`ShardCandidates`: encoded as the member
//!   would store them, with the member's placement order), forms shards per (object group,
//!   placement) across all members' extents (cut at `max_bytes`), puts each blob once under
//!   `DEPLOYMENT/gLEADER/shard/`, and only after the put succeeded has each member record its
//!   homes durably (`RecordShardHomes`); the members' log segments then retire as usual.
//!   With an S3 tier only sizes travel: a shard of two parts or more on S3 is a multipart
//!   upload whose parts the members upload from their own extents (`UploadShardPart`), the
//!   others' bytes are fetched (`ShardBytes`) and put by the leader.
//! - Crash between the put and the members' records: the unrecorded extents are still only in
//!   their logs and are pulled again by a later pass (into a blob of the same or another key);
//!   a blob no server references is deleted by the leader's first pass after its start, but
//!   only when every server answered which group shards it references.
//! - A shard is deleted when no server references it any more: a server whose last reference
//!   went tells the leader (`ShardRelease`), which asks every server at its next pass and
//!   deletes the blob only if every one answered and none references it.
//!
//! Locks: the leader holds its `moves` for the whole group pass; a member's `RecordShardHomes`
//! takes the member's `moves` (serialising with its own puts, migrations and `remote` commits)
//! and then `records`; `ShardRefs` takes only `records`, and no handler sends a request while
//! holding a lock, so two servers' passes asking each other never wait on each other.

use super::Flusher;
use super::{form_jobs, run_puts, Encoded, PutJob, ShardGroups};
use crate::datastore::crash_point;
use crate::tiering::placement::{candidates, Hints, TierHint};
use crate::tiering::{codec, Home, Tiering};
use pdcx_core::protocol::{
    FlushReport, PeerRequest, PeerResponse, ShardCandidate, ShardHome, ShardPart,
};
use pdcx_core::{Error, ObjectId, ObjectMeta, Result};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Encoded bytes a leader pulls from its members in one pass (split evenly between them, at
/// least [`MIN_MEMBER_BYTES`] or one extent each): bounds the leader's memory however large
/// the group; `flush_all` runs passes until nothing waits.
const GROUP_PASS_BYTES: u64 = 256 << 20;
const MIN_MEMBER_BYTES: u64 = 1 << 20;

impl Flusher<'_> {
    /// Answers a group-shard request from server `from` (`api/peer.rs`).
    pub fn shard_request(&self, from: u32, req: PeerRequest) -> Result<(PeerResponse, Vec<u8>)> {
        let t = self
            .engine
            .tiering
            .clone()
            .ok_or_else(|| Error::invalid("this server has no tiers (pdcx.toml)"))?;
        Ok(match req {
            PeerRequest::ShardCandidates { max_bytes, bytes } => {
                if !t.group_on() || t.group_leader() != from {
                    return Err(Error::invalid(format!(
                        "server {from} asked for group shard candidates, but this server's shard group (of {}) is led by server {}",
                        t.group, t.group_leader()
                    )));
                }
                let (list, bytes, more) = self.shard_candidates(&t, max_bytes, bytes)?;
                (PeerResponse::ShardCandidates { list, more }, bytes)
            }
            PeerRequest::ShardBytes { extents } => {
                (PeerResponse::ShardBytes, offered_bytes(&t, &extents)?)
            }
            PeerRequest::UploadShardPart(part) => (
                PeerResponse::PartUploaded {
                    etag: upload_shard_part(&t, &part)?,
                },
                Vec::new(),
            ),
            PeerRequest::RecordShardHomes { homes } => {
                let count = {
                    let _moves = t.moves.lock().unwrap_or_else(|p| p.into_inner());
                    self.record_shard_homes(&t, homes)?
                };
                // Their log copies can go now (as after a flush pass).
                self.engine.store().retire_flushed()?;
                (PeerResponse::ShardRecorded { count }, Vec::new())
            }
            PeerRequest::ShardRefs { prefix } => (
                PeerResponse::ShardRefs(self.shard_refs(&t, &prefix)),
                Vec::new(),
            ),
            PeerRequest::ShardRelease { tier, key } => {
                let i = t
                    .tier_index(&tier)
                    .ok_or_else(|| Error::invalid(format!("no tier named {tier:?}")))?;
                t.to_check
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert((i, key));
                (PeerResponse::ShardReleased, Vec::new())
            }
            other => {
                return Err(Error::invalid(format!(
                    "{} is not a group-shard request",
                    other.name()
                )))
            }
        })
    }

    /// This server's extents waiting for a group shard, in log order, up to about
    /// `max_bytes` stored bytes (at least one): each encoded as a flush pass would store it,
    /// with its placement order; the stored bytes back to back (`with_bytes`; else kept in
    /// `t.offered` for the leader to fetch or have uploaded); and how many more wait.
    fn shard_candidates(
        &self,
        t: &Tiering,
        max_bytes: u64,
        with_bytes: bool,
    ) -> Result<(Vec<ShardCandidate>, Vec<u8>, u64)> {
        let mut offered = HashMap::new();
        let mut total = 0u64;
        let (todo, _) = self.engine.store().extents_to_flush(t);
        let names: Vec<&str> = t.tiers.iter().map(|x| x.name()).collect();
        let mut hints = Hints::new(&names);
        let ids: HashSet<ObjectId> = todo.iter().map(|(id, _)| *id).collect();
        let mut placed = self.engine.store().placed(t.tiers.len(), &ids);
        let mut metas: HashMap<ObjectId, Option<ObjectMeta>> = HashMap::new();
        let (mut list, mut bytes, mut more) = (Vec::new(), Vec::new(), 0u64);
        for (id, e) in &todo {
            let Some(meta) = metas
                .entry(*id)
                .or_insert_with(|| self.placement_meta(*id))
                .clone()
            else {
                continue; // deleted: nothing to store
            };
            // The same choices as the flush pass (which left exactly these extents waiting).
            let hint = hints.hint_for(&meta, &e.region).unwrap_or(TierHint::Auto);
            let per = placed.entry(*id).or_insert_with(|| vec![0; t.tiers.len()]);
            let views = self.views(t);
            if !t.waits_for_group(&hint, e.loc.len, per, &views) {
                continue;
            }
            if !list.is_empty() && total >= max_bytes {
                more += 1;
                continue;
            }
            let chosen = codec::codec_for(&meta).unwrap_or(None);
            let raw = self.engine.store().extent_bytes(&meta, e)?;
            self.engine.store().note_stats(&meta, e.seq, &raw);
            let (stored, codec_used) = codec::encode(chosen.as_ref(), meta.dtype, &e.region, &raw)?;
            let order = candidates(&hint, stored.len() as u64, per, &views);
            per[order[0]] += e.loc.len;
            list.push(ShardCandidate {
                id: *id,
                seq: e.seq,
                raw_len: e.loc.len,
                stored_len: stored.len() as u64,
                codec: codec_used,
                order: order.iter().map(|&i| t.name(i).to_string()).collect(),
            });
            total += stored.len() as u64;
            if with_bytes {
                bytes.extend_from_slice(&stored);
            } else {
                offered.insert((*id, e.seq), stored);
            }
        }
        // The previous offer is over: a leader asks again each pass.
        *t.offered.lock().unwrap_or_else(|p| p.into_inner()) = offered;
        Ok((list, bytes, more))
    }

    /// Records this server's homes in a group shard the leader put, durably, then publishes
    /// them. Skips extents gone or homed on a durable tier meanwhile (their bytes in the shard
    /// are then unused). Refuses a blob that is not on its tier: the leader may have deleted it
    /// after giving up on this request. Callers hold `t.moves`.
    fn record_shard_homes(&self, t: &Tiering, homes: Vec<ShardHome>) -> Result<u64> {
        let _records = t.records.lock().unwrap_or_else(|p| p.into_inner());
        let mut present: HashSet<(usize, String)> = HashSet::new();
        let mut done = Vec::new();
        for h in homes {
            let tier = t.tier_index(&h.tier).ok_or_else(|| {
                Error::invalid(format!(
                    "group shard on tier {:?}, which this server does not declare",
                    h.tier
                ))
            })?;
            if !present.contains(&(tier, h.key.clone())) {
                t.tiers[tier].len(&h.key).map_err(|e| {
                    Error::new(
                        e.kind,
                        format!(
                            "group shard {} is not on tier {:?}: {}",
                            h.key, h.tier, e.message
                        ),
                    )
                })?;
                present.insert((tier, h.key.clone()));
            }
            let Some(e) = self.engine.store().extent(h.id, h.seq) else {
                continue;
            };
            if e.home.as_ref().is_some_and(|x| t.is_durable(x.tier)) {
                continue;
            }
            let home = Home {
                tier,
                codec: h.codec,
                stored_len: h.stored_len,
                shard: Some(h.key),
                offset: h.offset,
            };
            done.push((h.id, h.seq, home));
        }
        self.engine.store().record_homes(t, &done)?;
        let n = done.len() as u64;
        self.engine.store().set_homes(done);
        t.offered.lock().unwrap_or_else(|p| p.into_inner()).clear();
        Ok(n)
    }

    /// (tier, key) of every group shard under `prefix` this server's homes reference.
    fn shard_refs(&self, t: &Tiering, prefix: &str) -> Vec<(String, String)> {
        // Waits for a `RecordShardHomes` being applied, so its keys are in the answer.
        let _records = t.records.lock().unwrap_or_else(|p| p.into_inner());
        let (_, referenced) = self.engine.store().extents_to_flush(t);
        referenced
            .into_iter()
            .filter(|(_, k)| k.starts_with(prefix))
            .map(|(i, k)| (t.name(i).to_string(), k))
            .collect()
    }

    /// Sends a group-shard request to server `to` (answered here when it is this server,
    /// except `RecordShardHomes`, which the group pass applies itself under its lock).
    fn shard_ask(&self, t: &Tiering, to: u32, req: PeerRequest) -> Result<(PeerResponse, Vec<u8>)> {
        if to == self.engine.rank {
            return match req {
                PeerRequest::ShardRefs { prefix } => Ok((
                    PeerResponse::ShardRefs(self.shard_refs(t, &prefix)),
                    Vec::new(),
                )),
                PeerRequest::ShardCandidates { max_bytes, bytes } => {
                    let (list, bytes, more) = self.shard_candidates(t, max_bytes, bytes)?;
                    Ok((PeerResponse::ShardCandidates { list, more }, bytes))
                }
                PeerRequest::ShardBytes { extents } => {
                    Ok((PeerResponse::ShardBytes, offered_bytes(t, &extents)?))
                }
                PeerRequest::UploadShardPart(part) => Ok((
                    PeerResponse::PartUploaded {
                        etag: upload_shard_part(t, &part)?,
                    },
                    Vec::new(),
                )),
                other => Err(Error::internal(format!(
                    "{} is not sent to this server itself",
                    other.name()
                ))),
            };
        }
        self.engine.peers()?.shard_call(to, &req)
    }

    /// Every server's group shards bookkeeping at the start of a flush pass (under `moves`):
    /// reports released group shards to their leaders; as a leader, checks the released ones
    /// (and, at its first pass, sweeps its group prefix) against every server's references.
    pub(super) fn group_checks(&self, t: &Arc<Tiering>, report: &mut FlushReport) {
        let released = std::mem::take(&mut *t.released.lock().unwrap_or_else(|p| p.into_inner()));
        for (tier, key) in released {
            let Some(leader) = t.group_leader_of(&key) else {
                continue;
            };
            if leader == self.engine.rank {
                t.to_check
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert((tier, key));
                continue;
            }
            let req = PeerRequest::ShardRelease {
                tier: t.name(tier).to_string(),
                key: key.clone(),
            };
            // Unreachable leader: the blob stays until that leader's next startup sweep.
            if let Err(e) = self.shard_ask(t, leader, req) {
                tracing::info!(
                    target: super::LOG_TARGET,
                    "group shard {key} is no longer used here, but its leader (server {leader}) did not answer ({}); it stays until that leader's next start",
                    e.message
                );
            }
        }
        let sweep = t.group_on()
            && t.group_leader() == self.engine.rank
            && !t.group_swept.load(Ordering::Relaxed);
        let checks: Vec<(usize, String)> = t
            .to_check
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .collect();
        if !sweep && checks.is_empty() {
            return;
        }
        // Every server of the deployment, not only this group: a server grouped differently
        // before a config change may still use one of this leader's shards.
        let prefix = format!("{}/g", t.deployment);
        let mut refs: HashSet<(usize, String)> = HashSet::new();
        for r in 0..t.size {
            match self.shard_ask(
                t,
                r,
                PeerRequest::ShardRefs {
                    prefix: prefix.clone(),
                },
            ) {
                Ok((PeerResponse::ShardRefs(list), _)) => {
                    for (tier, key) in list {
                        if let Some(i) = t.tier_index(&tier) {
                            refs.insert((i, key));
                        }
                    }
                }
                Ok((other, _)) => {
                    report.error = Some(format!("unexpected reply to ShardRefs: {other:?}"));
                    return;
                }
                Err(e) => {
                    // Keep everything: a blob is deleted only when no server can use it.
                    tracing::info!(
                        target: super::LOG_TARGET,
                        "server {r} did not say which group shards it uses ({}); none is deleted now",
                        e.message
                    );
                    return;
                }
            }
        }
        for (tier, key) in checks {
            if !refs.contains(&(tier, key.clone())) {
                let _ = t.delete(tier, &key);
            }
        }
        if !sweep {
            return;
        }
        let mut all_listed = true;
        let mine = format!("{}/", t.group_prefix_of(self.engine.rank));
        for i in 0..t.tiers.len() {
            if !t.off_node(i) {
                continue;
            }
            match t.tiers[i].list(&mine) {
                Ok(keys) => {
                    let stale: Vec<String> = keys
                        .into_iter()
                        .map(|(k, _)| k)
                        .filter(|k| !refs.contains(&(i, k.clone())))
                        .collect();
                    if !stale.is_empty() {
                        tracing::info!(
                            target: super::LOG_TARGET,
                            "removing {} unreferenced group shard(s) from tier {:?} (left by an interrupted flush)",
                            stale.len(),
                            t.name(i)
                        );
                    }
                    for k in stale {
                        if is_upload_marker(&k) {
                            abort_marked_upload(t, i, &k);
                            continue;
                        }
                        let _ = t.delete(i, &k);
                    }
                }
                Err(_) => all_listed = false,
            }
        }
        if all_listed {
            t.group_swept.store(true, Ordering::Relaxed);
        }
    }

    /// The leader's part of a flush pass (under `moves`): pulls every member's waiting
    /// extents, puts them as group shards, then has each member record its homes. A member
    /// that does not answer is skipped (its extents wait in its log for the next pass).
    ///
    /// With an S3 tier the members keep their encoded bytes: a shard of at least two parts
    /// going to S3 is a multipart upload whose parts the members holding the bytes upload
    /// ([`Engine::upload_by_members`]); the bytes of every other shard are fetched
    /// (`ShardBytes`) and the shard put by the leader.
    pub(super) fn group_pass(&self, t: &Arc<Tiering>, report: &mut FlushReport) {
        if !t.group_on()
            || t.group_leader() != self.engine.rank
            || !(0..t.tiers.len()).any(|i| t.off_node(i))
        {
            return;
        }
        let leader = self.engine.rank;
        let members = t.group_members();
        let per_member = (GROUP_PASS_BYTES / members.len().max(1) as u64).max(MIN_MEMBER_BYTES);
        let keep_bytes = (0..t.tiers.len()).any(|i| t.off_node(i) && t.s3[i].is_some());
        let mut batch: Vec<Encoded> = Vec::new();
        // Objects are grouped in the order the pass meets them: members by rank, each in its
        // log order. At least one object per shard: a group shard is never an own blob.
        let mut groups = ShardGroups::new(t.objects_per_shard.max(1));
        let mut idle = t.idle.lock().unwrap_or_else(|p| p.into_inner());
        if t.kicked.swap(false, Ordering::Relaxed) {
            idle.clear();
        }
        for m in members {
            // A member that had nothing (or did not answer) is asked again after 1, 3, 7, ...
            // up to 31 passes, or at once after a kick (`pdcx flush`).
            if let Some((_, wait)) = idle.get_mut(&m).filter(|(_, w)| *w > 0) {
                *wait -= 1;
                continue;
            }
            let req = PeerRequest::ShardCandidates {
                max_bytes: per_member,
                bytes: !keep_bytes,
            };
            let got = self.shard_ask(t, m, req);
            let nothing = !matches!(&got, Ok((PeerResponse::ShardCandidates { list, .. }, _)) if !list.is_empty());
            if nothing {
                let e = idle.entry(m).or_insert((0, 0));
                e.0 = (e.0 + 1).min(5);
                e.1 = (1 << e.0) - 1;
            } else {
                idle.remove(&m);
            }
            let (list, bytes, more) = match got {
                Ok((PeerResponse::ShardCandidates { list, more }, bytes)) => (list, bytes, more),
                Ok((other, _)) => {
                    report.error = Some(format!("unexpected reply to ShardCandidates: {other:?}"));
                    continue;
                }
                Err(e) => {
                    report.error = Some(format!(
                        "server {m} of shard group {leader} did not hand over its extents ({}); they wait in its log",
                        e.message
                    ));
                    continue;
                }
            };
            if m != self.engine.rank {
                // This server's own waiting extents are already in its pending count.
                report.pending_extents += more;
            }
            let mut at = 0usize;
            for c in list {
                let stored = if keep_bytes {
                    Vec::new()
                } else {
                    let end = at.saturating_add(c.stored_len as usize);
                    let Some(stored) = bytes.get(at..end) else {
                        report.error = Some(format!(
                            "server {m} sent shard candidates whose lengths exceed their bytes"
                        ));
                        break;
                    };
                    at = end;
                    stored.to_vec()
                };
                let order: Vec<usize> = c.order.iter().filter_map(|n| t.tier_index(n)).collect();
                if order.is_empty() {
                    continue;
                }
                batch.push(Encoded {
                    id: c.id,
                    seq: c.seq,
                    from: m,
                    raw_len: c.raw_len,
                    group: groups.group_of(c.id),
                    stored,
                    len: c.stored_len,
                    codec: c.codec,
                    order,
                });
            }
        }
        drop(idle);
        if batch.is_empty() {
            return;
        }
        let jobs = form_jobs(t, batch, true);
        let mut landed: Vec<(PutJob, Option<usize>)> = Vec::new();
        let mut plain = Vec::new();
        for mut job in jobs {
            let first = job.order[0];
            match t.s3[first].clone() {
                Some(s3) if keep_bytes && job.len >= 2 * s3.part_size() as u64 => {
                    match self.upload_by_members(t, first, &s3, &mut job) {
                        Ok(()) => landed.push((job, Some(first))),
                        Err(e) => {
                            t.note_error(first, &e);
                            report.error = Some(format!(
                                "uploading group shard {} to tier {:?}: {}; its extents wait in their logs",
                                job.key,
                                t.name(first),
                                e.message
                            ));
                        }
                    }
                }
                _ => plain.push(job),
            }
        }
        if keep_bytes {
            plain = self.fetch_offered(t, plain, report);
        }
        let failed: Mutex<HashSet<usize>> = Mutex::new(HashSet::new());
        let put_error: Mutex<Option<String>> = Mutex::new(None);
        let tiers = run_puts(t, &plain, &failed, &put_error);
        landed.extend(plain.into_iter().zip(tiers));
        crash_point("shard.after_group_put");
        if let Some(e) = put_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            report.error = Some(e);
        }
        // Per member: its homes, and (raw bytes, stored bytes) they stand for.
        let mut per: BTreeMap<u32, (Vec<ShardHome>, u64, u64)> = BTreeMap::new();
        for (job, tier) in &landed {
            let Some(tier) = *tier else { continue };
            for x in &job.members {
                let e = per.entry(x.from).or_default();
                e.0.push(ShardHome {
                    id: x.id,
                    seq: x.seq,
                    tier: t.name(tier).to_string(),
                    key: job.key.clone(),
                    offset: x.offset,
                    stored_len: x.stored_len,
                    codec: x.codec.clone(),
                });
                e.1 += x.raw_len;
                e.2 += x.stored_len;
            }
        }
        for (m, (homes, raw, stored)) in per {
            let n = homes.len() as u64;
            let keys: HashSet<(String, String)> = homes
                .iter()
                .map(|h| (h.tier.clone(), h.key.clone()))
                .collect();
            let r = if m == self.engine.rank {
                self.record_shard_homes(t, homes)
            } else {
                match self.shard_ask(t, m, PeerRequest::RecordShardHomes { homes }) {
                    Ok((PeerResponse::ShardRecorded { count }, _)) => Ok(count),
                    Ok((other, _)) => Err(Error::protocol(format!(
                        "unexpected reply to RecordShardHomes: {other:?}"
                    ))),
                    Err(e) => Err(e),
                }
            };
            match r {
                Ok(_) => {
                    report.extents += n;
                    report.bytes += raw;
                    report.stored_bytes += stored;
                    if m == self.engine.rank {
                        report.pending_extents = report.pending_extents.saturating_sub(n);
                        report.pending_bytes = report.pending_bytes.saturating_sub(raw);
                    }
                }
                Err(e) => {
                    report.error = Some(format!(
                        "server {m} did not record its homes in group shards ({}); its extents wait in its log",
                        e.message
                    ));
                    // Deleted at the next pass if no server took them up.
                    let mut check = t.to_check.lock().unwrap_or_else(|p| p.into_inner());
                    for (tier, key) in keys {
                        if let Some(i) = t.tier_index(&tier) {
                            check.insert((i, key));
                        }
                    }
                }
            }
        }
    }

    /// Fills the blobs of `jobs` with their extents' bytes, fetched from the servers that
    /// offered them (one `ShardBytes` per server); drops the jobs of a server that does not
    /// answer (their extents wait in the logs).
    fn fetch_offered(
        &self,
        t: &Tiering,
        mut jobs: Vec<PutJob>,
        report: &mut FlushReport,
    ) -> Vec<PutJob> {
        let mut want: BTreeMap<u32, Vec<(ObjectId, u64)>> = BTreeMap::new();
        for job in &jobs {
            for x in &job.members {
                want.entry(x.from).or_default().push((x.id, x.seq));
            }
        }
        let mut got: HashMap<(ObjectId, u64), Vec<u8>> = HashMap::new();
        let mut down: HashSet<u32> = HashSet::new();
        for (m, list) in want {
            let lens: Vec<u64> = jobs
                .iter()
                .flat_map(|j| j.members.iter())
                .filter(|x| x.from == m)
                .map(|x| x.stored_len)
                .collect();
            match self.shard_ask(
                t,
                m,
                PeerRequest::ShardBytes {
                    extents: list.clone(),
                },
            ) {
                Ok((PeerResponse::ShardBytes, bytes))
                    if bytes.len() as u64 == lens.iter().sum::<u64>() =>
                {
                    let mut at = 0usize;
                    for (key, len) in list.into_iter().zip(lens) {
                        got.insert(key, bytes[at..at + len as usize].to_vec());
                        at += len as usize;
                    }
                }
                Ok((other, bytes)) => {
                    report.error = Some(format!(
                        "server {m} answered ShardBytes with {other:?} and {} bytes",
                        bytes.len()
                    ));
                    down.insert(m);
                }
                Err(e) => {
                    report.error = Some(format!(
                        "server {m} did not send its extents' bytes ({}); they wait in its log",
                        e.message
                    ));
                    down.insert(m);
                }
            }
        }
        jobs.retain(|j| j.members.iter().all(|x| !down.contains(&x.from)));
        for job in &mut jobs {
            job.stored = Vec::with_capacity(job.len as usize);
            for x in &job.members {
                if let Some(b) = got.remove(&(x.id, x.seq)) {
                    job.stored.extend_from_slice(&b);
                }
            }
        }
        jobs
    }

    /// Puts `job` on S3 tier `tier` as a multipart upload whose parts the servers holding
    /// the bytes upload (`UploadShardPart`). Each server's extents are one run of the blob,
    /// cut into parts of the tier's part size; a run's last part that is not the blob's last
    /// is padded with zeros to S3's smallest part (5 MiB), so no part needs another server's
    /// bytes. Sets the members' offsets (after padding) and the blob's length. Any failure
    /// aborts the upload.
    fn upload_by_members(
        &self,
        t: &Tiering,
        tier: usize,
        s3: &pdcx_tiers::s3::S3Tier,
        job: &mut PutJob,
    ) -> Result<()> {
        const MIN_PART: u64 = 5 << 20;
        let part_size = s3.part_size() as u64;
        // Runs of consecutive members held by one server.
        let mut runs: Vec<(u32, Vec<usize>)> = Vec::new();
        for (i, x) in job.members.iter().enumerate() {
            match runs.last_mut() {
                Some((from, v)) if *from == x.from => v.push(i),
                _ => runs.push((x.from, vec![i])),
            }
        }
        let mut parts: Vec<(u32, ShardPart)> = Vec::new();
        let mut off = 0u64;
        let nruns = runs.len();
        for (r, (from, idx)) in runs.into_iter().enumerate() {
            let mut o = off;
            for &i in &idx {
                job.members[i].offset = o;
                o += job.members[i].stored_len;
            }
            let run_len = o - off;
            let extents: Vec<(ObjectId, u64)> = idx
                .iter()
                .map(|&i| (job.members[i].id, job.members[i].seq))
                .collect();
            let mut skip = 0u64;
            while skip < run_len {
                let n = part_size.min(run_len - skip);
                let last = r + 1 == nruns && skip + n == run_len;
                let len = if last { n } else { n.max(MIN_PART) };
                parts.push((
                    from,
                    ShardPart {
                        tier: t.name(tier).to_string(),
                        key: job.key.clone(),
                        upload_id: String::new(),
                        part: parts.len() as u32,
                        extents: extents.clone(),
                        skip,
                        len,
                    },
                ));
                skip += n;
                off += len;
            }
        }
        job.len = off;
        let upload_id = s3.create_upload(&job.key)?;
        // A marker naming the upload, so that the leader's sweep after a crash aborts it
        // (its parts would otherwise stay billed); removed once the upload is over.
        let marker = upload_marker(&job.key);
        if let Err(e) = t.tiers[tier].put(&marker, upload_id.as_bytes()) {
            let _ = s3.abort_upload(&job.key, &upload_id);
            return Err(e);
        }
        crash_point("shard.after_upload_started");
        for (_, p) in &mut parts {
            p.upload_id = upload_id.clone();
        }
        let t0 = std::time::Instant::now();
        let result = self
            .upload_parts(t, &parts)
            .and_then(|etags| s3.complete_upload(&job.key, &upload_id, etags));
        let _ = t.tiers[tier].delete(&marker);
        if let Err(e) = result {
            if let Err(a) = s3.abort_upload(&job.key, &upload_id) {
                tracing::warn!(
                    target: super::LOG_TARGET,
                    "aborting upload {upload_id} of group shard {}: {}",
                    job.key,
                    a.message
                );
            }
            return Err(e);
        }
        let c = &t.counters[tier];
        c.put_bytes.fetch_add(job.len, Ordering::Relaxed);
        c.put_nanos
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        c.extents.fetch_add(1, Ordering::Relaxed);
        t.clear_error(tier);
        Ok(())
    }

    /// Has each part uploaded by its server, a few at once; the ETags in part order.
    fn upload_parts(&self, t: &Tiering, parts: &[(u32, ShardPart)]) -> Result<Vec<String>> {
        crate::parallel::try_each(parts.len(), PART_THREADS, |k| {
            let (from, part) = &parts[k];
            match self.shard_ask(t, *from, PeerRequest::UploadShardPart(part.clone())) {
                Ok((PeerResponse::PartUploaded { etag }, _)) => Ok(etag),
                Ok((other, _)) => Err(Error::protocol(format!(
                    "unexpected reply to UploadShardPart: {other:?}"
                ))),
                Err(e) => Err(Error::new(
                    e.kind,
                    format!(
                        "server {from} did not upload part {} of {}: {}",
                        part.part, part.key, e.message
                    ),
                )),
            }
        })
    }
}

/// Group shard parts in flight at once per upload.
const PART_THREADS: usize = 8;

/// The encoded bytes of `extents` from this server's last offer, back to back.
fn offered_bytes(t: &Tiering, extents: &[(ObjectId, u64)]) -> Result<Vec<u8>> {
    let offered = t.offered.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = Vec::new();
    for k in extents {
        let b = offered.get(k).ok_or_else(|| {
            Error::not_found(format!(
                "extent {} of object {:#x} is not offered for a group shard here (restarted, or a newer offer replaced it)",
                k.1, k.0
            ))
        })?;
        out.extend_from_slice(b);
    }
    Ok(out)
}

/// Uploads one part of a group shard from this server's offered extents (`UploadShardPart`):
/// bytes [`skip`, `skip + len`) of their encoded bytes back to back, zeros past the end.
fn upload_shard_part(t: &Tiering, p: &ShardPart) -> Result<String> {
    let tier = t
        .tier_index(&p.tier)
        .ok_or_else(|| Error::invalid(format!("no tier named {:?}", p.tier)))?;
    let s3 = t.s3[tier]
        .clone()
        .ok_or_else(|| Error::invalid(format!("tier {:?} is not an S3 tier", p.tier)))?;
    if p.len > 5 << 30 {
        return Err(Error::invalid(format!(
            "part of {} bytes is too large",
            p.len
        )));
    }
    let mut buf = vec![0u8; p.len as usize];
    {
        let offered = t.offered.lock().unwrap_or_else(|p| p.into_inner());
        let (mut at, end) = (0u64, p.skip + p.len);
        for k in &p.extents {
            let b = offered.get(k).ok_or_else(|| {
                Error::not_found(format!(
                    "extent {} of object {:#x} is not offered for a group shard here",
                    k.1, k.0
                ))
            })?;
            let (lo, hi) = (at, at + b.len() as u64);
            // The overlap of [lo, hi) with [skip, end), copied to its place in the part.
            let (from, to) = (lo.max(p.skip), hi.min(end));
            if from < to {
                buf[(from - p.skip) as usize..(to - p.skip) as usize]
                    .copy_from_slice(&b[(from - lo) as usize..(to - lo) as usize]);
            }
            at = hi;
        }
    }
    let etag = s3.put_part(&p.key, &p.upload_id, p.part as usize, buf)?;
    t.group_parts_uploaded.fetch_add(1, Ordering::Relaxed);
    Ok(etag)
}

/// The key of the marker naming the multipart upload of group shard `shard_key`.
fn upload_marker(shard_key: &str) -> String {
    shard_key.replacen("/shard/", "/uploads/", 1)
}

fn is_upload_marker(key: &str) -> bool {
    key.contains("/uploads/")
}

/// Aborts the multipart upload a crashed leader left (its marker `marker` names it), then
/// deletes the marker; a marker whose upload cannot be aborted now stays for the next start.
fn abort_marked_upload(t: &Tiering, tier: usize, marker: &str) {
    let Some(s3) = t.s3.get(tier).cloned().flatten() else {
        let _ = t.tiers[tier].delete(marker);
        return;
    };
    let shard = marker.replacen("/uploads/", "/shard/", 1);
    let aborted = t.tiers[tier]
        .get(marker)
        .and_then(|id| s3.abort_upload(&shard, &String::from_utf8_lossy(&id)));
    match aborted {
        Ok(()) => {
            t.group_uploads_aborted.fetch_add(1, Ordering::Relaxed);
            let _ = t.tiers[tier].delete(marker);
        }
        Err(e) => tracing::warn!(
            target: super::LOG_TARGET,
            "aborting the interrupted upload of group shard {shard}: {}; retried at the next start",
            e.message
        ),
    }
}
