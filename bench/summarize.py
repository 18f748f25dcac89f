#!/usr/bin/env python3
"""Summary table of a bench/run.sh run, from the --json outputs of vpic_bdcats.py.

Prints a Markdown table (write/read MB/s of pdcx and hdf5, pdcx/hdf5 ratio,
each as a % of the device's direct-I/O bandwidth and of the buffered one, both
from bench/seqbw.sh) and, with --append, appends a
dated block with the machine description, the command and the table to a
Markdown file (bench/out/last.md) so it can be pasted into RESULTS.md.
A backend whose JSON is missing (the run failed) is shown as FAILED.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys

# bench/stats.py: the median code shared with bench/c/summarize.py.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stats import median, median_cell


def load_json(path: str | None) -> dict | None:
    if not path or not os.path.exists(path):
        return None
    with open(path) as fh:
        return json.load(fh)


def load_runs(paths: list[str] | None) -> list[dict] | None:
    """The JSON of every repetition of one backend; None if any is missing (a failure)."""
    runs = [load_json(p) for p in paths or []]
    if not runs or any(r is None for r in runs):
        return None
    return runs


def load_seqbw(paths: list[str] | None) -> dict:
    """The `key=value ...` lines printed by seqbw.sh (one per repetition): each figure's
    median over them (`runs`: how many were read)."""
    lines = []
    for path in paths or []:
        if os.path.exists(path):
            with open(path) as fh:
                lines.append(dict(re.findall(r"(\w+)=(\S+)", fh.read())))
    if not lines:
        return {}
    out = {"tool": lines[0].get("tool", "fio"), "runs": str(len(lines))}
    for key in ("seq_write_MBps", "seq_read_MBps", "dev_write_MBps", "dev_read_MBps"):
        m = median(float(x[key]) for x in lines if key in x)
        if m is not None:
            out[key] = str(m)
    return out


def fnum(x: float | None, fmt: str = "{:.1f}") -> str:
    return "n/a" if x is None else fmt.format(x)


def med(runs: list[dict] | None, key: str) -> float | None:
    return median(r.get(key) for r in runs or [])


def cell(runs: list[dict], key: str, fmt: str = "{:.1f}") -> str:
    """Median, and with several repetitions its min-max range."""
    return median_cell((r.get(key) for r in runs), fmt.format)


def ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or not b else f"{a / b:.2f}x"


def pct(a: float | None, ref: float | None) -> str:
    return "n/a" if a is None or not ref else f"{100 * a / ref:.0f}%"


def table(res: dict, seq: dict) -> str:
    """res maps backend -> list of per-repetition results (or None if it failed)."""
    sw = float(seq["seq_write_MBps"]) if "seq_write_MBps" in seq else None
    sr = float(seq["seq_read_MBps"]) if "seq_read_MBps" in seq else None
    # The device's figures (direct I/O): the ceiling each write and read is a share of.
    dw = float(seq["dev_write_MBps"]) if "dev_write_MBps" in seq else None
    dr = float(seq["dev_read_MBps"]) if "dev_read_MBps" in seq else None
    rows = [
        (
            "| | write MB/s | read MB/s | write s | read s | write % of device | read % of device "
            "| write % of buffered | read % of buffered |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in ("pdcx", "hdf5"):
        runs = res.get(name)
        if runs is None:
            rows.append(f"| {name} | FAILED | FAILED | | | | | | |")
            continue
        w, rd = med(runs, "write_MBps"), med(runs, "read_MBps")
        label = name
        if name == "pdcx":
            label = f"pdcx ({runs[0].get('durability', 'local')} durability)"
        rows.append(
            f"| {label} | {cell(runs, 'write_MBps')} | {cell(runs, 'read_MBps')}"
            f" | {cell(runs, 'write_s', '{:.3f}')} | {cell(runs, 'read_s', '{:.3f}')}"
            f" | {pct(w, dw)} | {pct(rd, dr)} | {pct(w, sw)} | {pct(rd, sr)} |"
        )
        if name == "hdf5" and med(runs, "write_fsync_MBps") is not None:
            wf = med(runs, "write_fsync_MBps")
            rows.append(
                f"| hdf5, write + fsync | {cell(runs, 'write_fsync_MBps')} | "
                f"| {cell(runs, 'write_fsync_s', '{:.3f}')} | | {pct(wf, dw)} | | {pct(wf, sw)} | |"
            )
    p, h = res.get("pdcx"), res.get("hdf5")
    pw, pr = med(p, "write_MBps"), med(p, "read_MBps")
    rows.append(f"| pdcx / hdf5 | {ratio(pw, med(h, 'write_MBps'))} | {ratio(pr, med(h, 'read_MBps'))} | | | | | | |")
    if h and med(h, "write_fsync_MBps") is not None:
        rows.append(f"| pdcx / (hdf5 + fsync) | {ratio(pw, med(h, 'write_fsync_MBps'))} | | | | | | | |")
    tool = seq.get("tool", "fio")
    runs = f", median of {seq['runs']}" if int(seq.get("runs", "1")) > 1 else ""
    rows.append(f"| the device ({tool}, direct I/O{runs}) | {fnum(dw)} | {fnum(dr)} | | | 100% | 100% | | |")
    rows.append(f"| {tool} buffered | {fnum(sw)} | {fnum(sr)} | | | | | 100% | 100% |")
    return "\n".join(rows)


def run(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=30)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(workdir: str | None, load_start: str | None = None) -> list[str]:
    mem = "?"
    try:
        with open("/proc/meminfo") as fh:
            kb = int(re.search(r"MemTotal:\s+(\d+)", fh.read()).group(1))
        mem = f"{kb / 2**20:.1f} GiB"
    except (OSError, AttributeError):
        pass
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as fh:
            m = re.search(r"model name\s*:\s*(.+)", fh.read())
        cpu = m.group(1).strip() if m else "?"
    except OSError:
        pass
    lines = [
        f"- cpus (nproc): {len(os.sched_getaffinity(0))} ({cpu})",
        f"- memory: {mem}",
        f"- kernel: {platform.release()}",
    ]
    if workdir:
        src = run(["findmnt", "-no", "SOURCE,FSTYPE", "-T", workdir])
        dev = src.split()[0] if src else ""
        disk = run(["lsblk", "-dnPo", "NAME,SIZE,ROTA,MODEL", dev]) if dev else ""
        lines.append(f"- disk: {src or '?'} ({disk or 'lsblk n/a'})")
    mpi = run(["mpirun", "--version"]).splitlines()
    lines.append(f"- mpi: {mpi[0] if mpi else '?'}")
    try:
        import h5py

        lines.append(f"- h5py {h5py.__version__}, HDF5 {h5py.version.hdf5_version}, mpi={h5py.get_config().mpi}")
    except ImportError:
        lines.append("- h5py: not installed")
    here = os.path.dirname(os.path.abspath(__file__))
    rev = run(["git", "-C", here, "describe", "--always", "--dirty"])
    lines.append(f"- pdcx git: {rev or '?'}")
    # What actually ran: the installed binary and module, which need not match the checkout.
    for what, path in (("pdcx binary", shutil.which("pdcx")), ("pdcx python", _native_path())):
        if path and os.path.exists(path):
            t = datetime.datetime.fromtimestamp(os.path.getmtime(path)).astimezone()
            lines.append(f"- {what}: {path} (built {t:%Y-%m-%d %H:%M %Z})")
    if load_start:
        lines.append(f"- load average before the run (1/5/15 min): {load_start}")
    return lines


def _native_path() -> str | None:
    try:
        import importlib.util

        spec = importlib.util.find_spec("pdcx._native")
        return spec.origin if spec else None
    except (ImportError, ValueError):
        return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pdcx", nargs="*", help="JSON(s) written by vpic_bdcats.py --backend pdcx, one per repetition")
    p.add_argument("--hdf5", nargs="*", help="JSON(s) written by vpic_bdcats.py --backend hdf5, one per repetition")
    p.add_argument("--seqbw", nargs="*", help="files holding the output line of seqbw.sh, one per repetition")
    p.add_argument("--servers", type=int, help="number of pdcx servers (K)")
    p.add_argument("--cache-mb", type=int, help="data cache of each pdcx server, MiB")
    p.add_argument("--load-start", help="/proc/loadavg before the run started")
    p.add_argument("--workdir", help="benchmark directory (for the disk description)")
    p.add_argument("--cmd", help="command line to record")
    p.add_argument("--append", help="append a dated Markdown block to this file")
    args = p.parse_args(argv)

    res = {"pdcx": load_runs(args.pdcx), "hdf5": load_runs(args.hdf5)}
    seq = load_seqbw(args.seqbw)
    any_res = res["pdcx"] or res["hdf5"]
    if any_res:
        r = any_res[0]
        cache = "" if args.cache_mb is None else f" ({args.cache_mb} MiB data cache each)"
        params = (
            f"{r['ranks']} ranks, {args.servers if args.servers else '?'} pdcx "
            f"servers{cache}, {r['particles']} particles/rank, {r['steps']} step(s): "
            f"{r['bytes'] / 1e6:.1f} MB written and read per backend"
        )
        nrep = max(len(res["pdcx"] or []), len(res["hdf5"] or []))
        if nrep > 1:
            params += f"; {nrep} repetitions, median (min–max)"
        if r.get("evict_cache"):
            params += "; page cache evicted between write and read"
        else:
            params += "; reads may be served by the page cache (both backends)"
    else:
        params = "no backend produced results"
    tab = table(res, seq)
    note = (
        "MB = 10^6 bytes. A backend's write ends when its close (hdf5) or "
        "wait_all (pdcx) returns. pdcx with local durability has fdatasync'ed its "
        "log by then; HDF5's close does not fsync, so its data may still be in the "
        "page cache: the 'hdf5, write + fsync' row adds an fsync of the file, the same "
        "guarantee. The device's figures are fio's in each repetition (bench/seqbw.sh): "
        "direct I/O with 16 requests in flight per job (the ceiling), and buffered; both "
        "writes end with an fsync, both reads start with the files out of the page cache."
    )
    print(params)
    print(tab)
    print(note)

    if args.append:
        when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
        block = [f"## {when}", "", *machine(args.workdir, args.load_start), ""]
        if args.cmd:
            block += ["```", args.cmd, "```", ""]
        block += [params, "", tab, "", note, "", ""]
        os.makedirs(os.path.dirname(os.path.abspath(args.append)), exist_ok=True)
        with open(args.append, "a") as fh:
            fh.write("\n".join(block))
    return 0 if res["pdcx"] and res["hdf5"] else 1


if __name__ == "__main__":
    sys.exit(main())
