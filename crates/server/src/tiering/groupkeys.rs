//! Group shard keys and roles (`[shard] servers`): which ranks form this server's group, who
//! leads it, and the blob keys a group's shards are put under (the passes themselves are the
//! flusher's, `crate::flusher`).

use super::placement::{candidates, TierHint, TierView};
use super::Tiering;

impl Tiering {
    /// True when shards are formed by groups of several servers.
    pub fn group_on(&self) -> bool {
        self.group > 1
    }

    /// The leader (lowest rank) of this server's shard group.
    pub fn group_leader(&self) -> u32 {
        self.rank - self.rank % self.group.max(1)
    }

    /// The ranks of this server's shard group.
    pub fn group_members(&self) -> std::ops::Range<u32> {
        let l = self.group_leader();
        l..l.saturating_add(self.group).min(self.size)
    }

    pub(crate) fn group_prefix_of(&self, leader: u32) -> String {
        format!("{}/g{leader:04}", self.deployment)
    }

    /// The key of a group shard this server (a leader) puts, named after its first extent.
    pub fn group_shard_key(&self, id: u64, seq: u64) -> String {
        format!(
            "{}/shard/{id:016x}-{seq:016x}",
            self.group_prefix_of(self.group_leader())
        )
    }

    /// The server that acts for the leader of group shard `key` (releases it, repacks it):
    /// that leader while the deployment has it and it leads a group, else the leader of the
    /// group its rank falls in modulo the server count (after a resize, or a change of
    /// `shard.servers`). None for any other key.
    pub fn acting_leader_of(&self, key: &str) -> Option<u32> {
        let r = self.group_leader_of(key)? % self.size.max(1);
        Some(r - r % self.group.max(1))
    }

    /// The leader that put group shard `key`, or None for any other key.
    pub fn group_leader_of(&self, key: &str) -> Option<u32> {
        let rest = key.strip_prefix(&self.deployment)?.strip_prefix("/g")?;
        let (leader, tail) = rest.split_once('/')?;
        tail.starts_with("shard/")
            .then(|| leader.parse().ok())
            .flatten()
    }

    /// Whether an extent of `raw_len` bytes with this placement waits for its group's leader:
    /// group shards are on and its first choice is a tier every member reaches.
    pub(crate) fn waits_for_group(
        &self,
        hint: &TierHint,
        raw_len: u64,
        per: &[u64],
        views: &[TierView],
    ) -> bool {
        self.group_on()
            && candidates(hint, raw_len, per, views)
                .first()
                .is_some_and(|&i| self.off_node(i))
    }
}
