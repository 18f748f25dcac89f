//! `pdcx tag`: set or delete an object's tags, and name a version (`versions_cmd`).

use crate::commands::{parse_tag, tags_str};
use crate::common::{connect, msg, resolve};
use anyhow::{anyhow, bail, Result};
use pdcx_core::model::Tags;
use pdcx_core::protocol::TagTarget;
use std::path::Path;

pub fn tag(
    root: &Path,
    what: &str,
    set: &[String],
    delete: &[String],
    version: Option<&str>,
    at: Option<u64>,
) -> Result<()> {
    if set.is_empty() && delete.is_empty() && version.is_none() {
        bail!("nothing to do: give KEY=VALUE pairs to set, --delete KEY or --version NAME");
    }
    let tags: Tags = set.iter().map(|t| parse_tag(t)).collect::<Result<_>>()?;
    let client = connect(root)?;
    let o = resolve(&client, what)?;
    if let Some(name) = version {
        let v = crate::versions_cmd::name_version(&client, &o, name, at)?;
        eprintln!("{}: version {v} named {name}", o.name);
    }
    if !tags.is_empty() {
        client
            .put_tags(TagTarget::Object(o.id), tags)
            .map_err(msg)?;
    }
    for key in delete {
        client
            .delete_tag(TagTarget::Object(o.id), key)
            .map_err(|e| anyhow!("deleting tag {key:?} of {}: {}", o.name, e.message))?;
    }
    let o = client.get_object(o.id).map_err(msg)?;
    println!("{}: {}", o.name, tags_str(&o.tags));
    Ok(())
}
