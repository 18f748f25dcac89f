//! Crash points of byte-stream versions and their home copies, with a real
//! SIGKILL (build with `--features crash-points`). The test re-runs its own binary as a
//! child with `PDCX_CRASH_AT=POINT`: the child starts two servers, writes a stream from both,
//! seals version 1 and waits for its home copy, then writes version 2, seals it and dies at
//! the point (while sealing or while copying). The parent checks the home file holds version
//! 1 or version 2 exactly (never a mix), restarts the servers on the same root, and checks the
//! restarted copier finishes version 2 with no temporary file left; a second restart changes
//! nothing. The same for an S3 home, killed once its multipart upload has started.
#![cfg(feature = "crash-points")]

use pdcx_client::Client;
mod common;
use common::{client_at, two_servers};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

const NAME: &str = "mpiio/ckpt.dat";

/// Version `epoch`'s bytes: 3 MiB, half from each server, a header at 0.
fn version(epoch: u8) -> Vec<u8> {
    let mut v: Vec<u8> = (0..3u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 9) as u8 ^ epoch)
        .collect();
    v[..8].copy_from_slice(&[b'V', b'E', b'R', b'S', b'I', b'O', b'N', b'0' + epoch]);
    v
}

fn write_version(root: &Path, epoch: u8) {
    let data = version(epoch);
    let half = data.len() / 2;
    let a = client_at(root, 0).bs_open(NAME, true).unwrap();
    let b = client_at(root, 1).bs_open(NAME, false).unwrap();
    a.pwrite(0, &data[..half]).unwrap();
    b.pwrite(half as u64, &data[half..]).unwrap();
    a.pwrite(0, &data[..8]).unwrap();
    a.commit().unwrap();
    b.commit().unwrap();
}

fn wait_done(c: &Client, epoch: u64) {
    wait_done_of(c, NAME, epoch)
}

fn wait_done_of(c: &Client, name: &str, epoch: u64) {
    let bs = c.bs_open(name, false).unwrap();
    let t0 = Instant::now();
    while !bs
        .versions()
        .unwrap()
        .iter()
        .any(|v| v.epoch == epoch && v.state == "done")
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "version {epoch} never copied"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn home_crash_child() {
    let Some(dir) = std::env::var_os("PDCX_HOME_CRASH_CHILD") else {
        return;
    };
    let dir = Path::new(&dir);
    let root = dir.join("root");
    let home = dir.join("home/ckpt.dat");
    let _servers = two_servers(&root);
    write_version(&root, 1);
    let c = client_at(&root, 0);
    let bs = c.bs_open(NAME, false).unwrap();
    assert_eq!(bs.seal(home.to_str().unwrap()).unwrap(), 1);
    wait_done(&c, 1);
    write_version(&root, 2);
    bs.seal(home.to_str().unwrap()).unwrap();
    wait_done(&c, 2);
    // Not reached when the crash point fires.
    std::thread::sleep(Duration::from_secs(2));
}

/// Runs [`check`] in a child process: servers started in-process keep each other alive
/// through their peer connections, so a restart on the same root needs a fresh process.
#[test]
fn home_crash_check() {
    let (Some(dir), Ok(point)) = (
        std::env::var_os("PDCX_HOME_CRASH_CHECK"),
        std::env::var("PDCX_HOME_CRASH_POINT"),
    ) else {
        return;
    };
    check(Path::new(&dir), &point);
}

fn check(dir: &Path, point: &str) {
    let root = dir.join("root");
    let home = dir.join("home/ckpt.dat");
    let before = std::fs::read(&home).expect("version 1 was copied before the crash");
    assert!(
        before == version(1) || before == version(2),
        "{point}: the home holds neither version whole after the crash"
    );
    let servers = two_servers(&root);
    let c = client_at(&root, 0);
    wait_done(&c, 2);
    assert!(
        std::fs::read(&home).unwrap() == version(2),
        "{point}: home is not version 2"
    );
    let names: Vec<_> = std::fs::read_dir(home.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{point}: left behind: {names:?}");
    // Reading the stream still gives the latest content.
    let bs = c.bs_open(NAME, false).unwrap();
    let mut back = vec![0u8; 3 << 20];
    assert_eq!(bs.pread(0, &mut back).unwrap(), back.len());
    assert!(back == version(2), "{point}: stream content");
    // Version 2 is the base now (read from the home): no write stays in any log.
    let t0 = Instant::now();
    loop {
        let extents: u64 = (0..2).map(|r| c.stats(r).unwrap().extents).sum();
        if extents == 0 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{point}: {extents} extents still in the logs"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(servers);
}

/// Runs this binary's test `name` alone in a child with `env`. A child that did not run its
/// test (a name that matches nothing also exits 0) or failed it fails the caller.
fn run_child(name: &str, env: &[(&str, &std::ffi::OsStr)]) {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name} ({env:?}): {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs this binary's test `name` alone in a child with `env` and `PDCX_CRASH_AT=point`, and
/// fails unless the child was killed (SIGKILL: it reached the point).
fn crash_child(name: &str, point: &str, env: &[(&str, &std::ffi::OsStr)]) {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.env("PDCX_CRASH_AT", point).output().unwrap();
    assert_eq!(
        out.status.signal(),
        Some(9),
        "{point} was never reached (child exited with {}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn home_copies_survive_a_crash_at_every_point() {
    for (point, n) in [
        ("seal.after_row", 2),
        ("home.after_tmp_written", 2),
        ("home.after_rename", 2),
        ("home.after_base", 2),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().as_os_str();
        crash_child(
            "home_crash_child",
            &format!("{point}:{n}"),
            &[("PDCX_HOME_CRASH_CHILD", d)],
        );
        // The second recovery finds nothing to do and changes nothing.
        for _ in 0..2 {
            run_child(
                "home_crash_check",
                &[
                    ("PDCX_HOME_CRASH_CHECK", d),
                    ("PDCX_HOME_CRASH_POINT", point.as_ref()),
                ],
            );
        }
    }
}

/// The stream whose versions go to an S3 home.
const S3_NAME: &str = "mpiio/big.dat";

/// A version big enough for a multipart upload to an S3 home (two parts of 8 MiB at most),
/// half from each server.
fn big_version() -> Vec<u8> {
    (0..10u32 << 20)
        .map(|i| (i.wrapping_mul(2_246_822_519) >> 11) as u8)
        .collect()
}

/// The child of [`an_s3_home_copy_survives_a_crash_after_its_upload_started`]: writes the
/// version from both servers, seals it for the S3 home and dies once the owner has started
/// the upload and recorded its id.
#[test]
fn s3_home_crash_child() {
    let (Some(dir), Ok(home)) = (
        std::env::var_os("PDCX_S3_HOME_CRASH_CHILD"),
        std::env::var("PDCX_S3_HOME"),
    ) else {
        return;
    };
    let root = Path::new(&dir).join("root");
    let _servers = two_servers(&root);
    let data = big_version();
    let half = data.len() / 2;
    let a = client_at(&root, 0).bs_open(S3_NAME, true).unwrap();
    let b = client_at(&root, 1).bs_open(S3_NAME, false).unwrap();
    a.pwrite(0, &data[..half]).unwrap();
    b.pwrite(half as u64, &data[half..]).unwrap();
    a.commit().unwrap();
    b.commit().unwrap();
    assert_eq!(a.seal(&home).unwrap(), 1);
    wait_done_of(&client_at(&root, 0), S3_NAME, 1);
    // Not reached when the crash point fires.
    std::thread::sleep(Duration::from_secs(2));
}

/// The restart after that crash, in a fresh process: the copier aborts the upload the crashed
/// owner recorded and copies the version again.
#[test]
fn s3_home_crash_check() {
    let Some(dir) = std::env::var_os("PDCX_S3_HOME_CRASH_CHECK") else {
        return;
    };
    let root = Path::new(&dir).join("root");
    let _servers = two_servers(&root);
    let c = client_at(&root, 0);
    wait_done_of(&c, S3_NAME, 1);
    let v = c.bs_open(S3_NAME, false).unwrap().versions().unwrap();
    assert!(v.iter().all(|v| v.upload_id.is_empty()), "{v:?}");
}

/// SIGKILL of the owner right after it started the multipart upload of a version to its S3
/// home and recorded the upload's id: nothing is in the bucket (an upload is no object until
/// completed), and after a restart the version arrives whole; a second restart changes
/// nothing.
#[test]
fn an_s3_home_copy_survives_a_crash_after_its_upload_started() {
    let Some(s3) = common::s3_server() else {
        return;
    };
    // The servers (in the children) read S3 credentials from the environment.
    let raw = common::s3_home_env(&s3);
    let bucket = &s3.vars["PDCX_TEST_S3_BUCKET"];
    use pdcx_tiers::Tier;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().as_os_str();
    let home = format!("s3://{bucket}/run/big.dat");
    crash_child(
        "s3_home_crash_child",
        "s3.after_create_upload:1",
        &[
            ("PDCX_S3_HOME_CRASH_CHILD", d),
            ("PDCX_S3_HOME", home.as_ref()),
        ],
    );
    assert!(
        raw.len("run/big.dat").is_err(),
        "an object appeared before the upload was completed"
    );
    let data = big_version();
    for _ in 0..2 {
        run_child("s3_home_crash_check", &[("PDCX_S3_HOME_CRASH_CHECK", d)]);
        assert_eq!(raw.len("run/big.dat").unwrap(), data.len() as u64);
        let mut back = vec![0u8; data.len()];
        raw.get_range("run/big.dat", 0, &mut back).unwrap();
        assert!(back == data, "the S3 object is not the version");
    }
}
