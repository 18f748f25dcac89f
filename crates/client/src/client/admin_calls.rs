//! Admin calls: one server's extents, status, flushes, migrations, shutdown.

use super::*;

impl Client {
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

    /// The versions of `id` a read can ask for, from its owner (`ReadRequest::Versions`).
    pub fn versions(&self, id: ObjectId) -> Result<pdcx_core::protocol::VersionList> {
        let owner = self.id_owner(id)?;
        self.call(owner, read::Versions { id })
    }

    fn extents_on(&self, rank: u32, id: ObjectId) -> Result<Vec<ExtentInfo>> {
        self.call(rank, read::Extents { id })
    }

    pub fn stats(&self, rank: u32) -> Result<ServerStats> {
        self.call(rank, admin::Stats {}).map(|s| *s)
    }

    /// Asks server `rank` to flush committed extents to its tiers: with `wait`, returns once
    /// nothing is pending or a tier fails; without, wakes its flusher and returns the queue.
    pub fn flush_server(&self, rank: u32, wait: bool) -> Result<FlushReport> {
        self.call(rank, admin::Flush { wait })
    }

    /// Runs a compaction pass on server `rank` now (admin role): see
    /// `AdminRequest::Compact`. Returns what it did.
    pub fn compact_server(&self, rank: u32, threshold: Option<f64>) -> Result<CompactReport> {
        self.call_admin(rank, admin::Compact { threshold })
    }

    /// Moves every extent of `id`, on every server holding some, to tier `tier`. Returns the
    /// extents and raw bytes moved.
    pub fn migrate(&self, id: ObjectId, tier: &str) -> Result<(u64, u64)> {
        let (mut n, mut bytes) = (0, 0);
        for rank in 0..self.size() {
            let req = admin::Migrate {
                id,
                tier: tier.to_string(),
            };
            let Moved { extents, bytes: b } = self.call_admin(rank, req)?;
            n += extents;
            bytes += b;
        }
        Ok((n, bytes))
    }

    pub fn shutdown_server(&self, rank: u32) -> Result<()> {
        self.call_admin(rank, admin::Shutdown {})
    }

    /// Sends `req` to server `rank` over a connection of its own in the admin role (pooled
    /// connections are clients: an application cannot stop a server by mistake). Only the
    /// deployment's own user may take the role.
    fn call_admin<C: Call + Clone>(&self, rank: u32, req: C) -> Result<C::Reply> {
        if self.inner.pool.credential().user.is_some() {
            let name = req.clone().into().name();
            return Err(Error::new(
                ErrorKind::Auth,
                format!(
                    "`{name}` needs the admin role, which only the deployment's own user can take"
                ),
            ));
        }
        let mut conn = self.inner.pool.open(rank, &|addr, cred| {
            crate::conn::Conn::connect_with(addr, cred, Role::Admin)
        })?;
        conn.ask(req, &[])
    }
}
