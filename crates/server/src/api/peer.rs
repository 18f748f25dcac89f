//! The peer family: requests another server of the deployment sends this one, on a connection
//! whose handshake proved the sender's rank.

use crate::Server;
use pdcx_core::protocol::{PeerRequest, PeerResponse};
use pdcx_core::{Error, Result};
use std::sync::atomic::Ordering;

/// A server-to-server request from server `from` (the rank its handshake proved).
pub(crate) fn handle(
    server: &Server,
    from: u32,
    req: PeerRequest,
) -> Result<(PeerResponse, Vec<u8>)> {
    let resp = match req {
        PeerRequest::Object { id } => {
            server.lookups.fetch_add(1, Ordering::Relaxed);
            PeerResponse::Object(server.meta.object(id)?)
        }
        PeerRequest::ContainerTags { names } => PeerResponse::ContainerTags(
            names
                .iter()
                .map(|n| match server.meta.get_container(n) {
                    Ok(c) => Ok(Some(c.tags)),
                    Err(e) if e.kind == pdcx_core::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(e),
                })
                .collect::<Result<_>>()?,
        ),
        PeerRequest::ConfirmHeld { id, seqs } => {
            let store = server.engine.store();
            store.sync_log_only()?;
            PeerResponse::Held(
                seqs.into_iter()
                    .filter(|&s| store.extent(id, s).is_some())
                    .collect(),
            )
        }
        PeerRequest::Lookup { key, riders } => {
            PeerResponse::Object(super::catalog::relayed_lookup(server, key, riders)?)
        }
        PeerRequest::Register { items } => {
            PeerResponse::Seqs(server.engine.register_batch(from, &items)?)
        }
        PeerRequest::RegisterMemory { items } => {
            PeerResponse::Seqs(server.engine.register_batch_with(from, &items, false)?)
        }
        PeerRequest::DropExtents { id, seqs } => {
            let seqs: std::collections::HashSet<u64> = seqs.into_iter().collect();
            let count = server.engine.store().drop_extents(id, &seqs)? as u64;
            if count > 0 {
                server.engine.store().retire_flushed()?;
            }
            PeerResponse::Dropped { count }
        }
        PeerRequest::Released {
            writes,
            gone,
            tokens_below,
        } => PeerResponse::Dropped {
            count: server
                .engine
                .forget_released(from, &writes, &gone, tokens_below)?,
        },
        req @ (PeerRequest::ShardCandidates { .. }
        | PeerRequest::RecordShardHomes { .. }
        | PeerRequest::ShardRefs { .. }
        | PeerRequest::ShardRelease { .. }
        | PeerRequest::RepackShards { .. }
        | PeerRequest::ShardBytes { .. }
        | PeerRequest::UploadShardPart(_)) => {
            let (resp, bytes) = server.engine.flusher().shard_request(from, req)?;
            if bytes.len() as u64 > server.config.max_payload {
                return Err(Error::invalid(format!(
                    "shard candidates of {} bytes exceed the server's limit of {}",
                    bytes.len(),
                    server.config.max_payload
                )));
            }
            return Ok((resp, bytes));
        }
        PeerRequest::UploadPart(part) => PeerResponse::PartUploaded {
            etag: crate::homecopy::upload_part(server, &part)?,
        },
        PeerRequest::ExtentRanges { id, region } => {
            PeerResponse::ExtentRanges(server.engine.store().extent_ranges(id, &region))
        }
        PeerRequest::ReadOwned { id, region } => {
            let bytes = crate::engine::analysis::read_owned(
                &server.engine,
                id,
                &region,
                server.config.max_payload,
            )?;
            return Ok((PeerResponse::Pieces(vec![(0, region)]), bytes));
        }
        PeerRequest::ReadPieces { id, region } => {
            let (list, bytes) = server.engine.pieces(id, &region)?;
            if bytes.len() as u64 > server.config.max_payload {
                return Err(Error::invalid(format!(
                    "pieces of {} bytes exceed the server's limit of {}",
                    bytes.len(),
                    server.config.max_payload
                )));
            }
            return Ok((PeerResponse::Pieces(list), bytes));
        }
    };
    Ok((resp, Vec::new()))
}
