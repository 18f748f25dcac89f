//! The deployment config: one TOML file (`ROOT/pdcx.toml`, or `--config` / `PDCX_CONFIG`)
//! plus environment overrides. Tiers are listed fastest first; that order is the spill order.
//!
//! ```toml
//! [[tier]]
//! name = "mem"
//! kind = "memory"
//! capacity = "2GiB"
//!
//! [[tier]]
//! name = "ssd"
//! kind = "local"          # node-local SSD / burst buffer
//! path = "/local/pdcx"
//! capacity = "200GiB"
//!
//! [[tier]]
//! name = "pfs"
//! kind = "shared"         # parallel file system
//! path = "/lustre/proj/pdcx"
//!
//! [[tier]]
//! name = "s3"
//! kind = "s3"
//! endpoint = "http://127.0.0.1:9000"
//! bucket = "pdcx"
//! region = "us-east-1"    # credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
//! # part_size = "8MiB"    # multipart part size for large blobs (≥ 5MiB)
//! # concurrency = 8       # multipart parts in flight per upload
//! # timeout_ms = 5000     # connect timeout and retry budget: an outage is an error after this
//!
//! [flush]
//! interval_ms = 200       # how often the background flusher looks for committed extents
//!
//! [log]
//! segment_bytes = "256MiB" # flushed log space is freed a whole sealed segment at a time
//!
//! [shard]
//! strategy = 3            # object-sharding paper, Table II: 2/3/4/5 = 1/2/4/8 objects per shard per server
//! # composite = true      # Table II's composite column: 1 = all servers, 2..5 = 1/2/4/8 servers
//! # objects = 2           # the same, as a count (0 = every extent its own blob, the default)
//! # servers = 4           # consecutive servers sharing a shard (power of two, or "all")
//! # max_bytes = "256MiB"  # a shard closes at this size
//!
//! [metrics]
//! bind = "127.0.0.1:9464" # Prometheus text on http://HOST:PORT+RANK/metrics (off if absent)
//! ```
//!
//! Any tier field can be overridden with `PDCX_TIER_<NAME>_<FIELD>` (name upper-cased, `-` as
//! `_`), e.g. `PDCX_TIER_S3_ENDPOINT=http://10.0.0.5:9000` or `PDCX_TIER_SSD_CAPACITY=50GiB`.

use pdcx_core::{config, Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TierKind {
    #[default]
    Memory,
    Local,
    Shared,
    S3,
}

impl std::fmt::Display for TierKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TierKind::Memory => "memory",
            TierKind::Local => "local",
            TierKind::Shared => "shared",
            TierKind::S3 => "s3",
        })
    }
}

/// One `[[tier]]` entry. `Default` exists so code can write
/// `TierConfig { name, kind, path, ..Default::default() }` and keep compiling as fields are added.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierConfig {
    pub name: String,
    pub kind: TierKind,
    /// Directory of a `local` or `shared` tier.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Bytes this tier may hold ("500MiB", "2GiB" or a number); unbounded if absent.
    #[serde(default, deserialize_with = "de_size", serialize_with = "ser_size")]
    pub capacity: Option<u64>,
    /// S3: endpoint URL (path-style addressing is always used).
    #[serde(default)]
    pub endpoint: Option<String>,
    #[serde(default)]
    pub bucket: Option<String>,
    #[serde(default)]
    pub region: Option<String>,
    /// S3: key prefix; defaults to the deployment id so deployments sharing a bucket never mix.
    #[serde(default)]
    pub prefix: Option<String>,
    /// S3: multipart part size (≥ 5 MiB; S3's minimum for all parts but the last).
    #[serde(default, deserialize_with = "de_size", serialize_with = "ser_size")]
    pub part_size: Option<u64>,
    /// S3: multipart parts uploaded in parallel per blob (default 8).
    #[serde(default)]
    pub concurrency: Option<u64>,
    /// S3: connect timeout and the time budget for retrying a failed request, in milliseconds
    /// (default 5000), so an unreachable endpoint is reported in seconds, not minutes.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// S3: longest one request (a part, a ranged GET) may take before it fails and is retried
    /// (default: 30 s, more for parts above 30 MiB). A server that hangs mid-request is an
    /// error after this.
    #[serde(default)]
    pub request_timeout_ms: Option<u64>,
    /// local/shared: emulate a device of this many MB/s (reads and writes share it). For
    /// benchmarking tier splits on a machine whose disk is as fast as memory.
    #[serde(default)]
    pub max_mbps: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlushConfig {
    #[serde(default = "default_interval")]
    pub interval_ms: u64,
}

fn default_interval() -> u64 {
    200
}

impl Default for FlushConfig {
    fn default() -> Self {
        FlushConfig {
            interval_ms: default_interval(),
        }
    }
}

/// The host-side log in front of the tiers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// Roll to a new segment after this many bytes. Only sealed segments are retired once
    /// flushed or compacted, so smaller segments free log space sooner (default 64MiB).
    #[serde(default, deserialize_with = "de_size", serialize_with = "ser_size")]
    pub segment_bytes: Option<u64>,
}

/// Background compaction of the log (`[compaction]`; the server's `compactor.rs` applies
/// the bounds and the environment's overrides).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactionConfig {
    #[serde(default)]
    pub threshold: Option<f64>,
    #[serde(default)]
    pub rate_mib_s: Option<u64>,
    #[serde(default)]
    pub interval_ms: Option<u64>,
}

/// How flushed extents are grouped into blobs (*object shards*, "Object sharding across
/// storage layers"). The extents of `objects` objects that `servers` consecutive servers (one per node: ranks [k*g, (k+1)*g))
/// flush to one tier go into one shard blob, cut at `max_bytes`. With `servers = 1` each
/// server forms its own shards; with more, the group's lowest rank (its *leader*) pulls the
/// members' extents and puts each shard once (only on tiers every member reaches: `shared`,
/// `s3`). `strategy` names the object-sharding paper's Table II rows; `composite` picks its column.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardConfig {
    /// The strategy of Table II of the object-sharding paper. Basic objects: 1 = one shard
    /// per object across all servers (8 shards for VPIC's 8 variables), 2..5 = 1/2/4/8 objects per shard per server
    /// (8n, 4n, 2n, n shards on n nodes). Composite (`composite = true`; one pdcx object holds
    /// every variable): 1 = one shard across all servers, 2..5 = one shard per 1/2/4/8
    /// servers (n, n/2, n/4, n/8 shards).
    #[serde(default)]
    pub strategy: Option<u32>,
    /// Selects the composite column of Table II for `strategy` (default false: basic).
    #[serde(default)]
    pub composite: Option<bool>,
    /// Objects per shard; 0 keeps every extent in its own blob (best for migrating single
    /// regions and for S3 ranged reads of many small objects).
    #[serde(default)]
    pub objects: Option<u32>,
    /// Consecutive servers whose extents share a shard: a power of two up to 1024, or "all"
    /// (default 1: each server its own shards).
    #[serde(
        default,
        deserialize_with = "de_servers",
        serialize_with = "ser_servers"
    )]
    pub servers: Option<ShardServers>,
    /// Largest shard blob (default 256MiB).
    #[serde(default, deserialize_with = "de_size", serialize_with = "ser_size")]
    pub max_bytes: Option<u64>,
}

/// `[shard] servers`: how many consecutive servers' extents share one shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardServers {
    Count(u32),
    /// Every server of the deployment.
    All,
}

impl std::fmt::Display for ShardServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShardServers::Count(n) => write!(f, "{n}"),
            ShardServers::All => f.write_str("\"all\""),
        }
    }
}

/// Largest `[shard] servers` count.
pub const MAX_SHARD_SERVERS: u32 = 1024;

/// Default largest shard blob.
pub const DEFAULT_SHARD_BYTES: u64 = 256 << 20;

impl ShardConfig {
    /// (objects, servers) that `strategy` (with `composite`) stands for, if set.
    fn strategy_settings(&self) -> Option<(u32, ShardServers)> {
        let s = self.strategy?;
        let composite = self.composite.unwrap_or(false);
        Some(match (composite, s) {
            (_, 1) => (1, ShardServers::All),
            (false, 2..=5) => (1 << (s - 2), ShardServers::Count(1)),
            // A composite object is one pdcx object: one object per shard, 1/2/4/8 servers.
            (true, 2..=5) => (1, ShardServers::Count(1 << (s - 2))),
            // Refused by `validate`.
            _ => return None,
        })
    }

    /// Servers whose extents share a shard (`servers`, else from `strategy`, else 1).
    pub fn servers_setting(&self) -> ShardServers {
        self.servers
            .or_else(|| self.strategy_settings().map(|(_, s)| s))
            .unwrap_or(ShardServers::Count(1))
    }

    /// The group size in a deployment of `size` servers (1: each server its own shards).
    pub fn group_size(&self, size: u32) -> u32 {
        match self.servers_setting() {
            ShardServers::All => size.max(1),
            ShardServers::Count(n) => n.clamp(1, size.max(1)),
        }
    }

    /// Objects grouped per shard blob (0: no grouping), from `objects` or `strategy`; a
    /// group of several servers without either puts one object per shard.
    pub fn objects_per_shard(&self) -> u32 {
        match (self.objects, self.strategy_settings()) {
            (Some(n), _) => n,
            (None, Some((n, _))) => n,
            (None, None) if self.servers_setting() != ShardServers::Count(1) => 1,
            _ => 0,
        }
    }

    pub fn max_shard_bytes(&self) -> u64 {
        self.max_bytes.unwrap_or(DEFAULT_SHARD_BYTES)
    }

    fn validate(&self) -> Result<()> {
        let composite = self.composite.unwrap_or(false);
        let column = if composite { "composite" } else { "basic" };
        match self.strategy {
            None if self.composite.is_some() => {
                return Err(Error::invalid(
                    "shard.composite selects the column of the object-sharding paper's Table II for shard.strategy; set shard.strategy (1..5) too",
                ))
            }
            None | Some(1..=5) => {}
            Some(s) => {
                return Err(Error::invalid(format!(
                    "shard.strategy = {s}: the object-sharding paper's strategies are 1..5"
                )))
            }
        }
        if let ShardServers::Count(n) = self.servers_setting() {
            if n == 0 || n > MAX_SHARD_SERVERS || !n.is_power_of_two() {
                return Err(Error::invalid(format!(
                    "shard.servers = {n}: must be a power of two from 1 to {MAX_SHARD_SERVERS}, or \"all\""
                )));
            }
        }
        if let (Some(s), Some((objects, servers))) = (self.strategy, self.strategy_settings()) {
            if let Some(n) = self.objects.filter(|&n| n != objects) {
                return Err(Error::invalid(format!(
                    "shard.objects = {n} contradicts shard.strategy = {s} ({column}: {objects} object(s) per shard); set one of them"
                )));
            }
            if let Some(n) = self.servers.filter(|&n| n != servers) {
                return Err(Error::invalid(format!(
                    "shard.servers = {n} contradicts shard.strategy = {s} ({column}: servers = {servers}); set one of them"
                )));
            }
        }
        if self.objects.is_some_and(|n| n > 1 << 16) {
            return Err(Error::invalid("shard.objects must be at most 65536"));
        }
        if self.objects == Some(0) && self.servers_setting() != ShardServers::Count(1) {
            return Err(Error::invalid(format!(
                "shard.objects = 0 (every extent its own blob) contradicts shard.servers = {} (shards formed by several servers); set objects to 1 or more",
                self.servers_setting()
            )));
        }
        if self
            .max_bytes
            .is_some_and(|b| !((1 << 20)..=(5u64 << 40)).contains(&b))
        {
            return Err(Error::invalid(
                "shard.max_bytes must be between 1MiB and 5TiB (S3's largest object)",
            ));
        }
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ServersRepr {
    Int(i64),
    Text(String),
}

fn de_servers<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<ShardServers>, D::Error> {
    match Option::<ServersRepr>::deserialize(d)? {
        None => Ok(None),
        Some(ServersRepr::Text(s)) if s.trim().eq_ignore_ascii_case("all") => {
            Ok(Some(ShardServers::All))
        }
        Some(ServersRepr::Text(s)) => Err(serde::de::Error::custom(format!(
            "shard.servers = {s:?}: expected a power of two or \"all\""
        ))),
        // Range and power-of-two checks are in `validate`, with the other shard checks.
        Some(ServersRepr::Int(n)) => u32::try_from(n)
            .map(|n| Some(ShardServers::Count(n)))
            .map_err(|_| {
                serde::de::Error::custom(format!(
                    "shard.servers = {n}: must be a power of two from 1 to {MAX_SHARD_SERVERS}, or \"all\""
                ))
            }),
    }
}

fn ser_servers<S: serde::Serializer>(
    v: &Option<ShardServers>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match v {
        Some(ShardServers::Count(n)) => s.serialize_u32(*n),
        Some(ShardServers::All) => s.serialize_str("all"),
        None => s.serialize_none(),
    }
}

/// The Prometheus exporter (docs/OPERATIONS.md). `PDCX_METRICS_ADDR` and
/// `pdcx server --metrics` take precedence.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// `HOST:PORT` for rank 0; rank r listens on PORT + r (port 0: any free port).
    #[serde(default)]
    pub bind: Option<String>,
}

/// What client requests may name (docs/OPERATIONS.md, `access.*`): each entry checked by
/// its declared setting when the file is read. `PDCX_HOMES` / `PDCX_IMPORT_PATHS` take
/// precedence (the server resolves them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessConfig {
    /// Directories and S3 locations where byte streams may be sealed.
    #[serde(default)]
    pub homes: Vec<String>,
    /// Directories from which files may be imported by reference.
    #[serde(default)]
    pub import_paths: Vec<String>,
    /// Other users the deployment serves (names or uids).
    #[serde(default)]
    pub users: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentConfig {
    #[serde(default, rename = "tier")]
    pub tiers: Vec<TierConfig>,
    #[serde(default)]
    pub flush: FlushConfig,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub compaction: CompactionConfig,
    #[serde(default)]
    pub shard: ShardConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
    #[serde(default)]
    pub access: AccessConfig,
}

impl DeploymentConfig {
    /// Parses `text` (the TOML file), then applies overrides from `env`, then validates.
    pub fn parse(text: &str, env: impl IntoIterator<Item = (String, String)>) -> Result<Self> {
        let table: toml::Table =
            toml::from_str(text).map_err(|e| Error::invalid(format!("config: {e}")))?;
        check_declared(&table).map_err(|e| Error::invalid(format!("config: {e}")))?;
        let mut cfg: DeploymentConfig =
            toml::from_str(text).map_err(|e| Error::invalid(format!("config: {e}")))?;
        cfg.apply_env(env)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads the config file at `path` (a missing file means "no tiers": the log only) and
    /// applies the process environment.
    pub fn load(path: &Path) -> Result<Self> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(Error::io(&format!("reading {}", path.display()), &e)),
        };
        Self::parse(&text, std::env::vars())
            .map_err(|e| Error::new(e.kind, format!("{}: {}", path.display(), e.message)))
    }

    pub fn tier(&self, name: &str) -> Option<&TierConfig> {
        self.tiers.iter().find(|t| t.name == name)
    }

    fn apply_env(&mut self, env: impl IntoIterator<Item = (String, String)>) -> Result<()> {
        for (key, value) in env {
            let Some(rest) = key.strip_prefix("PDCX_TIER_") else {
                continue;
            };
            // Longest tier name first, so tier "S3_B" wins over tier "S3" for PDCX_TIER_S3_B_PATH.
            let mut tiers: Vec<&mut TierConfig> = self.tiers.iter_mut().collect();
            tiers.sort_by_key(|t| std::cmp::Reverse(t.name.len()));
            let hit = tiers.into_iter().find_map(|t| {
                let env_name = t.name.to_ascii_uppercase().replace('-', "_");
                rest.strip_prefix(&env_name)
                    .and_then(|f| f.strip_prefix('_'))
                    .map(|field| (t, field.to_ascii_lowercase()))
            });
            let Some((tier, field)) = hit else {
                return Err(Error::invalid(format!(
                    "{key}: no tier in the config matches (tiers: {})",
                    self.tiers
                        .iter()
                        .map(|t| t.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            };
            let bad = |why: String| Error::invalid(format!("{key}={value:?}: {why}"));
            match field.as_str() {
                "path" => tier.path = Some(PathBuf::from(&value)),
                "capacity" => tier.capacity = Some(parse_size(&value).map_err(|e| bad(e.message))?),
                "part_size" => {
                    tier.part_size = Some(parse_size(&value).map_err(|e| bad(e.message))?)
                }
                "endpoint" => tier.endpoint = Some(value.clone()),
                "bucket" => tier.bucket = Some(value.clone()),
                "region" => tier.region = Some(value.clone()),
                "prefix" => tier.prefix = Some(value.clone()),
                "concurrency" => tier.concurrency = Some(parse_count(&value).map_err(bad)?),
                "timeout_ms" => tier.timeout_ms = Some(parse_count(&value).map_err(bad)?),
                "max_mbps" => {
                    tier.max_mbps = Some(value.trim().parse().map_err(|_| {
                        bad("expected a number of MB/s".to_string())
                    })?)
                }
                "request_timeout_ms" => {
                    tier.request_timeout_ms = Some(parse_count(&value).map_err(bad)?)
                }
                other => {
                    return Err(bad(format!(
                        "unknown field {other:?} (path, capacity, part_size, endpoint, bucket, region, prefix, concurrency, timeout_ms, request_timeout_ms, max_mbps)"
                    )))
                }
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for t in &self.tiers {
            let bad = |why: &str| Err(Error::invalid(format!("tier {:?}: {why}", t.name)));
            if t.name.is_empty()
                || !t
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return bad("names use letters, digits, '-' and '_'");
            }
            if !seen.insert(t.name.as_str()) {
                return bad("defined twice");
            }
            match t.kind {
                TierKind::Local | TierKind::Shared if t.path.is_none() => {
                    return bad("a local or shared tier needs `path`")
                }
                TierKind::S3 if t.bucket.is_none() => return bad("an s3 tier needs `bucket`"),
                TierKind::Memory if t.path.is_some() => return bad("a memory tier has no path"),
                _ => {}
            }
            if t.kind != TierKind::S3
                && (t.endpoint.is_some()
                    || t.bucket.is_some()
                    || t.concurrency.is_some()
                    || t.timeout_ms.is_some()
                    || t.request_timeout_ms.is_some())
            {
                return bad(
                    "endpoint, bucket, concurrency and timeout_ms only apply to kind = \"s3\"",
                );
            }
            if let Some(ep) = &t.endpoint {
                if !(ep.starts_with("http://") || ep.starts_with("https://")) {
                    return bad("endpoint must be an http:// or https:// URL");
                }
            }
            if t.concurrency == Some(0) || t.concurrency.is_some_and(|c| c > 1024) {
                return bad("concurrency must be 1..=1024");
            }
            if t.max_mbps.is_some_and(|m| !(m.is_finite() && m > 0.0)) {
                return bad("max_mbps must be a positive number");
            }
            if t.max_mbps.is_some() && !matches!(t.kind, TierKind::Local | TierKind::Shared) {
                return bad("max_mbps only applies to local and shared tiers");
            }
            if t.request_timeout_ms == Some(0) {
                return bad("request_timeout_ms must be > 0");
            }
            if t.timeout_ms == Some(0) {
                return bad("timeout_ms must be > 0");
            }
            if let Some(p) = t.part_size {
                if p < 5 << 20 {
                    return bad("part_size must be at least 5MiB (S3's minimum part size)");
                }
                if p > 5 << 30 {
                    return bad("part_size must be at most 5GiB (S3's maximum part size)");
                }
            }
        }
        if self.log.segment_bytes.is_some_and(|b| b < 1 << 20) {
            return Err(Error::invalid("log.segment_bytes must be at least 1MiB"));
        }
        if self.flush.interval_ms == 0 {
            return Err(Error::invalid("flush.interval_ms must be > 0"));
        }
        self.shard.validate()
    }
}

/// Refuses the keys no setting declares (`pdcx_core::config`), naming each with the keys it
/// could have been, and checks every value against its declared type and bounds; what the
/// keys mean together (a tier's kind and its fields, the shard strategy) is checked by `validate`.
fn check_declared(table: &toml::Table) -> std::result::Result<(), config::ConfigError> {
    for (section, value) in table {
        match value {
            toml::Value::Table(t) => check_section(section, t)?,
            toml::Value::Array(items) => {
                for item in items {
                    if let toml::Value::Table(t) = item {
                        check_section(section, t)?;
                    }
                }
            }
            _ => {
                config::toml_setting(section)?;
            }
        }
    }
    Ok(())
}

fn check_section(section: &str, t: &toml::Table) -> std::result::Result<(), config::ConfigError> {
    for (k, v) in t {
        let setting = config::toml_setting(&format!("{section}.{k}"))?;
        // A list of places: every entry checked, named by its key in the file.
        if let (config::Ty::Places { .. }, toml::Value::Array(items)) = (setting.ty, v) {
            for item in items {
                if item
                    .as_str()
                    .is_none_or(|p| setting.parse_place(p).is_err())
                {
                    return Err(config::ConfigError::Malformed {
                        key: format!("{section}.{k}"),
                        value: item
                            .as_str()
                            .map_or_else(|| item.to_string(), str::to_string),
                        expected: setting.expected(),
                    });
                }
            }
            continue;
        }
        let text = match v {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Float(x) => x.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            // Tables, arrays and dates are refused by the deserializer with their key.
            _ => continue,
        };
        // Free-form fields (servers = "all", paths) are checked by the deserializer.
        // Named by its key in the file (the setting's message names its variable).
        setting.check(&text).map_err(|e| match e {
            config::ConfigError::Malformed {
                value, expected, ..
            } => config::ConfigError::Malformed {
                key: format!("{section}.{k}"),
                value,
                expected,
            },
            other => other,
        })?;
    }
    Ok(())
}

/// Every scalar of the config file as (dotted key, value): `tier.NAME.FIELD` for the fields of
/// tier NAME. For `pdcx server config`; the file is checked first.
pub fn file_values(text: &str) -> Result<Vec<(String, String)>> {
    DeploymentConfig::parse(text, std::iter::empty())?;
    let table: toml::Table =
        toml::from_str(text).map_err(|e| Error::invalid(format!("config: {e}")))?;
    let show = |v: &toml::Value| match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut out = Vec::new();
    for (section, value) in &table {
        match value {
            toml::Value::Table(t) => {
                out.extend(t.iter().map(|(k, v)| (format!("{section}.{k}"), show(v))))
            }
            toml::Value::Array(items) => {
                for t in items.iter().filter_map(toml::Value::as_table) {
                    let name = t.get("name").map(show).unwrap_or_default();
                    out.extend(
                        t.iter()
                            .filter(|(k, _)| k.as_str() != "name")
                            .map(|(k, v)| (format!("{section}.{name}.{k}"), show(v))),
                    );
                }
            }
            other => out.push((section.clone(), show(other))),
        }
    }
    Ok(out)
}

/// A plain non-negative integer (counts, milliseconds).
fn parse_count(s: &str) -> std::result::Result<u64, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("expected a whole number, got {s:?}"))
}

/// "4096", "64KiB", "1.5GiB", "10GB": binary (KiB, MiB, GiB, TiB) and decimal (KB, MB, GB, TB)
/// suffixes, case-insensitive.
pub fn parse_size(s: &str) -> Result<u64> {
    // One syntax for sizes everywhere: the declared settings' (`pdcx_core::config`).
    config::parse_size(s).ok_or_else(|| {
        Error::invalid(format!(
            "bad size {s:?}: expected a number with a unit such as 4096, 64KiB or 1GiB"
        ))
    })
}

#[derive(Deserialize)]
#[serde(untagged)]
enum SizeRepr {
    Int(u64),
    Text(String),
}

fn de_size<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<u64>, D::Error> {
    match Option::<SizeRepr>::deserialize(d)? {
        None => Ok(None),
        Some(SizeRepr::Int(n)) => Ok(Some(n)),
        Some(SizeRepr::Text(s)) => parse_size(&s).map(Some).map_err(serde::de::Error::custom),
    }
}

fn ser_size<S: serde::Serializer>(v: &Option<u64>, s: S) -> std::result::Result<S::Ok, S::Error> {
    match v {
        Some(n) => s.serialize_u64(*n),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
[[tier]]
name = "mem"
kind = "memory"
capacity = "64MiB"

[[tier]]
name = "ssd"
kind = "local"
path = "/tmp/ssd"
capacity = 1000

[[tier]]
name = "s3"
kind = "s3"
endpoint = "http://127.0.0.1:9000"
bucket = "pdcx"
timeout_ms = 2000
"#;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn shard_strategies_map_to_objects_per_shard() {
        let per = |toml: &str| {
            DeploymentConfig::parse(toml, env(&[])).map(|c| c.shard.objects_per_shard())
        };
        assert_eq!(per("").unwrap(), 0);
        for (s, n) in [(2, 1), (3, 2), (4, 4), (5, 8)] {
            assert_eq!(per(&format!("[shard]\nstrategy = {s}")).unwrap(), n);
        }
        assert_eq!(per("[shard]\nobjects = 3").unwrap(), 3);
        assert_eq!(per("[shard]\nobjects = 2\nstrategy = 3").unwrap(), 2);
        let err = |toml: &str| per(toml).unwrap_err().message;
        assert!(err("[shard]\nstrategy = 7")
            .contains("shard.strategy=\"7\": expected a whole number from 1 to 5"));
        assert!(err("[shard]\nstrategy = 3\nobjects = 4").contains("contradicts"));
        assert!(err("[shard]\nmax_bytes = \"1KiB\"").contains("max_bytes"));
        assert!(err("[shard]\nshards = 2").contains("shard.shards: unknown key"));
        let c = DeploymentConfig::parse("[shard]\nmax_bytes = \"8MiB\"", env(&[])).unwrap();
        assert_eq!(c.shard.max_shard_bytes(), 8 << 20);
    }

    #[test]
    fn shard_strategies_of_both_columns_map_to_objects_and_servers() {
        let cfg = |toml: &str| DeploymentConfig::parse(toml, env(&[])).map(|c| c.shard);
        let both = |toml: &str| {
            let c = cfg(toml).unwrap();
            (c.objects_per_shard(), c.servers_setting(), c.group_size(16))
        };
        use ShardServers::{All, Count};
        // No [shard]: every extent its own blob, each server alone.
        assert_eq!(both(""), (0, Count(1), 1));
        // Basic column: 1 = one object per shard across all servers; 2..5 unchanged.
        assert_eq!(both("[shard]\nstrategy = 1"), (1, All, 16));
        assert_eq!(both("[shard]\nstrategy = 4"), (4, Count(1), 1));
        // Composite column: one object per shard, 1/2/4/8 servers (all for 1).
        for (s, g) in [(2, 1), (3, 2), (4, 4), (5, 8)] {
            assert_eq!(
                both(&format!("[shard]\nstrategy = {s}\ncomposite = true")),
                (1, Count(g), g)
            );
        }
        assert_eq!(
            both("[shard]\nstrategy = 1\ncomposite = true"),
            (1, All, 16)
        );
        // servers alone: one object per shard; a group larger than the deployment is all.
        assert_eq!(both("[shard]\nservers = 2"), (1, Count(2), 2));
        assert_eq!(both("[shard]\nservers = \"all\""), (1, All, 16));
        assert_eq!(
            both("[shard]\nservers = 64\nobjects = 2"),
            (2, Count(64), 16)
        );
        // Explicit settings that agree with the strategy are fine.
        assert_eq!(
            both("[shard]\nstrategy = 3\ncomposite = true\nservers = 2\nobjects = 1"),
            (1, Count(2), 2)
        );
        let err = |toml: &str| cfg(toml).unwrap_err().message;
        for bad in ["0", "3", "2048", "-1", "\"some\""] {
            let e = err(&format!("[shard]\nservers = {bad}"));
            assert!(e.contains("shard.servers"), "{bad}: {e}");
        }
        let e = err("[shard]\nstrategy = 3\ncomposite = true\nservers = 4");
        assert!(
            e.contains("shard.servers = 4") && e.contains("shard.strategy = 3"),
            "{e}"
        );
        let e = err("[shard]\nstrategy = 1\nobjects = 2");
        assert!(
            e.contains("shard.objects = 2") && e.contains("shard.strategy = 1"),
            "{e}"
        );
        let e = err("[shard]\nstrategy = 2\nservers = 2");
        assert!(e.contains("contradicts"), "{e}");
        assert!(err("[shard]\ncomposite = true").contains("shard.strategy"));
        assert!(err("[shard]\nservers = 2\nobjects = 0").contains("objects = 0"));
        // Serialising keeps "all" a word and counts numbers.
        let c = cfg("[shard]\nservers = \"all\"").unwrap();
        let text = toml::to_string(&c).unwrap();
        assert!(text.contains("servers = \"all\""), "{text}");
    }

    #[test]
    fn metrics_section_is_optional_and_checked() {
        let c = DeploymentConfig::parse("", env(&[])).unwrap();
        assert_eq!(c.metrics.bind, None);
        let c = DeploymentConfig::parse("[metrics]\nbind = '127.0.0.1:9464'\n", env(&[])).unwrap();
        assert_eq!(c.metrics.bind.as_deref(), Some("127.0.0.1:9464"));
        let e = DeploymentConfig::parse("[metrics]\nport = 9464\n", env(&[])).unwrap_err();
        assert!(
            e.message
                .contains("metrics.port: unknown key in pdcx.toml; expected one of: metrics.bind"),
            "{}",
            e.message
        );
    }

    #[test]
    fn access_section_lists_places_and_names_a_bad_one() {
        let c = DeploymentConfig::parse(
            "[access]\nhomes = ['/data/home', 's3://bkt/runs']\nimport_paths = ['/data/in']\n",
            env(&[]),
        )
        .unwrap();
        assert_eq!(c.access.homes, ["/data/home", "s3://bkt/runs"]);
        assert_eq!(c.access.import_paths, ["/data/in"]);
        assert_eq!(
            DeploymentConfig::parse("", env(&[])).unwrap().access,
            AccessConfig::default()
        );
        for (text, key, value) in [
            (
                "[access]\nhomes = ['relative/dir']\n",
                "access.homes",
                "relative/dir",
            ),
            ("[access]\nhomes = ['/a/../b']\n", "access.homes", "/a/../b"),
            (
                "[access]\nimport_paths = ['s3://bkt']\n",
                "access.import_paths",
                "s3://bkt",
            ),
            ("[access]\nimport_paths = [7]\n", "access.import_paths", "7"),
        ] {
            let e = DeploymentConfig::parse(text, env(&[])).unwrap_err();
            assert!(
                e.message
                    .contains(&format!("{key}={value:?}: expected absolute directories")),
                "{text}: {}",
                e.message
            );
        }
    }

    #[test]
    fn parses_tiers_in_order_with_sizes() {
        let c = DeploymentConfig::parse(SAMPLE, env(&[])).unwrap();
        let names: Vec<_> = c.tiers.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["mem", "ssd", "s3"]);
        assert_eq!(c.tiers[0].capacity, Some(64 << 20));
        assert_eq!(c.tiers[1].capacity, Some(1000));
        assert_eq!(c.tiers[2].capacity, None);
        assert_eq!(c.tiers[2].timeout_ms, Some(2000));
        assert_eq!(c.tiers[2].concurrency, None);
        assert_eq!(c.flush.interval_ms, 200);
    }

    #[test]
    fn env_overrides_fields() {
        let c = DeploymentConfig::parse(
            SAMPLE,
            env(&[
                ("PDCX_TIER_S3_ENDPOINT", "http://10.0.0.5:9000"),
                ("PDCX_TIER_SSD_CAPACITY", "2GiB"),
                ("PDCX_TIER_S3_CONCURRENCY", "4"),
                ("PDCX_TIER_S3_TIMEOUT_MS", "750"),
                ("PDCX_TIER_S3_PART_SIZE", "16MiB"),
                ("UNRELATED", "x"),
            ]),
        )
        .unwrap();
        let s3 = c.tier("s3").unwrap();
        assert_eq!(s3.concurrency, Some(4));
        assert_eq!(s3.timeout_ms, Some(750));
        assert_eq!(s3.part_size, Some(16 << 20));
        assert_eq!(
            c.tier("s3").unwrap().endpoint.as_deref(),
            Some("http://10.0.0.5:9000")
        );
        assert_eq!(c.tier("ssd").unwrap().capacity, Some(2 << 30));
    }

    #[test]
    fn bad_configs_say_what_is_wrong() {
        let cases = [
            ("[[tier]]\nname='a'\nkind='local'\n", "needs `path`"),
            (
                "[[tier]]\nname='a'\nkind='tape'\n",
                "tier.kind=\"tape\": expected one of memory, local, shared, s3",
            ),
            (
                "[[tier]]\nname='a'\nkind='memory'\ncapacity='12 parsecs'\n",
                "tier.capacity=\"12 parsecs\": expected a size",
            ),
            (
                "[[tier]]\nname='a'\nkind='memory'\n[[tier]]\nname='a'\nkind='memory'\n",
                "defined twice",
            ),
            (
                "[[tier]]\nname='a'\nkind='s3'\nbucket='b'\npart_size='1MiB'\n",
                "at least 5MiB",
            ),
            (
                "[[tier]]\nname='a'\nkind='memory'\ncolour='red'\n",
                "tier.colour: unknown key in pdcx.toml; expected one of: tier.name, tier.kind",
            ),
            (
                "[[tier]]\nname='a'\nkind='local'\npath='/x'\nmax_mbps=0\n",
                "positive number",
            ),
            (
                "[[tier]]\nname='a'\nkind='memory'\nmax_mbps=10\n",
                "only applies to local",
            ),
            (
                "[[tier]]\nname='a'\nkind='s3'\nbucket='b'\nendpoint='127.0.0.1:9000'\n",
                "http:// or https://",
            ),
            (
                "[[tier]]\nname='a'\nkind='s3'\nbucket='b'\nconcurrency=0\n",
                "tier.concurrency=\"0\": expected a whole number of parts from 1 to 1024",
            ),
            (
                "[[tier]]\nname='a'\nkind='local'\npath='/x'\ntimeout_ms=5\n",
                "only apply to kind",
            ),
        ];
        for (text, want) in cases {
            let err = DeploymentConfig::parse(text, env(&[])).unwrap_err();
            assert!(err.message.contains(want), "{text:?}: {}", err.message);
        }
        let err =
            DeploymentConfig::parse(SAMPLE, env(&[("PDCX_TIER_NOPE_PATH", "/x")])).unwrap_err();
        assert!(err.message.contains("no tier"), "{}", err.message);
        let err =
            DeploymentConfig::parse(SAMPLE, env(&[("PDCX_TIER_SSD_COLOUR", "x")])).unwrap_err();
        assert!(err.message.contains("unknown field"), "{}", err.message);
        let err =
            DeploymentConfig::parse(SAMPLE, env(&[("PDCX_TIER_S3_TIMEOUT_MS", "5s")])).unwrap_err();
        assert!(err.message.contains("whole number"), "{}", err.message);
    }

    #[test]
    fn unknown_keys_and_malformed_values_name_the_key() {
        let err = |text: &str| DeploymentConfig::parse(text, env(&[])).unwrap_err().message;
        assert_eq!(
            err("[flush]\nintervall_ms = 5\n"),
            "config: flush.intervall_ms: unknown key in pdcx.toml; expected one of: flush.interval_ms"
        );
        let e = err("[cache]\nsize = 5\n");
        assert!(
            e.contains("cache.size: unknown key") && e.contains("shard"),
            "{e}"
        );
        let e = err("verbose = true\n");
        assert!(e.contains("verbose: unknown key"), "{e}");
        assert_eq!(
            err("[flush]\ninterval_ms = \"soon\"\n"),
            "config: flush.interval_ms=\"soon\": expected a whole number of milliseconds of at least 1"
        );
        assert!(err("[shard]\ncomposite = 1\n")
            .contains("shard.composite=\"1\": expected true or false"));
        let values = file_values(SAMPLE).unwrap();
        assert!(
            values.contains(&("tier.s3.timeout_ms".into(), "2000".into())),
            "{values:?}"
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("1.5KiB").unwrap(), 1536);
        assert_eq!(parse_size("2gib").unwrap(), 2 << 30);
        assert_eq!(parse_size("10MB").unwrap(), 10_000_000);
        assert!(parse_size("").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("GiB").is_err());
    }

    #[test]
    fn missing_file_means_no_tiers() {
        let dir = tempfile::tempdir().unwrap();
        let c = DeploymentConfig::load(&dir.path().join("pdcx.toml")).unwrap();
        assert!(c.tiers.is_empty());
    }
}
