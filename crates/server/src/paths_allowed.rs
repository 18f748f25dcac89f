//! Which file system paths and S3 locations client requests may name: homes byte streams are
//! sealed to (`access.homes`) and files imported by reference (`access.import_paths`).
//!
//! A server acts with the deployment user's rights, so without a limit any caller could have
//! it write where that user may write and read what that user may read. When a setting lists
//! places, every caller is held to them: a path counts as under a directory only after `..`
//! and symlinks are resolved as far as the path exists (the rest is appended as written, and
//! may hold no `..` nor a dangling symlink), and by whole components (`/data/home2` is not
//! under `/data/home`). When it lists none, the deployment's own user may name anything (it
//! could reach it without the server) and any other caller nothing. Tier definitions in
//! `pdcx.toml` are the admin's own and are not checked here.

use pdcx_core::config::{self, Setting};
use pdcx_core::{Error, ErrorKind, Result};
use std::path::{Component, Path, PathBuf};

/// A place a setting lists (normalized by `Setting::parse_place`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    Dir(PathBuf),
    S3 { bucket: String, prefix: Vec<String> },
}

/// The places client requests may name, from `access.*` in pdcx.toml or the environment.
#[derive(Debug, Default)]
pub struct AllowedPaths {
    homes: Vec<Place>,
    imports: Vec<Place>,
}

impl AllowedPaths {
    /// The environment's lists (`PDCX_HOMES`, `PDCX_IMPORT_PATHS`) where set, else the
    /// config file's.
    pub fn from_config(access: &pdcx_tiers::config::AccessConfig) -> Result<AllowedPaths> {
        let homes = config::HOMES.places()?.unwrap_or(access.homes.clone());
        let imports = config::IMPORT_PATHS
            .places()?
            .unwrap_or(access.import_paths.clone());
        AllowedPaths::new(&homes, &imports)
    }

    /// From the lists' entries, each checked by its setting.
    pub fn new(homes: &[String], imports: &[String]) -> Result<AllowedPaths> {
        Ok(AllowedPaths {
            homes: places(&config::HOMES, homes)?,
            imports: places(&config::IMPORT_PATHS, imports)?,
        })
    }

    /// Whether a byte stream may be sealed to `home` (a file path or `s3://BUCKET/KEY`) for
    /// a caller who is the deployment's user or not.
    pub fn check_home(&self, home: &str, deployment_user: bool) -> Result<()> {
        check(
            &self.homes,
            &config::HOMES,
            "home",
            home,
            deployment_user,
            true,
        )
    }

    /// Whether the file `path` may be imported by reference (read by the server).
    pub fn check_import(&self, path: &str, deployment_user: bool) -> Result<()> {
        check(
            &self.imports,
            &config::IMPORT_PATHS,
            "file imported by reference",
            path,
            deployment_user,
            false,
        )
    }
}

fn places(setting: &Setting, entries: &[String]) -> Result<Vec<Place>> {
    entries
        .iter()
        .map(|e| {
            let e = setting.parse_place(e)?;
            Ok(match e.strip_prefix("s3://") {
                Some(rest) => {
                    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                    Place::S3 {
                        bucket: bucket.to_string(),
                        prefix: parts(prefix),
                    }
                }
                None => Place::Dir(PathBuf::from(e)),
            })
        })
        .collect()
}

/// An S3 key's `/`-separated parts ("" has none).
fn parts(key: &str) -> Vec<String> {
    if key.is_empty() {
        return Vec::new();
    }
    key.split('/').map(str::to_string).collect()
}

/// Where to change the setting, for messages.
fn fix(setting: &Setting) -> String {
    format!(
        "`{}` in ROOT/pdcx.toml (or {})",
        setting.toml.unwrap_or(setting.name),
        setting.env.unwrap_or("its variable")
    )
}

/// `strict`: the path must lie inside a listed directory, not be it (a home is a file that
/// its directory's copy renames into place).
fn check(
    listed: &[Place],
    setting: &Setting,
    what: &str,
    target: &str,
    deployment_user: bool,
    strict: bool,
) -> Result<()> {
    if listed.is_empty() {
        if deployment_user {
            return Ok(());
        }
        return Err(Error::new(
            ErrorKind::Auth,
            format!(
                "{what} {target:?} refused: `{}` lists no places, so only the deployment's user \
                 may name one; ask the deployment's admin to add a directory holding it to {}",
                setting.name,
                fix(setting)
            ),
        ));
    }
    let outside = |shown: String| {
        let list: Vec<String> = listed.iter().map(show).collect();
        Error::new(
            ErrorKind::Auth,
            format!(
                "{what} {shown} is outside the places `{}` allows ({}): choose one under them, \
                 or ask the deployment's admin to add it to {}",
                setting.name,
                list.join(", "),
                fix(setting)
            ),
        )
    };
    if let Some(rest) = target.strip_prefix("s3://") {
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        let key = parts(key);
        // S3 keys are not paths, but a store or a later tool may read `..` as one.
        let dotted = key.iter().any(|p| p == "." || p == "..");
        let inside = listed.iter().any(|p| match p {
            Place::S3 { bucket: b, prefix } => {
                b == bucket && key.len() > prefix.len() && key.starts_with(prefix)
            }
            Place::Dir(_) => false,
        });
        if dotted || !inside {
            return Err(outside(format!("{target:?}")));
        }
        return Ok(());
    }
    let path = Path::new(target);
    if !path.is_absolute() {
        return Err(Error::invalid(format!(
            "{what} {target:?} is not an absolute path"
        )));
    }
    let real = resolve(path)
        .map_err(|why| Error::new(ErrorKind::Auth, format!("{what} {target:?} refused: {why}")))?;
    let inside = listed.iter().any(|p| match p {
        // A listed directory is resolved the same way (it may itself be a symlink, or not
        // exist yet); one that cannot be resolved allows nothing.
        Place::Dir(d) => resolve(d).is_ok_and(|d| real.starts_with(&d) && !(strict && real == d)),
        Place::S3 { .. } => false,
    });
    if inside {
        return Ok(());
    }
    if real == path {
        Err(outside(format!("{target:?}")))
    } else {
        Err(outside(format!(
            "{target:?} (resolved: {:?})",
            real.display().to_string()
        )))
    }
}

fn show(p: &Place) -> String {
    match p {
        Place::Dir(d) => d.display().to_string(),
        Place::S3 { bucket, prefix } if prefix.is_empty() => format!("s3://{bucket}"),
        Place::S3 { bucket, prefix } => format!("s3://{bucket}/{}", prefix.join("/")),
    }
}

/// The component does not exist (or a file stands where a directory would be), so its
/// parent is tried.
fn missing(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

/// `path` (absolute) with `..` and symlinks resolved: its longest existing prefix
/// canonicalized, then the rest appended as written. The rest may not hold `..` (it would
/// climb out of where the existing part resolved to) and may not start at a dangling
/// symlink (what it points to could be created later, anywhere).
fn resolve(path: &Path) -> std::result::Result<PathBuf, String> {
    let comps: Vec<Component> = path.components().collect();
    for n in (1..=comps.len()).rev() {
        let prefix: PathBuf = comps[..n].iter().collect();
        match std::fs::canonicalize(&prefix) {
            Ok(mut real) => {
                for c in &comps[n..] {
                    match c {
                        Component::Normal(p) => real.push(p),
                        _ => {
                            return Err(format!(
                                "`..` after {} which does not exist",
                                prefix.display()
                            ))
                        }
                    }
                }
                return Ok(real);
            }
            Err(e) if missing(&e) => {
                if std::fs::symlink_metadata(&prefix).is_ok_and(|m| m.file_type().is_symlink()) {
                    return Err(format!(
                        "{} is a symlink to something that does not exist",
                        prefix.display()
                    ));
                }
            }
            Err(e) => return Err(format!("cannot resolve {}: {e}", prefix.display())),
        }
    }
    Err("no part of it exists".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn allowed(homes: &[&str], imports: &[&str]) -> AllowedPaths {
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        AllowedPaths::new(&v(homes), &v(imports)).unwrap()
    }

    fn home_ok(a: &AllowedPaths, p: &Path) -> bool {
        a.check_home(p.to_str().unwrap(), true).is_ok()
    }

    /// A scratch directory (resolved, so expected paths compare equal) holding `dirs`.
    fn scratch(dirs: &[&str]) -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        for d in dirs {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        (t, root)
    }

    /// The error is of `kind` and its message says all of `says`.
    fn says(e: Error, kind: ErrorKind, says: &[&str]) {
        assert_eq!(e.kind, kind, "{}", e.message);
        for s in says {
            assert!(e.message.contains(s), "{s:?} not in {}", e.message);
        }
    }

    #[test]
    fn a_directory_allows_what_lies_under_it_by_whole_components() {
        let (_t, root) = scratch(&["home/sub", "home2"]);
        let a = allowed(&[root.join("home").to_str().unwrap()], &[]);
        assert!(home_ok(&a, &root.join("home/out.bin")));
        assert!(home_ok(&a, &root.join("home/sub/out.bin")));
        // Not yet existing directories below an allowed one are fine (the copy creates them).
        assert!(home_ok(&a, &root.join("home/new/deeper/out.bin")));
        // A sibling whose name starts the same is not under it.
        assert!(!home_ok(&a, &root.join("home2/out.bin")));
        assert!(!home_ok(&a, &root.join("homeout.bin")));
        // A home is a file inside the directory, never the directory itself.
        assert!(!home_ok(&a, &root.join("home")));
        let sibling = root.join("home2/out.bin");
        says(
            a.check_home(sibling.to_str().unwrap(), true).unwrap_err(),
            ErrorKind::Auth,
            &[
                "outside the places `access.homes` allows",
                "`access.homes` in ROOT/pdcx.toml (or PDCX_HOMES)",
            ],
        );
        let e = a.check_home("relative/out.bin", true).unwrap_err();
        says(e, ErrorKind::InvalidArgument, &["not an absolute path"]);
    }

    #[test]
    fn dot_dot_is_resolved_where_it_exists_and_refused_where_not() {
        let (_t, root) = scratch(&["home/sub", "outside"]);
        let a = allowed(&[root.join("home").to_str().unwrap()], &[]);
        let s = |p: &str| format!("{}/{p}", root.display());
        assert!(a.check_home(&s("home/sub/../f"), true).is_ok());
        let e = a.check_home(&s("home/../outside/f"), true).unwrap_err();
        says(e, ErrorKind::Auth, &["resolved:"]);
        let e = a.check_home(&s("home/ghost/../../outside/f"), true);
        says(e.unwrap_err(), ErrorKind::Auth, &["`..` after"]);
    }

    #[test]
    fn a_symlink_out_of_an_allowed_directory_is_refused() {
        let (_t, root) = scratch(&["home", "outside"]);
        std::fs::write(root.join("outside/secret"), b"x").unwrap();
        symlink(root.join("outside"), root.join("home/escape")).unwrap();
        symlink(root.join("outside/secret"), root.join("home/secret")).unwrap();
        symlink(root.join("nowhere/dir"), root.join("home/dangling")).unwrap();
        symlink(root.join("home"), root.join("alias")).unwrap();
        let a = allowed(
            &[root.join("home").to_str().unwrap()],
            &[root.join("home").to_str().unwrap()],
        );
        assert!(!home_ok(&a, &root.join("home/escape/f")));
        assert!(!home_ok(&a, &root.join("home/escape/new/f")));
        assert!(!home_ok(&a, &root.join("home/dangling/f")));
        let secret = root.join("home/secret");
        assert!(a.check_import(secret.to_str().unwrap(), true).is_err());
        // A symlink into an allowed directory is where it points: allowed.
        assert!(home_ok(&a, &root.join("alias/f")));
        // An allowed directory named through a symlink allows what it points to.
        let b = allowed(&[root.join("alias").to_str().unwrap()], &[]);
        assert!(home_ok(&b, &root.join("home/f")));
        assert!(!home_ok(&b, &root.join("outside/f")));
    }

    #[test]
    fn s3_homes_match_the_bucket_and_the_prefix_by_parts() {
        let a = allowed(&["s3://bkt/runs", "s3://open"], &[]);
        assert!(a.check_home("s3://bkt/runs/a/out.bin", true).is_ok());
        assert!(a.check_home("s3://open/any/key", true).is_ok());
        for refused in [
            "s3://bkt/runs2/out.bin",
            "s3://bkt/runs",
            "s3://bkt/other/out.bin",
            "s3://bkt/runs/../other",
            "s3://bkt2/runs/out.bin",
            "s3://openx/key",
        ] {
            let e = a.check_home(refused, true).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Auth, "{refused}");
        }
        // A file home is not under an S3 place, nor the reverse.
        assert!(a.check_home("/bkt/runs/x", true).is_err());
        let d = allowed(&["/data"], &[]);
        assert!(d.check_home("s3://data/x", true).is_err());
    }

    #[test]
    fn unset_lists_leave_the_deployment_user_free_and_refuse_others() {
        let a = AllowedPaths::default();
        assert!(a.check_home("/anywhere/out.bin", true).is_ok());
        assert!(a.check_home("s3://any/key", true).is_ok());
        assert!(a.check_import("/etc/passwd", true).is_ok());
        says(
            a.check_home("/anywhere/out.bin", false).unwrap_err(),
            ErrorKind::Auth,
            &[
                "only the deployment's user",
                "`access.homes` in ROOT/pdcx.toml",
            ],
        );
        says(
            a.check_import("/etc/passwd", false).unwrap_err(),
            ErrorKind::Auth,
            &["`access.import_paths` in ROOT/pdcx.toml (or PDCX_IMPORT_PATHS)"],
        );
        // Listed: the deployment's user is held to them too.
        let l = allowed(&["/data/home"], &["/data/in"]);
        assert!(l.check_home("/etc/out.bin", true).is_err());
        assert!(l.check_import("/etc/passwd", true).is_err());
    }
}
