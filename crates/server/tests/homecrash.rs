//! Crash points of byte-stream versions and their home copies, with a real
//! SIGKILL (build with `--features crash-points`). The test re-runs its own binary as a
//! child with `PDCX_CRASH_AT=POINT`: the child starts two servers, writes a stream from both,
//! seals version 1 and waits for its home copy, then writes version 2, seals it and dies at
//! the point (while sealing or while copying). The parent checks the home file holds version
//! 1 or version 2 exactly (never a mix), restarts the servers on the same root, and checks the
//! restarted copier finishes version 2 with no temporary file left; a second restart changes
//! nothing.
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
    let bs = c.bs_open(NAME, false).unwrap();
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

#[test]
fn home_copies_survive_a_crash_at_every_point() {
    let exe = std::env::current_exe().unwrap();
    for (point, n) in [
        ("seal.after_row", 2),
        ("home.after_tmp_written", 2),
        ("home.after_rename", 2),
        ("home.after_base", 2),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new(&exe)
            .args([
                "--exact",
                "home_crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("PDCX_HOME_CRASH_CHILD", dir.path())
            .env("PDCX_CRASH_AT", format!("{point}:{n}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(
            status.signal(),
            Some(9),
            "{point}:{n} was never reached (child exited with {status})"
        );
        // The second recovery finds nothing to do and changes nothing.
        for _ in 0..2 {
            let out = std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "home_crash_check",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("PDCX_HOME_CRASH_CHECK", dir.path())
                .env("PDCX_HOME_CRASH_POINT", point)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{point}: check failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
