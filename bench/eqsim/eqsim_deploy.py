"""Caches and deployment: dropping the page cache, the servers' statistics, the tier configs
(a node-local directory or S3 through versitygw), and the run with the data homed on S3
(PDC-XF Table I)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pdcx
import pdcx.hdf5
from eqsim_report import VAR
from pdcxbin import pdcx_bin, run_bin

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MiB = 1 << 20


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
