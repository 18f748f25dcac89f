//! The storage hierarchy behind a server's log.
//!
//! Writes land in the segment log (crash-consistent, host-side). A background **flusher**
//! copies committed extents to the tier the placement picks (`placement.rs`), has the data
//! store record each extent's *home* durably, and then has it **retire** log segments whose
//! every extent has a durable home, so the log stays the size of the unflushed data. This
//! module is policy (what goes where, shards, demotion); the mechanics are `crate::datastore`. Reads fall through
//! cache → log → home tier (byte ranges; whole blob + decode for compressed ones).
//! A tier that fails (S3 outage, bad credentials) is retried on later passes: the data stays
//! in the log and nothing is acknowledged differently.

pub mod codec;
pub mod flushbytes;
mod groupkeys;
pub mod placement;

use pdcx_core::model::{TagValue, Tags};
use pdcx_core::protocol::{ObjectSpec, TagTarget};
use pdcx_core::{Error, ErrorKind, ObjectId, Result};
use pdcx_tiers::{DeploymentConfig, Tier, TierKind};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Where an extent's bytes live besides (or instead of) the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Home {
    /// Index into [`Tiering::tiers`].
    pub tier: usize,
    pub codec: String,
    pub stored_len: u64,
    /// The shard blob holding it with other extents (`[shard]` config), or `None`: the
    /// extent's own blob ([`Tiering::key`]).
    pub shard: Option<String>,
    /// Where the extent's stored bytes start in its blob (0 for an own blob).
    pub offset: u64,
}

impl Home {
    /// A home in the extent's own blob.
    pub fn own(tier: usize, codec: String, stored_len: u64) -> Home {
        Home {
            tier,
            codec,
            stored_len,
            shard: None,
            offset: 0,
        }
    }

    /// The durable row for this home of extent (`id`, `seq`).
    pub(crate) fn row(&self, t: &Tiering, id: u64, seq: u64) -> crate::meta::HomeRow {
        crate::meta::HomeRow {
            id,
            seq,
            tier: t.name(self.tier).to_string(),
            codec: self.codec.clone(),
            stored_len: self.stored_len,
            blob: self.shard.clone(),
            offset: self.offset,
        }
    }
}

/// Per-tier traffic counters (since start).
#[derive(Default)]
pub struct TierCounters {
    pub put_bytes: AtomicU64,
    pub put_nanos: AtomicU64,
    pub get_bytes: AtomicU64,
    pub extents: AtomicU64,
    /// Failed puts other than "no space" (metrics: `pdcx_tier_errors_total`).
    pub errors: AtomicU64,
}

impl TierCounters {
    /// Measured write bandwidth in bytes/s, once at least 1 MiB was written.
    pub fn put_bandwidth(&self) -> Option<f64> {
        let (b, ns) = (
            self.put_bytes.load(Ordering::Relaxed),
            self.put_nanos.load(Ordering::Relaxed),
        );
        (b >= 1 << 20 && ns > 0).then(|| b as f64 / (ns as f64 / 1e9))
    }
}

/// Flusher progress and health, shown by `pdcx top` / `pdcx flush`.
#[derive(Default, Debug, Clone)]
pub struct FlushState {
    pub flushed_bytes: u64,
    pub flushed_extents: u64,
    pub retired_segments: u64,
    pub retired_bytes: u64,
    /// Extents moved between tiers by demotion/promotion.
    pub moved_extents: u64,
    /// The last tier error, cleared by the next successful put to that tier.
    pub last_error: Option<String>,
    pub passes: u64,
}

/// Encoded extents a member offered its group's leader, by (object, seq).
type Offered = HashMap<(ObjectId, u64), flushbytes::FlushBytes>;

pub struct Tiering {
    pub tiers: Vec<Arc<dyn Tier>>,
    pub counters: Vec<TierCounters>,
    /// Blob keys start with this: the deployment id and this server's rank, so deployments
    /// (and ranks) sharing a bucket or a directory never collide.
    pub(crate) prefix: String,
    pub interval: Duration,
    pub state: Mutex<FlushState>,
    /// Wakes the flusher early (`pdcx flush`, shutdown).
    pub(crate) kick: (Mutex<u64>, Condvar),
    /// Reads served from tiers per extent since the last rebalance (promotion heat).
    pub(crate) hits: Mutex<HashMap<(u64, u64), u32>>,
    /// Objects grouped per shard blob by a flush pass (0: every extent its own blob).
    pub objects_per_shard: u32,
    pub max_shard_bytes: u64,
    /// Extents referring to each (tier, shard blob): the blob is deleted with the last one.
    pub(crate) shard_refs: Mutex<HashMap<(usize, String), u32>>,
    /// Serialises whatever puts blobs and then records homes (flush passes, migrations,
    /// rebalancing) with the startup sweep of unreferenced blobs, which must never see a blob
    /// whose home is not recorded yet.
    pub(crate) moves: Mutex<()>,
    /// Whether the sweep of blobs left by a crash between put and home record ran.
    pub(crate) swept: std::sync::atomic::AtomicBool,
    /// Group shards (`[shard] servers`, `group.rs`): this server's rank, the deployment's
    /// size, the group size (1: off) and the deployment id (group keys carry the leader).
    pub(crate) rank: u32,
    pub(crate) size: u32,
    pub(crate) group: u32,
    pub(crate) deployment: String,
    /// Group shards whose last reference on this server went, to be reported to their leader
    /// at the next flush pass (the leader deletes the blob once no server references it).
    pub(crate) released: Mutex<Vec<(usize, String)>>,
    /// Group shards this server (their leader) checks at its next pass: deleted if no server
    /// of the deployment references them.
    pub(crate) to_check: Mutex<HashSet<(usize, String)>>,
    /// Held while a member applies `RecordShardHomes` and while it answers `ShardRefs`, so an
    /// answer never misses homes being recorded (`group.rs`).
    pub(crate) records: Mutex<()>,
    /// Whether the leader's sweep of its group prefix ran (needs every server to answer).
    pub(crate) group_swept: std::sync::atomic::AtomicBool,
    /// Per tier, for S3 tiers: a handle for multipart uploads whose parts several servers
    /// put (group shards whose members upload their own bytes).
    pub(crate) s3: Vec<Option<Arc<pdcx_tiers::s3::S3Tier>>>,
    /// This server's extents offered to its group's leader by the last `ShardCandidates`
    /// without bytes, encoded, until the leader fetches or uploads them.
    pub(crate) offered: Mutex<Offered>,
    /// Parts of group shards this server uploaded (for its leader or as leader), since start.
    pub group_parts_uploaded: AtomicU64,
    /// Multipart uploads of group shards a crashed leader left, aborted by this one's sweep.
    pub group_uploads_aborted: AtomicU64,
    /// A leader's backoff per member: (passes in a row it had nothing or did not answer,
    /// passes still to skip it), so idle members of a large group are not asked every pass.
    pub(crate) idle: Mutex<HashMap<u32, (u32, u32)>>,
    /// Set by [`kick`](Self::kick) (`pdcx flush`) and explicit flushes: ask every member now.
    pub(crate) kicked: std::sync::atomic::AtomicBool,
}

impl Tiering {
    /// Opens every tier the config declares; `None` when it declares none (log only).
    pub fn open(
        cfg: &DeploymentConfig,
        deployment: &str,
        rank: u32,
        size: u32,
    ) -> Result<Option<Tiering>> {
        Self::open_with_fs(cfg, deployment, rank, size, pdcx_fsio::os())
    }

    /// [`open`](Self::open) with node-local directory tiers on the I/O seam `fs` (crash tests).
    pub fn open_with_fs(
        cfg: &DeploymentConfig,
        deployment: &str,
        rank: u32,
        size: u32,
        fs: Arc<dyn pdcx_fsio::Fs>,
    ) -> Result<Option<Tiering>> {
        if cfg.tiers.is_empty() {
            return Ok(None);
        }
        let ctx = pdcx_tiers::OpenContext { rank, size };
        let mut tiers = Vec::new();
        for t in &cfg.tiers {
            tiers.push(pdcx_tiers::open_with_fs(t, &ctx, fs.clone()).map_err(|e| {
                Error::new(
                    e.kind,
                    format!("opening tier {:?} ({}): {}", t.name, t.kind, e.message),
                )
            })?);
        }
        let counters = tiers.iter().map(|_| TierCounters::default()).collect();
        let mut s3 = Vec::new();
        for t in &cfg.tiers {
            s3.push(match t.kind {
                TierKind::S3 => Some(Arc::new(pdcx_tiers::s3::S3Tier::open_destination(t)?)),
                _ => None,
            });
        }
        Ok(Some(Tiering {
            tiers,
            counters,
            prefix: format!("{deployment}/s{rank:04}"),
            interval: Duration::from_millis(cfg.flush.interval_ms),
            state: Mutex::new(FlushState::default()),
            kick: (Mutex::new(0), Condvar::new()),
            hits: Mutex::new(HashMap::new()),
            objects_per_shard: cfg.shard.objects_per_shard(),
            max_shard_bytes: cfg.shard.max_shard_bytes(),
            shard_refs: Mutex::new(HashMap::new()),
            moves: Mutex::new(()),
            swept: std::sync::atomic::AtomicBool::new(false),
            rank,
            size,
            group: cfg.shard.group_size(size),
            deployment: deployment.to_string(),
            released: Mutex::new(Vec::new()),
            to_check: Mutex::new(HashSet::new()),
            records: Mutex::new(()),
            group_swept: std::sync::atomic::AtomicBool::new(false),
            s3,
            offered: Mutex::new(HashMap::new()),
            group_parts_uploaded: AtomicU64::new(0),
            group_uploads_aborted: AtomicU64::new(0),
            idle: Mutex::new(HashMap::new()),
            kicked: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    pub fn tier_index(&self, name: &str) -> Option<usize> {
        self.tiers.iter().position(|t| t.name() == name)
    }

    pub fn name(&self, tier: usize) -> &str {
        self.tiers.get(tier).map_or("?", |t| t.name())
    }

    pub fn is_durable(&self, tier: usize) -> bool {
        self.tiers.get(tier).is_some_and(|t| t.durable())
    }

    /// True if a blob on `tier` survives the loss of this node (a shared directory or S3):
    /// what `remote` durability needs.
    pub fn off_node(&self, tier: usize) -> bool {
        self.tiers
            .get(tier)
            .is_some_and(|t| matches!(t.kind(), TierKind::Shared | TierKind::S3))
    }

    /// Checks that `remote` durability can be honoured: some tier survives node loss.
    pub fn check_remote(&self) -> Result<()> {
        if (0..self.tiers.len()).any(|i| self.off_node(i)) {
            return Ok(());
        }
        Err(no_remote_tier(Some(self)))
    }

    /// The blob key of extent `seq` of object `id`.
    pub fn key(&self, id: u64, seq: u64) -> String {
        format!("{}/{id:016x}/{seq:016x}", self.prefix)
    }

    /// The key of a shard blob whose first extent is `seq` of object `id`. Shard keys live
    /// beside extent keys under this server's prefix, in their own folder.
    pub fn shard_key(&self, id: u64, seq: u64) -> String {
        format!("{}/shard/{id:016x}-{seq:016x}", self.prefix)
    }

    /// The blob holding extent (`id`, `seq`) at `home`.
    pub fn blob_key(&self, id: u64, seq: u64, home: &Home) -> String {
        home.shard.clone().unwrap_or_else(|| self.key(id, seq))
    }

    /// Counts a new reference to `home`'s shard blob.
    pub(crate) fn acquire(&self, home: &Home) {
        if let Some(k) = &home.shard {
            *self
                .shard_refs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry((home.tier, k.clone()))
                .or_default() += 1;
        }
    }

    /// Drops extent (`id`, `seq`)'s reference to `home`; deletes the blob when nothing else
    /// refers to it (always for an own blob). Deletion failures leave an unreferenced blob
    /// that the next startup sweep removes.
    pub(crate) fn release(&self, id: u64, seq: u64, home: &Home) {
        let last = match &home.shard {
            None => true,
            Some(k) => {
                let mut refs = self.shard_refs.lock().unwrap_or_else(|p| p.into_inner());
                let key = (home.tier, k.clone());
                match refs.get_mut(&key) {
                    Some(n) if *n > 1 => {
                        *n -= 1;
                        false
                    }
                    _ => {
                        refs.remove(&key);
                        true
                    }
                }
            }
        };
        if !last {
            return;
        }
        match &home.shard {
            // Other servers may still use a group shard: its leader decides (`group.rs`).
            Some(k) if self.group_leader_of(k).is_some() => self
                .released
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((home.tier, k.clone())),
            _ => {
                let _ = self.delete(home.tier, &self.blob_key(id, seq, home));
            }
        }
    }

    /// Deletes blobs under this server's prefix that no home refers to: left by a crash
    /// between a put and the durable record of its home (shard keys depend on how a pass
    /// grouped extents, so a re-flush after restart need not overwrite them). Runs once, at
    /// the first flush pass, under `moves`; a tier that cannot list is retried next pass.
    pub(crate) fn sweep_unreferenced(&self, referenced: &HashSet<(usize, String)>) {
        if self.swept.load(Ordering::Relaxed) {
            return;
        }
        let mut all_ok = true;
        for (i, tier) in self.tiers.iter().enumerate() {
            if !tier.durable() {
                continue;
            }
            match tier.list(&format!("{}/", self.prefix)) {
                Ok(keys) => {
                    let stale: Vec<String> = keys
                        .into_iter()
                        .map(|(k, _)| k)
                        .filter(|k| !referenced.contains(&(i, k.clone())))
                        .collect();
                    if !stale.is_empty() {
                        tracing::info!(
                            tier = %tier.name(),
                            "removing {} unreferenced blob(s) from tier {:?} (left by an interrupted flush)",
                            stale.len(),
                            tier.name()
                        );
                    }
                    for k in stale {
                        let _ = self.delete(i, &k);
                    }
                }
                Err(_) => all_ok = false,
            }
        }
        if all_ok {
            self.swept.store(true, Ordering::Relaxed);
        }
    }

    pub fn state(&self) -> FlushState {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn note_error(&self, tier: usize, e: &Error) {
        let msg = format!(
            "tier {:?} ({}): {}; unflushed data stays in the log and the flush is retried",
            self.name(tier),
            self.tiers[tier].kind(),
            e.message
        );
        self.counters[tier].errors.fetch_add(1, Ordering::Relaxed);
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.last_error.as_deref() != Some(msg.as_str()) {
            tracing::warn!(tier = %self.name(tier), "{msg}");
        }
        st.last_error = Some(msg);
    }

    pub(crate) fn clear_error(&self, tier: usize) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let prefix = format!("tier {:?}", self.name(tier));
        if st
            .last_error
            .as_deref()
            .is_some_and(|m| m.starts_with(&prefix))
        {
            tracing::info!(tier = %self.name(tier), "tier {:?} is reachable again", self.name(tier));
            st.last_error = None;
        }
    }

    /// Stores a blob on `tier`, counting traffic and bandwidth.
    pub(crate) fn put(&self, tier: usize, key: &str, data: &[u8]) -> Result<()> {
        self.put_slices(tier, key, &[data])
    }

    /// Stores a blob made of `parts` back to back on `tier` (a shard: see `Tier::put_parts`).
    pub(crate) fn put_parts(&self, tier: usize, key: &str, parts: &[bytes::Bytes]) -> Result<()> {
        let slices: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        self.put_slices(tier, key, &slices)
    }

    fn put_slices(&self, tier: usize, key: &str, parts: &[&[u8]]) -> Result<()> {
        let t0 = std::time::Instant::now();
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        let r = self.tiers[tier].put_parts(key, parts);
        match &r {
            Ok(()) => {
                let c = &self.counters[tier];
                c.put_bytes.fetch_add(len, Ordering::Relaxed);
                c.put_nanos
                    .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                c.extents.fetch_add(1, Ordering::Relaxed);
                self.clear_error(tier);
            }
            Err(e) if e.kind == ErrorKind::NoSpace => {}
            Err(e) => self.note_error(tier, e),
        }
        r
    }

    pub(crate) fn get_range(
        &self,
        tier: usize,
        key: &str,
        offset: u64,
        out: &mut [u8],
    ) -> Result<()> {
        self.tiers[tier].get_range(key, offset, out)?;
        self.counters[tier]
            .get_bytes
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) fn delete(&self, tier: usize, key: &str) -> Result<()> {
        self.tiers[tier].delete(key)?;
        let _ =
            self.counters[tier]
                .extents
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    Some(n.saturating_sub(1))
                });
        Ok(())
    }

    pub(crate) fn note_read(&self, id: u64, seq: u64) {
        *self
            .hits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((id, seq))
            .or_default() += 1;
    }

    pub(crate) fn take_hits(&self) -> HashMap<(u64, u64), u32> {
        std::mem::take(&mut *self.hits.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Wakes the flusher now instead of at its next interval.
    pub fn kick(&self) {
        self.kicked.store(true, Ordering::Relaxed);
        let (m, cv) = &self.kick;
        *m.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        cv.notify_all();
    }

    /// Sleeps until kicked or the interval passes.
    pub(crate) fn wait_kick(&self, seen: &mut u64) {
        let (m, cv) = &self.kick;
        let g = m.lock().unwrap_or_else(|p| p.into_inner());
        let (g, _) = cv
            .wait_timeout_while(g, self.interval, |k| *k == *seen)
            .unwrap_or_else(|p| p.into_inner());
        *seen = *g;
    }
}

/// Reads `ROOT/deployment-id`, creating it (random hex) on first start. Every rank reads the
/// same id; the first writer wins a create-new race.
pub fn deployment_id(root: &Path) -> Result<String> {
    let path = root.join("deployment-id");
    let read = || std::fs::read_to_string(&path).map(|s| s.trim().to_string());
    match read() {
        Ok(id) if !id.is_empty() => return Ok(id),
        _ => {}
    }
    let id = format!("pdcx-{:016x}", rand::random::<u64>());
    // Tier keys carry this id: it must survive a power cut, and the first rank to create it
    // wins a race.
    pdcx_fsio::create_once(&pdcx_fsio::OsFs, &path, id.as_bytes())
        .map_err(|e| Error::new(ErrorKind::Io, format!("writing deployment-id: {e}")))?;
    match read() {
        Ok(id) if !id.is_empty() => Ok(id),
        Ok(_) => Err(Error::internal("deployment-id is empty")),
        Err(e) => Err(Error::io("reading deployment-id", &e)),
    }
}

/// Object tag naming the least durability every wait on the object gets ("memory", "local",
/// "remote"): a request asking for less is raised to it.
pub const DURABILITY_TAG: &str = "pdcx.durability";

/// The error for `remote` durability on a deployment without a tier that survives node loss.
pub fn no_remote_tier(tiering: Option<&Tiering>) -> Error {
    let have = match tiering {
        None => "it declares no tiers".to_string(),
        Some(t) => format!(
            "its tiers are {}",
            t.tiers
                .iter()
                .map(|x| format!("{} ({})", x.name(), x.kind()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    Error::invalid(format!(
        "durability 'remote' needs a tier that survives the loss of a node (kind \"shared\" or \"s3\") in ROOT/pdcx.toml, but {have}; wait with 'local' or declare such a tier"
    ))
}

/// Parses a durability name ("memory", "local", "remote").
pub fn parse_durability(s: &str) -> Result<pdcx_core::protocol::Durability> {
    use pdcx_core::protocol::Durability;
    match s.trim() {
        "memory" => Ok(Durability::Memory),
        "local" => Ok(Durability::Local),
        "remote" => Ok(Durability::Remote),
        other => Err(Error::invalid(format!(
            "durability must be memory, local or remote, not {other:?}"
        ))),
    }
}

/// Orders durabilities: memory < local < remote.
pub fn durability_rank(d: pdcx_core::protocol::Durability) -> u8 {
    use pdcx_core::protocol::Durability;
    match d {
        Durability::Memory => 0,
        Durability::Local => 1,
        Durability::Remote => 2,
    }
}

/// Refuses `pdcx.codec` / `pdcx.tier` / `pdcx.tier.regions` tag values that the flusher could
/// not honour, when they are set (instead of falling back silently at flush time). Of a rule
/// append (`+RULES`) it checks the appended rules, so errors number them as the caller wrote
/// them; the stored ones were checked when set.
pub fn check_tags(
    tiering: Option<&Tiering>,
    dtype: pdcx_core::Dtype,
    dims: &[u64],
    tags: &[(String, TagValue)],
) -> Result<()> {
    use placement::{TIER_RULES_TAG, TIER_TAG};
    for (k, v) in tags {
        if k == DURABILITY_TAG {
            let TagValue::Str(s) = v else {
                return Err(Error::invalid(format!("tag {k} must be a string")));
            };
            let d = parse_durability(s)
                .map_err(|e| Error::invalid(format!("tag {k}: {}", e.message)))?;
            if d == pdcx_core::protocol::Durability::Remote {
                match tiering {
                    Some(t) => t.check_remote()?,
                    None => return Err(no_remote_tier(None)),
                }
            }
            continue;
        }
        let text = match v {
            TagValue::Str(s) if k == TIER_RULES_TAG => {
                let s = s.trim_start();
                s.strip_prefix('+').unwrap_or(s)
            }
            TagValue::Str(s) => s.as_str(),
            _ if k == codec::CODEC_TAG || k == TIER_TAG || k == TIER_RULES_TAG => {
                return Err(Error::invalid(format!("tag {k} must be a string")))
            }
            _ => continue,
        };
        if k == codec::CODEC_TAG && !matches!(text.trim(), "" | "none") {
            pdcx_codec::Codec::parse_for(text.trim(), dtype)
                .map_err(|e| Error::invalid(format!("tag {k}: {e}")))?;
        } else if k == TIER_TAG || k == TIER_RULES_TAG {
            match tiering {
                Some(t) => {
                    let names: Vec<&str> = t.tiers.iter().map(|x| x.name()).collect();
                    if k == TIER_TAG {
                        placement::parse_hint(text, &names)?;
                    } else {
                        placement::check_rules(text, dims, &names)?;
                    }
                }
                None if !(text.trim().is_empty() || k == TIER_TAG && text.trim() == "auto") => {
                    return Err(Error::invalid(format!(
                        "tag {k}={text:?}: this deployment has no tiers (declare them in ROOT/pdcx.toml)"
                    )))
                }
                None => {}
            }
        }
    }
    Ok(())
}

/// Replaces a `pdcx.tier.regions` value of the form `+RULES` in `tags` by `current` (the
/// stored rules) with RULES appended.
fn resolve_rule_appends(current: &str, tags: &mut Tags) -> Result<()> {
    let mut cur = current.to_string();
    for (k, v) in tags.iter_mut() {
        let TagValue::Str(s) = v else { continue };
        if k != placement::TIER_RULES_TAG {
            continue;
        }
        if let Some(added) = s.trim_start().strip_prefix('+') {
            *s = placement::append_rules(&cur, added)?;
        }
        cur = s.clone();
    }
    Ok(())
}

/// Checks a new object's tags (resolving rule appends against no stored rules).
pub(crate) fn check_new_object(tiering: Option<&Tiering>, spec: &mut ObjectSpec) -> Result<()> {
    check_tags(tiering, spec.dtype, &spec.dims, &spec.tags)?;
    resolve_rule_appends("", &mut spec.tags)
}

/// Serialises changes of `pdcx.tier.regions` (on the owner, the one server that changes an
/// object's tags): ranks hinting their own blocks append concurrently, and each append's read
/// of the stored rules must see the others' appends (and a replacement or deletion must not
/// fall between an append's read and its write). One lock per process: only changes of that
/// tag wait on it.
static RULE_CHANGES: Mutex<()> = Mutex::new(());

/// Held while a change of tag `key` is read, merged and stored (see [`RULE_CHANGES`]).
pub(crate) fn rule_change_guard(key: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    (key == placement::TIER_RULES_TAG)
        .then(|| RULE_CHANGES.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Checks and stores tags of object `id`; a `pdcx.tier.regions` value `+RULES` appends RULES
/// to the stored rules atomically.
pub(crate) fn put_object_tags(
    md: &crate::meta::Metadata,
    tiering: Option<&Tiering>,
    id: ObjectId,
    mut tags: Tags,
    lazy: bool,
) -> Result<()> {
    let _serial = tags.iter().find_map(|(k, _)| rule_change_guard(k));
    let obj = md.object(id)?;
    check_tags(tiering, obj.dtype, &obj.dims, &tags)?;
    let stored = placement::tag_str(&obj, placement::TIER_RULES_TAG).unwrap_or("");
    resolve_rule_appends(stored, &mut tags)?;
    md.put_tags_with(&TagTarget::Object(id), &tags, lazy)
}
