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
    if o.is_byte_stream() {
        bail!(
            "{} is a byte stream: its versions are its epochs (`pdcx show` lists them), which are kept by the home copy",
            o.name
        );
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
