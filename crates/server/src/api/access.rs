//! Who may reach which object: the checks every client request passes before its family
//! handles it.
//!
//! The deployment's own user reaches everything (the servers act with its rights anyway), so
//! its requests skip every check here and its fast paths are unchanged. Another user of the
//! deployment (`users`, proved in the handshake: `net::handshake`) reaches an object or a
//! container it created, and others' only as far as their owners granted (`pdcx_core::Access`).
//! It never gets a path that bypasses the server: shared memory, read plans of the log
//! (one-copy reads) and reservations in the log (one-copy writes) reach the deployment's own
//! files and memory, so they are refused and its client uses the ordinary paths.
//!
//! Data requests name objects by id; the check looks each one up (at its owner, through the
//! relay, like any lookup), so a user's request costs one more lookup per object than the
//! deployment user's. Catalog requests are checked in `catalog` against the rows they touch,
//! and listings leave out what the caller may not read.

use super::catalog::lookup;
use super::Session;
use crate::Server;
use pdcx_core::protocol::{
    AnalysisRequest, HandshakeRequest, ObjectKey, ReadRequest, Request, StreamRequest, WriteRequest,
};
use pdcx_core::{Access, Error, ErrorKind, Need, ObjectId, Result};

/// The access a new object or container of this caller gets: the caller's own.
pub(crate) fn for_new(sess: &Session) -> Access {
    match sess.caller {
        Some(c) if !c.deployment_user => Access::owned_by(c.uid),
        _ => Access::default(),
    }
}

/// Whether the caller may do `need` to something with `access`.
pub(crate) fn allows(sess: &Session, access: &Access, need: Need) -> bool {
    match sess.caller {
        Some(c) => c.deployment_user || access.allows(c.uid, need),
        None => false,
    }
}

/// Refuses `need` on `what` (a name for the message) unless the caller may.
pub(crate) fn check(sess: &Session, access: &Access, need: Need, what: &str) -> Result<()> {
    if allows(sess, access, need) {
        return Ok(());
    }
    let uid = sess.caller.map_or(u32::MAX, |c| c.uid);
    let owner = match access.user {
        Some(u) => format!("uid {u}"),
        None => "the deployment's user".to_string(),
    };
    let verb = match need {
        Need::Read => "read",
        Need::Write => "change",
        Need::Own => "delete, rename or share",
    };
    Err(Error::new(
        ErrorKind::Auth,
        format!(
            "uid {uid} may not {verb} {what}: it belongs to {owner}{}",
            if need == Need::Own {
                ""
            } else {
                ", who can grant access with `pdcx share`"
            }
        ),
    ))
}

/// Checks `need` on object `id` (looked up at its owner).
pub(crate) fn check_object(
    server: &Server,
    sess: &Session,
    id: ObjectId,
    need: Need,
) -> Result<()> {
    if sess.deployment_user() {
        return Ok(());
    }
    let meta = lookup(server, ObjectKey::Id(id))?;
    check(sess, &meta.access, need, &format!("object {:?}", meta.name))
}

/// The checks of a data request (write, read, stream, analysis, handshake families) for a
/// caller that is not the deployment's user; catalog requests are checked in `catalog`.
pub(crate) fn check_request(server: &Server, sess: &Session, req: &Request) -> Result<()> {
    if sess.deployment_user() {
        return Ok(());
    }
    let own_files = |what: &str| {
        Err(Error::new(
            ErrorKind::Auth,
            format!(
                "{what} reaches the deployment's own files or memory, which only its own user \
                 may use: send the bytes in the request instead"
            ),
        ))
    };
    let (ids, need): (Vec<ObjectId>, Need) = match req {
        Request::Write(w) => match w {
            WriteRequest::Stage(r) if r.shm.is_some() => return own_files("a shared-memory stage"),
            WriteRequest::Stage(r) => (r.items.iter().map(|i| i.id).collect(), Need::Write),
            WriteRequest::Reserve(_) => return own_files("a one-copy write"),
            // Commits name this connection's own staged writes, checked when staged.
            WriteRequest::Commit(_) | WriteRequest::SyncLog(_) => return Ok(()),
            WriteRequest::SyncObjects(r) => (r.ids.clone(), Need::Read),
        },
        Request::Read(r) => match r {
            ReadRequest::Read(r) if r.opts.shm.is_some() => {
                return own_files("a shared-memory read")
            }
            ReadRequest::Read(r) => (r.items.iter().map(|i| i.id).collect(), Need::Read),
            ReadRequest::PlanRead(_) | ReadRequest::PiecePlan(_) => {
                return own_files("a one-copy read plan")
            }
            ReadRequest::Locate(r) => (r.items.iter().map(|i| i.id).collect(), Need::Read),
            ReadRequest::Extents(r) => (vec![r.id], Need::Read),
            ReadRequest::Versions(r) => (vec![r.id], Need::Read),
        },
        Request::Stream(s) => match s {
            StreamRequest::ExtendDims(r) => (vec![r.id], Need::Write),
            StreamRequest::SetSize(r) => (vec![r.id], Need::Write),
            StreamRequest::Seal(r) => (vec![r.id], Need::Write),
            StreamRequest::DiscardIncomplete(r) => (vec![r.id], Need::Write),
            StreamRequest::Versions(r) => match r.id {
                Some(id) => (vec![id], Need::Read),
                None => {
                    return Err(Error::new(
                        ErrorKind::Auth,
                        "the versions of every byte stream are for the deployment's user: \
                         name one stream",
                    ))
                }
            },
        },
        Request::Analysis(a) => match a {
            AnalysisRequest::ValueQuery(r) => (r.query.objects(), Need::Read),
            AnalysisRequest::ImportRefs(r) => (vec![r.id], Need::Write),
            AnalysisRequest::PromoteRefs(r) => (vec![r.id], Need::Write),
        },
        Request::Handshake(HandshakeRequest::AttachShm(_)) => {
            return own_files("shared memory");
        }
        Request::Handshake(_) | Request::Catalog(_) | Request::Admin(_) => return Ok(()),
    };
    let mut seen = std::collections::HashSet::new();
    for id in ids {
        if seen.insert(id) {
            check_object(server, sess, id, need)?;
        }
    }
    Ok(())
}
