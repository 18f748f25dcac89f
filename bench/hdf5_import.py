"""HDF5 import throughput (pdcx.hdf5, copy mode) against h5py reading the same dataset whole.

    python3 bench/hdf5_import.py [--size-mib 1024] [--reps 3] [--filter none|gzip|zfp] [--dir DIR]

Writes DIR/bench-FILTER.h5 (float32 (N, 1024, 1024), 4 MiB chunks (16, 256, 256)) unless it
exists, starts 2 servers on a fresh root for every repetition, and times, warm (file in the
page cache) and cold (caches dropped; needs root):
  h5py    f["field"][...] in a fresh process
  serial  python3 -m pdcx.hdf5 import FILE (1 process)
  mpi2    mpirun -n 2 python3 -m pdcx.hdf5 import FILE
The import's own figure is used (from opening the file to the last write acknowledged), like
h5py's (the read alone): interpreter start-up is left out of both. Prints medians in MB/s.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

READ = """
import sys, time, h5py
try:
    import hdf5plugin
except ImportError:
    pass
t = time.perf_counter()
with h5py.File(sys.argv[1]) as f:
    a = f["field"][...]
print(a.nbytes / (time.perf_counter() - t) / 1e6)
"""


def make(path: str, mib: int, filt: str) -> None:
    import h5py
    import numpy as np

    kw: dict = {}
    if filt == "gzip":
        kw = {"compression": "gzip", "compression_opts": 1, "shuffle": True}
    elif filt == "zfp":
        import hdf5plugin

        kw = dict(hdf5plugin.Zfp(rate=16))
    n = max(16, mib // 4 // 16 * 16)
    x = np.linspace(0, 8 * np.pi, 1024, dtype="f4")
    with h5py.File(path, "w") as f:
        d = f.create_dataset("field", shape=(n, 1024, 1024), dtype="f4", chunks=(16, 256, 256), **kw)
        for i in range(0, n, 16):
            rng = np.random.default_rng(i)
            if filt == "none":
                d[i : i + 16] = rng.random((16, 1024, 1024), dtype="f4")
            else:  # compressible: a smooth field
                base = np.sin(x)[:, None] * np.cos(x)[None, :]
                d[i : i + 16] = np.stack([base * np.float32(1 + 0.01 * (i + k)) for k in range(16)])


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def rate_of(stderr: str) -> float:
    m = re.search(r"\(([\d,]+) MB/s\)", stderr)
    if not m:
        raise SystemExit(f"import failed:\n{stderr}")
    return float(m.group(1).replace(",", ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--filter", choices=["none", "gzip", "zfp"], default="none")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    a = ap.parse_args()
    path = os.path.join(a.dir, f"bench-{a.filter}.h5")
    if not os.path.exists(path):
        print(f"writing {path} ...", file=sys.stderr)
        make(path, a.size_mib, a.filter)
    pdcx = shutil.which("pdcx") or sys.exit("pdcx not on PATH (scripts/setup.sh)")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    results: dict[tuple[str, str], list[float]] = {}
    caches = ["warm", "cold"] if drop_caches() else ["warm"]
    for cache in caches:
        for rep in range(a.reps):
            root = tempfile.mkdtemp(prefix="pdcx-h5bench-", dir=a.dir)
            subprocess.run([pdcx, "server", "start", "-n", "2", "--root", root], check=True, capture_output=True)
            env["PDCX_ROOT"] = root
            try:
                for what, argv in (
                    ("h5py", [sys.executable, "-c", READ, path]),
                    ("serial", [sys.executable, "-m", "pdcx.hdf5", "import", path, "--container", "s"]),
                    (
                        "mpi2",
                        [
                            "mpirun",
                            "--oversubscribe",
                            "-n",
                            "2",
                            sys.executable,
                            "-m",
                            "pdcx.hdf5",
                            "import",
                            path,
                            "--container",
                            "m",
                        ],
                    ),
                ):
                    if cache == "cold":
                        drop_caches()
                    else:
                        with open(path, "rb") as f:
                            while f.read(64 << 20):
                                pass
                    p = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
                    r = float(p.stdout.strip()) if what == "h5py" else rate_of(p.stderr)
                    results.setdefault((cache, what), []).append(r)
                    print(f"{cache} {what} rep {rep}: {r:.0f} MB/s", file=sys.stderr)
            finally:
                subprocess.run([pdcx, "server", "stop", "--root", root], check=False, capture_output=True)
                shutil.rmtree(root, ignore_errors=True)
    size = os.path.getsize(path) / 2**20
    print(f"\n{path}: {size:.0f} MiB on disk, filter {a.filter}; medians of {a.reps} (MB/s of uncompressed data)")
    print(f"{'cache':6} {'h5py whole read':>16} {'pdcx import':>12} {'import, 2 ranks':>16}")
    for cache in caches:
        med = [statistics.median(results[(cache, w)]) for w in ("h5py", "serial", "mpi2")]
        print(f"{cache:6} {med[0]:16.0f} {med[1]:12.0f} {med[2]:16.0f}")


if __name__ == "__main__":
    main()
