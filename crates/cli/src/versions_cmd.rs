//! Versions of N-d objects: `pdcx get --version`, `pdcx tag --version`, and the versions
//! line of `pdcx show`. A version is the object as of one of its writes (its number); the
//! object's tags decide which compaction keeps (`pdcx.keep.last`, `pdcx.keep.seconds`, and
//! the named ones, `pdcx.version.NAME`).

use crate::common::msg;
use anyhow::{anyhow, bail, Result};
use pdcx_client::Client;
use pdcx_core::model::TagValue;
use pdcx_core::protocol::TagTarget;
use pdcx_core::ObjectMeta;

const NAME_PREFIX: &str = "pdcx.version.";

/// The version `spec` names: a number, or a name given by `pdcx tag --version`.
pub fn resolve_version(o: &ObjectMeta, spec: &str) -> Result<u64> {
    if let Ok(n) = spec.parse::<u64>() {
        return Ok(n);
    }
    match o.tags.iter().find(|(k, _)| k.strip_prefix(NAME_PREFIX) == Some(spec)) {
        Some((_, TagValue::Int(n))) if *n >= 0 => Ok(*n as u64),
        Some((k, v)) => bail!("tag {k} of {} is {v:?}, not a version number", o.name),
        None => bail!(
            "{} has no version named {spec:?} (see `pdcx show {}`; give a number or a name set with `pdcx tag --version`)",
            o.name,
            o.name
        ),
    }
}

/// Names version `at` (default: the newest readable) of `o` `name`, so compaction keeps it.
/// Returns its number.
pub fn name_version(client: &Client, o: &ObjectMeta, name: &str, at: Option<u64>) -> Result<u64> {
    if name.is_empty() {
        bail!("a version name must not be empty");
    }
    let v = match at {
        Some(v) => v,
        None => {
            let list = client.versions(o.id).map_err(msg)?;
            *list
                .readable
                .last()
                .ok_or_else(|| anyhow!("{} has no writes yet: nothing to name", o.name))?
        }
    };
    let n = i64::try_from(v).map_err(|_| anyhow!("version {v} is too large"))?;
    client
        .put_tags(
            TagTarget::Object(o.id),
            vec![(format!("{NAME_PREFIX}{name}"), TagValue::Int(n))],
        )
        .map_err(msg)?;
    Ok(v)
}

/// The `versions` line of `pdcx show` (and its JSON): readable versions, names, dropped.
pub fn summary(client: &Client, o: &ObjectMeta) -> Result<(String, serde_json::Value)> {
    let list = client.versions(o.id).map_err(msg)?;
    let named: Vec<(String, u64)> = o
        .tags
        .iter()
        .filter_map(|(k, v)| match (k.strip_prefix(NAME_PREFIX), v) {
            (Some(name), TagValue::Int(n)) if *n >= 0 => Some((name.to_string(), *n as u64)),
            _ => None,
        })
        .collect();
    let mut line = match (list.readable.first(), list.readable.last()) {
        (Some(a), Some(b)) if a != b => {
            format!("{} readable ({a} to {b})", list.readable.len())
        }
        (Some(a), _) => format!("1 readable ({a})"),
        _ => "none written".to_string(),
    };
    if !named.is_empty() {
        let names: Vec<String> = named.iter().map(|(n, v)| format!("{n}={v}")).collect();
        line += &format!("; named {}", names.join(", "));
    }
    if !list.dropped.is_empty() {
        let gone: u64 = list.dropped.iter().map(|(f, t)| t - f).sum();
        line += &format!(
            "; {gone} dropped by compaction (keep more: tags pdcx.keep.last, pdcx.keep.seconds)"
        );
    }
    let json = serde_json::json!({
        "readable": list.readable,
        "named": named.iter().map(|(n, v)| serde_json::json!({"name": n, "version": v})).collect::<Vec<_>>(),
        "dropped": list.dropped,
    });
    Ok((line, json))
}

/// Bytes `pdcx diff --values` reads at most (both versions of every changed region).
const DIFF_VALUES_MAX: u64 = 4 << 30;

/// `pdcx diff OBJ FROM [TO]`: the regions written after version `from` up to `to` (default:
/// the newest), each with the writes in it, and with `values` the elements that differ.
pub fn diff(
    root: &std::path::Path,
    what: &str,
    from: &str,
    to: Option<&str>,
    values: bool,
    json: bool,
) -> Result<()> {
    let client = crate::common::connect(root)?;
    let o = crate::common::resolve(&client, what)?;
    if o.is_byte_stream() {
        bail!(
            "{} is a byte stream: compare its epochs' files instead",
            o.name
        );
    }
    let list = client.versions(o.id).map_err(msg)?;
    let a = resolve_version(&o, from)?;
    let b = match to {
        Some(t) => resolve_version(&o, t)?,
        None => *list
            .readable
            .last()
            .ok_or_else(|| anyhow!("{} has no writes yet", o.name))?,
    };
    if a > b {
        bail!("version {a} is newer than {b}: give the older one first");
    }
    for v in [a, b] {
        if let Some((f, t)) = list.dropped.iter().find(|(f, t)| *f <= v && v < *t) {
            bail!(
                "version {v} of {} was dropped by compaction (versions {f} to {} are gone)",
                o.name,
                t - 1
            );
        }
    }
    // Every change between two readable versions is inside the writes numbered (a, b]: a
    // write there that compaction dropped was hidden by later writes there.
    let mut changed: Vec<(pdcx_core::Region, usize)> = Vec::new();
    for e in client.extents(o.id).map_err(msg)? {
        if e.seq > a && e.seq <= b {
            match changed.iter_mut().find(|(r, _)| *r == e.region) {
                Some((_, n)) => *n += 1,
                None => changed.push((e.region, 1)),
            }
        }
    }
    let elem = o.dtype.size();
    let total: u64 = changed
        .iter()
        .map(|(r, _)| r.byte_len(elem).unwrap_or(u64::MAX))
        .fold(0u64, |s, n| s.saturating_add(n));
    if values && total.saturating_mul(2) > DIFF_VALUES_MAX {
        bail!(
            "--values would read {} of changed regions twice (at most {}): compare a region with `pdcx get --version --region`",
            crate::common::human_bytes(total),
            crate::common::human_bytes(DIFF_VALUES_MAX / 2)
        );
    }
    let mut rows = Vec::new();
    for (region, writes) in &changed {
        let differing = if values {
            let n = usize::try_from(region.byte_len(elem).map_err(msg)?)?;
            let (mut old, mut new) = (vec![0u8; n], vec![0u8; n]);
            client
                .read_version(o.id, region, a, &mut old)
                .map_err(msg)?;
            client
                .read_version(o.id, region, b, &mut new)
                .map_err(msg)?;
            Some(
                old.chunks(elem)
                    .zip(new.chunks(elem))
                    .filter(|(x, y)| x != y)
                    .count() as u64,
            )
        } else {
            None
        };
        rows.push((region.clone(), *writes, differing));
    }
    if json {
        let doc = serde_json::json!({
            "object": o.name, "from": a, "to": b,
            "changed": rows.iter().map(|(r, w, d)| serde_json::json!({
                "offset": r.offset, "count": r.count, "writes": w, "differing": d,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!(
        "{}: {} region(s) written after version {a} up to {b}",
        o.name,
        rows.len()
    );
    if rows.is_empty() {
        return Ok(());
    }
    let header: &[&str] = if values {
        &["REGION", "WRITES", "DIFFERING"]
    } else {
        &["REGION", "WRITES"]
    };
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|(r, w, d)| {
            let mut row = vec![r.to_string(), w.to_string()];
            if let Some(d) = d {
                row.push(d.to_string());
            }
            row
        })
        .collect();
    crate::common::print_table(header, &table);
    Ok(())
}
