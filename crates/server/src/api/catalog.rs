//! The catalog family: containers, objects, names and tags.

use super::{access, Session};
use crate::Server;
use pdcx_core::model::owner_of_id;
use pdcx_core::protocol::{
    CatalogRequest as Q, CatalogResponse as A, ObjectKey, ObjectSpec, TagTarget,
};
use pdcx_core::{owner_of_name, Error, ErrorKind, Need, ObjectId, ObjectMeta, Result};
use std::sync::atomic::Ordering;

pub(super) fn handle(server: &Server, req: Q, sess: &Session) -> Result<A> {
    let md = &server.meta;
    let mine = sess.deployment_user();
    // Checks `need` on object `id` held here (or anywhere, through a lookup).
    let object = |id: ObjectId, need: Need| -> Result<()> {
        if mine {
            return Ok(());
        }
        access::check_object(server, sess, id, need)
    };
    let container = |name: &str, need: Need| -> Result<()> {
        if mine {
            return Ok(());
        }
        let c = md.get_container(name)?;
        access::check(sess, &c.access, need, &format!("container {name:?}"))
    };
    let readable = |a: &pdcx_core::Access| access::allows(sess, a, Need::Read);
    Ok(match req {
        Q::CreateContainer(r) => A::Container(md.create_container(
            &r.name,
            &r.tags,
            &r.creator,
            &access::for_new(sess),
        )?),
        Q::GetContainer(r) => {
            container(&r.name, Need::Read)?;
            A::Container(md.get_container(&r.name)?)
        }
        Q::ListContainers(_) => A::Containers(
            md.list_containers()?
                .into_iter()
                .filter(|c| readable(&c.access))
                .collect(),
        ),
        Q::CreateObject(r) => A::Object(create_object(server, r.spec, r.lazy, sess)?),
        Q::CreateObjects(r) => A::Created(create_objects(server, r.specs, r.lazy, sess)),
        Q::OpenObject(r) => {
            server.lookups.fetch_add(1, Ordering::Relaxed);
            readable_meta(sess, by_name(server, &r.name)?)?
        }
        Q::GetObject(r) => {
            server.lookups.fetch_add(1, Ordering::Relaxed);
            readable_meta(sess, md.object(r.id)?)?
        }
        Q::LookupObject(r) => readable_meta(sess, lookup(server, r.key)?)?,
        Q::ListObjects(r) => A::Objects(
            md.list_objects(r.container.as_deref())?
                .into_iter()
                .filter(|m| readable(&m.access))
                .collect(),
        ),
        Q::SetDims(r) => {
            let cur = md.object(r.id)?;
            access::check(
                sess,
                &cur.access,
                Need::Write,
                &format!("object {:?}", cur.name),
            )?;
            if r.dims.len() != cur.dims.len() && server.engine.has_data(r.id) {
                return Err(Error::invalid(format!(
                    "{} holds data: its number of dims cannot change",
                    cur.name
                )));
            }
            A::Object(md.set_dims(r.id, &r.dims)?)
        }
        Q::SetType(r) => {
            object(r.id, Need::Write)?;
            A::Object(md.set_type(r.id, r.dtype, &r.dims)?)
        }
        Q::AddToContainer(r) => {
            object(r.id, Need::Write)?;
            md.add_to_container(r.id, &r.container)?;
            A::Done
        }
        Q::RemoveFromContainer(r) => {
            object(r.id, Need::Write)?;
            md.remove_from_container(r.id, &r.container)?;
            A::Done
        }
        Q::DropMemberships(r) if !mine => {
            // Another user drops only the memberships of objects it may change (as it could
            // one by one), never those of others' objects in a container of the same name.
            for m in md.list_objects(Some(&r.container))? {
                if access::allows(sess, &m.access, Need::Write) {
                    md.remove_from_container(m.id, &r.container)?;
                }
            }
            A::Done
        }
        Q::DropMemberships(r) => {
            md.drop_memberships(&r.container)?;
            A::Done
        }
        Q::PutTags(r) => {
            for (key, value) in &r.tags {
                crate::engine::retention::check_tag(key, value)?;
            }
            match r.target {
                TagTarget::Object(id) => {
                    object(id, Need::Write)?;
                    server.engine.check_names_kept(id, &r.tags)?;
                    crate::tiering::put_object_tags(
                        md,
                        server.engine.tiering.as_deref(),
                        id,
                        r.tags,
                        r.lazy,
                    )?
                }
                target => {
                    if let TagTarget::Container(name) = &target {
                        container(name, Need::Write)?;
                    }
                    md.put_tags_with(&target, &r.tags, r.lazy)?
                }
            }
            A::Done
        }
        Q::DeleteTag(r) => {
            match &r.target {
                TagTarget::Object(id) => object(*id, Need::Write)?,
                TagTarget::Container(name) => container(name, Need::Write)?,
            }
            let _serial = crate::tiering::rule_change_guard(&r.key);
            md.delete_tag(&r.target, &r.key)?;
            A::Done
        }
        Q::Query(r) => {
            let found = md.query(&r.conditions)?;
            if mine {
                A::Matches(found)
            } else {
                A::Matches(
                    found
                        .into_iter()
                        .filter(|(id, _)| md.object(*id).is_ok_and(|m| readable(&m.access)))
                        .collect(),
                )
            }
        }
        Q::DeleteObject(r) => {
            object(r.id, Need::Own)?;
            let gone = md.delete_object(r.id)?;
            md.forget_versions(r.id)?;
            server.engine.forget(r.id);
            server.compactor.kick();
            // The client drops a link its name left elsewhere (`meta/rename.rs`).
            A::Object(gone)
        }
        Q::DeleteContainer(r) => {
            container(&r.name, Need::Own)?;
            md.delete_container(&r.name)?;
            A::Done
        }
        Q::RenameObject(r) => {
            object(r.id, Need::Own)?;
            A::Object(md.rename_object(r.id, &r.name)?)
        }
        Q::LinkName(r) => {
            server.check_owner(&r.name)?;
            object(r.id, Need::Own)?;
            md.link_name(&r.name, r.id)?;
            A::Done
        }
        Q::UnlinkName(r) => {
            object(r.id, Need::Own)?;
            md.unlink_name(&r.name, r.id)?;
            A::Done
        }
        Q::SyncMeta(_) => {
            md.sync()?;
            A::Done
        }
        Q::Share(r) => {
            match &r.target {
                TagTarget::Object(id) => {
                    let cur = md.object(*id)?;
                    access::check(
                        sess,
                        &cur.access,
                        Need::Own,
                        &format!("object {:?}", cur.name),
                    )?;
                    let mut a = cur.access;
                    a.grant(r.uid, r.access);
                    md.set_object_access(*id, &a)?;
                }
                TagTarget::Container(name) => {
                    let cur = md.get_container(name)?;
                    access::check(sess, &cur.access, Need::Own, &format!("container {name:?}"))?;
                    let mut a = cur.access;
                    a.grant(r.uid, r.access);
                    md.set_container_access(name, &a)?;
                }
            }
            A::Done
        }
    })
}

/// An object's metadata, if the caller may read it.
fn readable_meta(sess: &Session, m: ObjectMeta) -> Result<A> {
    access::check(sess, &m.access, Need::Read, &format!("object {:?}", m.name))?;
    Ok(A::Object(m))
}

/// `CreateObject`: durable when answered, or with `lazy` at the next metadata batch.
fn create_object(
    server: &Server,
    mut spec: ObjectSpec,
    lazy: bool,
    sess: &Session,
) -> Result<ObjectMeta> {
    server.check_owner(&spec.name)?;
    if !lazy {
        drop_dangling_link(server, &spec.name)?;
    }
    crate::tiering::check_new_object(server.engine.tiering.as_deref(), &mut spec)?;
    let created = server
        .meta
        .create_objects_with(std::slice::from_ref(&spec), lazy, &access::for_new(sess))
        .pop();
    created.unwrap_or_else(|| Err(Error::internal("create_objects returned no result")))
}

fn owner_of_key(key: &ObjectKey, size: u32) -> u32 {
    match key {
        ObjectKey::Name(n) => owner_of_name(n, size),
        ObjectKey::Id(id) => owner_of_id(*id, size),
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
    sess: &Session,
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
    let mut created = server
        .meta
        .create_objects_with(&ok, lazy, &access::for_new(sess))
        .into_iter();
    for r in results.iter_mut().filter(|r| r.is_none()) {
        *r = created.next();
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(Error::internal("missing create result"))))
        .collect()
}
