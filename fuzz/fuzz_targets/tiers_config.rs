//! `ROOT/pdcx.toml` (tiers, flush, log and shard settings) with `PDCX_TIER_*` overrides, and
//! the size syntax ("64MiB", "1.5GB").
//!
//! Input: `ENV\0TOML`, ENV being `KEY=VALUE` lines (without `\0` the whole input is the TOML).
//! Properties: parsing never panics; an accepted config, written back as TOML (when it can be),
//! parses again, without the environment, to the same value; sizes are never negative or NaN.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pdcx_tiers::{parse_size, DeploymentConfig};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (env, toml_text) = match text.split_once('\0') {
        Some((e, t)) => (e, t),
        None => ("", text),
    };
    let env: Vec<(String, String)> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for (_, v) in &env {
        let _ = parse_size(v);
    }
    let _ = parse_size(toml_text);
    let Ok(cfg) = DeploymentConfig::parse(toml_text, env) else {
        return;
    };
    for t in &cfg.tiers {
        assert!(cfg.tier(&t.name).is_some());
    }
    let _ = (cfg.shard.objects_per_shard(), cfg.shard.max_shard_bytes());
    // TOML integers are i64: a size above i64::MAX cannot be written back, which is fine.
    if let Ok(back) = toml::to_string(&cfg) {
        let again = DeploymentConfig::parse(&back, Vec::new())
            .unwrap_or_else(|e| panic!("re-parse of {back:?} failed: {e}"));
        assert_eq!(
            again, cfg,
            "config changed through a TOML round trip: {back}"
        );
    }
});
