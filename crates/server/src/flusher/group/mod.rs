//! Group shards: shards holding the extents of several servers (`[shard] servers = N | "all"`,
//! the object-sharding paper's strategy 1 and composite strategies 3-5).
//!
//! Servers are grouped by rank: group k is ranks [k*g, (k+1)*g) (one server per node in real
//! deployments); its lowest rank is the **leader**. Only tiers every member reaches qualify
//! (`shared`, `s3`: [`Tiering::off_node`]); elsewhere each server keeps its own blobs.
//!
//! - A member's flush pass leaves the extents whose first placement choice is such a tier in
//!   its log ([`Tiering::waits_for_group`]).
//! - The leader's pass asks every member for them, all at once (`ShardCandidates`: encoded as
//!   the member would store them, with the member's placement order), forms shards per
//!   (object group, placement) across all members' extents (cut at `max_bytes`), puts each
//!   blob once under `DEPLOYMENT/gLEADER/shard/`, and only after the put succeeded has each
//!   member record its homes durably (`RecordShardHomes`); the members' log segments then
//!   retire as usual.
//!   With an S3 or shared-directory tier only sizes travel: a shard on a shared directory is
//!   one file the members write their own extents into at their offsets (`UploadShardPart`,
//!   all at once, as collective I/O writes a shared file), which the leader publishes once
//!   every member answered; a shard of two parts or more on S3 is a multipart upload whose
//!   parts the members upload from their own extents; the others' bytes are fetched
//!   (`ShardBytes`) and put by the leader.
//! - Crash between the put and the members' records: the unrecorded extents are still only in
//!   their logs and are pulled again by a later pass (into a blob of the same or another key);
//!   a blob no server references is deleted by the leader's first pass after its start, but
//!   only when every server answered which group shards it references. A crash before a
//!   shared-directory shard is published leaves only its temporary, which the leader's tier
//!   removes when it next opens.
//! - A shard is deleted when no server references it any more: a server whose last reference
//!   went tells the leader (`ShardRelease`), which asks every server at its next pass and
//!   deletes the blob only if every one answered and none references it.
//!
//! Locks: the leader holds its `moves` for the whole group pass; a member's `RecordShardHomes`
//! takes the member's `moves` (serialising with its own puts, migrations and `remote` commits)
//! and then `records`; `ShardRefs` takes only `records`, and no handler sends a request while
//! holding a lock, so two servers' passes asking each other never wait on each other.
//!
//! - A shard mostly garbage is repacked: its leader learns every server's live bytes in it
//!   and has them move their extents out (`repack`, run by the compactor).
//!
//! By job: `member` answers the leader (candidates, bytes, parts, homes), `leader` runs the
//! leader's pass, `upload` has a shard written (shared directory) or uploaded (S3) by its
//! members, `repack` compacts shards mostly garbage (and answers which shards a server uses),
//! `sweep` deletes the group shards no server references; this module dispatches the
//! requests.

mod leader;
mod member;
mod repack;
mod sweep;
mod upload;

use crate::flusher::Flusher;
use crate::tiering::Tiering;
use member::{offered_bytes, upload_shard_part};
use pdcx_core::protocol::{PeerRequest, PeerResponse};
use pdcx_core::{Error, Result};

impl Flusher<'_> {
    /// Answers a group-shard request from server `from` (`api/peer.rs`).
    pub fn shard_request(&self, from: u32, req: PeerRequest) -> Result<(PeerResponse, Vec<u8>)> {
        let t = self
            .host
            .tiering()
            .cloned()
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
                self.host.store().retire_flushed()?;
                (PeerResponse::ShardRecorded { count }, Vec::new())
            }
            PeerRequest::ShardRefs { prefix } => (
                PeerResponse::ShardRefs(self.shard_refs(&t, &prefix)),
                Vec::new(),
            ),
            PeerRequest::RepackShards { shards } => {
                let (extents, bytes) = {
                    let _moves = t.moves.lock().unwrap_or_else(|p| p.into_inner());
                    self.move_out_of_shards(&t, from, &shards)?
                };
                (PeerResponse::ShardsRepacked { extents, bytes }, Vec::new())
            }
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

    /// Sends a group-shard request to server `to` (answered here when it is this server,
    /// except `RecordShardHomes`, which the group pass applies itself under its lock;
    /// `RepackShards` takes `moves` here as its handler does).
    fn shard_ask(&self, t: &Tiering, to: u32, req: PeerRequest) -> Result<(PeerResponse, Vec<u8>)> {
        if to == self.host.rank() {
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
                PeerRequest::RepackShards { shards } => {
                    let _moves = t.moves.lock().unwrap_or_else(|p| p.into_inner());
                    let (extents, bytes) = self.move_out_of_shards(t, to, &shards)?;
                    Ok((PeerResponse::ShardsRepacked { extents, bytes }, Vec::new()))
                }
                other => Err(Error::internal(format!(
                    "{} is not sent to this server itself",
                    other.name()
                ))),
            };
        }
        self.host.shard_call(to, &req)
    }
}
