//! Configuration (from the environment, read once at the first `MPI_File_open`, never in a
//! constructor), path normalisation and the per-file decision of `MPI_File_open`.
//!
//! Everything here is pure (no MPI, no pdcx) so it is unit-tested directly.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `MPI_MODE_*` of Open MPI 4.1 (`mpi.h`; a test checks them against the header).
pub mod amode {
    pub const CREATE: i32 = 1;
    pub const RDONLY: i32 = 2;
    pub const WRONLY: i32 = 4;
    pub const RDWR: i32 = 8;
    pub const DELETE_ON_CLOSE: i32 = 16;
    pub const UNIQUE_OPEN: i32 = 32;
    pub const EXCL: i32 = 64;
    pub const APPEND: i32 = 128;
    pub const SEQUENTIAL: i32 = 256;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Files under the prefix are logged into pdcx byte streams (the default).
    Log,
    /// Files under the prefix are written directly to their home (no pdcx).
    Redirect,
    /// Nothing is intercepted.
    Off,
}

/// Where a file's sealed versions go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Home {
    Dir(PathBuf),
    /// `s3://bucket/prefix`, without a trailing slash.
    S3(String),
}

impl Home {
    pub fn parse(s: &str) -> Result<Home, String> {
        if let Some(rest) = s.strip_prefix("s3://") {
            let rest = rest.trim_end_matches('/');
            if rest.is_empty() || rest.starts_with('/') {
                return Err(format!("PDCX_MPIIO_HOME={s:?} names no bucket"));
            }
            return Ok(Home::S3(format!("s3://{rest}")));
        }
        let p = Path::new(s);
        if !p.is_absolute() {
            return Err(format!(
                "PDCX_MPIIO_HOME={s:?} is neither an absolute directory nor s3://BUCKET/PREFIX"
            ));
        }
        Ok(Home::Dir(lexical(p.as_os_str().as_bytes())))
    }

    /// The home of the file at `rel` (relative to the prefix).
    pub fn of(&self, rel: &Path) -> String {
        match self {
            Home::Dir(d) => d.join(rel).to_string_lossy().into_owned(),
            Home::S3(u) => format!("{u}/{}", rel.to_string_lossy()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    pub mode: Mode,
    /// The prefix, normalised lexically, and its `realpath` when that differs.
    pub prefix: Option<PathBuf>,
    pub prefix_real: Option<PathBuf>,
    pub home: Option<Home>,
    pub debug: bool,
    /// Whether a logged file's bytes are also written at its path under the prefix, so that
    /// processes outside the job see them after close (`PDCX_MPIIO_WRITE_THROUGH`).
    pub write_through: bool,
    /// A configuration problem to report once (the library then does nothing, or falls back).
    pub problem: Option<String>,
}

impl Config {
    /// Reads `PDCX_MPIIO_{PREFIX,HOME,MODE,DEBUG,WRITE_THROUGH}`.
    pub fn from_env() -> Config {
        use pdcx_core::config::{
            MPIIO_DEBUG, MPIIO_HOME, MPIIO_MODE, MPIIO_PREFIX, MPIIO_WRITE_THROUGH,
        };
        let mut cfg = Config::from_values(
            MPIIO_PREFIX.os().as_deref(),
            MPIIO_HOME.os().as_deref(),
            MPIIO_MODE.os().as_deref(),
            MPIIO_DEBUG.flag_on(),
        );
        // A malformed value is named on stderr once and the default (on) applies.
        cfg.write_through = MPIIO_WRITE_THROUGH.switch_or_default();
        cfg
    }

    pub fn from_values(
        prefix: Option<&OsStr>,
        home: Option<&OsStr>,
        mode: Option<&OsStr>,
        debug: bool,
    ) -> Config {
        let mut cfg = Config {
            mode: Mode::Log,
            prefix: None,
            prefix_real: None,
            home: None,
            debug,
            write_through: true,
            problem: None,
        };
        match mode.map(|m| m.to_string_lossy()) {
            None => {}
            Some(m) => match m.as_ref() {
                "log" => {}
                "redirect" => cfg.mode = Mode::Redirect,
                "off" => {
                    cfg.mode = Mode::Off;
                    return cfg;
                }
                other => {
                    cfg.mode = Mode::Off;
                    cfg.problem = Some(format!(
                        "PDCX_MPIIO_MODE={other:?} is not log, redirect or off; MPI-IO files are \
                         written directly"
                    ));
                    return cfg;
                }
            },
        }
        match prefix {
            None => {
                cfg.mode = Mode::Off;
                cfg.problem =
                    Some("PDCX_MPIIO_PREFIX is not set; MPI-IO files are written directly".into());
                return cfg;
            }
            Some(p) if !Path::new(p).is_absolute() => {
                cfg.mode = Mode::Off;
                cfg.problem = Some(format!(
                    "PDCX_MPIIO_PREFIX={:?} is not an absolute path; MPI-IO files are written \
                     directly",
                    p.to_string_lossy()
                ));
                return cfg;
            }
            Some(p) => {
                let lex = lexical(p.as_bytes());
                let real = std::fs::canonicalize(&lex).ok().filter(|r| *r != lex);
                cfg.prefix = Some(lex);
                cfg.prefix_real = real;
            }
        }
        match home.map(|h| Home::parse(&h.to_string_lossy())) {
            None => {
                cfg.problem = Some("PDCX_MPIIO_HOME is not set".into());
            }
            Some(Err(e)) => cfg.problem = Some(e),
            Some(Ok(h)) => cfg.home = Some(h),
        }
        cfg
    }
}

static CFG: OnceLock<Config> = OnceLock::new();

/// The process's configuration, read at first use.
pub fn get() -> &'static Config {
    CFG.get_or_init(Config::from_env)
}

/// The configuration if a first `MPI_File_open` has read it (never reads it: `open` may run
/// before `main`).
pub fn loaded() -> Option<&'static Config> {
    CFG.get()
}

/// ROMIO's file-system prefixes (`ufs:/path`), which the MPI library strips before `open`.
const FS_PREFIXES: &[&str] = &[
    "ufs",
    "nfs",
    "lustre",
    "gpfs",
    "pvfs2",
    "panfs",
    "xfs",
    "testfs",
    "daos",
    "bg",
    "bglockless",
    "pfs",
    "piofs",
    "hfs",
    "sfs",
    "ime",
    "quobytefs",
];

/// Strips a ROMIO file-system prefix (`ufs:`), makes `path` absolute against `cwd` and
/// collapses `.`, `..` and repeated slashes without touching the file system.
pub fn normalise(path: &[u8], cwd: &Path) -> PathBuf {
    let path = match path.iter().position(|&b| b == b':') {
        Some(i) if FS_PREFIXES.iter().any(|p| p.as_bytes() == &path[..i]) => &path[i + 1..],
        _ => path,
    };
    if path.first() == Some(&b'/') {
        lexical(path)
    } else {
        let mut full = cwd.as_os_str().as_bytes().to_vec();
        full.push(b'/');
        full.extend_from_slice(path);
        lexical(&full)
    }
}

/// Collapses `.`, `..` (never above `/`) and repeated slashes of an absolute path.
fn lexical(path: &[u8]) -> PathBuf {
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut out = Vec::with_capacity(path.len() + 1);
    for c in &parts {
        out.push(b'/');
        out.extend_from_slice(c);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    PathBuf::from(OsString::from_vec(out))
}

/// `norm` (normalised) relative to the prefix, when it lies strictly inside it.
pub fn relative(cfg: &Config, norm: &Path) -> Option<PathBuf> {
    [cfg.prefix.as_ref(), cfg.prefix_real.as_ref()]
        .into_iter()
        .flatten()
        .find_map(|p| norm.strip_prefix(p).ok())
        .filter(|r| !r.as_os_str().is_empty())
        .map(Path::to_path_buf)
}

/// The object a prefix file is logged into.
pub fn object_name(rel: &Path) -> String {
    format!("mpiio/{}", rel.to_string_lossy())
}

/// What `MPI_File_open` does with one file (the same on every rank: it depends only on the
/// arguments, which MPI requires to match, and on the environment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Not ours: the real `MPI_File_open`, untouched.
    Pass,
    /// Log into the byte stream `name`; seal versions to `home`.
    Log {
        norm: PathBuf,
        name: String,
        home: String,
    },
    /// Ours, but written directly: rank 0 prints `reason`, every rank opens `target`.
    Fallback { reason: String, target: PathBuf },
}

/// Amode bits this version cannot log (it falls back for them).
const UNSUPPORTED: &[(i32, &str)] = &[
    (amode::APPEND, "MPI_MODE_APPEND"),
    (amode::DELETE_ON_CLOSE, "MPI_MODE_DELETE_ON_CLOSE"),
    (amode::SEQUENTIAL, "MPI_MODE_SEQUENTIAL"),
];

pub fn decide(cfg: &Config, path: &[u8], mode_bits: i32, cwd: &Path) -> Decision {
    if cfg.mode == Mode::Off {
        return Decision::Pass;
    }
    let norm = normalise(path, cwd);
    let Some(rel) = relative(cfg, &norm) else {
        return Decision::Pass;
    };
    if mode_bits & amode::RDONLY != 0 {
        // Reads of a file the program logged come from its stream (the placeholder is empty);
        // in redirect mode from where it was written. The caller falls back silently.
        return match (&cfg.home, cfg.mode) {
            (Some(home), Mode::Log) => Decision::Log {
                name: object_name(&rel),
                home: home.of(&rel),
                norm,
            },
            (Some(home), Mode::Redirect) => Decision::Fallback {
                reason: "PDCX_MPIIO_MODE=redirect".into(),
                target: fallback_target(Some(home), &rel, &norm),
            },
            _ => Decision::Pass,
        };
    }
    let unsupported: Vec<&str> = UNSUPPORTED
        .iter()
        .filter(|(bit, _)| mode_bits & bit != 0)
        .map(|(_, n)| *n)
        .collect();
    let reason = if !unsupported.is_empty() {
        Some(format!(
            "MPI_File_open mode {} is not supported",
            unsupported.join("|")
        ))
    } else if let Some(p) = cfg.problem.as_ref().filter(|_| cfg.home.is_none()) {
        Some(p.clone())
    } else if cfg.mode == Mode::Redirect {
        Some("PDCX_MPIIO_MODE=redirect".to_string())
    } else {
        None
    };
    match (reason, &cfg.home) {
        (None, Some(home)) => Decision::Log {
            name: object_name(&rel),
            home: home.of(&rel),
            norm,
        },
        (reason, home) => Decision::Fallback {
            reason: reason.unwrap_or_else(|| "no home".into()),
            target: fallback_target(home.as_ref(), &rel, &norm),
        },
    }
}

/// Where a file that is not logged is written: its home for a directory home, else in place.
pub fn fallback_target(home: Option<&Home>, rel: &Path, norm: &Path) -> PathBuf {
    match home {
        Some(Home::Dir(d)) => d.join(rel),
        _ => norm.to_path_buf(),
    }
}

/// The one line rank 0 prints when a file is written directly.
pub fn fallback_line(reason: &str, norm: &Path, target: &Path, home: Option<&Home>) -> String {
    let extra = match home {
        Some(Home::S3(u)) => format!(" (not copied to the S3 home {u})"),
        _ => String::new(),
    };
    format!(
        "pdcx mpiio: {reason}; writing {} directly to {}{extra}",
        norm.display(),
        target.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(prefix: &str, home: Option<&str>, mode: Option<&str>) -> Config {
        Config::from_values(
            Some(OsStr::new(prefix)),
            home.map(OsStr::new),
            mode.map(OsStr::new),
            false,
        )
    }

    fn n(p: &str) -> PathBuf {
        normalise(p.as_bytes(), Path::new("/work/run"))
    }

    #[test]
    fn normalises_romio_prefixes_relative_paths_dots_and_slashes() {
        assert_eq!(n("ufs:/out/a.h5"), Path::new("/out/a.h5"));
        assert_eq!(n("nfs:/out/a.h5"), Path::new("/out/a.h5"));
        assert_eq!(n("lustre:out/a"), Path::new("/work/run/out/a"));
        assert_eq!(n("out//x/./y"), Path::new("/work/run/out/x/y"));
        assert_eq!(n("../up/f"), Path::new("/work/up/f"));
        assert_eq!(n("/a/b/../../../c"), Path::new("/c"));
        assert_eq!(n("/"), Path::new("/"));
        // A colon that is not a known file-system prefix is part of the name.
        assert_eq!(n("/out/t:1"), Path::new("/out/t:1"));
        assert_eq!(n("run:1/f"), Path::new("/work/run/run:1/f"));
    }

    #[test]
    fn relative_only_strictly_inside_the_prefix() {
        let c = cfg("/out/", Some("/home"), None);
        assert_eq!(c.prefix.as_deref(), Some(Path::new("/out")));
        assert_eq!(
            relative(&c, &n("/out/a/b.h5")),
            Some(PathBuf::from("a/b.h5"))
        );
        assert_eq!(relative(&c, &n("/out")), None);
        assert_eq!(relative(&c, &n("/outside/f")), None);
        assert_eq!(relative(&c, &n("/out2/f")), None);
        // `..` escaping the prefix is not ours; staying inside is.
        assert_eq!(relative(&c, &n("/out/../etc/f")), None);
        assert_eq!(relative(&c, &n("/out/a/../b")), Some(PathBuf::from("b")));
    }

    #[test]
    fn names_and_homes() {
        let rel = Path::new("d/f.h5");
        assert_eq!(object_name(rel), "mpiio/d/f.h5");
        assert_eq!(Home::parse("/lus/x/").unwrap().of(rel), "/lus/x/d/f.h5");
        assert_eq!(Home::parse("s3://b/p/").unwrap().of(rel), "s3://b/p/d/f.h5");
        assert_eq!(Home::parse("s3://b").unwrap().of(rel), "s3://b/d/f.h5");
        assert!(Home::parse("s3://").is_err());
        assert!(Home::parse("rel/dir").is_err());
    }

    #[test]
    fn decisions() {
        let c = cfg("/out", Some("/home"), None);
        let w = amode::CREATE | amode::WRONLY;
        let cwd = Path::new("/");
        assert_eq!(
            decide(&c, b"ufs:/out/f", w, cwd),
            Decision::Log {
                norm: "/out/f".into(),
                name: "mpiio/f".into(),
                home: "/home/f".into()
            }
        );
        assert_eq!(
            decide(
                &c,
                b"/out/f",
                amode::CREATE | amode::RDWR | amode::EXCL,
                cwd
            ),
            Decision::Log {
                norm: "/out/f".into(),
                name: "mpiio/f".into(),
                home: "/home/f".into()
            }
        );
        assert_eq!(decide(&c, b"/tmp/f", w, cwd), Decision::Pass);
        // Read-only: from the stream in log mode, from the home in redirect mode, untouched
        // without a home; unsupported bits do not matter for reading.
        assert!(matches!(
            decide(&c, b"/out/f", amode::RDONLY | amode::SEQUENTIAL, cwd),
            Decision::Log { name, .. } if name == "mpiio/f"
        ));
        assert!(matches!(
            decide(&cfg("/out", Some("/home"), Some("redirect")), b"/out/f", amode::RDONLY, cwd),
            Decision::Fallback { target, .. } if target == Path::new("/home/f")
        ));
        assert_eq!(
            decide(&cfg("/out", None, None), b"/out/f", amode::RDONLY, cwd),
            Decision::Pass
        );
        assert_eq!(decide(&c, b"/tmp/f", amode::RDONLY, cwd), Decision::Pass);
        for (bit, name) in [
            (amode::APPEND, "MPI_MODE_APPEND"),
            (amode::DELETE_ON_CLOSE, "MPI_MODE_DELETE_ON_CLOSE"),
            (amode::SEQUENTIAL, "MPI_MODE_SEQUENTIAL"),
        ] {
            match decide(&c, b"/out/d/f", w | bit, cwd) {
                Decision::Fallback { reason, target } => {
                    assert!(reason.contains(name), "{reason}");
                    assert_eq!(target, Path::new("/home/d/f"));
                }
                d => panic!("{name}: {d:?}"),
            }
        }
        // Redirect: to the home directory; with an S3 home, in place.
        let r = cfg("/out", Some("/home"), Some("redirect"));
        assert!(matches!(
            decide(&r, b"/out/f", w, cwd),
            Decision::Fallback { target, .. } if target == Path::new("/home/f")
        ));
        let s = cfg("/out", Some("s3://b/p"), Some("redirect"));
        match decide(&s, b"/out/f", w, cwd) {
            Decision::Fallback { reason, target } => {
                assert_eq!(target, Path::new("/out/f"));
                let line = fallback_line(&reason, Path::new("/out/f"), &target, s.home.as_ref());
                assert!(
                    line.starts_with(
                        "pdcx mpiio: PDCX_MPIIO_MODE=redirect; writing /out/f directly to /out/f"
                    ),
                    "{line}"
                );
                assert!(line.contains("s3://b/p"), "{line}");
            }
            d => panic!("{d:?}"),
        }
        // Off: nothing is ours.
        let o = cfg("/out", Some("/home"), Some("off"));
        assert_eq!(decide(&o, b"/out/f", w, cwd), Decision::Pass);
    }

    #[test]
    fn bad_configuration_is_reported_and_never_logs() {
        let none = Config::from_values(None, Some(OsStr::new("/h")), None, false);
        assert_eq!(none.mode, Mode::Off);
        assert!(none
            .problem
            .as_deref()
            .unwrap()
            .contains("PDCX_MPIIO_PREFIX"));
        assert_eq!(
            decide(&none, b"/out/f", amode::WRONLY, Path::new("/")),
            Decision::Pass
        );

        let rel = cfg("out", Some("/h"), None);
        assert_eq!(rel.mode, Mode::Off);
        assert!(rel.problem.is_some());

        let bad_mode = cfg("/out", Some("/h"), Some("fast"));
        assert_eq!(bad_mode.mode, Mode::Off);
        assert!(bad_mode.problem.as_deref().unwrap().contains("fast"));

        // No home: the file is written in place, with the reason.
        let no_home = cfg("/out", None, None);
        match decide(&no_home, b"/out/f", amode::WRONLY, Path::new("/")) {
            Decision::Fallback { reason, target } => {
                assert!(reason.contains("PDCX_MPIIO_HOME"), "{reason}");
                assert_eq!(target, Path::new("/out/f"));
            }
            d => panic!("{d:?}"),
        }
        let bad_home = cfg("/out", Some("relative"), None);
        assert!(matches!(
            decide(&bad_home, b"/out/f", amode::WRONLY, Path::new("/")),
            Decision::Fallback { .. }
        ));
    }

    #[test]
    fn a_symlinked_prefix_matches_by_its_real_path_too() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let c = cfg(link.to_str().unwrap(), Some("/h"), None);
        let real = std::fs::canonicalize(&real).unwrap();
        assert_eq!(
            relative(&c, &real.join("f")),
            Some(PathBuf::from("f")),
            "{c:?}"
        );
        assert_eq!(relative(&c, &link.join("f")), Some(PathBuf::from("f")));
    }
}
