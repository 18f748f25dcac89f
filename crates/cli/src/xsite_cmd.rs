//! `pdcx remote`, `pdcx gateway`, `pdcx push`, `pdcx pull`: linked deployments.

use anyhow::{anyhow, bail, Context, Result};
use pdcx_xsite::{gateway, site, transfer};
use std::path::Path;
use std::sync::Arc;

pub const REMOTE_EXAMPLES: &str = "\
LINKING TWO SITES (hpc and cloud), once:
  cloud$ pdcx remote init                 # this site's TLS identity; prints its fingerprint
  cloud$ pdcx remote token hpc            # a token for site hpc; prints it once
  cloud$ pdcx gateway --site cloud --listen 0.0.0.0:7070 &   # default: 127.0.0.1 only
  hpc$   pdcx remote add cloud tls://cloud.example.org:7070 --as hpc \\
             --token TOKEN --fingerprint FINGERPRINT
  hpc$   pdcx pull cloud:run/vx --region 0:10,:,: && pdcx push run/vx --to cloud
A push from hpc lands at cloud as hpc/run/vx (site hpc's own names there), unless cloud ran
  cloud$ pdcx remote grant hpc run/           # names under run/ (or one name: run/vx)";

pub const MOVE_EXAMPLES: &str = "\
EXAMPLES:
  pdcx pull cloud:run/vx                        # the whole object
  pdcx pull cloud:run/vx --region 0:16,100:164,: --as vx-box
  pdcx push run/vx --region 0:10,:,: --to cloud --streams 8
  pdcx pull cloud:run/vx --step 1,20,20           # downsampled x20: object run/vx@step1x20x20
  pdcx pull cloud:run/vx --where 'run/vx>0.95'     # the hits only: run/vx@where/{coords,values}
  pdcx push run/vx --region 0:10,:,: --to s3://bucket/shared   # S3 as a meeting point, then
  pdcx pull s3://bucket/shared/run/vx.pdcxb                    # at the other site
A transfer killed midway is resumed by running the same command again: only the chunks
still missing move. Nothing is visible under the object's name until every chunk has arrived
and was verified; then the object carries tags xsite.source and xsite.regions.";

pub fn init(root: &Path) -> Result<u8> {
    let (id, made) = site::init(root).map_err(|e| anyhow!("{e}"))?;
    let fp = id.fingerprint().map_err(|e| anyhow!("{e}"))?;
    if made {
        eprintln!(
            "made this site's TLS identity in {}",
            site::dir(root).display()
        );
    }
    println!("fingerprint {fp}");
    Ok(0)
}

pub fn token(root: &Path, peer: &str) -> Result<u8> {
    let t = site::issue_token(root, peer).map_err(|e| anyhow!("{e}"))?;
    eprintln!("give this token to site {peer} (shown once; a new one replaces it):");
    println!("{t}");
    Ok(0)
}

pub fn add(
    root: &Path,
    name: &str,
    url: &str,
    token: &str,
    fingerprint: &str,
    as_site: &str,
) -> Result<u8> {
    site::add_remote(
        root,
        name,
        site::Remote {
            url: url.to_string(),
            token: token.to_string(),
            fingerprint: fingerprint.to_string(),
            as_site: as_site.to_string(),
        },
    )
    .map_err(|e| anyhow!("{e}"))?;
    // Check the link now rather than at the first transfer.
    let r = site::remote(root, name).map_err(|e| anyhow!("{e}"))?;
    match transfer::Link::connect(&r) {
        Ok(l) => eprintln!(
            "linked: {name} ({}) answers as site {}",
            r.url, l.remote_site
        ),
        Err(e) => eprintln!("added {name}, but it does not answer yet: {e}"),
    }
    Ok(0)
}

pub fn ls(root: &Path) -> Result<u8> {
    let r = site::load_remotes(root).map_err(|e| anyhow!("{e}"))?;
    for (name, remote) in &r.sites {
        println!(
            "{name}\t{}\tas {}\tfingerprint {}",
            remote.url, remote.as_site, remote.fingerprint
        );
    }
    Ok(0)
}

pub fn rm(root: &Path, name: &str) -> Result<u8> {
    let mut r = site::load_remotes(root).map_err(|e| anyhow!("{e}"))?;
    if r.sites.remove(name).is_none() {
        bail!("no remote site {name:?}");
    }
    site::save_remotes(root, &r).map_err(|e| anyhow!("{e}"))?;
    Ok(0)
}

pub fn grant(root: &Path, peer: &str, names: &[String], revoke: bool) -> Result<u8> {
    let now = site::grant(root, peer, names, revoke).map_err(|e| anyhow!("{e}"))?;
    if now.is_empty() {
        eprintln!("site {peer} pushes only under {peer}/ here");
    } else {
        eprintln!(
            "site {peer} may push under {peer}/ and to: {}",
            now.join(" ")
        );
    }
    Ok(0)
}

pub fn gateway(root: &Path, site_name: &str, listen: Option<&str>) -> Result<u8> {
    use pdcx_core::config::GATEWAY_LISTEN;
    // Loopback unless asked: a gateway is a door into the deployment.
    let listen = listen
        .map(str::to_string)
        .or_else(|| GATEWAY_LISTEN.text())
        .unwrap_or_else(|| GATEWAY_LISTEN.default.to_string());
    let client = crate::common::connect(root)?;
    let gw = gateway::Gateway::new(root, site_name, client).map_err(|e| anyhow!("{e}"))?;
    let listener = gateway::bind(&listen).map_err(|e| anyhow!("{e}"))?;
    let addr = listener.local_addr().context("gateway address")?;
    // The address on stdout (a port of 0 picks one): scripts read it.
    println!("gateway of site {site_name} listening on {addr}");
    let l = gw.limits();
    eprintln!(
        "gateway: at most {} connections; {} s to authenticate, {} s read/write timeout after",
        l.max_connections,
        l.auth_timeout.as_secs(),
        l.io_timeout.as_secs()
    );
    if addr.ip().is_loopback() {
        eprintln!("gateway: on loopback only; other sites reach it with --listen ADDRESS:PORT");
    }
    use std::io::Write;
    std::io::stdout().flush().ok();
    Arc::new(gw).serve(listener).map_err(|e| anyhow!("{e}"))?;
    Ok(0)
}

fn report(what: &str, r: &transfer::Report) {
    let earlier = r.chunks - r.moved_chunks;
    let resumed = if earlier > 0 {
        format!(" ({earlier} were there from an earlier attempt)")
    } else {
        String::new()
    };
    eprintln!(
        "{what}: {} of {} chunks moved, {:.1} MiB{resumed}; {:.1} MiB published and verified in {:.2} s",
        r.moved_chunks,
        r.chunks,
        r.moved_bytes as f64 / 1048576.0,
        r.published_bytes as f64 / 1048576.0,
        r.seconds
    );
}

/// One line on what a `--where` transfer moved.
fn where_report(what: &str, verb: &str, r: &transfer::WhereReport) {
    let objects = if r.objects.is_empty() {
        "nothing".to_string()
    } else {
        r.objects.join(" and ")
    };
    eprintln!(
        "{what}: {} hits, {:.1} MiB moved, {verb} as {objects} in {:.2} s",
        r.hits,
        r.moved_bytes as f64 / 1048576.0,
        r.seconds
    );
}

pub fn pull(
    root: &Path,
    from: &str,
    region: Option<&str>,
    as_name: Option<&str>,
    where_: Option<&str>,
    opts: &transfer::Options,
) -> Result<u8> {
    let (site_name, object) = from
        .split_once(':')
        .filter(|(s, o)| !s.is_empty() && !o.is_empty())
        .ok_or_else(|| anyhow!("pull takes SITE:OBJECT, e.g. cloud:run/vx (got {from:?})"))?;
    if from.starts_with("s3://") {
        if where_.is_some() || region.is_some() || as_name.is_some() || opts.step.is_some() {
            bail!("a pull from s3:// takes the bundle as it was pushed (no --region, --step, --where or --as)");
        }
        let client = crate::common::connect(root)?;
        let (items, bytes) =
            pdcx_xsite::meeting::pull(&client, from).map_err(|e| anyhow!("{e}"))?;
        eprintln!(
            "pull {from}: {items} objects, {:.1} MiB verified and published",
            bytes as f64 / 1048576.0
        );
        return Ok(0);
    }
    let client = crate::common::connect(root)?;
    if let Some(cond) = where_ {
        let r = transfer::pull_where(&client, root, site_name, object, cond, region, as_name)
            .map_err(|e| anyhow!("{e}"))?;
        where_report(&format!("pull {from} where {cond}"), "received", &r);
        return Ok(0);
    }
    let r = transfer::pull(&client, root, site_name, object, region, as_name, opts)
        .map_err(|e| anyhow!("{e}"))?;
    report(&format!("pull {from}"), &r);
    Ok(0)
}

pub fn push(
    root: &Path,
    object: &str,
    region: Option<&str>,
    to: &str,
    where_: Option<&str>,
    opts: &transfer::Options,
) -> Result<u8> {
    let client = crate::common::connect(root)?;
    if let Some(cond) = where_ {
        if to.starts_with("s3://") {
            bail!("a push to s3:// moves a region (no --where)");
        }
        let r = transfer::push_where(&client, root, object, cond, region, to, opts)
            .map_err(|e| anyhow!("{e}"))?;
        where_report(
            &format!("push {object} where {cond} to {to}"),
            "published",
            &r,
        );
        return Ok(0);
    }
    if to.starts_with("s3://") {
        if opts.step.is_some() {
            bail!("a push to s3:// moves a region (no --step)");
        }
        let site = this_site();
        let (key, bytes) = pdcx_xsite::meeting::push(&client, object, region, &site, to)
            .map_err(|e| anyhow!("{e}"))?;
        eprintln!(
            "push {object}: {:.1} MiB as the bundle {key} (site {site}); the other site runs `pdcx pull {key}`",
            bytes as f64 / 1048576.0
        );
        return Ok(0);
    }
    let r = transfer::push(&client, root, object, region, to, opts).map_err(|e| anyhow!("{e}"))?;
    report(&format!("push {object} to {to}"), &r);
    Ok(0)
}

/// `pdcx export --bundle FILE OBJ... [--region SPEC] [--site NAME]` and `pdcx import FILE`
/// of a bundle; None when the arguments are not about a bundle (HDF5 then).
pub fn bundle(import: bool, root: Option<&Path>, args: &[String]) -> Result<Option<u8>> {
    use pdcx_xsite::bundle;
    // `--root DIR` may come after the files (the trailing arguments hold it then).
    let mut rest = Vec::new();
    let mut root = root.map(Path::to_path_buf);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--root" {
            root = Some(
                it.next()
                    .ok_or_else(|| anyhow!("--root needs a directory"))?
                    .into(),
            );
        } else if let Some(r) = a.strip_prefix("--root=") {
            root = Some(r.into());
        } else {
            rest.push(a.clone());
        }
    }
    let args = &rest[..];
    let root = root.as_deref();
    if import {
        let files: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
        if files.is_empty()
            || !files
                .iter()
                .all(|f| bundle::is_bundle(Path::new(f.as_str())))
        {
            return Ok(None);
        }
        if files.len() != args.len() {
            bail!("pdcx import of a bundle takes only bundle files (no options)");
        }
        let root = crate::require_root(root.map(Path::to_path_buf))?;
        let client = crate::common::connect(&root)?;
        for f in files {
            let (items, bytes) =
                bundle::import(&client, Path::new(f.as_str())).map_err(|e| anyhow!("{f}: {e}"))?;
            eprintln!(
                "imported {f}: {items} objects, {:.1} MiB verified and published",
                bytes as f64 / 1048576.0
            );
        }
        return Ok(Some(0));
    }
    if !args
        .iter()
        .any(|a| a == "--bundle" || a.starts_with("--bundle="))
    {
        return Ok(None);
    }
    let (mut file, mut region, mut site, mut names) =
        (None, None, "bundle".to_string(), Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| -> Result<String> {
            match a.split_once('=') {
                Some((_, v)) => Ok(v.to_string()),
                None => it
                    .next()
                    .cloned()
                    .ok_or_else(|| anyhow!("{flag} needs a value")),
            }
        };
        match a.split('=').next().unwrap_or("") {
            "--bundle" => file = Some(value("--bundle")?),
            "--region" => region = Some(value("--region")?),
            "--site" => site = value("--site")?,
            "-h" | "--help" => {
                println!("{BUNDLE_HELP}");
                return Ok(Some(0));
            }
            x if x.starts_with('-') => {
                bail!("pdcx export --bundle: unknown option {x}\n\n{BUNDLE_HELP}")
            }
            _ => names.push(a.clone()),
        }
    }
    let file = file.ok_or_else(|| anyhow!("--bundle needs a file name"))?;
    let root = crate::require_root(root.map(Path::to_path_buf))?;
    let client = crate::common::connect(&root)?;
    let (items, bytes) =
        bundle::export(&client, &names, region.as_deref(), &site, Path::new(&file))
            .map_err(|e| anyhow!("{e}"))?;
    eprintln!(
        "wrote {file}: {items} objects, {:.1} MiB with checksums",
        bytes as f64 / 1048576.0
    );
    Ok(Some(0))
}

const BUNDLE_HELP: &str = "\
pdcx export --bundle FILE OBJ... [--region SPEC] [--site NAME]
  Writes the objects (or SPEC of each: one item per dim, START:END, : or INDEX) with their
  metadata and checksums into one file, for a site no link reaches. NAME is this site's name
  in the objects' provenance at the other site (default \"bundle\").
pdcx import FILE
  At the other site: checks the whole bundle, then receives every object like a pull (a
  stopped import resumes; nothing is visible until an object is complete and verified).";

/// This site's name in the provenance of what it leaves at a meeting point: `PDCX_SITE`, else
/// the host name (characters a site name may not have become '-').
fn this_site() -> String {
    let raw = pdcx_core::config::SITE.text().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map_or_else(|_| "site".into(), |h| h.trim().to_string())
    });
    let s: String = raw
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if s.is_empty() {
        "site".into()
    } else {
        s
    }
}
