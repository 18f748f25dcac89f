//! The client: routes metadata calls to the owning server (name hash / id prefix), fans
//! deployment-wide listings and queries out to every server, and does synchronous I/O.

use crate::cluster::{root_from_env, ClusterFile};
use crate::conn::Conn;
use crate::transfer::Worker;
use pdcx_core::model::{owner_of_id, validate_name, Tags};
use pdcx_core::protocol::{
    Durability, ExtentInfo, ObjectSpec, ReadItem, Request, Response, ServerStats, StageItem,
    TagTarget,
};
use pdcx_core::{
    owner_of_name, Condition, ContainerInfo, Error, ErrorKind, ObjectId, ObjectMeta, Region, Result,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub(crate) struct Inner {
    pub cluster: ClusterFile,
    /// Where each server listens now: the cluster file's address, refreshed from the root's
    /// cluster file when a server cannot be reached (a restarted deployment has new ports).
    addrs: Vec<Mutex<String>>,
    pub secret: Vec<u8>,
    pub root: Option<PathBuf>,
    conns: Vec<Mutex<Option<Conn>>>,
    pub(crate) workers: Vec<OnceLock<Worker>>,
    txn_base: u64,
    txn_counter: AtomicU64,
}

/// A handle to one deployment. Cheap to clone; safe to share between threads.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

fn unexpected(what: &str, r: Response) -> Error {
    Error::protocol(format!("unexpected reply to {what}: {r:?}"))
}

/// Errors after which a connection's byte stream can no longer be trusted.
fn breaks_connection(e: &Error) -> bool {
    matches!(
        e.kind,
        ErrorKind::Unavailable | ErrorKind::Io | ErrorKind::Protocol
    )
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
        let mut c = Self::from_cluster(cluster)?;
        Arc::get_mut(&mut c.inner).expect("fresh client").root = Some(root);
        Ok(c)
    }

    pub fn from_cluster(cluster: ClusterFile) -> Result<Client> {
        let secret = cluster.secret_bytes()?;
        let n = cluster.size as usize;
        let txn_base = (rand::random::<u32>() as u64) << 32;
        let inner = Inner {
            secret,
            root: None,
            conns: (0..n).map(|_| Mutex::new(None)).collect(),
            addrs: cluster
                .servers
                .iter()
                .map(|s| Mutex::new(s.addr.clone()))
                .collect(),
            workers: (0..n).map(|_| OnceLock::new()).collect(),
            cluster,
            txn_base,
            txn_counter: AtomicU64::new(1),
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
        self.inner.root.as_deref()
    }

    pub(crate) fn next_txn(&self) -> u64 {
        self.inner.txn_base | self.inner.txn_counter.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn open_conn(&self, rank: u32) -> Result<Conn> {
        let slot = self
            .inner
            .addrs
            .get(rank as usize)
            .ok_or_else(|| Error::invalid(format!("no server with rank {rank}")))?;
        let addr = slot.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match Conn::connect(&addr, &self.inner.secret) {
            Err(e) if e.kind == ErrorKind::Unavailable => {
                // The deployment may have been restarted on new ports: look again, once.
                let Some(fresh) = self.current_addr(rank).filter(|a| *a != addr) else {
                    return Err(e);
                };
                let conn = Conn::connect(&fresh, &self.inner.secret)?;
                if conn.rank != rank {
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        format!("{fresh} answers as server {}, not {rank}", conn.rank),
                    ));
                }
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = fresh;
                Ok(conn)
            }
            r => r,
        }
    }

    /// Server `rank`'s address in the root's cluster file as it is now, if that file still
    /// describes this deployment (same size and secret).
    fn current_addr(&self, rank: u32) -> Option<String> {
        let cf = ClusterFile::load(self.inner.root.as_deref()?).ok()?;
        if cf.size != self.size() || cf.secret_bytes().ok()? != self.inner.secret {
            return None;
        }
        cf.servers.get(rank as usize).map(|s| s.addr.clone())
    }

    /// Runs `f` on the pooled connection to `rank`, reconnecting once if the pooled one is dead.
    fn with_conn<T>(&self, rank: u32, f: &mut dyn FnMut(&mut Conn) -> Result<T>) -> Result<T> {
        let slot = self
            .inner
            .conns
            .get(rank as usize)
            .ok_or_else(|| Error::invalid(format!("no server with rank {rank}")))?;
        let mut guard = slot
            .lock()
            .map_err(|_| Error::internal("connection lock poisoned"))?;
        let fresh = guard.is_none();
        if fresh {
            *guard = Some(self.open_conn(rank)?);
        }
        let conn = guard.as_mut().expect("connection just set");
        match f(conn) {
            Err(e) if breaks_connection(&e) => {
                *guard = None;
                // A pooled connection may have been closed by a server restart: retry once, only
                // for calls that never reached a live server.
                if !fresh && e.kind == ErrorKind::Unavailable {
                    let mut c = self.open_conn(rank)?;
                    let r = f(&mut c);
                    if r.is_ok() {
                        *guard = Some(c);
                    }
                    return r;
                }
                Err(e)
            }
            r => r,
        }
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
            creator: current_user(),
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

    pub fn create_object(&self, mut spec: ObjectSpec) -> Result<ObjectMeta> {
        validate_name("object", &spec.name)?;
        for c in &spec.containers {
            self.get_container(c)?;
        }
        if spec.creator.is_empty() {
            spec.creator = current_user();
        }
        let owner = owner_of_name(&spec.name, self.size());
        match self.call(owner, &Request::CreateObject(spec), &[])? {
            Response::Object(o) => Ok(o),
            r => Err(unexpected("create_object", r)),
        }
    }

    pub fn open_object(&self, name: &str) -> Result<ObjectMeta> {
        let owner = owner_of_name(name, self.size());
        match self.call(owner, &Request::OpenObject { name: name.into() }, &[])? {
            Response::Object(o) => Ok(o),
            r => Err(unexpected("open_object", r)),
        }
    }

    pub fn get_object(&self, id: ObjectId) -> Result<ObjectMeta> {
        match self.call(self.id_owner(id)?, &Request::GetObject { id }, &[])? {
            Response::Object(o) => Ok(o),
            r => Err(unexpected("get_object", r)),
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
        self.call(self.id_owner(id)?, &Request::DeleteObject { id }, &[])?;
        Ok(())
    }

    /// Deletes a container and its tags, then drops its memberships on every server. The
    /// member objects stay (they may belong to other containers or none).
    pub fn delete_container(&self, name: &str) -> Result<()> {
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

    pub fn put_tags(&self, target: TagTarget, tags: Tags) -> Result<()> {
        self.call(
            self.target_owner(&target)?,
            &Request::PutTags { target, tags },
            &[],
        )?;
        Ok(())
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

    pub fn extents(&self, id: ObjectId) -> Result<Vec<ExtentInfo>> {
        match self.call(self.id_owner(id)?, &Request::Extents { id }, &[])? {
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

    /// Synchronous write: stage and commit in one go (strong consistency for this call).
    pub fn write(
        &self,
        id: ObjectId,
        region: &Region,
        data: &[u8],
        durability: Durability,
    ) -> Result<()> {
        let txn = self.next_txn();
        let item = StageItem {
            txn,
            id,
            region: region.clone(),
            len: data.len() as u64,
        };
        let owner = self.id_owner(id)?;
        self.with_conn(owner, &mut |c| {
            c.call(
                &Request::Stage {
                    items: vec![item.clone()],
                },
                &[data],
            )?;
            c.call(
                &Request::Commit {
                    txns: vec![txn],
                    durability,
                },
                &[],
            )?;
            Ok(())
        })
    }

    /// Synchronous read straight into `out` (exactly the region's byte size).
    pub fn read_into(&self, id: ObjectId, region: &Region, out: &mut [u8]) -> Result<()> {
        let req = Request::Read {
            items: vec![ReadItem {
                id,
                region: region.clone(),
            }],
        };
        self.with_conn(self.id_owner(id)?, &mut |c| {
            c.call_into(&req, &[], out).map(|_| ())
        })
    }
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
