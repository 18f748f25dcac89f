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
use crate::transfer::Worker;
use pdcx_core::model::{owner_of_id, validate_name, Tags};
use pdcx_core::placement::{data_server, PlacementInput};
use pdcx_core::protocol::{
    Consistency, Durability, ExtentInfo, FlushReport, ObjectKey, ObjectSpec, ReadItem, ReadPlans,
    Request, Response, ServerStats, StageItem, TagTarget,
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
    /// Creates (issue 10, item 5): owners holding metadata changes of this client answered
    /// at commit (lazy creates and tag puts) and not yet known to be on stable storage; the
    /// next consistency point sends them `SyncMeta`.
    lazy_at: Mutex<BTreeSet<u32>>,
    /// Containers this client saw exist recently (a create checks its containers here before
    /// asking their owners again).
    containers_seen: Mutex<HashMap<String, std::time::Instant>>,
    /// One-copy reads from the segment logs of servers on this node (issue 10, "reads");
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

fn unexpected(what: &str, r: Response) -> Error {
    Error::protocol(format!("unexpected reply to {what}: {r:?}"))
}

impl Client {
    /// Joins the deployment at `root`, or at `PDCX_ROOT` when `root` is None.
    pub fn connect(root: Option<&Path>) -> Result<Client> {
        let root = root_from_env(root).ok_or_else(|| {
            Error::new(
                ErrorKind::Unavailable,
                "no deployment given: pass a root directory or set PDCX_ROOT",
            )
        })?;
        let cluster = ClusterFile::load(&root)?;
        Self::from_cluster_at(cluster, Some(root))
    }

    pub fn from_cluster(cluster: ClusterFile) -> Result<Client> {
        Self::from_cluster_at(cluster, None)
    }

    /// A client of `cluster`; with `root`, it follows a restarted deployment to its new ports.
    fn from_cluster_at(cluster: ClusterFile, root: Option<PathBuf>) -> Result<Client> {
        let pool = Pool::new(&cluster, root)?;
        let secret = pool.secret().to_vec();
        let n = cluster.size as usize;
        let txn_base = (rand::random::<u32>() as u64) << 32;
        let placement = match pdcx_core::config::PLACEMENT.text() {
            Some(v) => Placement::parse(&v)
                .map_err(|e| Error::invalid(format!("PDCX_PLACEMENT: {}", e.message)))?,
            None => Placement::default(),
        };
        let node = this_node();
        let same_node: Vec<bool> = cluster.servers.iter().map(|s| s.node() == node).collect();
        let shm = if !same_node.contains(&true) {
            None
        } else if shm::enabled_by_env() {
            Some(Arc::new(ShmPool::new(&secret)))
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
        let direct = (same_node.contains(&true) && crate::direct::enabled_by_env())
            .then(crate::direct::DirectReads::default);
        let direct_write = (same_node.contains(&true) && crate::direct_write::enabled_by_env())
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
        client.call(0, &Request::Ping, &[])?;
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
            if let Err(e) = self.call(server, &Request::SyncObjects { ids: ids.clone() }, &[]) {
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

    /// The server that stores the bytes of a write of `region` of object `id`.
    pub fn data_server(&self, id: ObjectId, region: &Region) -> Result<u32> {
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
            .open(rank, &|addr, secret| self.connect_at(rank, addr, secret))
    }

    fn connect_at(&self, rank: u32, addr: &str, secret: &[u8]) -> Result<Conn> {
        let mut conn = match self.connect_unix(rank, secret) {
            Some(c) => c,
            None => Conn::connect(addr, secret)?,
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
    fn connect_unix(&self, rank: u32, secret: &[u8]) -> Option<Conn> {
        let spec = self.inner.unix.get(rank as usize)?.as_deref()?;
        match Conn::connect_unix(spec, secret) {
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
        let open = |addr: &str, secret: &[u8]| self.connect_at(rank, addr, secret);
        self.inner.pool.with_conn(rank, &open, f)
    }

    pub(crate) fn call(&self, rank: u32, req: &Request, payload: &[&[u8]]) -> Result<Response> {
        self.with_conn(rank, &mut |c| c.call(req, payload).map(|(r, _)| r))
    }

    fn call_all(&self, req: &Request) -> Result<Vec<Response>> {
        (0..self.size()).map(|r| self.call(r, req, &[])).collect()
    }

    pub fn container_owner(&self, name: &str) -> u32 {
        owner_of_name(name, self.size())
    }

    pub fn create_container(&self, name: &str, tags: Tags) -> Result<ContainerInfo> {
        validate_name("container", name)?;
        let req = Request::CreateContainer {
            name: name.into(),
            tags,
            creator: self.user().to_string(),
        };
        match self.call(self.container_owner(name), &req, &[])? {
            Response::Container(c) => Ok(c),
            r => Err(unexpected("create_container", r)),
        }
    }

    pub fn get_container(&self, name: &str) -> Result<ContainerInfo> {
        match self.call(
            self.container_owner(name),
            &Request::GetContainer { name: name.into() },
            &[],
        )? {
            Response::Container(c) => Ok(c),
            r => Err(unexpected("get_container", r)),
        }
    }

    pub fn list_containers(&self) -> Result<Vec<ContainerInfo>> {
        let mut all = Vec::new();
        for r in self.call_all(&Request::ListContainers)? {
            match r {
                Response::Containers(c) => all.extend(c),
                r => return Err(unexpected("list_containers", r)),
            }
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    /// Creates one object (one round trip; the owner answers from its in-memory catalog). When
    /// this returns the object exists at its owner: it is visible to every client (open by
    /// name, tag queries) and usable for transfers; a duplicate name or a bad spec has failed
    /// here, leaving nothing behind. It survives a crash of the owner (kill -9 or power loss)
    /// once the owner has written and fsynced its row, within about 5 ms by itself, and for
    /// certain after this client's next consistency point
    /// ([`sync_metadata`](Self::sync_metadata): any write, `sync_all`, C `PDCclose` /
    /// `PDCcont_close`, Python `Client.sync`/`close`); a crash before that loses it but never
    /// gives its id to another object. See ARCHITECTURE.md, "Creates".
    pub fn create_object(&self, mut spec: ObjectSpec) -> Result<ObjectMeta> {
        validate_name("object", &spec.name)?;
        for c in &spec.containers {
            self.check_container(c)?;
        }
        if spec.creator.is_empty() {
            spec.creator = self.user().to_string();
        }
        let owner = owner_of_name(&spec.name, self.size());
        self.note_lazy(owner);
        match self.call(owner, &Request::CreateObjectLazy(spec), &[])? {
            Response::Object(o) => Ok(o),
            r => Err(unexpected("create_object", r)),
        }
    }

    /// The creator recorded with this client's objects ([`current_user`] when first asked).
    fn user(&self) -> &str {
        self.inner.user.get_or_init(current_user)
    }

    /// Fails if container `name` does not exist; a positive answer is remembered for
    /// [`CONTAINER_SEEN_TTL`] (creates in a loop ask once, not once per object).
    fn check_container(&self, name: &str) -> Result<()> {
        let now = std::time::Instant::now();
        let seen = |m: &HashMap<String, std::time::Instant>| {
            m.get(name)
                .is_some_and(|t| now.duration_since(*t) < CONTAINER_SEEN_TTL)
        };
        if seen(
            &self
                .inner
                .containers_seen
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        ) {
            return Ok(());
        }
        self.get_container(name)?;
        self.inner
            .containers_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), now);
        Ok(())
    }

    /// Remembers that `owner` may hold a metadata change of this client answered at commit.
    /// Called before the request, so a change the owner committed is never missed by a
    /// consistency point running meanwhile in another thread.
    pub(crate) fn note_lazy(&self, owner: u32) {
        self.inner
            .lazy_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(owner);
    }

    /// The consistency point of this client's creates and tag puts: when it returns, each of
    /// them is on stable storage at its owner (one `SyncMeta` per owner that has any, sharing
    /// the owner's group commit; nothing to do, and no request, when there are none).
    pub fn sync_metadata(&self) -> Result<()> {
        let owners =
            std::mem::take(&mut *self.inner.lazy_at.lock().unwrap_or_else(|p| p.into_inner()));
        let mut first_err = None;
        for owner in owners {
            match self.call(owner, &Request::SyncMeta, &[]) {
                Ok(Response::Ok) => {}
                Ok(r) => {
                    self.note_lazy(owner);
                    first_err.get_or_insert(unexpected("sync_metadata", r));
                }
                Err(e) => {
                    self.note_lazy(owner);
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// [`sync_metadata`](Self::sync_metadata) for every owner but `owner`, whose changes the
    /// caller makes durable itself (`SyncSeal`: the seal's WAL fsync covers them). Returns
    /// whether `owner` had any: then the caller must, or give it back with `note_lazy`.
    pub(crate) fn sync_metadata_but(&self, owner: u32) -> Result<bool> {
        let had = self
            .inner
            .lazy_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&owner);
        if let Err(e) = self.sync_metadata() {
            if had {
                self.note_lazy(owner);
            }
            return Err(e);
        }
        Ok(had)
    }

    /// Creates many objects: grouped per owning server, one request and one metadata
    /// transaction (one fsync) per group of up to `CREATE_BATCH` objects, the servers working in
    /// parallel. One result per spec, in order: a duplicate name or a bad spec fails only that
    /// object. Each successful object is durable when this returns, as with `create_object`.
    pub fn create_objects(&self, specs: Vec<ObjectSpec>) -> Vec<Result<ObjectMeta>> {
        self.create_objects_with(specs, false)
    }

    /// [`create_objects`](Self::create_objects) with the durability of
    /// [`create_object`](Self::create_object): each successful object is created at its owner
    /// (visible to every client, usable, its duplicate or bad spec failed) when this returns,
    /// and on stable storage at this client's next consistency point
    /// ([`sync_metadata`](Self::sync_metadata)). One request per owner and batch of up to
    /// `CREATE_BATCH` objects, no fsync waited: the fast way to create many objects (C
    /// `PDCXobj_create_many`).
    pub fn create_objects_lazy(&self, specs: Vec<ObjectSpec>) -> Vec<Result<ObjectMeta>> {
        self.create_objects_with(specs, true)
    }

    fn create_objects_with(&self, specs: Vec<ObjectSpec>, lazy: bool) -> Vec<Result<ObjectMeta>> {
        let n = specs.len();
        let mut results: Vec<Option<Result<ObjectMeta>>> = (0..n).map(|_| None).collect();
        // Containers are checked once each, not once per object (and through the cache of
        // containers seen to exist).
        let mut containers: std::collections::BTreeMap<String, Result<()>> = Default::default();
        for s in &specs {
            for c in &s.containers {
                if !containers.contains_key(c) {
                    let ok = self.check_container(c);
                    containers.insert(c.clone(), ok);
                }
            }
        }
        let user = self.user().to_string();
        let mut groups: Vec<Vec<(usize, ObjectSpec)>> =
            (0..self.size()).map(|_| Vec::new()).collect();
        for (i, mut spec) in specs.into_iter().enumerate() {
            let bad_container = spec
                .containers
                .iter()
                .find_map(|c| containers.get(c).and_then(|r| r.as_ref().err()).cloned());
            if let Err(e) = validate_name("object", &spec.name) {
                results[i] = Some(Err(e));
            } else if let Some(e) = bad_container {
                results[i] = Some(Err(e));
            } else {
                if spec.creator.is_empty() {
                    spec.creator = user.clone();
                }
                let owner = owner_of_name(&spec.name, self.size()) as usize;
                groups[owner].push((i, spec));
            }
        }
        let groups: Vec<(usize, Vec<(usize, ObjectSpec)>)> = groups
            .into_iter()
            .enumerate()
            .filter(|(_, g)| !g.is_empty())
            .collect();
        // One owner (small batches, one server): no thread to start.
        let answers: Vec<Vec<(usize, Result<ObjectMeta>)>> = if groups.len() == 1 {
            groups
                .into_iter()
                .map(|(owner, g)| self.create_group(owner as u32, g, lazy))
                .collect()
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = groups
                    .into_iter()
                    .map(|(owner, g)| scope.spawn(move || self.create_group(owner as u32, g, lazy)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Vec::new()))
                    .collect()
            })
        };
        for (i, r) in answers.into_iter().flatten() {
            results[i] = Some(r);
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(Error::internal("create_objects: no result for an object")))
            })
            .collect()
    }

    fn create_group(
        &self,
        owner: u32,
        group: Vec<(usize, ObjectSpec)>,
        lazy: bool,
    ) -> Vec<(usize, Result<ObjectMeta>)> {
        if lazy {
            self.note_lazy(owner);
        }
        let mut out = Vec::with_capacity(group.len());
        let mut it = group.into_iter().peekable();
        while it.peek().is_some() {
            let (idx, specs): (Vec<usize>, Vec<ObjectSpec>) =
                it.by_ref().take(CREATE_BATCH).unzip();
            let n = specs.len();
            let req = if lazy {
                Request::CreateObjectsLazy { specs }
            } else {
                Request::CreateObjects { specs }
            };
            match self.call(owner, &req, &[]) {
                Ok(Response::ObjectsCreated(rs)) if rs.len() == n => {
                    out.extend(idx.into_iter().zip(rs))
                }
                Ok(r) => {
                    let e = unexpected("create_objects", r);
                    out.extend(idx.into_iter().map(|i| (i, Err(e.clone()))));
                }
                Err(e) => out.extend(idx.into_iter().map(|i| (i, Err(e.clone())))),
            }
        }
        out
    }

    pub fn open_object(&self, name: &str) -> Result<ObjectMeta> {
        self.lookup(ObjectKey::Name(name.into()))
    }

    pub fn get_object(&self, id: ObjectId) -> Result<ObjectMeta> {
        self.lookup(ObjectKey::Id(id))
    }

    /// An object's metadata: from the owner, through the node-local server when aggregation
    /// is on and the owner is another server (straight to the owner if the local server
    /// cannot be reached).
    fn lookup(&self, key: ObjectKey) -> Result<ObjectMeta> {
        let owner = match &key {
            ObjectKey::Name(n) => owner_of_name(n, self.size()),
            ObjectKey::Id(id) => self.id_owner(*id)?,
        };
        let local = self.local_server();
        if owner != local && self.aggregation() {
            let req = Request::LookupObject { key: key.clone() };
            match self.call(local, &req, &[]) {
                Ok(Response::Object(o)) => return Ok(o),
                Ok(r) => return Err(unexpected("lookup", r)),
                Err(e) if e.kind == ErrorKind::Unavailable => {}
                Err(e) => return Err(e),
            }
        }
        let req = match key {
            ObjectKey::Name(name) => Request::OpenObject { name },
            ObjectKey::Id(id) => Request::GetObject { id },
        };
        match self.call(owner, &req, &[])? {
            Response::Object(o) => Ok(o),
            r => Err(unexpected("lookup", r)),
        }
    }

    pub fn list_objects(&self, container: Option<&str>) -> Result<Vec<ObjectMeta>> {
        if let Some(c) = container {
            self.get_container(c)?;
        }
        let mut all = Vec::new();
        for r in self.call_all(&Request::ListObjects {
            container: container.map(str::to_string),
        })? {
            match r {
                Response::Objects(o) => all.extend(o),
                r => return Err(unexpected("list_objects", r)),
            }
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    /// Grows an object's dims to at least `dims` (elementwise maximum: concurrent growers never
    /// shrink each other's size).
    pub fn extend_dims(&self, id: ObjectId, dims: Vec<u64>) -> Result<ObjectMeta> {
        match self.call(self.id_owner(id)?, &Request::ExtendDims { id, dims }, &[])? {
            Response::Object(o) => Ok(o),
            r => Err(unexpected("extend_dims", r)),
        }
    }

    /// Sets an object's dims exactly (they may shrink; see the server's `set_dims`).
    pub fn set_dims(&self, id: ObjectId, dims: Vec<u64>) -> Result<ObjectMeta> {
        match self.call(self.id_owner(id)?, &Request::SetDims { id, dims }, &[])? {
            Response::Object(o) => Ok(o),
            r => Err(unexpected("set_dims", r)),
        }
    }

    pub fn add_to_container(&self, id: ObjectId, container: &str) -> Result<()> {
        self.get_container(container)?;
        self.call(
            self.id_owner(id)?,
            &Request::AddToContainer {
                id,
                container: container.into(),
            },
            &[],
        )?;
        Ok(())
    }

    /// Deletes an object: metadata, memberships, tags and extents. The data bytes stay in the
    /// owner's log as garbage until compaction exists.
    pub fn delete_object(&self, id: ObjectId) -> Result<()> {
        let owner = self.id_owner(id)?;
        if let Response::Object(gone) = self.call(owner, &Request::DeleteObject { id }, &[])? {
            // A renamed object's name may be a link on another server (`rename_object`).
            let at = owner_of_name(&gone.name, self.size());
            if at != owner {
                let req = Request::UnlinkName {
                    name: gone.name,
                    id,
                };
                self.call(at, &req, &[])?;
            }
        }
        Ok(())
    }

    /// Gives object `id` the name `name` (issue 14). The object keeps its id, owner, data and
    /// tags. When the new name hashes to another server than the owner, that server first
    /// records a link to the object; a crash mid-way leaves both names resolving to it, and
    /// renaming again finishes (the server's `meta/rename.rs` has the order). Fails if
    /// `name` is taken.
    pub fn rename_object(&self, id: ObjectId, name: &str) -> Result<ObjectMeta> {
        validate_name("object", name)?;
        let owner = self.id_owner(id)?;
        let cur = self.get_object(id)?;
        if cur.name == name {
            return Ok(cur);
        }
        let new_at = owner_of_name(name, self.size());
        if new_at != owner {
            let req = Request::LinkName {
                name: name.to_string(),
                id,
            };
            self.call(new_at, &req, &[])?;
        }
        let req = Request::RenameObject {
            id,
            name: name.to_string(),
        };
        let meta = match self.call(owner, &req, &[])? {
            Response::Object(m) => m,
            r => return Err(unexpected("rename_object", r)),
        };
        let old_at = owner_of_name(&cur.name, self.size());
        if old_at != owner {
            let req = Request::UnlinkName { name: cur.name, id };
            self.call(old_at, &req, &[])?;
        }
        Ok(meta)
    }

    /// Deletes a container and its tags, then drops its memberships on every server. The
    /// member objects stay (they may belong to other containers or none).
    pub fn delete_container(&self, name: &str) -> Result<()> {
        self.inner
            .containers_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        self.call(
            self.container_owner(name),
            &Request::DeleteContainer { name: name.into() },
            &[],
        )?;
        self.call_all(&Request::DropMemberships {
            container: name.into(),
        })?;
        Ok(())
    }

    /// Removes object `id` from `container`; NotFound if it was not a member.
    pub fn remove_from_container(&self, id: ObjectId, container: &str) -> Result<()> {
        self.call(
            self.id_owner(id)?,
            &Request::RemoveFromContainer {
                id,
                container: container.into(),
            },
            &[],
        )?;
        Ok(())
    }

    fn target_owner(&self, target: &TagTarget) -> Result<u32> {
        match target {
            TagTarget::Object(id) => self.id_owner(*id),
            TagTarget::Container(name) => Ok(self.container_owner(name)),
        }
    }

    /// Sets tags. Visible to every client when this returns and on stable storage with the
    /// same promise as [`create_object`](Self::create_object) (answered at the owner's commit,
    /// durable at the next consistency point).
    pub fn put_tags(&self, target: TagTarget, tags: Tags) -> Result<()> {
        let owner = self.target_owner(&target)?;
        self.note_lazy(owner);
        match self.call(owner, &Request::PutTagsLazy { target, tags }, &[])? {
            Response::Ok => Ok(()),
            r => Err(unexpected("put_tags", r)),
        }
    }

    pub fn delete_tag(&self, target: TagTarget, key: &str) -> Result<()> {
        self.call(
            self.target_owner(&target)?,
            &Request::DeleteTag {
                target,
                key: key.into(),
            },
            &[],
        )?;
        Ok(())
    }

    /// Objects whose tags satisfy every condition, from all servers, sorted by name.
    pub fn query(&self, conditions: Vec<Condition>) -> Result<Vec<(ObjectId, String)>> {
        let mut all = Vec::new();
        for r in self.call_all(&Request::Query { conditions })? {
            match r {
                Response::Matches(m) => all.extend(m),
                r => return Err(unexpected("query", r)),
            }
        }
        all.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(all)
    }

    /// Evaluates a value query (issue 12) at the owner of its first object, which reads the
    /// objects where they live and answers with the hits only: the answer, and a payload of
    /// the hits' coordinates (if `want.coords`: ndim little-endian u64 each) followed by each
    /// of `want.values`' hit values.
    pub fn value_query(
        &self,
        query: pdcx_core::valuequery::ValueExpr,
        region: Option<Region>,
        want: pdcx_core::valuequery::QueryWant,
    ) -> Result<(pdcx_core::valuequery::QueryAnswer, Vec<u8>)> {
        let Some(&first) = query.objects().first() else {
            return Err(Error::invalid("a value query needs a condition"));
        };
        let owner = self.id_owner(first)?;
        let req = Request::ValueQuery {
            query,
            region,
            want,
        };
        match self.with_conn(owner, &mut |c| c.call(&req, &[]))? {
            (Response::QueryAnswer(a), bytes) => Ok((a, bytes)),
            (r, _) => Err(unexpected("value query", r)),
        }
    }

    /// Makes regions of object `id` extents whose bytes stay in files outside pdcx (HDF5
    /// chunks imported by reference); the owner reads and decodes them on access, so it must
    /// be able to read the files. Returns the extents recorded and the raw bytes they stand for.
    pub fn import_refs(
        &self,
        id: ObjectId,
        items: Vec<pdcx_core::protocol::RefItem>,
    ) -> Result<(u64, u64)> {
        let owner = self.id_owner(id)?;
        match self.call(owner, &Request::ImportRefs { id, items }, &[])? {
            Response::Imported { extents, bytes } => Ok((extents, bytes)),
            r => Err(unexpected("import_refs", r)),
        }
    }

    /// Copies the extents of `id` read by reference into the servers' logs (same sequence
    /// numbers: later writes stay later); returns extents and bytes promoted.
    pub fn promote_refs(&self, id: ObjectId) -> Result<(u64, u64)> {
        match self.call(self.id_owner(id)?, &Request::PromoteRefs { id }, &[])? {
            Response::Imported { extents, bytes } => Ok((extents, bytes)),
            r => Err(unexpected("promote_refs", r)),
        }
    }

    /// Reads the elements of object `id` at `coords` (ndim u64 per point, `ndim` the
    /// object's) into `out` (one element per point, in the order given); the owner picks
    /// them, so only they travel. Sent in batches that keep each request small.
    pub fn read_points(
        &self,
        id: ObjectId,
        ndim: usize,
        coords: &[u64],
        out: &mut [u8],
    ) -> Result<()> {
        if ndim == 0 || !coords.len().is_multiple_of(ndim) {
            return Err(Error::invalid(format!(
                "{} coordinates do not make points of {ndim} dims",
                coords.len()
            )));
        }
        let points = coords.len() / ndim;
        if points == 0 {
            return Ok(());
        }
        if !out.len().is_multiple_of(points) {
            return Err(Error::invalid(format!(
                "an output of {} bytes does not hold {points} elements",
                out.len()
            )));
        }
        let elem = out.len() / points;
        let owner = self.id_owner(id)?;
        // About 8 MiB of coordinates per request (the body limit is 64 MiB).
        let per_call = ((1usize << 20) / ndim).max(1);
        for (k, chunk) in coords.chunks(per_call * ndim).enumerate() {
            let first = k * per_call;
            let dst = &mut out[first * elem..(first + chunk.len() / ndim) * elem];
            let req = Request::ReadPoints {
                id,
                coords: chunk.to_vec(),
            };
            match self.with_conn(owner, &mut |c| c.call_into(&req, &[], dst))? {
                Response::Data => {}
                r => return Err(unexpected("point read", r)),
            }
        }
        Ok(())
    }

    /// Reads the elements of `region` taken every `step[d]` in each dim (`region` is the
    /// bounding box) into `out` (the selection's byte size, C order). The owner selects them,
    /// so only the selected bytes travel.
    pub fn read_strided(
        &self,
        id: ObjectId,
        region: &Region,
        step: &[u64],
        out: &mut [u8],
    ) -> Result<()> {
        if step.iter().all(|&s| s == 1) {
            return self.read_into(id, region, out);
        }
        let owner = self.id_owner(id)?;
        if self.gather_direct(id, owner, region, step, out)? {
            return Ok(());
        }
        let req = Request::ReadStrided {
            id,
            region: region.clone(),
            step: step.to_vec(),
        };
        match self.with_conn(owner, &mut |c| c.call_into(&req, &[], out))? {
            Response::Data => Ok(()),
            r => Err(unexpected("strided read", r)),
        }
    }

    /// A strided read (issue 12) by a client on owner `owner`'s node: gathered from the
    /// mapped log of the owner, or of every holder when others hold parts, touching only the
    /// selected bytes. False when it cannot be done so (not the same node, no plan, the log
    /// moved meanwhile): the caller asks the owner (`out` may be partly written).
    fn gather_direct(
        &self,
        id: ObjectId,
        owner: u32,
        region: &Region,
        step: &[u64],
        out: &mut [u8],
    ) -> Result<bool> {
        let Some(direct) = self.direct_to(owner) else {
            return Ok(false);
        };
        // Same node: gather the selection from the mapped log (issue 12), which touches
        // only the selected bytes; else, or when the log moved meanwhile, the owner does.
        match self.piece_parts(id, owner, region, step)? {
            Some(parts) => Ok(direct.gather(&parts, region, step, out)? == Outcome::Done),
            None => Ok(false),
        }
    }

    /// The piece plans of `region` of `id` (taken every `step`) from each server holding
    /// part of it, all on this node: the owner's alone, or, when it names other holders,
    /// each holder's own (asked with `held`). None when there is no such set of plans.
    fn piece_parts(
        &self,
        id: ObjectId,
        owner: u32,
        region: &Region,
        step: &[u64],
    ) -> Result<Option<Vec<(u32, pdcx_core::protocol::PiecePlans)>>> {
        let ask = |rank: u32, held: bool| self.piece_plan(rank, id, region, step, held);
        let Some(plan) = ask(owner, false)? else {
            return Ok(None);
        };
        if plan.holders.is_empty() {
            return Ok(Some(vec![(owner, plan)]));
        }
        if plan.holders.len() > MERGE_MAX_HOLDERS
            || !plan.holders.iter().all(|&h| self.direct_reads(h))
        {
            return Ok(None);
        }
        let mut parts = Vec::with_capacity(plan.holders.len());
        for &h in &plan.holders {
            // Any failure here (a holder restarting, say) leaves it to the owner.
            match ask(h, true) {
                Ok(Some(p)) if p.holders.is_empty() => parts.push((h, p)),
                _ => return Ok(None),
            }
        }
        Ok(Some(parts))
    }

    /// Issue 14: bytes `[off, off + len)` of byte stream `id`, for a file's read-ahead
    /// window, from the mapped logs of the servers holding them, all on this node: a slice
    /// of the mapping when they are one committed extent (no copy, no fresh memory), else
    /// gathered from the mappings (one copy). None when that cannot be done (another node, a
    /// holder elsewhere, a base, bytes not in a log): the caller reads through the owner.
    pub(crate) fn stream_window(
        &self,
        id: ObjectId,
        off: u64,
        len: usize,
    ) -> Result<Option<Window>> {
        let owner = self.id_owner(id)?;
        let Some(direct) = self.direct_to(owner) else {
            return Ok(None);
        };
        let region = Region::new(vec![off], vec![len as u64])?;
        let Some(parts) = self.piece_parts(id, owner, &region, &[1])? else {
            shm::debug(&format!("object {id:#x}: no piece plan for bytes {region}"));
            return Ok(None);
        };
        // One holder, one extent holding all the bytes: the window is a slice of its log.
        if let [(rank, plan)] = &parts[..] {
            if let ([p], None) = (&plan.pieces[..], &plan.fill) {
                if let Some(w) = direct.map_piece(*rank, plan, p, &region)? {
                    return Ok(Some(w));
                }
            }
        }
        shm::debug(&format!(
            "object {id:#x}: bytes {region} are in {} pieces on {} servers: gathered",
            parts.iter().map(|(_, p)| p.pieces.len()).sum::<usize>(),
            parts.len()
        ));
        let mut buf = self.inner.files.take(len);
        if direct.gather(&parts, &region, &[1], &mut buf)? == Outcome::Done {
            return Ok(Some(Window::Heap(buf)));
        }
        self.inner.files.give(buf);
        Ok(None)
    }

    /// Where the bytes of object `id` are, in sequence order: the owner's region map, with
    /// the log location of each extent filled in by the server that holds it.
    pub fn extents(&self, id: ObjectId) -> Result<Vec<ExtentInfo>> {
        let owner = self.id_owner(id)?;
        let mut all = self.extents_on(owner, id)?;
        let mut holders: Vec<u32> = all
            .iter()
            .map(|e| e.holder)
            .filter(|&h| h != owner)
            .collect();
        holders.sort_unstable();
        holders.dedup();
        for h in holders {
            let detail: std::collections::HashMap<u64, ExtentInfo> = self
                .extents_on(h, id)?
                .into_iter()
                .map(|e| (e.seq, e))
                .collect();
            for e in all.iter_mut().filter(|e| e.holder == h) {
                if let Some(d) = detail.get(&e.seq) {
                    *e = d.clone();
                }
            }
        }
        Ok(all)
    }

    fn extents_on(&self, rank: u32, id: ObjectId) -> Result<Vec<ExtentInfo>> {
        match self.call(rank, &Request::Extents { id }, &[])? {
            Response::Extents(e) => Ok(e),
            r => Err(unexpected("extents", r)),
        }
    }

    pub fn stats(&self, rank: u32) -> Result<ServerStats> {
        match self.call(rank, &Request::Stats, &[])? {
            Response::Stats(s) => Ok(s),
            r => Err(unexpected("stats", r)),
        }
    }

    /// Asks server `rank` to flush committed extents to its tiers: with `wait`, returns once
    /// nothing is pending or a tier fails; without, wakes its flusher and returns the queue.
    pub fn flush_server(&self, rank: u32, wait: bool) -> Result<FlushReport> {
        match self.call(rank, &Request::Flush { wait }, &[])? {
            Response::Flushed(r) => Ok(r),
            r => Err(unexpected("flush", r)),
        }
    }

    /// Moves every extent of `id`, on every server holding some, to tier `tier`. Returns the
    /// extents and raw bytes moved.
    pub fn migrate(&self, id: ObjectId, tier: &str) -> Result<(u64, u64)> {
        let (mut n, mut bytes) = (0, 0);
        for rank in 0..self.size() {
            let req = Request::Migrate {
                id,
                tier: tier.to_string(),
            };
            match self.call(rank, &req, &[])? {
                Response::Migrated { extents, bytes: b } => {
                    n += extents;
                    bytes += b;
                }
                r => return Err(unexpected("migrate", r)),
            }
        }
        Ok((n, bytes))
    }

    pub fn shutdown_server(&self, rank: u32) -> Result<()> {
        self.call(rank, &Request::Shutdown, &[]).map(|_| ())
    }

    pub fn id_owner(&self, id: ObjectId) -> Result<u32> {
        let o = owner_of_id(id);
        if o >= self.size() {
            return Err(Error::not_found(format!(
                "object id {id:#x} names server {o}, which does not exist"
            )));
        }
        Ok(o)
    }

    /// Synchronous write: stage and commit in one go, with the object's consistency (strong
    /// unless [`set_consistency`](Self::set_consistency) said otherwise).
    pub fn write(
        &self,
        id: ObjectId,
        region: &Region,
        data: &[u8],
        durability: Durability,
    ) -> Result<()> {
        // A durable write of an object whose create is not yet durable would be lost with it.
        self.sync_metadata()?;
        // A durable commit syncs right after the write: start the writeback as it is copied.
        let write_behind = if durability == Durability::Memory {
            WriteBehind::Never
        } else {
            WriteBehind::Pipelined
        };
        self.write_creates_unsynced(id, region, data, durability, write_behind)
    }

    /// [`write`](Self::write) without first making this client's creates durable: for a
    /// caller whose own consistency point does that (byte streams: `commit` / the seal).
    /// `write_behind` applies to a one-copy write (`direct_write.rs`).
    pub(crate) fn write_creates_unsynced(
        &self,
        id: ObjectId,
        region: &Region,
        data: &[u8],
        durability: Durability,
        write_behind: WriteBehind,
    ) -> Result<()> {
        let txn = self.next_txn();
        let item = StageItem {
            txn,
            id,
            region: region.clone(),
            len: data.len() as u64,
        };
        let dest = self.data_server(id, region)?;
        let foreign = dest != owner_of_id(id);
        let commit = commit_request(vec![txn], durability, self.consistency(id), foreign);
        if self.direct_writes(dest, data.len()) {
            if let Some(r) = self.write_direct(dest, &item, data, &commit, write_behind) {
                if r.is_ok() && matches!(commit, Request::CommitRelaxed { .. }) {
                    self.note_relaxed(id, dest);
                }
                return r;
            }
        }
        // Shared memory costs one copy here (into the arena) and saves the two socket copies.
        // Over TCP the bytes are sent straight from the caller's buffer.
        let block = self
            .shm_active(dest)
            .then(|| self.inner.shm.as_ref()?.alloc(data.len()))
            .flatten()
            .map(|mut b| {
                b.as_mut_slice().copy_from_slice(data);
                Payload::Shm(b)
            });
        // Stage and commit travel in one message, answered once committed (one round trip).
        let relaxed = match commit {
            Request::CommitRelaxed {
                expected_writes, ..
            } => Some(expected_writes),
            _ => None,
        };
        let r = self.with_conn(dest, &mut |c| {
            match &block {
                Some(p) => {
                    c.stage_commit(std::slice::from_ref(&item), &[p], durability, relaxed)?
                }
                None => {
                    let req = Request::StageCommit {
                        items: vec![item.clone()],
                        durability,
                        relaxed,
                    };
                    c.call(&req, &[data])?.0
                }
            };
            Ok(())
        });
        if r.is_ok() && matches!(commit, Request::CommitRelaxed { .. }) {
            self.note_relaxed(id, dest);
        }
        r
    }

    /// A one-copy write (`direct_write.rs`) of `data` to `region` of `id`, reserved and
    /// written into the log of `id`'s owner but **not committed**: invisible until the
    /// returned txn is committed with its checksum on the same connection
    /// ([`call_on`](Self::call_on) with a `CommitLate` or `CommitSyncSeal`). For byte streams,
    /// whose consistency point then commits and syncs in one round trip. None, with nothing
    /// written, when this write cannot be one (the owner is not on this node or is not where
    /// the write goes, relaxed consistency, too small): the caller writes it the usual way.
    pub(crate) fn write_uncommitted(
        &self,
        id: ObjectId,
        region: &Region,
        data: &[u8],
        write_behind: WriteBehind,
    ) -> Result<Option<Uncommitted>> {
        let dest = self.data_server(id, region)?;
        if dest != owner_of_id(id)
            || !self.direct_writes(dest, data.len())
            || !matches!(self.consistency(id), Consistency::Strong)
        {
            return Ok(None);
        }
        let Some(dw) = self.inner.direct_write.as_ref() else {
            return Ok(None);
        };
        let item = StageItem {
            txn: self.next_txn(),
            id,
            region: region.clone(),
            len: data.len() as u64,
        };
        // The checksum is computed as the payload is written (`late_crcs`): it travels with
        // the commit.
        let written = self.with_conn(dest, &mut |c| {
            let items = std::slice::from_ref(&item);
            Ok(
                match dw.write(c, dest, items, &[data], write_behind, true)? {
                    crate::direct_write::Outcome::Fallback => None,
                    crate::direct_write::Outcome::Written(crcs) => {
                        Some((c.serial(), crcs.first().copied().unwrap_or(0)))
                    }
                },
            )
        })?;
        Ok(written.map(|(conn, crc)| Uncommitted {
            dest,
            txn: item.txn,
            crc,
            conn,
        }))
    }

    /// Sends `req` to server `rank` on connection `conn` (a [`Conn::serial`]) only: fails,
    /// sending nothing, if that connection was closed since (a server restart, a broken
    /// link), since the writes it reserved went with it.
    pub(crate) fn call_on(&self, rank: u32, conn: u64, req: &Request) -> Result<Response> {
        self.with_conn(rank, &mut |c| {
            if c.serial() != conn {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "writes to server {rank} not yet committed were lost: their connection \
                         closed before the consistency point (server restarted or link broken)"
                    ),
                ));
            }
            c.call(req, &[]).map(|(r, _)| r)
        })
    }

    /// Several writes of object `id` to one server in one round trip (`StageCommit` with
    /// every item), committed together: the owner numbers them in item order, so where
    /// items overlap the later one wins, as if written one after another. All regions must
    /// go to the same server (they do under region-local placement); returns it.
    pub fn write_batch(
        &self,
        id: ObjectId,
        items: &[(Region, &[u8])],
        durability: Durability,
    ) -> Result<u32> {
        if items.is_empty() {
            return Err(Error::invalid("write_batch: no writes"));
        }
        self.sync_metadata()?;
        self.write_batch_creates_unsynced(id, items, durability)
    }

    /// [`write_batch`](Self::write_batch) without first making this client's creates durable
    /// (see [`write_creates_unsynced`](Self::write_creates_unsynced)).
    pub(crate) fn write_batch_creates_unsynced(
        &self,
        id: ObjectId,
        items: &[(Region, &[u8])],
        durability: Durability,
    ) -> Result<u32> {
        let Some((first, _)) = items.first() else {
            return Err(Error::invalid("write_batch: no writes"));
        };
        let dest = self.data_server(id, first)?;
        for (r, _) in &items[1..] {
            if self.data_server(id, r)? != dest {
                return Err(Error::invalid(
                    "write_batch: the regions go to different servers (placement)",
                ));
            }
        }
        let stage: Vec<StageItem> = items
            .iter()
            .map(|(region, data)| StageItem {
                txn: self.next_txn(),
                id,
                region: region.clone(),
                len: data.len() as u64,
            })
            .collect();
        let payloads: Vec<&[u8]> = items.iter().map(|(_, d)| *d).collect();
        let foreign = dest != owner_of_id(id);
        let relaxed = match commit_request(vec![], durability, self.consistency(id), foreign) {
            Request::CommitRelaxed {
                expected_writes, ..
            } => Some(expected_writes),
            _ => None,
        };
        let req = Request::StageCommit {
            items: stage,
            durability,
            relaxed,
        };
        self.with_conn(dest, &mut |c| c.call(&req, &payloads).map(|_| ()))?;
        if relaxed.is_some() {
            self.note_relaxed(id, dest);
        }
        Ok(dest)
    }

    /// [`write`](Self::write) as a one-copy write (`direct_write.rs`): reserve, write `data`
    /// into the log straight from the caller's buffer, commit, on one connection. None when
    /// the server turned it down before anything was reserved (the caller writes the usual
    /// way).
    fn write_direct(
        &self,
        dest: u32,
        item: &StageItem,
        data: &[u8],
        commit: &Request,
        write_behind: WriteBehind,
    ) -> Option<Result<()>> {
        let dw = self.inner.direct_write.as_ref()?;
        let r = self.with_conn(dest, &mut |c| match dw.write(
            c,
            dest,
            std::slice::from_ref(item),
            &[data],
            write_behind,
            false,
        )? {
            crate::direct_write::Outcome::Fallback => Ok(false),
            crate::direct_write::Outcome::Written(_) => c.call(commit, &[]).map(|_| true),
        });
        match r {
            Ok(false) => None,
            Ok(true) => Some(Ok(())),
            Err(e) => Some(Err(e)),
        }
    }

    /// The servers holding committed data of each region, from the objects' `owner`.
    pub fn locate(&self, owner: u32, items: Vec<ReadItem>) -> Result<Vec<Vec<u32>>> {
        let n = items.len();
        match self.call(owner, &Request::Locate { items }, &[])? {
            Response::Located(h) if h.len() == n => Ok(h),
            r => Err(unexpected("locate", r)),
        }
    }

    /// Synchronous read straight into `out` (exactly the region's byte size). A large region
    /// that one server other than the owner holds alone is read from that server directly.
    pub fn read_into(&self, id: ObjectId, region: &Region, out: &mut [u8]) -> Result<()> {
        let owner = self.id_owner(id)?;
        if pdcx_core::region::short_rows(region, out.len()) {
            // A point's history, a small box across chunk rows: a read plan would hold one
            // span per short row; the extents' whole locations are fewer, and copying from
            // the mapped log costs no system call per row.
            let ones = vec![1; region.ndim()];
            if self.gather_direct(id, owner, region, &ones, out)? {
                return Ok(());
            }
        }
        let items = vec![ReadItem {
            id,
            region: region.clone(),
        }];
        let mut dest = owner;
        if out.len() >= crate::transfer::LOCATE_MIN_BYTES && self.size() > 1 {
            if let [only] = self.locate(owner, items.clone())?[0][..] {
                dest = only;
            }
        }
        let held = dest != owner;
        if self.direct_reads(dest) {
            let plans = self.with_conn(dest, &mut |c| read_plans(self, c, &items, held))?;
            if self.direct_read(dest, &plans, 0, &items[0], out)? {
                return Ok(());
            }
        }
        self.with_conn(dest, &mut |c| c.read_into(&items[0], held, out))
    }

    /// Reads `region` of `id` through its owner in one round trip (the owner fetches parts
    /// other servers hold): no location query and no read plan, which is what a small read
    /// wants (a file's read-ahead window, issue 14); large reads use [`read_into`](Self::read_into).
    pub fn read_via_owner(&self, id: ObjectId, region: &Region, out: &mut [u8]) -> Result<()> {
        let owner = self.id_owner(id)?;
        let item = ReadItem {
            id,
            region: region.clone(),
        };
        self.with_conn(owner, &mut |c| c.read_into(&item, false, out))
    }

    /// Whether item `i` of a read can be a one-copy read (issue 10, "reads") given the plans
    /// server `rank` answered: planned there, or (asked at the owner) held in parts by
    /// servers that are all on this node.
    pub(crate) fn direct_possible(&self, plans: &ReadPlans, i: usize) -> bool {
        plans.plans.get(i).is_some_and(Option::is_some)
            || plans.holders.get(i).is_some_and(|h| {
                !h.is_empty()
                    && h.len() <= MERGE_MAX_HOLDERS
                    && h.iter().all(|&r| self.direct_reads(r))
            })
    }

    /// Reads item `i` (`item`) of a read straight into `out` (its byte size) when
    /// [`direct_possible`](Self::direct_possible): from the plan server `rank` gave, or by
    /// asking every holder for its part (`held`) and merging the spans by sequence number.
    /// False when it was not possible or a plan went stale: the caller reads the item through
    /// the server (`out` may be partly written).
    pub(crate) fn direct_read(
        &self,
        rank: u32,
        plans: &ReadPlans,
        i: usize,
        item: &ReadItem,
        out: &mut [u8],
    ) -> Result<bool> {
        let Some(direct) = self.inner.direct.as_ref() else {
            return Ok(false);
        };
        if !self.direct_possible(plans, i) {
            return Ok(false);
        }
        if let Some(Some(p)) = plans.plans.get(i) {
            return Ok(direct.execute(rank, plans, p, out)? == Outcome::Done);
        }
        let holders = &plans.holders[i];
        let mut parts = Vec::with_capacity(holders.len());
        for &h in holders {
            // Any failure here (a holder restarting, say) leaves the item to the owner.
            match self.with_conn(h, &mut |c| {
                read_plans(self, c, std::slice::from_ref(item), true)
            }) {
                Ok(p) if p.plans[0].is_some() => parts.push((h, p)),
                _ => return Ok(false),
            }
        }
        Ok(direct.execute_merged(&parts, out)? == Outcome::Done)
    }

    /// Whether a write of `len` bytes to server `rank` may be written into its log by this
    /// client (same node, large enough, not refused).
    pub(crate) fn direct_writes(&self, rank: u32, len: usize) -> bool {
        len >= crate::direct_write::DIRECT_WRITE_MIN
            && self.inner.same_node.get(rank as usize) == Some(&true)
            && self
                .inner
                .direct_write
                .as_ref()
                .is_some_and(|d| d.allowed(rank))
    }

    /// Whether some server on this node may take one-copy writes of `len` bytes (the C API
    /// then hands over the caller's buffer instead of copying it at start).
    pub fn direct_writes_possible(&self, len: usize) -> bool {
        (0..self.size()).any(|r| self.direct_writes(r, len))
    }

    /// This client's reader of server `rank`'s log files, when it may read them itself.
    fn direct_to(&self, rank: u32) -> Option<&crate::direct::DirectReads> {
        self.inner
            .direct
            .as_ref()
            .filter(|_| self.direct_reads(rank))
    }

    /// `Request::PiecePlan` to server `rank`: every extent of `id` under `region` whole,
    /// with where it lies in that server's log (None: it cannot be planned).
    fn piece_plan(
        &self,
        rank: u32,
        id: ObjectId,
        region: &Region,
        step: &[u64],
        held: bool,
    ) -> Result<Option<pdcx_core::protocol::PiecePlans>> {
        let req = Request::PiecePlan {
            id,
            region: region.clone(),
            step: step.to_vec(),
            held,
        };
        match self.call(rank, &req, &[])? {
            Response::PiecePlans(p) => Ok(p),
            r => Err(unexpected("piece plan", r)),
        }
    }

    /// Whether reads from server `rank` may be one-copy reads of its log (same node).
    pub(crate) fn direct_reads(&self, rank: u32) -> bool {
        self.inner.same_node.get(rank as usize) == Some(&true)
            && self.inner.direct.as_ref().is_some_and(|d| d.allowed(rank))
    }
}

/// Most holders whose plans a client merges for one read (beyond that the owner merges).
const MERGE_MAX_HOLDERS: usize = 8;

/// Asks the server on `c` for the read plans of `items` (issue 10, "reads"), and lets
/// `client`'s descriptor cache see the answer.
pub(crate) fn read_plans(
    client: &Client,
    c: &mut Conn,
    items: &[ReadItem],
    held: bool,
) -> Result<ReadPlans> {
    let req = Request::ReadPlan {
        items: items.to_vec(),
        held,
    };
    match c.call(&req, &[])?.0 {
        Response::ReadPlans(p)
            if p.plans.len() == items.len()
                && (p.holders.is_empty() || p.holders.len() == items.len()) =>
        {
            if let Some(d) = &client.inner.direct {
                d.note_plans(&p);
            }
            Ok(p)
        }
        r => Err(unexpected("ReadPlan", r)),
    }
}

/// The commit for writes with `consistency` at a data server; `foreign`: the server is not the
/// objects' owner (only then is there a registration to defer).
/// A write reserved and written but not committed ([`Client::write_uncommitted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Uncommitted {
    /// The server (the object's owner) whose log holds it.
    pub(crate) dest: u32,
    pub(crate) txn: u64,
    /// The payload's checksum, sent with the commit (reserved with `ReserveWriteLate`).
    pub(crate) crc: u32,
    /// The connection whose server session holds the reservation.
    pub(crate) conn: u64,
}

pub(crate) fn commit_request(
    txns: Vec<u64>,
    durability: Durability,
    consistency: Consistency,
    foreign: bool,
) -> Request {
    match consistency {
        Consistency::Relaxed { expected_writes } if foreign => Request::CommitRelaxed {
            txns,
            durability,
            expected_writes,
        },
        _ => Request::Commit { txns, durability },
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
