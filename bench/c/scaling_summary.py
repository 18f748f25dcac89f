"""The table of bench/c/scaling.sh: per node count K, the aggregate MB/s of each kernel (median
over rounds, min-max), its ratio to K / K1 x the first node count's figure of the same round
(the scaling target: writes >= 0.80), and the aggregate against K x the per-node device's
direct-I/O figure of the same round (write rows: its write figure; read rows: its read figure).

    python3 bench/c/scaling_summary.py WORK --nodes "1 2 4" --repeat N
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stats import median, median_cell, read_seqbw, seq_figure

# (row label, RESULT kernel, extra key=value the line must carry or None, device figure, target)
ROWS = [
    ("VPIC write, local", "vpic", None, "dev_write_MBps", 0.80),
    ("HACC write, local", "hacc-write", None, "dev_write_MBps", 0.80),
    ("BDCATS read, cold", "bdcats", "label=cold", "dev_read_MBps", None),
    ("HACC read, cold", "hacc-read", None, "dev_read_MBps", None),
]
SCALING_TARGET = 0.80


def result_mbps(log: Path, kernel: str, extra: str | None) -> float | None:
    """The MB/s of the first RESULT line of `kernel` (carrying `extra`) in `log`, if any."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if not line.startswith("RESULT ") or f" kernel={kernel} " not in line:
            continue
        if extra and f" {extra}" not in line:
            continue
        m = re.search(r" mbps=([0-9.]+)", line)
        if m:
            return float(m.group(1))
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("work", type=Path)
    ap.add_argument("--nodes", required=True, help='node counts as run, the first the reference ("1 2 4")')
    ap.add_argument("--repeat", type=int, required=True)
    a = ap.parse_args()
    ks = [int(k) for k in a.nodes.split()]
    if not ks or a.repeat < 1:
        ap.error("--nodes needs at least one count and --repeat at least 1")
    k1, rounds = ks[0], range(1, a.repeat + 1)

    def fig(k: int, r: int, kernel: str, extra: str | None) -> float | None:
        return result_mbps(a.work / f"{k}-r{r}.log", kernel, extra)

    def dev(k: int, r: int, key: str) -> float | None:
        return seq_figure(read_seqbw(a.work / f"seqbw-{k}-r{r}.txt"), key)

    notes = (a.work / "notes.txt").read_text(errors="replace").strip() if (a.work / "notes.txt").exists() else ""
    print(f"Scaling over emulated nodes with a device each ({a.repeat} round(s); median (min–max))")
    for line in notes.splitlines():
        print(f"- {line}")
    print()
    print(
        f"| figure | nodes | aggregate MB/s | per-node device MB/s | vs {k1}-node x nodes/{k1} | target | vs nodes x device |"
    )
    print("|---|---:|---:|---:|---:|---|---:|")
    for label, kernel, extra, dev_key, target in ROWS:
        for k in ks:
            agg = [fig(k, r, kernel, extra) for r in rounds]
            devs = [dev(k, r, dev_key) for r in rounds]
            scale = []
            for r in rounds:
                x, base = fig(k, r, kernel, extra), fig(k1, r, kernel, extra)
                scale.append(x / (base * k / k1) if x and base else None)
            vs_dev = [x / (k * d) if x and d else None for x, d in zip(agg, devs)]
            m = median(scale)
            verdict = "-"
            if target is not None and k != k1:
                verdict = "n/a" if m is None else ("PASS" if m >= target else "miss")
                verdict = f">= {target:.2f}: {verdict}"
            print(
                f"| {label} | {k} | {median_cell(agg, '{:,.0f}'.format)} | {median_cell(devs, '{:,.0f}'.format)} "
                f"| {median_cell(scale, '{:.2f}'.format) if k != k1 else '1 (reference)'} | {verdict} "
                f"| {median_cell(vs_dev, '{:.0%}'.format)} |"
            )
    print()
    print(
        "Aggregate: the kernel's MB/s over all ranks (bytes of every rank / the slowest rank's time). "
        f"vs {k1}-node: within each round, aggregate / ({k1}-node figure x nodes / {k1}). "
        "Per-node device: bench/seqbw.sh's direct-I/O figure on node 0's device before the servers start; "
        "every node's device has the same limit."
    )


if __name__ == "__main__":
    main()
