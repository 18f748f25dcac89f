"""Value queries and per-extent statistics: what statistics cost the flusher, and
how much of a selective query's data they let the servers skip, against the same query on
the same data with statistics off, in one run.

    python3 bench/query_skip.py [--mib 256] [--extent-mib 1] [--reps 5] [--tier dir|s3] [--json FILE]

Starts 2 servers on a fresh root with one tier (a directory, or with --tier s3 a versitygw
S3 server on 127.0.0.1 that scripts/s3server.sh installs), writes two float64 objects of the
same data (one with `pdcx.stats=off`) in extents of --extent-mib, flushes them to the tier and
retires the log, then restarts the servers (empty payload caches), so queries read the tier. The data rises along the object (extent
k holds values in [k, k+1) plus noise), like a sorted or spatially coherent field: a window
of values lives in a few extents. Prints:
  flush      seconds to flush each object (stats computed vs not): the cost statistics add
  query      a selective query (<= 1% hits): bytes the servers read and time, stats on/off
  full       a query every element may match: both read everything (the skip is not free)
The target: the selective query reads <= 10% of the bytes of a full scan (by design: the data is
laid out so that a window of values lives in a few extents; it checks the skipping works).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from pdcxbin import pdcx_bin

REPO = Path(__file__).resolve().parent.parent


def start_s3(work: Path) -> tuple[dict, str]:
    """versitygw on 127.0.0.1 via scripts/s3server.sh (the server the tests use); returns its
    settings and the tier's TOML. Credentials go to the servers through the environment."""
    p = subprocess.run(
        ["bash", str(REPO / "scripts/s3server.sh"), "start", str(work / "s3")],
        capture_output=True,
        text=True,
        check=False,
    )
    if p.returncode != 0:
        sys.exit(f"--tier s3: {p.stderr.strip()} (scripts/s3server.sh install builds versitygw)")
    env = dict(line.split("=", 1) for line in p.stdout.split() if "=" in line)
    os.environ["AWS_ACCESS_KEY_ID"] = env["PDCX_TEST_S3_ACCESS_KEY_ID"]
    os.environ["AWS_SECRET_ACCESS_KEY"] = env["PDCX_TEST_S3_SECRET_ACCESS_KEY"]
    toml = f'''[[tier]]
name = "s3"
kind = "s3"
endpoint = "{env["PDCX_TEST_S3_ENDPOINT"]}"
bucket = "{env["PDCX_TEST_S3_BUCKET"]}"
'''
    return env, toml


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256, help="size of each object (default 256)")
    ap.add_argument("--extent-mib", type=float, default=1.0, help="bytes per write, one extent each (default 1)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tier", choices=["dir", "s3"], default="dir")
    ap.add_argument("--flush-rounds", type=int, default=4, help="pairs of objects flushed, alternating order")
    ap.add_argument("--json", type=Path, help="write the numbers here too")
    a = ap.parse_args()
    import pdcx

    work = Path(tempfile.mkdtemp(prefix="pdcx-qskip-"))
    root = work / "root"
    root.mkdir()
    s3 = None
    if a.tier == "s3":
        s3, tier = start_s3(work)
    else:
        tier = f'[[tier]]\nname = "pfs"\nkind = "shared"\npath = "{work}/pfs"\n'
    (root / "pdcx.toml").write_text(tier + '\n[log]\nsegment_bytes = "8MiB"\n\n[flush]\ninterval_ms = 3600000\n')
    subprocess.run([pdcx_bin(), "server", "start", "-n", "2", "--root", str(root)], check=True, capture_output=True)
    out: dict = {"mib": a.mib, "extent_mib": a.extent_mib, "tier": a.tier, "reps": a.reps}
    try:
        c = pdcx.connect(str(root))
        ct = c.create_container("qskip")
        chunk = int(a.extent_mib * (1 << 20)) // 8
        n_chunks = a.mib * (1 << 20) // 8 // chunk
        n = chunk * n_chunks
        # Flush time with and without statistics, in alternating order over rounds (a fresh
        # pair of objects each round), so neither side always flushes first.
        flush_runs: dict = {"stats": [], "nostats": []}
        objs = {}
        for r in range(a.flush_rounds):
            order = [("stats", None), ("nostats", {"pdcx.stats": "off"})]
            for label, tags in order if r % 2 == 0 else order[::-1]:
                o = ct.create_object(f"qskip/{label}-{r}", shape=(n,), dtype="float64", tags=tags)
                for k in range(n_chunks):
                    # The same values in both objects: extent k from its own seed.
                    o.write_async(k + np.random.default_rng(k).random(chunk), offset=(k * chunk,)).wait()
                t = time.perf_counter()
                c.flush()
                flush_runs[label].append(time.perf_counter() - t)
                objs.setdefault(label, o)
        flush_s = {k: statistics.median(v) for k, v in flush_runs.items()}
        # Restart the servers: their payload caches start empty, so queries read the tier.
        c.close()
        subprocess.run([pdcx_bin(), "server", "stop", "--root", str(root)], check=True, capture_output=True)
        subprocess.run([pdcx_bin(), "server", "start", "-n", "2", "--root", str(root)], check=True, capture_output=True)
        c = pdcx.connect(str(root))
        objs = {label: c.open_object(o.name) for label, o in objs.items()}
        tiers = {e["tier"] for o in objs.values() for e in o.extents()}
        lo = n_chunks // 2 + 0.25
        hi = lo + 0.5 * max(0.01 * n_chunks, 0.02)  # <= 1% of the elements
        rows = {}
        for label, o in objs.items():
            for kind, cond in [("query", (o > lo) & (o < hi)), ("full", o > -1.0)]:
                times, scanned, hits = [], 0, 0
                for _ in range(a.reps):
                    t = time.perf_counter()
                    h = o.where(cond, coords=False, values=False)
                    times.append(time.perf_counter() - t)
                    scanned, hits = h.scanned_bytes, h.count
                rows[(label, kind)] = (statistics.median(times), scanned, hits, times[0])
        full = rows[("nostats", "query")][1]
        ratio = rows[("stats", "query")][1] / full
        print(f"pdcx value queries on a {a.tier} tier: {a.mib} MiB float64 per object, extents of {a.extent_mib} MiB")
        print(f"extents live on: {', '.join(sorted(tiers))}")
        print(
            f"flush to the tier (median of {a.flush_rounds}): {flush_s['stats']:.3f} s with statistics, "
            f"{flush_s['nostats']:.3f} s without "
            f"({(flush_s['stats'] / flush_s['nostats'] - 1) * 100:+.1f} %)"
        )
        print("first s: the first repetition, from the tier; median s: later ones find the extents in the")
        print("servers' payload cache")
        print(f"{'query':<8} {'object':<9} {'hits':>10} {'read MiB':>10} {'first s':>9} {'median s':>9}")
        for (label, kind), (t, scanned, hits, first) in rows.items():
            print(f"{kind:<8} {label:<9} {hits:>10} {scanned / 2**20:>10.1f} {first:>9.3f} {t:>9.3f}")
        hit_frac = rows[("stats", "query")][2] / n
        print(f"selective query: {hit_frac * 100:.2f} % hits; reads {ratio * 100:.2f} % of the bytes of a full scan")
        print(
            "by design (the values rise along the object: a 1 % window lives in a few extents): "
            f"target <= 10 % of a full scan's bytes: {'MET' if ratio <= 0.10 and hit_frac <= 0.01 else 'NOT MET'}"
        )
        print(
            f"query time: {rows[('stats', 'query')][0]:.3f} s with statistics vs "
            f"{rows[('nostats', 'query')][0]:.3f} s without "
            f"({rows[('nostats', 'query')][0] / rows[('stats', 'query')][0]:.1f}x)"
        )
        out.update(
            flush_s=flush_s,
            rows={
                f"{k[0]}/{k[1]}": {"median_s": v[0], "read_bytes": v[1], "hits": v[2], "first_s": v[3]}
                for k, v in rows.items()
            },
            ratio=ratio,
            hit_fraction=hit_frac,
        )
        if a.json:
            a.json.write_text(json.dumps(out, indent=2))
        c.close()
    finally:
        subprocess.run([pdcx_bin(), "server", "stop", "--root", str(root)], capture_output=True, check=False)
        if s3 is not None:
            subprocess.run(["bash", str(REPO / "scripts/s3server.sh"), "stop", s3["PDCX_TEST_S3_PIDFILE"]], check=False)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
