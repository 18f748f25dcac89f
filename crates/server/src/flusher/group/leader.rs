//! The leader's group pass: pulls its members' waiting extents, puts them as group shards
//! (fetching the bytes members kept, or having members upload S3 parts), then has each member
//! record its homes.

use crate::datastore::crash_point;
use crate::flusher::{form_jobs, run_puts, Encoded, Flusher, PutJob, ShardGroups};
use crate::tiering::Tiering;
use bytes::Bytes;
use pdcx_core::protocol::{FlushReport, PeerRequest, PeerResponse, ShardHome};
use pdcx_core::{Error, ErrorKind, ObjectId};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Encoded bytes a leader pulls from its members in one pass (split evenly between them, at
/// least [`MIN_MEMBER_BYTES`] or one extent each): bounds the leader's memory however large
/// the group; `flush_all` runs passes until nothing waits.
const GROUP_PASS_BYTES: u64 = 256 << 20;
const MIN_MEMBER_BYTES: u64 = 1 << 20;
/// Members a leader asks at once (for their extents, to record their homes).
const ASK_THREADS: usize = 8;

impl Flusher<'_> {
    /// The leader's part of a flush pass (under `moves`): pulls every member's waiting
    /// extents, puts them as group shards, then has each member record its homes. A member
    /// that does not answer is skipped (its extents wait in its log for the next pass).
    ///
    /// With an S3 or shared-directory tier the members keep their encoded bytes: a shard
    /// going to a shared directory is written by the members holding the bytes
    /// ([`Flusher::write_by_members`]), one of at least two parts going to S3 is a multipart
    /// upload whose parts they upload ([`Flusher::upload_by_members`]); the bytes of every
    /// other shard are fetched (`ShardBytes`) and the shard put by the leader.
    pub(in crate::flusher) fn group_pass(&self, t: &Arc<Tiering>, report: &mut FlushReport) {
        if !t.group_on()
            || t.group_leader() != self.host.rank()
            || !(0..t.tiers.len()).any(|i| t.off_node(i))
        {
            return;
        }
        let leader = self.host.rank();
        let members = t.group_members();
        let per_member = (GROUP_PASS_BYTES / members.len().max(1) as u64).max(MIN_MEMBER_BYTES);
        // Members keep their bytes where they can put them themselves.
        let keep_bytes = (0..t.tiers.len())
            .any(|i| t.off_node(i) && (t.s3[i].is_some() || t.tiers[i].part_writer().is_some()));
        let mut batch: Vec<Encoded> = Vec::new();
        // Objects are grouped in the order the pass meets them: members by rank, each in its
        // log order. At least one object per shard: a group shard is never an own blob.
        let mut groups = ShardGroups::new(t.objects_per_shard.max(1));
        let mut idle = t.idle.lock().unwrap_or_else(|p| p.into_inner());
        if t.kicked.swap(false, Ordering::Relaxed) {
            idle.clear();
        }
        // A member that had nothing (or did not answer) is asked again after 1, 3, 7, ...
        // up to 31 passes, or at once after a kick (`pdcx flush`).
        let mut ask = Vec::with_capacity(members.len());
        for m in members {
            match idle.get_mut(&m).filter(|(_, w)| *w > 0) {
                Some((_, wait)) => *wait -= 1,
                None => ask.push(m),
            }
        }
        // The members read and encode their extents at the same time; their answers are
        // taken in rank order below, so the shards formed do not depend on who answers first.
        let req = PeerRequest::ShardCandidates {
            max_bytes: per_member,
            bytes: !keep_bytes,
        };
        let answers = self.ask_each(t, &ask, |_| req.clone());
        for (m, got) in ask.into_iter().zip(answers) {
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
            if m != self.host.rank() {
                // This server's own waiting extents are already in its pending count.
                report.pending_extents += more;
            }
            // Each candidate's part is a slice of the answer, not a copy of it.
            let bytes = Bytes::from(bytes);
            let mut at = 0usize;
            for c in list {
                let stored = if keep_bytes {
                    Bytes::new()
                } else {
                    let end = at.saturating_add(c.stored_len as usize);
                    if end > bytes.len() {
                        report.error = Some(format!(
                            "server {m} sent shard candidates whose lengths exceed their bytes"
                        ));
                        break;
                    }
                    let stored = bytes.slice(at..end);
                    at = end;
                    stored
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
            // Members write their own bytes: parts of an S3 multipart upload, or runs of a
            // shared directory's file; any other shard is put by the leader.
            let by_members = match t.s3[first].clone() {
                Some(s3) if keep_bytes && job.len >= 2 * s3.part_size() as u64 => {
                    Some(("uploading", self.upload_by_members(t, first, &s3, &mut job)))
                }
                None if keep_bytes && t.tiers[first].part_writer().is_some() => {
                    Some(("writing", self.write_by_members(t, first, &job)))
                }
                _ => None,
            };
            match by_members {
                None => plain.push(job),
                Some((_, Ok(()))) => landed.push((job, Some(first))),
                // A full shared directory: the leader puts it, spilling to the next tier.
                Some(("writing", Err(e))) if e.kind == ErrorKind::NoSpace => plain.push(job),
                Some((verb, Err(e))) => {
                    t.note_error(first, &e);
                    report.error = Some(format!(
                        "{verb} group shard {} to tier {:?}: {}; its extents wait in their logs",
                        job.key,
                        t.name(first),
                        e.message
                    ));
                }
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
        // Every member records its homes (a durable metadata write each) at the same time.
        let per: Vec<_> = per.into_iter().collect();
        let recorded = crate::parallel::try_each(per.len(), ASK_THREADS, |k| {
            let (m, (homes, _, _)) = &per[k];
            Ok(if *m == self.host.rank() {
                self.record_shard_homes(t, homes.clone())
            } else {
                let req = PeerRequest::RecordShardHomes {
                    homes: homes.clone(),
                };
                match self.shard_ask(t, *m, req) {
                    Ok((PeerResponse::ShardRecorded { count }, _)) => Ok(count),
                    Ok((other, _)) => Err(Error::protocol(format!(
                        "unexpected reply to RecordShardHomes: {other:?}"
                    ))),
                    Err(e) => Err(e),
                }
            })
        })
        .unwrap_or_else(|e| vec![Err(e); per.len()]);
        for ((m, (homes, raw, stored)), r) in per.into_iter().zip(recorded) {
            let n = homes.len() as u64;
            let keys: HashSet<(String, String)> = homes
                .iter()
                .map(|h| (h.tier.clone(), h.key.clone()))
                .collect();
            match r {
                Ok(_) => {
                    report.extents += n;
                    report.bytes += raw;
                    report.stored_bytes += stored;
                    if m == self.host.rank() {
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

    /// Asks each server of `to` its request (`req_for(server)`), at most [`ASK_THREADS`] at
    /// once; the answers in the order of `to`, each its own success or failure.
    fn ask_each(
        &self,
        t: &Tiering,
        to: &[u32],
        req_for: impl Fn(u32) -> PeerRequest + Sync,
    ) -> Vec<pdcx_core::Result<(PeerResponse, Vec<u8>)>> {
        crate::parallel::try_each(to.len(), ASK_THREADS, |k| {
            Ok(self.shard_ask(t, to[k], req_for(to[k])))
        })
        .unwrap_or_else(|e| to.iter().map(|_| Err(e.clone())).collect())
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
        let mut got: HashMap<(ObjectId, u64), Bytes> = HashMap::new();
        let mut down: HashSet<u32> = HashSet::new();
        let servers: Vec<u32> = want.keys().copied().collect();
        let answers = self.ask_each(t, &servers, |m| PeerRequest::ShardBytes {
            extents: want.get(&m).cloned().unwrap_or_default(),
        });
        for ((m, list), answer) in want.into_iter().zip(answers) {
            let lens: Vec<u64> = jobs
                .iter()
                .flat_map(|j| j.members.iter())
                .filter(|x| x.from == m)
                .map(|x| x.stored_len)
                .collect();
            match answer {
                Ok((PeerResponse::ShardBytes, bytes))
                    if bytes.len() as u64 == lens.iter().sum::<u64>() =>
                {
                    let bytes = Bytes::from(bytes);
                    let mut at = 0usize;
                    for (key, len) in list.into_iter().zip(lens) {
                        got.insert(key, bytes.slice(at..at + len as usize));
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
            job.parts = job
                .members
                .iter()
                .filter_map(|x| got.remove(&(x.id, x.seq)))
                .collect();
        }
        jobs
    }
}
