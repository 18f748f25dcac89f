//! A member's side of group shards: its waiting extents offered to the leader (encoded, with
//! their placement order), their bytes sent or uploaded as parts, its homes in a shard the
//! leader put recorded.

use crate::flusher::logpages::LogPages;
use crate::flusher::Flusher;
use crate::tiering::placement::{candidates, Hints, TierHint};
use crate::tiering::{codec, Home, Tiering};
use bytes::Bytes;
use pdcx_core::protocol::{ShardCandidate, ShardHome, ShardPart};
use pdcx_core::{Error, ErrorKind, ObjectId, ObjectMeta, Result};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

impl Flusher<'_> {
    /// This server's extents waiting for a group shard, in log order, up to about
    /// `max_bytes` stored bytes (at least one): each encoded as a flush pass would store it,
    /// with its placement order; the stored bytes back to back (`with_bytes`; else kept in
    /// `t.offered` for the leader to fetch or have uploaded); and how many more wait.
    pub(super) fn shard_candidates(
        &self,
        t: &Tiering,
        max_bytes: u64,
        with_bytes: bool,
    ) -> Result<(Vec<ShardCandidate>, Vec<u8>, u64)> {
        let mut offered = HashMap::new();
        let mut pages = LogPages::new(self.host.store());
        let mut total = 0u64;
        let (todo, _) = self.host.store().extents_to_flush(t);
        let names: Vec<&str> = t.tiers.iter().map(|x| x.name()).collect();
        let mut hints = Hints::new(&names);
        let ids: HashSet<ObjectId> = todo.iter().map(|(id, _)| *id).collect();
        let mut placed = self.host.store().placed(t.tiers.len(), &ids);
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
            let raw = pages.take(&meta, e)?;
            self.host.store().note_stats(&meta, e.seq, &raw.bytes);
            let (stored, codec_used) = codec::encode(chosen.as_ref(), meta.dtype, &e.region, raw)?;
            let order = candidates(&hint, stored.bytes.len() as u64, per, &views);
            per[order[0]] += e.loc.len;
            list.push(ShardCandidate {
                id: *id,
                seq: e.seq,
                raw_len: e.loc.len,
                stored_len: stored.bytes.len() as u64,
                codec: codec_used,
                order: order.iter().map(|&i| t.name(i).to_string()).collect(),
            });
            total += stored.bytes.len() as u64;
            if with_bytes {
                bytes.extend_from_slice(&stored.bytes);
                if !stored.unchanged() {
                    return Err(changed_in_log(1));
                }
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
    pub(super) fn record_shard_homes(&self, t: &Tiering, homes: Vec<ShardHome>) -> Result<u64> {
        let _records = t.records.lock().unwrap_or_else(|p| p.into_inner());
        let mut offered = t.offered.lock().unwrap_or_else(|p| p.into_inner());
        let mut present: HashSet<(usize, String)> = HashSet::new();
        let mut done = Vec::new();
        let mut changed = 0usize;
        for h in homes {
            // Bytes written from the log's pages that changed since: the shard holds what the
            // log held then, which may not be what was checked (`tiering::flushbytes`). The
            // extent gets no home and stays in the log; its bytes in the shard are unused.
            if offered.get(&(h.id, h.seq)).is_some_and(|b| !b.unchanged()) {
                changed += 1;
                continue;
            }
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
            let Some(e) = self.host.store().extent(h.id, h.seq) else {
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
        self.host.store().record_homes(t, &done)?;
        let n = done.len() as u64;
        self.host.store().set_homes(done);
        offered.clear();
        if changed > 0 {
            tracing::warn!(
                target: crate::flusher::LOG_TARGET,
                rank = self.host.rank(),
                "{}",
                changed_in_log(changed).message
            );
        }
        Ok(n)
    }
}

/// The largest part a member writes or uploads (S3's largest part).
const MAX_PART: u64 = 5 << 30;

/// Refuses a part larger than S3 takes, or one that would end past where any group shard of
/// this deployment ends (a shard is cut at `max_shard_bytes`, past it by one extent at most):
/// a wrong `at` must not make a huge sparse file on the tier.
fn check_part_bounds(at: u64, len: u64, max_shard_bytes: u64) -> Result<()> {
    if len > MAX_PART {
        return Err(Error::invalid(format!("part of {len} bytes is too large")));
    }
    let limit = max_shard_bytes.saturating_add(MAX_PART);
    if at.checked_add(len).is_none_or(|end| end > limit) {
        return Err(Error::invalid(format!(
            "part of {len} bytes at byte {at} ends past the largest group shard ({limit} bytes)"
        )));
    }
    Ok(())
}

/// The error for offered extents whose bytes in the log changed after they were checked.
fn changed_in_log(extents: usize) -> Error {
    Error::new(
        ErrorKind::Io,
        format!(
            "{extents} extent(s) changed in the log while they were flushed into a group shard \
             (another writer of its segment files?); left in the log, not homed"
        ),
    )
}

/// The encoded bytes of `extents` from this server's last offer, back to back.
pub(super) fn offered_bytes(t: &Tiering, extents: &[(ObjectId, u64)]) -> Result<Vec<u8>> {
    let offered = t.offered.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = Vec::new();
    for k in extents {
        let b = offered.get(k).ok_or_else(|| {
            Error::not_found(format!(
                "extent {} of object {:#x} is not offered for a group shard here (restarted, or a newer offer replaced it)",
                k.1, k.0
            ))
        })?;
        out.extend_from_slice(&b.bytes);
    }
    Ok(out)
}

/// Writes one part of a group shard from this server's offered extents (`UploadShardPart`):
/// bytes [`skip`, `skip + len`) of their encoded bytes back to back (zeros past the end on
/// S3), as a part of the leader's multipart upload (S3; answers its ETag) or at byte `at` of
/// the leader's temporary blob on a shared directory (answers an empty tag). The bytes are
/// counted as this server's puts.
pub(super) fn upload_shard_part(t: &Tiering, p: &ShardPart) -> Result<String> {
    let tier = t
        .tier_index(&p.tier)
        .ok_or_else(|| Error::invalid(format!("no tier named {:?}", p.tier)))?;
    check_part_bounds(p.at, p.len, t.max_shard_bytes)?;
    let t0 = std::time::Instant::now();
    let etag = if let Some(s3) = t.s3[tier].clone() {
        let mut buf = vec![0u8; p.len as usize];
        for (at, b) in part_slices(t, p)? {
            buf[at..at + b.len()].copy_from_slice(&b);
        }
        s3.put_part(&p.key, &p.upload_id, p.part as usize, buf)?
    } else if let Some(w) = t.tiers[tier].part_writer() {
        let slices = part_slices(t, p)?;
        let parts: Vec<&[u8]> = slices.iter().map(|(_, b)| &b[..]).collect();
        if parts.iter().map(|b| b.len() as u64).sum::<u64>() != p.len {
            return Err(Error::invalid(format!(
                "part {} of {} runs past the end of its extents",
                p.part, p.key
            )));
        }
        w.write(&p.upload_id, p.at, &parts)?;
        String::new()
    } else {
        return Err(Error::invalid(format!(
            "tier {:?} takes no group shard parts (neither S3 nor a shared directory)",
            p.tier
        )));
    };
    let c = &t.counters[tier];
    c.put_bytes.fetch_add(p.len, Ordering::Relaxed);
    c.put_nanos
        .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    t.group_parts_uploaded.fetch_add(1, Ordering::Relaxed);
    Ok(etag)
}

/// The offered bytes part `p` covers, each with its offset in the part: slices of the offered
/// extents (no copy), taken under the lock and written without it.
fn part_slices(t: &Tiering, p: &ShardPart) -> Result<Vec<(usize, Bytes)>> {
    let offered = t.offered.lock().unwrap_or_else(|p| p.into_inner());
    let (mut at, end) = (0u64, p.skip + p.len);
    let mut out = Vec::new();
    for k in &p.extents {
        let b = offered.get(k).ok_or_else(|| {
            Error::not_found(format!(
                "extent {} of object {:#x} is not offered for a group shard here",
                k.1, k.0
            ))
        })?;
        let (lo, hi) = (at, at + b.bytes.len() as u64);
        // The overlap of [lo, hi) with [skip, end), at its place in the part.
        let (from, to) = (lo.max(p.skip), hi.min(end));
        if from < to {
            out.push((
                (from - p.skip) as usize,
                b.bytes.slice((from - lo) as usize..(to - lo) as usize),
            ));
        }
        at = hi;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_bounded_by_s3s_largest_part_and_the_largest_shard() {
        let max = 256 << 20;
        assert!(check_part_bounds(0, 8 << 20, max).is_ok());
        assert!(
            check_part_bounds(max, MAX_PART, max).is_ok(),
            "one extent past the cut"
        );
        assert!(check_part_bounds(0, MAX_PART + 1, max).is_err());
        let e = check_part_bounds(u64::MAX - 4, 8, max).unwrap_err();
        assert!(
            e.message.contains("ends past the largest group shard"),
            "{}",
            e.message
        );
        assert!(check_part_bounds(max + MAX_PART, 1, max).is_err());
    }
}
