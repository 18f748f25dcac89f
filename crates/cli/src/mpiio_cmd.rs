//! `pdcx run` (start an unmodified MPI-IO program with its output logged by pdcx) and the
//! home-copy side of `pdcx flush` and `pdcx show`.

use crate::common::{connect, human_bytes, iso8601, msg, print_table};
use anyhow::{anyhow, bail, Result};
use pdcx_client::Client;
use pdcx_core::protocol::VersionInfo;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The preload library's file name.
pub const LIB_NAME: &str = "libpdcx_mpiio.so";

/// Where preload library `name` is: `$PDCX_LIB_DIR`, next to this `pdcx`, or in `../lib` of
/// it (an install under a prefix).
pub fn find_library(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = pdcx_core::config::LIB_DIR.path() {
        dirs.push(d);
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(d) = exe.parent() {
            dirs.push(d.to_path_buf());
            dirs.push(d.join("../lib"));
        }
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// `LD_PRELOAD` with `lib` first and what the environment already preloads after it.
pub fn preload_with(lib: &Path) -> OsString {
    let mut preload = lib.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    preload
}

/// Only the job's first process prints the run's one-line messages (every rank runs
/// `pdcx run`).
fn first_rank() -> bool {
    ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"]
        .iter()
        .find_map(|v| std::env::var(v).ok())
        .is_none_or(|r| r.trim() == "0")
}

fn absolute(p: &Path) -> Result<PathBuf> {
    let p = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()?.join(p)
    };
    // Lexically: `..` would let a name escape the prefix.
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    Ok(out)
}

/// `pdcx run --prefix DIR --home HOME -- PROGRAM ARGS`: checks the setup, sets the preload
/// and its environment, and replaces this process with the program. A setup that cannot
/// log (no library, no server, a bad prefix) is reported in one line and the program runs
/// with its output written directly to the home (`redirect`), never silently elsewhere.
pub fn run(
    root: Option<&Path>,
    prefix: &Path,
    home: &str,
    mode: &str,
    program: &[OsString],
) -> Result<i32> {
    let Some((prog, args)) = program.split_first() else {
        bail!("nothing to run: give the program after `--` (pdcx run --prefix DIR --home DIR -- ./app)");
    };
    if !["log", "redirect", "off"].contains(&mode) {
        bail!("--mode must be log, redirect or off, not {mode:?}");
    }
    let prefix = absolute(prefix)?;
    let home_s3 = home.starts_with("s3://");
    let home_dir = if home_s3 {
        let rest = &home["s3://".len()..];
        if rest.is_empty() || rest.starts_with('/') {
            bail!("--home {home:?}: an S3 home is s3://BUCKET[/PREFIX]");
        }
        None
    } else {
        let d = absolute(Path::new(home))?;
        std::fs::create_dir_all(&d).map_err(|e| anyhow!("--home {}: {e}", d.display()))?;
        Some(d)
    };
    if home_dir.as_deref() == Some(prefix.as_path()) {
        bail!("--home and --prefix are the same directory; the home must be where the files end up, the prefix where the program writes them");
    }
    let mut mode = mode.to_string();
    let mut why = None;
    if let Err(e) = std::fs::create_dir_all(&prefix) {
        // Nowhere to put placeholders: the library cannot log, the program may still run
        // (and report its own error for the path, as it would without pdcx).
        why = Some(format!("--prefix {}: {e}", prefix.display()));
    }
    let lib = find_library(LIB_NAME);
    if lib.is_none() && why.is_none() {
        why = Some(format!(
            "{LIB_NAME} not found (next to pdcx, in ../lib or $PDCX_LIB_DIR)"
        ));
    }
    let root = match root {
        Some(r) => Some(r.to_path_buf()),
        None => pdcx_core::config::ROOT.path(),
    };
    if mode == "log" && why.is_none() {
        match &root {
            None => why = Some("no deployment (--root or PDCX_ROOT)".into()),
            Some(r) => {
                if prefix.starts_with(r) {
                    why = Some(format!(
                        "--prefix {} is inside the deployment root {}",
                        prefix.display(),
                        r.display()
                    ));
                } else if let Err(e) = Client::connect(Some(r))
                    .and_then(|c| (0..c.size()).try_for_each(|rank| c.stats(rank).map(|_| ())))
                {
                    why = Some(format!(
                        "no pdcx server reachable at {} ({})",
                        r.display(),
                        e.message
                    ));
                }
            }
        }
    }
    if let Some(w) = &why {
        if mode == "log" {
            mode = "redirect".into();
        }
        if first_rank() {
            let dest = match &home_dir {
                Some(d) if lib.is_some() => format!("directly to {}", d.display()),
                _ => format!("directly into {} (not copied to {home})", prefix.display()),
            };
            eprintln!("pdcx run: {w}; writing {}/* {dest}", prefix.display());
        }
    }
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args);
    if let Some(lib) = &lib {
        cmd.env("LD_PRELOAD", preload_with(lib));
        cmd.env("PDCX_MPIIO_PREFIX", &prefix);
        cmd.env(
            "PDCX_MPIIO_HOME",
            home_dir.as_ref().map_or_else(
                || home.trim_end_matches('/').into(),
                |d| d.clone().into_os_string(),
            ),
        );
        cmd.env("PDCX_MPIIO_MODE", &mode);
        if let Some(r) = &root {
            cmd.env("PDCX_ROOT", r);
        }
    }
    let e = cmd.exec();
    bail!("cannot run {}: {e}", prog.to_string_lossy())
}

/// Whether a version still has to reach its home.
fn pending(v: &VersionInfo) -> bool {
    v.state == "sealed" || v.state == "writing"
}

/// The home-copy part of `pdcx flush`: waits until no byte-stream version is waiting for
/// its home copy, with a progress line, then names the files it waited for; fails after
/// `stall` seconds without progress, naming each pending version and its last error.
pub fn wait_homes(client: &Client, stall: u64, quiet: bool) -> Result<()> {
    let start = Instant::now();
    let mut last_progress = Instant::now();
    let mut last_left = usize::MAX;
    let mut shown = false;
    // Each file (its home) that had a version still to copy while we looked.
    let mut waited: std::collections::BTreeSet<String> = Default::default();
    loop {
        let all = client.all_versions().map_err(msg)?;
        let left: Vec<&VersionInfo> = all.iter().filter(|v| pending(v)).collect();
        waited.extend(left.iter().map(|v| v.home.clone()));
        if left.is_empty() {
            if shown {
                eprintln!();
            }
            let done = all.iter().filter(|v| v.state == "done").count();
            let secs = start.elapsed().as_secs_f64();
            if waited.is_empty() {
                println!("homes: no file was waiting for its home copy ({done} versions home)");
            } else {
                println!(
                    "homes: waited {secs:.1} s for {} files ({done} versions home):",
                    waited.len()
                );
                for home in &waited {
                    println!("  {home}");
                }
            }
            let failed: Vec<String> = all
                .iter()
                .filter(|v| v.state == "failed")
                .map(|v| format!("{} e{}: {}", v.name, v.epoch, v.error))
                .collect();
            if !failed.is_empty() {
                bail!("home copies failed:\n  {}", failed.join("\n  "));
            }
            return Ok(());
        }
        let bytes: u64 = left.iter().map(|v| v.size).sum();
        if !quiet {
            eprint!(
                "\rhomes: {} versions ({}) being copied, e.g. {} e{}      ",
                left.len(),
                human_bytes(bytes),
                left[0].name,
                left[0].epoch
            );
            let _ = std::io::stderr().flush();
            shown = true;
        }
        if left.len() < last_left {
            last_left = left.len();
            last_progress = Instant::now();
        } else if last_progress.elapsed() >= Duration::from_secs(stall) {
            if shown {
                eprintln!();
            }
            let lines: Vec<String> = left
                .iter()
                .map(|v| {
                    format!(
                        "{} e{} -> {} ({}{})",
                        v.name,
                        v.epoch,
                        v.home,
                        v.state,
                        if v.error.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", v.error)
                        }
                    )
                })
                .collect();
            bail!(
                "home copies made no progress for {stall} s:\n  {}\nThe data is safe in the servers' logs; they keep retrying.",
                lines.join("\n  ")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `pdcx show` of a byte stream: its versions and where each is.
pub fn print_versions(root: &Path, id: u64) -> Result<()> {
    let client = connect(root)?;
    let v = client.bs_versions(id).map_err(msg)?;
    if v.is_empty() {
        println!("versions: none sealed yet (written data is in the log)");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = v
        .iter()
        .map(|v| {
            vec![
                v.epoch.to_string(),
                human_bytes(v.size),
                if v.base {
                    format!("{} (home only)", v.state)
                } else {
                    v.state.clone()
                },
                iso8601(v.sealed_at),
                if v.done_at > 0.0 {
                    iso8601(v.done_at)
                } else {
                    "-".into()
                },
                v.home.clone(),
                v.error.clone(),
            ]
        })
        .collect();
    print_table(
        &[
            "EPOCH",
            "SIZE",
            "STATE",
            "SEALED",
            "HOME COPY",
            "HOME",
            "ERROR",
        ],
        &rows,
    );
    Ok(())
}

/// `pdcx recover`: after a crash, finishes every interrupted home copy from the servers'
/// logs. Starts the local deployment first when no server answers (each server resumes its
/// copies as it starts), then waits like `pdcx flush` and reports the recovery throughput.
/// Running it again does nothing more.
pub fn recover(root: &Path, stall: u64, quiet: bool) -> Result<()> {
    let up = Client::connect(Some(root))
        .and_then(|c| (0..c.size()).try_for_each(|r| c.stats(r).map(|_| ())))
        .is_ok();
    if !up {
        let n = crate::daemon::servers_on_disk(root);
        if n == 0 {
            bail!(
                "nothing to recover: {} holds no pdcx server data",
                root.display()
            );
        }
        eprintln!(
            "recover: starting the {n} servers of {} (each resumes its copies)",
            root.display()
        );
        crate::daemon::start(root, n, 256, "127.0.0.1", None)?;
    }
    let client = connect(root)?;
    let start = Instant::now();
    let todo: Vec<VersionInfo> = client
        .all_versions()
        .map_err(msg)?
        .into_iter()
        .filter(pending)
        .collect();
    wait_homes(&client, stall, quiet)?;
    let bytes: u64 = todo.iter().map(|v| v.size).sum();
    let secs = start.elapsed().as_secs_f64().max(1e-3);
    println!(
        "recovered: {} versions, {} in {secs:.2} s ({}/s)",
        todo.len(),
        human_bytes(bytes),
        human_bytes((bytes as f64 / secs) as u64)
    );
    Ok(())
}

/// `pdcx ls`: the byte streams among `objects` (files written under `pdcx run`) with their
/// last version, its state and home, and whether writes after it are waiting for a
/// consistency point.
pub fn print_streams(client: &Client, objects: &[pdcx_core::ObjectMeta]) -> Result<()> {
    let all = client.all_versions().map_err(msg)?;
    let rows: Vec<Vec<String>> = objects
        .iter()
        .filter(|o| o.is_byte_stream())
        .map(|o| {
            let mine: Vec<&VersionInfo> = all.iter().filter(|v| v.id == o.id).collect();
            let last = mine.last();
            let done = mine.iter().rev().find(|v| v.state == "done");
            vec![
                o.name.clone(),
                human_bytes(o.dims[0]),
                last.map_or("-".into(), |v| format!("e{} {}", v.epoch, v.state)),
                done.map_or("-".into(), |v| {
                    let only = if v.base { " (log freed)" } else { "" };
                    format!("e{} {}{only}", v.epoch, human_bytes(v.size))
                }),
                last.map_or("-".into(), |v| v.home.clone()),
            ]
        })
        .collect();
    print_table(
        &[
            "FILE (BYTE STREAM)",
            "SIZE NOW",
            "LAST VERSION",
            "AT HOME",
            "HOME",
        ],
        &rows,
    );
    Ok(())
}
