//! Shared by the integration tests: where the built library is, compiling C test programs,
//! running programs with and without the preload under `mpirun`.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The library cargo built with this test: `target/<profile>/deps/libpdcx_mpiio.so`, beside
/// the test binary (cargo refreshes the copy in `target/<profile>/` only on `cargo build`).
pub fn lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().unwrap().join("libpdcx_mpiio.so");
    assert!(
        lib.is_file(),
        "{} is missing (cargo builds it with the tests)",
        lib.display()
    );
    lib
}

fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// True when `mpicc` and `mpirun` exist; otherwise prints why the test is skipped.
pub fn have_mpi(test: &str) -> bool {
    let ok = on_path("mpicc") && on_path("mpirun");
    if !ok {
        skip(
            test,
            "mpicc/mpirun not found (apt-get install libopenmpi-dev openmpi-bin)",
        );
    }
    ok
}

/// True when parallel HDF5's `h5pcc` exists; otherwise prints why the test is skipped.
pub fn have_phdf5(test: &str) -> bool {
    let ok = have_mpi(test) && on_path("h5pcc");
    if !ok {
        skip(
            test,
            "h5pcc not found (apt-get install libhdf5-openmpi-dev)",
        );
    }
    ok
}

/// Prints why `test` checks nothing; under `PDCX_NO_SKIPS=1` (CI, `scripts/test.sh`) a
/// missing tool fails the test instead, since setup installs every one of them.
fn skip(test: &str, why: &str) {
    assert_ne!(
        std::env::var("PDCX_NO_SKIPS").as_deref(),
        Ok("1"),
        "PDCX_NO_SKIPS=1 but {test} cannot run: {why}"
    );
    eprintln!("SKIPPED {test}: {why}");
}

/// Compiles `tests/c/NAME.c` with `cc` (`mpicc` when `mpi`) into `dir`.
pub fn compile(name: &str, dir: &Path, mpi: bool) -> PathBuf {
    compile_with(if mpi { "mpicc" } else { "cc" }, name, dir)
}

/// Compiles `tests/c/NAME.c` with `cc` into `dir`.
pub fn compile_with(cc: &str, name: &str, dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let out = dir.join(name);
    let o = Command::new(cc)
        .args([
            OsStr::new("-O"),
            OsStr::new("-o"),
            out.as_os_str(),
            src.as_os_str(),
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{cc} {}: {}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Runs `prog args` with `env`, failing the test if it does not exit 0.
pub fn run(prog: impl AsRef<OsStr>, args: &[&OsStr], env: &[(&str, &OsStr)]) -> Output {
    let mut c = Command::new("timeout");
    c.arg("120").arg(prog.as_ref()).args(args);
    c.env_remove("LD_PRELOAD");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{:?} {args:?} failed ({}):\n{}\n{}",
        prog.as_ref(),
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// `mpirun -n N --mca io IO [-x K=V]... PROG ARGS`; the variables go to the ranks only
/// (mpirun itself runs without the preload).
pub fn mpirun(n: u32, io: &str, env: &[(&str, &OsStr)], prog: &Path, args: &[&OsStr]) -> Output {
    let mut a: Vec<std::ffi::OsString> = vec![
        "--allow-run-as-root".into(),
        "--oversubscribe".into(),
        "-n".into(),
        n.to_string().into(),
        "--mca".into(),
        "io".into(),
        io.into(),
    ];
    for (k, v) in env {
        let mut kv = std::ffi::OsString::from(format!("{k}="));
        kv.push(v);
        a.push("-x".into());
        a.push(kv);
    }
    a.push(prog.into());
    a.extend(args.iter().map(|s| s.to_os_string()));
    let refs: Vec<&OsStr> = a.iter().map(|s| s.as_os_str()).collect();
    run("mpirun", &refs, &[])
}

/// Stdout lines, sorted (ranks print in any order).
pub fn sorted_lines(o: &Output) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// The stderr lines this library printed.
pub fn our_lines(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.starts_with("pdcx mpiio:"))
        .map(str::to_string)
        .collect()
}
