//! One server's status (`pdcx top`, `pdcx server status`): read from the counters
//! (`crate::counters`) and the stores, by the admin family and by the Prometheus exporter.

use crate::Server;
use pdcx_core::protocol::ServerStats;
use pdcx_core::Result;
use std::sync::atomic::Ordering;

pub(crate) fn stats(server: &Server) -> Result<ServerStats> {
    let (objects, containers) = server.meta.counts()?;
    let c = &server.engine.counters;
    let mut st = ServerStats {
        rank: server.config.rank,
        size: server.config.size,
        pid: std::process::id(),
        addr: server.addr.to_string(),
        dir: server.dir.display().to_string(),
        uptime_s: server.started.elapsed().as_secs_f64(),
        objects,
        containers,
        extents: server.engine.extent_count(),
        log_bytes: server.engine.log_bytes(),
        log_live_bytes: server.engine.store().space().1,
        compacted: server.compactor.totals(),
        meta_bytes: server.meta.file_bytes(),
        cache_bytes: server.engine.cache().bytes(),
        cache_capacity: server.engine.cache().capacity(),
        connections: server.connections.load(Ordering::Relaxed),
        read_bytes: server.read_bytes.load(Ordering::Relaxed),
        query_scanned_bytes: server.metrics.query_scanned.load(Ordering::Relaxed),
        query_skipped_bytes: server.metrics.query_skipped.load(Ordering::Relaxed),
        piece_plans: server.metrics.piece_plans.load(Ordering::Relaxed),
        lookups: server.lookups.load(Ordering::Relaxed),
        lookups_forwarded: server.lookups_forwarded.load(Ordering::Relaxed),
        lookups_forwarded_clients: server.lookups_forwarded_clients.load(Ordering::Relaxed),
        lookups_relayed: server.relay.relayed.load(Ordering::Relaxed),
        lookups_coalesced: server.relay.coalesced.load(Ordering::Relaxed),
        registers: c.received.load(Ordering::Relaxed),
        registered_regions: c.regions.load(Ordering::Relaxed),
        registers_sent: c.sent.load(Ordering::Relaxed),
        unregistered: server.engine.deferred_count(),
        shm_bytes: server.shm_bytes.load(Ordering::Relaxed),
        unix_connections: server.unix_connections(),
        direct_write_bytes: server.metrics.direct_written.load(Ordering::Relaxed),
        home_parts_uploaded: server.homecopy.parts_uploaded.load(Ordering::Relaxed),
        ..ServerStats::default()
    };
    server.engine.flusher().fill_tier_stats(&mut st);
    Ok(st)
}
