//! Compaction of group shards: a shard holding several servers' extents is deleted only with
//! the last reference of every server, so one whose extents were mostly dropped keeps their
//! bytes. No server alone knows its live bytes; its leader does, by asking every server which
//! of its shards they use and with how many stored bytes (`ShardRefs`). A shard whose live
//! bytes fall below the compaction threshold of its size has each server that uses it move
//! its extents out (`RepackShards`: each to a blob of its own on the same tier, as the
//! server's own shards are repacked, `flusher/repack.rs`); the last reference gone, the shard
//! is released to the leader and deleted by its next check (`sweep.rs`).
//!
//! A crash is harmless at every step: an extent moves as a put then its home recorded
//! durably (`move_extent`), so an interrupted move leaves the shard referenced (and an orphan
//! blob the extent's next move overwrites).
//!
//! A shard whose leader the deployment no longer has (a resize to fewer servers, another
//! `shard.servers`) is repacked and released by the leader acting for it
//! ([`Tiering::acting_leader_of`]).
//!
//! Locks: the leader holds no lock while it asks (a server using its shards may lead another
//! group and be asking it the same); a server moving its extents out holds its own `moves`,
//! as for its own shards, and sends nothing meanwhile.

use crate::flusher::{Flusher, LOG_TARGET};
use crate::tiering::Tiering;
use pdcx_core::protocol::{PeerRequest, PeerResponse};
use pdcx_core::{Error, Result};
use std::collections::{BTreeMap, HashSet};

/// Per group shard (tier, key): the stored bytes its users keep live, and who they are.
type ShardUse = BTreeMap<(usize, String), (u64, Vec<u32>)>;

impl Flusher<'_> {
    /// As a group leader, has the servers using its group shards whose live stored bytes are
    /// below `threshold` of their size move their extents out. Returns (extents moved, their
    /// stored bytes) over every server. Nothing is repacked while a server does not answer:
    /// the live bytes it keeps in a shard are unknown.
    pub fn repack_group(&self, t: &Tiering, threshold: f64) -> Result<(u64, u64)> {
        let rank = self.host.rank();
        if !t.group_on() || t.group_leader() != rank {
            return Ok((0, 0));
        }
        // Every group shard: those of leaders the deployment no longer has are this server's
        // too when it acts for them.
        let prefix = format!("{}/g", t.deployment);
        let mut uses = ShardUse::new();
        for r in 0..t.size {
            let req = PeerRequest::ShardRefs {
                prefix: prefix.clone(),
            };
            match self.shard_ask(t, r, req) {
                Ok((PeerResponse::ShardRefs(list), _)) => {
                    for (tier, key, live) in list {
                        let Some(i) = t.tier_index(&tier) else {
                            continue;
                        };
                        if t.acting_leader_of(&key) != Some(rank) {
                            continue;
                        }
                        let u = uses.entry((i, key)).or_default();
                        u.0 += live;
                        u.1.push(r);
                    }
                }
                Ok((other, _)) => {
                    return Err(Error::internal(format!(
                        "unexpected reply to ShardRefs: {other:?}"
                    )))
                }
                Err(e) => {
                    tracing::info!(
                        target: LOG_TARGET,
                        "server {r} did not say what it keeps in group shards ({}); none is repacked now",
                        e.message
                    );
                    return Ok((0, 0));
                }
            }
        }
        // Per server, the underfull shards it uses.
        let mut asks: BTreeMap<u32, Vec<(String, String)>> = BTreeMap::new();
        for ((tier, key), (live, users)) in uses {
            // A blob gone meanwhile (or a tier not answering) is looked at next pass.
            let Ok(size) = t.tiers[tier].len(&key) else {
                continue;
            };
            if size == 0 || live as f64 >= threshold * size as f64 {
                continue;
            }
            for r in users {
                asks.entry(r)
                    .or_default()
                    .push((t.name(tier).to_string(), key.clone()));
            }
        }
        let (mut moved, mut bytes) = (0, 0);
        for (r, shards) in asks {
            match self.shard_ask(t, r, PeerRequest::RepackShards { shards }) {
                Ok((PeerResponse::ShardsRepacked { extents, bytes: b }, _)) => {
                    moved += extents;
                    bytes += b;
                }
                Ok((other, _)) => {
                    return Err(Error::internal(format!(
                        "unexpected reply to RepackShards: {other:?}"
                    )))
                }
                // Its extents stay in the shard until the next pass.
                Err(e) => tracing::info!(
                    target: LOG_TARGET,
                    "server {r} did not move its extents out of mostly-garbage group shards ({}); the next pass asks again",
                    e.message
                ),
            }
        }
        Ok((moved, bytes))
    }

    /// Moves this server's extents out of `shards` ((tier name, key), each led by server
    /// `leader` or one it acts for), each to a blob of its own on the same tier. Callers hold
    /// `t.moves`.
    pub(super) fn move_out_of_shards(
        &self,
        t: &Tiering,
        leader: u32,
        shards: &[(String, String)],
    ) -> Result<(u64, u64)> {
        let mut wanted: HashSet<(usize, &str)> = HashSet::new();
        for (tier, key) in shards {
            let i = t
                .tier_index(tier)
                .ok_or_else(|| Error::invalid(format!("no tier named {tier:?}")))?;
            if t.acting_leader_of(key) != Some(leader) {
                return Err(Error::invalid(format!(
                    "server {leader} asked to repack {key:?}, which is not a group shard it leads \
                     or acts for"
                )));
            }
            wanted.insert((i, key.as_str()));
        }
        let (mut moved, mut bytes) = (0, 0);
        for (id, e) in self.host.store().homed_extents() {
            let Some(h) = &e.home else { continue };
            let Some(shard) = &h.shard else { continue };
            if !wanted.contains(&(h.tier, shard.as_str())) {
                continue;
            }
            let Some(meta) = self.placement_meta(id) else {
                continue; // deleted: its extents go with it
            };
            self.move_extent(t, &meta, &e, h.tier)?;
            moved += 1;
            bytes += h.stored_len;
        }
        Ok((moved, bytes))
    }

    /// (tier, key, stored bytes) of every group shard under `prefix` this server's homes
    /// reference.
    pub(super) fn shard_refs(&self, t: &Tiering, prefix: &str) -> Vec<(String, String, u64)> {
        // Waits for a `RecordShardHomes` being applied, so its keys are in the answer.
        let _records = t.records.lock().unwrap_or_else(|p| p.into_inner());
        let mut live: BTreeMap<(usize, String), u64> = BTreeMap::new();
        for (_, e) in self.host.store().homed_extents() {
            let Some(h) = &e.home else { continue };
            match &h.shard {
                Some(k) if k.starts_with(prefix) => {
                    *live.entry((h.tier, k.clone())).or_default() += h.stored_len;
                }
                _ => {}
            }
        }
        live.into_iter()
            .map(|((i, k), n)| (t.name(i).to_string(), k, n))
            .collect()
    }
}
