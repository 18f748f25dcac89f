//! Synchronous writes: stage and commit in one message, or one-copy writes into the log of
//! a server on this node.

use super::*;

impl Client {
    /// Synchronous write: stage and commit in one go, with the object's consistency (strong
    /// unless [`set_consistency`](Self::set_consistency) said otherwise).
    pub fn write(
        &self,
        id: ObjectId,
        region: &Region,
        data: &[u8],
        durability: Durability,
    ) -> Result<()> {
        // A durable write of an object whose create is not yet durable would be lost with it.
        self.sync_metadata()?;
        // A durable commit syncs right after the write: start the writeback as it is copied.
        let write_behind = if durability == Durability::Memory {
            WriteBehind::Never
        } else {
            WriteBehind::Pipelined
        };
        self.write_creates_unsynced(id, region, data, durability, write_behind)
    }

    /// [`write`](Self::write) without first making this client's creates durable: for a
    /// caller whose own consistency point does that (byte streams: `commit` / the seal).
    /// `write_behind` applies to a one-copy write (`direct_write.rs`).
    pub(crate) fn write_creates_unsynced(
        &self,
        id: ObjectId,
        region: &Region,
        data: &[u8],
        durability: Durability,
        write_behind: WriteBehind,
    ) -> Result<()> {
        let txn = self.next_txn();
        let item = StageItem {
            txn,
            id,
            region: region.clone(),
            len: data.len() as u64,
        };
        let dest = self.data_server(id, region, data.len() as u64)?;
        let foreign = dest != owner_of_id(id, self.size());
        let opts = commit_opts(durability, self.consistency(id), foreign);
        let relaxed = opts.consistency != Consistency::Strong;
        if self.direct_writes(dest, data.len()) {
            if let Some(r) = self.write_direct(dest, &item, data, &opts, write_behind) {
                if r.is_ok() && relaxed {
                    self.note_relaxed(id, dest);
                }
                return r;
            }
        }
        // Shared memory costs one copy here (into the arena) and saves the two socket copies.
        // Over TCP the bytes are sent straight from the caller's buffer.
        let block = self
            .shm_active(dest)
            .then(|| self.inner.shm.as_ref()?.alloc(data.len()))
            .flatten()
            .map(|mut b| {
                b.as_mut_slice().copy_from_slice(data);
                Payload::Shm(b)
            });
        // Stage and commit travel in one message, answered once committed (one round trip).
        let r = self.with_conn(dest, &mut |c| {
            let commit = Some(opts.clone());
            match &block {
                Some(p) => {
                    let (req, parts) =
                        c.stage_request(std::slice::from_ref(&item), &[p], commit)?;
                    c.ask(req, &parts)?
                }
                None => {
                    let items = vec![item.clone()];
                    let req = write::Stage {
                        items,
                        shm: None,
                        commit,
                    };
                    c.ask(req, &[data])?
                }
            };
            Ok(())
        });
        if r.is_ok() && relaxed {
            self.note_relaxed(id, dest);
        }
        r
    }

    /// A one-copy write (`direct_write.rs`) of `data` to `region` of `id`, reserved and
    /// written into the log of `id`'s owner but **not committed**: invisible until the
    /// returned txn is committed with its checksum on the same connection
    /// ([`call_on`](Self::call_on) with a `Commit` carrying the checksum, and perhaps a seal). For byte streams,
    /// whose consistency point then commits and syncs in one round trip. None, with nothing
    /// written, when this write cannot be one (the owner is not on this node or is not where
    /// the write goes, relaxed consistency, too small): the caller writes it the usual way.
    pub(crate) fn write_uncommitted(
        &self,
        id: ObjectId,
        region: &Region,
        data: &[u8],
        write_behind: WriteBehind,
    ) -> Result<Option<Uncommitted>> {
        let dest = self.data_server(id, region, data.len() as u64)?;
        if dest != owner_of_id(id, self.size())
            || !self.direct_writes(dest, data.len())
            || !matches!(self.consistency(id), Consistency::Strong)
        {
            return Ok(None);
        }
        let Some(dw) = self.inner.direct_write.as_ref() else {
            return Ok(None);
        };
        let item = StageItem {
            txn: self.next_txn(),
            id,
            region: region.clone(),
            len: data.len() as u64,
        };
        // The checksum is computed as the payload is written (`late_crcs`): it travels with
        // the commit.
        let written = self.with_conn(dest, &mut |c| {
            let items = std::slice::from_ref(&item);
            Ok(
                match dw.write(c, dest, items, &[data], write_behind, true)? {
                    crate::direct_write::Outcome::Fallback => None,
                    crate::direct_write::Outcome::Written(crcs) => {
                        Some((c.serial(), crcs.first().copied().unwrap_or(0)))
                    }
                },
            )
        })?;
        Ok(written.map(|(conn, crc)| Uncommitted {
            dest,
            txn: item.txn,
            crc,
            conn,
        }))
    }

    /// Sends `req` to server `rank` on connection `conn` (a [`Conn::serial`]) only: fails,
    /// sending nothing, if that connection was closed since (a server restart, a broken
    /// link), since the writes it reserved went with it.
    pub(crate) fn call_on<C: Call>(&self, rank: u32, conn: u64, req: C) -> Result<C::Reply> {
        let req: Request = req.into();
        let resp = self.with_conn(rank, &mut |c| {
            if c.serial() != conn {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "writes to server {rank} not yet committed were lost: their connection \
                         closed before the consistency point (server restarted or link broken)"
                    ),
                ));
            }
            c.call(&req, &[]).map(|(r, _)| r)
        })?;
        C::reply(resp)
    }

    /// Several writes of object `id` to one server in one round trip (`Stage` with its
    /// commit, every item), committed together: the owner numbers them in item order, so where
    /// items overlap the later one wins, as if written one after another. All regions must
    /// go to the same server (they do under region-local placement); returns it.
    pub fn write_batch(
        &self,
        id: ObjectId,
        items: &[(Region, &[u8])],
        durability: Durability,
    ) -> Result<u32> {
        if items.is_empty() {
            return Err(Error::invalid("write_batch: no writes"));
        }
        self.sync_metadata()?;
        self.write_batch_creates_unsynced(id, items, durability)
    }

    /// [`write_batch`](Self::write_batch) without first making this client's creates durable
    /// (see [`write_creates_unsynced`](Self::write_creates_unsynced)).
    pub(crate) fn write_batch_creates_unsynced(
        &self,
        id: ObjectId,
        items: &[(Region, &[u8])],
        durability: Durability,
    ) -> Result<u32> {
        let Some((first, _)) = items.first() else {
            return Err(Error::invalid("write_batch: no writes"));
        };
        let total: u64 = items.iter().map(|(_, d)| d.len() as u64).sum();
        let dest = self.data_server(id, first, total)?;
        for (r, _) in &items[1..] {
            if self.data_server(id, r, total)? != dest {
                return Err(Error::invalid(
                    "write_batch: the regions go to different servers (placement)",
                ));
            }
        }
        let stage: Vec<StageItem> = items
            .iter()
            .map(|(region, data)| StageItem {
                txn: self.next_txn(),
                id,
                region: region.clone(),
                len: data.len() as u64,
            })
            .collect();
        let payloads: Vec<&[u8]> = items.iter().map(|(_, d)| *d).collect();
        let foreign = dest != owner_of_id(id, self.size());
        let opts = commit_opts(durability, self.consistency(id), foreign);
        let relaxed = opts.consistency != Consistency::Strong;
        let req: Request = write::Stage {
            items: stage,
            shm: None,
            commit: Some(opts),
        }
        .into();
        let resp = self.with_conn(dest, &mut |c| c.call(&req, &payloads).map(|(r, _)| r))?;
        <write::Stage as Call>::reply(resp)?;
        if relaxed {
            self.note_relaxed(id, dest);
        }
        Ok(dest)
    }

    /// [`write`](Self::write) as a one-copy write (`direct_write.rs`): reserve, write `data`
    /// into the log straight from the caller's buffer, commit, on one connection. None when
    /// the server turned it down before anything was reserved (the caller writes the usual
    /// way).
    fn write_direct(
        &self,
        dest: u32,
        item: &StageItem,
        data: &[u8],
        commit: &CommitOpts,
        write_behind: WriteBehind,
    ) -> Option<Result<()>> {
        let dw = self.inner.direct_write.as_ref()?;
        let r = self.with_conn(dest, &mut |c| match dw.write(
            c,
            dest,
            std::slice::from_ref(item),
            &[data],
            write_behind,
            false,
        )? {
            crate::direct_write::Outcome::Fallback => Ok(false),
            crate::direct_write::Outcome::Written(_) => {
                let req = write::Commit {
                    txns: vec![item.txn],
                    opts: commit.clone(),
                };
                c.ask(req, &[]).map(|_| true)
            }
        });
        match r {
            Ok(false) => None,
            Ok(true) => Some(Ok(())),
            Err(e) => Some(Err(e)),
        }
    }

    /// Whether this client may write server `rank`'s log itself (same node, not refused).
    fn log_writable(&self, rank: u32) -> bool {
        self.inner.same_node.get(rank as usize) == Some(&true)
            && self
                .inner
                .direct_write
                .as_ref()
                .is_some_and(|d| d.allowed(rank))
    }

    /// Whether a write of `len` bytes sent with its commit (synchronous, byte streams) to
    /// server `rank` is written into its log by this client (`DIRECT_WRITE_MIN`).
    pub(crate) fn direct_writes(&self, rank: u32, len: usize) -> bool {
        len >= crate::direct_write::DIRECT_WRITE_MIN && self.log_writable(rank)
    }

    /// Whether a transfer's write of `len` bytes to server `rank` is written into its log by
    /// this client (`DIRECT_TRANSFER_MIN`).
    pub(crate) fn direct_transfers(&self, rank: u32, len: usize) -> bool {
        len >= crate::direct_write::DIRECT_TRANSFER_MIN && self.log_writable(rank)
    }

    /// Whether some server on this node may take a transfer's one-copy write of `len` bytes
    /// (the C API then hands over the caller's buffer instead of copying it at start).
    pub fn direct_transfers_possible(&self, len: usize) -> bool {
        (0..self.size()).any(|r| self.direct_transfers(r, len))
    }
}

/// A write reserved and written but not committed ([`Client::write_uncommitted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Uncommitted {
    /// The server (the object's owner) whose log holds it.
    pub(crate) dest: u32,
    pub(crate) txn: u64,
    /// The payload's checksum, sent with the commit (reserved without it).
    pub(crate) crc: u32,
    /// The connection whose server session holds the reservation.
    pub(crate) conn: u64,
}

/// The commit options for writes with `consistency` at a data server; `foreign`: the server is
/// not the objects' owner (only then is there a registration to defer).
pub(crate) fn commit_opts(
    durability: Durability,
    consistency: Consistency,
    foreign: bool,
) -> CommitOpts {
    CommitOpts {
        durability,
        consistency: if foreign {
            consistency
        } else {
            Consistency::Strong
        },
        ..CommitOpts::default()
    }
}
