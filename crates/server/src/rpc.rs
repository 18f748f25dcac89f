//! One thread per connection: authenticate, then read request frames and answer each one.
//! A malformed body gets an error reply and the connection goes on (the framing is intact);
//! a malformed header, a wrong version or a failed handshake closes the connection.

use crate::engine::Staged;
use crate::shm::Attached;
use crate::Server;
use pdcx_core::model::owner_of_id;
use pdcx_core::protocol::{
    self, Consistency, FrameKind, ObjectKey, Request, Response, ServerStats,
};
use pdcx_core::{owner_of_name, Error, ErrorKind, ObjectMeta, Result};
use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::Duration;

type Reader = BufReader<TcpStream>;
type Writer = BufWriter<TcpStream>;

pub(crate) fn serve_connection(server: &Server, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    crate::limits::on_connect(&stream, &server.config.limits);
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::with_capacity(1 << 20, read_half);
    let mut writer = BufWriter::with_capacity(256 << 10, stream);
    if let Err(e) = handshake(server, &mut reader, &mut writer) {
        let _ = reply(&mut writer, 0, &Response::Error(e), &[]);
        return;
    }
    server.connections.fetch_add(1, Ordering::Relaxed);
    let mut sess = Session::default();
    loop {
        if !crate::limits::await_request(
            &mut reader,
            &server.config.limits,
            sess.pending.is_empty(),
        ) {
            break;
        }
        let (head, body) = match protocol::read_frame_head(&mut reader, server.config.max_payload) {
            Ok(x) => x,
            Err(e) if e.kind == ErrorKind::Unavailable => break,
            Err(e) => {
                let _ = reply(&mut writer, 0, &Response::Error(e), &[]);
                break;
            }
        };
        if head.kind != FrameKind::Request {
            let e = Error::protocol(format!("expected a request frame, got {:?}", head.kind));
            let _ = reply(&mut writer, head.request_id, &Response::Error(e), &[]);
            break;
        }
        let outcome = match protocol::decode_body::<Request>(&body) {
            Ok(req) => handle(server, req, head.payload_len, &mut reader, &mut sess),
            Err(e) => drain(&mut reader, head.payload_len).and(Err(e)),
        };
        let (resp, payload, shutdown) = match outcome {
            Ok((resp, payload)) => {
                let shut = matches!(resp, Response::Ok)
                    && server.shutdown_requested.load(Ordering::SeqCst);
                (resp, payload, shut)
            }
            // The client vanished mid-frame: nothing to answer. (Other servers being unavailable
            // is an ordinary error, reported to the client.)
            Err(e) if client_gone(&e) => break,
            Err(e) => (Response::Error(e), Vec::new(), false),
        };
        if reply(&mut writer, head.request_id, &resp, &payload).is_err() {
            break;
        }
        if payload.capacity() <= crate::limits::keep_limit(server, SCRATCH_KEEP)
            && payload.capacity() > sess.scratch.capacity()
        {
            sess.scratch = payload;
        }
        if shutdown {
            server.wake_acceptor();
            break;
        }
    }
    server.connections.fetch_sub(1, Ordering::Relaxed);
    // `sess` drops here: uncommitted writes are forgotten and shared-memory arenas unmapped.
}

/// What one connection keeps between requests.
#[derive(Default)]
struct Session {
    /// Writes staged by this connection and not committed yet; dropped if it disconnects.
    pending: HashMap<u64, Staged>,
    /// Stage payloads are received (or copied out of shared memory) into this buffer, reused
    /// from one request to the next.
    recv: Vec<u8>,
    /// Read replies are assembled in this buffer, kept from one request to the next so a
    /// steady stream of reads does not page-fault fresh memory for every reply.
    scratch: Vec<u8>,
    /// Shared-memory arenas the client attached (same-node clients only).
    shm: Attached,
}

fn handshake(server: &Server, reader: &mut Reader, writer: &mut Writer) -> Result<()> {
    let nonce: [u8; protocol::NONCE_LEN] = rand::random();
    protocol::write_frame(writer, FrameKind::Challenge, 0, &nonce, &[])
        .map_err(|e| Error::io("sending challenge", &e))?;
    reader
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| Error::io("socket", &e))?;
    // An HMAC-SHA256 tag is 32 bytes; allow a little slack, never megabytes.
    let (head, tag) = protocol::read_frame_head_limited(reader, 256, 0)?;
    if head.kind != FrameKind::Auth || !protocol::auth_verify(&server.secret, &nonce, &tag) {
        return Err(Error::new(
            ErrorKind::Auth,
            "authentication failed: this client does not hold the deployment secret",
        ));
    }
    crate::limits::after_handshake(reader.get_ref(), &server.config.limits)?;
    reply(
        writer,
        0,
        &Response::Welcome {
            rank: server.config.rank,
            size: server.config.size,
        },
        &[],
    )
    .map_err(|e| Error::io("sending welcome", &e))
}

fn reply(w: &mut Writer, id: u64, resp: &Response, payload: &[u8]) -> std::io::Result<()> {
    let body = protocol::encode_body(resp).map_err(|e| std::io::Error::other(e.message))?;
    protocol::write_frame(w, FrameKind::Response, id, &body, &[payload])
}

const GONE_MID_PAYLOAD: &str = "connection closed mid-payload";
const GONE_MID_TRANSFER: &str = "client disconnected mid-transfer";

/// The error says this connection's client went away (so no reply can reach it).
fn client_gone(e: &Error) -> bool {
    e.kind == ErrorKind::Unavailable
        && (e.message == GONE_MID_PAYLOAD || e.message == GONE_MID_TRANSFER)
}

fn drain(r: &mut Reader, n: u64) -> Result<()> {
    let copied = std::io::copy(&mut r.take(n), &mut std::io::sink())
        .map_err(|e| Error::io("reading payload", &e))?;
    if copied < n {
        return Err(Error::new(ErrorKind::Unavailable, GONE_MID_PAYLOAD));
    }
    Ok(())
}

/// Largest receive buffer a connection keeps between stage requests.
const RECV_KEEP: usize = 256 << 20;

fn no_payload(r: &mut Reader, n: u64) -> Result<()> {
    if n > 0 {
        drain(r, n)?;
        return Err(Error::protocol("this request takes no payload"));
    }
    Ok(())
}

fn handle(
    server: &Server,
    req: Request,
    payload_len: u64,
    reader: &mut Reader,
    sess: &mut Session,
) -> Result<(Response, Vec<u8>)> {
    let md = &server.meta;
    if let Request::Stage { items } = req {
        let r = stage(server, items, payload_len, reader, sess);
        if sess.recv.capacity() > crate::limits::keep_limit(server, RECV_KEEP) {
            sess.recv = Vec::new();
        }
        return r;
    }
    no_payload(reader, payload_len)?;
    let pending = &mut sess.pending;
    let resp = match req {
        Request::Ping => Response::Welcome {
            rank: server.config.rank,
            size: server.config.size,
        },
        Request::CreateContainer {
            name,
            tags,
            creator,
        } => Response::Container(md.create_container(&name, &tags, &creator)?),
        Request::GetContainer { name } => Response::Container(md.get_container(&name)?),
        Request::ListContainers => Response::Containers(md.list_containers()?),
        Request::CreateObject(mut spec) => {
            server.check_owner(&spec.name)?;
            crate::tiering::check_new_object(server.engine.tiering.as_deref(), &mut spec)?;
            Response::Object(md.create_object(&spec)?)
        }
        Request::OpenObject { name } => {
            server.lookups.fetch_add(1, Ordering::Relaxed);
            Response::Object(md.object_by_name(&name)?)
        }
        Request::GetObject { id } => {
            server.lookups.fetch_add(1, Ordering::Relaxed);
            Response::Object(md.object(id)?)
        }
        Request::ListObjects { container } => {
            Response::Objects(md.list_objects(container.as_deref())?)
        }
        Request::SetDims { id, dims } => Response::Object(md.set_dims(id, &dims)?),
        Request::AddToContainer { id, container } => {
            md.add_to_container(id, &container)?;
            Response::Ok
        }
        Request::PutTags { target, tags } => {
            match target {
                protocol::TagTarget::Object(id) => {
                    crate::tiering::put_object_tags(md, server.engine.tiering.as_deref(), id, tags)?
                }
                _ => md.put_tags(&target, &tags)?,
            }
            Response::Ok
        }
        Request::DeleteTag { target, key } => {
            let _serial = crate::tiering::rule_change_guard(&key);
            md.delete_tag(&target, &key)?;
            Response::Ok
        }
        Request::Query { conditions } => Response::Matches(md.query(&conditions)?),
        Request::Stage { .. } => unreachable!("handled above"),
        Request::Commit { txns, durability } => {
            commit(server, pending, &txns, durability, Consistency::Strong)?
        }
        Request::Read { items } => return read(server, items, &mut sess.scratch, false),
        Request::ReadHeld { items } => return read(server, items, &mut sess.scratch, true),
        Request::Locate { items } => Response::Located(
            items
                .iter()
                .map(|i| server.engine.locate(i.id, &i.region))
                .collect::<Result<_>>()?,
        ),
        Request::Extents { id } => {
            if pdcx_core::model::owner_of_id(id) == server.config.rank {
                md.object(id)?;
            }
            Response::Extents(server.engine.extents(id))
        }
        Request::Stats => Response::Stats(stats(server)?),
        Request::Flush { wait } => Response::Flushed(flush(server, wait)?),
        Request::Migrate { id, tier } => {
            let (extents, bytes) = server.engine.migrate(id, &tier)?;
            Response::Migrated { extents, bytes }
        }
        Request::DeleteObject { id } => {
            md.delete_object(id)?;
            server.engine.forget(id);
            Response::Ok
        }
        Request::DeleteContainer { name } => {
            md.delete_container(&name)?;
            Response::Ok
        }
        Request::RemoveFromContainer { id, container } => {
            md.remove_from_container(id, &container)?;
            Response::Ok
        }
        Request::DropMemberships { container } => {
            md.drop_memberships(&container)?;
            Response::Ok
        }
        Request::Shutdown => {
            server.shutdown_requested.store(true, Ordering::SeqCst);
            Response::Ok
        }
        Request::Register { holder, items } => {
            if holder >= server.config.size {
                return Err(Error::invalid(format!("no server with rank {holder}")));
            }
            Response::Registered {
                first_seq: server.engine.register(holder, &items)?,
            }
        }
        Request::ReadPieces { id, region } => {
            let (list, bytes) = server.engine.pieces(id, &region)?;
            if bytes.len() as u64 > server.config.max_payload {
                return Err(Error::invalid(format!(
                    "pieces of {} bytes exceed the server's limit of {}",
                    bytes.len(),
                    server.config.max_payload
                )));
            }
            return Ok((Response::Pieces(list), bytes));
        }
        Request::LookupObject { key, relayed_for } => {
            Response::Object(lookup(server, key, relayed_for)?)
        }
        Request::CommitRelaxed {
            txns,
            durability,
            expected_writes,
        } => commit(
            server,
            pending,
            &txns,
            durability,
            Consistency::Relaxed { expected_writes },
        )?,
        Request::RegisterBatch { holder, items } => {
            if holder >= server.config.size {
                return Err(Error::invalid(format!("no server with rank {holder}")));
            }
            Response::Seqs(server.engine.register_batch(holder, &items)?)
        }
        Request::SyncObjects { ids } => {
            let ids = (!ids.is_empty()).then_some(ids);
            server.engine.register_deferred(ids.as_deref())?;
            Response::Ok
        }
        Request::CreateObjects { mut specs } => {
            // Misrouted names and bad tags fail individually; the rest go in one transaction.
            let tiering = server.engine.tiering.as_deref();
            let mut results: Vec<Option<Result<pdcx_core::ObjectMeta>>> = specs
                .iter_mut()
                .map(|s| {
                    server
                        .check_owner(&s.name)
                        .and_then(|()| crate::tiering::check_new_object(tiering, s))
                        .err()
                        .map(Err)
                })
                .collect();
            let ok: Vec<protocol::ObjectSpec> = specs
                .into_iter()
                .zip(&results)
                .filter(|(_, r)| r.is_none())
                .map(|(s, _)| s)
                .collect();
            let mut created = md.create_objects(&ok).into_iter();
            for r in results.iter_mut().filter(|r| r.is_none()) {
                *r = created.next();
            }
            Response::ObjectsCreated(
                results
                    .into_iter()
                    .map(|r| r.unwrap_or_else(|| Err(Error::internal("missing create result"))))
                    .collect(),
            )
        }
        Request::AttachShm {
            arena,
            pid,
            fd,
            name,
            len,
        } => {
            sess.shm
                .attach(&server.secret, arena, pid, fd, &name, len)?;
            Response::Ok
        }
        Request::StageShm { items, locs } => {
            let r = stage_shm(server, items, &locs, sess);
            if sess.recv.capacity() > crate::limits::keep_limit(server, RECV_KEEP) {
                sess.recv = Vec::new();
            }
            return r;
        }
        Request::ReadShm { items, held, locs } => {
            return read_shm(server, items, held, &locs, sess)
        }
    };
    Ok((resp, Vec::new()))
}

/// `Commit` / `CommitRelaxed`: the named writes staged on this connection, in this order.
fn commit(
    server: &Server,
    pending: &mut HashMap<u64, Staged>,
    txns: &[u64],
    durability: protocol::Durability,
    consistency: Consistency,
) -> Result<Response> {
    let mut staged = Vec::with_capacity(txns.len());
    for t in txns {
        match pending.remove(t) {
            Some(s) => staged.push(s),
            None => {
                return Err(Error::not_found(format!(
                    "transfer {t:#x} was not staged on this connection (lost connection or already waited?)"
                )))
            }
        }
    }
    server
        .engine
        .commit_with(&staged, durability, consistency)?;
    Ok(Response::Committed {
        count: staged.len() as u64,
    })
}

/// `LookupObject`: answered here if this server owns the object, else forwarded to the owner
/// through the relay (shared with identical lookups of this node's clients). A relayed copy
/// (`relayed_for` > 0) is never forwarded again.
fn lookup(server: &Server, key: ObjectKey, relayed_for: u32) -> Result<ObjectMeta> {
    let size = server.config.size;
    let owner = match &key {
        ObjectKey::Name(n) => owner_of_name(n, size),
        ObjectKey::Id(id) => owner_of_id(*id),
    };
    if owner == server.config.rank {
        server.lookups.fetch_add(1, Ordering::Relaxed);
        if relayed_for > 0 {
            server.lookups_forwarded.fetch_add(1, Ordering::Relaxed);
            server
                .lookups_forwarded_clients
                .fetch_add(relayed_for as u64, Ordering::Relaxed);
        }
        return match &key {
            ObjectKey::Name(n) => server.meta.object_by_name(n),
            ObjectKey::Id(id) => server.meta.object(*id),
        };
    }
    if owner >= size {
        return Err(Error::not_found(format!(
            "object id {key:?} names server {owner}, which does not exist"
        )));
    }
    if relayed_for > 0 {
        return Err(Error::invalid(format!(
            "a lookup of {key:?} was relayed to server {}, but server {owner} owns it",
            server.config.rank
        )));
    }
    server
        .relay
        .lookup(&key, |riders| server.peers.lookup(owner, &key, riders))
}

fn stage(
    server: &Server,
    items: Vec<protocol::StageItem>,
    payload_len: u64,
    reader: &mut Reader,
    sess: &mut Session,
) -> Result<(Response, Vec<u8>)> {
    let recv = &mut sess.recv;
    let total = items.iter().try_fold(0u64, |a, i| a.checked_add(i.len));
    if total != Some(payload_len) {
        drain(reader, payload_len)?;
        return Err(Error::protocol(format!(
            "stage items declare {total:?} bytes but the frame carries {payload_len}"
        )));
    }
    // Read every item first so the stream stays framed even if one item is rejected. The
    // buffer is reused, so a steady stream of writes does not page-fault fresh memory.
    let n = payload_len as usize;
    if recv.len() < n {
        recv.resize(n, 0);
    }
    reader.read_exact(&mut recv[..n]).map_err(|e| {
        if crate::limits::stalled_or_gone(&e) {
            Error::new(ErrorKind::Unavailable, GONE_MID_TRANSFER)
        } else {
            Error::io("reading write payload", &e)
        }
    })?;
    stage_received(server, items, sess)
}

/// Stages `items`, whose bytes are back to back at the start of `sess.recv`.
fn stage_received(
    server: &Server,
    items: Vec<protocol::StageItem>,
    sess: &mut Session,
) -> Result<(Response, Vec<u8>)> {
    let mut at = 0usize;
    for item in items {
        let len = item.len as usize;
        let body = &sess.recv[at..at + len];
        at += len;
        let staged = server.engine.stage(item.txn, item.id, &item.region, body)?;
        sess.pending.insert(item.txn, staged);
    }
    Ok((
        Response::Staged {
            count: sess.pending.len() as u64,
        },
        Vec::new(),
    ))
}

/// `StageShm`: like `Stage`, with each item's bytes in an attached arena. Every location is
/// checked before anything is copied. The bytes are copied into the connection's private
/// receive buffer first: the checksum and the log must see the same bytes even if the
/// client keeps writing into its arena (a record whose checksum does not match its payload
/// would make recovery refuse the log).
fn stage_shm(
    server: &Server,
    items: Vec<protocol::StageItem>,
    locs: &[protocol::ShmLoc],
    sess: &mut Session,
) -> Result<(Response, Vec<u8>)> {
    if items.len() != locs.len() {
        return Err(Error::protocol(format!(
            "StageShm has {} items but {} locations",
            items.len(),
            locs.len()
        )));
    }
    let mut total = 0u64;
    for (item, loc) in items.iter().zip(locs) {
        sess.shm.check(*loc, item.len)?;
        total = total.saturating_add(item.len);
    }
    if total > server.config.max_payload {
        return Err(Error::invalid(format!(
            "stage of {total} bytes exceeds the server's limit of {}",
            server.config.max_payload
        )));
    }
    let n = total as usize;
    if sess.recv.len() < n {
        sess.recv.resize(n, 0);
    }
    let mut at = 0usize;
    for (item, loc) in items.iter().zip(locs) {
        let len = item.len as usize;
        sess.shm.copy_out(*loc, &mut sess.recv[at..at + len])?;
        at += len;
    }
    server.shm_bytes.fetch_add(total, Ordering::Relaxed);
    stage_received(server, items, sess)
}

/// Largest read buffer a connection keeps for its next reply.
const SCRATCH_KEEP: usize = 64 << 20;

/// `Read` (at the owner, which merges other holders' pieces) or, with `held`, `ReadHeld` (at
/// a data server the owner named as the regions' only holder).
fn read(
    server: &Server,
    items: Vec<protocol::ReadItem>,
    scratch: &mut Vec<u8>,
    held: bool,
) -> Result<(Response, Vec<u8>)> {
    let (sizes, total) = plan_read(server, &items, held)?;
    let mut out = std::mem::take(scratch);
    out.clear();
    out.resize(total as usize, 0);
    let mut at = 0;
    for (item, n) in items.iter().zip(sizes) {
        read_item(server, item, held, &mut out[at..at + n])?;
        at += n;
    }
    server.read_bytes.fetch_add(total, Ordering::Relaxed);
    Ok((Response::Data, out))
}

/// `ReadShm`: like `Read`/`ReadHeld`, each item written straight into the client's arena at
/// its location (checked, all of them, before the first byte is written).
fn read_shm(
    server: &Server,
    items: Vec<protocol::ReadItem>,
    held: bool,
    locs: &[protocol::ShmLoc],
    sess: &mut Session,
) -> Result<(Response, Vec<u8>)> {
    if items.len() != locs.len() {
        return Err(Error::protocol(format!(
            "ReadShm has {} items but {} locations",
            items.len(),
            locs.len()
        )));
    }
    let (sizes, total) = plan_read(server, &items, held)?;
    for (loc, &n) in locs.iter().zip(&sizes) {
        sess.shm.check(*loc, n as u64)?;
    }
    for ((item, loc), &n) in items.iter().zip(locs).zip(&sizes) {
        read_item(server, item, held, sess.shm.slice_mut(*loc, n as u64)?)?;
    }
    server.read_bytes.fetch_add(total, Ordering::Relaxed);
    server.shm_bytes.fetch_add(total, Ordering::Relaxed);
    Ok((Response::Data, Vec::new()))
}

fn read_item(server: &Server, item: &protocol::ReadItem, held: bool, dst: &mut [u8]) -> Result<()> {
    if held {
        server.engine.read_held(item.id, &item.region, dst)
    } else {
        server.engine.read(item.id, &item.region, dst)
    }
}

/// Checks a read's items and returns each one's byte size and their total.
fn plan_read(
    server: &Server,
    items: &[protocol::ReadItem],
    held: bool,
) -> Result<(Vec<usize>, u64)> {
    let mut sizes = Vec::with_capacity(items.len());
    let mut total = 0u64;
    for item in items {
        let owner = pdcx_core::model::owner_of_id(item.id);
        let obj = if held {
            server.engine.checked_meta(item.id, &item.region)?
        } else if owner != server.config.rank {
            return Err(Error::invalid(format!(
                "object {:#x} is owned by server {owner}, not {}: read it there",
                item.id, server.config.rank
            )));
        } else {
            let obj = server.meta.object(item.id)?;
            item.region.check_within(&obj.dims)?;
            obj
        };
        let n = item.region.byte_len(obj.dtype.size())?;
        total = total.saturating_add(n);
        sizes.push(n as usize);
    }
    if total > server.config.max_payload {
        return Err(Error::invalid(format!(
            "read of {total} bytes exceeds the server's limit of {}",
            server.config.max_payload
        )));
    }
    Ok((sizes, total))
}

fn flush(server: &Server, wait: bool) -> Result<pdcx_core::protocol::FlushReport> {
    let Some(t) = &server.engine.tiering else {
        return Err(Error::invalid(
            "this deployment has no tiers configured: add [[tier]] entries to ROOT/pdcx.toml",
        ));
    };
    if wait {
        server.engine.flush_all(&mut |_, _| {})
    } else {
        t.kick();
        let st = stats(server)?;
        Ok(pdcx_core::protocol::FlushReport {
            pending_extents: st.flush_pending_extents,
            pending_bytes: st.flush_pending_bytes,
            error: st.flush_error,
            ..Default::default()
        })
    }
}

fn stats(server: &Server) -> Result<ServerStats> {
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
        cache_bytes: server.engine.cache().bytes(),
        cache_capacity: server.engine.cache().capacity(),
        connections: server.connections.load(Ordering::Relaxed),
        read_bytes: server.read_bytes.load(Ordering::Relaxed),
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
        ..ServerStats::default()
    };
    server.engine.fill_tier_stats(&mut st);
    Ok(st)
}
