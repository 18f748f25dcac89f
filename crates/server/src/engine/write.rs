//! Writes: staging, commits and their durability, deferred registration.

use super::*;

impl Engine {
    /// Checks a write against the object and stages it in the data store (appended to the
    /// log, invisible until committed).
    pub fn stage(&self, txn: u64, id: ObjectId, region: &Region, payload: &[u8]) -> Result<Staged> {
        self.stage_with(txn, id, region, payload, true)
    }

    /// [`stage`](Self::stage) straight from a client's shared-memory block: logged from
    /// there, never copied into the cache (the page cache holds it; the client may reuse the
    /// block once the stage is answered).
    pub fn stage_shared(
        &self,
        txn: u64,
        id: ObjectId,
        region: &Region,
        payload: &[u8],
    ) -> Result<Staged> {
        self.stage_with(txn, id, region, payload, false)
    }

    /// A write whose payload (`len` bytes, checksum `crc`) a same-node client writes into
    /// the log itself: checked like a stage, then reserved ([`DataStore::reserve`]).
    pub fn reserve(
        &self,
        lease: &mut pdcx_store::WriterLease,
        txn: u64,
        id: ObjectId,
        region: &Region,
        len: u64,
        crc: u32,
    ) -> Result<(Staged, (u64, u64))> {
        self.check_stage_len(id, region, len)?;
        self.store.reserve(lease, txn, id, region, len, crc)
    }

    /// Fails unless a write of `len` bytes to `region` of object `id` has the right size.
    pub(crate) fn check_stage_len(&self, id: ObjectId, region: &Region, len: u64) -> Result<()> {
        let obj = self.checked_meta(id, region)?;
        let want = region.byte_len(obj.dtype.size())?;
        if len != want {
            return Err(Error::new(
                ErrorKind::DtypeMismatch,
                format!(
                    "write to {} region {region} carries {len} bytes but {} {} elements need {want}",
                    obj.name,
                    region.num_elements(),
                    obj.dtype
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn stage_with(
        &self,
        txn: u64,
        id: ObjectId,
        region: &Region,
        payload: &[u8],
        cache: bool,
    ) -> Result<Staged> {
        self.check_stage_len(id, region, payload.len() as u64)?;
        self.store.stage(txn, id, region, payload, cache)
    }

    /// The consistency point of strong writes: `commit_with(.., Consistency::Strong)`.
    pub fn commit(&self, staged: &[Staged], durability: Durability) -> Result<()> {
        self.commit_with(staged, durability, Consistency::Strong)
    }

    /// The consistency point: [`DataStore::commit`] (its doc lists the steps), with this
    /// engine's peers registering strong writes of foreign objects with their owners.
    ///
    /// Relaxed: foreign writes skip the owner and stay invisible until `register_deferred`.
    /// If `expected_writes` > 0 and this server now holds that many deferred writes of an
    /// object, they are registered before this returns (a failure there leaves them deferred
    /// for the timer and does not fail the commit: the data is safe).
    ///
    /// Durability is at least what each object's `pdcx.durability` tag asks for. `remote`
    /// commits as `local`, then puts exactly these extents on their home tier (the first tier
    /// of their placement that survives node loss) and records their homes durably before
    /// returning ([`Flusher::make_remote`](crate::flusher::Flusher::make_remote)). Its writes are registered with their
    /// owners at once (strong), whatever the consistency: a home is recorded under the
    /// owner's number. Refused, before anything is committed, when no tier survives node loss.
    pub fn commit_with(
        &self,
        staged: &[Staged],
        durability: Durability,
        consistency: Consistency,
    ) -> Result<()> {
        let durability = self.effective_durability(staged, durability)?;
        let remote = durability == Durability::Remote;
        if remote {
            match &self.tiering {
                Some(t) => t.check_remote()?,
                None => return Err(crate::tiering::no_remote_tier(None)),
            }
        }
        let relaxed = matches!(consistency, Consistency::Relaxed { .. }) && !remote;
        let committed = self
            .store
            .commit(staged, durability, relaxed, &PeerRegistrar(self))?;
        self.touch(staged.iter().map(|s| s.id));
        if remote {
            self.flusher().make_remote(&committed.visible)?;
        }
        if let Consistency::Relaxed { expected_writes } = consistency {
            let mine: HashSet<ObjectId> = staged.iter().map(|s| s.id).collect();
            let due = self.store.objects_due(&mine, expected_writes);
            if !due.is_empty() {
                if let Err(e) = self.register_deferred(Some(&due)) {
                    eprintln!(
                        "pdcx server {}: deferred writes stay deferred (retried on the timer): {}",
                        self.rank, e.message
                    );
                }
            }
        }
        Ok(())
    }

    /// `durability`, raised to the `pdcx.durability` tag of any object of `staged`.
    pub(super) fn effective_durability(
        &self,
        staged: &[Staged],
        durability: Durability,
    ) -> Result<Durability> {
        use crate::tiering::{durability_rank, parse_durability, DURABILITY_TAG};
        let mut best = durability;
        let mut seen: HashSet<ObjectId> = HashSet::new();
        for s in staged {
            if best == Durability::Remote {
                break;
            }
            if !seen.insert(s.id) {
                continue;
            }
            // An object deleted since its write was staged has no say (the commit goes on as
            // before; its extents are garbage). Own objects: no copy of the metadata.
            let tag = if self.meta.owner_of(s.id) == self.rank {
                self.meta.object_tag(s.id, DURABILITY_TAG)
            } else {
                let Ok(obj) = self.object_meta(s.id, false) else {
                    continue;
                };
                obj.tags
                    .into_iter()
                    .find(|(k, _)| k == DURABILITY_TAG)
                    .map(|(_, v)| v)
            };
            if let Some(pdcx_core::TagValue::Str(v)) = tag {
                let d = parse_durability(&v)?;
                if durability_rank(d) > durability_rank(best) {
                    best = d;
                }
            }
        }
        Ok(best)
    }

    /// How many deferred (relaxed, not yet registered) writes this server holds.
    pub fn deferred_count(&self) -> u64 {
        self.store.deferred_count()
    }

    /// Registers this server's deferred writes of `ids` (all of them when None) with their
    /// owners ([`DataStore::register_deferred`]). Returns how many were registered.
    pub fn register_deferred(&self, ids: Option<&[ObjectId]>) -> Result<usize> {
        self.store.register_deferred(ids, &PeerRegistrar(self))
    }

    /// Makes every staged byte durable (used at shutdown).
    pub fn sync(&self) -> Result<()> {
        self.store.sync()
    }

    /// The base of `obj` if it is a byte stream owned here that has one.
    pub(super) fn base_of(&self, obj: &ObjectMeta) -> Option<Base> {
        if self.bases.is_empty() || self.meta.owner_of(obj.id) != self.rank || !obj.is_byte_stream()
        {
            return None;
        }
        self.bases.get(obj.id)
    }
}
