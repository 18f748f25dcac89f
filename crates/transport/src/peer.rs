//! The calls servers make to each other (`PeerRequest`), over connections that prove the
//! calling server's rank in their handshake.

use crate::cluster::ClusterFile;
use crate::conn::Conn;
use crate::pool::Pool;
use pdcx_core::protocol::{ObjectKey, PeerRequest, PeerResponse, Pieces, RegisterItem, Role};
use pdcx_core::{Error, ObjectId, ObjectMeta, Region, Result};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Server `rank`'s connections to the other servers of the deployment at `root`. The cluster
/// file is read on first use (rank 0 publishes it once every rank answers), and again after a
/// failed attempt.
pub struct PeerClient {
    root: PathBuf,
    rank: u32,
    pool: Mutex<Option<Arc<Pool<Conn>>>>,
}

fn unexpected(what: &str, r: PeerResponse) -> Error {
    Error::protocol(format!("unexpected reply to {what}: {r:?}"))
}

impl PeerClient {
    pub fn new(root: PathBuf, rank: u32) -> PeerClient {
        PeerClient {
            root,
            rank,
            pool: Mutex::new(None),
        }
    }

    /// The rank this server proves in its handshakes.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    fn pool(&self) -> Result<Arc<Pool<Conn>>> {
        let mut guard = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = guard.as_ref() {
            return Ok(p.clone());
        }
        let cluster = ClusterFile::load(&self.root)?;
        let p = Arc::new(Pool::new(&cluster, Some(self.root.clone()))?);
        *guard = Some(p.clone());
        Ok(p)
    }

    fn call(&self, to: u32, req: &PeerRequest) -> Result<(PeerResponse, Vec<u8>)> {
        let role = Role::Peer { rank: self.rank };
        let open = |addr: &str, secret: &[u8]| Conn::connect_as(addr, secret, role);
        self.pool()?.with_conn(to, &open, &mut |c| c.peer_call(req))
    }

    /// The metadata of object `id` from its owner.
    pub fn object(&self, owner: u32, id: ObjectId) -> Result<ObjectMeta> {
        let size = self.pool()?.size();
        if owner >= size {
            return Err(Error::not_found(format!(
                "object id {id:#x} names server {owner}, which does not exist"
            )));
        }
        match self.call(owner, &PeerRequest::Object { id })? {
            (PeerResponse::Object(o), _) => Ok(o),
            (r, _) => Err(unexpected("object", r)),
        }
    }

    /// Forwards a lookup to the object's owner for `riders` client requests.
    pub fn lookup(&self, owner: u32, key: &ObjectKey, riders: u32) -> Result<ObjectMeta> {
        let req = PeerRequest::Lookup {
            key: key.clone(),
            riders: riders.max(1),
        };
        match self.call(owner, &req)? {
            (PeerResponse::Object(o), _) => Ok(o),
            (r, _) => Err(unexpected("lookup", r)),
        }
    }

    /// Registers regions this server committed of objects `owner` owns; one sequence number
    /// per item (see `PeerRequest::Register`).
    pub fn register(&self, owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        let req = PeerRequest::Register {
            items: items.to_vec(),
        };
        match self.call(owner, &req)? {
            (PeerResponse::Seqs(s), _) if s.len() == items.len() => Ok(s),
            (r, _) => Err(unexpected("register", r)),
        }
    }

    /// `holder`'s committed pieces of `region` of object `id`.
    pub fn read_pieces(&self, holder: u32, id: ObjectId, region: &Region) -> Result<Pieces> {
        let req = PeerRequest::ReadPieces {
            id,
            region: region.clone(),
        };
        match self.call(holder, &req)? {
            (PeerResponse::Pieces(list), bytes) => Ok((list, bytes)),
            (r, _) => Err(unexpected("read pieces", r)),
        }
    }
}
