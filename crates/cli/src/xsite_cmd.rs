//! `pdcx remote`, `pdcx gateway`, `pdcx push`, `pdcx pull` (issue 13): linked deployments.

use anyhow::{anyhow, bail, Context, Result};
use pdcx_xsite::{gateway, site, transfer};
use std::path::Path;
use std::sync::Arc;

pub const REMOTE_EXAMPLES: &str = "\
LINKING TWO SITES (hpc and cloud), once:
  cloud$ pdcx remote init                 # this site's TLS identity; prints its fingerprint
  cloud$ pdcx remote token hpc            # a token for site hpc; prints it once
  cloud$ pdcx gateway --site cloud --listen 0.0.0.0:7070 &
  hpc$   pdcx remote add cloud tls://cloud.example.org:7070 --as hpc \\
             --token TOKEN --fingerprint FINGERPRINT
  hpc$   pdcx pull cloud:run/vx --region 0:10,:,: && pdcx push run/vx --to cloud";

pub const MOVE_EXAMPLES: &str = "\
EXAMPLES:
  pdcx pull cloud:run/vx                        # the whole object
  pdcx pull cloud:run/vx --region 0:16,100:164,: --as vx-box
  pdcx push run/vx --region 0:10,:,: --to cloud --streams 8
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

pub fn gateway(root: &Path, site_name: &str, listen: &str) -> Result<u8> {
    let client = crate::commands::connect(root)?;
    let gw = gateway::Gateway::new(root, site_name, client).map_err(|e| anyhow!("{e}"))?;
    let listener = gateway::bind(listen).map_err(|e| anyhow!("{e}"))?;
    let addr = listener.local_addr().context("gateway address")?;
    // The address on stdout (a port of 0 picks one): scripts read it.
    println!("gateway of site {site_name} listening on {addr}");
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

pub fn pull(
    root: &Path,
    from: &str,
    region: Option<&str>,
    as_name: Option<&str>,
    opts: &transfer::Options,
) -> Result<u8> {
    let (site_name, object) = from
        .split_once(':')
        .filter(|(s, o)| !s.is_empty() && !o.is_empty())
        .ok_or_else(|| anyhow!("pull takes SITE:OBJECT, e.g. cloud:run/vx (got {from:?})"))?;
    let client = crate::commands::connect(root)?;
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
    opts: &transfer::Options,
) -> Result<u8> {
    let client = crate::commands::connect(root)?;
    let r = transfer::push(&client, root, object, region, to, opts).map_err(|e| anyhow!("{e}"))?;
    report(&format!("push {object} to {to}"), &r);
    Ok(0)
}
