//! The calls servers make to each other (`PeerRequest`), over connections that prove the
//! calling server's rank in their handshake.

use crate::cluster::ClusterFile;
use crate::conn::Conn;
use crate::pool::Pool;
use pdcx_core::model::Tags;
use pdcx_core::protocol::{
    Credential, ObjectKey, PeerRequest, PeerResponse, Pieces, RegisterItem, Role, UploadPart,
};
use pdcx_core::{Error, ObjectId, ObjectMeta, Region, Result};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Server `rank`'s connections to the other servers of the deployment at `root`. The cluster
/// file is read on first use (rank 0 publishes it once every rank answers), and again after a
/// failed attempt.
pub struct PeerClient {
    root: PathBuf,
    rank: u32,
    pool: Mutex<Option<Peers>>,
}

/// The pool, and per server the Unix-domain listener to try first (servers on this server's
/// node that advertise one; `PDCX_UNIX=0` turns it off).
#[derive(Clone)]
struct Peers {
    pool: Arc<Pool<Conn>>,
    unix: Arc<Vec<Option<String>>>,
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

    fn peers(&self) -> Result<Peers> {
        let mut guard = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = guard.as_ref() {
            return Ok(p.clone());
        }
        let cluster = ClusterFile::load(&self.root)?;
        let mine = cluster.servers.get(self.rank as usize).map(|s| s.node());
        let on = crate::stream::unix_enabled_by_env();
        let unix = cluster
            .servers
            .iter()
            .map(|s| (on && Some(s.node()) == mine && !s.unix.is_empty()).then(|| s.unix.clone()))
            .collect();
        let p = Peers {
            pool: Arc::new(Pool::new(&cluster, Some(self.root.clone()))?),
            unix: Arc::new(unix),
        };
        *guard = Some(p.clone());
        Ok(p)
    }

    fn pool(&self) -> Result<Arc<Pool<Conn>>> {
        Ok(self.peers()?.pool)
    }

    /// Any peer request to server `to`: the reply and its payload.
    pub fn call(&self, to: u32, req: &PeerRequest) -> Result<(PeerResponse, Vec<u8>)> {
        let role = Role::Peer { rank: self.rank };
        let peers = self.peers()?;
        let unix = peers.unix.get(to as usize).cloned().flatten();
        // A server on this node is reached over its Unix socket when that works and answers as
        // the rank asked for; else over TCP, as always.
        let open = |addr: &str, cred: &Credential| {
            if let Some(spec) = &unix {
                match Conn::connect_unix_with(spec, cred, role) {
                    Ok(c) if c.rank == to => return Ok(c),
                    _ => {}
                }
            }
            Conn::connect_with(addr, cred, role)
        };
        peers.pool.with_conn(to, &open, &mut |c| c.peer_call(req))
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

    /// Which of writes `seqs` of `id` server `holder` holds, made durable there first.
    pub fn confirm_held(&self, holder: u32, id: ObjectId, seqs: &[u64]) -> Result<Vec<u64>> {
        let req = PeerRequest::ConfirmHeld {
            id,
            seqs: seqs.to_vec(),
        };
        match self.call(holder, &req)? {
            (PeerResponse::Held(h), _) => Ok(h),
            (r, _) => Err(unexpected("confirm held", r)),
        }
    }

    /// The tags of containers `names`, all hashing to server `to` (None: no such container).
    pub fn container_tags(&self, to: u32, names: &[String]) -> Result<Vec<Option<Tags>>> {
        let req = PeerRequest::ContainerTags {
            names: names.to_vec(),
        };
        match self.call(to, &req)? {
            (PeerResponse::ContainerTags(t), _) if t.len() == names.len() => Ok(t),
            (r, _) => Err(unexpected("container tags", r)),
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

    /// [`register`](Self::register) of `memory`-durability writes: the owner answers without
    /// waiting for its metadata WAL fsync (see `PeerRequest::RegisterMemory`).
    pub fn register_memory(&self, owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        let req = PeerRequest::RegisterMemory {
            items: items.to_vec(),
        };
        match self.call(owner, &req)? {
            (PeerResponse::Seqs(s), _) if s.len() == items.len() => Ok(s),
            (r, _) => Err(unexpected("register", r)),
        }
    }

    /// Has `holder` upload one part of a version's multipart upload; returns its ETag.
    pub fn upload_part(&self, holder: u32, part: &UploadPart) -> Result<String> {
        match self.call(holder, &PeerRequest::UploadPart(part.clone()))? {
            (PeerResponse::PartUploaded { etag }, _) => Ok(etag),
            (r, _) => Err(unexpected("upload part", r)),
        }
    }

    /// Has `holder` drop its extents `seqs` of `id`; how many it dropped.
    pub fn drop_extents(&self, holder: u32, id: ObjectId, seqs: &[u64]) -> Result<u64> {
        let req = PeerRequest::DropExtents {
            id,
            seqs: seqs.to_vec(),
        };
        match self.call(holder, &req)? {
            (PeerResponse::Dropped { count }, _) => Ok(count),
            (r, _) => Err(unexpected("drop extents", r)),
        }
    }

    /// Tells `owner` this server is dropping `writes` of its objects, which breaks the
    /// versions `gone`, and which of its deferred-write tokens are settled
    /// (`PeerRequest::Released`); how many rows it forgot.
    pub fn released(
        &self,
        owner: u32,
        writes: &[(ObjectId, Vec<u64>)],
        gone: &[(ObjectId, u64, u64)],
        tokens_below: u64,
    ) -> Result<u64> {
        let req = PeerRequest::Released {
            writes: writes.to_vec(),
            gone: gone.to_vec(),
            tokens_below,
        };
        match self.call(owner, &req)? {
            (PeerResponse::Dropped { count }, _) => Ok(count),
            (r, _) => Err(unexpected("released", r)),
        }
    }

    /// A group-shard request (`PeerRequest::Shard*`, the server's `tiering` module builds and
    /// reads them) to server `to`: the reply and its payload.
    pub fn shard_call(&self, to: u32, req: &PeerRequest) -> Result<(PeerResponse, Vec<u8>)> {
        self.call(to, req)
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
