//! The log → tier path: the flusher homes committed extents on the tier placement picks,
//! retires flushed log segments, and reads (also after a restart) come back byte-identical
//! from the tiers. Real directory tiers on disk; the S3 tier has its own tests.

use pdcx_core::model::TagValue;
use pdcx_core::protocol::{Durability, ObjectSpec};
use pdcx_core::{Dtype, Region};
use pdcx_server::engine::Engine;
use pdcx_server::meta::Metadata;
use pdcx_server::tiering::Tiering;
use pdcx_store::LogOptions;
use pdcx_tiers::DeploymentConfig;
use std::path::Path;
use std::sync::Arc;

fn config(dir: &Path, fast_cap: &str) -> DeploymentConfig {
    config_with(dir, fast_cap, "")
}

/// The two-tier config plus `extra` TOML (e.g. a `[shard]` section).
fn config_with(dir: &Path, fast_cap: &str, extra: &str) -> DeploymentConfig {
    let text = format!(
        r#"
[[tier]]
name = "fast"
kind = "local"
path = "{}/fast"
capacity = "{fast_cap}"

[[tier]]
name = "slow"
kind = "shared"
path = "{}/slow"

{extra}
"#,
        dir.display(),
        dir.display()
    );
    DeploymentConfig::parse(&text, Vec::new()).unwrap()
}

fn open(dir: &Path, cfg: &DeploymentConfig) -> (Arc<Metadata>, Engine) {
    let meta = Arc::new(Metadata::open(&dir.join("meta.sqlite"), 0, 1).unwrap());
    let tiering = Tiering::open(cfg, "test-deployment", 0, 1).unwrap();
    let (engine, _, _) = Engine::open_with(
        &dir.join("log"),
        meta.clone(),
        1 << 20,
        LogOptions {
            segment_bytes: 1 << 20,
            ..LogOptions::default()
        },
        tiering,
    )
    .unwrap();
    (meta, engine)
}

fn object(meta: &Metadata, name: &str, n: u64, tags: Vec<(String, TagValue)>) -> u64 {
    let spec = ObjectSpec {
        name: name.into(),
        dims: vec![n],
        dtype: Dtype::Float64,
        fill: None,
        containers: vec![],
        tags,
        creator: "test".into(),
    };
    meta.create_object(&spec).unwrap().id
}

/// The tags placing an object by `pdcx.tier = spec`.
fn tier_tag(spec: &str) -> Vec<(String, TagValue)> {
    vec![("pdcx.tier".into(), TagValue::Str(spec.into()))]
}

/// 16 writes of 64 Ki f64 (512 KiB each) with distinct contents.
fn write_all(engine: &Engine, id: u64) -> Vec<u8> {
    let per = 65_536u64;
    let mut all = Vec::new();
    for k in 0..16u64 {
        let region = Region::new(vec![k * per], vec![per]).unwrap();
        let bytes: Vec<u8> = (0..per)
            .flat_map(|i| ((k * per + i) as f64 * 0.5).to_le_bytes())
            .collect();
        let s = engine.stage(k, id, &region, &bytes).unwrap();
        engine.commit(&[s], Durability::Local).unwrap();
        all.extend_from_slice(&bytes);
    }
    all
}

fn read_all(engine: &Engine, id: u64, n: u64) -> Vec<u8> {
    let mut out = vec![0u8; n as usize * 8];
    engine
        .read(id, &Region::new(vec![0], vec![n]).unwrap(), &mut out)
        .unwrap();
    out
}

#[test]
fn flushed_segments_are_retired_and_reads_come_from_tiers_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "100GiB");
    let n = 16 * 65_536;
    let (expect, id);
    {
        let (meta, engine) = open(dir.path(), &cfg);
        id = object(&meta, "x", n, vec![]);
        expect = write_all(&engine, id);
        let log_before = engine.log_bytes();
        let report = engine.flusher().flush_pass(u64::MAX).unwrap();
        assert_eq!(report.extents, 16);
        assert_eq!(report.bytes, n * 8);
        assert_eq!(report.pending_extents, 0);
        assert!(report.retired_segments >= 4, "{report:?}");
        assert!(engine.log_bytes() < log_before / 2, "log not freed");
        // Partial reads across retired extents use byte ranges on the tier.
        let mut part = vec![0u8; 1000 * 8];
        engine
            .read(
                id,
                &Region::new(vec![60_000], vec![1000]).unwrap(),
                &mut part,
            )
            .unwrap();
        assert_eq!(part, expect[60_000 * 8..61_000 * 8]);
        assert_eq!(read_all(&engine, id, n), expect);
        let tiers: Vec<String> = engine.extents(id).iter().map(|e| e.tier.clone()).collect();
        assert!(
            tiers.iter().all(|t| t == "fast" || t == "log+fast"),
            "{tiers:?}"
        );
    }
    // Restart: retired segments are gone from the log, the homes bring the data back.
    let (_meta, engine) = open(dir.path(), &cfg);
    assert_eq!(read_all(&engine, id, n), expect);
    // Only the active segment is never retired: its extents are in the log and on the tier.
    let tiers: Vec<String> = engine.extents(id).iter().map(|e| e.tier.clone()).collect();
    assert!(
        tiers.iter().filter(|t| *t == "fast").count() >= 12,
        "{tiers:?}"
    );
    assert!(
        tiers.iter().all(|t| t == "fast" || t == "log+fast"),
        "{tiers:?}"
    );
}

#[test]
fn full_fast_tier_spills_and_quota_splits_vertically() {
    let dir = tempfile::tempdir().unwrap();
    // Room for 3 of the 16 extents on the fast tier, which then stays below the 90% that
    // would trigger demotion.
    let cfg = config(dir.path(), "1800KiB");
    let (meta, engine) = open(dir.path(), &cfg);
    let n = 16 * 65_536;
    let spill = object(&meta, "spill", n, vec![]);
    let quota = object(&meta, "quota", n, tier_tag("fast:25%,slow"));
    let a = write_all(&engine, spill);
    engine.flusher().flush_pass(u64::MAX).unwrap();
    let on = |id: u64, tier: &str| {
        engine
            .extents(id)
            .iter()
            .filter(|e| e.tier.ends_with(tier))
            .count()
    };
    assert_eq!((on(spill, "fast"), on(spill, "slow")), (3, 13));
    // Empty the fast tier for the quota object.
    engine.flusher().migrate(spill, "slow").unwrap();
    assert_eq!(on(spill, "slow"), 16);
    let b = write_all(&engine, quota);
    engine.flusher().flush_pass(u64::MAX).unwrap();
    // The quota asks for 4 of 16 on the fast tier; it has room for 3, the 4th spills.
    assert_eq!((on(quota, "fast"), on(quota, "slow")), (3, 13));
    assert_eq!(read_all(&engine, spill, n), a);
    assert_eq!(read_all(&engine, quota, n), b);
}

#[test]
fn full_tiers_demote_cold_extents_and_hot_ones_come_back_up() {
    let dir = tempfile::tempdir().unwrap();
    // The fast tier takes 8 of the 16 extents of 512 KiB.
    let cfg = config(dir.path(), "4MiB");
    let (meta, engine) = open(dir.path(), &cfg);
    let n = 16 * 65_536;
    let id = object(&meta, "x", n, tier_tag("fast"));
    let data = write_all(&engine, id);
    let on_fast = |engine: &Engine| {
        engine
            .extents(id)
            .into_iter()
            .filter(|e| e.tier.ends_with("fast"))
            .map(|e| e.seq)
            .collect::<Vec<_>>()
    };
    engine.flusher().flush_pass(u64::MAX).unwrap();
    // Filled to 100% (> 90%), then demoted below 60%: 4 extents (2 MiB) stay.
    let fast = on_fast(&engine);
    assert_eq!(fast.len(), 4, "{fast:?}");
    assert_eq!(read_all(&engine, id, n), data);
    // Reading one slow extent three times makes it hot: the next pass promotes it, since the
    // fast tier stays below 75% with it.
    let slow = engine
        .extents(id)
        .into_iter()
        .find(|e| e.tier.ends_with("slow"))
        .unwrap();
    let mut buf = vec![0u8; slow.len as usize];
    for _ in 0..3 {
        engine.read(id, &slow.region, &mut buf).unwrap();
    }
    engine.flusher().flush_pass(u64::MAX).unwrap();
    let fast_after = on_fast(&engine);
    assert_eq!(fast_after.len(), 5, "{fast_after:?}");
    assert!(fast_after.contains(&slow.seq));
    assert_eq!(read_all(&engine, id, n), data);
}

#[test]
fn codecs_are_applied_per_extent_at_flush_and_reads_decode() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "100GiB");
    let (meta, engine) = open(dir.path(), &cfg);
    let n = 16 * 65_536;
    let tag = |c: &str| vec![("pdcx.codec".to_string(), TagValue::Str(c.into()))];
    let zstd = object(&meta, "z", n, tag("zstd"));
    let zfp = object(&meta, "f", n, tag("zfp-accuracy:1e-3"));
    let a = write_all(&engine, zstd);
    let b = write_all(&engine, zfp);
    engine.flusher().flush_pass(u64::MAX).unwrap();
    for e in engine.extents(zstd) {
        assert!(e.codec.starts_with("zstd"), "{e:?}");
        assert!(e.stored_len < e.len, "{e:?}");
    }
    assert!(engine
        .extents(zfp)
        .iter()
        .all(|e| e.codec.starts_with("zfp")));
    // Lossless: byte-identical, also for a partial read of a retired, compressed extent.
    assert_eq!(read_all(&engine, zstd, n), a);
    let mut part = vec![0u8; 1000 * 8];
    engine
        .read(
            zstd,
            &Region::new(vec![70_000], vec![1000]).unwrap(),
            &mut part,
        )
        .unwrap();
    assert_eq!(part, a[70_000 * 8..71_000 * 8]);
    // Lossy within its bound once the log copy is gone (the active segment's extents are
    // still exact).
    let got = read_all(&engine, zfp, n);
    let max_err = got
        .chunks(8)
        .zip(b.chunks(8))
        .map(|(x, y)| {
            let (x, y) = (
                f64::from_le_bytes(x.try_into().unwrap()),
                f64::from_le_bytes(y.try_into().unwrap()),
            );
            (x - y).abs()
        })
        .fold(0.0, f64::max);
    assert!(max_err <= 1e-3, "{max_err}");
    assert!(
        engine.extents(zfp).iter().any(|e| e.tier == "fast"),
        "no zfp extent was read back from the tier alone"
    );
}

/// Blob files under `root` whose key is a shard (`.../shard/...`), with their sizes.
fn shard_blobs(root: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.parent().and_then(|x| x.file_name()) == Some("shard".as_ref()) {
                let len = entry.metadata().unwrap().len();
                out.push((p.file_name().unwrap().to_string_lossy().into_owned(), len));
            }
        }
    }
    out.sort();
    out
}

/// Writes 4 extents of 512 KiB to each of `ids`, round-robin across objects (as ranks that
/// each write every variable do), and returns each object's bytes.
fn write_interleaved(engine: &Engine, ids: &[u64]) -> Vec<Vec<u8>> {
    let per = 65_536u64;
    let mut out = vec![Vec::new(); ids.len()];
    for k in 0..4u64 {
        for (j, id) in ids.iter().enumerate() {
            let region = Region::new(vec![k * per], vec![per]).unwrap();
            let bytes: Vec<u8> = (0..per)
                .flat_map(|i| ((k * per + i) as f64 + j as f64 * 1e7).to_le_bytes())
                .collect();
            let s = engine
                .stage(k * 100 + j as u64, *id, &region, &bytes)
                .unwrap();
            engine.commit(&[s], Durability::Local).unwrap();
            out[j].extend_from_slice(&bytes);
        }
    }
    out
}

#[test]
fn shard_strategy_groups_objects_into_blobs_that_outlive_restart_migration_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    // Strategy 3: two objects per shard per server.
    let cfg = config_with(dir.path(), "100GiB", "[shard]\nstrategy = 3");
    let n = 4 * 65_536;
    let fast = dir.path().join("fast");
    let (ids, expect);
    {
        let (meta, engine) = open(dir.path(), &cfg);
        ids = (0..4)
            .map(|j| object(&meta, &format!("v{j}"), n, vec![]))
            .collect::<Vec<_>>();
        expect = write_interleaved(&engine, &ids);
        let report = engine.flusher().flush_pass(u64::MAX).unwrap();
        assert_eq!(report.extents, 16, "{report:?}");
        // 4 objects, 2 per shard: 2 shards of 8 extents (4 MiB) each, no own blobs.
        let blobs = shard_blobs(&fast);
        assert_eq!(blobs.len(), 2, "{blobs:?}");
        assert!(blobs.iter().all(|(_, len)| *len == 4 << 20), "{blobs:?}");
        let shard_of = |id: u64| {
            let s: std::collections::BTreeSet<String> =
                engine.extents(id).into_iter().map(|e| e.shard).collect();
            assert_eq!(s.len(), 1, "one shard per object here: {s:?}");
            s.into_iter().next().unwrap()
        };
        assert_eq!(shard_of(ids[0]), shard_of(ids[1]));
        assert_eq!(shard_of(ids[2]), shard_of(ids[3]));
        assert_ne!(shard_of(ids[0]), shard_of(ids[2]));
        for (id, want) in ids.iter().zip(&expect) {
            assert_eq!(&read_all(&engine, *id, n), want);
        }
    }
    let (meta, engine) = open(dir.path(), &cfg);
    // Partial reads of retired extents are byte ranges inside the shard blob.
    let mut part = vec![0u8; 1000 * 8];
    engine
        .read(
            ids[1],
            &Region::new(vec![70_000], vec![1000]).unwrap(),
            &mut part,
        )
        .unwrap();
    assert_eq!(part, expect[1][70_000 * 8..71_000 * 8]);
    for (id, want) in ids.iter().zip(&expect) {
        assert_eq!(&read_all(&engine, *id, n), want, "after restart");
    }
    // Moving one object out leaves the shard its neighbour still uses; moving the
    // neighbour out deletes it.
    engine.flusher().migrate(ids[0], "slow").unwrap();
    assert_eq!(shard_blobs(&fast).len(), 2);
    assert!(engine
        .extents(ids[0])
        .iter()
        .all(|e| e.shard.is_empty() && e.tier == "slow"));
    engine.flusher().migrate(ids[1], "slow").unwrap();
    assert_eq!(shard_blobs(&fast).len(), 1);
    assert_eq!(read_all(&engine, ids[0], n), expect[0]);
    assert_eq!(read_all(&engine, ids[1], n), expect[1]);
    // Deleting objects releases their references the same way.
    for (k, id) in ids[2..].iter().enumerate() {
        meta.delete_object(*id).unwrap();
        engine.forget(*id);
        assert_eq!(shard_blobs(&fast).len(), 1 - k);
    }
}

#[test]
fn shards_are_cut_at_max_bytes_and_blobs_of_an_interrupted_flush_are_swept() {
    let dir = tempfile::tempdir().unwrap();
    // Strategy 5 (8 objects per shard), but at most 1 MiB per shard: 2 extents each.
    let cfg = config_with(
        dir.path(),
        "100GiB",
        "[shard]\nstrategy = 5\nmax_bytes = \"1MiB\"",
    );
    let n = 4 * 65_536;
    let fast = dir.path().join("fast");
    {
        let (meta, engine) = open(dir.path(), &cfg);
        let ids: Vec<u64> = (0..2)
            .map(|j| object(&meta, &format!("v{j}"), n, vec![]))
            .collect();
        let expect = write_interleaved(&engine, &ids);
        engine.flusher().flush_pass(u64::MAX).unwrap();
        let blobs = shard_blobs(&fast);
        assert_eq!(blobs.len(), 4, "{blobs:?}");
        assert!(blobs.iter().all(|(_, len)| *len == 1 << 20), "{blobs:?}");
        for (id, want) in ids.iter().zip(&expect) {
            assert_eq!(&read_all(&engine, *id, n), want);
        }
    }
    // A blob put by a flush that crashed before recording its homes: nothing refers to it.
    let stray = fast.join("test-deployment/s0000/shard/00000000000000ff-0000000000000001");
    std::fs::write(&stray, b"left over").unwrap();
    let (_meta, engine) = open(dir.path(), &cfg);
    engine.flusher().flush_pass(u64::MAX).unwrap();
    assert!(!stray.exists(), "unreferenced blob not swept");
    assert_eq!(shard_blobs(&fast).len(), 4, "referenced shards must stay");
}

#[test]
fn region_rules_place_extents_and_override_the_object_tag() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "100GiB");
    let (meta, engine) = open(dir.path(), &cfg);
    let per = 65_536;
    let n = 16 * per;
    // Extents 0..4: fast (inside the first box, the later rule wins); 4..8: slow (first
    // rule); 8..12: in no box, so the object's tag (fast); 12..16: slow (open-ended box).
    let rules = format!("0:{}=slow;0:{}=fast;{}:=slow", 8 * per, 4 * per, 12 * per);
    let id = object(
        &meta,
        "r",
        n,
        vec![
            ("pdcx.tier".into(), TagValue::Str("fast".into())),
            ("pdcx.tier.regions".into(), TagValue::Str(rules)),
        ],
    );
    let data = write_all(&engine, id);
    engine.flusher().flush_pass(u64::MAX).unwrap();
    for e in engine.extents(id) {
        let k = e.region.offset[0] / per;
        let want = if k < 4 || (8..12).contains(&k) {
            "fast"
        } else {
            "slow"
        };
        assert_eq!(e.tier.trim_start_matches("log+"), want, "extent {k}");
    }
    assert_eq!(read_all(&engine, id, n), data);
}

#[test]
fn demotion_moves_whole_shards_and_frees_their_blobs() {
    let dir = tempfile::tempdir().unwrap();
    // One object per shard, cut at 1 MiB: shards of two 512 KiB extents; the fast tier
    // takes 4 of them.
    let cfg = config_with(
        dir.path(),
        "4MiB",
        "[shard]\nobjects = 1\nmax_bytes = \"1MiB\"",
    );
    let (meta, engine) = open(dir.path(), &cfg);
    let n = 16 * 65_536;
    let id = object(&meta, "x", n, tier_tag("fast"));
    let data = write_all(&engine, id);
    engine.flusher().flush_pass(u64::MAX).unwrap();
    // Filled to 100%, then whole shards demoted until below 60%: 2 shards (4 extents) stay,
    // and the demoted shards' blobs are gone from the fast tier.
    let fast: Vec<_> = engine
        .extents(id)
        .into_iter()
        .filter(|e| e.tier.ends_with("fast"))
        .collect();
    assert_eq!(fast.len(), 4, "{fast:?}");
    assert!(fast.iter().all(|e| !e.shard.is_empty()), "{fast:?}");
    assert_eq!(shard_blobs(&dir.path().join("fast")).len(), 2);
    assert_eq!(read_all(&engine, id, n), data);
}

/// One write of `n` f64 at `at`, distinct contents from `salt`, committed at `durability`.
fn write_one(
    engine: &Engine,
    id: u64,
    txn: u64,
    at: u64,
    n: u64,
    salt: f64,
    d: Durability,
) -> Vec<u8> {
    let bytes: Vec<u8> = (0..n)
        .flat_map(|i| ((at + i) as f64 + salt).to_le_bytes())
        .collect();
    let s = engine
        .stage(txn, id, &Region::new(vec![at], vec![n]).unwrap(), &bytes)
        .unwrap();
    engine.commit(&[s], d).unwrap();
    bytes
}

fn read_region(engine: &Engine, id: u64, at: u64, n: u64) -> Vec<u8> {
    let mut out = vec![0u8; n as usize * 8];
    engine
        .read(id, &Region::new(vec![at], vec![n]).unwrap(), &mut out)
        .unwrap();
    out
}

fn durabilities(engine: &Engine, id: u64) -> Vec<(u64, String, String)> {
    engine
        .extents(id)
        .into_iter()
        .map(|e| (e.seq, e.durability, e.tier))
        .collect()
}

#[test]
fn remote_waits_put_the_data_on_an_off_node_tier_and_it_survives_losing_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "100GiB");
    let n = 1000;
    // Placed on the node-local tier by its tag: `remote` still needs a tier that survives
    // the node, so it goes to the shared one.
    let (id, remote_bytes);
    {
        let (meta, engine) = open(dir.path(), &cfg);
        id = object(&meta, "x", 4 * n, tier_tag("fast"));
        remote_bytes = write_one(&engine, id, 1, 0, n, 0.25, Durability::Remote);
        // No flush pass ran: the commit itself put the extent on its home.
        let d = durabilities(&engine, id);
        assert_eq!(d, vec![(1, "remote".into(), "log+slow".into())], "{d:?}");
        write_one(&engine, id, 2, n, n, 0.5, Durability::Local);
        write_one(&engine, id, 3, 2 * n, n, 0.75, Durability::Memory);
        let d: Vec<String> = durabilities(&engine, id).into_iter().map(|x| x.1).collect();
        assert_eq!(d, vec!["remote", "local", "memory"]);
    }
    // Node loss: the log directory is gone (the shared tier and the metadata survive).
    std::fs::remove_dir_all(dir.path().join("log")).unwrap();
    {
        let (_meta, engine) = open(dir.path(), &cfg);
        assert_eq!(read_region(&engine, id, 0, n), remote_bytes);
        // What was only in the lost log is gone, never half there: the fill value.
        assert_eq!(
            read_region(&engine, id, n, 2 * n),
            vec![0u8; 2 * n as usize * 8]
        );
        assert_eq!(durabilities(&engine, id).len(), 1);
        // The new log numbers its segments from the start again; new writes land where the
        // lost log's bytes were.
        write_one(&engine, id, 1, 3 * n, n, 0.125, Durability::Local);
    }
    // A restart with the new log must still read the remote extent from its home, not the
    // new log's bytes at the same place.
    let (_meta, engine) = open(dir.path(), &cfg);
    assert_eq!(read_region(&engine, id, 0, n), remote_bytes);
}

#[test]
fn remote_is_refused_without_an_off_node_tier_and_nothing_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[[tier]]\nname = \"fast\"\nkind = \"local\"\npath = \"{}/fast\"\n",
        dir.path().display()
    );
    let cfg = DeploymentConfig::parse(&text, Vec::new()).unwrap();
    let (meta, engine) = open(dir.path(), &cfg);
    let id = object(&meta, "x", 100, vec![]);
    let bytes = vec![1u8; 800];
    let s = engine
        .stage(1, id, &Region::new(vec![0], vec![100]).unwrap(), &bytes)
        .unwrap();
    let err = engine.commit(&[s], Durability::Remote).unwrap_err();
    assert_eq!(err.kind, pdcx_core::ErrorKind::InvalidArgument);
    assert!(
        err.message.contains("'remote'") && err.message.contains("fast (local)"),
        "{err}"
    );
    assert!(engine.extents(id).is_empty());
    // The tag asking for it is refused when set, with the same explanation.
    let t = Tiering::open(&cfg, "d", 0, 1).unwrap();
    let tag = vec![(
        "pdcx.durability".to_string(),
        TagValue::Str("remote".into()),
    )];
    let err =
        pdcx_server::tiering::check_tags(t.as_ref(), Dtype::Float64, &[100], &tag).unwrap_err();
    assert!(err.message.contains("survives the loss of a node"), "{err}");
    let bad = vec![("pdcx.durability".to_string(), TagValue::Str("disk".into()))];
    assert!(pdcx_server::tiering::check_tags(t.as_ref(), Dtype::Float64, &[100], &bad).is_err());
}

#[test]
fn an_objects_durability_tag_raises_every_wait_on_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "100GiB");
    let (meta, engine) = open(dir.path(), &cfg);
    let tag = vec![(
        "pdcx.durability".to_string(),
        TagValue::Str("remote".into()),
    )];
    let id = object(&meta, "x", 100, tag);
    let plain = object(&meta, "y", 100, vec![]);
    write_one(&engine, id, 1, 0, 100, 0.0, Durability::Memory);
    write_one(&engine, plain, 2, 0, 100, 0.0, Durability::Memory);
    assert_eq!(durabilities(&engine, id)[0].1, "remote");
    assert_eq!(durabilities(&engine, plain)[0].1, "memory");
}

#[test]
fn a_shard_mostly_overwritten_is_repacked_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    // Strategy 3: two objects per shard: one shard of 8 extents (4 MiB).
    let cfg = config_with(dir.path(), "100GiB", "[shard]\nstrategy = 3");
    let n = 4 * 65_536;
    let per = 65_536u64;
    let fast = dir.path().join("fast");
    let (meta, engine) = open(dir.path(), &cfg);
    let ids: Vec<u64> = (0..2)
        .map(|j| object(&meta, &format!("v{j}"), n, vec![]))
        .collect();
    let mut expect = write_interleaved(&engine, &ids);
    engine.flusher().flush_pass(u64::MAX).unwrap();
    let old = shard_blobs(&fast);
    assert_eq!(old.len(), 1, "{old:?}");
    // Seven of its eight extents written again: one stays live in the old shard.
    for (j, id) in ids.iter().enumerate() {
        for k in 0..4u64 {
            if (j, k) == (1, 3) {
                continue;
            }
            let region = Region::new(vec![k * per], vec![per]).unwrap();
            let bytes: Vec<u8> = (0..per)
                .flat_map(|i| (i as f64 - 7.0).to_le_bytes())
                .collect();
            let at = (k * per * 8) as usize;
            expect[j][at..at + bytes.len()].copy_from_slice(&bytes);
            let s = engine.stage(k, *id, &region, &bytes).unwrap();
            engine.commit(&[s], Durability::Local).unwrap();
        }
    }
    engine.flusher().flush_pass(u64::MAX).unwrap();
    assert_eq!(engine.drop_hidden_writes(true).unwrap(), 7);
    assert!(
        shard_blobs(&fast).iter().any(|b| b == &old[0]),
        "the old shard still holds a live extent"
    );
    let (moved, _) = engine.flusher().repack(0.5).unwrap();
    assert_eq!(moved, 1, "the one live extent moved out");
    assert!(
        !shard_blobs(&fast).iter().any(|b| b == &old[0]),
        "the old shard was deleted with its last reference"
    );
    for (id, want) in ids.iter().zip(&expect) {
        assert_eq!(&read_all(&engine, *id, n), want);
    }
    drop(engine);
    drop(meta);
    let (_meta, engine) = open(dir.path(), &cfg);
    for (id, want) in ids.iter().zip(&expect) {
        assert_eq!(&read_all(&engine, *id, n), want);
    }
}
