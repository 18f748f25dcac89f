//! How a server reaches the other servers of its deployment: a client of the cluster file,
//! opened on first use (the file is only complete once every rank is up), plus a cache of
//! the metadata of objects other servers own and this one holds data of.

use crate::engine::{Peers, Pieces};
use pdcx_client::Client;
use pdcx_core::model::owner_of_id;
use pdcx_core::protocol::{ObjectKey, RegisterItem};
use pdcx_core::{Error, ObjectId, ObjectMeta, Region, Result};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, RwLock};

pub struct ClusterPeers {
    root: PathBuf,
    rank: u32,
    client: Mutex<Option<Client>>,
    objects: RwLock<HashMap<ObjectId, ObjectMeta>>,
}

impl ClusterPeers {
    pub fn new(root: PathBuf, rank: u32) -> ClusterPeers {
        ClusterPeers {
            root,
            rank,
            client: Mutex::new(None),
            objects: RwLock::new(HashMap::new()),
        }
    }

    fn client(&self) -> Result<Client> {
        let mut guard = self.client.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = guard.as_ref() {
            return Ok(c.clone());
        }
        let c = Client::connect(Some(&self.root))?;
        // A server asks owners directly: relaying through a node-local server would only add
        // a hop (and could come back here).
        c.set_aggregation(false);
        *guard = Some(c.clone());
        Ok(c)
    }
}

impl ClusterPeers {
    /// Forwards a client's lookup to the object's owner on behalf of `riders` client requests
    /// (per-node aggregation, `relay.rs`).
    pub fn lookup(&self, owner: u32, key: &ObjectKey, riders: u32) -> Result<ObjectMeta> {
        self.client()?.lookup_relayed(owner, key, riders)
    }
}

impl Peers for ClusterPeers {
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
        debug_assert_ne!(owner_of_id(id), self.rank);
        let meta = self.client()?.get_object(id)?;
        self.objects
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, meta.clone());
        Ok(meta)
    }

    fn register(&self, owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        self.client()?
            .register_batch(owner, self.rank, items)
            .map_err(|e| {
                Error::new(
                    e.kind,
                    format!(
                        "could not record the write with server {owner}, the objects' owner: {}",
                        e.message
                    ),
                )
            })
    }

    fn pieces(&self, holder: u32, id: ObjectId, region: &Region) -> Result<Pieces> {
        self.client()?
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
