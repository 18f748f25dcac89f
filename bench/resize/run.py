#!/usr/bin/env python3
"""Resize at scale: a deployment with `--objects` objects (each with two tags, in 16
containers, a small array written to every 1000th) made servable by fewer and then more
servers, every object then readable and every id still valid.

    python3 bench/resize/run.py [--objects 1000000] [--steps 4,2,8] [--quick]

Real `pdcx server start` deployments on a temporary root; `pdcx resize` timed as a whole
command (it runs with the servers stopped, so the stop and start are not part of it). After each
resize: the servers started on the new count, every object counted through the listings, a
sample of 2,000 (and every object with data) opened by name, its id, tags and data checked, and
the same sample read by id through the CLI for 50 of them. Target (issue: servers resized): each
resize of 1 M objects with tags at most 30 s on this machine. The time is absolute (there is no
baseline to run in the same run: the alternative is exporting and re-importing every object).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import pdcx
from pdcxbin import pdcx_bin, run_bin

TARGET_S = 30.0


def stop(root: Path) -> None:
    """`pdcx server stop` (it returns once every server's shard lock is free)."""
    t0 = time.monotonic()
    out = run_bin("server", "stop", "--root", root, "--timeout", "300", timeout=600)
    print(f"  stopped in {time.monotonic() - t0:.1f} s: {' '.join(out.split())[:200]}", flush=True)


CONTAINERS = 16
BATCH = 10_000


def name(i: int) -> str:
    return f"ck/{i % 997:03d}/field{i}"


def populate(root: Path, n: int) -> dict[str, int]:
    c = pdcx.connect(root)
    conts = [c.create_container(f"c{k}") for k in range(CONTAINERS)]
    ids: dict[str, int] = {}
    t0 = time.monotonic()
    for start in range(0, n, BATCH):
        k = (start // BATCH) % CONTAINERS
        specs = [
            {"name": name(i), "shape": (8,), "dtype": "float64", "tags": {"step": i, "kind": f"k{i % 7}"}}
            for i in range(start, min(n, start + BATCH))
        ]
        for o in conts[k].create_objects(specs, raise_on_error=True, lazy=True):
            ids[o.name] = o.id
    c.sync()
    for i in range(0, n, 1000):
        o = c.open_object(name(i))
        o[...] = np.full(8, float(i))
    print(f"  created {n:,} objects with tags in {time.monotonic() - t0:.1f} s", flush=True)
    return ids


def verify(root: Path, ids: dict[str, int], n: int, rng: np.random.Generator) -> None:
    c = pdcx.connect(root)
    total = sum(len(c.open_container(f"c{k}").objects()) for k in range(CONTAINERS))
    assert total == n, f"{total} objects listed, {n} made"
    sample = {int(i) for i in rng.choice(n, size=min(n, 2000), replace=False)} | set(range(0, n, 1000))
    for i in sorted(sample):
        o = c.open_object(name(i))
        assert o.id == ids[name(i)], f"{name(i)}: id {o.id:#x}, was {ids[name(i)]:#x}"
        t = dict(o.tags)
        assert t["step"] == i and t["kind"] == f"k{i % 7}", (name(i), t)
        if i % 1000 == 0:
            assert o[...].tolist() == [float(i)] * 8, name(i)
    for i in sorted(sample)[:50]:
        shown = json.loads(run_bin("show", hex(ids[name(i)]), "--json", "--root", root))
        assert shown["name"] == name(i)
    print(f"  verified: {total:,} listed, {len(sample):,} opened by name (ids, tags, data), 50 by id", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--steps", default="4,2,8", help="server counts: the first is where the data is made")
    ap.add_argument("--quick", action="store_true", help="20,000 objects (a smoke run, not judged)")
    a = ap.parse_args()
    n = 20_000 if a.quick else a.objects
    steps = [int(s) for s in a.steps.split(",")]
    rng = np.random.default_rng(7)
    print(f"resize bench: {n:,} objects, server counts {' -> '.join(map(str, steps))}, pdcx {pdcx_bin()}")
    failed = []
    with tempfile.TemporaryDirectory(prefix="pdcx-resize-") as tmp:
        root = Path(tmp) / "root"
        run_bin("server", "start", "-n", steps[0], "--root", root, timeout=120)
        try:
            ids = populate(root, n)
        finally:
            stop(root)
        for to in steps[1:]:
            t0 = time.monotonic()
            out = subprocess.run(
                [pdcx_bin(), "resize", "--root", str(root), "--to", str(to), "--json"],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            took = time.monotonic() - t0
            if out.returncode != 0:
                sys.exit(f"pdcx resize --to {to} failed:\n{out.stderr}")
            rep = json.loads(out.stdout)
            verdict = "ok" if took <= TARGET_S else "OVER"
            if took > TARGET_S and not a.quick:
                failed.append(to)
            print(
                f"resize {rep['from']} -> {rep['to']}: {took:.1f} s (target <= {TARGET_S:.0f} s: {verdict}); "
                f"{rep['objects_moved']:,} objects and {rep['containers_moved']} containers moved, "
                f"{rep['name_links']:,} name links, {rep['extents_adopted']} extents adopted",
                flush=True,
            )
            run_bin("server", "start", "-n", to, "--root", root, timeout=120)
            try:
                verify(root, ids, n, rng)
            finally:
                stop(root)
    if a.quick:
        print("quick run: not judged")
        return 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
