//! `pdcx cp` and `pdcx ls pdcx://PREFIX/`: files as byte-stream objects, named
//! `pdcx://NAME`, copied to and from local files and listed like directories.

use crate::commands::{connect, iso8601, msg};
use anyhow::{bail, Context, Result};
use pdcx_client::file::{normalize, Kind};
use pdcx_client::{Client, FileOptions};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const SCHEME: &str = "pdcx://";

/// One side of a copy.
#[derive(Debug, Clone, PartialEq)]
enum Loc {
    Local(PathBuf),
    /// A canonical object name ("" is the root directory).
    Pdcx(String),
}

fn parse(s: &str) -> Result<Loc> {
    match s.strip_prefix(SCHEME) {
        Some(rest) if rest.trim_matches('/').is_empty() => Ok(Loc::Pdcx(String::new())),
        Some(rest) => Ok(Loc::Pdcx(normalize(rest).map_err(msg)?)),
        None => Ok(Loc::Local(PathBuf::from(s))),
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

fn is_dir(client: &Client, loc: &Loc) -> Result<bool> {
    Ok(match loc {
        Loc::Local(p) => p.is_dir(),
        Loc::Pdcx(n) => matches!(client.file_kind(n).map_err(msg)?, Some(Kind::Dir)),
    })
}

/// Every file under a source, with its path relative to the source (for `-r`).
fn walk(client: &Client, src: &Loc) -> Result<Vec<(Loc, String)>> {
    let mut out = Vec::new();
    match src {
        Loc::Local(dir) => {
            let mut stack = vec![(dir.clone(), String::new())];
            while let Some((d, rel)) = stack.pop() {
                let mut names: Vec<_> = std::fs::read_dir(&d)
                    .with_context(|| format!("listing {}", d.display()))?
                    .collect::<std::io::Result<_>>()?;
                names.sort_by_key(|e| e.file_name());
                for e in names {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let r = join(&rel, &name);
                    if e.file_type()?.is_dir() {
                        stack.push((e.path(), r));
                    } else {
                        out.push((Loc::Local(e.path()), r));
                    }
                }
            }
        }
        Loc::Pdcx(dir) => {
            let prefix = if dir.is_empty() {
                String::new()
            } else {
                format!("{dir}/")
            };
            for f in client.file_list(&prefix).map_err(msg)? {
                if f.name.ends_with('/') {
                    continue; // a directory marker
                }
                let rel = f.name[prefix.len()..].to_string();
                out.push((Loc::Pdcx(f.name), rel));
            }
        }
    }
    Ok(out)
}

/// Copies one file; returns its bytes.
fn copy_one(client: &Client, src: &Loc, dst: &Loc, opts: FileOptions) -> Result<u64> {
    let mut reader: Box<dyn Read> = match src {
        Loc::Local(p) => {
            Box::new(std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?)
        }
        Loc::Pdcx(n) => Box::new(
            client
                .file_open(n, "rb", opts)
                .map_err(|e| anyhow::anyhow!("{SCHEME}{n}: {}", e.message))?,
        ),
    };
    let mut buf = vec![0u8; 8 << 20];
    let mut total = 0u64;
    match dst {
        Loc::Local(p) => {
            if let Some(parent) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            // Written whole under a temporary name, then renamed: never a half-copied file.
            let tmp = p.with_extension("pdcx-cp.tmp");
            let mut w = std::fs::File::create(&tmp)
                .with_context(|| format!("creating {}", tmp.display()))?;
            loop {
                let n = reader.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                w.write_all(&buf[..n])?;
                total += n as u64;
            }
            w.sync_all()?;
            std::fs::rename(&tmp, p).with_context(|| format!("renaming to {}", p.display()))?;
        }
        Loc::Pdcx(n) => {
            let mut w = client
                .file_open(n, "wb", opts)
                .map_err(|e| anyhow::anyhow!("{SCHEME}{n}: {}", e.message))?;
            loop {
                let k = reader.read(&mut buf)?;
                if k == 0 {
                    break;
                }
                w.write(&buf[..k]).map_err(msg)?;
                total += k as u64;
            }
            // A copy is a consistency point: durable on the servers when `cp` returns.
            w.sync()
                .map_err(|e| anyhow::anyhow!("{SCHEME}{n}: {}", e.message))?;
            w.close().map_err(msg)?;
        }
    }
    Ok(total)
}

fn show(l: &Loc) -> String {
    match l {
        Loc::Local(p) => p.display().to_string(),
        Loc::Pdcx(n) => format!("{SCHEME}{n}"),
    }
}

/// `pdcx cp SRC... DST [-r] [-q]`.
pub fn cp(root: &Path, srcs: &[String], dst: &str, recursive: bool, quiet: bool) -> Result<()> {
    let client = connect(root)?;
    let opts = FileOptions::from_env().map_err(msg)?;
    let dst_loc = parse(dst)?;
    let dst_is_dir = dst.ends_with('/') || is_dir(&client, &dst_loc)?;
    if srcs.len() > 1 && !dst_is_dir {
        bail!(
            "copying {} sources: the destination {dst} must be a directory (end it with /)",
            srcs.len()
        );
    }
    let mut jobs: Vec<(Loc, Loc)> = Vec::new();
    for s in srcs {
        let src = parse(s)?;
        if matches!(src, Loc::Local(_)) && matches!(dst_loc, Loc::Local(_)) {
            bail!("neither {s} nor {dst} is a pdcx:// name: use cp(1) for local copies");
        }
        let base = match &src {
            Loc::Local(p) => p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            Loc::Pdcx(n) => n.rsplit('/').next().unwrap_or("").to_string(),
        };
        let into = |rel: &str| -> Result<Loc> {
            Ok(match &dst_loc {
                Loc::Local(p) => Loc::Local(p.join(rel)),
                Loc::Pdcx(n) => Loc::Pdcx(normalize(&join(n, rel)).map_err(msg)?),
            })
        };
        if is_dir(&client, &src)? {
            if !recursive {
                bail!("{s} is a directory: copy it with -r");
            }
            // `cp -r SRC DST/` puts SRC's files under DST/BASE; `cp -r SRC DST` under DST.
            let under = if dst_is_dir && !base.is_empty() {
                base.clone()
            } else {
                String::new()
            };
            for (f, rel) in walk(&client, &src)? {
                jobs.push((f, into(&join(&under, &rel))?));
            }
        } else {
            let target = if dst_is_dir {
                into(&base)?
            } else {
                dst_loc.clone()
            };
            jobs.push((src, target));
        }
    }
    if jobs.is_empty() {
        bail!("nothing to copy");
    }
    let t0 = Instant::now();
    let mut last = Instant::now();
    let mut bytes = 0u64;
    for (i, (src, dst)) in jobs.iter().enumerate() {
        bytes += copy_one(&client, src, dst, opts)
            .with_context(|| format!("copying {} to {}", show(src), show(dst)))?;
        if !quiet && (last.elapsed().as_secs_f64() >= 1.0 || i + 1 == jobs.len()) {
            last = Instant::now();
            let secs = t0.elapsed().as_secs_f64().max(1e-6);
            eprintln!(
                "{} of {} files, {:.1} MiB, {:.1} MiB/s",
                i + 1,
                jobs.len(),
                bytes as f64 / (1 << 20) as f64,
                bytes as f64 / (1 << 20) as f64 / secs
            );
        }
    }
    Ok(())
}

/// `pdcx rm [-r] pdcx://NAME...`.
pub fn rm(root: &Path, paths: &[String], recursive: bool, quiet: bool) -> Result<()> {
    let client = connect(root)?;
    let mut files = 0usize;
    let mut bytes = 0u64;
    for p in paths {
        let Loc::Pdcx(name) = parse(p)? else {
            bail!("{p} is not a pdcx:// name (use rm(1) for local files)");
        };
        match client.file_kind(&name).map_err(msg)? {
            None => bail!("no file or directory {p}"),
            Some(Kind::File(s)) => {
                client.file_remove(&name).map_err(msg)?;
                files += 1;
                bytes += s.size;
            }
            Some(Kind::Dir) if !recursive => bail!("{p} is a directory: remove it with -r"),
            Some(Kind::Dir) => {
                let prefix = if name.is_empty() {
                    String::new()
                } else {
                    format!("{name}/")
                };
                // Files first, then the directory markers, deepest first.
                let mut under = client.file_list(&prefix).map_err(msg)?;
                under.sort_by_key(|f| (f.name.ends_with('/'), std::cmp::Reverse(f.name.len())));
                for f in under {
                    let m = client.open_object(&f.name).map_err(msg)?;
                    client.delete_object(m.id).map_err(msg)?;
                    if !f.name.ends_with('/') {
                        files += 1;
                        bytes += f.size;
                    }
                }
            }
        }
    }
    if !quiet {
        eprintln!(
            "removed {files} files, {:.1} MiB",
            bytes as f64 / (1 << 20) as f64
        );
    }
    Ok(())
}

/// `pdcx ls pdcx://PREFIX/`: the entries directly under a directory prefix (or one file).
pub fn ls(root: &Path, what: &str, json_out: bool) -> Result<()> {
    let client = connect(root)?;
    let Loc::Pdcx(name) = parse(what)? else {
        bail!("{what} is not a pdcx:// name");
    };
    let entries = match client.file_kind(&name).map_err(msg)? {
        None => bail!("no file or directory {what}"),
        Some(Kind::File(s)) => vec![pdcx_client::file::DirEntry {
            name: name.rsplit('/').next().unwrap_or(&name).to_string(),
            stat: Some(s),
        }],
        Some(Kind::Dir) => client.file_dir(&name).map_err(msg)?,
    };
    if json_out {
        let doc: Vec<_> = entries
            .iter()
            .map(|e| match &e.stat {
                Some(s) => serde_json::json!({"name": e.name, "type": "file", "size": s.size, "mtime": s.mtime}),
                None => serde_json::json!({"name": e.name, "type": "dir"}),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    for e in &entries {
        match &e.stat {
            Some(s) => println!("{:>12}  {:20}  {}", s.size, iso8601(s.mtime), e.name),
            None => println!("{:>12}  {:20}  {}/", "-", "", e.name),
        }
    }
    Ok(())
}

/// The CFITSIO driver's file name.
pub const FITS_LIB: &str = "libpdcx_fits.so";

/// `pdcx fits PROGRAM ARGS`: runs an unmodified CFITSIO program with `libpdcx_fits.so`
/// preloaded, so its `pdcx://NAME` files are objects of the deployment at `root`.
pub fn fits_run(root: Option<&Path>, program: &[OsString]) -> Result<u8> {
    let Some((prog, args)) = program.split_first() else {
        bail!("give the program to run: pdcx fits PROGRAM ARGS...");
    };
    let Some(lib) = crate::mpiio_cmd::find_library(FITS_LIB) else {
        bail!(
            "{FITS_LIB} not found (next to pdcx, in ../lib or $PDCX_LIB_DIR): run scripts/setup.sh"
        );
    };
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args)
        .env("LD_PRELOAD", crate::mpiio_cmd::preload_with(&lib));
    if let Some(r) = root {
        cmd.env("PDCX_ROOT", r);
    }
    let e = cmd.exec();
    bail!("cannot run {}: {e}", prog.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations() {
        assert_eq!(parse("pdcx://a//b").unwrap(), Loc::Pdcx("a/b".into()));
        assert_eq!(parse("pdcx://").unwrap(), Loc::Pdcx(String::new()));
        assert_eq!(parse("x/y").unwrap(), Loc::Local("x/y".into()));
        assert!(parse("pdcx://a/../../b").is_err());
    }
}
