//! Crash consistency of the whole durable path of one server: segment log + MANIFEST, the
//! SQLite extent map and tags, the flusher's tier copies and homes, and segment retirement,
//! all on a simulated disk (`pdcx_fsio::SimFs`; SQLite on the real disk, snapshotted at each
//! of its fsyncs through the seam).
//!
//! A random workload (overlapping writes at `memory`, `local` and `remote` durability, tag
//! updates, flush passes that copy extents to a node-local and a shared directory tier and
//! retire log segments, device errors)
//! runs while the test captures the disk as a crash would leave it: at random points between
//! operations and, in a build with `--features crash-points`, at every named crash point of
//! the data path (commit, flush, retirement, compaction, the log). Each capture yields two disks: the
//! process died (kill -9: every completed write survives) and the power failed. A power cut
//! keeps what was fsynced and, each at random (`pdcx_fsio::Cut`): half of the cuts tear the
//! last write at a random byte; half keep a random subset of every file's unsynced writes
//! (page write-back in any order); half find SQLite's files as SQLite last wrote them, newer
//! than its last WAL fsync (the kernel may have written them back), instead of at that fsync.
//!
//! After the run, the server is reopened on every captured disk and an oracle (the history of
//! what was issued and acknowledged, at which durability) checks: every element shows the last
//! write acknowledged at `local` covering it or a write issued after it, never a write from
//! before it, never a value nobody wrote; no write is torn (where one write shows, its whole
//! region shows it or later writes); acknowledged tags are there; a second crash right after
//! recovery changes nothing. `memory` writes may be lost: those bytes are counted, not failed.
//!
//! `PDCX_CRASH_RUNS=N` sets the number of runs (default 2, a few hundred recoveries). One summary line
//! (`CRASH_SUMMARY {...}`) is printed for `bench/reliability/run.sh`.

use pdcx_core::model::TagValue;
use pdcx_core::protocol::{Durability, ObjectSpec, TagTarget};
use pdcx_core::{Dtype, Region};
use pdcx_fsio::{Cut, Faults, Fs, SimFs, SimRng as Rng};
use pdcx_server::engine::Engine;
use pdcx_server::meta::Metadata;
use pdcx_server::tiering::Tiering;
use pdcx_store::LogOptions;
use pdcx_tiers::DeploymentConfig;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

const N: u64 = 1024; // elements (u32) per object
const OBJECTS: usize = 3;
const OPS: usize = 120;

/// One write as the application issued it. Ids are given in commit order, and every element
/// of the write holds its id, so a value read back names the write it came from.
#[derive(Clone, Debug)]
struct Write {
    id: u32,
    obj: usize,
    start: u64,
    len: u64,
    /// Acknowledged at `local` or `remote`: the floor a recovery may not go below.
    local: bool,
    acked: bool,
}

impl Write {
    fn covers(&self, obj: usize, e: u64) -> bool {
        self.obj == obj && e >= self.start && e < self.start + self.len
    }
}

/// The oracle's history: everything issued so far (a commit in progress is issued, not acked)
/// and the tag values: (issued, acknowledged) per object.
#[derive(Clone, Default)]
struct History {
    writes: Vec<Write>,
    tags: Vec<(i64, i64)>,
}

struct Capture {
    point: &'static str,
    disk: SimFs,
    power_cut: bool,
    history: History,
}

#[derive(Default, Debug)]
struct Totals {
    runs: u64,
    checks: u64,
    power_cuts: u64,
    process_crashes: u64,
    cuts: CutCounts,
    points: BTreeMap<&'static str, u64>,
    acked_local_bytes: u64,
    acked_remote_bytes: u64,
    acked_memory_bytes: u64,
    lost_memory_bytes: u64,
    eio: u64,
    enospc: u64,
}

/// How many power cuts tore the last write, kept a subset of unsynced writes, found SQLite
/// ahead of its last fsync.
#[derive(Debug, Default, Clone, Copy)]
struct CutCounts {
    torn: u64,
    subset: u64,
    sqlite_ahead: u64,
}

fn tier_config() -> DeploymentConfig {
    DeploymentConfig::parse(
        "[[tier]]\nname = \"ssd\"\nkind = \"local\"\npath = \"/node/ssd\"\n\
         [[tier]]\nname = \"pfs\"\nkind = \"shared\"\npath = \"/pfs/tier\"\n",
        Vec::new(),
    )
    .unwrap()
}

fn open(disk: &SimFs, sql: &Path) -> pdcx_core::Result<(Arc<Metadata>, Engine)> {
    let fs: Arc<dyn Fs> = Arc::new(disk.clone());
    let meta = Arc::new(Metadata::open_with_fs(
        &sql.join("meta.sqlite"),
        0,
        1,
        fs.clone(),
    )?);
    let tiering = Tiering::open_with_fs(&tier_config(), "crash-test", 0, 1, fs.clone())?;
    let opts = LogOptions {
        segment_bytes: 8 << 10,
        fs,
    };
    let (engine, _, _) = Engine::open_with(
        Path::new("/node/log"),
        meta.clone(),
        64 << 10,
        opts,
        tiering,
    )?;
    Ok((meta, engine))
}

fn spec(i: usize) -> ObjectSpec {
    ObjectSpec {
        name: format!("crash/o{i}"),
        dims: vec![N],
        dtype: Dtype::UInt32,
        fill: None,
        containers: vec![],
        tags: vec![],
        creator: "crash-test".into(),
    }
}

fn read_all(engine: &Engine, id: u64) -> Vec<u32> {
    let mut out = vec![0u8; N as usize * 4];
    engine
        .read(id, &Region::new(vec![0], vec![N]).unwrap(), &mut out)
        .expect("read after recovery");
    out.chunks(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Checks one recovered object against the history; returns the bytes of memory-durability
/// writes that are gone (allowed). Panics on a violation, naming it.
fn check_object(vals: &[u32], obj: usize, h: &History, what: &str) -> u64 {
    let by_id: BTreeMap<u32, &Write> = h.writes.iter().map(|w| (w.id, w)).collect();
    let mut lost = 0;
    for (e, &v) in vals.iter().enumerate() {
        let e = e as u64;
        let covering = h.writes.iter().filter(|w| w.acked && w.covers(obj, e));
        let floor = covering.clone().filter(|w| w.local).map(|w| w.id).max();
        let newest_acked = covering.map(|w| w.id).max();
        if v == 0 {
            assert!(
                floor.is_none(),
                "{what}: object {obj} element {e} lost write {floor:?}, acknowledged at local"
            );
        } else {
            let w = by_id.get(&v).unwrap_or_else(|| {
                panic!("{what}: object {obj} element {e} holds {v}, which nobody wrote")
            });
            assert!(
                w.covers(obj, e),
                "{what}: object {obj} element {e} holds write {v}, which does not cover it"
            );
            if let Some(f) = floor {
                assert!(
                    v >= f,
                    "{what}: object {obj} element {e} shows write {v}, older than write {f} acknowledged at local"
                );
            }
            // Not torn: everywhere write v covers shows v or a later write.
            for x in w.start..w.start + w.len {
                let got = vals[x as usize];
                assert!(
                    got >= v,
                    "{what}: write {v} is torn: object {obj} element {x} shows {got}"
                );
            }
        }
        if newest_acked.is_some_and(|n| n > v) {
            lost += 4;
        }
    }
    lost
}

fn verify(cap: &Capture, sql: &Path, ids: &[u64], t: &mut Totals) {
    let what = format!(
        "{} at {}",
        if cap.power_cut {
            "power cut"
        } else {
            "process crash"
        },
        cap.point
    );
    cap.disk.restore_foreign().unwrap();
    let (meta, engine) =
        open(&cap.disk, sql).unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    let mut first = Vec::new();
    for (obj, &id) in ids.iter().enumerate() {
        let vals = read_all(&engine, id);
        t.lost_memory_bytes += check_object(&vals, obj, &cap.history, &what);
        let tag = meta
            .object(id)
            .unwrap()
            .tags
            .iter()
            .find(|(k, _)| k == "step")
            .and_then(|(_, v)| match v {
                TagValue::Int(i) => Some(*i),
                _ => None,
            })
            .unwrap_or(0);
        let (issued, acked) = cap.history.tags[obj];
        assert!(
            tag >= acked && tag <= issued,
            "{what}: object {obj} tag step={tag}, acknowledged {acked}, issued {issued}"
        );
        first.push((vals, tag));
    }
    // A second crash right after recovery changes nothing.
    let again = cap.disk.process_crash().unwrap();
    drop(engine);
    drop(meta);
    again.restore_foreign().unwrap();
    let (meta, engine) =
        open(&again, sql).unwrap_or_else(|e| panic!("{what}: second recovery failed: {e}"));
    for (obj, &id) in ids.iter().enumerate() {
        assert_eq!(
            read_all(&engine, id),
            first[obj].0,
            "{what}: second recovery changed object {obj}"
        );
    }
    drop(engine);
    drop(meta);
    t.checks += 1;
    if cap.power_cut {
        t.power_cuts += 1;
    } else {
        t.process_crashes += 1;
    }
    *t.points.entry(cap.point).or_default() += 1;
}

fn run(seed: u64, t: &mut Totals) {
    let sqldir = tempfile::tempdir().unwrap();
    let sql = sqldir.path();
    let disk = SimFs::new();
    let rng = Arc::new(Mutex::new(Rng::new(seed)));
    let history = Arc::new(Mutex::new(History {
        tags: vec![(0, 0); OBJECTS],
        ..History::default()
    }));
    let captures: Arc<Mutex<Vec<Capture>>> = Arc::default();
    let capture = {
        let (disk, history, captures, rng) =
            (disk.clone(), history.clone(), captures.clone(), rng.clone());
        move |point: &'static str, counts: &mut CutCounts| {
            let mut r = rng.lock().unwrap_or_else(|p| p.into_inner());
            let h = history.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let how = Cut {
                torn: (r.below(2) == 0).then(|| r.next_u64()),
                keep_unsynced: (r.below(2) == 0).then(|| r.next_u64()),
                foreign_ahead: r.below(2) == 0,
            };
            counts.torn += u64::from(how.torn.is_some());
            counts.subset += u64::from(how.keep_unsynced.is_some());
            counts.sqlite_ahead += u64::from(how.foreign_ahead);
            let cut = disk.cut(how).expect("snapshot of the database files");
            let killed = disk
                .process_crash()
                .expect("snapshot of the database files");
            let mut c = captures.lock().unwrap_or_else(|p| p.into_inner());
            c.push(Capture {
                point,
                disk: cut,
                power_cut: true,
                history: h.clone(),
            });
            c.push(Capture {
                point,
                disk: killed,
                power_cut: false,
                history: h,
            });
        }
    };
    let counts = Arc::new(Mutex::new(CutCounts::default()));
    #[cfg(feature = "crash-points")]
    {
        let (capture, counts, rng) = (capture.clone(), counts.clone(), rng.clone());
        let seen: Mutex<std::collections::HashSet<&'static str>> = Mutex::default();
        pdcx_fsio::crash::set_hook(Some(Box::new(move |point| {
            // Capture the first hit of every point, then about a third of the hits, so every
            // point is seen without drowning the run in captures.
            let first = seen.lock().unwrap_or_else(|p| p.into_inner()).insert(point);
            let take = first || rng.lock().unwrap_or_else(|p| p.into_inner()).below(3) == 0;
            if take {
                capture(point, &mut counts.lock().unwrap_or_else(|p| p.into_inner()));
            }
        })));
    }

    let (meta, engine) = open(&disk, sql).unwrap();
    let ids: Vec<u64> = (0..OBJECTS)
        .map(|i| meta.create_object(&spec(i)).unwrap().id)
        .collect();
    let mut failed_device = false;
    let mut faulty_device = false;
    for step in 0..OPS {
        let op = rng.lock().unwrap().below(100);
        match op {
            0..=59 if !failed_device => {
                let (obj, start, len, local) = {
                    let mut r = rng.lock().unwrap();
                    let obj = r.below(OBJECTS as u64) as usize;
                    let start = r.below(N);
                    let len = (r.below(N / 4) + 1).min(N - start);
                    (obj, start, len, r.below(3))
                };
                let id = {
                    let mut h = history.lock().unwrap();
                    let id = h.writes.len() as u32 + 1;
                    h.writes.push(Write {
                        id,
                        obj,
                        start,
                        len,
                        local: local > 0,
                        acked: false,
                    });
                    id
                };
                let region = Region::new(vec![start], vec![len]).unwrap();
                let payload: Vec<u8> = (0..len).flat_map(|_| id.to_le_bytes()).collect();
                let durability = match local {
                    0 => Durability::Memory,
                    1 => Durability::Local,
                    _ => Durability::Remote,
                };
                let r = engine
                    .stage(u64::from(id), ids[obj], &region, &payload)
                    .and_then(|s| engine.commit(&[s], durability));
                match r {
                    Ok(()) => {
                        history.lock().unwrap().writes[id as usize - 1].acked = true;
                        match local {
                            0 => t.acked_memory_bytes += len * 4,
                            1 => t.acked_local_bytes += len * 4,
                            _ => t.acked_remote_bytes += len * 4,
                        }
                    }
                    Err(e) if e.message.contains("device failed") => failed_device = true,
                    // A full or failing device refuses writes, and `remote` when no durable tier
                    // takes the copy (the write then stays committed at `local`, unacknowledged).
                    Err(e) => assert!(faulty_device, "a commit failed on a healthy disk: {e}"),
                }
            }
            60..=69 if !failed_device => {
                let obj = rng.lock().unwrap().below(OBJECTS as u64) as usize;
                let step = {
                    let mut h = history.lock().unwrap();
                    h.tags[obj].0 += 1;
                    h.tags[obj].0
                };
                let tags = vec![("step".to_string(), TagValue::Int(step))];
                match meta.put_tags(&TagTarget::Object(ids[obj]), &tags) {
                    Ok(()) => history.lock().unwrap().tags[obj].1 = step,
                    Err(e) => {
                        assert!(e.message.contains("device failed"), "{e}");
                        failed_device = true;
                    }
                }
            }
            70..=79 => {
                // The flusher: copies to the tier, records homes, retires segments. Errors on
                // a failing or full device are reported and retried later, never fatal here.
                let _ = engine.flusher().flush_pass(u64::MAX);
            }
            80..=84 => {
                // The checkpoint timer: metadata WAL fsync, then the log's MANIFEST.
                let _ = engine.store().checkpoint();
            }
            // Device errors come late in a run: after one, the server fails stop.
            85..=86 if step > OPS * 4 / 5 => {
                t.eio += 1;
                faulty_device = true;
                disk.set_faults(Faults {
                    sync_eio: true,
                    ..Faults::default()
                });
            }
            87..=88 => {
                t.enospc += 1;
                faulty_device = true;
                disk.set_faults(Faults {
                    capacity: Some(disk_used_estimate(&engine) + rng.lock().unwrap().below(8192)),
                    ..Faults::default()
                });
            }
            89..=90 if !failed_device => {
                faulty_device = false;
                disk.set_faults(Faults::default());
            }
            91..=93 => {
                // Compaction: hidden writes dropped, live extents copied out of segments
                // mostly garbage, those retired. Device errors are reported, never fatal.
                let mut report = Default::default();
                let opts = pdcx_server::datastore::CompactOptions {
                    threshold: 0.9,
                    rate: 0,
                    seal_min: 1,
                };
                let _ = engine
                    .drop_hidden_writes(true)
                    .and_then(|_| engine.store().compact(&opts, &mut report, &mut |_| {}));
            }
            _ => capture("between-ops", &mut counts.lock().unwrap()),
        }
    }
    capture("end", &mut counts.lock().unwrap());
    #[cfg(feature = "crash-points")]
    pdcx_fsio::crash::set_hook(None);
    drop(engine);
    drop(meta);
    let c = *counts.lock().unwrap();
    t.cuts.torn += c.torn;
    t.cuts.subset += c.subset;
    t.cuts.sqlite_ahead += c.sqlite_ahead;
    let caps = std::mem::take(&mut *captures.lock().unwrap());
    for cap in &caps {
        verify(cap, sql, &ids, t);
    }
    t.runs += 1;
}

/// The bytes on the simulated disk, roughly (the log plus tier copies); a capacity a little
/// above it makes the next writes fail with ENOSPC.
fn disk_used_estimate(engine: &Engine) -> u64 {
    engine.log_bytes() * 2
}

#[test]
fn the_durable_path_survives_crashes_and_power_cuts_at_every_point() {
    let runs: u64 = std::env::var("PDCX_CRASH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let mut t = Totals::default();
    for seed in 1..=runs {
        run(seed, &mut t);
    }
    assert!(
        t.power_cuts > 0
            && t.process_crashes > 0
            && t.cuts.torn > 0
            && t.cuts.subset > 0
            && t.cuts.sqlite_ahead > 0,
        "{t:?}"
    );
    if pdcx_fsio::crash::ENABLED {
        // Every crash point a single server passes through must have been exercised. The
        // others are killed at by the process-level crash tests: the registration point needs
        // two servers (tests/crashpoints.rs), the S3 upload point an S3 tier
        // (tests/groupshard.rs), and scripts/crash_coverage.py checks that CI killed a process
        // at every point.
        for p in pdcx_fsio::crash::POINTS {
            // Byte-stream versions need servers: tests/homecrash.rs covers them.
            if matches!(*p, "register.after_region_map" | "s3.after_part_upload")
                || p.starts_with("seal.")
                || p.starts_with("home.")
                || *p == "s3.after_create_upload"
                // Group shards need several servers: tests/groupshard.rs covers it.
                || p.starts_with("shard.")
                // A resize runs offline on a whole deployment: tests/test_resize.py kills it
                // at each of its points.
                || p.starts_with("resize.")
            {
                continue;
            }
            assert!(
                t.points.contains_key(p),
                "crash point {p} never captured: {t:?}"
            );
        }
    }
    let points: Vec<String> = t
        .points
        .iter()
        .map(|(k, v)| format!("\"{k}\":{v}"))
        .collect();
    println!(
        "CRASH_SUMMARY {{\"layer\":\"server\",\"runs\":{},\"checks\":{},\"power_cuts\":{},\"process_crashes\":{},\"torn\":{},\"subset_cuts\":{},\"sqlite_ahead_cuts\":{},\"acked_local_bytes\":{},\"acked_remote_bytes\":{},\"acked_memory_bytes\":{},\"lost_local_bytes\":0,\"lost_remote_bytes\":0,\"memory_bytes_lost_summed_over_checks\":{},\"eio\":{},\"enospc\":{},\"crash_points\":{{{}}}}}",
        t.runs,
        t.checks,
        t.power_cuts,
        t.process_crashes,
        t.cuts.torn,
        t.cuts.subset,
        t.cuts.sqlite_ahead,
        t.acked_local_bytes,
        t.acked_remote_bytes,
        t.acked_memory_bytes,
        t.lost_memory_bytes,
        t.eio,
        t.enospc,
        points.join(",")
    );
}
