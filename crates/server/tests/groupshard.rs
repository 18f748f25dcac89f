//! Group shards (`[shard] servers`, strategy 1 of the object-sharding paper and composite
//! strategies 3-5): real in-process servers (2 and 4 ranks) on a shared-directory tier and on S3 (versitygw), each
//! writing its part of one or several objects; the group's leader pulls every member's extents
//! into shards put once under `DEPLOYMENT/gLEADER/shard/`, the members record their homes and
//! retire their logs, and everything reads back, also after a restart (a fresh process:
//! in-process servers keep each other alive through their peer connections) and after a
//! SIGKILL between the group put and the members' records (with `--features crash-points`).

use pdcx_core::protocol::{Durability, ObjectSpec};
use pdcx_core::{Dtype, Region};
use pdcx_server::{Server, ServerConfig, ServerHandle};
use pdcx_tiers::{DeploymentConfig, Tier, TierConfig};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::client_at;

/// Bytes each server writes per object, as two extents.
const PART: u64 = 1536 << 10;
/// Bytes per write (extent).
const CHUNK: u64 = 768 << 10;

/// The tier section of the config: a shared directory under `dir`, or the S3 bucket the
/// environment names (see [`s3_env`]).
fn tier_toml(dir: &Path, s3: bool) -> String {
    if s3 {
        let var = |k| std::env::var(k).unwrap();
        format!(
            "[[tier]]\nname = \"pfs\"\nkind = \"s3\"\nbucket = \"{}\"\nendpoint = \"{}\"\n",
            var("PDCX_TEST_S3_BUCKET"),
            var("PDCX_TEST_S3_ENDPOINT")
        )
    } else {
        format!(
            "[[tier]]\nname = \"pfs\"\nkind = \"shared\"\npath = \"{}/pfs\"\n",
            dir.display()
        )
    }
}

/// Writes `ROOT/pdcx.toml`: the tier, 1 MiB log segments, no background passes (the tests
/// flush explicitly, so blob counts do not depend on timing), and `shard`.
fn write_config(root: &Path, tier: &str, shard: &str) {
    std::fs::create_dir_all(root).unwrap();
    let text = format!(
        "{tier}\n[log]\nsegment_bytes = \"1MiB\"\n\n[flush]\ninterval_ms = 3600000\n\n[shard]\n{shard}\n"
    );
    DeploymentConfig::parse(&text, Vec::new()).expect("test config is valid");
    std::fs::write(root.join("pdcx.toml"), text).unwrap();
}

fn start(root: &Path, n: u32) -> Vec<ServerHandle> {
    let hs: Vec<ServerHandle> = (0..n)
        .map(|r| {
            let h = Server::start(ServerConfig::new(root, r, n)).unwrap();
            h.server.publish_rank_file().unwrap();
            h
        })
        .collect();
    pdcx_server::launch::assemble_cluster(root, n, Duration::from_secs(30)).unwrap();
    hs
}

/// The bytes server `r` writes at `at` of object `j`.
fn pattern(j: usize, at: u64, len: u64) -> Vec<u8> {
    (at..at + len)
        .map(|i| ((i * 2_654_435_761 + j as u64 * 97) >> 7) as u8)
        .collect()
}

/// Creates `objects` byte objects of `n * PART` bytes and has each server write its part as
/// two extents, through a client whose node-local server it is.
fn write_parts(root: &Path, n: u32, objects: usize, part: u64) -> Vec<u64> {
    let c0 = client_at(root, 0);
    let ids: Vec<u64> = (0..objects)
        .map(|j| {
            c0.create_object(ObjectSpec {
                name: format!("vpic/v{j}"),
                dims: vec![n as u64 * part],
                dtype: Dtype::UInt8,
                fill: None,
                containers: vec![],
                tags: vec![],
                creator: String::new(),
            })
            .unwrap()
            .id
        })
        .collect();
    for r in 0..n {
        let c = client_at(root, r);
        for k in 0..part / CHUNK {
            for (j, id) in ids.iter().enumerate() {
                let at = r as u64 * part + k * CHUNK;
                let region = Region::new(vec![at], vec![CHUNK]).unwrap();
                c.write(*id, &region, &pattern(j, at, CHUNK), Durability::Local)
                    .unwrap();
            }
        }
    }
    ids
}

fn object_ids(root: &Path, objects: usize) -> Vec<u64> {
    let c = client_at(root, 0);
    (0..objects)
        .map(|j| c.open_object(&format!("vpic/v{j}")).unwrap().id)
        .collect()
}

fn check_bytes(root: &Path, n: u32, ids: &[u64], part: u64) {
    check_bytes_of(root, n, ids, 0, part)
}

/// Reads objects `ids` (object `first + k` is `ids[k]`) whole through every server.
fn check_bytes_of(root: &Path, n: u32, ids: &[u64], first: usize, part: u64) {
    for r in 0..n {
        let c = client_at(root, r);
        for (k, id) in ids.iter().enumerate() {
            let j = first + k;
            let len = n as u64 * part;
            let mut got = vec![0u8; len as usize];
            c.read_into(*id, &Region::new(vec![0], vec![len]).unwrap(), &mut got)
                .unwrap();
            assert!(got == pattern(j, 0, len), "object {j} read through {r}");
        }
    }
}

/// The tier as a test sees it (the same config the servers use).
fn tier(dir: &Path, s3: bool) -> Arc<dyn Tier> {
    let cfg = DeploymentConfig::parse(&tier_toml(dir, s3), Vec::new()).unwrap();
    let tc: &TierConfig = &cfg.tiers[0];
    // As a server of no deployment's ranks: opening the shared directory removes only the
    // temporaries of the rank it opens as, and the servers' must stay theirs.
    let outsider = pdcx_tiers::OpenContext {
        rank: 9999,
        size: 1,
    };
    pdcx_tiers::open_in(tc, &outsider).unwrap()
}

/// Group shard blobs per leader prefix (`gLEADER`), and every other blob of the deployment.
fn blobs(root: &Path, t: &dyn Tier) -> (BTreeMap<String, Vec<String>>, Vec<String>) {
    let dep = std::fs::read_to_string(root.join("deployment-id")).unwrap();
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut other = Vec::new();
    for (k, _) in t.list(&format!("{}/", dep.trim())).unwrap() {
        let rest = &k[dep.trim().len() + 1..];
        match rest.split_once("/shard/") {
            Some((g, _)) if g.starts_with('g') => groups.entry(g.into()).or_default().push(k),
            _ => other.push(k),
        }
    }
    (groups, other)
}

/// Flushes every server (members first: the leader's pass is what moves their extents).
fn flush_all(hs: &[ServerHandle]) {
    for h in hs.iter().rev() {
        h.server.engine.flusher().flush_all(&mut |_, _| {}).unwrap();
    }
}

/// Every extent each server holds is in a group shard of its group's leader on `pfs` (`groups`:
/// the blobs per leader prefix); returns how many are on the tier only (log space freed).
fn assert_all_in_group_shards(
    part: u64,
    hs: &[ServerHandle],
    ids: &[u64],
    group: u32,
    groups: &BTreeMap<String, Vec<String>>,
) -> usize {
    let mut retired = 0;
    for (r, h) in hs.iter().enumerate() {
        let leader = r as u32 - r as u32 % group;
        for id in ids {
            let mine: Vec<_> = h
                .server
                .engine
                .extents(*id)
                .into_iter()
                .filter(|e| e.holder == r as u32)
                .collect();
            assert_eq!(
                mine.len() as u64,
                part / CHUNK,
                "server {r}'s extents of {id:#x}"
            );
            for e in mine {
                // `shard` is the blob's last key segment.
                let ours = &groups[&format!("g{leader:04}")];
                assert!(
                    !e.shard.is_empty() && ours.iter().any(|k| k.ends_with(&e.shard)),
                    "server {r}: {e:?} not in {ours:?}"
                );
                assert!(e.tier.ends_with("pfs"), "server {r}: {e:?}");
                retired += (e.tier == "pfs") as usize;
            }
        }
    }
    retired
}

/// What a child process is to do, passed in `PDCX_GROUP_CHILD`.
struct Spec {
    dir: std::path::PathBuf,
    n: u32,
    objects: usize,
    group: u32,
    per_group: usize,
    s3: bool,
    /// Bytes each server writes per object.
    part: u64,
}

impl Spec {
    fn encode(&self, phase: &str) -> String {
        format!(
            "{}|{}|{}|{}|{}|{}|{}|{phase}",
            self.dir.display(),
            self.n,
            self.objects,
            self.group,
            self.per_group,
            if self.s3 { "s3" } else { "dir" },
            self.part
        )
    }

    fn decode(s: &str) -> (Spec, String) {
        let v: Vec<&str> = s.split('|').collect();
        let spec = Spec {
            dir: v[0].into(),
            n: v[1].parse().unwrap(),
            objects: v[2].parse().unwrap(),
            group: v[3].parse().unwrap(),
            per_group: v[4].parse().unwrap(),
            s3: v[5] == "s3",
            part: v[6].parse().unwrap(),
        };
        (spec, v[7].to_string())
    }

    fn root(&self) -> std::path::PathBuf {
        self.dir.join("root")
    }

    /// The blobs, checked: only group shards, `per_group` under each leader's prefix.
    fn expected_blobs(&self, t: &dyn Tier) -> BTreeMap<String, Vec<String>> {
        let (groups, other) = blobs(&self.root(), t);
        assert!(other.is_empty(), "blobs outside group shards: {other:?}");
        let want: Vec<String> = (0..self.n.div_ceil(self.group))
            .map(|k| format!("g{:04}", k * self.group))
            .collect();
        assert_eq!(groups.keys().cloned().collect::<Vec<_>>(), want);
        for (g, keys) in &groups {
            assert_eq!(keys.len(), self.per_group, "blobs of {g}: {keys:?}");
        }
        groups
    }
}

/// A phase of a run, in a child process (in-process servers keep each other alive, so a
/// restart on the same root needs a fresh process; a process exit without shutdown is also a
/// crash of every server after the flush).
#[test]
fn group_child() {
    let Ok(arg) = std::env::var("PDCX_GROUP_CHILD") else {
        return;
    };
    let (spec, phase) = Spec::decode(&arg);
    let (root, n, group) = (spec.root(), spec.n, spec.group);
    let hs = start(&root, n);
    let t = tier(&spec.dir, spec.s3);
    match phase.as_str() {
        "write" => {
            let ids = write_parts(&root, n, spec.objects, spec.part);
            flush_all(&hs);
            let groups = spec.expected_blobs(&*t);
            let retired = assert_all_in_group_shards(spec.part, &hs, &ids, group, &groups);
            assert!(retired > 0, "no log segment was retired");
            // Each member's bytes are in its group's blob (codec none: stored as written).
            for r in 0..n {
                let leader = r - r % group;
                let keys = &groups[&format!("g{leader:04}")];
                let want = pattern(0, r as u64 * spec.part, CHUNK);
                let found = keys.iter().any(|k| {
                    let blob = t.get(k).unwrap();
                    blob.windows(want.len()).any(|w| w == want.as_slice())
                });
                assert!(
                    found,
                    "server {r}'s first extent is in no blob of g{leader:04}"
                );
            }
            check_bytes(&root, n, &ids, spec.part);
            if spec.s3 && spec.part >= BIG {
                // Each server's 12 MiB is a run of parts of 8 MiB and 4 MiB, the 4 MiB part
                // padded to S3's smallest part (5 MiB) unless it is the blob's last.
                for keys in groups.values() {
                    let len = t.len(&keys[0]).unwrap();
                    assert_eq!(len, (group as u64 - 1) * (13 << 20) + (12 << 20));
                }
                // Shards of two parts or more: each server uploaded its own parts.
                for (r, h) in hs.iter().enumerate() {
                    assert!(
                        h.server.engine.flusher().group_parts_uploaded() >= 2,
                        "server {r} uploaded {} parts",
                        h.server.engine.flusher().group_parts_uploaded()
                    );
                }
            } else if spec.s3 {
                let parts: u64 = hs
                    .iter()
                    .map(|h| h.server.engine.flusher().group_parts_uploaded())
                    .sum();
                assert_eq!(parts, 0, "small shards are put whole by the leader");
            } else {
                // On the shared directory every server wrote its own extents into the shards
                // (and counted them as its puts), none went through the leader.
                let c = client_at(&root, 0);
                for (r, h) in hs.iter().enumerate() {
                    let f = h.server.engine.flusher();
                    assert!(
                        f.group_parts_uploaded() >= 1,
                        "server {r} wrote no part of a group shard"
                    );
                    let st = c.stats(r as u32).unwrap();
                    let put: u64 = st.tiers.iter().map(|x| x.put_bytes).sum();
                    assert!(put > 0, "server {r} counted no bytes put");
                }
            }
        }
        "check" | "check_after_crash" => {
            let ids = object_ids(&root, spec.objects);
            if std::env::var("PDCX_GROUP_EXPECT_ABORT").as_deref() == Ok("1") {
                // The sweep runs at the leader's first pass, before anything is put.
                hs[0].server.engine.flusher().flush_pass(0).unwrap();
                assert_eq!(hs[0].server.engine.flusher().group_uploads_aborted(), 1);
            }
            let before = blobs(&root, &*t);
            check_bytes(&root, n, &ids, spec.part);
            flush_all(&hs);
            let groups = spec.expected_blobs(&*t);
            assert_all_in_group_shards(spec.part, &hs, &ids, group, &groups);
            if phase == "check" {
                assert_eq!(
                    blobs(&root, &*t),
                    before,
                    "a flush after restart changed blobs"
                );
            }
            check_bytes(&root, n, &ids, spec.part);
        }
        "crash" => {
            // Dies (PDCX_CRASH_AT=shard.after_group_put) in the leader's pass: the group
            // shards are put, no member has recorded its homes.
            write_parts(&root, n, spec.objects, spec.part);
            flush_all(&hs);
            panic!("the crash point was not reached");
        }
        "release" => {
            // Object 0's shard is deleted once no server references it, not before.
            let ids = object_ids(&root, spec.objects);
            let c = client_at(&root, 0);
            let key_of = |id: u64| {
                let e = hs[0].server.engine.extents(id);
                let name = e[0].shard.clone();
                blobs(&root, &*t).0["g0000"]
                    .iter()
                    .find(|k| k.ends_with(&name))
                    .cloned()
                    .unwrap()
            };
            let doomed = key_of(ids[0]);
            let kept = key_of(ids[1]);
            // Every server but the leader drops its extents (as the holders of a deleted
            // object do when its owner tells them): the leader still references the shard,
            // so it stays.
            for h in &hs[1..] {
                h.server.engine.store().forget(ids[0]);
            }
            flush_all(&hs);
            assert!(t.len(&doomed).is_ok(), "deleted while the leader uses it");
            hs[0].server.engine.store().forget(ids[0]);
            flush_all(&hs);
            assert!(t.len(&doomed).is_err(), "{doomed} outlived its last extent");
            assert!(t.len(&kept).is_ok());
            // (Deleting the object drops its writes on every holder at once: done here by
            // hand, one server at a time, to see the leader's reference count.)
            c.delete_object(ids[0]).unwrap();
            check_bytes_of(&root, n, &ids[1..], 1, spec.part);
        }
        other => panic!("unknown phase {other}"),
    }
}

/// Runs this binary's `group_child` for `phase` of `spec`, with extra environment.
fn phase_output(spec: &Spec, phase: &str, env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "group_child", "--nocapture", "--test-threads=1"]);
    cmd.env("PDCX_GROUP_CHILD", spec.encode(phase));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// Runs `phase` in a child and fails unless it passed. The child's own summary is checked, not
/// only its exit status: a test filter that matches nothing also exits 0.
fn phase(spec: &Spec, phase: &str, env: &[(&str, &str)]) {
    let out = phase_output(spec, phase, env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "phase {phase} ({}): {}\n{stdout}{}",
        spec.encode(phase),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One run: `n` servers, `objects` objects, `shard` settings; expects `per_group` blobs under
/// each leader's prefix (groups of `group` servers), then the same after a restart.
fn run(n: u32, objects: usize, shard: &str, group: u32, per_group: usize, s3: bool) {
    run_with(n, objects, shard, group, per_group, s3, PART)
}

fn run_with(
    n: u32,
    objects: usize,
    shard: &str,
    group: u32,
    per_group: usize,
    s3: bool,
    part: u64,
) {
    let dir = tempfile::tempdir().unwrap();
    let spec = Spec {
        dir: dir.path().to_path_buf(),
        n,
        objects,
        group,
        per_group,
        s3,
        part,
    };
    write_config(&spec.root(), &tier_toml(dir.path(), s3), shard);
    phase(&spec, "write", &[]);
    // The check after a restart.
    phase(&spec, "check", &[]);
}

#[test]
fn a_group_shard_is_deleted_when_no_server_references_it() {
    let dir = tempfile::tempdir().unwrap();
    let spec = Spec {
        dir: dir.path().to_path_buf(),
        n: 4,
        objects: 2,
        group: 4,
        per_group: 2,
        s3: false,
        part: PART,
    };
    write_config(&spec.root(), &tier_toml(dir.path(), false), "strategy = 1");
    phase(&spec, "write", &[]);
    phase(&spec, "release", &[]);
}

/// SIGKILL of every server after the leader put the group shards and before any member
/// recorded its homes: after the restart every extent is flushed exactly once (the expected
/// blobs and no other: the crashed pass's blobs and a stray one are swept) and every byte is
/// there. Only in a `--features crash-points` build (scripts/test.sh runs it there).
#[cfg(feature = "crash-points")]
#[test]
fn sigkill_between_the_group_put_and_the_members_records_loses_nothing() {
    use std::os::unix::process::ExitStatusExt;
    // S3 too when versitygw is there (always in CI: PDCX_REQUIRE_S3=1): shards of 2 x 12 MiB
    // uploaded in parts by the members, killed after the upload completed, or after it
    // started (then the restarted leader aborts it: its marker names it); and shards of
    // 2 x 6 MiB, one part too few for the members' upload, which the leader puts as one
    // multipart upload of its own, killed with its parts uploaded and not completed.
    let gateway = s3_env();
    let put = "shard.after_group_put:1";
    let started = "shard.after_upload_started:1";
    let parts_up = "s3.after_part_upload:1";
    let written = "shard.after_parts_written:1";
    let mut cases = vec![
        (2, "strategy = 1", 2, 2, false, PART, put),
        (4, "servers = 2\nobjects = 2", 2, 1, false, PART, put),
        // The members wrote their parts of a shared-directory shard; not published.
        (2, "strategy = 1", 2, 2, false, PART, written),
    ];
    if gateway.is_some() {
        cases.push((2, "strategy = 1", 2, 2, true, BIG, put));
        cases.push((2, "strategy = 1", 2, 2, true, BIG, started));
        cases.push((2, "strategy = 1", 2, 2, true, MID, parts_up));
    }
    for (n, shard, group, per_group, s3, part, point) in cases {
        let dir = tempfile::tempdir().unwrap();
        let spec = Spec {
            dir: dir.path().to_path_buf(),
            n,
            objects: 2,
            group,
            per_group,
            s3,
            part,
        };
        write_config(&spec.root(), &tier_toml(dir.path(), s3), shard);
        let out = phase_output(&spec, "crash", &[("PDCX_CRASH_AT", point)]);
        assert_eq!(
            out.status.signal(),
            Some(9),
            "{shard}: the crash point {point} was not reached: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let left = temporaries(dir.path());
        let t = tier(dir.path(), s3);
        let (groups, other) = blobs(&spec.root(), &*t);
        if point == written {
            // Nothing published: only the leader's temporary, which no listing shows.
            assert!(
                groups.is_empty() && other.is_empty(),
                "{groups:?} {other:?}"
            );
            assert_eq!(left, 1, "the interrupted shard's temporary");
        } else if point == started {
            // Only the marker of the upload in flight; no shard was completed.
            assert!(groups.is_empty(), "{groups:?}");
            assert_eq!(other.len(), 1, "{other:?}");
            assert!(other[0].contains("/g0000/uploads/"), "{other:?}");
        } else if point == parts_up {
            // A multipart upload is not an object until completed: at most the shards whose
            // puts finished before the first one died (the puts run side by side).
            assert!(other.is_empty(), "{other:?}");
            let shards: usize = groups.values().map(Vec::len).sum();
            assert!(shards < per_group, "{groups:?}");
        } else {
            assert!(other.is_empty(), "{other:?}");
            // (The first leader to pass puts its group's shards and dies there.)
            assert!(!groups.is_empty(), "nothing was put before the crash");
        }
        // A blob of an earlier interrupted pass that no server references.
        let stray = format!(
            "{}/g0000/shard/00000000000000ff-0000000000000001",
            std::fs::read_to_string(spec.root().join("deployment-id"))
                .unwrap()
                .trim()
        );
        t.put(&stray, b"left over").unwrap();
        let expect_abort = if point == started { "1" } else { "0" };
        phase(
            &spec,
            "check_after_crash",
            &[("PDCX_GROUP_EXPECT_ABORT", expect_abort)],
        );
        assert!(
            t.len(&stray).is_err(),
            "the stray group shard was not swept"
        );
        // A second restart changes nothing.
        phase(&spec, "check", &[]);
        // The leader's restart removed the interrupted shard's temporary.
        assert_eq!(temporaries(dir.path()), 0, "{point}: a temporary stayed");
    }
}

/// Temporary files under `dir` (a blob being written: `.pdcx-tmp-` in its name).
#[cfg(feature = "crash-points")]
fn temporaries(dir: &Path) -> usize {
    fn walk(d: &Path, n: &mut usize) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, n);
            } else if p.to_string_lossy().contains(".pdcx-tmp-") {
                *n += 1;
            }
        }
    }
    let mut n = 0;
    walk(dir, &mut n);
    n
}

#[test]
fn strategy_1_basic_one_shard_per_object_across_two_servers() {
    run(2, 1, "strategy = 1", 2, 1, false);
    run(2, 3, "strategy = 1", 2, 3, false);
}

#[test]
fn composite_strategies_on_four_servers() {
    // Composite strategy 3: one shard per 2 servers -> 2 shards for one object.
    run(4, 1, "strategy = 3\ncomposite = true", 2, 1, false);
    // Composite strategy 1 / basic strategy 1 on 4 servers: one shard for the object.
    run(4, 1, "strategy = 1\ncomposite = true", 4, 1, false);
    // Two objects per shard across 4 servers: 3 objects -> 2 shards.
    run(4, 3, "servers = 4\nobjects = 2", 4, 2, false);
}

/// A private versitygw whose settings the servers (and the restart child) read from the
/// environment, as a real server does.
fn s3_env() -> Option<common::S3> {
    let s3 = common::s3_server()?;
    for (k, v) in [
        ("AWS_ACCESS_KEY_ID", "PDCX_TEST_S3_ACCESS_KEY_ID"),
        ("AWS_SECRET_ACCESS_KEY", "PDCX_TEST_S3_SECRET_ACCESS_KEY"),
        ("PDCX_TEST_S3_ENDPOINT", "PDCX_TEST_S3_ENDPOINT"),
        ("PDCX_TEST_S3_BUCKET", "PDCX_TEST_S3_BUCKET"),
    ] {
        std::env::set_var(k, &s3.vars[v]);
    }
    std::env::set_var("AWS_REGION", "us-east-1");
    Some(s3)
}

#[test]
fn group_shards_on_s3() {
    let Some(_s3) = s3_env() else { return };
    run(2, 2, "strategy = 1", 2, 2, true);
    run(4, 1, "strategy = 3\ncomposite = true", 2, 1, true);
}

/// Bytes per server per object that make a group shard a multipart upload (>= 2 parts of 8 MiB).
const BIG: u64 = 12 << 20;
/// Bytes per server per object that make a group shard of 12 MiB: at least one part (8 MiB),
/// so the leader's own put of it is a multipart upload, but less than the two parts that
/// would have the members upload it.
#[cfg(feature = "crash-points")]
const MID: u64 = 6 << 20;

#[test]
fn s3_group_shards_of_two_parts_or_more_are_uploaded_by_the_servers_holding_the_bytes() {
    let Some(_s3) = s3_env() else { return };
    // 2 servers x 12 MiB: server 0 uploads parts of 8 MiB and 4 MiB padded to 5 MiB, server 1
    // parts of 8 MiB and 4 MiB (the last part).
    run_with(2, 1, "strategy = 1", 2, 1, true, BIG);
    // 4 servers in groups of 2 (composite strategy 3).
    run_with(4, 1, "strategy = 3\ncomposite = true", 2, 1, true, BIG);
}

#[test]
fn config_errors_name_the_settings() {
    let err = |shard: &str| {
        DeploymentConfig::parse(&format!("[shard]\n{shard}"), Vec::new())
            .unwrap_err()
            .message
    };
    assert!(err("servers = 3").contains("power of two"));
    assert!(err("strategy = 3\ncomposite = true\nservers = 4").contains("contradicts"));
    // A server refuses to start with such a config, saying why.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("pdcx.toml"),
        format!(
            "{}\n[shard]\nstrategy = 1\nobjects = 4\n",
            tier_toml(dir.path(), false)
        ),
    )
    .unwrap();
    let e = Server::start(ServerConfig::new(&root, 0, 1))
        .err()
        .expect("a contradicting [shard] section stops the server");
    assert!(
        e.message.contains("shard.objects = 4") && e.message.contains("shard.strategy = 1"),
        "{e}"
    );
}
