"""Scaling table from the --json files of bench/profile/run.sh (one per servers x ranks)."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path


def f(v: float | None, nd: int = 1) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.{nd}f}"


def bulk(p: dict | None) -> tuple[str, str, str]:
    """MB/s, us per MB (elapsed), server CPU s per GB."""
    if not p or not p.get("bytes"):
        return ("n/a",) * 3
    mb = p["bytes"] / 1e6
    cpu = p.get("server_cpu_s")
    return (
        f(p.get("mbps")),
        f(p["seconds"] * 1e6 / mb),
        f(cpu / (p["bytes"] / 1e9), 2) if cpu is not None else "n/a",
    )


def small(p: dict | None) -> tuple[str, str]:
    """p50 us, server CPU us per op."""
    if not p:
        return ("n/a",) * 2
    cpu, ops = p.get("server_cpu_s"), p.get("ops")
    return (f(p.get("p50_us")), f(cpu * 1e6 / ops) if cpu is not None and ops else "n/a")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("jsons", nargs="+")
    ap.add_argument("--pdcx", default="?")
    ap.add_argument("--lib", default="?")
    ap.add_argument("--particles", default="?")
    ap.add_argument("--ops", default="?")
    ap.add_argument("--cache-mb", default="?")
    ap.add_argument("--load", default="?")
    ap.add_argument("--cmd", default="")
    ap.add_argument("--append")
    a = ap.parse_args(argv)
    head = [
        "servers",
        "ranks",
        "VPIC write MB/s",
        "us/MB",
        "server CPU s/GB",
        "BDCATS read MB/s",
        "us/MB",
        "server CPU s/GB",
        "4 KiB write p50 us",
        "server CPU us/op",
        "4 KiB read p50 us",
        "server CPU us/op",
        "server peak RSS MiB (max)",
    ]
    rows = []
    for path in a.jsons:
        p = Path(path)
        if not p.exists():
            rows.append([p.stem, "FAILED"] + [""] * (len(head) - 2))
            continue
        d = json.loads(p.read_text())
        ph = d["phases"]
        ranks = next((v.get("ranks") for v in ph.values() if v.get("ranks")), "?")
        rss = [v.get("server_peak_rss_mib") for v in ph.values() if v.get("server_peak_rss_mib") is not None]
        rows.append(
            [
                str(d.get("servers", "?")),
                str(ranks),
                *bulk(ph.get("vpic-write")),
                *bulk(ph.get("bdcats-read")),
                *small(ph.get("small-write")),
                *small(ph.get("small-read")),
                f(max(rss), 0) if rss else "n/a",
            ]
        )
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        f"## Scaling ({now})",
        "",
        f"- pdcx: {a.pdcx}; libpdcx: {a.lib}",
        f"- {a.particles} particles per rank (32 B each), {a.ops} 4 KiB ops per rank, data cache {a.cache_mb} MiB",
        f"- load average (1/5/15): {a.load}",
        "",
        "```",
        a.cmd,
        "```",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---:|" * len(head),
        *("| " + " | ".join(r) + " |" for r in rows),
        "",
        (
            "Weak scaling: the data grows with the ranks. us/MB = the kernel's elapsed time per MB "
            "(10^6 B); server CPU = utime+stime of all servers during the phase; peak RSS = the "
            "largest VmHWM of one server, reset before each phase, over the four phases."
        ),
        "",
    ]
    text = "\n".join(out)
    print(text)
    if a.append:
        with open(a.append, "a") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
