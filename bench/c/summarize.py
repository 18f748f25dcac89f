"""Turn the RESULT lines of bench/c/run.sh into the table against the fast path's targets.

Each kernel prints `RESULT kernel=K backend=B ranks=R bytes=N seconds=S mbps=M key=value ...`
(variants of one kernel carry `label=...`). With --repeat N, run.sh writes one pdc and one
hdf5 log per round (pdc-1.log, hdf5-1.log, ...), the backends interleaved; every figure
and every ratio is computed within its round (the baseline measured next to it) and the
table shows the median over rounds with the min–max range.
"""

import argparse
import datetime
import platform
import subprocess
import sys
from pathlib import Path

# bench/stats.py: the median code shared with bench/summarize.py.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stats import median, median_cell, read_seqbw, seq_figure


def parse(path):
    """RESULT lines of a log -> list of dicts (values as str); FAILED lines -> set of kernels."""
    results, failed = [], set()
    if not path or not Path(path).exists():
        return results, failed
    for line in Path(path).read_text(errors="replace").splitlines():
        if line.startswith("RESULT "):
            results.append(dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv))
        elif line.startswith("FAILED "):
            failed.add(dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv).get("kernel", "?"))
    return results, failed


def pick(results, kernel, label=None, pred=None, **match):
    """First RESULT of the kernel with this label (None: no label) and these key=values."""
    for r in results:
        if r.get("kernel") != kernel or r.get("label") != label:
            continue
        if all(r.get(k) == v for k, v in match.items()) and (pred is None or pred(r)):
            return r
    return None


def num(r, key):
    try:
        return float(r[key]) if r is not None and key in r else None
    except ValueError:
        return None


def fmt(v, unit=""):
    if v is None:
        return "n/a"
    if abs(v) >= 1000:
        return f"{v:,.0f}{unit}"
    if abs(v) >= 10:
        return f"{v:.1f}{unit}"
    return f"{v:.3f}{unit}"


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def diff(a, b):
    return a - b if a is not None and b is not None else None


def pct(r):
    return r * 100 if r is not None else None


# One figure of the table: name, the pdc value, the baseline's, the comparison of the two
# (a ratio, a %, or a difference), the target and how to check it. `check` is applied to
# the median over rounds of the value named by `on` ("cmp" or "pdc"); None = info only.
class Fig:
    def __init__(self, name, pdc, base, cmp_, unit, target, check=None, on="cmp"):
        self.name, self.pdc, self.base, self.cmp, self.unit = name, pdc, base, cmp_, unit
        self.target, self.check, self.on = target, check, on


def at_least(t):
    return lambda v: v >= t


def at_most(t):
    return lambda v: v <= t


def figures(pdc, h5, seq, servers):
    """The figures of one round (pdc and hdf5 RESULT lines of that round, `seq`: the device's
    figures of the run, bench/seqbw.sh's line as a dict)."""
    fio_w, fio_r = seq_figure(seq, "seq_write_MBps"), seq_figure(seq, "seq_read_MBps")
    dev_w, dev_r = seq_figure(seq, "dev_write_MBps"), seq_figure(seq, "dev_read_MBps")

    def small(res, label, mode, alt=None):
        return pick(res, "small", label, pred=lambda r: r.get("mode") in (mode, alt))

    p_v1 = pick(pdc, "vpic", steps="1")
    p_v1m = pick(pdc, "vpic", "memory", steps="1")
    h_v1 = pick(h5, "vpic", steps="1")
    multi = lambda r: r.get("steps") != "1"
    p_vm, h_vm = pick(pdc, "vpic", pred=multi), pick(h5, "vpic", pred=multi)
    p_bc, h_bc = pick(pdc, "bdcats", "cold") or pick(pdc, "bdcats"), pick(h5, "bdcats", "cold") or pick(h5, "bdcats")
    p_bw, h_bw = pick(pdc, "bdcats", "warm"), pick(h5, "bdcats", "warm")
    p_hw, p_hwm, h_hw = pick(pdc, "hacc-write"), pick(pdc, "hacc-write", "memory"), pick(h5, "hacc-write")
    p_hr, h_hr = pick(pdc, "hacc-read"), pick(h5, "hacc-read")
    # Old logs call the PDC write mode create+start+wait+close.
    p_sw, p_swm = small(pdc, None, "write", "create+start+wait+close"), small(pdc, "memory", "write")
    p_sr = small(pdc, None, "read")
    h_sw, h_swf, h_sr = small(h5, None, "write"), small(h5, None, "write+flush"), small(h5, None, "read")
    h_sync = small(h5, None, "pwrite+fdatasync")
    p_co, h_co = pick(pdc, "consist"), pick(h5, "consist")
    p_me = pick(pdc, "meta", pred=lambda r: r.get("mode", "create+tag") == "create+tag")
    p_m1 = pick(pdc, "meta", "single")
    p_mm = pick(pdc, "meta", "many", pred=lambda r: r.get("mode") != "unsupported")
    h_me = pick(h5, "meta")
    # Older logs have no dataset-create run: the bare creates compare with the group creates.
    h_m1 = pick(h5, "meta", "single") or h_me

    v1p, v1pm = num(p_v1, "mbps"), num(p_v1m, "mbps")
    v1h, v1hf = num(h_v1, "mbps"), num(h_v1, "mbps_fsync")
    hwp, hwpm, hwh, hwhf = num(p_hw, "mbps"), num(p_hwm, "mbps"), num(h_hw, "mbps"), num(h_hw, "mbps_fsync")
    steps = (p_vm or h_vm or {}).get("steps", "?")
    cmp_s = (p_vm or h_vm or {}).get("compute_s", "?")
    vmp, vmh = num(p_vm, "seconds"), num(h_vm, "seconds")
    sync50 = num(h_sync, "p50_us")
    ranks = (p_me or h_me or {}).get("ranks", "R")

    def writes(kernel, local, mem, h, h_fsync):
        """A write kernel's rows: `local` against HDF5 + fsync, the device and the buffered
        figure; `memory` against HDF5 without fsync and against `local`."""
        w = f"{kernel} write MB/s"
        return [
            Fig(f"{w}, local (vs hdf5 + fsync)", local, h_fsync, ratio(local, h_fsync), "x", ">= 1.0x", at_least(1.0)),
            Fig(
                f"{w}, local (vs the device: direct-I/O write)",
                local,
                dev_w,
                pct(ratio(local, dev_w)),
                "%",
                ">= 85%",
                at_least(85),
            ),
            Fig(f"{w}, local (vs fio buffered write)", local, fio_w, pct(ratio(local, fio_w)), "%", "info"),
            Fig(f"{w}, memory (vs hdf5, no fsync)", mem, h, ratio(mem, h), "x", ">= 1.0x", at_least(1.0)),
            Fig(f"{w}, memory (vs local)", mem, local, ratio(mem, local), "x", ">= 1.5x", at_least(1.5)),
        ]

    return [
        *writes("VPIC", v1p, v1pm, v1h, v1hf),
        Fig("VPIC write MB/s, local (vs hdf5, no fsync)", v1p, v1h, ratio(v1p, v1h), "x", "info"),
        *writes("HACC", hwp, hwpm, hwh, hwhf),
        Fig(
            "BDCATS read MB/s, cold (vs hdf5)",
            num(p_bc, "mbps"),
            num(h_bc, "mbps"),
            ratio(num(p_bc, "mbps"), num(h_bc, "mbps")),
            "x",
            ">= 1.5x",
            at_least(1.5),
        ),
        Fig(
            "BDCATS read MB/s, warm: page cache (vs hdf5)",
            num(p_bw, "mbps"),
            num(h_bw, "mbps"),
            ratio(num(p_bw, "mbps"), num(h_bw, "mbps")),
            "x",
            ">= 1.0x",
            at_least(1.0),
        ),
        Fig(
            "BDCATS read MB/s, cold (vs the device: direct-I/O read)",
            num(p_bc, "mbps"),
            dev_r,
            pct(ratio(num(p_bc, "mbps"), dev_r)),
            "%",
            ">= 90%",
            at_least(90),
        ),
        Fig(
            "BDCATS read MB/s, cold (vs fio buffered read)",
            num(p_bc, "mbps"),
            fio_r,
            pct(ratio(num(p_bc, "mbps"), fio_r)),
            "%",
            "info",
        ),
        Fig(
            "HACC read MB/s (vs hdf5)",
            num(p_hr, "mbps"),
            num(h_hr, "mbps"),
            ratio(num(p_hr, "mbps"), num(h_hr, "mbps")),
            "x",
            "info",
        ),
        Fig(
            "HACC read MB/s (vs the device: direct-I/O read)",
            num(p_hr, "mbps"),
            dev_r,
            pct(ratio(num(p_hr, "mbps"), dev_r)),
            "%",
            "info",
        ),
        Fig(
            f"by design, async vs sync over {steps} steps: VPIC app-visible I/O s (hdf5 s / pdc s; compute {cmp_s} s)",
            vmp,
            vmh,
            ratio(vmh, vmp),
            "x",
            ">= 5x (no slower)",
            at_least(5),
        ),
        Fig(
            "4 KiB write+wait p50 us, memory (hdf5: write, no flush)",
            num(p_swm, "p50_us"),
            num(h_sw, "p50_us"),
            ratio(num(p_swm, "p50_us"), num(h_sw, "p50_us")),
            "x",
            "<= 50 us",
            at_most(50),
            on="pdc",
        ),
        Fig(
            "4 KiB write+wait p50 us, local (baseline: pwrite+fdatasync p50; cmp: pdc - it)",
            num(p_sw, "p50_us"),
            sync50,
            diff(num(p_sw, "p50_us"), sync50),
            " us",
            "<= fdatasync + 50 us",
            at_most(50),
        ),
        Fig(
            "4 KiB write+wait mean us, local (hdf5: write+H5Fflush)",
            num(p_sw, "mean_us"),
            num(h_swf, "mean_us"),
            ratio(num(p_sw, "mean_us"), num(h_swf, "mean_us")),
            "x",
            "info",
        ),
        Fig(
            "4 KiB write+wait p99 us, local (hdf5: write+H5Fflush)",
            num(p_sw, "p99_us"),
            num(h_swf, "p99_us"),
            ratio(num(p_sw, "p99_us"), num(h_swf, "p99_us")),
            "x",
            "info",
        ),
        Fig(
            "4 KiB read p50 us (hdf5: H5Dread, page cache)",
            num(p_sr, "p50_us"),
            num(h_sr, "p50_us"),
            ratio(num(p_sr, "p50_us"), num(h_sr, "p50_us")),
            "x",
            "<= 30 us",
            at_most(30),
            on="pdc",
        ),
        Fig(
            "by design, one wait vs one per op: consistency strong s / session s (hdf5: per-op flush / one flush)",
            num(p_co, "ratio"),
            num(h_co, "ratio"),
            None,
            "x",
            ">= 2x (no slower)",
            at_least(2),
            on="pdc",
        ),
        Fig(
            "PDCobj_create/s, 1 rank, bare create+close (hdf5: H5Dcreate/s, 1 rank)",
            num(p_m1, "creates_per_s"),
            num(h_m1, "creates_per_s"),
            ratio(num(p_m1, "creates_per_s"), num(h_m1, "creates_per_s")),
            "x",
            ">= 20k",
            at_least(20000),
            on="pdc",
        ),
        Fig(
            "PDCXobj_create_many/s, 1 rank, batches of 1024 (hdf5: H5Dcreate/s, 1 rank)",
            num(p_mm, "creates_per_s"),
            num(h_m1, "creates_per_s"),
            ratio(num(p_mm, "creates_per_s"), num(h_m1, "creates_per_s")),
            "x",
            ">= 50k",
            at_least(50000),
            on="pdc",
        ),
        Fig(
            f"PDCobj_create/s, {ranks} ranks, create+tag+close, total (hdf5: group+attr creates/s)",
            num(p_me, "creates_per_s"),
            num(h_me, "creates_per_s"),
            ratio(num(p_me, "creates_per_s"), num(h_me, "creates_per_s")),
            "x",
            "info",
        ),
        Fig(
            f"  per server ({servers} servers)",
            num(p_me, "creates_per_s_per_server"),
            None,
            None,
            "",
            "info",
        ),
        Fig(
            "tag query step=42 s (hdf5: scan of all groups)",
            num(p_me, "query_s"),
            num(h_me, "query_s"),
            None,
            "",
            "info",
        ),
    ]


def table(rounds):
    """rounds: list of figure lists, one per round -> markdown rows (median (min–max) per cell)."""
    rows = []
    for i, f0 in enumerate(rounds[0]):
        figs = [r[i] for r in rounds]
        unit = f0.unit
        cmp_cell = median_cell((f.cmp for f in figs), lambda v, u=unit: fmt(v, u))
        status = ""
        if f0.check is not None:
            v = median(getattr(f, f0.on) for f in figs)
            status = "n/a" if v is None else ("PASS" if f0.check(v) else "miss")
        rows.append(
            (
                f0.name,
                median_cell((f.pdc for f in figs), fmt),
                median_cell((f.base for f in figs), fmt),
                "" if all(f.cmp is None for f in figs) and f0.target == "info" else cmp_cell,
                f0.target,
                status,
            )
        )
    return rows


def lower_is_better(f0):
    """Latencies and I/O seconds: smaller is better; rates and ratios: larger."""
    if f0.check is not None and f0.on == "pdc":
        return f0.check(0.0)  # at_most(t) holds at 0, at_least(t) does not
    return " us" in f0.name or "I/O s" in f0.name or "query" in f0.name


def compare_table(after_rounds, before_rounds):
    """after/before of the pdc value of every figure, the ratio taken within each round."""
    rows = []
    for i, f0 in enumerate(after_rounds[0]):
        pairs = [(a[i].pdc, b[i].pdc) for a, b in zip(after_rounds, before_rounds, strict=False)]
        lower = lower_is_better(f0)
        rows.append(
            (
                f0.name,
                median_cell((b for _, b in pairs), fmt),
                median_cell((a for a, _ in pairs), fmt),
                median_cell((ratio(a, b) for a, b in pairs), lambda v: fmt(v, "x")),
                "lower" if lower else "higher",
            )
        )
    return rows


def machine():
    def sh(cmd):
        try:
            return subprocess.run(
                cmd, check=False, shell=True, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return "?"

    git = sh("git rev-parse --short HEAD") + ("-dirty" if sh("git status --porcelain") else "")
    mem = sh("awk '/MemTotal/ {printf \"%.1f GiB\", $2/1048576}' /proc/meminfo")
    mpi = sh("mpirun --version 2>&1 | head -1")
    hdf5 = sh("h5pcc -showconfig 2>/dev/null | grep -m1 'HDF5 Version' | cut -d: -f2")
    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2")
    return [
        f"- cpus (nproc): {sh('nproc')} ({cpu.strip()}), memory: {mem}, kernel: {platform.release()}",
        f"- mpi: {mpi}; HDF5: {hdf5.strip()}",
        f"- bench git: {git}",
    ]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pdc", nargs="*", default=[], help="pdc log of each round, in order")
    ap.add_argument("--hdf5", nargs="*", default=[], help="hdf5 log of each round, in order")
    ap.add_argument("--seqbw", nargs="*", default=[], help="bench/seqbw.sh's output of each round")
    ap.add_argument("--ranks", type=int, default=0)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--particles", type=int, default=0)
    ap.add_argument("--cache-mb", default="default")
    ap.add_argument("--load-start", default="?")
    ap.add_argument("--load-end", default="")
    ap.add_argument("--cmd", default="")
    ap.add_argument("--notes")
    ap.add_argument("--pdc-built", default="1")
    ap.add_argument("--pdcx-bin", default="")
    ap.add_argument("--pdc-lib", default="")
    ap.add_argument("--pdc-before", nargs="*", default=[], help="pdc logs of the before build, one per round")
    ap.add_argument("--before-pdcx-bin", default="")
    ap.add_argument("--before-pdc-lib", default="")
    ap.add_argument("--append")
    a = ap.parse_args(argv)

    # bench/seqbw.sh's line of each round (one file: the same figures for every round).
    seqs = [read_seqbw(p) for p in a.seqbw] or [{}]
    seq_of = lambda i: seqs[i] if i < len(seqs) else seqs[-1]
    device = lambda key: median_cell((seq_figure(s, key) for s in seqs), fmt)

    n = max(len(a.pdc), len(a.hdf5), 1)
    rounds, pdc_failed, h5_failed = [], set(), set()
    for i in range(n):
        pdc, pf = parse(a.pdc[i] if i < len(a.pdc) else None)
        h5, hf = parse(a.hdf5[i] if i < len(a.hdf5) else None)
        pdc_failed |= pf
        h5_failed |= hf
        rounds.append(figures(pdc, h5, seq_of(i), a.servers))
    rows = table(rounds)
    before_rounds, before_failed = [], set()
    for i in range(len(a.pdc_before)):
        pdc, pf = parse(a.pdc_before[i])
        h5, _ = parse(a.hdf5[i] if i < len(a.hdf5) else None)
        before_failed |= pf
        before_rounds.append(figures(pdc, h5, seq_of(i), a.servers))

    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = a.load_start + (f"; after: {a.load_end}" if a.load_end else "")
    out = [f"## {now}", "", *machine()]
    if a.pdcx_bin or a.pdc_lib:
        out.append(f"- pdcx binary: {a.pdcx_bin or '?'}; libpdcx: {a.pdc_lib or '?'}")
    if before_rounds:
        out.append(f"- before build: pdcx {a.before_pdcx_bin or '?'}; libpdcx: {a.before_pdc_lib or '?'}")
    out += [f"- load average (1/5/15 min) before the run: {load}", "", "```", a.cmd, "```", ""]
    reps = f"; {n} rounds (pdc, hdf5 interleaved), median (min–max)" if n > 1 else ""
    out.append(
        f"{a.ranks} ranks, {a.servers} pdcx servers (data cache {a.cache_mb} MiB), {a.particles} particles/rank"
        f"{reps}; the device (bench/seqbw.sh, {len(seqs)} run(s), {seqs[0].get('tool', 'n/a')}): direct I/O write "
        f"{device('dev_write_MBps')} MB/s, read {device('dev_read_MBps')} MB/s; buffered write "
        f"{device('seq_write_MBps')} MB/s, read {device('seq_read_MBps')} MB/s"
    )
    if a.pdc_built != "1":
        out.append("\n**PDC kernels not built (libpdcx not found): pdc columns are n/a.**")
    for be, fl in (("pdc", pdc_failed), ("pdc (before build)", before_failed), ("hdf5", h5_failed)):
        if fl:
            out.append(f"\n**FAILED {be} kernels: {', '.join(sorted(fl))}**")
    if a.notes and Path(a.notes).exists():
        out += ["", *Path(a.notes).read_text().strip().splitlines()]
    out += ["", "| figure | pdc | baseline | pdc vs baseline | target | |", "|---|---:|---:|---:|---|---|"]
    out += ["| " + " | ".join(cells) + " |" for cells in rows]
    if before_rounds:
        out += ["", "The before build against the same HDF5 runs:", ""]
        out += ["| figure | pdc (before) | baseline | pdc vs baseline | target | |", "|---|---:|---:|---:|---|---|"]
        out += ["| " + " | ".join(cells) + " |" for cells in table(before_rounds)]
        out += [
            "",
            "After against before (pdc figures; the two builds ran in the same rounds, in alternating order):",
            "",
            "| figure | before | after | after / before | better |",
            "|---|---:|---:|---:|---|",
        ]
        out += ["| " + " | ".join(cells) + " |" for cells in compare_table(rounds, before_rounds)]
    out += [
        "",
        (
            "MB = 10^6 bytes. Every comparison is computed within a round (its baseline ran next to it) and "
            "then summarised; PASS/miss applies the target to the median. The HDF5 write ends at H5Fclose "
            "(no fsync); '+ fsync' adds one. A pdcx wait at `local` durability returns when the servers "
            "have fdatasync'ed the data, at `memory` when they hold it. Cold reads follow a drop of the page "
            "cache (pdcx servers without data cache); warm reads repeat the read at once. App-visible I/O "
            "= elapsed - compute, max over ranks."
        ),
        "",
    ]
    text = "\n".join(out)
    print(text)
    if a.append:
        Path(a.append).parent.mkdir(parents=True, exist_ok=True)
        with open(a.append, "a") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
