"""Unmodified MPI-IO programs (c/mpiio/) run directly and under `pdcx run`.

Every program runs under `mpirun -n 4` with each of Open MPI's MPI-IO components (OMPIO and
ROMIO). A direct run writes the golden file, checked here against a model of the bytes the
writer writes; a run under `pdcx run --prefix OUT --home HOME` must leave HOME/NAME
byte-identical to it after `pdcx flush` (HDF5 files also `h5diff`-equal).

The pdcx parts need `pdcx run` (the launcher of libpdcx_mpiio.so, found next to the pdcx
binary): they skip while the pdcx binary ($PDCX_BIN, see conftest.py) has no `run` command.
The h5py parts need a parallel h5py: importable as is, or from the directory $PDCX_H5PY_PATH.
The S3 parts need versitygw (the `s3_server` fixture) and boto3. Facts measured for the goldens (Open MPI 4.1.4, HDF5 1.10.8):
every mode is byte-reproducible and identical under both components, except independent
strided writes with holes under ROMIO: data sieving reads the holes back and writes whatever
the read left in its buffer, so only the bytes the program wrote and the size are defined
(WRITER_HINTS=romio_ds_write=disable,romio_cb_write=disable makes it byte-exact).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, pdcx_bin, run_pdcx

PROGS = REPO / "c" / "mpiio"
RANKS = 4
IOS = ["ompio", "romio321"]
NO_SIEVE = "romio_ds_write=disable,romio_cb_write=disable"

# Writer runs: id -> (mode, size args, WRITER_HINTS). Small sizes keep the file fast.
CASES = {
    "indep": ("indep", ["1M"], ""),
    "coll": ("coll", ["1M"], ""),
    # 32 MiB: a file spanning many of whatever chunks or segments pdcx cuts a stream into.
    "coll-large": ("coll", ["8M"], ""),
    "strided": ("strided", ["64K", "8"], ""),
    "strided-holes": ("strided", ["64K", "8", "4K"], ""),
    "strided-unaligned": ("strided", ["1000", "37", "7"], ""),
    "strided-indep-holes": ("strided-indep", ["64K", "8", "4K"], ""),
    "strided-indep-holes-nosieve": ("strided-indep", ["64K", "8", "4K"], NO_SIEVE),
    "overlap": ("overlap", ["256K"], ""),
    "fpp": ("fpp", ["256K"], ""),
    "multi": ("multi", ["256K"], ""),
    "readback": ("readback", ["256K"], ""),
}


def sieved_holes(case: str, io: str) -> bool:
    """Runs whose holes hold whatever ROMIO's sieve buffer held (see the module docstring)."""
    return io == "romio321" and case == "strided-indep-holes"


# ---- the model of what writer.c writes -------------------------------------------------------
_A, _B, _C = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def content(off: int, length: int, rank: int, epoch: int) -> np.ndarray:
    """writer.c's byte_at() for file offsets off..off+length (uint64 arithmetic wraps)."""
    o = np.arange(off, off + length, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = o * _A + np.uint64(rank + 1) * _B + np.uint64(epoch + 1) * _C
    x ^= x >> np.uint64(31)
    return ((x ^ (x >> np.uint64(17))) & np.uint64(0xFF)).astype(np.uint8)


def size_arg(s: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)


class Image:
    """A file being built from writes: bytes plus a mask of the bytes the program wrote."""

    def __init__(self) -> None:
        self.data = np.zeros(0, np.uint8)
        self.written = np.zeros(0, bool)

    def resize(self, n: int) -> None:
        old = len(self.data)
        self.data = np.resize(self.data, n) if n else np.zeros(0, np.uint8)
        self.written = np.resize(self.written, n) if n else np.zeros(0, bool)
        if n > old:
            self.data[old:] = 0
            self.written[old:] = False

    def write(self, off: int, length: int, rank: int, epoch: int) -> None:
        if off + length > len(self.data):
            self.resize(off + length)
        self.data[off : off + length] = content(off, length, rank, epoch)
        self.written[off : off + length] = True


def model(case: str, n: int = RANKS) -> dict[str, Image]:
    """File name (relative to the writer's PATH, "" = PATH itself) -> expected image."""
    mode, args, _ = CASES[case]
    sizes = [size_arg(a) for a in args]
    f = Image()
    if mode in ("indep", "coll", "readback"):
        (b,) = sizes
        for r in range(n):
            f.write(r * b, b // 2, r, 0)
            f.write(r * b + b // 2, b - b // 2, r, 0)
    elif mode in ("strided", "strided-indep"):
        unit, count, gap = (sizes + [0])[:3]
        for j in range(count):
            for r in range(n):
                f.write((j * n + r) * unit, unit - gap, r, 0)
    elif mode == "overlap":
        (b,) = sizes
        for r in range(n):
            f.write(r * b, b, r, 0)
        for r in range(n):
            f.write(((r + 1) % n) * b + b // 4, b // 2, r, 1)
        f.write(0, 64, 0, 2)
        f.write(0, 40, 0, 3)
    elif mode == "fpp":
        (b,) = sizes
        files = {}
        for r in range(n):
            g = Image()
            size, q = b + r * 1000, (b + r * 1000) // 4
            for i in range(4):
                g.write(i * q, size - 3 * q if i == 3 else q, r, 0)
            files[f".{r}"] = g
        return files
    elif mode == "multi":
        (b,) = sizes
        for r in range(n):
            f.write(r * b, b, r, 0)
        for r in range(n):
            f.write(r * b, b // 4, r, 1)
            f.write(n * b + r * (b // 2), b // 2, r, 1)
        f.resize(n * b - b // 3)
        f.resize(n * b + b)
        f.write(n * b + b - 100, 100, 0, 2)
    else:
        raise AssertionError(mode)
    return {"": f}


# ---- running things --------------------------------------------------------------------------
def mpi_env(extra: dict | None = None) -> dict:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("WRITER_HINTS", None)
    env.update(extra or {})
    return env


def mpirun(io: str, argv: list, *, ranks: int = RANKS, env: dict | None = None, timeout: float = 120):
    """`mpirun -n RANKS --mca io IO ARGV`; returns the CompletedProcess (text)."""
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(ranks), "--mca", "io", io]
    return subprocess.run(
        cmd + [str(a) for a in argv],
        env=env or mpi_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ok(p: subprocess.CompletedProcess, banner: str) -> None:
    assert p.returncode == 0 and banner in p.stdout, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"


@cache
def _pdcx_has_run() -> str | None:
    try:
        p = subprocess.run([pdcx_bin(), "run", "--help"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"pdcx run --help failed: {e}"
    if p.returncode != 0:
        return "pdcx has no `run` command yet (libpdcx_mpiio.so and `pdcx run` are not built)"
    return None


def need_pdcx_run() -> None:
    why = _pdcx_has_run()
    if why:
        pytest.skip(why)


def pdcx_run(io: str, prefix: Path, home: Path, root: Path, argv: list, *, ranks: int = RANKS, env=None):
    """`mpirun -n RANKS --mca io IO pdcx run --prefix PREFIX --home HOME --root ROOT -- ARGV`."""
    launcher = [pdcx_bin(), "run", "--prefix", prefix, "--home", home, "--root", root, "--"]
    return mpirun(io, launcher + list(argv), ranks=ranks, env=env)


def pdcx_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "pdcx" in ln.lower()]


@pytest.fixture(scope="module")
def progs(tmp_path_factory) -> dict[str, Path]:
    """The C programs built into a temporary directory (phdf5 only when h5pcc exists)."""
    for tool in ("mpicc", "mpirun"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (scripts/setup.sh --test: openmpi-bin libopenmpi-dev)")
    out = tmp_path_factory.mktemp("mpiio-progs")
    built = {}
    subprocess.run(
        ["mpicc", "-O2", "-Wall", "-Wextra", "-o", out / "writer", PROGS / "writer.c"],
        check=True,
        timeout=120,
    )
    built["writer"] = out / "writer"
    if shutil.which("h5pcc"):
        # cwd: h5pcc leaves its phdf5.o in the current directory.
        subprocess.run(
            ["h5pcc", "-O2", "-Wall", "-o", out / "phdf5", PROGS / "phdf5.c"], check=True, timeout=120, cwd=out
        )
        built["phdf5"] = out / "phdf5"
    return built


@pytest.fixture(scope="module")
def golden(progs, tmp_path_factory):
    """golden(case, io) -> directory holding the direct run's file(s) `f.dat*` (cached)."""
    base = tmp_path_factory.mktemp("mpiio-golden")
    made: dict[tuple[str, str], Path] = {}

    def get(case: str, io: str) -> Path:
        if (case, io) not in made:
            mode, args, hints = CASES[case]
            d = base / f"{case}.{io}"
            d.mkdir()
            p = mpirun(io, [progs["writer"], mode, d / "f.dat", *args], env=mpi_env({"WRITER_HINTS": hints}))
            ok(p, f"writer {mode} ok")
            made[(case, io)] = d
        return made[(case, io)]

    return get


def assert_matches_model(case: str, io: str, d: Path) -> None:
    for suffix, img in model(case).items():
        got = np.fromfile(d / f"f.dat{suffix}", dtype=np.uint8)
        assert len(got) == len(img.data), f"{case}/{io} f.dat{suffix}: size {len(got)}, model {len(img.data)}"
        if sieved_holes(case, io):
            bad = np.flatnonzero(got[img.written] != img.data[img.written])
        else:
            bad = np.flatnonzero(got != img.data)
        assert bad.size == 0, f"{case}/{io} f.dat{suffix}: {bad.size} bytes differ from the model, first at {bad[0]}"


def assert_same_file(case: str, io: str, got: Path, want: Path) -> None:
    """Byte-identical, or for runs with sieved holes: same size and same program-written bytes."""
    if not sieved_holes(case, io):
        p = subprocess.run(["cmp", got, want], capture_output=True, text=True, check=False)
        assert p.returncode == 0, f"{case}/{io}: {got} differs from the direct run: {p.stdout}{p.stderr}"
        return
    (img,) = model(case).values()
    g = np.fromfile(got, dtype=np.uint8)
    assert len(g) == len(img.data), f"{case}/{io}: size {len(g)}, direct run {len(img.data)}"
    assert np.array_equal(g[img.written], img.data[img.written]), f"{case}/{io}: written bytes differ"


# ---- direct runs: the goldens and the facts the pdcx comparisons rely on -----------------------
@pytest.mark.parametrize("io", IOS)
@pytest.mark.parametrize("case", list(CASES))
def test_direct_run_matches_model(golden, case, io):
    assert_matches_model(case, io, golden(case, io))


@pytest.mark.parametrize("case", [c for c in CASES if not sieved_holes(c, "romio321")])
def test_direct_runs_identical_across_components(golden, case):
    """Both MPI-IO components write the same bytes, so one model serves both."""
    for suffix in model(case):
        a, b = golden(case, "ompio") / f"f.dat{suffix}", golden(case, "romio321") / f"f.dat{suffix}"
        assert a.read_bytes() == b.read_bytes(), f"{case}: ompio and romio321 differ in f.dat{suffix}"


def test_writer_reports_mpi_errors(progs, tmp_path):
    """An MPI error (here: a directory that does not exist) fails the program with a message,
    so a test can never mistake a failed write for a passing one."""
    p = mpirun("ompio", [progs["writer"], "indep", tmp_path / "no" / "such" / "f.dat", "4K"], ranks=2)
    assert p.returncode != 0
    assert "MPI_File_open" in p.stderr


# ---- runs under `pdcx run` ---------------------------------------------------------------------
@pytest.fixture
def dirs(tmp_path):
    out, home = tmp_path / "out", tmp_path / "home"
    out.mkdir()
    home.mkdir()
    return out, home


@pytest.mark.parametrize("io", IOS)
@pytest.mark.parametrize("case", list(CASES))
def test_run_home_file_identical(progs, golden, deployment, dirs, case, io):
    need_pdcx_run()
    dep = deployment(n=2)
    out, home = dirs
    mode, args, hints = CASES[case]
    env = mpi_env({"PDCX_ROOT": str(dep.root), "WRITER_HINTS": hints})
    p = pdcx_run(io, out, home, dep.root, [progs["writer"], mode, out / "f.dat", *args], env=env)
    ok(p, f"writer {mode} ok")
    assert not pdcx_lines(p.stderr), f"pdcx complained on a good configuration:\n{p.stderr}"
    run_pdcx("flush", "--root", dep.root, timeout=120)
    want = golden(case, io)
    for suffix in model(case):
        assert_same_file(case, io, home / f"f.dat{suffix}", want / f"f.dat{suffix}")
        # Write-through: the file at its path holds the same bytes, for any process to read.
        assert_same_file(case, io, out / f"f.dat{suffix}", want / f"f.dat{suffix}")


@pytest.mark.parametrize("io", IOS)
def test_run_object_holds_the_bytes(progs, golden, deployment, dirs, tmp_path, io):
    """The file's bytes are also the pdcx byte-stream object mpiio/NAME."""
    need_pdcx_run()
    dep = deployment(n=2)
    out, home = dirs
    env = mpi_env({"PDCX_ROOT": str(dep.root)})
    ok(pdcx_run(io, out, home, dep.root, [progs["writer"], "coll", out / "f.dat", "1M"], env=env), "writer coll ok")
    run_pdcx("flush", "--root", dep.root, timeout=120)
    npy = tmp_path / "obj.npy"
    run_pdcx("get", "--root", dep.root, "mpiio/f.dat", "-o", npy)
    assert np.load(npy).tobytes() == (golden("coll", io) / "f.dat").read_bytes()


# ---- a crash between consistency points -------------------------------------------------------
def multi_after_sync(k: int, n: int = RANKS) -> Image:
    """What writer.c's `multi` has written when its k-th MPI_File_sync returns (the size
    argument of CASES["multi"])."""
    b = size_arg(CASES["multi"][1][0])
    f = Image()
    for r in range(n):
        f.write(r * b, b, r, 0)
    if k >= 2:
        for r in range(n):
            f.write(r * b, b // 4, r, 1)
            f.write(n * b + r * (b // 2), b // 2, r, 1)
    return f


@pytest.mark.parametrize("io", IOS)
@pytest.mark.parametrize("k", [1, 2])
def test_crash_after_sync_home_holds_the_synced_version(progs, golden, deployment, dirs, k, io):
    """Every rank is SIGKILLed after the k-th MPI_File_sync and more writes: the home holds the
    file as of that sync, never the later writes; a rerun then completes the file."""
    need_pdcx_run()
    dep = deployment(n=2)
    out, home = dirs
    mode, args, _ = CASES["multi"]
    argv = [progs["writer"], mode, out / "f.dat", *args]
    p = pdcx_run(
        io, out, home, dep.root, argv, env=mpi_env({"PDCX_ROOT": str(dep.root), "WRITER_CRASH_AFTER_SYNC": str(k)})
    )
    assert p.returncode != 0 and f"crashing after sync {k}" in p.stderr, f"{p.stdout}\n{p.stderr}"
    run_pdcx("flush", "--root", dep.root, timeout=120)
    got = (home / "f.dat").read_bytes()
    assert got == multi_after_sync(k).data.tobytes(), f"home file ({len(got)} bytes) is not the file as of sync {k}"

    # multi's result does not depend on what the file held before, so a rerun over the same
    # name must give the golden file.
    p = pdcx_run(io, out, home, dep.root, argv, env=mpi_env({"PDCX_ROOT": str(dep.root)}))
    ok(p, f"writer {mode} ok")
    run_pdcx("flush", "--root", dep.root, timeout=120)
    assert (home / "f.dat").read_bytes() == (golden("multi", io) / "f.dat").read_bytes()


# ---- S3 home: the home copy is an ordinary object --------------------------------------------
@pytest.mark.parametrize("io", IOS)
@pytest.mark.parametrize("case", ["coll", "coll-large", "multi", "fpp"])
def test_s3_home_object_identical(progs, golden, deployment, s3_server, tmp_path, monkeypatch, case, io):
    """`--home s3://BUCKET/PREFIX`: after `pdcx flush` each file is the object PREFIX/NAME,
    byte-identical to the direct run (4 MiB: below a part, one PUT; 32 MiB: multipart)."""
    need_pdcx_run()
    boto3 = pytest.importorskip("boto3")
    for k, v in s3_server["env"].items():
        monkeypatch.setenv(k, v)  # the servers write the home with these
    dep = deployment(n=2)
    out = tmp_path / "out"
    out.mkdir()
    mode, args, hints = CASES[case]
    home = f"s3://{s3_server['bucket']}/run1"
    env = mpi_env({"PDCX_ROOT": str(dep.root), "WRITER_HINTS": hints})
    p = pdcx_run(io, out, home, dep.root, [progs["writer"], mode, out / "f.dat", *args], env=env)
    ok(p, f"writer {mode} ok")
    run_pdcx("flush", "--root", dep.root, timeout=120)
    s3 = boto3.client(
        "s3",
        endpoint_url=s3_server["endpoint"],
        aws_access_key_id=s3_server["access_key_id"],
        aws_secret_access_key=s3_server["secret_access_key"],
        region_name="us-east-1",
    )
    want = golden(case, io)
    for suffix in model(case):
        body = s3.get_object(Bucket=s3_server["bucket"], Key=f"run1/f.dat{suffix}")["Body"].read()
        assert body == (want / f"f.dat{suffix}").read_bytes(), f"{case}/{io}: object run1/f.dat{suffix} differs"


# ---- fallback: bad configuration writes directly to the home, with one message -----------------
@pytest.mark.parametrize("io", IOS)
def test_fallback_no_server(progs, golden, dirs, tmp_path, io):
    """No server reachable: one message on stderr and the file written directly at HOME/NAME."""
    need_pdcx_run()
    out, home = dirs
    root = tmp_path / "no-servers"
    root.mkdir()
    env = mpi_env({"PDCX_ROOT": str(root)})
    p = pdcx_run(io, out, home, root, [progs["writer"], "fpp", out / "f.dat", "256K"], ranks=1, env=env)
    ok(p, "writer fpp ok")
    assert len(pdcx_lines(p.stderr)) == 1, f"want exactly one pdcx line on stderr, got:\n{p.stderr}"
    assert (home / "f.dat.0").read_bytes() == model("fpp")[".0"].data.tobytes()

    # All 4 ranks on one shared file: still one message for the job, the home file correct.
    p = pdcx_run(io, out, home, root, [progs["writer"], "coll", out / "g.dat", "1M"], env=env)
    ok(p, "writer coll ok")
    assert len(pdcx_lines(p.stderr)) == 1, f"want exactly one pdcx line on stderr, got:\n{p.stderr}"
    assert (home / "g.dat").read_bytes() == (golden("coll", io) / "f.dat").read_bytes()


@pytest.mark.parametrize("io", IOS)
def test_fallback_prefix_inside_root(progs, golden, deployment, tmp_path, io):
    """A prefix inside the deployment root (pdcx's own files) cannot be logged: one message,
    the file written directly at HOME/NAME."""
    need_pdcx_run()
    dep = deployment(n=2)
    home = tmp_path / "home"
    home.mkdir()
    prefix = dep.root / "out"
    prefix.mkdir()
    env = mpi_env({"PDCX_ROOT": str(dep.root)})
    p = pdcx_run(io, prefix, home, dep.root, [progs["writer"], "coll", prefix / "f.dat", "1M"], env=env)
    ok(p, "writer coll ok")
    assert len(pdcx_lines(p.stderr)) == 1, f"want exactly one pdcx line on stderr, got:\n{p.stderr}"
    assert (home / "f.dat").read_bytes() == (golden("coll", io) / "f.dat").read_bytes()


@pytest.mark.parametrize("io", IOS)
def test_fallback_prefix_not_a_directory(progs, golden, deployment, tmp_path, io):
    """A prefix that is a regular file: one message and the file written at HOME/NAME (the
    program's own path PREFIX/NAME could not even be created)."""
    need_pdcx_run()
    dep = deployment(n=2)
    home = tmp_path / "home"
    home.mkdir()
    prefix = tmp_path / "plainfile"
    prefix.write_bytes(b"not a directory\n")
    env = mpi_env({"PDCX_ROOT": str(dep.root)})
    p = pdcx_run(io, prefix, home, dep.root, [progs["writer"], "fpp", prefix / "f.dat", "256K"], ranks=1, env=env)
    ok(p, "writer fpp ok")
    assert len(pdcx_lines(p.stderr)) == 1, f"want exactly one pdcx line on stderr, got:\n{p.stderr}"
    assert (home / "f.dat.0").read_bytes() == (golden("fpp", io) / "f.dat.0").read_bytes()
    assert prefix.read_bytes() == b"not a directory\n"


# ---- files outside the prefix are left alone ----------------------------------------------------
@pytest.mark.parametrize("io", IOS)
def test_files_outside_prefix_untouched(progs, golden, deployment, dirs, tmp_path, io):
    need_pdcx_run()
    dep = deployment(n=2)
    out, home = dirs
    # A sibling whose name starts with the prefix's string: matching must be by path component.
    sibling = tmp_path / "out.other"
    sibling.mkdir()
    env = mpi_env({"PDCX_ROOT": str(dep.root)})
    for d in (sibling, tmp_path):
        p = pdcx_run(io, out, home, dep.root, [progs["writer"], "coll", d / "f.dat", "1M"], env=env)
        ok(p, "writer coll ok")
        assert not pdcx_lines(p.stderr), p.stderr
        assert (d / "f.dat").read_bytes() == (golden("coll", io) / "f.dat").read_bytes()
    # Nothing was logged: no stream exists, and flush (without tiers) has nothing to wait for.
    objects = json.loads(run_pdcx("ls", "--json", "--root", dep.root).stdout)["objects"]
    assert not objects, f"files outside the prefix became streams: {objects}"
    run_pdcx("flush", "--root", dep.root, timeout=120, check=False)
    assert not any(home.iterdir()), f"files outside the prefix reached the home: {list(home.iterdir())}"


# ---- parallel HDF5 (C) and h5py's mpio driver ------------------------------------------------
def h5diff(a: Path, b: Path) -> None:
    if shutil.which("h5diff") is None:
        pytest.skip("h5diff not installed (apt hdf5-tools; scripts/setup.sh --test)")
    p = subprocess.run(["h5diff", a, b], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, f"h5diff {a} {b}:\n{p.stdout}{p.stderr}"


def h5py_env() -> dict:
    """Environment in which `import h5py` gives a parallel h5py, or a skip. PDCX_H5PY_PATH
    names a directory holding one (a parallel build is not a wheel; see SETUP-NOTES trap 3)."""
    extra = {}
    if os.environ.get("PDCX_H5PY_PATH"):
        extra["PYTHONPATH"] = os.pathsep.join(
            filter(None, [os.environ["PDCX_H5PY_PATH"], os.environ.get("PYTHONPATH")])
        )
    env = mpi_env(extra)
    probe = "import h5py, mpi4py, sys; sys.exit(0 if h5py.get_config().mpi else 3)"
    p = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, check=False)
    why = None
    if p.returncode == 3:
        why = "h5py is built without MPI (h5py.get_config().mpi is false); set PDCX_H5PY_PATH"
    elif p.returncode != 0:
        why = f"no parallel h5py + mpi4py: {p.stderr.strip().splitlines()[-1:]}"
    if why and os.environ.get("PDCX_REQUIRE_H5PY") == "1":
        pytest.fail(f"PDCX_REQUIRE_H5PY=1 (CI: scripts/setup.sh --test builds it) but {why}")
    if why:
        pytest.skip(why)
    return env


def h5_program(progs, which: str) -> tuple[list, str, dict]:
    """argv prefix, success banner, environment of one HDF5 program."""
    if which == "phdf5":
        if "phdf5" not in progs:
            pytest.skip("h5pcc not installed (apt libhdf5-openmpi-dev; scripts/setup.sh --test)")
        return [progs["phdf5"]], "phdf5 ok", mpi_env()
    return [sys.executable, PROGS / "h5py_mpio.py"], "h5py_mpio ok", h5py_env()


@pytest.fixture(scope="module")
def h5golden(progs, tmp_path_factory):
    base = tmp_path_factory.mktemp("h5-golden")
    made: dict[tuple[str, str], Path] = {}

    def get(which: str, io: str) -> Path:
        if (which, io) not in made:
            argv, banner, env = h5_program(progs, which)
            f = base / f"{which}.{io}.h5"
            ok(mpirun(io, argv + [f], env=env), banner)
            made[(which, io)] = f
        return made[(which, io)]

    return get


@pytest.mark.parametrize("which", ["phdf5", "h5py"])
def test_hdf5_direct_reproducible(h5golden, progs, tmp_path, which):
    """The fact the byte comparison relies on: two direct runs (and both components) write the
    same bytes, and the file holds what the program wrote."""
    a = h5golden(which, "ompio")
    argv, banner, env = h5_program(progs, which)
    again = tmp_path / "again.h5"
    ok(mpirun("ompio", argv + [again], env=env), banner)
    assert again.read_bytes() == a.read_bytes(), "two direct runs differ"
    assert h5golden(which, "romio321").read_bytes() == a.read_bytes(), "ompio and romio321 differ"
    if shutil.which("h5dump"):
        p = subprocess.run(["h5dump", "-a", "/step", a], capture_output=True, text=True, timeout=60, check=True)
        assert "(0): 2" in p.stdout, p.stdout


@pytest.mark.parametrize("io", IOS)
@pytest.mark.parametrize("which", ["phdf5", "h5py"])
def test_hdf5_run_home_file_identical(h5golden, progs, deployment, dirs, which, io):
    need_pdcx_run()
    want = h5golden(which, io)
    dep = deployment(n=2)
    out, home = dirs
    argv, banner, env = h5_program(progs, which)
    env = dict(env, PDCX_ROOT=str(dep.root))
    p = pdcx_run(io, out, home, dep.root, argv + [out / "f.h5"], env=env)
    ok(p, banner)
    run_pdcx("flush", "--root", dep.root, timeout=120)
    h5diff(home / "f.h5", want)
    assert (home / "f.h5").read_bytes() == want.read_bytes(), "home file is not byte-identical"
