"""Prints the sharding sweep table from run.sh's per-run files: median (min-max) MB/s of app
write + flush to the home tier, ratio of medians to the baseline, blobs found on the home tier
after each run next to the count Table II of the object-sharding paper gives for this many
servers, and each MB/s as a share of the device's direct-I/O write figure (bench/seqbw.sh on the
tier directory, measured in every round: seqbw-rN.txt beside the per-run files), and for
information pdcx's flush phase alone against the baseline (the paper's I/O rate) and the
machine's CPU time over each run's clock (busy, and idle waiting for I/O: which of the cores and
the device bound the run)."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stats import read_seqbw, seq_figure

FIGURES = ("seq_write_MBps", "seq_read_MBps", "dev_write_MBps", "dev_read_MBps")

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


def device_figures(path: Path) -> dict:
    """bench/seqbw.sh's figures as numbers (a missing or failed figure is left out) and its
    `tool`; empty when the file is missing or unreadable."""
    raw = read_seqbw(path)
    out: dict = {k: v for k in FIGURES if (v := seq_figure(raw, k)) is not None}
    if "tool" in raw:
        out["tool"] = raw["tool"]
    return out


def seqbw_of(run: Path) -> Path:
    """The device figures of a per-run file's round: `KERNEL-SETTING-rN.EXT` -> `seqbw-rN.txt`."""
    return run.parent / f"seqbw-{run.stem.rsplit('-', 1)[-1]}.txt"


def spread(xs: list[float], f: str = "{:.0f}", unit: str = "") -> str:
    """'median (min-max)', just the value with one run, 'n/a' with none."""
    if not xs:
        return "n/a"
    m = f.format(statistics.median(xs)) + unit
    return m if len(xs) == 1 else f"{m} ({f.format(min(xs))}{unit}-{f.format(max(xs))}{unit})"


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
    for opt in (
        "ranks",
        "servers",
        "particles",
        "chunks",
        "steps",
        "tier",
        "repeat",
        "kernels",
        "load",
        "load-end",
        "log-on",
    ):
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
        return [mbps(f) for f in runs(kernel, setting, "json")]

    def mbps(f: Path) -> float:
        d = json.loads(f.read_text())
        return d["bytes"] / d["total_s"] / 1e6

    def flush_rates(kernel: str, setting: str) -> list[float]:
        """pdcx's flush phase alone: the bytes over the time from the app's last write to the
        last byte on its tier, fsynced (the paper's I/O rate: storing the shards from the
        servers' memory). The baselines have no such phase."""
        out = []
        for f in runs(kernel, setting, "json"):
            d = json.loads(f.read_text())
            if d["total_s"] > d["app_s"]:
                out.append(d["bytes"] / (d["total_s"] - d["app_s"]) / 1e6)
        return out

    # The device of the tier directory, per round of every work dir (bench/seqbw.sh's line).
    seqbw = {f: device_figures(f) for w in a.work for f in (w / f"seqbw-r{r}.txt" for r in range(1, repeat + 1))}
    dev_w = [s["dev_write_MBps"] for s in seqbw.values() if s.get("dev_write_MBps", 0) > 0]

    def share(kernel: str, setting: str) -> str:
        """Each run's MB/s as a % of its round's direct-I/O write figure (the median over the
        measured rounds when its own round has none), median (min-max) over the runs."""
        if not dev_w:
            return "n/a"
        pcts = []
        for f in runs(kernel, setting, "json"):
            dev = seqbw.get(seqbw_of(f), {}).get("dev_write_MBps", 0) or statistics.median(dev_w)
            pcts.append(100 * mbps(f) / dev)
        return spread(pcts, "{:.1f}", "%")

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

    def cpu(kernel: str, setting: str) -> str:
        """Median CPU seconds busy / idle waiting for I/O over the run's clock, machine-wide
        (ranks, servers, kernel threads); '-' from a kernel.py that did not record them."""
        got = [json.loads(f.read_text()) for f in runs(kernel, setting, "json")]
        got = [d for d in got if "cpu_busy_s" in d]
        if not got:
            return "-"
        busy = statistics.median(d["cpu_busy_s"] for d in got)
        wait = statistics.median(d["cpu_iowait_s"] for d in got)
        return f"{busy:.2f} / {wait:.2f}"

    def fmt(xs: list[float]) -> str:
        return f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})"

    def device(key: str) -> str:
        return spread([s[key] for s in seqbw.values() if key in s and s.get("dev_write_MBps", 0) > 0])

    print(
        f"object-sharding sweep: {a.ranks} ranks, {n} servers, {a.particles} particles/rank in "
        f"{a.chunks} regions per variable"
        + (
            f", {a.steps} bursts back to back (flush overlapping the next; baselines fsync after the last)"
            if int(a.steps) > 1
            else ""
        )
        + f", home tier = {a.tier}, server log on {a.log_on}; "
        f"{repeat * len(a.work)} run(s) per point"
        + (f" ({len(a.work)} sweeps pooled)" if len(a.work) > 1 else "")
        + f"; load at start {a.load}, at end {a.load_end}"
    )
    measured = sum(1 for s in seqbw.values() if s.get("dev_write_MBps", 0) > 0)
    tools = list(dict.fromkeys(s["tool"] for s in seqbw.values() if "tool" in s))
    if measured:
        print(
            f"device of the tier directory (bench/seqbw.sh, {'/'.join(tools) or '?'}, {measured} of {len(seqbw)} "
            f"round(s) measured, median (min-max)): direct I/O write {device('dev_write_MBps')} MB/s, read "
            f"{device('dev_read_MBps')} MB/s; buffered write {device('seq_write_MBps')} MB/s, read "
            f"{device('seq_read_MBps')} MB/s"
        )
    else:
        print("device of the tier directory: device not measured (no bench/seqbw.sh figure); % dev write = n/a")
    print(
        f"{'kernel':<15} {'setting':<28} {'blobs':>6} {'shards':>12} {'Table II':>8} {'tier MB':>7} "
        f"{'put MB by server':>16} {'MB/s median (min-max)':>22} {'x baseline':>10} {'% dev write (info)':>22} "
        f"{'flush alone MB/s (x baseline)':>30} {'CPU s busy / iowait':>20}"
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
            f"{fmt(b):>22} {1.0:>10.2f} {share(kernel, base):>22} {'-':>30} {cpu(kernel, base):>20}"
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
            fl = flush_rates(kernel, s)
            alone = f"{statistics.median(fl):.0f} ({statistics.median(fl) / statistics.median(b):.2f}x)" if fl else "-"
            print(
                f"{kernel:<15} {label(s, n):<28} {nb:>6} {ns:>12} {exp:>8} {mb:>7} {puts(kernel, s):>16} "
                f"{rate:>22} {ratio:>10} {share(kernel, s) if xs else '-':>22} {alone:>30} {cpu(kernel, s):>20}"
            )
    for note in notes:
        print(f"note: {note}")
    print(
        "blobs: files of the deployment on the home tier after the run; shards: those under "
        ".../shard/ (grp: group shards under gLEADER/); Table II: its count for these servers "
        "(off: one blob per extent); tier MB: their bytes; put MB by server: each server's "
        "put_bytes counter (a group shard's bytes at the server that wrote them); % dev write (info, no "
        "target): MB/s as a share of the round's direct-I/O write figure of the tier directory's device; "
        "MB/s and x baseline: pdcx's app writes + flush until every byte is on its tier, fsynced (the "
        "verdict's figure); flush alone (info): the flush phase only, from the servers' logs to the "
        "tier, fsynced (the paper's I/O rate, 'the time taken for storing the data in the file "
        "system'), against the baseline's whole write; CPU s (info): the machine's CPU seconds busy "
        "and idle waiting for I/O over the run's clock, median (a run using about cores x its time is "
        "bound by the cores)"
    )


if __name__ == "__main__":
    main()
