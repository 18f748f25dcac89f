//! With the library preloaded, programs that write nothing under the prefix behave exactly as
//! without it: same output, same files, no crash, no recursion (R1, R2).

mod common;

use common::*;
use std::ffi::OsStr;
use std::path::Path;

fn preload_env(lib: &Path) -> Vec<(&'static str, &OsStr)> {
    vec![("LD_PRELOAD", lib.as_os_str())]
}

/// Runs `sh -c script` with and without the preload (and with a prefix elsewhere); the
/// outputs and the file `check` must be the same.
fn same_with_and_without(script: &str, dir: &Path, check: Option<&str>) {
    let lib = lib();
    let other = dir.join("other-prefix");
    std::fs::create_dir_all(&other).unwrap();
    let plain = run("sh", &[OsStr::new("-c"), OsStr::new(script)], &[]);
    let plain_file = check.map(|f| std::fs::read(dir.join(f)).unwrap());
    let envs: [Vec<(&str, &OsStr)>; 2] = [
        preload_env(&lib),
        vec![
            ("LD_PRELOAD", lib.as_os_str()),
            ("PDCX_MPIIO_PREFIX", other.as_os_str()),
            ("PDCX_MPIIO_HOME", dir.as_os_str()),
            ("PDCX_MPIIO_DEBUG", OsStr::new("1")),
        ],
    ];
    for env in envs {
        let o = run("sh", &[OsStr::new("-c"), OsStr::new(script)], &env);
        assert_eq!(o.stdout, plain.stdout, "{script} with {env:?}");
        assert_eq!(o.stderr, plain.stderr, "{script} with {env:?}");
        if let (Some(f), Some(want)) = (check, &plain_file) {
            assert_eq!(&std::fs::read(dir.join(f)).unwrap(), want, "{f}");
        }
    }
}

#[test]
fn shell_tools_and_python_are_untouched() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().display();
    same_with_and_without("ls -la /usr/lib | head -50; ls /", d.path(), None);
    same_with_and_without(
        &format!("printf 'a\\nb\\n' > {p}/in; cat {p}/in {p}/in > {p}/out; wc -c < {p}/out; cat < {p}/out"),
        d.path(),
        Some("out"),
    );
    same_with_and_without(
        &format!(
            "python3 -c 'import os; open(\"{p}/x\",\"w\").write(\"a\"*5000); \
             f=os.open(\"{p}/x\", os.O_RDWR); os.pwrite(f, b\"zz\", 10); os.lseek(f, 0, 2); \
             print(os.fstat(f).st_size, os.pread(f, 4, 9)); os.close(f)'"
        ),
        d.path(),
        Some("x"),
    );
}

#[test]
fn constructors_threads_and_fork_are_untouched() {
    let d = tempfile::tempdir().unwrap();
    let prog = compile("ctor", d.path(), false);
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let plain = run(&prog, &[out.as_os_str()], &[]);
    let lib = lib();
    let pre = run(&prog, &[out.as_os_str()], &preload_env(&lib));
    assert_eq!(
        String::from_utf8_lossy(&pre.stdout),
        String::from_utf8_lossy(&plain.stdout)
    );
    assert!(
        String::from_utf8_lossy(&pre.stdout).contains("thread: size 13 read 13 [from a thread]")
    );
    assert_eq!(pre.stderr, plain.stderr);
}

/// An MPI-IO program writing outside the prefix, with both I/O components: the same output
/// and bytes with and without the preload; without a prefix the library says so once.
#[test]
fn mpi_io_outside_the_prefix_is_untouched() {
    if !have_mpi("mpi_io_outside_the_prefix_is_untouched") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let prog = compile("writer", d.path(), true);
    let lib = lib();
    let prefix = d.path().join("prefix");
    std::fs::create_dir(&prefix).unwrap();
    for io in ["ompio", "romio321"] {
        let direct = d.path().join(format!("direct.{io}"));
        let plain = mpirun(2, io, &[], &prog, &[direct.as_os_str()]);
        let want = std::fs::read(&direct).unwrap();
        assert!(want.len() > 600_000, "{}", want.len());

        let f = d.path().join(format!("pre.{io}"));
        let o = mpirun(2, io, &preload_env(&lib), &prog, &[f.as_os_str()]);
        assert_eq!(sorted_lines(&o), sorted_lines(&plain), "{io}");
        assert_eq!(std::fs::read(&f).unwrap(), want, "{io}");
        assert_eq!(
            our_lines(&o),
            ["pdcx mpiio: PDCX_MPIIO_PREFIX is not set; MPI-IO files are written directly"],
            "{io}"
        );

        let f = d.path().join(format!("other.{io}"));
        let env = vec![
            ("LD_PRELOAD", lib.as_os_str()),
            ("PDCX_MPIIO_PREFIX", prefix.as_os_str()),
            ("PDCX_MPIIO_HOME", OsStr::new("/nonexistent/home")),
            ("PDCX_ROOT", OsStr::new("/nonexistent/root")),
        ];
        let o = mpirun(2, io, &env, &prog, &[f.as_os_str()]);
        assert_eq!(sorted_lines(&o), sorted_lines(&plain), "{io}");
        assert_eq!(std::fs::read(&f).unwrap(), want, "{io}");
        assert_eq!(our_lines(&o), Vec::<String>::new(), "{io}");
        assert_eq!(std::fs::read_dir(&prefix).unwrap().count(), 0);
    }
}
