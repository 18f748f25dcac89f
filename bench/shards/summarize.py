"""Prints the sharding sweep table from run.sh's per-run JSON files (median (min-max) MB/s of
app write + flush to the home tier, ratio of medians to the baseline, blobs stored)."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    for opt in ("ranks", "servers", "particles", "chunks", "tier", "repeat", "kernels", "load", "log-on"):
        ap.add_argument(f"--{opt}", required=True)
    a = ap.parse_args()

    def rates(kernel: str, label: str) -> list[float]:
        out = []
        for r in range(1, int(a.repeat) + 1):
            f = a.work / f"{kernel}-{label}-r{r}.json"
            if f.exists():
                d = json.loads(f.read_text())
                out.append(d["bytes"] / d["total_s"] / 1e6)
        return out

    def fmt(xs: list[float]) -> str:
        return f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})"

    print(
        f"object-sharding sweep: {a.ranks} ranks, {a.servers} servers, {a.particles} particles/rank in "
        f"{a.chunks} regions per variable, home tier = {a.tier}, server log on {a.log_on}; "
        f"{a.repeat} run(s) per point; load at start {a.load}"
    )
    print(f"{'kernel':<15} {'setting':<22} {'blobs':>6} {'MB/s median (min-max)':>22} {'x baseline':>10}")
    for kernel in a.kernels.split():
        base = "hdf5" if kernel == "vpic-basic" else "mpiio"
        b = rates(kernel, base)
        if not b:
            continue
        print(f"{kernel:<15} {base + ' (baseline)':<22} {'1':>6} {fmt(b):>22} {1.0:>10.2f}")
        for s in ("off", "2", "3", "4", "5"):
            xs = rates(kernel, s)
            if not xs:
                continue
            blobs = a.work / f"{kernel}-{s}-r1.blobs"
            nb = blobs.read_text().strip() if blobs.exists() else "?"
            label = "off (blob per extent)" if s == "off" else f"strategy {s}"
            ratio = statistics.median(xs) / statistics.median(b)
            print(f"{kernel:<15} {label:<22} {nb:>6} {fmt(xs):>22} {ratio:>10.2f}")


if __name__ == "__main__":
    main()
