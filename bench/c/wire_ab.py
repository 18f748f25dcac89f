#!/usr/bin/env python3
"""What protecting frames between nodes costs the C kernels: `bench/c/run.sh --nodes K
--only pdc` run ROUNDS times with PDCX_WIRE=plain and ROUNDS times with PDCX_WIRE=auto (the
default: encrypted and authenticated between nodes), the two alternating and their order
swapped each round; then, per figure, the median of the per-round ratios auto / plain with
their range, so slow and fast rounds (a busy host, the page cache) cancel out.

    python3 bench/c/wire_ab.py [--rounds 3] [--nodes 2] [-- RUN.SH ARGS...]

Every run is a full run.sh (its own deployment, network namespaces, data, logs under
bench/out/c-run-*); this script only sets PDCX_WIRE and reads the RESULT lines back.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "bench" / "out"

# (label, kernel, selector on the RESULT fields, value field, higher is better)
FIGURES = [
    ("VPIC write MB/s, local", "vpic", {"steps": "1", "durability": "local"}, "mbps", True),
    ("VPIC write MB/s, memory", "vpic", {"steps": "1", "label": "memory"}, "mbps", True),
    ("VPIC 5 steps, app-visible I/O s", "vpic", {"steps": "5"}, "seconds", False),
    ("HACC write MB/s, local", "hacc-write", {"durability": "local"}, "mbps", True),
    ("HACC write MB/s, memory", "hacc-write", {"label": "memory"}, "mbps", True),
    ("BDCATS read MB/s, cold", "bdcats", {"label": "cold"}, "mbps", True),
    ("HACC read MB/s", "hacc-read", {"cache_dropped": "1"}, "mbps", True),
    ("4 KiB read p50 us", "small", {"mode": "read", "label": None}, "p50_us", False),
    ("4 KiB write+wait p50 us, local", "small", {"mode": "write", "durability": "local"}, "p50_us", False),
]


def results(work: Path) -> list[dict[str, str]]:
    rows = []
    for log in sorted(work.glob("pdc-*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("RESULT "):
                rows.append(dict(re.findall(r"(\w+)=(\S+)", line)))
    return rows


def pick(rows: list[dict[str, str]], kernel: str, sel: dict, field: str) -> float | None:
    for r in rows:
        if r.get("kernel") != kernel:
            continue
        if all((r.get(k) is None) if v is None else r.get(k) == v for k, v in sel.items()):
            try:
                return float(r[field])
            except (KeyError, ValueError):
                return None
    return None


def run_once(wire: str, nodes: int, extra: list[str]) -> Path:
    before = set(OUT.glob("c-run-*")) if OUT.exists() else set()
    env = {**os.environ, "PDCX_WIRE": wire}
    cmd = ["bash", str(REPO / "bench/c/run.sh"), "--nodes", str(nodes), "--only", "pdc", *extra]
    print(f"wire_ab: PDCX_WIRE={wire} {' '.join(cmd)}", flush=True)
    p = subprocess.run(cmd, env=env, check=False, capture_output=True, text=True)
    new = sorted(set(OUT.glob("c-run-*")) - before)
    if p.returncode != 0 or not new:
        sys.exit(f"wire_ab: run.sh failed (PDCX_WIRE={wire}, exit {p.returncode}):\n{p.stderr[-3000:]}")
    return new[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("extra", nargs="*", help="arguments passed on to run.sh (after --)")
    a = ap.parse_args()
    if a.rounds < 1 or a.nodes < 2:
        ap.error("--rounds >= 1 and --nodes >= 2 (on one node frames are never protected)")
    load = Path("/proc/loadavg").read_text().split()[:3]
    runs: dict[str, list[list[dict[str, str]]]] = {"plain": [], "auto": []}
    for r in range(a.rounds):
        order = ["plain", "auto"] if r % 2 == 0 else ["auto", "plain"]
        for wire in order:
            runs[wire].append(results(run_once(wire, a.nodes, a.extra)))
    print(
        f"\n{a.nodes} nodes, {a.rounds} rounds, load at start {' '.join(load)}; ratio = auto / plain within each round"
    )
    print("\n| figure | plain (median) | auto (median) | auto / plain, median (range) | cost |")
    print("|---|---:|---:|---:|---:|")
    for label, kernel, sel, field, higher in FIGURES:
        plain = [pick(x, kernel, sel, field) for x in runs["plain"]]
        auto = [pick(x, kernel, sel, field) for x in runs["auto"]]
        pairs = [(p, q) for p, q in zip(plain, auto) if p and q]
        if not pairs:
            print(f"| {label} | - | - | not measured | |")
            continue
        ratios = [q / p for p, q in pairs]
        med = statistics.median(ratios)
        cost = (1 - med) if higher else (med - 1)
        print(
            f"| {label} | {statistics.median(p for p, _ in pairs):,.1f} | {statistics.median(q for _, q in pairs):,.1f} "
            f"| {med:.3f}x ({min(ratios):.3f}x-{max(ratios):.3f}x) | {cost * 100:+.1f} % |"
        )
    print("\ncost: how much worse auto is than plain (negative: better); higher MB/s and lower s/us are better")
    return 0


if __name__ == "__main__":
    sys.exit(main())
