#!/usr/bin/env python3
"""EQSIM access patterns (PDC-XF, §V-E / Fig. 11 / Table I): pdcx against h5py.

    python3 bench/eqsim/run.py                      # default size (T=256, X=Y=512), 5 reps, raw and ZFP
    python3 bench/eqsim/run.py --small --reps 1     # quick smoke run
    python3 bench/eqsim/run.py --compress zfp       # only the ZFP file (the raw verdicts: NOT RUN)
    python3 bench/eqsim/run.py --root DIR           # use a running deployment instead of starting one
    python3 bench/eqsim/run.py --reuse              # keep the HDF5 file and the import of a previous run
    python3 bench/eqsim/run.py --s3                 # also the patterns with the data homed on S3 (versitygw)

Writes a synthetic EQSIM-shaped ground-motion file (time x X x Y: vx, vy float32, disp float64,
chunked like EQSIM output; lat/lon float64 X x Y grids), imports it into pdcx with
pdcx.hdf5.import_file, and times the six access patterns of §V-E on `vx` (and lat/lon):

  1 point     one grid point's full time history          [:, x, y]
  2 box       a 32x32 bounding box, full time              [:, x:x+32, y:y+32]
  3 threshold every element above a threshold (~1% hits): coordinates and values
  4 down20    the whole domain downsampled x20             [:, o::20, o::20]
  5 down3     the whole domain downsampled x3              [:, o::3, o::3]
  6 latlon    lat and lon of a bounding box                lat[box], lon[box]

in four modes, in this order, in one run:
  h5py cache  one open file with a chunk cache that holds the data, after a preload pass
  pdcx warm   servers up, the variable read once (their cache and the page cache as a
              deployment that holds the data has them): the paper's PDC-XF setting
  h5py cold   page cache dropped before every repetition, file reopened (open not timed)
  pdcx cold   page cache dropped before every repetition; the servers stay up (their own
              payload cache is not dropped: its size is printed)
Every repetition of every mode is checked against h5py's answer (same values, same hit
coordinates); any difference stops the run. All of it runs on a file of raw chunks, then on a
ZFP-compressed one (--compress both, the default), and the verdicts compare like with like on
each: pdcx cold against h5py cold (median >= 45x; NOT JUDGED when the page cache was not
dropped or the servers' payload cache held data during pdcx cold) and pdcx warm against h5py's
preloaded chunk cache (patterns 3-5 each >= 1.5x): four lines, printed last. pdcx warm against
h5py cold is printed in the table, marked as unlike, and judged nowhere. See README.md next to
this file.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

try:
    import h5py
except ImportError:
    sys.exit("this benchmark needs h5py: python3 -m pip install h5py")

import pdcx
import pdcx.hdf5

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: pdcxbin
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/eqsim/: its tables
from eqsim_report import (
    COMPRESS_NAMES,
    MODES,
    PATTERNS,
    VAR,
    fmt_b,
    median,
    report,
    verdict_text,
    verdicts,
)
from pdcxbin import pdcx_bin, run_bin

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MiB = 1 << 20


# ------------------------------------------------------------------------------------------
# The synthetic dataset
# ------------------------------------------------------------------------------------------


def ricker(tau: np.ndarray, f: float) -> np.ndarray:
    a = (np.pi * f * tau) ** 2
    return (1 - 2 * a) * np.exp(-a)


def compression_kw(compress: str, accuracy: float) -> dict:
    """h5py dataset keywords for the time-varying variables. 'zfp' is what EQSIM writes (paper
    000 §V-E: ZFP lossy compression in accuracy mode), through the hdf5plugin package's H5Z-ZFP."""
    if compress == "none":
        return {}
    try:
        import hdf5plugin
    except ImportError:
        sys.exit("--compress zfp needs hdf5plugin: python3 -m pip install hdf5plugin")
    return dict(hdf5plugin.Zfp(accuracy=accuracy))


def file_compression(d) -> str:
    """'zfp' or 'none': what a dataset's filter pipeline holds (for --reuse)."""
    dcpl = d.id.get_create_plist()
    for i in range(dcpl.get_nfilters()):
        fid, _flags, _cd, _name = dcpl.get_filter(i)
        if fid == 32013:
            return "zfp"
    return "none"


def generate(
    path: Path, t_n: int, x_n: int, y_n: int, chunks: tuple, seed: int, hit_fraction: float, comp: dict | None = None
) -> dict:
    """Writes the file: an S wave (Ricker pulse, 0.4 Hz) radiating from an epicentre, with a
    four-lobed radiation pattern and 1/sqrt(r) decay, plus 1% noise; disp is the running
    integral of vx. `comp` holds the h5py compression keywords of vx, vy and disp (lat/lon are
    never compressed). Returns what it wrote (the threshold selects ~hit_fraction of vx)."""
    rng = np.random.default_rng(seed)
    spacing = 0.1  # km between grid points (EQSIM: 6.25 m; coarser so the wave crosses the grid)
    c = 3.5  # km/s, S-wave speed
    xs = np.arange(x_n, dtype="f8") * spacing
    ys = np.arange(y_n, dtype="f8") * spacing
    gx, gy = np.meshgrid(xs, ys, indexing="ij")
    ex, ey, depth = 0.35 * xs[-1], 0.55 * ys[-1], 2.0
    r = np.sqrt((gx - ex) ** 2 + (gy - ey) ** 2 + depth**2)
    theta = np.arctan2(gy - ey, gx - ex)
    span = math.hypot(max(xs[-1], ys[-1]), max(xs[-1], ys[-1]))
    dt = 1.1 * span / c / t_n  # the front reaches the far corner near the last step
    amp = 1 / np.sqrt(r)
    ax = (amp * np.cos(2 * theta)).astype("f4")
    ay = (amp * np.sin(2 * theta)).astype("f4")
    lag = (r / c).astype("f4")
    # lat/lon of a grid rotated 35 degrees near the Hayward fault.
    rot = np.deg2rad(35)
    lat = 37.7 + (gx * np.cos(rot) - gy * np.sin(rot)) / 111.0
    lon = -122.2 + (gx * np.sin(rot) + gy * np.cos(rot)) / (111.0 * np.cos(np.deg2rad(37.7)))
    ct = chunks[0]
    sample = []
    disp_acc = np.zeros((x_n, y_n), "f8")
    with h5py.File(path, "w") as f:
        f.attrs["description"] = "synthetic EQSIM-shaped surface ground motion (pdcx bench/eqsim)"
        f.attrs["dt"] = dt
        f.attrs["spacing_km"] = spacing
        kw = {"chunks": chunks, **(comp or {})}
        vx = f.create_dataset("vx", (t_n, x_n, y_n), "f4", **kw)
        vy = f.create_dataset("vy", (t_n, x_n, y_n), "f4", **kw)
        disp = f.create_dataset("disp", (t_n, x_n, y_n), "f8", **kw)
        for d, units in ((vx, "m/s"), (vy, "m/s"), (disp, "m")):
            d.attrs["units"] = units
        for t0 in range(0, t_n, ct):
            steps = np.arange(t0, min(t0 + ct, t_n), dtype="f4")[:, None, None] * np.float32(dt)
            pulse = ricker(steps - 2.5 - lag[None], 0.4).astype("f4")
            noise = rng.standard_normal((2, *pulse.shape), dtype="f4") * np.float32(0.01 * amp.mean())
            bx = pulse * ax + noise[0]
            vx[t0 : t0 + len(pulse)] = bx
            vy[t0 : t0 + len(pulse)] = pulse * ay + noise[1]
            block = np.cumsum(bx, axis=0, dtype="f8") * dt + disp_acc
            disp[t0 : t0 + len(pulse)] = block
            disp_acc = block[-1]
            sample.append(bx[:, ::3, ::3].ravel())
        # float32-exact, so numpy (which compares float32 data with a float32 threshold) and
        # the servers (which compare in float64) agree on every element.
        thr = float(np.float32(np.quantile(np.concatenate(sample), 1 - hit_fraction)))
        vx.attrs["threshold"] = thr
        cc = (min(64, x_n), min(64, y_n))
        f.create_dataset("lat", data=lat, chunks=cc).attrs["units"] = "degrees_north"
        f.create_dataset("lon", data=lon, chunks=cc).attrs["units"] = "degrees_east"
    return {"threshold": thr, "dt": dt}


# ------------------------------------------------------------------------------------------
# Caches, deployment
# ------------------------------------------------------------------------------------------


class Dropper:
    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.count = 0

    def __call__(self) -> None:
        if not self.enabled:
            return
        os.sync()
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        except OSError as e:
            sys.exit(
                f"cannot drop the page cache ({e}): run as root, or pass --no-drop-caches "
                "(the 'cold' columns are then NOT cold)"
            )
        self.count += 1


def server_stats(client) -> dict:
    st = client.stats()
    return {
        k: sum(int(s.get(k, 0)) for s in st)
        for k in ("read_bytes", "query_scanned_bytes", "query_skipped_bytes", "cache_bytes", "log_bytes")
    }


def write_local_config(root: Path, tier_dir: Path) -> None:
    (root / "pdcx.toml").write_text(
        f"""# bench/eqsim --tier local: extents flushed to a node-local directory, where the flusher
# also keeps each extent's min/max (value queries skip extents that cannot match)
[[tier]]
name = "ssd"
kind = "local"
path = "{tier_dir}"

[flush]
interval_ms = 3600000
"""
    )


def tiers_of(obj) -> dict:
    """How many extents of obj sit where ('log', 'ssd', 'log+s3', ...)."""
    out: dict = {}
    for e in obj.extents():
        out[e["tier"]] = out.get(e["tier"], 0) + 1
    return out


def write_s3_config(root: Path, s3: dict) -> None:
    (root / "pdcx.toml").write_text(
        f"""# bench/eqsim --s3: every flushed extent goes to S3 (versitygw on 127.0.0.1); small log
# segments, so the flush leaves no log copy behind (only sealed segments are retired)
[[tier]]
name = "s3"
kind = "s3"
endpoint = "{s3["endpoint"]}"
bucket = "{s3["bucket"]}"
region = "us-east-1"
part_size = "8MiB"

[log]
segment_bytes = "4MiB"

[flush]
interval_ms = 3600000
"""
    )


def start_s3(where: Path, cleanup: list) -> dict:
    """versitygw on 127.0.0.1 (scripts/s3server.sh, as the tests start it); stopped by PID at exit."""
    if not Path(os.environ.get("VERSITYGW", "/usr/local/bin/versitygw")).exists():
        sys.exit("--s3 needs versitygw: bash scripts/s3server.sh install")
    if where.exists():
        shutil.rmtree(where)
    p = subprocess.run(
        ["bash", str(REPO / "scripts/s3server.sh"), "start", str(where)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if p.returncode != 0:
        sys.exit(f"scripts/s3server.sh start failed:\n{p.stdout}\n{p.stderr}")
    cleanup.append(
        lambda: subprocess.run(
            ["bash", str(REPO / "scripts/s3server.sh"), "stop", str(where)], check=False, capture_output=True
        )
    )
    out = dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)
    info = {"endpoint": out["PDCX_TEST_S3_ENDPOINT"], "bucket": out["PDCX_TEST_S3_BUCKET"]}
    info["env"] = {
        "AWS_ACCESS_KEY_ID": out["PDCX_TEST_S3_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": out["PDCX_TEST_S3_SECRET_ACCESS_KEY"],
        "AWS_ENDPOINT_URL": info["endpoint"],
        "AWS_REGION": "us-east-1",
    }
    return info


def run_s3(a, b, out: Path, h5path: Path, cleanup: list) -> dict:
    """Paper Table I: the patterns with the data homed on S3. A fresh deployment with one S3
    tier imports the file, flushes it (the log copies are retired), and restarts, so the
    servers' payload cache is empty and every read is served from S3."""
    s3 = start_s3(out / "s3", cleanup)
    os.environ.update(s3["env"])  # the servers started below inherit the credentials
    root = out / "pdcx-s3"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    write_s3_config(root, s3)
    run_bin("server", "start", "-n", a.servers, "--root", root, timeout=120)
    cleanup.append(
        lambda: subprocess.run(
            [pdcx_bin(), "server", "stop", "--root", str(root)], check=False, capture_output=True, timeout=120
        )
    )
    client = pdcx.connect(root)
    client.placement = a.placement
    rep = pdcx.hdf5.import_file(client, h5path, "eqsim")
    # A segment's worth of other data on every server seals the segment the import ended in,
    # so the flush retires it too (the active segment is never retired).
    fill_cont = client.create_container("filler")
    need, i = set(range(client.servers)), 0
    while need:
        o = fill_cont.create_object(f"filler/{i}", 5 * MiB, "uint8", tags={"pdcx.tier": "s3"})
        i += 1
        if o.metadata["owner"] in need:
            need.discard(o.metadata["owner"])
            o[:] = np.ones(5 * MiB, "u1")  # object-static placement: on its owner
    t0 = time.perf_counter()
    errors = [f["error"] for f in client.flush() if f.get("error")]
    if errors:
        sys.exit(f"flushing to S3 failed: {errors}")
    flush_s = time.perf_counter() - t0
    client.close()
    run_bin("server", "stop", "--root", root, timeout=120)
    run_bin("server", "start", "-n", a.servers, "--root", root, timeout=120)
    client = pdcx.connect(root)
    objs = {n: client.open_object(f"eqsim/{n}") for n in (VAR, "lat", "lon")}
    where = {n: tiers_of(o) for n, o in objs.items()}
    log_copies = {n: c for n, w in where.items() for t, c in w.items() if "log" in t}
    mode = "pdcx s3"
    for d in (b.times, b.bytes, b.scanned):
        d[mode] = {k: [] for k in range(1, 7)}
    saved_pids = b.pids
    b.pids = [int(sv["pid"]) for sv in json.loads((root / "cluster.json").read_text())["servers"]]
    b.pids.append(int((out / "s3" / "versitygw.pid").read_text()))
    try:
        for k in range(1, 7):
            for r in range(b.a.reps):
                b.pdcx_rep(mode, client, objs, k, r)
    finally:
        b.pids = saved_pids
    note = (
        f"versitygw {s3['endpoint']} (posix backend on this disk, its files in the page cache); "
        f"import {rep.rate:.0f} MB/s, flush to S3 {flush_s:.1f} s, servers restarted; extents {where}"
    )
    note += (
        f"; WARNING: the log still holds a copy of {log_copies} extents (read from the log, not S3)"
        if log_copies
        else "; every extent read from S3 (no log copy, empty server cache)"
    )
    client.close()
    return {"note": note, "extents": where, "import_mb_s": rep.rate, "flush_s": flush_s}


# ------------------------------------------------------------------------------------------
# The patterns
# ------------------------------------------------------------------------------------------


def params_of(k: int, rep: int, shape: tuple, box: int, thr: float, seed: int) -> dict:
    """Pattern k's selection in repetition rep: seeded, and never the previous rep's bytes."""
    _, x_n, y_n = shape
    rng = np.random.default_rng([seed, k, rep])
    if k in (1, 2, 6):
        b = 1 if k == 1 else box
        return {"x": int(rng.integers(0, x_n - b + 1)), "y": int(rng.integers(0, y_n - b + 1)), "b": b}
    if k == 3:  # a slightly different threshold per rep (the scan itself is the whole variable)
        return {"t": float(np.float32(thr * (1 + 0.003 * rep)))}
    step = 20 if k == 4 else 3
    return {"step": step, "o": rep % step}


def h5_open(f) -> dict:
    """The datasets the patterns read, opened. Keep the dict alive while timing: HDF5 drops a
    dataset's chunk cache when its last handle closes (h5py closes one per `f[name]`)."""
    return {n: f[n] for n in (VAR, "lat", "lon")}


def h5_pattern(ds: dict, k: int, p: dict):
    d = ds[VAR]
    if k in (1, 2):
        return d[:, p["x"] : p["x"] + p["b"], p["y"] : p["y"] + p["b"]]
    if k == 3:
        a = d[...]
        nz = np.nonzero(a > np.float32(p["t"]))
        return np.stack(nz, axis=1).astype("<u8"), a[nz]
    if k in (4, 5):
        return d[:, p["o"] :: p["step"], p["o"] :: p["step"]]
    sl = np.s_[p["x"] : p["x"] + p["b"], p["y"] : p["y"] + p["b"]]
    return ds["lat"][sl], ds["lon"][sl]


def pdcx_pattern(objs: dict, k: int, p: dict):
    o = objs[VAR]
    if k in (1, 2):
        return o[:, p["x"] : p["x"] + p["b"], p["y"] : p["y"] + p["b"]]
    if k == 3:
        hits = o.where(o > p["t"])  # evaluated by the servers: only hits travel
        return hits.coords, hits.values
    if k in (4, 5):
        return o[:, p["o"] :: p["step"], p["o"] :: p["step"]]  # strided on the server
    off, cnt = (p["x"], p["y"]), (p["b"], p["b"])
    ts = [objs[n].read_async(off, cnt) for n in ("lat", "lon")]  # both in flight at once
    pdcx.wait_all(ts)
    return ts[0].result(), ts[1].result()


def h5_bytes_touched(f, k: int, p: dict) -> int:
    """Bytes of the HDF5 chunks a pattern's selection intersects (what HDF5 must read)."""

    def touched(d, sel: list) -> int:
        n = 1
        for idx, c in zip(sel, d.chunks):
            n *= len(np.unique(np.asarray(idx) // c))
        return n * math.prod(d.chunks) * d.dtype.itemsize

    d = f[VAR]
    t_n, x_n, y_n = d.shape
    if k in (1, 2):
        return touched(d, [range(t_n), range(p["x"], p["x"] + p["b"]), range(p["y"], p["y"] + p["b"])])
    if k == 3:
        return touched(d, [range(t_n), range(x_n), range(y_n)])
    if k in (4, 5):
        return touched(d, [range(t_n), range(p["o"], x_n, p["step"]), range(p["o"], y_n, p["step"])])
    box = [range(p["x"], p["x"] + p["b"]), range(p["y"], p["y"] + p["b"])]
    return touched(f["lat"], box) + touched(f["lon"], box)


def result_bytes(res) -> int:
    return sum(a.nbytes for a in res) if isinstance(res, tuple) else res.nbytes


def same(a, b) -> str | None:
    """None when equal, else what differs."""
    if isinstance(a, tuple):
        for i, (x, y) in enumerate(zip(a, b)):
            why = same(x, y)
            if why:
                return f"part {i}: {why}"
        return None
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return f"shape {a.shape} != {b.shape}"
    if not np.array_equal(a, b):
        bad = np.argwhere(a != b)
        return f"{len(bad)} elements differ, first at {bad[0].tolist()}: {a[tuple(bad[0])]} != {b[tuple(bad[0])]}"
    return None


# ------------------------------------------------------------------------------------------
# Running
# ------------------------------------------------------------------------------------------


def storage_read_bytes(pids: list) -> int:
    """Bytes this process and `pids` fetched from storage (/proc/PID/io read_bytes: page cache
    misses, not hits), so a cold repetition's real disk traffic."""
    total = 0
    for pid in [os.getpid(), *pids]:
        try:
            with open(f"/proc/{pid}/io") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("read_bytes:"))
        except (OSError, StopIteration):
            pass
    return total


def cpu_seconds(pids: list) -> float:
    """user+system CPU seconds used so far by `pids` (/proc/PID/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
        except (OSError, IndexError, ValueError):
            pass
    return total / tick


class Bench:
    def __init__(self, a, h5path: Path, shape: tuple, thr: float, drop: Dropper):
        self.a, self.h5path, self.shape, self.thr, self.drop = a, h5path, shape, thr, drop
        self.times = {m: {k: [] for k in range(1, 7)} for m in MODES}
        self.bytes = {m: {k: [] for k in range(1, 7)} for m in MODES}
        self.scanned = {m: {k: [] for k in range(1, 7)} for m in MODES}
        self.disk = {m: {k: [] for k in range(1, 7)} for m in MODES}
        self.server_cpu: dict = {}  # mode -> pattern -> servers' CPU seconds per rep
        self.rts: dict = {}  # mode -> pattern -> requests sent to servers (round trips) per rep
        self.pids: list[int] = []  # the servers' pids: their storage reads count as the pattern's
        self.refs: dict = {}
        self.checked = 0
        self.extra: dict = {}
        self.cold_server_cache = 0  # most bytes the servers' payload cache held at a pdcx cold rep

    def params(self, k: int, rep: int) -> dict:
        return params_of(k, rep, self.shape, self.a.box, self.thr, self.a.seed)

    def check(self, mode: str, k: int, rep: int, res) -> None:
        key = (k, rep)
        if key not in self.refs:
            self.refs[key] = res
            return
        why = same(res, self.refs[key])
        if why:
            sys.exit(
                f"WRONG RESULT: pattern {PATTERNS[k - 1]!r} rep {rep} ({self.params(k, rep)}): {mode} differs from h5py: {why}"
            )
        self.checked += 1

    def h5_cache(self) -> None:
        """One open file, chunk cache larger than the data, preloaded by reading it all once."""
        with h5py.File(self.h5path, "r") as probe:
            need = sum(probe[n].size * probe[n].dtype.itemsize for n in (VAR, "lat", "lon"))
            nchunks = sum(math.prod(math.ceil(s / c) for s, c in zip(probe[n].shape, probe[n].chunks)) for n in (VAR,))
        nbytes = int(need * 1.25) + 16 * MiB
        nslots = next_prime(max(10007, 20 * nchunks))
        f = h5py.File(self.h5path, "r", rdcc_nbytes=nbytes, rdcc_nslots=nslots, rdcc_w0=1.0)
        try:
            t0 = time.perf_counter()
            ds = h5_open(f)
            for d in ds.values():
                preload_chunk_cache(d)
            self.extra["h5_cache_preload_s"] = time.perf_counter() - t0
            self.extra["h5_cache_nbytes"] = nbytes
            for k in range(1, 7):
                for rep in range(self.a.reps):
                    p = self.params(k, rep)
                    t0 = time.perf_counter()
                    res = h5_pattern(ds, k, p)
                    self.times["h5 cache"][k].append(time.perf_counter() - t0)
                    self.bytes["h5 cache"][k].append(0)  # from the cache: nothing read from the file
                    self.check("h5 cache", k, rep, res)
        finally:
            f.close()

    def h5_cold_rep(self, k: int, rep: int) -> None:
        self.drop()
        p = self.params(k, rep)
        with h5py.File(self.h5path, "r") as f:  # default chunk cache (1 MiB), as EQSIM opens it
            h5ds = h5_open(f)  # file and dataset opens are not timed (nor is pdcx's open_object)
            d0 = storage_read_bytes([])
            t0 = time.perf_counter()
            res = h5_pattern(h5ds, k, p)
            self.times["h5 cold"][k].append(time.perf_counter() - t0)
            self.disk["h5 cold"][k].append(storage_read_bytes([]) - d0)
            self.bytes["h5 cold"][k].append(h5_bytes_touched(f, k, p))
        self.check("h5 cold", k, rep, res)

    def pdcx_rep(self, mode: str, client, objs: dict, k: int, rep: int) -> None:
        if mode == "pdcx cold":
            self.drop()
        p = self.params(k, rep)
        s0 = server_stats(client)
        if mode == "pdcx cold":
            # What the servers' payload cache held as the cold repetition started: the cold
            # verdict needs it empty (the page cache drop does not touch it).
            self.cold_server_cache = max(self.cold_server_cache, s0["cache_bytes"])
        d0 = storage_read_bytes(self.pids)
        c0 = cpu_seconds(self.pids)
        n0 = pdcx.requests_sent()
        t0 = time.perf_counter()
        res = pdcx_pattern(objs, k, p)
        self.times[mode][k].append(time.perf_counter() - t0)
        self.rts.setdefault(mode, {j: [] for j in range(1, 7)})[k].append(pdcx.requests_sent() - n0)
        c1 = cpu_seconds(self.pids)
        d1 = storage_read_bytes(self.pids)
        self.server_cpu.setdefault(mode, {j: [] for j in range(1, 7)})[k].append(c1 - c0)
        s1 = server_stats(client)
        self.disk.setdefault(mode, {j: [] for j in range(1, 7)})[k].append(d1 - d0)
        self.bytes[mode][k].append(s1["read_bytes"] - s0["read_bytes"])
        self.scanned[mode][k].append(s1["query_scanned_bytes"] - s0["query_scanned_bytes"])
        self.check(mode, k, rep, res)

    def pdcx_warm(self, client, objs: dict, mode: str = "pdcx warm") -> None:
        t0 = time.perf_counter()
        for n in (VAR, "lat", "lon"):
            objs[n][...]
        self.extra[f"{mode}_preload_s"] = time.perf_counter() - t0
        for k in range(1, 7):
            for rep in range(self.a.reps):
                self.pdcx_rep(mode, client, objs, k, rep)

    def cold(self, client, objs: dict) -> None:
        for k in range(1, 7):
            for rep in range(self.a.reps):
                self.h5_cold_rep(k, rep)
                self.pdcx_rep("pdcx cold", client, objs, k, rep)

    def diagnose(self, objs: dict) -> None:
        """Where pdcx warm time goes, for the report: pattern 3 without coordinates and values
        (the scan alone), and a whole-variable read (the read path's throughput)."""
        o = objs[VAR]

        def best(fn) -> float:
            ts = []
            for _ in range(3):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
            return median(ts)

        h = o.where(o > self.thr, coords=False, values=False)
        self.extra["diag"] = {
            "query_count_only_s": best(lambda: o.where(o > self.thr, coords=False, values=False)),
            "query_scanned_bytes": h.scanned_bytes,
            "query_skipped_bytes": h.skipped_bytes,
            "whole_read_s": best(lambda: o[...]),
            "whole_bytes": o.size * o.dtype.itemsize,
        }

    def round_trip(self, client, objs: dict, n: int = 200) -> float:
        """A 1-element read's time, taken as the patterns' are: after the same per-repetition
        bookkeeping (a stats call to the servers, /proc reads), which leaves the CPU caches as
        a repetition finds them; a tight loop of reads would give a smaller round trip."""
        o = objs[VAR]
        rng = np.random.default_rng(self.a.seed)
        ts = []
        for _ in range(n):
            t, x, y = (int(rng.integers(0, s)) for s in o.shape)
            server_stats(client)
            storage_read_bytes(self.pids)
            cpu_seconds(self.pids)
            t0 = time.perf_counter()
            o[t, x, y]
            ts.append(time.perf_counter() - t0)
        return median(ts)


def preload_chunk_cache(d) -> None:
    """Brings every chunk of `d` into HDF5's chunk cache. A read that covers a whole chunk
    bypasses the cache (HDF5 reads it straight into the caller's buffer: `d[...]` caches
    nothing), so each chunk is read minus one element: HDF5 then caches the whole chunk."""
    for sel in d.iter_chunks():
        last = sel[-1]
        if last.stop - last.start > 1:
            sel = (*sel[:-1], slice(last.start, last.stop - 1))
        else:  # a last dim of one element: drop one along another dim that has more
            i = next((j for j, s in enumerate(sel) if s.stop - s.start > 1), None)
            if i is None:
                d[sel]  # a one-element chunk: cached or not, it is one element
                continue
            sel = tuple(slice(s.start, s.stop - 1) if j == i else s for j, s in enumerate(sel))
        d[sel]


def next_prime(n: int) -> int:
    def is_prime(m: int) -> bool:
        return m > 1 and all(m % d for d in range(2, int(m**0.5) + 1))

    while not is_prime(n):
        n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="T=32, X=Y=128 (seconds; for smoke tests)")
    ap.add_argument("--t", type=int, default=256, help="time steps (default 256)")
    ap.add_argument("--x", type=int, default=512, help="grid points along X (default 512)")
    ap.add_argument("--y", type=int, default=512, help="grid points along Y (default 512)")
    ap.add_argument("--chunks", default="16,64,64", help="HDF5 chunk shape T,X,Y (default 16,64,64)")
    ap.add_argument("--box", type=int, default=32, help="bounding box edge of patterns 2 and 6 (default 32)")
    ap.add_argument("--hit-fraction", type=float, default=0.01, help="pattern 3 selectivity (default 0.01)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions per pattern and mode (default 5)")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--out", help="work directory (file, deployment; default bench/out/eqsim[-zfp])")
    ap.add_argument("--root", help="root of a running deployment to use (default: start 2 servers in OUT)")
    ap.add_argument("--servers", type=int, default=2, help="servers to start when --root is not given")
    ap.add_argument(
        "--tier",
        choices=["local", "none"],
        default="local",
        help="where the started deployment homes the data after the import: 'local' (a directory tier: "
        "the flusher keeps per-extent min/max for value queries; default) or 'none' (the servers' logs)",
    )
    ap.add_argument(
        "--placement",
        default="object-static",
        help="pdcx placement of the import's writes (default object-static: data on each object's owner, "
        "which evaluates queries and strided reads; region-local puts it on the importer's node server)",
    )
    ap.add_argument(
        "--compress",
        choices=["both", "none", "zfp"],
        default="both",
        help="compression of vx, vy, disp in the HDF5 file: both (default: the whole benchmark on raw chunks, "
        "then on ZFP, and the verdicts of both), zfp, as EQSIM writes its output and as PDC-XF measures its "
        "45x (ZFP accuracy mode, §V-E; h5py then decodes every chunk it reads), or none (raw chunks). pdcx "
        "imports by copy (it holds the decoded values). Default --out: bench/out/eqsim for none, "
        "bench/out/eqsim-zfp for zfp; with both and --out, OUT/none and OUT/zfp",
    )
    ap.add_argument("--zfp-accuracy", type=float, default=1e-3, help="ZFP absolute error bound (default 1e-3)")
    ap.add_argument("--reuse", action="store_true", help="reuse OUT/eqsim.h5 and its import if present")
    ap.add_argument("--no-drop-caches", action="store_true", help="never drop the page cache (cold != cold)")
    ap.add_argument("--s3", action="store_true", help="also time pdcx with the data homed on S3 (versitygw)")
    ap.add_argument(
        "--server-path",
        action="store_true",
        help="also time the warm patterns with PDCX_DIRECT_READ=0 (column 'pdcx srv': every byte through the server)",
    )
    ap.add_argument("--json", help="write every number to this file")
    a = ap.parse_args()
    if a.small:
        a.t, a.x, a.y = 32, 128, 128
    chunks = tuple(int(c) for c in a.chunks.split(","))
    if len(chunks) != 3 or min(chunks) < 1:
        sys.exit(f"--chunks must be three positive ints, got {a.chunks!r}")
    chunks = (min(chunks[0], a.t), min(chunks[1], a.x), min(chunks[2], a.y))
    if a.box > min(a.x, a.y) or a.box < 1:
        sys.exit(f"--box {a.box} does not fit the {a.x}x{a.y} grid")
    if a.reps < 1:
        sys.exit("--reps must be >= 1")
    if not 0 < a.hit_fraction < 1:
        sys.exit(f"--hit-fraction must be in (0, 1), got {a.hit_fraction}")
    if not a.zfp_accuracy > 0:
        sys.exit(f"--zfp-accuracy must be > 0, got {a.zfp_accuracy}")
    drop = Dropper(not a.no_drop_caches)
    drop()  # fails here, clearly, if we cannot
    runs: dict = {}
    for compress in ("none", "zfp") if a.compress == "both" else (a.compress,):
        if a.compress == "both":
            print(f"=== {COMPRESS_NAMES[compress]} (--compress {compress}) ===", flush=True)
        runs[compress] = run_one(a, compress, chunks, drop)
        print(flush=True)
    judged = verdicts({c: r["like_for_like"] for c, r in runs.items()})
    print(verdict_text(judged))
    if a.json:
        doc = {"argv": sys.argv, "runs": runs, "verdicts": [dict(zip(("status", "name", "detail"), v)) for v in judged]}
        Path(a.json).write_text(json.dumps(doc, indent=1, default=str))
    return 0


def out_dir(a, compress: str) -> Path:
    """Where one compression's file and deployment live (see --out)."""
    if a.out:
        return Path(a.out) / compress if a.compress == "both" else Path(a.out)
    return REPO / ("bench/out/eqsim" if compress == "none" else f"bench/out/eqsim-{compress}")


def run_one(a, compress: str, chunks: tuple, drop: Dropper) -> dict:
    """The whole benchmark on one file (raw chunks or ZFP): prints its header and table and
    returns every number (with the `like_for_like` figures the verdicts judge)."""
    out = out_dir(a, compress)
    out.mkdir(parents=True, exist_ok=True)
    drop.count = 0
    load0 = os.getloadavg()

    h5path = out / "eqsim.h5"
    shape = (a.t, a.x, a.y)
    fresh_file = True
    if a.reuse and h5path.exists():
        with h5py.File(h5path, "r") as f:
            fresh_file = f[VAR].shape != shape or f[VAR].chunks != chunks or file_compression(f[VAR]) != compress
    if fresh_file:
        t0 = time.perf_counter()
        comp = compression_kw(compress, a.zfp_accuracy)
        generate(h5path, a.t, a.x, a.y, chunks, a.seed, a.hit_fraction, comp)
        print(f"wrote {h5path} ({fmt_b(h5path.stat().st_size)}) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    with h5py.File(h5path, "r") as f:
        thr = float(f[VAR].attrs["threshold"])
    file_bytes = h5path.stat().st_size

    started = []
    cleanup: list = []  # stops what --s3 started (servers, versitygw), by root and PID
    env_saved = dict(os.environ)
    try:
        if a.root:
            root = Path(a.root)
        else:
            root = out / "pdcx"
            if (not a.reuse or fresh_file) and root.exists():
                if (root / "cluster.json").exists():
                    subprocess.run(
                        [pdcx_bin(), "server", "stop", "--root", str(root)], check=False, capture_output=True
                    )
                shutil.rmtree(root)
                shutil.rmtree(out / "tier", ignore_errors=True)  # that deployment's tier blobs
            root.mkdir(parents=True, exist_ok=True)
            if (root / "cluster.json").exists():  # servers a killed run left behind
                subprocess.run([pdcx_bin(), "server", "stop", "--root", str(root)], check=False, capture_output=True)
            if a.tier == "local" and not (root / "pdcx.toml").exists():
                (out / "tier").mkdir(exist_ok=True)
                write_local_config(root, out / "tier")
            run_bin("server", "start", "-n", a.servers, "--root", root, timeout=120)
            started.append(root)
        client = pdcx.connect(root)
        # One container per compression, so both imports can share a deployment (--root).
        container = "eqsim" if compress == "none" else f"eqsim-{compress}"
        imported = None
        try:
            cont = client.open_container(container)
            complete = cont.tags.get("hdf5_import") == "complete"
        except pdcx.NotFoundError:
            cont, complete = None, False
        if cont is not None and not (a.reuse and complete and not fresh_file):
            if a.root:
                sys.exit(f"container {container!r} exists in {root}: pass --reuse, or use a fresh deployment")
            for o in cont.objects():
                client.delete_object(o)
            client.delete_container(container)
            cont = None
        if cont is None:
            client.placement = a.placement
            rep = pdcx.hdf5.import_file(client, h5path, container)
            imported = {"bytes": rep.bytes, "seconds": rep.seconds, "mb_s": rep.rate}
            print(f"imported {fmt_b(rep.bytes)} in {rep.seconds:.2f} s ({rep.rate:.0f} MB/s)", file=sys.stderr)
            t0 = time.perf_counter()
            try:
                flushed = client.flush()
            except pdcx.InvalidArgumentError as e:  # a deployment without tiers: the data stays in the logs
                flushed = []
                print(f"not flushed: {e}", file=sys.stderr)
            errors = [f["error"] for f in flushed if f.get("error")]
            if errors:
                sys.exit(f"flushing the import to its tier failed: {errors}")
            imported["flush_s"] = time.perf_counter() - t0 if flushed else None
        objs = {n: client.open_object(f"{container}/{n}") for n in (VAR, "lat", "lon")}
        where = {n: tiers_of(o) for n, o in objs.items()}
        owners = {n: o.metadata["owner"] for n, o in objs.items()}
        holders = {n: sorted({e["server"] for e in o.extents()}) for n, o in objs.items()}

        b = Bench(a, h5path, shape, thr, drop)
        b.pids = [int(sv["pid"]) for sv in json.loads((root / "cluster.json").read_text())["servers"]]
        with h5py.File(h5path, "r") as f:
            b.extra["result_bytes"] = {
                k: result_bytes(h5_pattern(h5_open(f), k, params_of(k, 0, shape, a.box, thr, a.seed)))
                for k in range(1, 7)
            }
            b.extra["hits"] = int(b.extra["result_bytes"][3] // (3 * 8 + 4))
        t_all = time.perf_counter()
        print("timing: h5py with a chunk cache ...", file=sys.stderr)
        b.h5_cache()
        print("timing: pdcx warm ...", file=sys.stderr)
        b.pdcx_warm(client, objs)
        rtt = b.round_trip(client, objs)
        b.diagnose(objs)
        print("timing: h5py cold and pdcx cold ...", file=sys.stderr)
        b.cold(client, objs)
        if a.server_path:
            # The same warm patterns with the same-node one-copy reads off: every byte through the
            # server's reply (a diagnostic: which read path suits which pattern).
            print("timing: pdcx warm, server path ...", file=sys.stderr)
            saved = os.environ.get("PDCX_DIRECT_READ")
            os.environ["PDCX_DIRECT_READ"] = "0"
            try:
                srv = pdcx.connect(root)
            finally:
                if saved is None:
                    del os.environ["PDCX_DIRECT_READ"]
                else:
                    os.environ["PDCX_DIRECT_READ"] = saved
            srv_objs = {n: srv.open_object(o.name) for n, o in objs.items()}
            for d in (b.times, b.bytes, b.scanned):
                d["pdcx srv"] = {k: [] for k in range(1, 7)}
            for k in range(1, 7):
                for r in range(a.reps):
                    b.pdcx_rep("pdcx srv", srv, srv_objs, k, r)
            srv.close()
        s3_info = None
        if a.s3:
            print("timing: pdcx with the data on S3 ...", file=sys.stderr)
            s3_info = run_s3(a, b, out, h5path, cleanup)
        modes_extra = [m for m in b.times if m not in MODES]
        stats_now = server_stats(client)
        b.extra["server_cache_bytes"] = stats_now["cache_bytes"]
        load1 = os.getloadavg()

        table, data = report(b, rtt, modes_extra, drop.enabled)
        hdr = [
            f"machine: {platform.node()} {os.cpu_count()} cores, {platform.platform()}",
            f"load average before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}",
            (
                f"file {h5path}: {fmt_b(file_bytes)}, vars vx vy float32, disp float64 {list(shape)}, "
                f"chunks {list(chunks)}, compression {compress}"
                + (
                    f" (accuracy {a.zfp_accuracy:g}, {math.prod(shape) * 16 / file_bytes:.1f}x smaller)"
                    if compress != "none"
                    else ""
                )
                + f"; lat/lon float64 [{a.x}, {a.y}]"
            ),
            f"pattern 3 threshold {thr:.6g}: {b.extra['hits']} hits ({b.extra['hits'] / math.prod(shape):.2%})",
            (
                f"deployment {root}: {client.servers} servers; server payload cache now "
                f"{fmt_b(stats_now['cache_bytes'])} (not dropped by 'cold')"
            ),
            (
                f"import (placement {a.placement}): {fmt_b(imported['bytes'])} in {imported['seconds']:.2f} s = "
                f"{imported['mb_s']:.0f} MB/s; "
                + (
                    f"then flush to the tiers {imported['flush_s']:.2f} s"
                    if imported["flush_s"] is not None
                    else "no tiers: not flushed"
                )
            )
            if imported
            else "import: reused",
            f"extents (where: count): {where}; owner server: {owners}; servers holding data: {holders}",
            (
                f"preload: h5py chunk cache ({fmt_b(b.extra['h5_cache_nbytes'])}) "
                f"{b.extra['h5_cache_preload_s']:.2f} s, pdcx {b.extra['pdcx warm_preload_s']:.2f} s; "
                f"page cache drops: {drop.count}"
            ),
            f"verified: {b.checked} results against h5py's, all equal; bench time {time.perf_counter() - t_all:.0f} s",
        ]
        if s3_info:
            hdr.append(f"s3: {s3_info['note']}")
        print("\n".join(hdr))
        print()
        print(table)
        data.update(
            {
                "compress": compress,
                "shape": shape,
                "chunks": chunks,
                "threshold": thr,
                "hits": b.extra["hits"],
                "file_bytes": file_bytes,
                "import": imported,
                "caches_dropped": drop.enabled,
                "drops": drop.count,
                "load_before": load0,
                "load_after": load1,
                "servers": client.servers,
                "extents": where,
                "owners": owners,
                "holders": holders,
                "verified_results": b.checked,
                "extra": b.extra,
                "s3": s3_info,
                "header": hdr,
            }
        )
        client.close()
    finally:
        for stop in reversed(cleanup):
            stop()
        for r in started:
            subprocess.run(
                [pdcx_bin(), "server", "stop", "--root", str(r)], check=False, capture_output=True, timeout=120
            )
        os.environ.clear()
        os.environ.update(env_saved)
    return data


if __name__ == "__main__":
    sys.exit(main())
