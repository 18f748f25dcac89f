//! THE commit ([`DataStore::commit`]) and the holder side of registration with owners.

use super::index::{insert_by_seq, Deferred, Staged};
use super::{crash_point, DataStore};
use crate::meta::ExtentRow;
use pdcx_core::protocol::{Durability, RegisterItem};
use pdcx_core::{Error, ObjectId, Result};
use pdcx_store::CommitEntry;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

/// Items per peer `Register` request when registering deferred writes (far below the body limit).
const REGISTER_CHUNK: usize = 65536;

/// Proof that the caller holds the commit lock: commits are serialised, so a holder's commit
/// order is also the order of its registrations, and no extent appears while segments are
/// retired. Functions that must run under the lock take a `&CommitGuard`.
pub struct CommitGuard<'a>(#[allow(dead_code)] MutexGuard<'a, ()>);

/// The register lock of one owner: registrations reach each owner one at a time, in commit
/// order (taken after the commit lock when both are held). [`OwnerLock::lock`] gives the
/// [`OwnerGuard`] that functions needing it take as an argument.
pub struct OwnerLock {
    owner: u32,
    lock: Arc<Mutex<()>>,
}

impl OwnerLock {
    pub fn lock(&self) -> OwnerGuard<'_> {
        OwnerGuard {
            owner: self.owner,
            _g: self.lock.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }
}

/// Proof that the caller holds the register lock of `owner`.
pub struct OwnerGuard<'a> {
    owner: u32,
    _g: MutexGuard<'a, ()>,
}

/// The network half of registration, supplied by the engine: sends `items` to `owner` and
/// returns the sequence number the owner gave each (None: a deferred write of an object that
/// is gone). Answers must be one per item, in order.
pub trait Registrar {
    fn register(&self, owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>>;
    /// `register` for the strong writes of a `memory` commit (smallmem): the owner
    /// may answer before its metadata WAL fsync. Defaults to the durable `register`.
    fn register_memory(&self, owner: u32, items: &[RegisterItem]) -> Result<Vec<Option<u64>>> {
        self.register(owner, items)
    }
}

/// What a commit made visible.
#[derive(Debug, Clone, Default)]
pub struct Committed {
    /// (object, seq) of each write that is now in the index, in staged order (deferred
    /// relaxed writes are not: they have no number yet).
    pub visible: Vec<(ObjectId, u64)>,
    /// How many writes went to the deferred list instead.
    pub deferred: usize,
}

impl DataStore {
    /// Takes the commit lock.
    pub fn lock_commit(&self) -> CommitGuard<'_> {
        CommitGuard(self.commit_lock.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The register lock of `owner` (see [`OwnerLock`]).
    pub fn owner_lock(&self, owner: u32) -> OwnerLock {
        let lock = self
            .register_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(owner)
            .or_default()
            .clone();
        OwnerLock { owner, lock }
    }

    /// The consistency point: makes `staged` durable (per `durability`) and visible. Order (a
    /// crash between any two steps loses nothing acknowledged and exposes nothing torn):
    ///
    /// 0. take the commit lock;
    /// 1. number the writes ([`assign_seqs`](Self::assign_seqs)): this server's objects from its
    ///    counter; strong writes of foreign objects from their owners (`Registrar`, under the
    ///    owner's register lock, this server's earlier deferred writes for that owner first in
    ///    the same request); relaxed ones provisional numbers — `commit.after_register`;
    /// 2. append a commit record naming the extents (object, seq, region, log location) to
    ///    the log, and record the extents in the extent map (one SQLite transaction into the
    ///    WAL, not waited for: the commit record is what makes them durable; recovery replays
    ///    commit records past the last checkpoint) — `commit.after_extent_rows`;
    /// 3. `local`/`remote`: release the commit lock and fdatasync the log up to the commit
    ///    record ([`sync_through`](Self::sync_through)): ONE fdatasync makes the data and the
    ///    commit record durable, shared by every commit that appended its record before it
    ///    started (group commit) — `commit.after_log_sync`. (Commits with deferred relaxed
    ///    writes sync under the lock instead, keeping their registration order.)
    /// 4. take the lock again and publish the extents in the index, or on the deferred list
    ///    ([`publish`](Self::publish)) — `commit.after_publish`. `memory` does 4 right after
    ///    2, without a sync.
    ///
    /// A crash before 2's sync leaves unreferenced log bytes (garbage) and perhaps a commit
    /// record that a later sync covers (then the commit is replayed whole: its writes were
    /// staged completely, they were just not acknowledged); after 2 the write is complete even
    /// if the SQLite rows are lost (recovery replays them). A crash after an owner recorded a
    /// registration but before 2 leaves a region-map entry naming no extent here, which reads
    /// skip. The metadata WAL is fsynced by [`checkpoint`](Self::checkpoint), which then
    /// records in the log's MANIFEST how far recovery no longer needs to replay.
    ///
    /// Relaxed writes of foreign objects skip the owner: they are durable (per `durability`)
    /// and acknowledged but invisible until [`register_deferred`](Self::register_deferred).
    ///
    /// `remote` durability is completed by the caller after this returns: it puts the visible
    /// extents to their home tier and records the homes ([`DataStore::flush_extents`] through
    /// the flusher's placement).
    pub fn commit(
        &self,
        staged: &[Staged],
        durability: Durability,
        relaxed: bool,
        registrar: &dyn Registrar,
    ) -> Result<Committed> {
        let commit = self.lock_commit();
        self.io.log_commits.fetch_add(1, Ordering::Relaxed);
        let memory = durability == Durability::Memory;
        let (seqs, deferred) = self.assign_seqs(&commit, staged, relaxed, memory, registrar)?;
        crash_point("commit.after_register");
        let rows: Vec<ExtentRow> = staged
            .iter()
            .zip(&seqs)
            .map(|(s, &seq)| ExtentRow {
                id: s.id,
                seq,
                region: s.region.clone(),
                loc: s.loc,
            })
            .collect();
        let entries: Vec<CommitEntry> = rows
            .iter()
            .map(|r| CommitEntry {
                object: r.id,
                seq: r.seq,
                region: r.region.clone(),
                loc: r.loc,
            })
            .collect();
        let record = self.log().append_commit(&entries)?;
        // Under the commit lock, before the sync: a checkpoint (which snapshots the synced
        // lengths under this lock) must never pass a commit record whose rows are not in the
        // metadata yet. Not waited for: the commit record is the durable copy until then.
        if let Err(e) = self.meta.insert_extents(&rows) {
            // The caller is told the commit failed: its record must never be replayed.
            self.log().void_commit(&record)?;
            return Err(e);
        }
        crash_point("commit.after_extent_rows");
        self.commits_since_checkpoint
            .fetch_add(1, Ordering::Relaxed);
        if durability == Durability::Memory {
            // Visible now, durable once a later sync covers the log.
            let out = self.publish(&commit, rows, &deferred);
            crash_point("commit.after_publish");
            return Ok(out);
        }
        if deferred.iter().any(|&d| d) {
            // Deferred writes join the deferred list in commit order (their registration
            // order at the owner): no other commit may pass this one, so it syncs under the
            // lock.
            self.sync_log(&commit)?;
            crash_point("commit.after_log_sync");
            let out = self.publish(&commit, rows, &deferred);
            crash_point("commit.after_publish");
            return Ok(out);
        }
        // Group commit: the fdatasync runs without the commit lock, so commits of other
        // connections append their records meanwhile and one fdatasync covers many of them.
        drop(commit);
        self.sync_through(&record)?;
        crash_point("commit.after_log_sync");
        let commit = self.lock_commit();
        let out = self.publish(&commit, rows, &deferred);
        crash_point("commit.after_publish");
        Ok(out)
    }

    /// Returns once the log is synced at least up to `record` (a commit record): if a sync
    /// of another commit covered it meanwhile, without syncing again; else this commit syncs
    /// everything appended so far (the leader of a group of commits waiting here).
    fn sync_through(&self, record: &pdcx_store::Location) -> Result<()> {
        let _leader = self.sync_lock.lock().unwrap_or_else(|p| p.into_inner());
        if self.log().is_committed(record) {
            self.io.log_syncs_shared.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let plan = self.log().prepare_commit()?;
        if let Some(plan) = plan {
            let synced = plan.sync();
            self.log().finish_commit(plan, synced)?;
            self.io.log_syncs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Makes the metadata WAL durable and records in the log's MANIFEST that the commits
    /// synced so far need no replay (recovery then scans only what follows). Run by the
    /// server's checkpoint timer, before retirement and at shutdown. Order: under the commit
    /// lock, snapshot the synced lengths (every commit they cover has inserted its rows, since
    /// a commit holds the lock from its sync to its insert); release it; fsync the WAL (covers
    /// those rows); publish the MANIFEST with the snapshot. A crash anywhere in between only
    /// means recovery replays a little more. Returns whether it checkpointed anything.
    pub fn checkpoint(&self) -> Result<bool> {
        let lengths = {
            let _c = self.lock_commit();
            self.log().checkpoint_lengths()
        };
        if lengths.is_empty() {
            return Ok(false);
        }
        self.commits_since_checkpoint.store(0, Ordering::Relaxed);
        self.meta.sync()?;
        crash_point("checkpoint.after_wal_sync");
        // The MANIFEST is written after the log's lock is released: its two fsyncs would
        // hold up every append and reservation meanwhile (`ManifestPublisher`).
        let (pending, manifests) = {
            let mut log = self.log();
            (log.prepare_checkpoint(&lengths)?, log.manifests())
        };
        if let Some(m) = pending {
            manifests.publish(m)?;
        }
        Ok(true)
    }

    /// Commits since the last checkpoint (the checkpoint timer skips idle servers).
    pub fn commits_since_checkpoint(&self) -> u64 {
        self.commits_since_checkpoint.load(Ordering::Relaxed)
    }

    /// Step 2: fdatasync every dirty log segment. The fdatasync runs without the log lock, so
    /// other connections keep appending.
    pub(super) fn sync_log(&self, _c: &CommitGuard<'_>) -> Result<()> {
        let plan = self.log().prepare_commit()?;
        if let Some(plan) = plan {
            let synced = plan.sync();
            self.log().finish_commit(plan, synced)?;
            self.io.log_syncs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Step 2: the sequence number of each staged write, and whether it is deferred.
    fn assign_seqs(
        &self,
        _c: &CommitGuard<'_>,
        staged: &[Staged],
        relaxed: bool,
        memory: bool,
        registrar: &dyn Registrar,
    ) -> Result<(Vec<u64>, Vec<bool>)> {
        let mut seqs = vec![0u64; staged.len()];
        let mut deferred = vec![false; staged.len()];
        let mut foreign: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        {
            let mut next_seq = self.next_seq.lock().unwrap_or_else(|p| p.into_inner());
            for (i, s) in staged.iter().enumerate() {
                let owner = self.meta.owner_of(s.id);
                if owner == self.rank {
                    seqs[i] = *next_seq;
                    *next_seq += 1;
                } else if relaxed {
                    seqs[i] = self.next_provisional.fetch_add(1, Ordering::Relaxed);
                    deferred[i] = true;
                } else {
                    foreign.entry(owner).or_default().push(i);
                }
            }
        }
        for (owner, idx) in &foreign {
            let lock = self.owner_lock(*owner);
            let g = lock.lock();
            let earlier = self.deferred_where(|d| self.meta.owner_of(d.id) == *owner);
            let mut items: Vec<RegisterItem> =
                earlier.iter().map(|d| d.item(self.incarnation)).collect();
            items.extend(idx.iter().map(|&i| RegisterItem {
                id: staged[i].id,
                region: staged[i].region.clone(),
                token: None,
            }));
            // A `memory` commit need not wait for the owner's WAL fsync, unless it carries
            // earlier deferred writes (their numbers must be durable at the owner before the
            // holder renumbers them).
            let answer = if memory && earlier.is_empty() {
                registrar.register_memory(*owner, &items)?
            } else {
                registrar.register(*owner, &items)?
            };
            let got = checked_answer(*owner, &items, answer)?;
            let (early, mine) = got.split_at(earlier.len());
            self.publish_registered(&g, &earlier, early)?;
            for (&i, seq) in idx.iter().zip(mine) {
                seqs[i] = seq.ok_or_else(|| {
                    Error::protocol(format!(
                        "server {owner} gave no sequence number to a write of object {:#x}",
                        staged[i].id
                    ))
                })?;
            }
        }
        Ok((seqs, deferred))
    }

    /// Step 4: makes committed rows visible in the index, or puts deferred ones on the list.
    fn publish(&self, _c: &CommitGuard<'_>, rows: Vec<ExtentRow>, deferred: &[bool]) -> Committed {
        let mut out = Committed::default();
        let mut index = self.index_mut();
        let mut later = self.deferred.lock().unwrap_or_else(|p| p.into_inner());
        for (r, d) in rows.into_iter().zip(deferred) {
            if *d {
                out.deferred += 1;
                later.push(Deferred {
                    id: r.id,
                    region: r.region,
                    loc: r.loc,
                    provisional: r.seq,
                });
            } else {
                out.visible.push((r.id, r.seq));
                insert_by_seq(index.entry(r.id).or_default(), r.seq, r.region, r.loc);
            }
        }
        out
    }

    /// Copies of the deferred writes matching `f`, in commit order.
    fn deferred_where(&self, f: impl Fn(&Deferred) -> bool) -> Vec<Deferred> {
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|d| f(d))
            .cloned()
            .collect()
    }

    /// Log segments holding deferred writes (they must not be retired).
    pub(super) fn deferred_segments(&self) -> HashSet<u64> {
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|d| d.loc.segment)
            .collect()
    }

    /// The token bound an owner may prune below (`PeerRequest::Released`): the oldest live log
    /// segment, in the token's form (tagged with this log's incarnation). A token names a
    /// deferred write's log location, and a segment holding one is not retired before the
    /// owner's answer is applied and durable (its home row's WAL fsync comes first), so a
    /// token below the oldest live segment, or of an older incarnation, is never presented
    /// again.
    pub fn settled_token_bound(&self) -> u64 {
        let oldest = self
            .log()
            .segment_lengths()
            .first()
            .map_or(0, |&(id, _)| id);
        oldest | (self.incarnation << super::index::INCARNATION_SHIFT)
    }

    /// Applies the owner's answer to registered deferred writes: renumbers their rows, makes
    /// them visible (index), drops those whose object is gone, and takes them off the list.
    fn publish_registered(
        &self,
        g: &OwnerGuard<'_>,
        done: &[Deferred],
        seqs: &[Option<u64>],
    ) -> Result<()> {
        if done.is_empty() {
            return Ok(());
        }
        debug_assert!(done.iter().all(|d| self.meta.owner_of(d.id) == g.owner));
        let updates: Vec<(ObjectId, u64, Option<u64>)> = done
            .iter()
            .zip(seqs)
            .map(|(d, s)| (d.id, d.provisional, *s))
            .collect();
        self.meta.assign_seqs(&updates)?;
        let gone: HashSet<u64> = done.iter().map(|d| d.provisional).collect();
        let mut index = self.index_mut();
        for (d, seq) in done.iter().zip(seqs) {
            if let Some(seq) = seq {
                insert_by_seq(
                    index.entry(d.id).or_default(),
                    *seq,
                    d.region.clone(),
                    d.loc,
                );
            }
        }
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|d| !gone.contains(&d.provisional));
        Ok(())
    }

    /// Registers this server's deferred writes of `ids` (all of them when None) with their
    /// owners: one peer `Register` per owner (per 65536 writes), in commit order. Returns how
    /// many were registered; on an owner's failure its writes stay deferred (the others are
    /// still registered) and the first error is returned. Commits go on meanwhile, except
    /// strong ones that must register with an owner this is waiting for.
    pub fn register_deferred(
        &self,
        ids: Option<&[ObjectId]>,
        registrar: &dyn Registrar,
    ) -> Result<usize> {
        let wanted: Option<HashSet<ObjectId>> = ids.map(|v| v.iter().copied().collect());
        let mut owners: Vec<u32> = self
            .deferred_where(|d| wanted.as_ref().is_none_or(|w| w.contains(&d.id)))
            .iter()
            .map(|d| self.meta.owner_of(d.id))
            .collect();
        owners.sort_unstable();
        owners.dedup();
        let mut done = 0;
        let mut first_err = None;
        for owner in owners {
            let lock = self.owner_lock(owner);
            let g = lock.lock();
            // Under the owner's lock: a strong commit may have registered some meanwhile.
            let list = self.deferred_where(|d| {
                self.meta.owner_of(d.id) == owner
                    && wanted.as_ref().is_none_or(|w| w.contains(&d.id))
            });
            for chunk in list.chunks(REGISTER_CHUNK) {
                let items: Vec<RegisterItem> =
                    chunk.iter().map(|d| d.item(self.incarnation)).collect();
                let r = registrar
                    .register(owner, &items)
                    .and_then(|got| checked_answer(owner, &items, got))
                    .and_then(|seqs| self.publish_registered(&g, chunk, &seqs));
                match r {
                    Ok(()) => done += chunk.len(),
                    Err(e) => {
                        first_err.get_or_insert(e);
                        // Later chunks must not overtake this one at the owner.
                        break;
                    }
                }
            }
        }
        first_err.map_or(Ok(done), Err)
    }
}

/// Refuses an owner's answer that does not have one number per item.
fn checked_answer(
    owner: u32,
    items: &[RegisterItem],
    got: Vec<Option<u64>>,
) -> Result<Vec<Option<u64>>> {
    if got.len() != items.len() {
        return Err(Error::protocol(format!(
            "server {owner} answered {} of {} registrations",
            got.len(),
            items.len()
        )));
    }
    Ok(got)
}
