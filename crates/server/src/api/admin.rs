//! The admin family: one server's status, shutdown, flushes and migrations.

use crate::stats::stats;
use crate::Server;
use pdcx_core::protocol::{AdminRequest as Q, AdminResponse as A, FlushReport, Moved};
use pdcx_core::{Error, Result};
use std::sync::atomic::Ordering;

pub(super) fn handle(server: &Server, req: Q) -> Result<A> {
    Ok(match req {
        Q::Stats(_) => A::Stats(Box::new(stats(server)?)),
        Q::Shutdown(_) => {
            server.shutdown_requested.store(true, Ordering::SeqCst);
            A::Done
        }
        Q::Flush(r) => A::Flushed(flush(server, r.wait)?),
        Q::Migrate(r) => {
            let (extents, bytes) = server.engine.flusher().migrate(r.id, &r.tier)?;
            A::Migrated(Moved { extents, bytes })
        }
        Q::Compact(r) => A::Compacted(crate::compactor::pass(server, r.threshold, 0, &mut |_| {})?),
    })
}

fn flush(server: &Server, wait: bool) -> Result<FlushReport> {
    let Some(t) = &server.engine.tiering else {
        return Err(Error::invalid(
            "this deployment has no tiers configured: add [[tier]] entries to ROOT/pdcx.toml",
        ));
    };
    if wait {
        server.engine.flusher().flush_all(&mut |_, _| {})
    } else {
        t.kick();
        let st = stats(server)?;
        Ok(FlushReport {
            pending_extents: st.flush_pending_extents,
            pending_bytes: st.flush_pending_bytes,
            error: st.flush_error,
            ..Default::default()
        })
    }
}
