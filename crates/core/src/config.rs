//! Every pdcx setting, declared once: its environment variable, its `pdcx.toml` key and its
//! `pdcx server` flag (where it has them), type, default, unit, bounds and a one-line meaning.
//!
//! Readers never call `std::env::var` for a `PDCX_*` variable themselves: they ask the
//! setting ([`Setting::count`], [`Setting::switch`], [`Setting::text`], ...), so a value is
//! parsed, bounded and reported the same way wherever it is read, `pdcx server config` can
//! say where each effective value came from, and docs/OPERATIONS.md's table is generated from
//! [`ALL`] (a test fails when they disagree). `PDCX_*` variables that are not declared here
//! are reported by [`unknown_env`]; `pdcx.toml` keys that are not are refused by the config
//! loader ([`toml_setting`]).
//!
//! The environment is read when a setting is asked for; the libraries loaded with
//! `LD_PRELOAD` (MPI-IO, CFITSIO) ask at load time, so their settings must be in the
//! environment of the program they are preloaded into.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Mutex;

/// What a setting's value is, which decides how it is parsed and what an error says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// A whole number of `unit`.
    Count,
    /// Bytes: a number, or a number with a unit (`64KiB`, `1.5GiB`, `10GB`).
    Size,
    /// On or off: `1`/`0`, `on`/`off`, `true`/`false`, `yes`/`no` (any case).
    Switch,
    /// On when set to anything but `0` (debugging output).
    Flag,
    /// `true` or `false` (a `pdcx.toml` boolean).
    Bool,
    /// A number with a fraction.
    Number,
    /// One of these words.
    Words(&'static [&'static str]),
    /// Text whose syntax the one-line meaning gives (the reader checks it).
    Text,
    /// A file system path.
    Path,
    /// Places, comma-separated in the environment (a list in `pdcx.toml`): absolute
    /// directories, and with `s3` also `s3://BUCKET` or `s3://BUCKET/PREFIX` (see
    /// [`Setting::parse_place`]).
    Places { s3: bool },
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Count => "count",
            Ty::Size => "size",
            Ty::Switch => "switch",
            Ty::Flag => "flag",
            Ty::Bool => "bool",
            Ty::Number => "number",
            Ty::Words(_) => "word",
            Ty::Text => "text",
            Ty::Path => "path",
            Ty::Places { s3: false } => "directories",
            Ty::Places { s3: true } => "directories, s3 URLs",
        }
    }
}

/// Which processes read a setting (and so which check it at start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// `pdcx server` (and the server embedded in a Python process).
    Server,
    /// Servers and clients both (the transport).
    Both,
    /// Every client: the `pdcx` command, Python, the C API.
    Client,
    /// The libraries preloaded into programs (`libpdcx_mpiio.so`, `libpdcx_fits.so`).
    Library,
    /// The `pdcx` command only.
    Cli,
    /// The test and benchmark harnesses only (declared so they are not "unknown").
    Test,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Server => "server",
            Scope::Both => "server, client",
            Scope::Client => "client",
            Scope::Library => "preload library",
            Scope::Cli => "pdcx command",
            Scope::Test => "tests",
        }
    }
}

/// One setting. `default` is what the reader uses when nothing sets it, written as a value
/// of the setting's type (`""`: unset, the meaning says what that does).
#[derive(Debug)]
pub struct Setting {
    /// Canonical name: the `pdcx.toml` key where there is one.
    pub name: &'static str,
    pub env: Option<&'static str>,
    pub toml: Option<&'static str>,
    pub flag: Option<&'static str>,
    pub ty: Ty,
    pub default: &'static str,
    pub unit: &'static str,
    pub min: Option<u64>,
    pub max: Option<u64>,
    /// Values above `max` are capped rather than refused.
    pub cap: bool,
    pub scope: Scope,
    pub doc: &'static str,
}

/// A value that is not what its setting expects, or a key that is no setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{key}={value:?}: expected {expected}")]
    Malformed {
        key: String,
        value: String,
        expected: String,
    },
    #[error("{key}: unknown key in pdcx.toml; expected one of: {expected}")]
    UnknownKey { key: String, expected: String },
}

impl From<ConfigError> for crate::Error {
    fn from(e: ConfigError) -> Self {
        crate::Error::invalid(e.to_string())
    }
}

const FALSE_WORDS: [&str; 4] = ["0", "off", "false", "no"];
const TRUE_WORDS: [&str; 4] = ["1", "on", "true", "yes"];

impl Setting {
    /// The key a message names: the environment variable, else the `pdcx.toml` key.
    pub fn key(&self) -> &'static str {
        self.env.or(self.toml).unwrap_or(self.name)
    }

    /// The environment's value, `None` when unset or blank.
    pub fn raw(&self) -> Option<String> {
        self.os().map(|v| v.to_string_lossy().into_owned())
    }

    /// The environment's value as the OS gave it (paths need not be UTF-8); `None` when unset
    /// or blank.
    pub fn os(&self) -> Option<OsString> {
        let v = std::env::var_os(self.env?)?;
        (!v.to_string_lossy().trim().is_empty()).then_some(v)
    }

    /// What a value must look like, for error messages and the docs.
    pub fn expected(&self) -> String {
        let mut s = match self.ty {
            Ty::Count if self.unit.is_empty() => "a whole number".to_string(),
            Ty::Count => format!("a whole number of {}", self.unit),
            Ty::Size => "a size such as 4096, 64KiB or 1GiB".into(),
            Ty::Switch => "on or off (1/0, on/off, true/false, yes/no)".into(),
            Ty::Flag => "0 (off) or anything else (on)".into(),
            Ty::Bool => "true or false".into(),
            Ty::Number => "a number".into(),
            Ty::Words(w) => format!("one of {}", w.join(", ")),
            Ty::Text => "text".into(),
            Ty::Path => "a path".into(),
            Ty::Places { s3: false } => "absolute directories, comma-separated".into(),
            Ty::Places { s3: true } => {
                "absolute directories or s3://BUCKET[/PREFIX], comma-separated".into()
            }
        };
        match (self.min, self.max) {
            (Some(lo), Some(hi)) => {
                let _ = write!(s, " from {lo} to {hi}");
            }
            (Some(lo), None) => {
                let _ = write!(s, " of at least {lo}");
            }
            (None, Some(hi)) => {
                let _ = write!(s, " of at most {hi}");
            }
            (None, None) => {}
        }
        s
    }

    fn malformed(&self, value: &str) -> ConfigError {
        ConfigError::Malformed {
            key: self.key().to_string(),
            value: value.to_string(),
            expected: self.expected(),
        }
    }

    /// Parses `value` as a whole number within the bounds (above `max` capped if `cap`).
    pub fn parse_count(&self, value: &str) -> Result<u64, ConfigError> {
        let n: u64 = value.trim().parse().map_err(|_| self.malformed(value))?;
        if self.min.is_some_and(|lo| n < lo) {
            return Err(self.malformed(value));
        }
        match self.max {
            Some(hi) if n > hi && self.cap => Ok(hi),
            Some(hi) if n > hi => Err(self.malformed(value)),
            _ => Ok(n),
        }
    }

    /// Parses `value` as a switch.
    pub fn parse_switch(&self, value: &str) -> Result<bool, ConfigError> {
        let v = value.trim().to_ascii_lowercase();
        if FALSE_WORDS.contains(&v.as_str()) {
            Ok(false)
        } else if TRUE_WORDS.contains(&v.as_str()) {
            Ok(true)
        } else {
            Err(self.malformed(value))
        }
    }

    /// Checks `value` against the setting's type and bounds.
    pub fn check(&self, value: &str) -> Result<(), ConfigError> {
        match self.ty {
            Ty::Count => self.parse_count(value).map(drop),
            Ty::Switch => self.parse_switch(value).map(drop),
            Ty::Bool => match value.trim() {
                "true" | "false" => Ok(()),
                _ => Err(self.malformed(value)),
            },
            Ty::Number => value
                .trim()
                .parse::<f64>()
                .map(drop)
                .map_err(|_| self.malformed(value)),
            Ty::Size => parse_size(value).map(drop).ok_or(self.malformed(value)),
            Ty::Words(w) => {
                if w.contains(&value.trim()) {
                    Ok(())
                } else {
                    Err(self.malformed(value))
                }
            }
            Ty::Places { .. } => self.parse_places(value).map(drop),
            Ty::Flag | Ty::Text | Ty::Path => Ok(()),
        }
    }

    /// Parses a comma-separated list of places ([`Ty::Places`]), each normalized by
    /// [`Setting::parse_place`]; blank items are skipped.
    pub fn parse_places(&self, value: &str) -> Result<Vec<String>, ConfigError> {
        value
            .split(',')
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(|v| self.parse_place(v))
            .collect()
    }

    /// One place of a [`Ty::Places`] setting, normalized (no trailing `/`): an absolute
    /// directory without `..`, or (where the setting takes S3) `s3://BUCKET` or
    /// `s3://BUCKET/PREFIX` with a bucket of letters, digits, `.`, `-`, `_` and a prefix of
    /// non-empty `/`-separated parts other than `.` and `..`. A malformed one names the key.
    pub fn parse_place(&self, value: &str) -> Result<String, ConfigError> {
        let v = value.trim();
        let bad = || self.malformed(value);
        if v.contains('\0') {
            return Err(bad());
        }
        let dot_part = |p: &str| p == "." || p == "..";
        if let Some(rest) = v.strip_prefix("s3://") {
            if !matches!(self.ty, Ty::Places { s3: true }) {
                return Err(bad());
            }
            let rest = rest.trim_end_matches('/');
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let bucket_ok = !bucket.is_empty()
                && bucket
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
            if !bucket_ok
                || (!prefix.is_empty() && prefix.split('/').any(|p| p.is_empty() || dot_part(p)))
            {
                return Err(bad());
            }
            return Ok(format!("s3://{rest}"));
        }
        if !v.starts_with('/') || v.split('/').any(dot_part) {
            return Err(bad());
        }
        let trimmed = v.trim_end_matches('/');
        Ok(if trimmed.is_empty() { "/" } else { trimmed }.to_string())
    }

    /// The places from the environment; `None` when unset or blank.
    pub fn places(&self) -> Result<Option<Vec<String>>, ConfigError> {
        self.raw().map(|v| self.parse_places(&v)).transpose()
    }

    /// The whole number from the environment, else the default (`None` if it has none).
    pub fn count_opt(&self) -> Result<Option<u64>, ConfigError> {
        match self.raw() {
            Some(v) => self.parse_count(&v).map(Some),
            None if self.default.is_empty() => Ok(None),
            None => self.parse_count(self.default).map(Some),
        }
    }

    /// The whole number from the environment, else the default.
    pub fn count(&self) -> Result<u64, ConfigError> {
        self.count_opt()
            .map(|n| n.unwrap_or_else(|| self.default_count()))
    }

    /// The declared default as a number (0 if the declaration has none; a unit test checks
    /// that every count's default parses).
    pub fn default_count(&self) -> u64 {
        self.default.parse().unwrap_or(0)
    }

    /// The switch from the environment, else the default.
    pub fn switch(&self) -> Result<bool, ConfigError> {
        match self.raw() {
            Some(v) => self.parse_switch(&v),
            None => Ok(self.default_switch()),
        }
    }

    fn default_switch(&self) -> bool {
        TRUE_WORDS.contains(&self.default)
    }

    /// [`Setting::count`], or the default after saying once on stderr what is wrong: for
    /// readers that cannot fail (a library loaded into someone else's program).
    pub fn count_or_default(&self) -> u64 {
        self.count()
            .unwrap_or_else(|e| self.warn_default(e, self.default_count()))
    }

    /// The size (the syntax of [`Ty::Size`]) from the environment, else the default.
    pub fn size(&self) -> Result<u64, ConfigError> {
        self.parse_size_bounded(self.raw().as_deref().unwrap_or(self.default))
    }

    /// Parses `value` as a size within the setting's bounds.
    pub fn parse_size_bounded(&self, value: &str) -> Result<u64, ConfigError> {
        let n = parse_size(value).ok_or_else(|| self.malformed(value))?;
        match self.max {
            Some(hi) if n > hi => Err(self.malformed(value)),
            _ => Ok(n),
        }
    }

    /// The word (of [`Ty::Words`]) from the environment, else the default.
    pub fn word(&self) -> Result<&'static str, ConfigError> {
        let Ty::Words(words) = self.ty else {
            return Ok(self.default);
        };
        match self.raw() {
            None => Ok(self.default),
            Some(v) => words
                .iter()
                .find(|w| **w == v.trim())
                .copied()
                .ok_or_else(|| self.malformed(&v)),
        }
    }

    /// [`Setting::switch`], or the default after saying once on stderr what is wrong.
    pub fn switch_or_default(&self) -> bool {
        self.switch()
            .unwrap_or_else(|e| self.warn_default(e, self.default_switch()))
    }

    fn warn_default<T: std::fmt::Debug>(&self, e: ConfigError, default: T) -> T {
        static WARNED: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
        let mut warned = WARNED.lock().unwrap_or_else(|p| p.into_inner());
        if warned.get_or_insert_with(HashSet::new).insert(self.name) {
            eprintln!("pdcx: {e}; using the default {}", self.shown_default());
        }
        default
    }

    /// A debug flag: on when set to anything but `0`.
    pub fn flag_on(&self) -> bool {
        self.raw().is_some_and(|v| v.trim() != "0")
    }

    /// The environment's text, `None` when unset or blank.
    pub fn text(&self) -> Option<String> {
        self.raw()
    }

    /// The environment's path, `None` when unset or blank.
    pub fn path(&self) -> Option<PathBuf> {
        self.os().map(PathBuf::from)
    }

    /// The default as the docs show it.
    pub fn shown_default(&self) -> &'static str {
        if self.default.is_empty() {
            "unset"
        } else {
            self.default
        }
    }

    /// The bounds as the docs show them.
    pub fn bounds(&self) -> String {
        let cap = if self.cap { " (larger: capped)" } else { "" };
        match (self.min, self.max) {
            (Some(lo), Some(hi)) => format!("{lo}..={hi}{cap}"),
            (Some(lo), None) => format!(">= {lo}"),
            (None, Some(hi)) => format!("<= {hi}{cap}"),
            (None, None) => String::new(),
        }
    }
}

/// "4096", "64KiB", "1.5GiB", "10GB" in bytes (the syntax of [`Ty::Size`]).
pub fn parse_size(s: &str) -> Option<u64> {
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
        _ => return None,
    };
    let bytes = num.parse::<f64>().ok()? * mult as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes <= u64::MAX as f64).then_some(bytes as u64)
}

/// A `Setting` with everything optional left out.
const BASE: Setting = Setting {
    name: "",
    env: None,
    toml: None,
    flag: None,
    ty: Ty::Text,
    default: "",
    unit: "",
    min: None,
    max: None,
    cap: false,
    scope: Scope::Server,
    doc: "",
};

macro_rules! settings {
    ($($id:ident { $($f:ident: $v:expr),* $(,)? })*) => {
        $(pub static $id: Setting = Setting { $($f: $v,)* ..BASE };)*
        /// Every setting, in the order of the docs' table.
        pub static ALL: &[&Setting] = &[$(&$id),*];
    };
}

const TIER_KINDS: &[&str] = &["memory", "local", "shared", "s3"];
const MPIIO_MODES: &[&str] = &["log", "redirect", "off"];
const GROUP_ACCESS_MODES: &[&str] = &["none", "read"];
const WIRE_MODES: &[&str] = &["auto", "integrity", "encrypt", "plain"];

settings! {
    // ---- where the deployment is
    ROOT { name: "root", env: Some("PDCX_ROOT"), flag: Some("--root"), ty: Ty::Path,
        scope: Scope::Client, doc: "Deployment root directory, shared by the servers and every client." }
    CONFIG { name: "config", env: Some("PDCX_CONFIG"), ty: Ty::Path, default: "ROOT/pdcx.toml",
        doc: "The deployment config file (tiers, flush, log, shard, metrics)." }
    NODE { name: "node", env: Some("PDCX_NODE"), flag: Some("--node"), scope: Scope::Both,
        doc: "This process's node name (unset: the host name); clients send data to their node's server." }
    // ---- server process
    BIND { name: "bind", flag: Some("--bind"), default: "127.0.0.1:0",
        doc: "Address a foreground `pdcx server` listens on; port 0 picks a free port." }
    CACHE_MB { name: "cache_mb", flag: Some("--cache-mb"), ty: Ty::Count, default: "256", unit: "MiB",
        doc: "Data cache size of one server." }
    AGG_WINDOW_US { name: "agg_window_us", env: Some("PDCX_AGG_WINDOW_US"), flag: Some("--agg-window-us"),
        ty: Ty::Count, default: "1000", unit: "microseconds",
        doc: "How long the first of identical lookups a server forwards waits for others to share it (0: no wait)." }
    LAZY_FLUSH_MS { name: "lazy_flush_ms", env: Some("PDCX_LAZY_FLUSH_MS"), flag: Some("--lazy-flush-ms"),
        ty: Ty::Count, default: "100", unit: "milliseconds", min: Some(1),
        doc: "How often relaxed-consistency writes held by a server are registered with their owners." }
    LOG { name: "log", env: Some("PDCX_LOG"), default: "info",
        doc: "Log filter in EnvFilter syntax (`warn`, `info,pdcx_tiers=debug`); malformed: reported, default used." }
    METRICS { name: "metrics.bind", env: Some("PDCX_METRICS_ADDR"), toml: Some("metrics.bind"), flag: Some("--metrics"),
        doc: "Prometheus exporter address HOST:PORT for rank 0 (rank r: PORT + r); unset: off." }
    MAX_CONNECTIONS { name: "max_connections", env: Some("PDCX_MAX_CONNECTIONS"), ty: Ty::Count,
        default: "4096", min: Some(1), doc: "Connections one server accepts at once." }
    WRITE_TIMEOUT_S { name: "write_timeout_s", env: Some("PDCX_WRITE_TIMEOUT_S"), ty: Ty::Count, default: "60",
        unit: "seconds", doc: "Longest a reply may take to write to a client that does not read (0: no limit)." }
    FRAME_TIMEOUT_S { name: "frame_timeout_s", env: Some("PDCX_FRAME_TIMEOUT_S"), ty: Ty::Count, default: "60",
        unit: "seconds", doc: "Longest a request may take to arrive once its first byte came (0: no limit)." }
    HANDSHAKE_TIMEOUT_S { name: "handshake_timeout_s", env: Some("PDCX_HANDSHAKE_TIMEOUT_S"), ty: Ty::Count, default: "10",
        unit: "seconds", min: Some(1), max: Some(600), doc: "Longest a connection may take to authenticate in all, however slowly its bytes come." }
    MAX_HANDSHAKES { name: "max_handshakes", env: Some("PDCX_MAX_HANDSHAKES"), ty: Ty::Count, default: "1024",
        unit: "connections", min: Some(1), max: Some(65536), doc: "Connections authenticating at once; past it, an unverified one past its grace is closed to make room (docs/SECURITY.md)." }
    GROUP_ACCESS { name: "group_access", env: Some("PDCX_GROUP_ACCESS"), ty: Ty::Words(GROUP_ACCESS_MODES), default: "none",
        doc: "Who besides the deployment's user may read its files: none (0600/0700) or read (its group too: 0640/0750); nobody else may ever write them." }
    USERS { name: "access.users", env: Some("PDCX_USERS"), toml: Some("access.users"),
        doc: "Other users this deployment serves, names or uids; each reaches only its own objects and what their owners share (`pdcx share`); unset: only the deployment's user. Environment: comma-separated; pdcx.toml: a list under [access]." }
    IDLE_TIMEOUT_S { name: "idle_timeout_s", env: Some("PDCX_IDLE_TIMEOUT_S"), ty: Ty::Count, default: "0",
        unit: "seconds", doc: "Idle connections are closed after this long (0: never)." }
    MAX_PAYLOAD_MB { name: "max_payload_mb", env: Some("PDCX_MAX_PAYLOAD_MB"), ty: Ty::Count, default: "4096",
        unit: "MiB", min: Some(1), doc: "Largest bulk payload of one request frame." }
    KEEP_BUFFERS_MB { name: "keep_buffers_mb", env: Some("PDCX_KEEP_BUFFERS_MB"), ty: Ty::Count, default: "1024",
        unit: "MiB", doc: "Buffer memory a server's idle connections keep for reuse, all together." }
    CHECKPOINT_MS { name: "checkpoint_ms", env: Some("PDCX_CHECKPOINT_MS"), ty: Ty::Count, default: "1000",
        unit: "milliseconds", min: Some(1), doc: "How often committed writes are checkpointed (bounds the log replayed at recovery)." }
    REF_PROMOTE_READS { name: "ref_promote_reads", env: Some("PDCX_REF_PROMOTE_READS"), ty: Ty::Count,
        default: "4", unit: "reads", max: Some(u32::MAX as u64),
        doc: "Reads of an object imported by reference after which it is copied into the log (0: never)." }
    HOME_DEFER_MS { name: "home_defer_ms", env: Some("PDCX_HOME_DEFER_MS"), ty: Ty::Count, default: "1000",
        unit: "milliseconds", max: Some(60_000), cap: true,
        doc: "How long copies of `pdcx run` files to their home wait for writers to pause." }
    HOME_KEEP_LOG { name: "home_keep_log", env: Some("PDCX_HOME_KEEP_LOG"), ty: Ty::Switch, default: "off",
        doc: "Keep a `pdcx run` file's bytes in the log after its home copy is complete." }
    HOME_JOBS { name: "home_jobs", env: Some("PDCX_HOME_JOBS"), ty: Ty::Count, default: "4", unit: "files",
        max: Some(64), cap: true, doc: "Files copied to their homes at once (0: the default)." }
    HOME_PART_JOBS { name: "home_part_jobs", env: Some("PDCX_HOME_PART_JOBS"), ty: Ty::Count, default: "8",
        unit: "parts", max: Some(64), cap: true, doc: "Parts of one home upload in flight at once (0: the default)." }
    CRASH_AT { name: "crash_at", env: Some("PDCX_CRASH_AT"),
        doc: "Crash-test builds: kill the server at crash point NAME (NAME:N: its Nth hit)." }
    // ---- what clients may name: least privilege on a shared machine
    HOMES { name: "access.homes", env: Some("PDCX_HOMES"), toml: Some("access.homes"), ty: Ty::Places { s3: true },
        doc: "Where clients may have byte streams (`pdcx run` files) copied: absolute directories, s3://BUCKET or s3://BUCKET/PREFIX; listed: every caller is held to them; unset: only the deployment's user may name a home, any home. Environment: comma-separated; pdcx.toml: a list under [access]." }
    IMPORT_PATHS { name: "access.import_paths", env: Some("PDCX_IMPORT_PATHS"), toml: Some("access.import_paths"), ty: Ty::Places { s3: false },
        doc: "Directories whose files clients may import by reference (the server reads them); listed: every caller is held to them; unset: only the deployment's user may import by reference, from any file. Environment: comma-separated; pdcx.toml: a list under [access]." }
    // ---- transport, both sides
    UNIX { name: "unix", env: Some("PDCX_UNIX"), ty: Ty::Switch, default: "on", scope: Scope::Both,
        doc: "Use Unix-domain sockets between processes of one node." }
    SPIN_US { name: "spin_us", env: Some("PDCX_SPIN_US"), ty: Ty::Count, default: "50", unit: "microseconds",
        scope: Scope::Both, doc: "How long a thread polls a Unix socket before sleeping on it (0: no polling)." }
    REPLY_SPIN_US { name: "reply_spin_us", env: Some("PDCX_REPLY_SPIN_US"), ty: Ty::Count, default: "200",
        unit: "microseconds", scope: Scope::Both, doc: "How long a caller polls for its reply before sleeping (0: no polling)." }
    WIRE { name: "wire", env: Some("PDCX_WIRE"), ty: Ty::Words(WIRE_MODES), default: "auto", scope: Scope::Both,
        doc: "Protection of TCP frames after the handshake: auto (encrypted and authenticated between nodes, plain over loopback), integrity (always authenticated), encrypt (always encrypted and authenticated) or plain (never: only on a network you trust); the stronger of the two sides' settings applies." }
    // ---- clients
    USER_KEY { name: "user_key", env: Some("PDCX_USER_KEY"), ty: Ty::Path, scope: Scope::Client,
        doc: "File holding this user's key for a deployment of another user (`pdcx server user-key`); needed between nodes, where the kernel cannot say who connects." }
    SHM { name: "shm", env: Some("PDCX_SHM"), ty: Ty::Switch, default: "on", scope: Scope::Client,
        doc: "Move bulk data through shared memory with a same-node server." }
    DIRECT_READ { name: "direct_read", env: Some("PDCX_DIRECT_READ"), ty: Ty::Switch, default: "on",
        scope: Scope::Client, doc: "Read a same-node server's log segments directly." }
    DIRECT_WRITE { name: "direct_write", env: Some("PDCX_DIRECT_WRITE"), ty: Ty::Switch, default: "on",
        scope: Scope::Client, doc: "Write into a same-node server's log segments directly." }
    AGGREGATE { name: "aggregate", env: Some("PDCX_AGGREGATE"), ty: Ty::Switch, default: "on",
        scope: Scope::Client, doc: "Send metadata lookups through the node's server, which shares identical ones." }
    PLACEMENT { name: "placement", env: Some("PDCX_PLACEMENT"), default: "region-local", scope: Scope::Client,
        doc: "Where new objects' regions go: object-static, region-static, region-dynamic or region-local." }
    SMALL_WRITE_TO_OWNER { name: "small_write_to_owner", env: Some("PDCX_SMALL_WRITE_TO_OWNER"), ty: Ty::Size,
        default: "256KiB", unit: "bytes", max: Some(1 << 30), scope: Scope::Client,
        doc: "Region-local: a write smaller than this goes to its object's owner when the owner is on this node (0: never)." }
    DEBUG { name: "debug", env: Some("PDCX_DEBUG"), ty: Ty::Flag, default: "0", scope: Scope::Client,
        doc: "Print why fast paths (shared memory, direct I/O) are not used." }
    SITE { name: "site", env: Some("PDCX_SITE"), scope: Scope::Client,
        doc: "This site's name in provenance left at a meeting point (unset: the host name; C API: `site`)." }
    FILE_CACHE_MB { name: "file_cache_mb", env: Some("PDCX_FILE_CACHE_MB"), ty: Ty::Count, default: "64",
        unit: "MiB", scope: Scope::Client, doc: "Memory for read-ahead and written-but-unclosed file bytes." }
    FILE_AGGREGATE { name: "file_aggregate", env: Some("PDCX_FILE_AGGREGATE"), ty: Ty::Switch, default: "on",
        scope: Scope::Client, doc: "Keep file writes on the client until close (off: commit every write)." }
    FILE_PREFETCH { name: "file_prefetch", env: Some("PDCX_FILE_PREFETCH"), default: "adaptive",
        scope: Scope::Client, doc: "File read-ahead: off, adaptive, or a window size such as 256K or 4M." }
    // ---- preloaded libraries (read when the library loads)
    MPIIO_PREFIX { name: "mpiio_prefix", env: Some("PDCX_MPIIO_PREFIX"), ty: Ty::Path, scope: Scope::Library,
        doc: "MPI-IO files under this absolute directory go through pdcx (set by `pdcx run`)." }
    MPIIO_HOME { name: "mpiio_home", env: Some("PDCX_MPIIO_HOME"), scope: Scope::Library,
        doc: "Where finished MPI-IO files are copied: an absolute directory or s3://BUCKET/PREFIX." }
    MPIIO_MODE { name: "mpiio_mode", env: Some("PDCX_MPIIO_MODE"), ty: Ty::Words(MPIIO_MODES), default: "log",
        scope: Scope::Library, doc: "log: through pdcx; redirect: straight to the home; off: untouched." }
    MPIIO_WRITE_THROUGH { name: "mpiio_write_through", env: Some("PDCX_MPIIO_WRITE_THROUGH"), ty: Ty::Switch,
        default: "on", scope: Scope::Library,
        doc: "Also write a logged file's bytes at its path under the prefix (not synced), so every process sees them after close; off: only the home gets them." }
    MPIIO_DEBUG { name: "mpiio_debug", env: Some("PDCX_MPIIO_DEBUG"), ty: Ty::Flag, default: "0",
        scope: Scope::Library, doc: "Print what the MPI-IO library decides for each file." }
    FITS { name: "fits", env: Some("PDCX_FITS"), ty: Ty::Switch, default: "on", scope: Scope::Library,
        doc: "Register the pdcx:// CFITSIO driver when libpdcx_fits.so loads." }
    FITS_STATS { name: "fits_stats", env: Some("PDCX_FITS_STATS"), ty: Ty::Path, scope: Scope::Library,
        doc: "Append one JSON line of call counts to this file at exit." }
    // ---- the pdcx command
    PYTHON { name: "python", env: Some("PDCX_PYTHON"), default: "python3", scope: Scope::Cli,
        doc: "Interpreter `pdcx import`/`export` of HDF5 files run." }
    LIB_DIR { name: "lib_dir", env: Some("PDCX_LIB_DIR"), ty: Ty::Path, scope: Scope::Cli,
        doc: "Where `pdcx run`/`pdcx fits` look first for the preload libraries." }
    // ---- the cross-site gateway (`pdcx gateway`)
    GATEWAY_LISTEN { name: "gateway.listen", env: Some("PDCX_GATEWAY_LISTEN"), flag: Some("--listen"),
        default: "127.0.0.1:7070", scope: Scope::Cli,
        doc: "Address `pdcx gateway` listens on: loopback unless given (other sites need e.g. 0.0.0.0:7070 or the link's address)." }
    GATEWAY_MAX_CONNECTIONS { name: "gateway.max_connections", env: Some("PDCX_GATEWAY_MAX_CONNECTIONS"),
        ty: Ty::Count, default: "64", unit: "connections", min: Some(1), max: Some(4096), scope: Scope::Cli,
        doc: "Connections a gateway serves at once; when full, a new one evicts the oldest not yet authenticated, else it is closed at once." }
    GATEWAY_AUTH_TIMEOUT_S { name: "gateway.auth_timeout_s", env: Some("PDCX_GATEWAY_AUTH_TIMEOUT_S"),
        ty: Ty::Count, default: "10", unit: "seconds", min: Some(1), max: Some(600), scope: Scope::Cli,
        doc: "Longest a connection to a gateway may take for the TLS handshake and its site's Hello together." }
    GATEWAY_IO_TIMEOUT_S { name: "gateway.io_timeout_s", env: Some("PDCX_GATEWAY_IO_TIMEOUT_S"),
        ty: Ty::Count, default: "120", unit: "seconds", min: Some(1), max: Some(86_400), scope: Scope::Cli,
        doc: "After authentication: longest a gateway waits for a site's next bytes, or for a write to it to progress." }
    // ---- pdcx.toml
    FLUSH_INTERVAL_MS { name: "flush.interval_ms", toml: Some("flush.interval_ms"), ty: Ty::Count, default: "200",
        unit: "milliseconds", min: Some(1), doc: "How often the background flusher looks for committed extents." }
    LOG_SEGMENT_BYTES { name: "log.segment_bytes", toml: Some("log.segment_bytes"), ty: Ty::Size, default: "64MiB",
        unit: "bytes", min: Some(1 << 20), doc: "Log segment size; flushed space is freed a sealed segment at a time." }
    COMPACTION_THRESHOLD { name: "compaction.threshold", env: Some("PDCX_COMPACTION_THRESHOLD"), toml: Some("compaction.threshold"),
        ty: Ty::Number, default: "0.5",
        doc: "A log segment whose live fraction falls below this is compacted (its live data copied out, the segment freed): from 0.05 to 0.95, or 0 for no background compaction (`pdcx compact` still runs). Sealed segments then hold at most 1/threshold times their live bytes, and each byte copied frees at least (1-threshold)/threshold bytes (TiKV Titan's discardable ratio is 1 minus it)." }
    COMPACTION_RATE_MIB_S { name: "compaction.rate_mib_s", env: Some("PDCX_COMPACTION_RATE_MIB_S"), toml: Some("compaction.rate_mib_s"),
        ty: Ty::Count, default: "128", unit: "MiB/s", min: Some(1), max: Some(100_000),
        doc: "Most bytes one server's compaction copies per second (`pdcx compact` is not limited)." }
    COMPACTION_INTERVAL_MS { name: "compaction.interval_ms", env: Some("PDCX_COMPACTION_INTERVAL_MS"), toml: Some("compaction.interval_ms"),
        ty: Ty::Count, default: "5000", unit: "milliseconds", min: Some(100), max: Some(3_600_000),
        doc: "How often each server drops hidden writes and looks for segments to compact." }
    SHARD_STRATEGY { name: "shard.strategy", toml: Some("shard.strategy"), ty: Ty::Count, min: Some(1), max: Some(5),
        doc: "Object-sharding strategy of \"object sharding across storage layers\" (Table II row)." }
    SHARD_COMPOSITE { name: "shard.composite", toml: Some("shard.composite"), ty: Ty::Bool, default: "false",
        doc: "Use Table II's composite column for shard.strategy." }
    SHARD_OBJECTS { name: "shard.objects", toml: Some("shard.objects"), ty: Ty::Count, max: Some(65536),
        doc: "Objects per shard blob (0: every extent its own blob)." }
    SHARD_SERVERS { name: "shard.servers", toml: Some("shard.servers"),
        doc: "Consecutive servers sharing a shard: a power of two up to 1024, or \"all\" (unset: 1)." }
    SHARD_MAX_BYTES { name: "shard.max_bytes", toml: Some("shard.max_bytes"), ty: Ty::Size, default: "256MiB",
        unit: "bytes", min: Some(1 << 20), max: Some(5 << 40), doc: "Largest shard blob." }
    TIER_NAME { name: "tier.name", toml: Some("tier.name"),
        doc: "A tier's name (letters, digits, '-', '_'); tiers are listed fastest first." }
    TIER_KIND { name: "tier.kind", toml: Some("tier.kind"), ty: Ty::Words(TIER_KINDS), default: "memory",
        doc: "memory, local (node-local directory), shared (parallel file system) or s3." }
    TIER_PATH { name: "tier.path", env: Some("PDCX_TIER_<NAME>_PATH"), toml: Some("tier.path"), ty: Ty::Path,
        doc: "Directory of a local or shared tier." }
    TIER_CAPACITY { name: "tier.capacity", env: Some("PDCX_TIER_<NAME>_CAPACITY"), toml: Some("tier.capacity"),
        ty: Ty::Size, unit: "bytes", doc: "Bytes the tier may hold (unset: unbounded)." }
    TIER_ENDPOINT { name: "tier.endpoint", env: Some("PDCX_TIER_<NAME>_ENDPOINT"), toml: Some("tier.endpoint"),
        doc: "S3: endpoint URL (http:// or https://)." }
    TIER_BUCKET { name: "tier.bucket", env: Some("PDCX_TIER_<NAME>_BUCKET"), toml: Some("tier.bucket"),
        doc: "S3: bucket." }
    TIER_REGION { name: "tier.region", env: Some("PDCX_TIER_<NAME>_REGION"), toml: Some("tier.region"),
        doc: "S3: region." }
    TIER_PREFIX { name: "tier.prefix", env: Some("PDCX_TIER_<NAME>_PREFIX"), toml: Some("tier.prefix"),
        doc: "S3: key prefix (unset: the deployment id)." }
    TIER_PART_SIZE { name: "tier.part_size", env: Some("PDCX_TIER_<NAME>_PART_SIZE"), toml: Some("tier.part_size"),
        ty: Ty::Size, unit: "bytes", min: Some(5 << 20), max: Some(5 << 30), doc: "S3: multipart part size." }
    TIER_CONCURRENCY { name: "tier.concurrency", env: Some("PDCX_TIER_<NAME>_CONCURRENCY"), toml: Some("tier.concurrency"),
        ty: Ty::Count, default: "8", unit: "parts", min: Some(1), max: Some(1024), doc: "S3: multipart parts in flight per upload." }
    TIER_TIMEOUT_MS { name: "tier.timeout_ms", env: Some("PDCX_TIER_<NAME>_TIMEOUT_MS"), toml: Some("tier.timeout_ms"),
        ty: Ty::Count, default: "5000", unit: "milliseconds", min: Some(1), doc: "S3: connect timeout and retry budget." }
    TIER_REQUEST_TIMEOUT_MS { name: "tier.request_timeout_ms", env: Some("PDCX_TIER_<NAME>_REQUEST_TIMEOUT_MS"),
        toml: Some("tier.request_timeout_ms"), ty: Ty::Count, default: "30000", unit: "milliseconds", min: Some(1),
        doc: "S3: longest one request may take (more for parts above 30 MiB)." }
    TIER_MAX_MBPS { name: "tier.max_mbps", env: Some("PDCX_TIER_<NAME>_MAX_MBPS"), toml: Some("tier.max_mbps"),
        ty: Ty::Number, unit: "MB/s", doc: "local/shared: emulate a device this fast (benchmarks)." }
    // ---- test and benchmark harnesses
    T_BIN { name: "test.bin", env: Some("PDCX_BIN"), ty: Ty::Path, scope: Scope::Test, doc: "The pdcx binary the harnesses run." }
    T_CRASH_BIN { name: "test.crash_bin", env: Some("PDCX_CRASH_BIN"), ty: Ty::Path, scope: Scope::Test, doc: "A pdcx built with crash points." }
    T_CRASH_CHILD { name: "test.crash_child", env: Some("PDCX_CRASH_CHILD"), ty: Ty::Path, scope: Scope::Test, doc: "Marks a crash test's child process." }
    T_CRASH_RUNS { name: "test.crash_runs", env: Some("PDCX_CRASH_RUNS"), ty: Ty::Count, scope: Scope::Test, doc: "Random crash runs of the crash test." }
    T_CRASH_SEED { name: "test.crash_seed", env: Some("PDCX_CRASH_SEED"), ty: Ty::Count, scope: Scope::Test, doc: "Seed of the random crash runs." }
    T_POWER_CUTS { name: "test.power_cuts", env: Some("PDCX_POWER_CUTS"), ty: Ty::Count, scope: Scope::Test, doc: "Simulated power cuts of the store test." }
    T_POWER_CUT_CMD { name: "test.power_cut_cmd", env: Some("PDCX_POWER_CUT_CMD"), scope: Scope::Test, doc: "Command the reliability bench cuts power with." }
    T_GROUP_CHILD { name: "test.group_child", env: Some("PDCX_GROUP_CHILD"), scope: Scope::Test, doc: "Marks a shard-group test's child process." }
    T_GROUP_EXPECT_ABORT { name: "test.group_expect_abort", env: Some("PDCX_GROUP_EXPECT_ABORT"), ty: Ty::Flag, scope: Scope::Test, doc: "The shard-group child expects to be killed." }
    T_HOME_CRASH_CHILD { name: "test.home_crash_child", env: Some("PDCX_HOME_CRASH_CHILD"), ty: Ty::Path, scope: Scope::Test, doc: "Marks a home-copy crash test's child process." }
    T_HOME_CRASH_CHECK { name: "test.home_crash_check", env: Some("PDCX_HOME_CRASH_CHECK"), ty: Ty::Path, scope: Scope::Test, doc: "The home-copy crash child checks instead of writing." }
    T_HOME_CRASH_POINT { name: "test.home_crash_point", env: Some("PDCX_HOME_CRASH_POINT"), scope: Scope::Test, doc: "Crash point of the home-copy crash child." }
    T_REQUIRE_S3 { name: "test.require_s3", env: Some("PDCX_REQUIRE_S3"), ty: Ty::Flag, scope: Scope::Test, doc: "S3 tests fail instead of skipping without an S3 server." }
    T_REQUIRE_H5PY { name: "test.require_h5py", env: Some("PDCX_REQUIRE_H5PY"), ty: Ty::Flag, scope: Scope::Test, doc: "HDF5 tests fail instead of skipping without h5py." }
    T_REQUIRE_XARRAY { name: "test.require_xarray", env: Some("PDCX_REQUIRE_XARRAY"), ty: Ty::Flag, scope: Scope::Test, doc: "xarray tests fail instead of skipping without xarray." }
    T_REQUIRE_MONTAGE { name: "test.require_montage", env: Some("PDCX_REQUIRE_MONTAGE"), ty: Ty::Flag, scope: Scope::Test, doc: "Montage tests fail instead of skipping without Montage." }
    T_S3_ENDPOINT { name: "test.s3_endpoint", env: Some("PDCX_TEST_S3_ENDPOINT"), scope: Scope::Test, doc: "S3 endpoint of the S3 tests." }
    T_S3_BUCKET { name: "test.s3_bucket", env: Some("PDCX_TEST_S3_BUCKET"), scope: Scope::Test, doc: "S3 bucket of the S3 tests." }
    T_S3_ACCESS_KEY_ID { name: "test.s3_access_key_id", env: Some("PDCX_TEST_S3_ACCESS_KEY_ID"), scope: Scope::Test, doc: "S3 access key of the S3 tests." }
    T_S3_SECRET_ACCESS_KEY { name: "test.s3_secret_access_key", env: Some("PDCX_TEST_S3_SECRET_ACCESS_KEY"), scope: Scope::Test, doc: "S3 secret key of the S3 tests." }
    T_S3_PIDFILE { name: "test.s3_pidfile", env: Some("PDCX_TEST_S3_PIDFILE"), ty: Ty::Path, scope: Scope::Test, doc: "Pid file of the test S3 server." }
    T_NETNS_LAUNCH_TIMEOUT { name: "test.netns_launch_timeout", env: Some("PDCX_NETNS_LAUNCH_TIMEOUT"), ty: Ty::Count, unit: "seconds", scope: Scope::Test, doc: "Launch timeout of the network-namespace tests." }
    T_NETNS_PREFIX { name: "test.netns_prefix", env: Some("PDCX_NETNS_PREFIX"), scope: Scope::Test, doc: "Namespace name prefix of the network-namespace tests." }
    T_H5PY_PATH { name: "test.h5py_path", env: Some("PDCX_H5PY_PATH"), ty: Ty::Path, scope: Scope::Test, doc: "Python path with h5py for the MPI-IO tests." }
    T_CAPI_NO_INSTALL { name: "test.capi_no_install", env: Some("PDCX_CAPI_NO_INSTALL"), ty: Ty::Flag, scope: Scope::Test, doc: "C API tests use the build tree, not an install." }
    T_CAPI_PREFIX { name: "test.capi_prefix", env: Some("PDCX_CAPI_PREFIX"), ty: Ty::Path, scope: Scope::Test, doc: "Install prefix of the C API tests." }
    T_XSITE_PREFIX { name: "test.xsite_prefix", env: Some("PDCX_XSITE_PREFIX"), scope: Scope::Test, doc: "Prefix of the cross-site link script." }
    T_FUZZ_DIR { name: "test.fuzz_dir", env: Some("PDCX_FUZZ_DIR"), ty: Ty::Path, scope: Scope::Test, doc: "Scratch directory of the server fuzz target." }
    T_NO_SKIPS { name: "test.no_skips", env: Some("PDCX_NO_SKIPS"), ty: Ty::Flag, scope: Scope::Test, doc: "Every skipped test fails instead (CI installs what every test needs)." }
    T_CRASH_LEDGER { name: "test.crash_ledger", env: Some("PDCX_CRASH_LEDGER"), ty: Ty::Path, scope: Scope::Test, doc: "A process killed at a crash point appends the point's name here first (crash coverage)." }
    T_WRITE_DOCS { name: "test.write_docs", env: Some("PDCX_WRITE_DOCS"), ty: Ty::Flag, scope: Scope::Test,
        doc: "The settings-table test rewrites docs/OPERATIONS.md instead of failing." }
}

/// The setting whose environment variable is `name`.
pub fn by_env(name: &str) -> Option<&'static Setting> {
    ALL.iter().copied().find(|s| s.env == Some(name))
}

/// Environment variables matching this prefix are per-tier overrides, checked by the
/// deployment config against its tiers.
pub const TIER_ENV_PREFIX: &str = "PDCX_TIER_";

/// The setting of `pdcx.toml` key `key` (dotted: `flush.interval_ms`, `tier.capacity`), or an
/// error naming it and listing the keys of its section (or the sections).
pub fn toml_setting(key: &str) -> Result<&'static Setting, ConfigError> {
    if let Some(s) = ALL.iter().copied().find(|s| s.toml == Some(key)) {
        return Ok(s);
    }
    let section = key.split('.').next().unwrap_or(key);
    let mut in_section: Vec<&str> = ALL
        .iter()
        .filter_map(|s| s.toml)
        .filter(|k| k.split('.').next() == Some(section))
        .collect();
    if in_section.is_empty() {
        in_section = ALL
            .iter()
            .filter_map(|s| s.toml)
            .map(|k| k.split('.').next().unwrap_or(k))
            .collect();
        in_section.dedup();
    }
    Err(ConfigError::UnknownKey {
        key: key.to_string(),
        expected: in_section.join(", "),
    })
}

/// The `PDCX_*` names among `names` that no setting declares (per-tier overrides aside).
pub fn unknown_env<I, S>(names: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    names
        .into_iter()
        .filter_map(|n| {
            let n = n.as_ref();
            (n.starts_with("PDCX_") && !n.starts_with(TIER_ENV_PREFIX) && by_env(n).is_none())
                .then(|| n.to_string())
        })
        .collect()
}

/// The process environment's undeclared `PDCX_*` variables.
pub fn unknown_env_vars() -> Vec<String> {
    unknown_env(
        std::env::vars_os()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect::<Vec<_>>(),
    )
}

/// Every malformed value in the environment among the settings `scopes` read.
pub fn check_env(scopes: &[Scope]) -> Vec<ConfigError> {
    ALL.iter()
        .filter(|s| scopes.contains(&s.scope))
        .filter_map(|s| s.check(&s.raw()?).err())
        .collect()
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The settings as a Markdown table (docs/OPERATIONS.md holds it between markers).
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| setting | environment | pdcx.toml | flag | type | default | unit | bounds | read by | meaning |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    let code = |v: Option<&str>| v.map_or(String::new(), |v| format!("`{}`", cell(v)));
    for s in ALL {
        let ty = match s.ty {
            Ty::Words(w) => w.join("/"),
            t => t.name().to_string(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            s.name,
            code(s.env),
            code(s.toml),
            code(s.flag),
            cell(&ty),
            code(Some(s.shown_default())),
            s.unit,
            s.bounds(),
            s.scope.name(),
            cell(s.doc)
        );
    }
    out
}

/// Marks the generated table in docs/OPERATIONS.md.
pub const DOC_BEGIN: &str = "<!-- settings table: generated from crates/core/src/config.rs (`pdcx server config --markdown`) -->";
pub const DOC_END: &str = "<!-- end of settings table -->";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_keys_are_declared_once() {
        let mut seen = HashSet::new();
        for s in ALL {
            assert!(seen.insert(s.name), "{} declared twice", s.name);
            if let Some(e) = s.env {
                assert!(seen.insert(e), "{e} declared twice");
                assert!(e.starts_with("PDCX_"), "{e}");
            }
            if let Some(t) = s.toml {
                assert!(seen.insert(t) || t == s.name, "{t} declared twice");
            }
            assert!(
                !s.doc.is_empty() && !s.doc.contains('\n'),
                "{}: one-line doc",
                s.name
            );
        }
    }

    #[test]
    fn every_default_is_a_value_of_its_type() {
        for s in ALL.iter().filter(|s| !s.default.is_empty()) {
            if matches!(
                s.ty,
                Ty::Count | Ty::Switch | Ty::Size | Ty::Words(_) | Ty::Bool
            ) {
                assert_eq!(s.check(s.default), Ok(()), "{}", s.name);
            }
        }
        assert_eq!(MAX_CONNECTIONS.default_count(), 4096);
        assert!(UNIX.default_switch() && !HOME_KEEP_LOG.default_switch());
    }

    #[test]
    fn malformed_values_name_the_key_and_what_is_expected() {
        let e = MAX_CONNECTIONS.parse_count("lots").unwrap_err().to_string();
        assert_eq!(
            e,
            "PDCX_MAX_CONNECTIONS=\"lots\": expected a whole number of at least 1"
        );
        let e = MAX_CONNECTIONS.parse_count("0").unwrap_err().to_string();
        assert!(
            e.contains("PDCX_MAX_CONNECTIONS") && e.contains("at least 1"),
            "{e}"
        );
        let e = CHECKPOINT_MS.parse_count("-5").unwrap_err().to_string();
        assert!(e.contains("whole number of milliseconds"), "{e}");
        let e = SHM.parse_switch("maybe").unwrap_err().to_string();
        assert!(
            e.starts_with("PDCX_SHM=\"maybe\": expected on or off"),
            "{e}"
        );
        let e = MPIIO_MODE.check("fast").unwrap_err().to_string();
        assert!(e.contains("one of log, redirect, off"), "{e}");
        let e = FLUSH_INTERVAL_MS.check("soon").unwrap_err().to_string();
        assert!(e.starts_with("flush.interval_ms=\"soon\""), "{e}");
        assert!(LOG_SEGMENT_BYTES.check("12 parsecs").is_err());
        assert_eq!(LOG_SEGMENT_BYTES.check("64MiB"), Ok(()));
        let small = &SMALL_WRITE_TO_OWNER;
        assert_eq!(small.parse_size_bounded(small.default), Ok(256 << 10));
        assert_eq!(small.parse_size_bounded("0"), Ok(0));
        let e = small.parse_size_bounded("2GiB").unwrap_err().to_string();
        assert!(e.starts_with("PDCX_SMALL_WRITE_TO_OWNER=\"2GiB\""), "{e}");
    }

    #[test]
    fn places_are_absolute_directories_or_s3_urls_and_errors_name_the_key() {
        assert_eq!(
            HOMES.parse_places(" /data/home/ , s3://bkt/runs/, s3://b2,/"),
            Ok(vec![
                "/data/home".to_string(),
                "s3://bkt/runs".into(),
                "s3://b2".into(),
                "/".into()
            ])
        );
        assert_eq!(HOMES.parse_places(" , "), Ok(vec![]));
        for bad in [
            "data/home",
            "/data/../etc",
            "/data/./x",
            "s3://",
            "s3:///key",
            "s3://bkt//x",
            "s3://bkt/a/../b",
            "s3://bad bucket/x",
        ] {
            let e = HOMES.parse_places(bad).unwrap_err().to_string();
            assert!(
                e.starts_with("PDCX_HOMES=") && e.contains("s3://BUCKET[/PREFIX]"),
                "{bad}: {e}"
            );
        }
        // Imports read files, never S3 objects.
        let e = IMPORT_PATHS.check("/ok,s3://bkt").unwrap_err().to_string();
        assert!(e.starts_with("PDCX_IMPORT_PATHS=\"s3://bkt\""), "{e}");
        assert_eq!(IMPORT_PATHS.check("/data/in,/scratch"), Ok(()));
    }

    #[test]
    fn counts_parse_like_their_readers_did() {
        assert_eq!(SPIN_US.parse_count(" 7 "), Ok(7));
        // Capped, not refused.
        assert_eq!(HOME_DEFER_MS.parse_count("99999"), Ok(60_000));
        assert_eq!(HOME_JOBS.parse_count("100"), Ok(64));
        assert!(REF_PROMOTE_READS.parse_count("5000000000").is_err());
        for (v, on) in [
            ("0", false),
            ("OFF", false),
            ("no", false),
            ("1", true),
            ("Yes", true),
        ] {
            assert_eq!(SHM.parse_switch(v), Ok(on), "{v}");
        }
    }

    #[test]
    fn unknown_toml_keys_name_the_key_and_the_choices() {
        assert_eq!(
            toml_setting("flush.interval_ms").unwrap().name,
            "flush.interval_ms"
        );
        assert_eq!(toml_setting("tier.capacity").unwrap().ty, Ty::Size);
        let e = toml_setting("flush.intervall_ms").unwrap_err().to_string();
        assert_eq!(
            e,
            "flush.intervall_ms: unknown key in pdcx.toml; expected one of: flush.interval_ms"
        );
        let e = toml_setting("cache.size").unwrap_err().to_string();
        assert!(
            e.starts_with("cache.size:") && e.contains("flush") && e.contains("tier"),
            "{e}"
        );
    }

    #[test]
    fn unknown_env_vars_are_the_undeclared_pdcx_ones() {
        let got = unknown_env([
            "PDCX_ROOT",
            "PDCX_SHMM",
            "PDCX_TIER_SSD_CAPACITY",
            "HOME",
            "PDCX_CRASH_CHILD",
        ]);
        assert_eq!(got, ["PDCX_SHMM"]);
    }

    /// docs/OPERATIONS.md's table is this declaration; `PDCX_WRITE_DOCS=1` rewrites it.
    #[test]
    fn operations_doc_has_the_declared_table() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/OPERATIONS.md");
        let doc = std::fs::read_to_string(&path).expect("docs/OPERATIONS.md");
        let (Some(b), Some(e)) = (doc.find(DOC_BEGIN), doc.find(DOC_END)) else {
            panic!("docs/OPERATIONS.md has no settings-table markers ({DOC_BEGIN} ... {DOC_END})");
        };
        let start = b + DOC_BEGIN.len() + 1;
        let want = markdown_table();
        if doc.get(start..e) == Some(want.as_str()) {
            return;
        }
        if T_WRITE_DOCS.flag_on() {
            let new = format!("{}{}{}", &doc[..start], want, &doc[e..]);
            std::fs::write(&path, new).expect("rewriting docs/OPERATIONS.md");
            return;
        }
        panic!(
            "docs/OPERATIONS.md's settings table differs from crates/core/src/config.rs; \
             regenerate it with PDCX_WRITE_DOCS=1 cargo test -p pdcx-core operations_doc"
        );
    }
}
