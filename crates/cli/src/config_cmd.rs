//! `pdcx server config`: every setting's effective value and where it came from (a flag, the
//! environment, `pdcx.toml`, or the default), from the one declaration in
//! `pdcx_core::config`.

use anyhow::Result;
use pdcx_core::config::{self, ConfigError, Scope, Setting};
use std::path::{Path, PathBuf};

/// One row of the output.
struct Row {
    name: String,
    value: String,
    source: String,
    error: Option<String>,
}

/// Where a setting's effective value comes from: flag, environment, file, default (the first
/// that sets it).
fn resolve(s: &Setting, flags: &[(&Setting, String)], file: &[(String, String)]) -> Row {
    let row = |value: String, source: &str, error: Option<ConfigError>| Row {
        name: s.name.to_string(),
        value,
        source: source.to_string(),
        error: error.map(|e| e.to_string()),
    };
    if let Some((_, v)) = flags.iter().find(|(f, _)| std::ptr::eq(*f, s)) {
        return row(v.clone(), "flag", None);
    }
    if let Some(v) = s.raw() {
        let e = s.check(&v).err();
        return row(v, "env", e);
    }
    if let Some((_, v)) = s
        .toml
        .and_then(|k| file.iter().find(|(key, _)| key.as_str() == k))
    {
        return row(v.clone(), "pdcx.toml", None);
    }
    row(s.shown_default().to_string(), "default", None)
}

/// The config file a server of `root` reads: `PDCX_CONFIG`, else `ROOT/pdcx.toml`.
fn config_file(root: Option<&Path>) -> Option<PathBuf> {
    config::CONFIG
        .path()
        .or_else(|| root.map(|r| r.join("pdcx.toml")))
}

/// Prints the effective configuration; 1 if a value is malformed or the file is refused.
pub fn show(root: Option<&Path>, flags: &[(&Setting, String)], json: bool) -> Result<u8> {
    let path = config_file(root);
    let mut errors: Vec<String> = Vec::new();
    let file = match &path {
        None => Vec::new(),
        Some(p) => match std::fs::read_to_string(p) {
            Ok(text) => pdcx_tiers::config::file_values(&text).unwrap_or_else(|e| {
                errors.push(format!("{}: {}", p.display(), e.message));
                Vec::new()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                errors.push(format!("{}: {e}", p.display()));
                Vec::new()
            }
        },
    };
    let mut rows: Vec<Row> = config::ALL
        .iter()
        .filter(|s| s.scope != Scope::Test && !s.name.starts_with("tier."))
        .map(|s| resolve(s, flags, &file))
        .collect();
    // Tier fields, one row per field the file sets, overridden by PDCX_TIER_<NAME>_<FIELD>.
    for (key, value) in file.iter().filter(|(k, _)| k.starts_with("tier.")) {
        let mut parts = key.splitn(3, '.');
        let (_, name, field) = (parts.next(), parts.next(), parts.next());
        let (Some(name), Some(field)) = (name, field) else {
            continue;
        };
        let var = format!(
            "{}{}_{}",
            config::TIER_ENV_PREFIX,
            name.to_ascii_uppercase().replace('-', "_"),
            field.to_ascii_uppercase()
        );
        let (value, source) = match std::env::var(&var) {
            Ok(v) if !v.trim().is_empty() => (v, "env"),
            _ => (value.clone(), "pdcx.toml"),
        };
        rows.push(Row {
            name: key.clone(),
            value,
            source: source.to_string(),
            error: None,
        });
    }
    errors.extend(rows.iter().filter_map(|r| r.error.clone()));
    let unknown = config::unknown_env_vars();
    if json {
        let settings: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "name": r.name, "value": r.value, "source": r.source, "error": r.error,
                })
            })
            .collect();
        let v = serde_json::json!({
            "config_file": path.as_ref().map(|p| p.display().to_string()),
            "settings": settings,
            "unknown_env": unknown,
            "errors": errors,
        });
        println!("{v}");
    } else {
        if let Some(p) = &path {
            println!("config file: {}", p.display());
        }
        let table: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                let mark = if r.error.is_some() {
                    " (malformed)"
                } else {
                    ""
                };
                vec![
                    r.name.clone(),
                    r.value.clone(),
                    format!("{}{mark}", r.source),
                ]
            })
            .collect();
        crate::common::print_table(&["SETTING", "VALUE", "SOURCE"], &table);
        for e in &errors {
            eprintln!("error: {e}");
        }
    }
    warn_unknown(&unknown);
    Ok(u8::from(!errors.is_empty()))
}

/// Says on stderr which `PDCX_*` variables are no setting.
pub fn warn_unknown(unknown: &[String]) {
    for v in unknown {
        eprintln!(
            "warning: {v} is not a pdcx setting (a typo?) and is ignored; see docs/OPERATIONS.md"
        );
    }
}

/// Before a server starts: malformed server settings are an error naming each; unknown
/// `PDCX_*` variables are a warning (through `warn`).
pub fn check_server_env(warn: impl Fn(&str)) -> Result<()> {
    for v in config::unknown_env_vars() {
        warn(&format!(
            "{v} is not a pdcx setting (a typo?) and is ignored; see docs/OPERATIONS.md"
        ));
    }
    let bad: Vec<String> = config::check_env(&[Scope::Server, Scope::Both])
        .iter()
        .map(ToString::to_string)
        .collect();
    if !bad.is_empty() {
        anyhow::bail!("{}", bad.join("; "));
    }
    Ok(())
}
