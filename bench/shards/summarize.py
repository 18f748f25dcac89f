"""Prints the sharding sweep table from run.sh's per-run files: median (min-max) MB/s of app
write + flush to the home tier, ratio of medians to the baseline, blobs found on the home tier
after each run next to the count Table II of the object-sharding paper gives for this many
servers."""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

# Table II, as docs/TIERS.md maps it to [shard]: objects per shard and servers per shard
# (0 = all servers) of each strategy, basic and composite column.
BASIC = {1: (1, 0), 2: (1, 1), 3: (2, 1), 4: (4, 1), 5: (8, 1)}
COMPOSITE = {1: (1, 0), 2: (1, 1), 3: (1, 2), 4: (1, 4), 5: (1, 8)}


def expected(setting: str, objects: int, extents: int, n: int) -> int:
    """Blobs Table II predicts for `objects` objects on `n` servers (every server holding
    extents of every object); `extents` blobs when sharding is off (one blob per extent)."""
    if setting == "off":
        return extents
    table = COMPOSITE if setting.startswith("c") else BASIC
    per_shard, group = table[int(setting.lstrip("c"))]
    group = n if group == 0 else min(group, n)
    return math.ceil(objects / per_shard) * math.ceil(n / group)


def label(setting: str, n: int) -> str:
    if setting == "off":
        return "off (blob per extent)"
    s = int(setting.lstrip("c"))
    if setting.startswith("c"):
        group = COMPOSITE[s][1]
        return f"composite {s} (servers {'all' if group == 0 else group})"
    per_shard, group = BASIC[s]
    return f"strategy {s} ({'servers all' if group == 0 else f'{per_shard} obj/shard'})"


def main() -> None:
    ap = argparse.ArgumentParser()
    # Several work dirs (runs of the same command) pool their rounds: the table is over all.
    ap.add_argument("work", type=Path, nargs="+")
    for opt in ("ranks", "servers", "particles", "chunks", "tier", "repeat", "kernels", "load", "load-end", "log-on"):
        ap.add_argument(f"--{opt}", required=True)
    a = ap.parse_args()
    n, repeat = int(a.servers), int(a.repeat)

    def runs(kernel: str, setting: str, ext: str) -> list[Path]:
        """This point's per-round files of every work dir, in run order."""
        out = []
        for w in a.work:
            for r in range(1, repeat + 1):
                f = w / f"{kernel}-{setting}-r{r}.{ext}"
                if f.exists():
                    out.append(f)
        return out

    def rates(kernel: str, setting: str) -> list[float]:
        out = []
        for f in runs(kernel, setting, "json"):
            d = json.loads(f.read_text())
            out.append(d["bytes"] / d["total_s"] / 1e6)
        return out

    def blobs(kernel: str, setting: str) -> tuple[str, str, str]:
        """All blobs of the deployment, the shard blobs among them (group shards in brackets),
        each as the distinct values over the rounds ("16" or "16/17"), and the MB they hold
        (first round; above the data's size when S3 multipart shards carry padding)."""
        total, shards, mb = [], [], []
        for f in runs(kernel, setting, "blobs"):
            fields = f.read_text().split()
            if len(fields) < 5:  # an older run.sh recorded no bytes
                continue
            t, s, g, up, nbytes = (int(x) for x in f.read_text().split())
            total.append(str(t) + (f"+{up}up" if up else ""))
            shards.append(f"{s}" + (f" ({g} grp)" if g else ""))
            mb.append(f"{nbytes / 1e6:.1f}")
        return "/".join(dict.fromkeys(total)) or "?", "/".join(dict.fromkeys(shards)) or "?", mb[0] if mb else "?"

    def puts(kernel: str, setting: str) -> str:
        """MB each server counted as put to the home tier (first round that recorded it)."""
        for f in runs(kernel, setting, "json"):
            per_server = json.loads(f.read_text()).get("put_bytes")
            if per_server:
                return "/".join(f"{b / 1e6:.0f}" for b in per_server)
        return "?"

    def fmt(xs: list[float]) -> str:
        return f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})"

    print(
        f"object-sharding sweep: {a.ranks} ranks, {n} servers, {a.particles} particles/rank in "
        f"{a.chunks} regions per variable, home tier = {a.tier}, server log on {a.log_on}; "
        f"{repeat * len(a.work)} run(s) per point"
        + (f" ({len(a.work)} sweeps pooled)" if len(a.work) > 1 else "")
        + f"; load at start {a.load}, at end {a.load_end}"
    )
    print(
        f"{'kernel':<15} {'setting':<28} {'blobs':>6} {'shards':>12} {'Table II':>8} {'tier MB':>7} "
        f"{'put MB by server':>16} {'MB/s median (min-max)':>22} {'x baseline':>10}"
    )
    notes = []
    for kernel in a.kernels.split():
        base = "hdf5" if kernel == "vpic-basic" else "mpiio"
        objects = 8 if kernel == "vpic-basic" else 1
        extents = int(a.ranks) * int(a.chunks) * objects
        b = rates(kernel, base)
        if not b:
            continue
        print(
            f"{kernel:<15} {base + ' (baseline)':<28} {'1':>6} {'-':>12} {'-':>8} {'-':>7} {'-':>16} "
            f"{fmt(b):>22} {1.0:>10.2f}"
        )
        settings = ["off", "1", "2", "3", "4", "5"] if kernel == "vpic-basic" else ["off", "2", "c1", "c3", "c4"]
        for s in settings:
            xs = rates(kernel, s)
            fails = runs(kernel, s, "fail")
            if not xs and not fails:
                if s.startswith("c") and s != "c1":
                    group = COMPOSITE[int(s[1:])][1]
                    if group >= n:
                        notes.append(
                            f"{kernel}: composite {s[1:]} (servers {group}) = composite 1 at {n} servers: not run again"
                        )
                continue
            nb, ns, mb = blobs(kernel, s)
            exp = expected(s, objects, extents, n)
            rate = fmt(xs) if xs else "FAILED"
            ratio = f"{statistics.median(xs) / statistics.median(b):.2f}" if xs else "-"
            if fails:
                rate = f"{rate} [{len(fails)} failed]" if xs else rate
            print(
                f"{kernel:<15} {label(s, n):<28} {nb:>6} {ns:>12} {exp:>8} {mb:>7} {puts(kernel, s):>16} "
                f"{rate:>22} {ratio:>10}"
            )
    for note in notes:
        print(f"note: {note}")
    print(
        "blobs: files of the deployment on the home tier after the run; shards: those under "
        ".../shard/ (grp: group shards under gLEADER/); Table II: its count for these servers "
        "(off: one blob per extent); tier MB: their bytes; put MB by server: each server's "
        "put_bytes counter (a group shard is counted at its leader)"
    )


if __name__ == "__main__":
    main()
