//! `pdcx rm NAME` and `pdcx rm -r CONTAINER`: removing arrays (objects) and containers, as
//! `rm` and `rm -r` remove files and directories. (`pdcx rm pdcx://...` files: `files_cmd`.)

use crate::common::{connect, human_bytes, msg, resolve};
use anyhow::{anyhow, bail, Result};
use pdcx_client::Client;
use pdcx_core::ErrorKind;
use std::path::Path;

/// What one name given to `pdcx rm` turned out to be.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Removed {
    pub(crate) objects: usize,
    pub(crate) bytes: u64,
    pub(crate) containers: usize,
    /// Members of a removed container that stayed because another container holds them too.
    pub(crate) kept: Vec<String>,
}

fn container_exists(client: &Client, name: &str) -> Result<bool> {
    match client.get_container(name) {
        Ok(_) => Ok(true),
        Err(e) if e.kind == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(msg(e)),
    }
}

/// Removes container `name`: each member object that belongs to no other container is
/// deleted, one that does is only taken out of it (like a file with another hard link).
pub(crate) fn remove_container(client: &Client, name: &str) -> Result<Removed> {
    let mut out = Removed::default();
    for o in client.list_objects(Some(name)).map_err(msg)? {
        if o.containers.iter().any(|c| c != name) {
            out.kept.push(o.name.clone());
            continue; // its membership goes with the container
        }
        client
            .delete_object(o.id)
            .map_err(|e| anyhow!("removing object {}: {}", o.name, e.message))?;
        out.objects += 1;
        out.bytes += o.size_bytes();
    }
    client
        .delete_container(name)
        .map_err(|e| anyhow!("removing container {name}: {}", e.message))?;
    out.containers = 1;
    Ok(out)
}

/// Removes what `name` names: an object; or, with `recursive`, a container and its objects.
/// A name that is both an object and a container is the container with `recursive`.
fn remove_one(client: &Client, name: &str, recursive: bool) -> Result<Removed> {
    let is_container = container_exists(client, name)?;
    if recursive && is_container {
        return remove_container(client, name);
    }
    match resolve(client, name) {
        Ok(o) => {
            client
                .delete_object(o.id)
                .map_err(|e| anyhow!("removing object {}: {}", o.name, e.message))?;
            Ok(Removed {
                objects: 1,
                bytes: o.size_bytes(),
                ..Removed::default()
            })
        }
        Err(_) if is_container => {
            let n = client.list_objects(Some(name)).map_err(msg)?.len();
            bail!("{name} is a container of {n} object(s): remove it and them with -r")
        }
        Err(_) => bail!("no object or container {name} (see `pdcx ls`)"),
    }
}

/// `pdcx rm [-r] NAME...` for objects and containers.
pub fn rm(root: &Path, names: &[String], recursive: bool, quiet: bool) -> Result<()> {
    let client = connect(root)?;
    let mut total = Removed::default();
    for name in names {
        let r = remove_one(&client, name, recursive)?;
        total.objects += r.objects;
        total.bytes += r.bytes;
        total.containers += r.containers;
        total.kept.extend(r.kept);
    }
    if !quiet {
        eprintln!(
            "removed {} object(s), {}{}",
            total.objects,
            human_bytes(total.bytes),
            match total.containers {
                0 => String::new(),
                n => format!(", {n} container(s)"),
            }
        );
        if !total.kept.is_empty() {
            eprintln!(
                "kept {} object(s) that other containers hold too: {}",
                total.kept.len(),
                total.kept.join(", ")
            );
        }
    }
    Ok(())
}
