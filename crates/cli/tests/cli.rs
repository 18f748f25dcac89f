//! End to end: the built `pdcx` binary against a real local deployment in a temp root.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PDCX: &str = env!("CARGO_BIN_EXE_pdcx");

fn pdcx(root: &Path, args: &[&str]) -> Output {
    Command::new(PDCX)
        .args(args)
        .env("PDCX_ROOT", root)
        .output()
        .expect("running pdcx")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs a command that must succeed; returns its stdout.
fn ok(root: &Path, args: &[&str]) -> String {
    let o = pdcx(root, args);
    assert!(o.status.success(), "pdcx {args:?} failed:\n{}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs a command that must fail with exit 1; returns its stderr.
fn fails(root: &Path, args: &[&str]) -> String {
    let o = pdcx(root, args);
    assert_eq!(
        o.status.code(),
        Some(1),
        "pdcx {args:?} should fail:\n{}",
        text(&o)
    );
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(err.starts_with("error: "), "{err}");
    err
}

/// Stops whatever this test started, even when an assertion failed half way.
struct Guard(PathBuf);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = pdcx(&self.0, &["server", "stop", "--timeout", "10"]);
    }
}

/// A version 1.0 .npy file, header padded to 64 bytes as numpy does.
fn npy_bytes(descr: &str, fortran: bool, shape: &str, data: &[u8]) -> Vec<u8> {
    let order = if fortran { "True" } else { "False" };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}, }}");
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend_from_slice(data);
    out
}

fn i32s(v: impl IntoIterator<Item = i32>) -> Vec<u8> {
    v.into_iter().flat_map(i32::to_le_bytes).collect()
}

/// Header text and data of an .npy file this tool wrote.
fn read_npy(path: &Path) -> (String, Vec<u8>) {
    let b = std::fs::read(path).expect("reading output npy");
    assert_eq!(&b[..8], b"\x93NUMPY\x01\x00", "v1 header");
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    assert_eq!((10 + hlen) % 64, 0, "data is 64-byte aligned");
    (
        String::from_utf8_lossy(&b[10..10 + hlen]).into_owned(),
        b[10 + hlen..].to_vec(),
    )
}

#[test]
fn deployment_round_trip_and_restart() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let root = tmp.path().join("root");
    let root_s = root.to_str().expect("utf-8 temp path");
    let _guard = Guard(root.clone());

    let out = ok(&root, &["server", "start", "-n", "2", "--root", root_s]);
    assert!(
        out.contains("started 2 servers") && out.contains("export PDCX_ROOT="),
        "{out}"
    );
    let status = ok(&root, &["server", "status"]);
    assert_eq!(status.matches(" up ").count(), 2, "{status}");

    // A 6x5 int32 array holding 0..30.
    let file = tmp.path().join("grid.npy");
    std::fs::write(&file, npy_bytes("<i4", false, "(6, 5)", &i32s(0..30))).expect("write npy");
    let file_s = file.to_str().expect("utf-8");
    let out = ok(
        &root,
        &[
            "put",
            file_s,
            "--tag",
            "step=7",
            "--tag",
            "species=electron",
        ],
    );
    assert!(out.contains("put grid: 6x5 int32"), "{out}");

    let ls: serde_json::Value =
        serde_json::from_str(&ok(&root, &["ls", "--json"])).expect("ls --json is JSON");
    let grid = ls["objects"]
        .as_array()
        .expect("objects list")
        .iter()
        .find(|o| o["name"] == "grid")
        .unwrap_or_else(|| panic!("grid not listed: {ls}"));
    assert_eq!(grid["dims"], serde_json::json!([6, 5]));
    assert_eq!(grid["dtype"], "int32");
    assert_eq!(grid["tags"]["step"], 7);
    assert_eq!(grid["containers"], serde_json::json!(["default"]));
    assert!(ls["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .any(|c| c["name"] == "default"));

    assert_eq!(ok(&root, &["query", "step=7"]).trim(), "grid");
    assert_eq!(
        ok(&root, &["query", "step>=5", "species~elec*"]).trim(),
        "grid"
    );
    assert_eq!(ok(&root, &["query", "step=8"]).trim(), "");

    let part = tmp.path().join("part.npy");
    let part_s = part.to_str().expect("utf-8");
    ok(&root, &["get", "grid", "--region", "2:4,1:3", "-o", part_s]);
    let (header, data) = read_npy(&part);
    assert!(
        header.contains("'descr': '<i4'") && header.contains("'shape': (2, 2)"),
        "{header}"
    );
    assert_eq!(data, i32s([11, 12, 16, 17]));

    let show = ok(&root, &["show", "grid"]);
    assert!(show.contains("seg-") && show.contains("step=7"), "{show}");

    let err = fails(&root, &["get", "grid", "--region", "0:7,:", "-o", part_s]);
    assert!(err.contains("outside"), "{err}");

    let fortran = tmp.path().join("fortran.npy");
    std::fs::write(&fortran, npy_bytes("<i4", true, "(6, 5)", &i32s(0..30))).expect("write npy");
    let err = fails(&root, &["put", fortran.to_str().expect("utf-8")]);
    assert!(err.contains("Fortran order"), "{err}");

    let out = ok(&root, &["server", "stop"]);
    assert_eq!(out.matches(": stopped").count(), 2, "{out}");
    let code = pdcx(&root, &["server", "status"]).status.code();
    assert!(
        matches!(code, Some(1 | 2)),
        "status after stop exited {code:?}"
    );

    // The data survives a restart of the deployment.
    ok(&root, &["server", "start", "-n", "2"]);
    let whole = tmp.path().join("whole.npy");
    ok(
        &root,
        &["get", "grid", "-o", whole.to_str().expect("utf-8")],
    );
    let (header, data) = read_npy(&whole);
    assert!(header.contains("'shape': (6, 5)"), "{header}");
    assert_eq!(data, i32s(0..30));
    ok(&root, &["server", "stop"]);
}

#[test]
fn missing_root_is_explained() {
    let o = Command::new(PDCX)
        .args(["ls"])
        .env_remove("PDCX_ROOT")
        .output()
        .expect("running pdcx");
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no deployment root: pass --root DIR or set PDCX_ROOT"),
        "{err}"
    );
}

#[test]
fn status_without_deployment_exits_2() {
    let tmp = tempfile::tempdir().expect("temp dir");
    assert_eq!(
        pdcx(tmp.path(), &["server", "status"]).status.code(),
        Some(2)
    );
    let out = ok(tmp.path(), &["server", "stop"]);
    assert!(out.contains("no deployment running"), "{out}");
}
