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
//! ```
//!
//! Any tier field can be overridden with `PDCX_TIER_<NAME>_<FIELD>` (name upper-cased, `-` as
//! `_`), e.g. `PDCX_TIER_S3_ENDPOINT=http://10.0.0.5:9000` or `PDCX_TIER_SSD_CAPACITY=50GiB`.

use pdcx_core::{Error, Result};
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
    /// flushed, so smaller segments free log space sooner (default 1GiB).
    #[serde(default, deserialize_with = "de_size", serialize_with = "ser_size")]
    pub segment_bytes: Option<u64>,
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
}

impl DeploymentConfig {
    /// Parses `text` (the TOML file), then applies overrides from `env`, then validates.
    pub fn parse(text: &str, env: impl IntoIterator<Item = (String, String)>) -> Result<Self> {
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
        Ok(())
    }
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
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => {
            return Err(Error::invalid(format!(
                "bad size {s:?}: unknown unit {unit:?}"
            )))
        }
    };
    let n: f64 = num.parse().map_err(|_| {
        Error::invalid(format!(
            "bad size {s:?}: expected a number with a unit like 4GiB"
        ))
    })?;
    let bytes = n * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(Error::invalid(format!("bad size {s:?}: out of range")));
    }
    Ok(bytes as u64)
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
            ("[[tier]]\nname='a'\nkind='tape'\n", "unknown variant"),
            (
                "[[tier]]\nname='a'\nkind='memory'\ncapacity='12 parsecs'\n",
                "unknown unit",
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
                "unknown field",
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
                "concurrency must be",
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
