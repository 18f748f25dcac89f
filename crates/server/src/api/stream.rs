//! The byte-stream family: sizes, seals and versions, at the stream's owner.

use super::Session;
use crate::Server;
use pdcx_core::protocol::{StreamRequest as Q, StreamResponse as A};
use pdcx_core::{ObjectId, Result};

pub(super) fn handle(server: &Server, req: Q, sess: &Session) -> Result<A> {
    if let Q::Seal(r) = &req {
        server.allowed.check_home(&r.home, sess.deployment_user())?;
    }
    Ok(match req {
        Q::ExtendDims(r) => A::Object(server.meta.extend_dims(r.id, &r.dims)?),
        Q::SetSize(r) => A::Object(crate::streams::set_size(server, r.id, r.len)?),
        Q::Seal(r) if r.sync_log => A::Sealed(sync_seal(server, r.id, &r.home)?),
        Q::Seal(r) => A::Sealed(crate::homecopy::seal(server, r.id, &r.home)?),
        Q::Versions(r) => A::Versions(server.meta.versions(r.id)?),
        Q::DiscardIncomplete(r) => A::Discarded(crate::streams::discard_incomplete(server, r.id)?),
    })
}

/// `Seal` with `sync_log`: the log synced, then the seal, whose WAL fsync also covers every metadata
/// change before it.
pub(super) fn sync_seal(server: &Server, id: ObjectId, home: &str) -> Result<u64> {
    server.engine.store().sync_log_only()?;
    let epoch = crate::homecopy::seal(server, id, home)?;
    // An unchanged stream is answered without a WAL fsync: make the metadata changes this
    // client may count on (its creates here) durable anyway.
    server.meta.sync()?;
    Ok(epoch)
}
