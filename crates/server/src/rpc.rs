//! One thread per connection: authenticate, then read request frames and answer each one.
//! The handshake says who connects: a client, answered in the client family (`Request`), or
//! another server of the deployment, which proves its rank and is answered in the peer family
//! (`PeerRequest`). A request of the other family is refused with an error reply.
//! A malformed body gets an error reply and the connection goes on (the framing is intact);
//! a malformed header, a wrong version or a failed handshake closes the connection.

use crate::engine::Staged;
use crate::shm::Attached;
use crate::Server;
use pdcx_core::model::owner_of_id;
use pdcx_core::protocol::{
    self, Consistency, FrameKind, Hello, ObjectKey, PeerRequest, PeerResponse, Request, Response,
    Role, ServerInfo, ServerStats,
};
use pdcx_core::{owner_of_name, Error, ErrorKind, ObjectMeta, Result};
use pdcx_transport::Stream;
use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read};
use std::sync::atomic::Ordering;
use std::time::Duration;

type Reader = BufReader<Stream>;
type Writer = BufWriter<Stream>;

pub(crate) fn serve_connection(server: &Server, stream: Stream) {
    crate::limits::on_connect(&stream, &server.config.limits);
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::with_capacity(1 << 20, read_half);
    let mut writer = BufWriter::with_capacity(256 << 10, stream);
    let role = match handshake(server, &mut reader, &mut writer) {
        Ok(role) => role,
        Err(e) => {
            let _ = welcome(&mut writer, Err(e));
            return;
        }
    };
    server.connections.fetch_add(1, Ordering::Relaxed);
    match role {
        Role::Client => serve_client(server, &mut reader, &mut writer),
        Role::Peer { rank } => serve_peer(server, rank, &mut reader, &mut writer),
    }
    server.connections.fetch_sub(1, Ordering::Relaxed);
}

/// The request loop of a client connection.
fn serve_client(server: &Server, reader: &mut Reader, writer: &mut Writer) {
    let mut sess = Session::default();
    loop {
        if !crate::limits::await_request(reader, &server.config.limits, sess.pending.is_empty()) {
            break;
        }
        let (head, body) = match protocol::read_frame_head(reader, server.config.max_payload) {
            Ok(x) => x,
            Err(e) if e.kind == ErrorKind::Unavailable => break,
            Err(e) => {
                let _ = reply(writer, 0, &Response::Error(e), &[]);
                break;
            }
        };
        if server.stopping() {
            // Stopping: its last sync has run or is running, so nothing more is accepted (a
            // write acknowledged now might never reach the disk). The client sees the server
            // as gone, as it will be.
            let _ = drain(reader, head.payload_len);
            let e = Error::new(
                ErrorKind::Unavailable,
                format!("pdcx server {} is shutting down", server.config.rank),
            );
            let _ = reply(writer, head.request_id, &Response::Error(e), &[]);
            break;
        }
        // Request kind and timing for `crate::metrics`.
        let (started, mut kind) = (std::time::Instant::now(), crate::metrics::Kind::default());
        let outcome = match head.kind {
            FrameKind::Request => match protocol::decode_body::<Request>(&body) {
                Ok(req) => {
                    kind = crate::metrics::Kind::of(&req);
                    handle(server, req, head.payload_len, reader, &mut sess)
                }
                Err(e) => drain(reader, head.payload_len).and(Err(e)),
            },
            // The framing is intact: refuse this one and go on.
            FrameKind::PeerRequest => {
                drain(reader, head.payload_len).and(Err(peer_request_refused(&body)))
            }
            kind => {
                let e = Error::protocol(format!("expected a request frame, got {kind:?}"));
                let _ = reply(writer, head.request_id, &Response::Error(e), &[]);
                break;
            }
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
        let sent = reply(writer, head.request_id, &resp, &payload);
        let failed = matches!(resp, Response::Error(_)) || sent.is_err();
        let out = payload.len() as u64;
        let took = started.elapsed();
        server
            .metrics
            .request(&kind, head.payload_len, out, took, failed);
        if sent.is_err() {
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
    // `sess` drops here: uncommitted writes are forgotten and shared-memory arenas unmapped.
}

/// The error for a server-to-server request sent on a client connection.
fn peer_request_refused(body: &[u8]) -> Error {
    let what = protocol::decode_body::<PeerRequest>(body)
        .map(|r| format!("`{}`", r.name()))
        .unwrap_or_else(|_| "this request".into());
    Error::new(
        ErrorKind::Auth,
        format!(
            "{what} is a server-to-server request, refused on a client connection \
             (only a server of the deployment, proving its rank in the handshake, may send it)"
        ),
    )
}

/// The request loop of a connection from server `from` of the deployment.
fn serve_peer(server: &Server, from: u32, reader: &mut Reader, writer: &mut Writer) {
    loop {
        if reader.buffer().is_empty() {
            // A holder's registrations come one per small commit, i.e. one per round trip of
            // its client (holder and owner included): wait as long as a caller waits for a
            // reply (`reply_spin_budget`), or a stream of them settles into sleeping here.
            pdcx_transport::stream::spin_until_readable(
                reader.get_ref(),
                pdcx_transport::stream::reply_spin_budget(),
            );
        }
        let (head, body) = match protocol::read_frame_head(reader, server.config.max_payload) {
            Ok(x) => x,
            Err(e) if e.kind == ErrorKind::Unavailable => break,
            Err(e) => {
                let _ = peer_reply(writer, 0, &PeerResponse::Error(e), &[]);
                break;
            }
        };
        let outcome = match head.kind {
            FrameKind::PeerRequest => match protocol::decode_body::<PeerRequest>(&body) {
                Ok(req) => no_payload(reader, head.payload_len)
                    .and_then(|()| handle_peer(server, from, req)),
                Err(e) => drain(reader, head.payload_len).and(Err(e)),
            },
            FrameKind::Request => drain(reader, head.payload_len).and(Err(Error::new(
                ErrorKind::Auth,
                format!(
                    "client requests are not served on a server-to-server connection \
                     (this one authenticated as server {from})"
                ),
            ))),
            kind => {
                let e = Error::protocol(format!("expected a request frame, got {kind:?}"));
                let _ = peer_reply(writer, head.request_id, &PeerResponse::Error(e), &[]);
                break;
            }
        };
        let (resp, payload) = match outcome {
            Ok(x) => x,
            Err(e) if client_gone(&e) => break,
            Err(e) => (PeerResponse::Error(e), Vec::new()),
        };
        if peer_reply(writer, head.request_id, &resp, &payload).is_err() {
            break;
        }
    }
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

/// Challenge, `Hello`, `Welcome`: returns the role the other side proved.
fn handshake(server: &Server, reader: &mut Reader, writer: &mut Writer) -> Result<Role> {
    let nonce: [u8; protocol::NONCE_LEN] = rand::random();
    protocol::write_frame(writer, FrameKind::Challenge, 0, &nonce, &[])
        .map_err(|e| Error::io("sending challenge", &e))?;
    reader
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| Error::io("socket", &e))?;
    let hb = protocol::read_header_bytes(reader)?;
    let theirs = protocol::header_version(&hb);
    if protocol::has_magic(&hb) && theirs != protocol::VERSION {
        let ours = protocol::VERSION;
        let who = reader.get_ref().peer_desc();
        eprintln!(
            "pdcx server {}: refused a connection from {who}: it speaks pdcx protocol {theirs}, this server {ours}",
            server.config.rank
        );
        return Err(Error::protocol(format!(
            "this server (rank {}) speaks pdcx protocol {ours}, the connecting side {theirs}: \
             clients and servers must come from the same pdcx release (upgrade the older side)",
            server.config.rank
        )));
    }
    // A Hello is a role and a 32-byte tag; allow a little slack, never megabytes.
    let (head, body) = protocol::finish_frame_head(reader, &hb, 256, 0)?;
    let refused = |why: &str| Error::new(ErrorKind::Auth, format!("authentication failed: {why}"));
    if head.kind != FrameKind::Hello {
        return Err(refused("the connection did not answer the challenge"));
    }
    let hello: Hello =
        protocol::decode_body(&body).map_err(|_| refused("malformed answer to the challenge"))?;
    if !protocol::hello_verify(&server.secret, &nonce, hello.role, &hello.tag) {
        return Err(refused("this client does not hold the deployment secret"));
    }
    if let Role::Peer { rank } = hello.role {
        if rank >= server.config.size {
            return Err(refused(&format!(
                "server {rank} is not part of this deployment of {} servers",
                server.config.size
            )));
        }
    }
    crate::limits::after_handshake(reader.get_ref(), &server.config.limits)?;
    welcome(
        writer,
        Ok(ServerInfo {
            rank: server.config.rank,
            size: server.config.size,
        }),
    )
    .map_err(|e| Error::io("sending welcome", &e))?;
    Ok(hello.role)
}

/// The handshake's answer: this server's rank and size, or why it refused.
fn welcome(w: &mut Writer, r: Result<ServerInfo>) -> std::io::Result<()> {
    let body = protocol::encode_body(&r).map_err(|e| std::io::Error::other(e.message))?;
    protocol::write_frame(w, FrameKind::Welcome, 0, &body, &[])
}

fn reply(w: &mut Writer, id: u64, resp: &Response, payload: &[u8]) -> std::io::Result<()> {
    let body = protocol::encode_body(resp).map_err(|e| std::io::Error::other(e.message))?;
    protocol::write_frame(w, FrameKind::Response, id, &body, &[payload])
}

fn peer_reply(w: &mut Writer, id: u64, resp: &PeerResponse, payload: &[u8]) -> std::io::Result<()> {
    let body = protocol::encode_body(resp).map_err(|e| std::io::Error::other(e.message))?;
    protocol::write_frame(w, FrameKind::PeerResponse, id, &body, &[payload])
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
    if is_write_path(&req) {
        server.homecopy.note_write();
    }
    if let Request::Stage { items } = req {
        let r = stage(server, items, payload_len, reader, sess);
        if sess.recv.capacity() > crate::limits::keep_limit(server, RECV_KEEP) {
            sess.recv = Vec::new();
        }
        return r;
    }
    if let Request::StageCommit {
        items,
        durability,
        relaxed,
    } = req
    {
        let txns: Vec<u64> = items.iter().map(|i| i.txn).collect();
        let r = stage(server, items, payload_len, reader, sess);
        if sess.recv.capacity() > crate::limits::keep_limit(server, RECV_KEEP) {
            sess.recv = Vec::new();
        }
        return stage_then_commit(server, sess, r, &txns, durability, relaxed);
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
            drop_dangling_link(server, &spec.name)?;
            crate::tiering::check_new_object(server.engine.tiering.as_deref(), &mut spec)?;
            Response::Object(md.create_object(&spec)?)
        }
        Request::OpenObject { name } => {
            server.lookups.fetch_add(1, Ordering::Relaxed);
            Response::Object(by_name(server, &name)?)
        }
        Request::RenameObject { id, name } => Response::Object(md.rename_object(id, &name)?),
        Request::LinkName { name, id } => {
            server.check_owner(&name)?;
            md.link_name(&name, id)?;
            Response::Ok
        }
        Request::UnlinkName { name, id } => {
            md.unlink_name(&name, id)?;
            Response::Ok
        }
        Request::GetObject { id } => {
            server.lookups.fetch_add(1, Ordering::Relaxed);
            Response::Object(md.object(id)?)
        }
        Request::ListObjects { container } => {
            Response::Objects(md.list_objects(container.as_deref())?)
        }
        Request::SetDims { id, dims } => {
            let cur = md.object(id)?;
            if dims.len() != cur.dims.len() && server.engine.has_data(id) {
                return Err(Error::invalid(format!(
                    "{} holds data: its number of dims cannot change",
                    cur.name
                )));
            }
            Response::Object(md.set_dims(id, &dims)?)
        }
        Request::ExtendDims { id, dims } => Response::Object(md.extend_dims(id, &dims)?),
        Request::SetSize { id, len } => {
            Response::Object(crate::streams::set_size(server, id, len)?)
        }
        Request::DiscardIncomplete { id } => Response::Discarded {
            bytes: crate::streams::discard_incomplete(server, id)?,
        },
        Request::SyncLog => {
            server.engine.store().sync_committed()?;
            Response::Ok
        }
        Request::Seal { id, home } => Response::Sealed {
            epoch: crate::homecopy::seal(server, id, &home)?,
        },
        Request::SyncSeal { id, home } => sync_seal(server, id, &home)?,
        Request::CommitLate {
            txns,
            crcs,
            durability,
        } => commit_late(server, pending, &txns, &crcs, durability)?,
        Request::CommitSyncSeal {
            txns,
            crcs,
            id,
            home,
        } => {
            let memory = protocol::Durability::Memory;
            commit_late(server, pending, &txns, &crcs, memory)?;
            sync_seal(server, id, &home)?
        }
        Request::Versions { id } => Response::Versions(md.versions(id)?),
        Request::AddToContainer { id, container } => {
            md.add_to_container(id, &container)?;
            Response::Ok
        }
        Request::PutTags { target, tags } => {
            match target {
                protocol::TagTarget::Object(id) => crate::tiering::put_object_tags(
                    md,
                    server.engine.tiering.as_deref(),
                    id,
                    tags,
                    false,
                )?,
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
        Request::ValueQuery {
            query,
            region,
            want,
        } => return crate::analysis::value_query(server, &query, region, &want),
        Request::PromoteRefs { id } => {
            let owner = owner_of_id(id);
            if owner != server.config.rank {
                return Err(Error::invalid(format!(
                    "object {id:#x} is owned by server {owner}: promote it there"
                )));
            }
            let obj = server.meta.object(id)?;
            let (extents, bytes) = server.engine.store().promote_references(&obj)?;
            Response::Imported { extents, bytes }
        }
        Request::ImportRefs { id, items } => {
            let owner = owner_of_id(id);
            if owner != server.config.rank {
                return Err(Error::invalid(format!(
                    "object {id:#x} is owned by server {owner}: import references there"
                )));
            }
            let obj = server.meta.object(id)?;
            let (extents, bytes) = server.engine.store().add_references(&obj, &items)?;
            Response::Imported { extents, bytes }
        }
        Request::ReadPoints { id, coords } => {
            return Ok((
                Response::Data,
                crate::analysis::read_points(server, id, &coords)?,
            ))
        }
        Request::PiecePlan {
            id,
            region,
            step,
            held,
        } => {
            let selected = crate::analysis::check_step(&region, &step)?;
            let plan = server.engine.piece_plan(id, &region, held)?;
            // Counted once, at the owner (a holder's part is counted there).
            if let Some(p) = plan.as_ref().filter(|_| !held) {
                server.metrics.piece_plans.fetch_add(1, Ordering::Relaxed);
                server
                    .read_bytes
                    .fetch_add(selected.saturating_mul(p.elem), Ordering::Relaxed);
            }
            Response::PiecePlans(plan)
        }
        Request::ReadStrided { id, region, step } => {
            return Ok((
                Response::Data,
                crate::analysis::read_strided(server, id, &region, &step)?,
            ))
        }
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
            let gone = md.delete_object(id)?;
            md.forget_versions(id)?;
            server.engine.forget(id);
            // The client drops a link its name left elsewhere (`meta/rename.rs`).
            Response::Object(gone)
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
        Request::LookupObject { key } => Response::Object(lookup(server, key)?),
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
        Request::SyncObjects { ids } => {
            let ids = (!ids.is_empty()).then_some(ids);
            server.engine.register_deferred(ids.as_deref())?;
            Response::Ok
        }
        Request::CreateObjects { specs } => create_objects(server, specs, false),
        // --- creates (issue 10, item 5) ---
        Request::CreateObjectLazy(mut spec) => {
            server.check_owner(&spec.name)?;
            crate::tiering::check_new_object(server.engine.tiering.as_deref(), &mut spec)?;
            let created = md
                .create_objects_with(std::slice::from_ref(&spec), true)
                .pop();
            Response::Object(
                created
                    .unwrap_or_else(|| Err(Error::internal("create_objects returned no result")))?,
            )
        }
        Request::PutTagsLazy { target, tags } => {
            match target {
                protocol::TagTarget::Object(id) => crate::tiering::put_object_tags(
                    md,
                    server.engine.tiering.as_deref(),
                    id,
                    tags,
                    true,
                )?,
                _ => md.put_tags_with(&target, &tags, true)?,
            }
            Response::Ok
        }
        Request::SyncMeta => {
            md.sync()?;
            Response::Ok
        }
        // ---- creates2 ----
        Request::CreateObjectsLazy { specs } => create_objects(server, specs, true),
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
        Request::StageShm { items, locs } => return stage_shm(server, items, &locs, sess),
        Request::ReadShm { items, held, locs } => {
            return read_shm(server, items, held, &locs, sess)
        }
        Request::StageCommit { .. } => unreachable!("handled above"),
        Request::StageShmCommit {
            items,
            locs,
            durability,
            relaxed,
        } => {
            let txns: Vec<u64> = items.iter().map(|i| i.txn).collect();
            let r = stage_shm(server, items, &locs, sess);
            return stage_then_commit(server, sess, r, &txns, durability, relaxed);
        }
        Request::ReadPlan { items, held } => read_plans(server, &items, held)?,
        Request::ReserveWrite { items, crcs } => reserve_write(server, items, Some(&crcs), sess)?,
        Request::ReserveWriteLate { items } => reserve_write(server, items, None, sess)?,
    };
    Ok((resp, Vec::new()))
}

/// Requests of a program writing through this server: home copies wait while they come
/// (`HomeCopier::note_write`). Lookups, status polls (`pdcx flush` polls `Versions`) and reads
/// do not count.
fn is_write_path(req: &Request) -> bool {
    matches!(
        req,
        Request::Stage { .. }
            | Request::StageShm { .. }
            | Request::StageCommit { .. }
            | Request::StageShmCommit { .. }
            | Request::ReserveWrite { .. }
            | Request::ReserveWriteLate { .. }
            | Request::Commit { .. }
            | Request::CommitLate { .. }
            | Request::CommitRelaxed { .. }
            | Request::CreateObject(_)
            | Request::CreateObjectLazy(_)
            | Request::CreateObjectsLazy { .. }
            | Request::ExtendDims { .. }
            | Request::SetSize { .. }
            | Request::SyncLog
            | Request::Seal { .. }
            | Request::SyncSeal { .. }
            | Request::CommitSyncSeal { .. }
    )
}

/// `SyncSeal`: the log synced, then the seal, whose WAL fsync also covers every metadata
/// change before it.
fn sync_seal(server: &Server, id: pdcx_core::ObjectId, home: &str) -> Result<Response> {
    server.engine.store().sync_log_only()?;
    let epoch = crate::homecopy::seal(server, id, home)?;
    // An unchanged stream is answered without a WAL fsync: make the metadata changes this
    // client may count on (its creates here) durable anyway.
    server.meta.sync()?;
    Ok(Response::Sealed { epoch })
}

/// The commit half of `StageCommit` / `StageShmCommit`: after `staged` (the stage half's
/// outcome) succeeded, commits `txns` on this thread, right away (no other thread is involved:
/// the reply goes out once the commit is done at `durability`). If the stage failed, none of
/// `txns` stays staged.
fn stage_then_commit(
    server: &Server,
    sess: &mut Session,
    staged: Result<(Response, Vec<u8>)>,
    txns: &[u64],
    durability: protocol::Durability,
    relaxed: Option<u64>,
) -> Result<(Response, Vec<u8>)> {
    if let Err(e) = staged {
        for t in txns {
            sess.pending.remove(t);
        }
        return Err(e);
    }
    let consistency = match relaxed {
        Some(expected_writes) => Consistency::Relaxed { expected_writes },
        None => Consistency::Strong,
    };
    let resp = commit(server, &mut sess.pending, txns, durability, consistency)?;
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
    if let Some(t) = txns
        .iter()
        .find(|t| pending.get(t).is_some_and(|s| s.crc_late))
    {
        return Err(Error::protocol(format!(
            "transfer {t:#x} was reserved without its checksum (ReserveWriteLate) and \
             committed without one"
        )));
    }
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

/// `CommitLate`: the writes of `txns` reserved without their checksums (`ReserveWriteLate`)
/// get the checksums `crcs` (same order; ignored for the others), then all are committed.
fn commit_late(
    server: &Server,
    pending: &mut HashMap<u64, Staged>,
    txns: &[u64],
    crcs: &[u32],
    durability: protocol::Durability,
) -> Result<Response> {
    if crcs.len() != txns.len() {
        return Err(Error::protocol(format!(
            "a commit of {} writes carries {} checksums",
            txns.len(),
            crcs.len()
        )));
    }
    for (t, &crc) in txns.iter().zip(crcs) {
        if let Some(s) = pending.get_mut(t).filter(|s| s.crc_late) {
            server.engine.store().set_reserved_crc(s, crc)?;
        }
    }
    commit(server, pending, txns, durability, Consistency::Strong)
}

/// A server-to-server request from server `from` (the rank its handshake proved).
fn handle_peer(server: &Server, from: u32, req: PeerRequest) -> Result<(PeerResponse, Vec<u8>)> {
    let resp = match req {
        PeerRequest::Object { id } => {
            server.lookups.fetch_add(1, Ordering::Relaxed);
            PeerResponse::Object(server.meta.object(id)?)
        }
        PeerRequest::Lookup { key, riders } => {
            PeerResponse::Object(relayed_lookup(server, key, riders)?)
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
        req @ (PeerRequest::ShardCandidates { .. }
        | PeerRequest::RecordShardHomes { .. }
        | PeerRequest::ShardRefs { .. }
        | PeerRequest::ShardRelease { .. }
        | PeerRequest::ShardBytes { .. }
        | PeerRequest::UploadShardPart(_)) => {
            let (resp, bytes) = server.engine.shard_request(from, req)?;
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
            let bytes = crate::analysis::read_owned(server, id, &region)?;
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
fn lookup(server: &Server, key: ObjectKey) -> Result<ObjectMeta> {
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
fn relayed_lookup(server: &Server, key: ObjectKey, riders: u32) -> Result<ObjectMeta> {
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
    // metrics hook (ops): staged bytes, over TCP or shared memory alike.
    server
        .metrics
        .staged
        .fetch_add(at as u64, Ordering::Relaxed);
    Ok((
        Response::Staged {
            count: sess.pending.len() as u64,
        },
        Vec::new(),
    ))
}

/// `StageShm`: like `Stage`, with each item's bytes in an attached arena. Every location is
/// checked before anything is staged. The bytes are checksummed and written to the log
/// straight from the arena: one copy (into the page cache) on the server. A client that keeps
/// writing into a block it handed over ruins only its own record (see `ShmArenas::slice`).
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
    for (item, loc) in items.into_iter().zip(locs) {
        let body = sess.shm.slice(*loc, item.len)?;
        let staged = server
            .engine
            .stage_shared(item.txn, item.id, &item.region, body)?;
        sess.pending.insert(item.txn, staged);
    }
    server.shm_bytes.fetch_add(total, Ordering::Relaxed);
    server.metrics.staged.fetch_add(total, Ordering::Relaxed);
    Ok((
        Response::Staged {
            count: sess.pending.len() as u64,
        },
        Vec::new(),
    ))
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

/// `ReserveWrite` (issue 10, one-copy writes): every item is checked before anything is
/// reserved; each reserved item is pending in this session like a staged one, under its txn.
/// `ReserveWrite` (`crcs`: each item's payload checksum) or `ReserveWriteLate` (None: the
/// checksums come with the commit; the headers hold a placeholder until then).
fn reserve_write(
    server: &Server,
    items: Vec<protocol::StageItem>,
    crcs: Option<&[u32]>,
    sess: &mut Session,
) -> Result<Response> {
    if let Some(crcs) = crcs.filter(|c| c.len() != items.len()) {
        return Err(Error::protocol(format!(
            "ReserveWrite has {} items but {} checksums",
            items.len(),
            crcs.len()
        )));
    }
    let mut total = 0u64;
    for item in &items {
        server
            .engine
            .check_stage_len(item.id, &item.region, item.len)?;
        total = total.saturating_add(item.len);
    }
    let mut spans = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let crc = crcs.map_or(0, |c| c[i]);
        let (mut staged, (dev, ino)) =
            server
                .engine
                .reserve(item.txn, item.id, &item.region, item.len, crc)?;
        staged.crc_late = crcs.is_none();
        spans.push((staged.loc.segment, dev, ino, staged.loc.offset));
        sess.pending.insert(item.txn, staged);
    }
    server.metrics.staged.fetch_add(total, Ordering::Relaxed);
    server
        .metrics
        .direct_written
        .fetch_add(total, Ordering::Relaxed);
    Ok(Response::Reserved(protocol::Reservations {
        dir: server.engine.log_dir().to_string_lossy().into_owned(),
        spans,
    }))
}

/// `ReadPlan` (issue 10, "reads"): where each item's bytes are in this server's log, for a
/// client on this node that reads them itself. Counted as read bytes when planned.
fn read_plans(server: &Server, items: &[protocol::ReadItem], held: bool) -> Result<Response> {
    use crate::engine::PlanOutcome;
    let mut plans = Vec::with_capacity(items.len());
    let mut holders = Vec::new();
    let mut segments: Vec<(u64, u64, u64)> = Vec::new();
    let mut files: Vec<(u64, String, u64, u64)> = Vec::new();
    let mut total = 0u64;
    for (k, item) in items.iter().enumerate() {
        match server.engine.read_plan(item.id, &item.region, held)? {
            PlanOutcome::Plan(plan, segs, refs) => {
                total += plan.len;
                segments.extend(segs);
                files.extend(refs);
                plans.push(Some(plan));
            }
            PlanOutcome::Holders(h) => {
                holders.resize(k, Vec::new());
                holders.push(h);
                plans.push(None);
            }
            PlanOutcome::None => plans.push(None),
        }
    }
    if !holders.is_empty() {
        holders.resize(items.len(), Vec::new());
    }
    segments.sort_unstable();
    segments.dedup();
    let dir = if segments.is_empty() {
        String::new()
    } else {
        server.engine.plan_dir()?.to_owned()
    };
    server.read_bytes.fetch_add(total, Ordering::Relaxed);
    Ok(Response::ReadPlans(protocol::ReadPlans {
        dir,
        segments,
        plans,
        holders,
        files,
    }))
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
    server.engine.fill_tier_stats(&mut st);
    Ok(st)
}

/// `CreateObjects` / `CreateObjectsLazy`: misrouted names and specs the tier rules refuse fail
/// individually; the rest are created together (one batch of rows, and for the durable kind
/// one fsync).
fn create_objects(server: &Server, mut specs: Vec<protocol::ObjectSpec>, lazy: bool) -> Response {
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
    let mut created = server.meta.create_objects_with(&ok, lazy).into_iter();
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
