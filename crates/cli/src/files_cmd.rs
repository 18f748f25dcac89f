//! `pdcx cp` and `pdcx ls pdcx://PREFIX/`: files as byte-stream objects, named
//! `pdcx://NAME`, copied to and from local files and listed like directories.

use crate::common::{connect, iso8601, msg};
use crate::interrupt;
use crate::local_dest::{self, LocalWriter};
use anyhow::{bail, Context, Result};
use pdcx_client::file::{normalize, Kind};
use pdcx_client::{Client, FileOptions};
use std::ffi::OsString;
use std::io::Read;
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
    /// `-`: standard input as a source, standard output as a destination.
    Std,
}

fn parse(s: &str) -> Result<Loc> {
    if s == "-" {
        return Ok(Loc::Std);
    }
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
        Loc::Std => false,
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
        Loc::Std => bail!("- (standard input) is not a directory"),
    }
    Ok(out)
}

/// Copies one file; returns its bytes, or `None` when standard output was closed by its
/// reader (the copy stops quietly, as `cat | head` does).
fn copy_one(client: &Client, src: &Loc, dst: &Loc, opts: FileOptions) -> Result<Option<u64>> {
    let mut reader: Box<dyn Read> = match src {
        Loc::Local(p) => {
            Box::new(std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?)
        }
        Loc::Pdcx(n) => Box::new(
            client
                .file_open(n, "rb", opts)
                .map_err(|e| anyhow::anyhow!("{SCHEME}{n}: {}", e.message))?,
        ),
        Loc::Std => Box::new(std::io::stdin().lock()),
    };
    let mut buf = vec![0u8; 8 << 20];
    let mut total = 0u64;
    let fill = |reader: &mut dyn Read, buf: &mut [u8]| -> Result<usize> {
        loop {
            match reader.read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => return r.with_context(|| format!("reading {}", show(src))),
            }
        }
    };
    match dst {
        Loc::Local(_) | Loc::Std => {
            let path = match dst {
                Loc::Local(p) => p.as_path(),
                _ => Path::new("-"),
            };
            let mut w = LocalWriter::open(path)?;
            loop {
                let n = fill(&mut *reader, &mut buf)?;
                if n == 0 {
                    break;
                }
                if let Err(e) = w.write_all(&buf[..n]) {
                    return closed_quietly(e);
                }
                total += n as u64;
            }
            if let Err(e) = w.finish() {
                return closed_quietly(e);
            }
        }
        Loc::Pdcx(n) => {
            // Written whole under a hidden temporary name beside the destination, then
            // renamed: readers never see a half-copied file under the final name.
            let tmp = pdcx_temp_name(n);
            let guard = interrupt::arm(
                interrupt::Temporary::Pdcx {
                    client: client.clone(),
                    name: tmp.clone(),
                },
                format!("{SCHEME}{n}"),
            );
            let mut w = client
                .file_open(&tmp, "wb", opts)
                .map_err(|e| anyhow::anyhow!("{SCHEME}{tmp}: {}", e.message))?;
            loop {
                let k = fill(&mut *reader, &mut buf)?;
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
            drop(w);
            guard.publish(|| client.file_rename(&tmp, n).map_err(msg))?;
        }
    }
    Ok(Some(total))
}

/// `Ok(None)` when `e` is standard output closed by its reader; `e` otherwise.
fn closed_quietly(e: anyhow::Error) -> Result<Option<u64>> {
    if e.is::<local_dest::Closed>() {
        Ok(None)
    } else {
        Err(e)
    }
}

/// A hidden name beside `name` for its copy in progress (unique per process).
fn pdcx_temp_name(name: &str) -> String {
    let (dir, base) = match name.rsplit_once('/') {
        Some((d, b)) => (Some(d), b),
        None => (None, name),
    };
    let tmp = format!(".{base}.pdcx-cp-{}", std::process::id());
    match dir {
        Some(d) => format!("{d}/{tmp}"),
        None => tmp,
    }
}

fn show(l: &Loc) -> String {
    match l {
        Loc::Local(p) => p.display().to_string(),
        Loc::Pdcx(n) => format!("{SCHEME}{n}"),
        Loc::Std => "-".to_string(),
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
        if !matches!(src, Loc::Pdcx(_)) && !matches!(dst_loc, Loc::Pdcx(_)) {
            bail!("neither {s} nor {dst} is a pdcx:// name: use cp(1) for local copies");
        }
        let base = match &src {
            Loc::Local(p) => p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            Loc::Pdcx(n) => n.rsplit('/').next().unwrap_or("").to_string(),
            Loc::Std if dst_is_dir => {
                bail!("- (standard input) has no name: give the destination file, not a directory")
            }
            Loc::Std => String::new(),
        };
        let into = |rel: &str| -> Result<Loc> {
            Ok(match &dst_loc {
                Loc::Local(p) => Loc::Local(p.join(rel)),
                Loc::Pdcx(n) => Loc::Pdcx(normalize(&join(n, rel)).map_err(msg)?),
                Loc::Std => bail!("- (standard output) takes one file, not a directory"),
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
    interrupt::install("cp");
    for (i, (src, dst)) in jobs.iter().enumerate() {
        let Some(n) = copy_one(&client, src, dst, opts)
            .with_context(|| format!("copying {} to {}", show(src), show(dst)))?
        else {
            return Ok(()); // standard output closed by its reader
        };
        bytes += n;
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
        assert_eq!(
            pdcx_temp_name("a/b/c"),
            format!("a/b/.c.pdcx-cp-{}", std::process::id())
        );
        assert_eq!(
            pdcx_temp_name("c"),
            format!(".c.pdcx-cp-{}", std::process::id())
        );
        assert_eq!(parse("pdcx://a//b").unwrap(), Loc::Pdcx("a/b".into()));
        assert_eq!(parse("pdcx://").unwrap(), Loc::Pdcx(String::new()));
        assert_eq!(parse("x/y").unwrap(), Loc::Local("x/y".into()));
        assert_eq!(parse("-").unwrap(), Loc::Std);
        assert_eq!(parse("./-").unwrap(), Loc::Local("./-".into()));
        assert!(parse("pdcx://a/../../b").is_err());
    }
}
