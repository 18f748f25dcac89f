//! Deleting group shards no server references: released shards reported to their leaders,
//! and a leader's check of them (and, at its first pass, a sweep of its group prefix)
//! against every server's references.

use super::upload::{abort_marked_upload, is_upload_marker};
use crate::flusher::{Flusher, LOG_TARGET};
use crate::tiering::Tiering;
use pdcx_core::protocol::{FlushReport, PeerRequest, PeerResponse};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Flusher<'_> {
    /// Every server's group shards bookkeeping at the start of a flush pass (under `moves`):
    /// reports released group shards to their leaders; as a leader, checks the released ones
    /// (and, at its first pass, sweeps its group prefix) against every server's references.
    pub(in crate::flusher) fn group_checks(&self, t: &Arc<Tiering>, report: &mut FlushReport) {
        let released = std::mem::take(&mut *t.released.lock().unwrap_or_else(|p| p.into_inner()));
        for (tier, key) in released {
            let Some(leader) = t.acting_leader_of(&key) else {
                continue;
            };
            if leader == self.host.rank() {
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
                    target: LOG_TARGET,
                    "group shard {key} is no longer used here, but its leader (server {leader}) did not answer ({}); it stays until that leader's next start",
                    e.message
                );
            }
        }
        let sweep = t.group_on()
            && t.group_leader() == self.host.rank()
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
                    for (tier, key, _) in list {
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
                        target: LOG_TARGET,
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
        let mine = format!("{}/", t.group_prefix_of(self.host.rank()));
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
                            target: LOG_TARGET,
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
}
