//! The analysis family: value queries where the data lives, references into files outside
//! pdcx.

use super::Session;
use crate::engine::analysis;
use crate::Server;
use pdcx_core::protocol::{AnalysisRequest as Q, AnalysisResponse as A, Moved};
use pdcx_core::{Error, ObjectId, ObjectMeta, Result};
use std::sync::atomic::Ordering;

pub(super) fn handle(server: &Server, req: Q, sess: &Session) -> Result<(A, Vec<u8>)> {
    let moved = |(extents, bytes)| A::Imported(Moved { extents, bytes });
    Ok(match req {
        Q::ValueQuery(r) => {
            let max = server.config.max_payload;
            let (answer, payload) =
                analysis::value_query(&server.engine, &r.query, r.region, &r.want, max)?;
            let m = &server.metrics;
            m.query_scanned
                .fetch_add(answer.scanned_bytes, Ordering::Relaxed);
            m.query_skipped
                .fetch_add(answer.skipped_bytes, Ordering::Relaxed);
            (A::Answer(answer), payload)
        }
        Q::ImportRefs(r) => {
            let obj = owned(server, r.id, "import references")?;
            // The server reads these files with the deployment user's rights.
            for item in &r.items {
                server
                    .allowed
                    .check_import(&item.path, sess.deployment_user())?;
            }
            let store = server.engine.store();
            (moved(store.add_references(&obj, &r.items)?), Vec::new())
        }
        Q::PromoteRefs(r) => {
            let obj = owned(server, r.id, "promote it")?;
            (
                moved(server.engine.store().promote_references(&obj)?),
                Vec::new(),
            )
        }
    })
}

/// The object, if this server owns it (`what` to do there otherwise).
fn owned(server: &Server, id: ObjectId, what: &str) -> Result<ObjectMeta> {
    let owner = server.meta.owner_of(id);
    if owner != server.config.rank {
        return Err(Error::invalid(format!(
            "object {id:#x} is owned by server {owner}: {what} there"
        )));
    }
    server.meta.object(id)
}
