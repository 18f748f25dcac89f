//! `pdcx resize`: the library does the work (`pdcx_server::resize`); this prints it.

use anyhow::{bail, Result};
use std::path::Path;

pub fn resize(root: &Path, to: u32, json: bool) -> Result<()> {
    if to == 0 || to > 4096 {
        bail!("--to must be 1..=4096 (what `pdcx server start -n` takes), got {to}");
    }
    let mut say = |line: &str| {
        if !json {
            eprintln!("{line}");
        }
    };
    let report = pdcx_server::resize::resize(root, to, &mut say)?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "resized from {} to {} servers: {} objects and {} containers moved, {} name links, {} extents ({} bytes) adopted, {:.1} s",
            report.from,
            report.to,
            report.objects_moved,
            report.containers_moved,
            report.name_links,
            report.extents_adopted,
            report.bytes_adopted,
            report.seconds
        );
    }
    Ok(())
}
