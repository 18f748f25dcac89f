//! One pooled connection per server of a deployment, reopened when it breaks, and following a
//! restarted deployment to its new ports through the root's cluster file.

use crate::cluster::ClusterFile;
use pdcx_core::protocol::Credential;
use pdcx_core::{Error, ErrorKind, Result};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A connection a `Pool` can hold: it knows which server answered.
pub trait Pooled {
    fn rank(&self) -> u32;
}

impl Pooled for crate::Conn {
    fn rank(&self) -> u32 {
        self.rank
    }
}

/// How a pool opens a connection: `(address, deployment secret)` to a connected `C`.
pub type Open<'a, C> = &'a dyn Fn(&str, &Credential) -> Result<C>;

pub struct Pool<C> {
    size: u32,
    cred: Credential,
    /// Where the cluster file lives, to look up a restarted server's new address.
    root: Option<PathBuf>,
    /// Where each server listens now: the cluster file's address, refreshed from the root's
    /// cluster file when a server cannot be reached (a restarted deployment has new ports).
    addrs: Vec<Mutex<String>>,
    conns: Vec<Mutex<Option<C>>>,
}

/// Errors after which a connection's byte stream can no longer be trusted.
pub fn breaks_connection(e: &Error) -> bool {
    matches!(
        e.kind,
        ErrorKind::Unavailable | ErrorKind::Io | ErrorKind::Protocol
    )
}

impl<C: Pooled> Pool<C> {
    /// A pool of the deployment's own user (the cluster file's secret).
    pub fn new(cluster: &ClusterFile, root: Option<PathBuf>) -> Result<Pool<C>> {
        let cred = Credential::deployment(&cluster.secret_bytes()?);
        Ok(Self::with_credential(cluster, root, cred))
    }

    /// A pool whose connections prove themselves with `cred`.
    pub fn with_credential(
        cluster: &ClusterFile,
        root: Option<PathBuf>,
        cred: Credential,
    ) -> Pool<C> {
        let n = cluster.size as usize;
        Pool {
            size: cluster.size,
            cred,
            root,
            addrs: cluster
                .servers
                .iter()
                .map(|s| Mutex::new(s.addr.clone()))
                .collect(),
            conns: (0..n).map(|_| Mutex::new(None)).collect(),
        }
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// What this pool's connections prove themselves with.
    pub fn credential(&self) -> &Credential {
        &self.cred
    }

    pub fn root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    /// A new connection to server `rank` (not pooled). If its known address does not answer,
    /// the address is looked up again, once, in the root's cluster file.
    pub fn open(&self, rank: u32, open: Open<'_, C>) -> Result<C> {
        let slot = self
            .addrs
            .get(rank as usize)
            .ok_or_else(|| Error::invalid(format!("no server with rank {rank}")))?;
        let addr = slot.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match open(&addr, &self.cred) {
            Err(e) if e.kind == ErrorKind::Unavailable => {
                // The deployment may have been restarted on new ports: look again, once.
                let Some(fresh) = self.current_addr(rank).filter(|a| *a != addr) else {
                    return Err(e);
                };
                let conn = open(&fresh, &self.cred)?;
                if conn.rank() != rank {
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        format!("{fresh} answers as server {}, not {rank}", conn.rank()),
                    ));
                }
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = fresh;
                Ok(conn)
            }
            r => r,
        }
    }

    /// Server `rank`'s address in the root's cluster file as it is now, if that file still
    /// describes this deployment (same size, and for the deployment's user the same secret).
    fn current_addr(&self, rank: u32) -> Option<String> {
        let (cf, cred) = ClusterFile::join(self.root.as_deref()?).ok()?;
        if cf.size != self.size || (self.cred.user.is_none() && cred != self.cred) {
            return None;
        }
        cf.servers.get(rank as usize).map(|s| s.addr.clone())
    }

    /// Runs `f` on the pooled connection to `rank`, reconnecting once if the pooled one is dead.
    pub fn with_conn<T>(
        &self,
        rank: u32,
        open: Open<'_, C>,
        f: &mut dyn FnMut(&mut C) -> Result<T>,
    ) -> Result<T> {
        let slot = self
            .conns
            .get(rank as usize)
            .ok_or_else(|| Error::invalid(format!("no server with rank {rank}")))?;
        let mut guard = slot
            .lock()
            .map_err(|_| Error::internal("connection lock poisoned"))?;
        let fresh = guard.is_none();
        if fresh {
            *guard = Some(self.open(rank, open)?);
        }
        let conn = guard.as_mut().expect("connection just set");
        match f(conn) {
            Err(e) if breaks_connection(&e) => {
                *guard = None;
                // A pooled connection may have been closed by a server restart: retry once, only
                // for calls that never reached a live server.
                if !fresh && e.kind == ErrorKind::Unavailable {
                    let mut c = self.open(rank, open)?;
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
}
