//! The catalog family: containers, objects, names and tags.

use crate::Server;
use pdcx_core::model::owner_of_id;
use pdcx_core::protocol::{
    CatalogRequest as Q, CatalogResponse as A, ObjectKey, ObjectSpec, TagTarget,
};
use pdcx_core::{owner_of_name, Error, ErrorKind, ObjectMeta, Result};
use std::sync::atomic::Ordering;

pub(super) fn handle(server: &Server, req: Q) -> Result<A> {
    let md = &server.meta;
    Ok(match req {
        Q::CreateContainer(r) => A::Container(md.create_container(&r.name, &r.tags, &r.creator)?),
        Q::GetContainer(r) => A::Container(md.get_container(&r.name)?),
        Q::ListContainers(_) => A::Containers(md.list_containers()?),
        Q::CreateObject(r) => A::Object(create_object(server, r.spec, r.lazy)?),
        Q::CreateObjects(r) => A::Created(create_objects(server, r.specs, r.lazy)),
        Q::OpenObject(r) => {
            server.lookups.fetch_add(1, Ordering::Relaxed);
            A::Object(by_name(server, &r.name)?)
        }
        Q::GetObject(r) => {
            server.lookups.fetch_add(1, Ordering::Relaxed);
            A::Object(md.object(r.id)?)
        }
        Q::LookupObject(r) => A::Object(lookup(server, r.key)?),
        Q::ListObjects(r) => A::Objects(md.list_objects(r.container.as_deref())?),
        Q::SetDims(r) => {
            let cur = md.object(r.id)?;
            if r.dims.len() != cur.dims.len() && server.engine.has_data(r.id) {
                return Err(Error::invalid(format!(
                    "{} holds data: its number of dims cannot change",
                    cur.name
                )));
            }
            A::Object(md.set_dims(r.id, &r.dims)?)
        }
        Q::SetType(r) => A::Object(md.set_type(r.id, r.dtype, &r.dims)?),
        Q::AddToContainer(r) => {
            md.add_to_container(r.id, &r.container)?;
            A::Done
        }
        Q::RemoveFromContainer(r) => {
            md.remove_from_container(r.id, &r.container)?;
            A::Done
        }
        Q::DropMemberships(r) => {
            md.drop_memberships(&r.container)?;
            A::Done
        }
        Q::PutTags(r) => {
            match r.target {
                TagTarget::Object(id) => crate::tiering::put_object_tags(
                    md,
                    server.engine.tiering.as_deref(),
                    id,
                    r.tags,
                    r.lazy,
                )?,
                target => md.put_tags_with(&target, &r.tags, r.lazy)?,
            }
            A::Done
        }
        Q::DeleteTag(r) => {
            let _serial = crate::tiering::rule_change_guard(&r.key);
            md.delete_tag(&r.target, &r.key)?;
            A::Done
        }
        Q::Query(r) => A::Matches(md.query(&r.conditions)?),
        Q::DeleteObject(r) => {
            let gone = md.delete_object(r.id)?;
            md.forget_versions(r.id)?;
            server.engine.forget(r.id);
            // The client drops a link its name left elsewhere (`meta/rename.rs`).
            A::Object(gone)
        }
        Q::DeleteContainer(r) => {
            md.delete_container(&r.name)?;
            A::Done
        }
        Q::RenameObject(r) => A::Object(md.rename_object(r.id, &r.name)?),
        Q::LinkName(r) => {
            server.check_owner(&r.name)?;
            md.link_name(&r.name, r.id)?;
            A::Done
        }
        Q::UnlinkName(r) => {
            md.unlink_name(&r.name, r.id)?;
            A::Done
        }
        Q::SyncMeta(_) => {
            md.sync()?;
            A::Done
        }
    })
}

/// `CreateObject`: durable when answered, or with `lazy` at the next metadata batch.
fn create_object(server: &Server, mut spec: ObjectSpec, lazy: bool) -> Result<ObjectMeta> {
    server.check_owner(&spec.name)?;
    if !lazy {
        drop_dangling_link(server, &spec.name)?;
    }
    crate::tiering::check_new_object(server.engine.tiering.as_deref(), &mut spec)?;
    if !lazy {
        return server.meta.create_object(&spec);
    }
    let created = server
        .meta
        .create_objects_with(std::slice::from_ref(&spec), true)
        .pop();
    created.unwrap_or_else(|| Err(Error::internal("create_objects returned no result")))
}

fn owner_of_key(key: &ObjectKey, size: u32) -> u32 {
    match key {
        ObjectKey::Name(n) => owner_of_name(n, size),
        ObjectKey::Id(id) => owner_of_id(*id),
    }
}

fn lookup_here(server: &Server, key: &ObjectKey) -> Result<ObjectMeta> {
    server.lookups.fetch_add(1, Ordering::Relaxed);
    match key {
        ObjectKey::Name(n) => by_name(server, n),
        ObjectKey::Id(id) => server.meta.object(*id),
    }
}

/// An object by a name that hashes here: its own, or one another server owns that a rename
/// linked here (looked up by id at its owner; `meta/rename.rs`).
fn by_name(server: &Server, name: &str) -> Result<ObjectMeta> {
    match server.meta.object_by_name(name) {
        Err(e) if e.kind == ErrorKind::NotFound => match server.meta.linked(name) {
            Some(id) => lookup(server, ObjectKey::Id(id)).map_err(|e| {
                if e.kind == ErrorKind::NotFound {
                    Error::not_found(format!("no object named {name:?}"))
                } else {
                    e
                }
            }),
            None => Err(e),
        },
        r => r,
    }
}

/// Before a create of `name`: a link left by an object since deleted (a crash between the
/// owner's delete and the unlink) no longer holds the name.
fn drop_dangling_link(server: &Server, name: &str) -> Result<()> {
    let Some(id) = server.meta.linked(name) else {
        return Ok(());
    };
    let gone = matches!(lookup(server, ObjectKey::Id(id)), Err(e) if e.kind == ErrorKind::NotFound);
    server.meta.drop_dangling_link(name, |_| !gone)
}

/// `LookupObject`: answered here if this server owns the object, else forwarded to the owner
/// through the relay (shared with identical lookups of this node's clients).
pub(super) fn lookup(server: &Server, key: ObjectKey) -> Result<ObjectMeta> {
    let size = server.config.size;
    let owner = owner_of_key(&key, size);
    if owner == server.config.rank {
        return lookup_here(server, &key);
    }
    if owner >= size {
        return Err(Error::not_found(format!(
            "object id {key:?} names server {owner}, which does not exist"
        )));
    }
    server
        .relay
        .lookup(&key, |riders| server.peers.lookup(owner, &key, riders))
}

/// `PeerRequest::Lookup`: a lookup another server forwarded for `riders` of its clients. The
/// owner answers it itself; it is never forwarded again.
pub(super) fn relayed_lookup(server: &Server, key: ObjectKey, riders: u32) -> Result<ObjectMeta> {
    let owner = owner_of_key(&key, server.config.size);
    if owner != server.config.rank {
        return Err(Error::invalid(format!(
            "a lookup of {key:?} was relayed to server {}, but server {owner} owns it",
            server.config.rank
        )));
    }
    server.lookups_forwarded.fetch_add(1, Ordering::Relaxed);
    server
        .lookups_forwarded_clients
        .fetch_add(riders.max(1) as u64, Ordering::Relaxed);
    lookup_here(server, &key)
}

/// `CreateObjects` (lazy or not): misrouted names and specs the tier rules refuse fail
/// individually; the rest are created together (one batch of rows, and for the durable kind
/// one fsync).
fn create_objects(
    server: &Server,
    mut specs: Vec<ObjectSpec>,
    lazy: bool,
) -> Vec<Result<ObjectMeta>> {
    let tiering = server.engine.tiering.as_deref();
    let mut results: Vec<Option<Result<ObjectMeta>>> = specs
        .iter_mut()
        .map(|s| {
            server
                .check_owner(&s.name)
                .and_then(|()| crate::tiering::check_new_object(tiering, s))
                .err()
                .map(Err)
        })
        .collect();
    let ok: Vec<ObjectSpec> = specs
        .into_iter()
        .zip(&results)
        .filter(|(_, r)| r.is_none())
        .map(|(s, _)| s)
        .collect();
    let mut created = server.meta.create_objects_with(&ok, lazy).into_iter();
    for r in results.iter_mut().filter(|r| r.is_none()) {
        *r = created.next();
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(Error::internal("missing create result"))))
        .collect()
}
