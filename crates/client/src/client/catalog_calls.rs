//! Catalog calls: containers, objects, names and tags, each at its owner (listings and
//! queries at every server).

use super::*;

impl Client {
    pub fn container_owner(&self, name: &str) -> u32 {
        owner_of_name(name, self.size())
    }

    pub fn create_container(&self, name: &str, tags: Tags) -> Result<ContainerInfo> {
        validate_name("container", name)?;
        let req = catalog::CreateContainer {
            name: name.into(),
            tags,
            creator: self.user().to_string(),
        };
        self.call(self.container_owner(name), req)
    }

    pub fn get_container(&self, name: &str) -> Result<ContainerInfo> {
        let req = catalog::GetContainer { name: name.into() };
        self.call(self.container_owner(name), req)
    }

    pub fn list_containers(&self) -> Result<Vec<ContainerInfo>> {
        let mut all = Vec::new();
        for c in self.call_all(catalog::ListContainers {})? {
            all.extend(c);
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
        self.call(owner, catalog::CreateObject { spec, lazy: true })
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
            match self.call(owner, catalog::SyncMeta {}) {
                Ok(()) => {}
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
            match self.call(owner, catalog::CreateObjects { specs, lazy }) {
                Ok(rs) if rs.len() == n => out.extend(idx.into_iter().zip(rs)),
                Ok(rs) => {
                    let e = Error::protocol(format!(
                        "{} results for a create of {n} objects",
                        rs.len()
                    ));
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
            let req = catalog::LookupObject { key: key.clone() };
            match self.call(local, req) {
                Ok(o) => return Ok(o),
                Err(e) if e.kind == ErrorKind::Unavailable => {}
                Err(e) => return Err(e),
            }
        }
        match key {
            ObjectKey::Name(name) => self.call(owner, catalog::OpenObject { name }),
            ObjectKey::Id(id) => self.call(owner, catalog::GetObject { id }),
        }
    }

    pub fn list_objects(&self, container: Option<&str>) -> Result<Vec<ObjectMeta>> {
        if let Some(c) = container {
            self.get_container(c)?;
        }
        let mut all = Vec::new();
        let req = catalog::ListObjects {
            container: container.map(str::to_string),
        };
        for o in self.call_all(req)? {
            all.extend(o);
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    /// Grows an object's dims to at least `dims` (elementwise maximum: concurrent growers never
    /// shrink each other's size).
    pub fn extend_dims(&self, id: ObjectId, dims: Vec<u64>) -> Result<ObjectMeta> {
        self.call(self.id_owner(id)?, stream::ExtendDims { id, dims })
    }

    /// Sets an object's dims exactly (they may shrink; see the server's `set_dims`).
    pub fn set_dims(&self, id: ObjectId, dims: Vec<u64>) -> Result<ObjectMeta> {
        self.call(self.id_owner(id)?, catalog::SetDims { id, dims })
    }

    /// Gives an object created without an element type its type and, unless `dims` is
    /// empty, its dims (one durable change at the owner; the same type again is a no-op).
    pub fn set_type(
        &self,
        id: ObjectId,
        dtype: pdcx_core::Dtype,
        dims: Vec<u64>,
    ) -> Result<ObjectMeta> {
        self.call(self.id_owner(id)?, catalog::SetType { id, dtype, dims })
    }

    pub fn add_to_container(&self, id: ObjectId, container: &str) -> Result<()> {
        self.get_container(container)?;
        let req = catalog::AddToContainer {
            id,
            container: container.into(),
        };
        self.call(self.id_owner(id)?, req)
    }

    /// Deletes an object: metadata, memberships, tags and extents. The data bytes stay in the
    /// owner's log as garbage until compaction exists.
    pub fn delete_object(&self, id: ObjectId) -> Result<()> {
        let owner = self.id_owner(id)?;
        let gone = self.call(owner, catalog::DeleteObject { id })?;
        // A renamed object's name may be a link on another server (`rename_object`).
        let at = owner_of_name(&gone.name, self.size());
        if at != owner {
            let req = catalog::UnlinkName {
                name: gone.name,
                id,
            };
            self.call(at, req)?;
        }
        Ok(())
    }

    /// Gives object `id` the name `name` . The object keeps its id, owner, data and
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
            let req = catalog::LinkName {
                name: name.to_string(),
                id,
            };
            self.call(new_at, req)?;
        }
        let req = catalog::RenameObject {
            id,
            name: name.to_string(),
        };
        let meta = self.call(owner, req)?;
        let old_at = owner_of_name(&cur.name, self.size());
        if old_at != owner {
            let req = catalog::UnlinkName { name: cur.name, id };
            self.call(old_at, req)?;
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
        let req = catalog::DeleteContainer { name: name.into() };
        self.call(self.container_owner(name), req)?;
        self.call_all(catalog::DropMemberships {
            container: name.into(),
        })?;
        Ok(())
    }

    /// Removes object `id` from `container`; NotFound if it was not a member.
    pub fn remove_from_container(&self, id: ObjectId, container: &str) -> Result<()> {
        let req = catalog::RemoveFromContainer {
            id,
            container: container.into(),
        };
        self.call(self.id_owner(id)?, req)
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
        let req = catalog::PutTags {
            target,
            tags,
            lazy: true,
        };
        self.call(owner, req)
    }

    /// Grants user `uid` (every user of the deployment when None) read access (`Some(false)`),
    /// read and write access (`Some(true)`), or takes its grant away (`None`) on an object or
    /// a container. Only its owner, or the deployment's user, may.
    pub fn share(&self, target: TagTarget, uid: Option<u32>, access: Option<bool>) -> Result<()> {
        let owner = self.target_owner(&target)?;
        self.call(
            owner,
            catalog::Share {
                target,
                uid,
                access,
            },
        )
    }

    pub fn delete_tag(&self, target: TagTarget, key: &str) -> Result<()> {
        let owner = self.target_owner(&target)?;
        let req = catalog::DeleteTag {
            target,
            key: key.into(),
        };
        self.call(owner, req)
    }

    /// Objects whose tags satisfy every condition, from all servers, sorted by name.
    pub fn query(&self, conditions: Vec<Condition>) -> Result<Vec<(ObjectId, String)>> {
        let mut all = Vec::new();
        for m in self.call_all(catalog::Query { conditions })? {
            all.extend(m);
        }
        all.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(all)
    }
}
