//! How a server reaches the other servers of its deployment: the transport's peer client
//! (server-to-server requests over connections that prove this server's rank; the cluster
//! file is read on first use, since it is only complete once every rank is up), plus a cache
//! of the metadata of objects other servers own and this one holds data of.

use crate::engine::{Peers, Pieces};
use pdcx_core::model::owner_of_id;
use pdcx_core::protocol::{ObjectKey, RegisterItem};
use pdcx_core::{Error, ObjectId, ObjectMeta, Region, Result};
use pdcx_transport::PeerClient;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::RwLock;

pub struct ClusterPeers {
    rank: u32,
    size: u32,
    peers: PeerClient,
    objects: RwLock<HashMap<ObjectId, ObjectMeta>>,
}

impl ClusterPeers {
    pub fn new(root: PathBuf, rank: u32, size: u32) -> ClusterPeers {
        ClusterPeers {
            rank,
            size,
            peers: PeerClient::new(root, rank),
            objects: RwLock::new(HashMap::new()),
        }
    }

    /// Forwards a client's lookup to the object's owner on behalf of `riders` client requests
    /// (per-node aggregation, `relay.rs`). A server asks owners directly: relaying through
    /// another server would only add a hop.
    pub fn lookup(&self, owner: u32, key: &ObjectKey, riders: u32) -> Result<ObjectMeta> {
        self.peers.lookup(owner, key, riders)
    }
}

impl Peers for ClusterPeers {
    fn confirm_held(&self, holder: u32, id: ObjectId, seqs: &[u64]) -> Result<Vec<u64>> {
        self.peers.confirm_held(holder, id, seqs)
    }

    fn container_tags(
        &self,
        owner: u32,
        names: &[String],
    ) -> Result<Vec<Option<pdcx_core::model::Tags>>> {
        self.peers.container_tags(owner, names)
    }

    fn object(&self, id: ObjectId, fresh: bool) -> Result<ObjectMeta> {
        if !fresh {
            if let Some(m) = self
                .objects
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(&id)
            {
                return Ok(m.clone());
            }
        }
        let owner = owner_of_id(id, self.size);
        debug_assert_ne!(owner, self.rank);
        let meta = self.peers.object(owner, id)?;
        self.objects
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, meta.clone());
        Ok(meta)
    }

    fn register(&self, owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        self.peers.register(owner, items).map_err(|e| {
            Error::new(
                e.kind,
                format!(
                    "could not record the write with server {owner}, the objects' owner: {}",
                    e.message
                ),
            )
        })
    }

    fn register_memory(&self, owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        self.peers.register_memory(owner, items).map_err(|e| {
            Error::new(
                e.kind,
                format!(
                    "could not record the write with server {owner}, the objects' owner: {}",
                    e.message
                ),
            )
        })
    }

    fn upload_part(&self, holder: u32, part: &pdcx_core::protocol::UploadPart) -> Result<String> {
        self.peers.upload_part(holder, part).map_err(|e| {
            Error::new(
                e.kind,
                format!(
                    "server {holder} could not upload part {} of s3://{}/{}: {}",
                    part.part, part.bucket, part.key, e.message
                ),
            )
        })
    }

    fn shard_call(
        &self,
        to: u32,
        req: &pdcx_core::protocol::PeerRequest,
    ) -> Result<(pdcx_core::protocol::PeerResponse, Vec<u8>)> {
        self.peers.shard_call(to, req)
    }

    fn drop_extents(&self, holder: u32, id: ObjectId, seqs: &[u64]) -> Result<u64> {
        self.peers.drop_extents(holder, id, seqs)
    }

    fn released(
        &self,
        owner: u32,
        writes: &[(ObjectId, Vec<u64>)],
        gone: &[(ObjectId, u64, u64)],
        tokens_below: u64,
    ) -> Result<u64> {
        self.peers.released(owner, writes, gone, tokens_below)
    }

    fn extent_ranges(
        &self,
        holder: u32,
        id: ObjectId,
        region: &Region,
    ) -> Result<crate::engine::ExtentRanges> {
        let req = pdcx_core::protocol::PeerRequest::ExtentRanges {
            id,
            region: region.clone(),
        };
        match self.peers.call(holder, &req)? {
            (pdcx_core::protocol::PeerResponse::ExtentRanges(r), _) => Ok(r),
            (other, _) => Err(Error::protocol(format!(
                "server {holder} answered an extent-statistics request with {other:?}"
            ))),
        }
    }

    fn read_owned(&self, owner: u32, id: ObjectId, region: &Region) -> Result<Vec<u8>> {
        let req = pdcx_core::protocol::PeerRequest::ReadOwned {
            id,
            region: region.clone(),
        };
        match self.peers.call(owner, &req) {
            Ok((pdcx_core::protocol::PeerResponse::Pieces(_), bytes)) => Ok(bytes),
            Ok((other, _)) => Err(Error::protocol(format!(
                "server {owner} answered a read of object {id:#x} with {other:?}"
            ))),
            Err(e) => Err(Error::new(
                e.kind,
                format!(
                    "server {owner}, which owns object {id:#x}, did not answer a read: {}",
                    e.message
                ),
            )),
        }
    }

    fn pieces(&self, holder: u32, id: ObjectId, region: &Region) -> Result<Pieces> {
        self.peers
            .read_pieces(holder, id, region)
            .map_err(|e| Error::new(
                e.kind,
                format!(
                    "server {holder}, which holds part of region {region} of object {id:#x}, did not answer: {}",
                    e.message
                ),
            ))
    }
}
