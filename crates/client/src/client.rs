//! The client: routes metadata calls to the owning server (name hash / id prefix), fans
//! deployment-wide listings and queries out to every server, and does synchronous I/O.
//! Lookups of objects (open by name, metadata by id) owned by another server go through the
//! node-local server, which aggregates identical ones from this node's clients (`relay.rs` in
//! the server).

use crate::conn::Conn;
use crate::direct::Outcome;
use crate::direct_write::WriteBehind;
use crate::filecache::Window;
use crate::shm::{self, Payload, ShmPool};
use crate::worker::Worker;
use pdcx_core::model::{owner_of_id, validate_name, Tags};
use pdcx_core::placement::{data_server, PlacementInput};
use pdcx_core::protocol::{
    admin, analysis, catalog, handshake, read, stream, write, Call, CommitOpts, CompactReport,
    Consistency, Credential, Durability, ExtentInfo, FlushReport, Moved, ObjectKey, ObjectSpec,
    ReadItem, ReadOpts, ReadPlans, Request, Role, Selection, ServerStats, StageItem, TagTarget,
};
use pdcx_core::{
    owner_of_name, Condition, ContainerInfo, Error, ErrorKind, ObjectId, ObjectMeta, Placement,
    Region, Result,
};
use pdcx_transport::cluster::{root_from_env, ClusterFile};
use pdcx_transport::pool::Pool;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

mod admin_calls;
mod analysis_calls;
mod catalog_calls;
mod read_calls;
mod write_calls;

pub(crate) use read_calls::read_plans;
pub(crate) use write_calls::{commit_opts, Uncommitted};

/// Reads at least this large ask the owner where their region lives (one small round trip per
/// owner per batch) so that a region held by one other server is read there directly; smaller
/// ones go through the owner, which merges for them.
pub(crate) const LOCATE_MIN_BYTES: usize = 256 << 10;

pub(crate) struct Inner {
    pub cluster: ClusterFile,
    /// One pooled connection per server for synchronous calls (and the addresses and secret
    /// every connection of this client uses).
    pool: Pool<Conn>,
    pub(crate) workers: Vec<OnceLock<Worker>>,
    txn_base: u64,
    txn_counter: AtomicU64,
    /// What file opens learn and cache (`filecache.rs`).
    pub(crate) files: crate::filecache::FileMemory,
    /// This client's node-local server.
    local: AtomicU32,
    /// Send lookups of objects owned elsewhere through the node-local server (on when that
    /// server is on this node and `PDCX_AGGREGATE` is not 0).
    aggregate: AtomicBool,
    /// Per-object consistency of this client's writes (absent: strong).
    consistency: Mutex<HashMap<ObjectId, Consistency>>,
    /// Servers holding relaxed writes of each object that this client waited and has not
    /// synced yet (where `sync` must go).
    relaxed_at: Mutex<HashMap<ObjectId, BTreeSet<u32>>>,
    placement: AtomicU8,
    /// Region-local: writes smaller than this go to a same-node owner (`PDCX_SMALL_WRITE_TO_OWNER`).
    small_to_owner: AtomicU64,
    /// Write bytes started but not yet delivered, per server (region-dynamic placement).
    pub(crate) in_flight: Vec<AtomicU64>,
    /// Shared-memory arenas for bulk data, when some server is on this node and `PDCX_SHM`
    /// allows it.
    pub(crate) shm: Option<Arc<ShmPool>>,
    /// Per server: on this client's node (shared memory may be used with it).
    same_node: Vec<bool>,
    /// Per server: it refused to map an arena, so its connections use TCP.
    shm_refused: Vec<Arc<AtomicBool>>,
    /// Per server on this node: its Unix-domain listener, the cheaper channel every connection
    /// tries first (falling back to TCP when it fails); None for other servers, servers
    /// without one, or with `PDCX_UNIX=0`.
    unix: Vec<Option<String>>,
    /// Creates: owners holding metadata changes of this client answered
    /// at commit (lazy creates and tag puts) and not yet known to be on stable storage; the
    /// next consistency point sends them `SyncMeta`.
    lazy_at: Mutex<BTreeSet<u32>>,
    /// Containers this client saw exist recently (a create checks its containers here before
    /// asking their owners again).
    containers_seen: Mutex<HashMap<String, std::time::Instant>>,
    /// One-copy reads from the segment logs of servers on this node;
    /// None when no server is on this node or `PDCX_DIRECT_READ=0`.
    pub(crate) direct: Option<crate::direct::DirectReads>,
    /// One-copy writes into the logs of servers on this node (`direct_write.rs`).
    pub(crate) direct_write: Option<crate::direct_write::DirectWrites>,
    /// The creator name of this client's creates, looked up once (`getpwuid_r` reads the
    /// passwd database, a dozen syscalls per create otherwise).
    user: OnceLock<String>,
}

/// How long a container seen to exist is trusted by creates without asking its owner again.
/// A container deleted by another client within this window can still receive a membership
/// (as when the delete had come right after the create).
const CONTAINER_SEEN_TTL: std::time::Duration = std::time::Duration::from_secs(2);

/// A handle to one deployment. Cheap to clone; safe to share between threads.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

/// Objects per `CreateObjects` request: large enough to amortise the round trip and the fsync,
/// small enough to stay far below the 64 MiB body limit with generous tags.
const CREATE_BATCH: usize = 4096;

impl Client {
    /// Joins the deployment at `root`, or at `PDCX_ROOT` when `root` is None.
    pub fn connect(root: Option<&Path>) -> Result<Client> {
        let root = root_from_env(root).ok_or_else(|| {
            Error::new(
                ErrorKind::Unavailable,
                "no deployment given: pass a root directory or set PDCX_ROOT",
            )
        })?;
        let (cluster, cred) = ClusterFile::join(&root)?;
        Self::from_cluster_at(cluster, Some(root), cred)
    }

    pub fn from_cluster(cluster: ClusterFile) -> Result<Client> {
        let cred = Credential::deployment(&cluster.secret_bytes()?);
        Self::from_cluster_at(cluster, None, cred)
    }

    /// A client of `cluster`, proving itself with `cred`; with `root`, it follows a restarted
    /// deployment to its new ports.
    fn from_cluster_at(
        cluster: ClusterFile,
        root: Option<PathBuf>,
        cred: Credential,
    ) -> Result<Client> {
        // Shared memory and the one-copy paths reach the deployment's own files and memory:
        // only its own user's processes use them (servers refuse them to anyone else).
        let own_user = cred.user.is_none();
        let pool = Pool::with_credential(&cluster, root, cred);
        let n = cluster.size as usize;
        let txn_base = (rand::random::<u32>() as u64) << 32;
        let placement = match pdcx_core::config::PLACEMENT.text() {
            Some(v) => Placement::parse(&v)
                .map_err(|e| Error::invalid(format!("PDCX_PLACEMENT: {}", e.message)))?,
            None => Placement::default(),
        };
        let small_to_owner = pdcx_core::config::SMALL_WRITE_TO_OWNER
            .size()
            .map_err(|e| Error::invalid(e.to_string()))?;
        let node = this_node();
        let same_node: Vec<bool> = cluster.servers.iter().map(|s| s.node() == node).collect();
        let shm = if !same_node.contains(&true) || !own_user {
            None
        } else if shm::enabled_by_env() {
            Some(Arc::new(ShmPool::new(&pool.credential().key)))
        } else {
            shm::debug("shm: disabled by PDCX_SHM; bulk data goes over TCP");
            None
        };
        let unix_ok = pdcx_transport::stream::unix_enabled_by_env();
        let unix = cluster
            .servers
            .iter()
            .zip(&same_node)
            .map(|(s, &same)| (unix_ok && same && !s.unix.is_empty()).then(|| s.unix.clone()))
            .collect();
        let local = local_server(&cluster);
        let on_node = cluster
            .servers
            .get(local as usize)
            .is_some_and(|s| s.node() == this_node());
        let aggregate = on_node && pdcx_core::config::AGGREGATE.switch_or_default();
        let direct = (own_user && same_node.contains(&true) && crate::direct::enabled_by_env())
            .then(crate::direct::DirectReads::default);
        let direct_write =
            (own_user && same_node.contains(&true) && crate::direct_write::enabled_by_env())
                .then(crate::direct_write::DirectWrites::default);
        let inner = Inner {
            direct,
            direct_write,
            shm,
            same_node,
            shm_refused: (0..n).map(|_| Arc::new(AtomicBool::new(false))).collect(),
            unix,
            local: AtomicU32::new(local),
            aggregate: AtomicBool::new(aggregate),
            consistency: Mutex::new(HashMap::new()),
            relaxed_at: Mutex::new(HashMap::new()),
            placement: AtomicU8::new(placement_code(placement)),
            small_to_owner: AtomicU64::new(small_to_owner),
            in_flight: (0..n).map(|_| AtomicU64::new(0)).collect(),
            pool,
            workers: (0..n).map(|_| OnceLock::new()).collect(),
            cluster,
            txn_base,
            txn_counter: AtomicU64::new(1),
            files: crate::filecache::FileMemory::from_env(),
            lazy_at: Mutex::new(BTreeSet::new()),
            containers_seen: Mutex::new(HashMap::new()),
            user: OnceLock::new(),
        };
        let client = Client {
            inner: Arc::new(inner),
        };
        client.call(0, handshake::Ping {})?;
        Ok(client)
    }

    pub fn size(&self) -> u32 {
        self.inner.cluster.size
    }

    pub fn cluster(&self) -> &ClusterFile {
        &self.inner.cluster
    }

    pub fn root(&self) -> Option<&Path> {
        self.inner.pool.root()
    }

    /// This client's node-local server: the one that receives its data under region-local
    /// placement.
    pub fn local_server(&self) -> u32 {
        self.inner.local.load(Ordering::Relaxed)
    }

    /// Makes server `rank` this client's node-local server (placement and lookups), e.g. for
    /// a launcher this library cannot read the node-local rank of.
    pub fn set_local_server(&self, rank: u32) -> Result<()> {
        if rank >= self.size() {
            return Err(Error::invalid(format!(
                "no server with rank {rank} (the deployment has {})",
                self.size()
            )));
        }
        self.inner.local.store(rank, Ordering::Relaxed);
        Ok(())
    }

    /// Whether lookups of objects owned by other servers go through the node-local server,
    /// which aggregates identical ones of this node's clients.
    pub fn aggregation(&self) -> bool {
        self.inner.aggregate.load(Ordering::Relaxed)
    }

    pub fn set_aggregation(&self, on: bool) {
        self.inner.aggregate.store(on, Ordering::Relaxed);
    }

    /// The consistency of this client's later writes of object `id` (default strong).
    pub fn consistency(&self, id: ObjectId) -> Consistency {
        self.inner
            .consistency
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .copied()
            .unwrap_or_default()
    }

    /// Sets the consistency of this client's later writes of object `id` (transfers take it
    /// when they are created). Relaxed writes are durable at `wait` and visible after the
    /// next [`sync`](Self::sync), after `expected_writes` of them, or on the data server's
    /// timer (see `ARCHITECTURE.md`).
    pub fn set_consistency(&self, id: ObjectId, c: Consistency) {
        let mut map = self
            .inner
            .consistency
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match c {
            Consistency::Strong => map.remove(&id),
            c => map.insert(id, c),
        };
    }

    /// Remembers that server `dest` holds a relaxed write of `id` waited by this client.
    pub(crate) fn note_relaxed(&self, id: ObjectId, dest: u32) {
        self.inner
            .relaxed_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id)
            .or_default()
            .insert(dest);
    }

    /// The consistency point of relaxed writes: each server holding relaxed writes of `ids`
    /// that this client waited registers them (and any other deferred writes of those objects
    /// it holds) with the owners. When this returns they are visible to every reader. Strong
    /// objects and objects without such writes cost nothing.
    pub fn sync(&self, ids: &[ObjectId]) -> Result<()> {
        let mut per_server: BTreeMap<u32, Vec<ObjectId>> = BTreeMap::new();
        {
            // Taken out before the requests: a relaxed write waited meanwhile puts its server
            // back, so it is not forgotten by this sync.
            let mut at = self
                .inner
                .relaxed_at
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            for id in ids {
                for s in at.remove(id).into_iter().flatten() {
                    per_server.entry(s).or_default().push(*id);
                }
            }
        }
        let mut first_err = None;
        for (server, ids) in per_server {
            if let Err(e) = self.call(server, write::SyncObjects { ids: ids.clone() }) {
                for id in ids {
                    self.note_relaxed(id, server);
                }
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// [`sync`](Self::sync) of every object with relaxed writes this client has not synced,
    /// and [`sync_metadata`](Self::sync_metadata).
    pub fn sync_all(&self) -> Result<()> {
        let meta = self.sync_metadata();
        let ids: Vec<ObjectId> = self
            .inner
            .relaxed_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .copied()
            .collect();
        let data = self.sync(&ids);
        meta.and(data)
    }

    pub fn placement(&self) -> Placement {
        PLACEMENTS[self.inner.placement.load(Ordering::Relaxed) as usize]
    }

    /// Where the data of later writes goes (default region-local, or `PDCX_PLACEMENT`).
    pub fn set_placement(&self, p: Placement) {
        self.inner
            .placement
            .store(placement_code(p), Ordering::Relaxed);
    }

    /// Region-local writes smaller than `bytes` go to the object's owner when it is on this
    /// node (0: never; the default is `PDCX_SMALL_WRITE_TO_OWNER`).
    pub fn set_small_write_to_owner(&self, bytes: u64) {
        self.inner.small_to_owner.store(bytes, Ordering::Relaxed);
    }

    /// The server that stores the bytes of a write of `region` of object `id`, `len` bytes
    /// (a batch: all of its bytes).
    pub fn data_server(&self, id: ObjectId, region: &Region, len: u64) -> Result<u32> {
        let owner = self.id_owner(id)?;
        let in_flight: Vec<u64> = self
            .inner
            .in_flight
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect();
        Ok(data_server(
            self.placement(),
            &PlacementInput {
                owner,
                local: self.local_server(),
                size: self.size(),
                region,
                in_flight: &in_flight,
                len,
                owner_on_node: self.inner.same_node.get(owner as usize) == Some(&true),
                small_to_owner: self.inner.small_to_owner.load(Ordering::Relaxed),
            },
        ))
    }

    pub(crate) fn next_txn(&self) -> u64 {
        self.inner.txn_base | self.inner.txn_counter.fetch_add(1, Ordering::Relaxed)
    }

    /// A new connection to server `rank` (not pooled), with shared memory enabled when the
    /// server is on this node.
    pub(crate) fn open_conn(&self, rank: u32) -> Result<Conn> {
        self.inner
            .pool
            .open(rank, &|addr, cred| self.connect_at(rank, addr, cred))
    }

    fn connect_at(&self, rank: u32, addr: &str, cred: &Credential) -> Result<Conn> {
        let mut conn = match self.connect_unix(rank, cred) {
            Some(c) => c,
            None => Conn::connect_with(addr, cred, Role::Client)?,
        };
        if let (Some(pool), Some(true)) = (&self.inner.shm, self.inner.same_node.get(rank as usize))
        {
            conn.enable_shm(pool.clone(), self.inner.shm_refused[rank as usize].clone());
        }
        Ok(conn)
    }

    /// A connection to server `rank` over its Unix-domain listener, if it is on this node and
    /// has one that answers as that rank; None means use TCP (a listener that cannot be
    /// reached, e.g. from another network namespace, or a stale one, is no error).
    fn connect_unix(&self, rank: u32, cred: &Credential) -> Option<Conn> {
        let spec = self.inner.unix.get(rank as usize)?.as_deref()?;
        match Conn::connect_unix_with(spec, cred, Role::Client) {
            Ok(c) if c.rank == rank => Some(c),
            Ok(c) => {
                shm::debug(&format!(
                    "unix: {spec} answers as server {}, not {rank}; using TCP",
                    c.rank
                ));
                None
            }
            Err(e) => {
                shm::debug(&format!("unix: {}; using TCP", e.message));
                None
            }
        }
    }

    /// Whether the pooled connection to server `rank` runs over its Unix-domain socket (it
    /// is opened if need be). For tests and diagnostics.
    pub fn uses_unix(&self, rank: u32) -> Result<bool> {
        self.with_conn(rank, &mut |c| Ok(c.is_unix()))
    }

    /// Whether bulk data to server `rank` goes through shared memory (as far as known yet:
    /// the server may still refuse the first arena).
    pub fn shm_active(&self, rank: u32) -> bool {
        self.inner.shm.is_some()
            && self.inner.same_node.get(rank as usize) == Some(&true)
            && !self.inner.shm_refused[rank as usize].load(Ordering::Relaxed)
    }

    /// A buffer of `len` bytes for a write's data, filled by `fill`: an arena block when
    /// shared memory is in use with some server, else heap memory.
    pub(crate) fn payload_with(&self, len: usize, fill: impl FnOnce(&mut [u8])) -> Payload {
        // Where the data goes is decided at `start`; any server that may still take arenas
        // makes a block worth it (sending a block over TCP costs no extra copy either).
        let usable = (0..self.size()).any(|r| self.shm_active(r));
        if let Some(mut b) = usable
            .then(|| self.inner.shm.as_ref()?.alloc(len))
            .flatten()
        {
            fill(b.as_mut_slice());
            return Payload::Shm(b);
        }
        let mut v = vec![0u8; len];
        fill(&mut v);
        Payload::Heap(v)
    }

    /// Runs `f` on the pooled connection to `rank`, reconnecting once if the pooled one is dead.
    pub(crate) fn with_conn<T>(
        &self,
        rank: u32,
        f: &mut dyn FnMut(&mut Conn) -> Result<T>,
    ) -> Result<T> {
        let open = |addr: &str, cred: &Credential| self.connect_at(rank, addr, cred);
        self.inner.pool.with_conn(rank, &open, f)
    }

    /// Sends one operation to server `rank` and returns its typed reply (`Call::reply`: a
    /// reply of another operation is one protocol error).
    pub(crate) fn call<C: Call>(&self, rank: u32, req: C) -> Result<C::Reply> {
        let req: Request = req.into();
        let resp = self.with_conn(rank, &mut |c| c.call(&req, &[]).map(|(r, _)| r))?;
        C::reply(resp)
    }

    /// `call` of the same operation at every server.
    fn call_all<C: Call + Clone>(&self, req: C) -> Result<Vec<C::Reply>> {
        (0..self.size())
            .map(|r| self.call(r, req.clone()))
            .collect()
    }

    /// The server owning object `id`: its home modulo the server count (any id routes; one
    /// no server made is not found there).
    pub fn id_owner(&self, id: ObjectId) -> Result<u32> {
        Ok(owner_of_id(id, self.size()))
    }
}

const PLACEMENTS: [Placement; 4] = [
    Placement::ObjectStatic,
    Placement::RegionStatic,
    Placement::RegionDynamic,
    Placement::RegionLocal,
];

fn placement_code(p: Placement) -> u8 {
    PLACEMENTS.iter().position(|&x| x == p).unwrap_or(3) as u8
}

pub use pdcx_transport::cluster::this_node;

/// Picks this process's node-local server: among the servers on this node, the one at
/// (node-local rank from the launcher, else pid) modulo their count, so the ranks of a node
/// spread over its servers. A process on a node without servers (a login node) spreads over
/// all of them the same way.
fn local_server(cluster: &ClusterFile) -> u32 {
    let node = this_node();
    let mut on_node: Vec<u32> = cluster
        .servers
        .iter()
        .filter(|s| s.node() == node)
        .map(|s| s.rank)
        .collect();
    if on_node.is_empty() {
        on_node = cluster.servers.iter().map(|s| s.rank).collect();
    }
    let pick = [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "SLURM_LOCALID",
        "PMI_LOCAL_RANK",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.trim().parse::<usize>().ok())
    .unwrap_or(std::process::id() as usize);
    on_node
        .get(pick % on_node.len().max(1))
        .copied()
        .unwrap_or(0)
}

/// The creator recorded in system metadata: `$USER`, else the passwd name of the uid (batch
/// jobs and containers often run without `$USER`), else `uid<N>`.
pub fn current_user() -> String {
    if let Ok(u) = std::env::var("USER").or_else(|_| std::env::var("LOGNAME")) {
        if !u.is_empty() {
            return u;
        }
    }
    let uid = unsafe { libc::getuid() };
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: getpwuid_r writes only into `pw` and `buf`, which outlive the call.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc == 0 && !result.is_null() && !pw.pw_name.is_null() {
        // SAFETY: on success pw_name points to a NUL-terminated string inside `buf`.
        let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
        return name.to_string_lossy().into_owned();
    }
    format!("uid{uid}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn creator_falls_back_to_the_passwd_name() {
        let saved = (std::env::var_os("USER"), std::env::var_os("LOGNAME"));
        std::env::remove_var("USER");
        std::env::remove_var("LOGNAME");
        let name = super::current_user();
        if let Some(v) = saved.0 {
            std::env::set_var("USER", v);
        }
        if let Some(v) = saved.1 {
            std::env::set_var("LOGNAME", v);
        }
        // This machine's uid has a passwd entry (root in CI), so the fallback must find it.
        let uid = unsafe { libc::getuid() };
        let in_passwd = std::fs::read_to_string("/etc/passwd")
            .unwrap_or_default()
            .lines()
            .any(|l| {
                l.split(':').nth(2) == Some(&uid.to_string()) && l.starts_with(&format!("{name}:"))
            });
        assert!(
            in_passwd,
            "expected a passwd name for uid {uid}, got {name:?}"
        );
    }
}
