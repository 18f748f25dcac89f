"""Turn the RESULT lines of bench/c/run.sh into the ratio table against the issue's targets.

Each kernel prints `RESULT kernel=K backend=B ranks=R bytes=N seconds=S mbps=M key=value ...`.
Ratios use the baseline measured in the same run (pdc/hdf5, pdc/fio).
"""

import argparse
import datetime
import platform
import subprocess
import sys
from pathlib import Path


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


def pick(results, kernel, **match):
    for r in results:
        if r.get("kernel") == kernel and all(r.get(k) == v for k, v in match.items()):
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


def status(value, target, higher_is_better=True):
    if value is None:
        return "n/a"
    ok = value >= target if higher_is_better else value <= target
    return "PASS" if ok else "miss"


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
    pdcx = sh("command -v pdcx || echo not-installed")
    lib = sh("pkg-config --modversion pdcx 2>/dev/null || echo not-found")
    return [
        f"- cpus (nproc): {sh('nproc')}, memory: {mem}, kernel: {platform.release()}",
        f"- mpi: {mpi}; HDF5: {hdf5.strip()}",
        f"- git: {git}; pdcx: {pdcx}; libpdcx (pkg-config pdcx): {lib}",
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pdc")
    ap.add_argument("--hdf5")
    ap.add_argument("--seqbw")
    ap.add_argument("--ranks", type=int, default=0)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--particles", type=int, default=0)
    ap.add_argument("--cache-mb", default="default")
    ap.add_argument("--load-start", default="?")
    ap.add_argument("--cmd", default="")
    ap.add_argument("--notes")
    ap.add_argument("--pdc-built", default="1")
    ap.add_argument("--append")
    a = ap.parse_args()

    pdc, pdc_failed = parse(a.pdc)
    h5, h5_failed = parse(a.hdf5)
    seq = {}
    if a.seqbw and Path(a.seqbw).exists():
        for tok in Path(a.seqbw).read_text().split():
            if "=" in tok:
                k, v = tok.split("=", 1)
                seq[k] = v
    fio_w = float(seq["seq_write_MBps"]) if "seq_write_MBps" in seq else None
    fio_r = float(seq["seq_read_MBps"]) if "seq_read_MBps" in seq else None

    p_v1, h_v1 = pick(pdc, "vpic", steps="1"), pick(h5, "vpic", steps="1")
    p_vm = next((r for r in pdc if r.get("kernel") == "vpic" and r.get("steps") != "1"), None)
    h_vm = next((r for r in h5 if r.get("kernel") == "vpic" and r.get("steps") != "1"), None)
    p_bd, h_bd = pick(pdc, "bdcats"), pick(h5, "bdcats")
    p_hw, h_hw = pick(pdc, "hacc-write"), pick(h5, "hacc-write")
    p_hr, h_hr = pick(pdc, "hacc-read"), pick(h5, "hacc-read")
    p_sm = pick(pdc, "small")
    h_sm, h_smf = pick(h5, "small", mode="write"), pick(h5, "small", mode="write+flush")
    p_co, h_co = pick(pdc, "consist"), pick(h5, "consist")
    p_me, h_me = pick(pdc, "meta"), pick(h5, "meta")

    rows = []  # figure, pdc, baseline, ratio, target, status

    def row(fig, pv, bv, rv, target, st):
        rows.append((fig, pv, bv, rv, target, st))

    v1p, v1h = num(p_v1, "mbps"), num(h_v1, "mbps")
    r = ratio(v1p, v1h)
    row("VPIC 1-step write MB/s (vs hdf5)", fmt(v1p), fmt(v1h), fmt(r, "x"), ">= 1.5x", status(r, 1.5))
    r = ratio(v1p, num(h_v1, "mbps_fsync"))
    row("VPIC 1-step write MB/s (vs hdf5 + fsync)", fmt(v1p), fmt(num(h_v1, "mbps_fsync")), fmt(r, "x"), "info", "")
    r = ratio(v1p, fio_w)
    row(
        "VPIC 1-step write MB/s (vs fio seq write)",
        fmt(v1p),
        fmt(fio_w),
        fmt(r * 100 if r else None, "%"),
        ">= 85%",
        status(r, 0.85),
    )
    steps = (p_vm or h_vm or {}).get("steps", "?")
    cmp_ = (p_vm or h_vm or {}).get("compute_s", "?")
    vmp, vmh = num(p_vm, "seconds"), num(h_vm, "seconds")
    r = ratio(vmh, vmp)
    row(
        f"VPIC {steps}-step app-visible I/O s (hdf5 s / pdc s; compute {cmp_} s total)",
        fmt(vmp),
        fmt(vmh),
        fmt(r, "x"),
        ">= 5x",
        status(r, 5),
    )
    bdp, bdh = num(p_bd, "mbps"), num(h_bd, "mbps")
    r = ratio(bdp, bdh)
    row("BDCATS read MB/s (vs hdf5)", fmt(bdp), fmt(bdh), fmt(r, "x"), ">= 1.5x", status(r, 1.5))
    r = ratio(bdp, fio_r)
    row("BDCATS read MB/s (vs fio seq read)", fmt(bdp), fmt(fio_r), fmt(r * 100 if r else None, "%"), "info", "")
    for name, pr, hr in (("HACC write MB/s", p_hw, h_hw), ("HACC read MB/s", p_hr, h_hr)):
        r = ratio(num(pr, "mbps"), num(hr, "mbps"))
        row(f"{name} (vs hdf5)", fmt(num(pr, "mbps")), fmt(num(hr, "mbps")), fmt(r, "x"), "info", "")
    for stat in ("mean_us", "p50_us", "p99_us"):
        pv = num(p_sm, stat)
        target, st = ("<= 50 us", status(pv, 50, higher_is_better=False)) if stat == "mean_us" else ("info", "")
        row(
            f"4 KiB transfer {stat[:-3]} us (hdf5: write+flush / write)",
            fmt(pv),
            f"{fmt(num(h_smf, stat))} / {fmt(num(h_sm, stat))}",
            fmt(ratio(num(h_smf, stat), pv), "x"),
            target,
            st,
        )
    cr = num(p_co, "ratio")
    row(
        "consistency: strong s / session s (pdc; hdf5: per-op flush / one flush)",
        fmt(cr, "x"),
        fmt(num(h_co, "ratio"), "x"),
        "",
        ">= 2x",
        status(cr, 2),
    )
    mp, mh = num(p_me, "creates_per_s_per_server"), num(h_me, "creates_per_s")
    row(
        f"metadata creates/s per server (hdf5: creates/s, one file; {a.servers} servers)",
        fmt(mp),
        fmt(mh),
        fmt(ratio(num(p_me, "creates_per_s"), mh), "x"),
        ">= 50k",
        status(mp, 50000),
    )
    qp = p_me.get("query", "?") if p_me else "n/a"
    row(
        "tag query step=42 s (pdc: " + qp + "; hdf5: scan of all groups)",
        fmt(num(p_me, "query_s")),
        fmt(num(h_me, "query_s")),
        "",
        "info",
        "",
    )

    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = (
        [f"## {now}", ""] + machine() + [f"- load average before the run: {a.load_start}", "", "```", a.cmd, "```", ""]
    )
    out.append(
        f"{a.ranks} ranks, {a.servers} pdcx servers (data cache {a.cache_mb} MiB), {a.particles} particles/rank; "
        f"fio: {seq.get('tool', 'n/a')} write {fmt(fio_w)} MB/s, read {fmt(fio_r)} MB/s"
    )
    if a.pdc_built != "1":
        out.append("\n**PDC kernels not built (libpdcx not found): pdc columns are n/a.**")
    for be, fl in (("pdc", pdc_failed), ("hdf5", h5_failed)):
        if fl:
            out.append(f"\n**FAILED {be} kernels: {', '.join(sorted(fl))}**")
    if a.notes and Path(a.notes).exists():
        out += ["", *Path(a.notes).read_text().strip().splitlines()]
    out += ["", "| figure | pdc | baseline | ratio | target | |", "|---|---:|---:|---:|---|---|"]
    out += ["| " + " | ".join(cells) + " |" for cells in rows]
    out += [
        "",
        (
            "MB = 10^6 bytes. Ratios use the baseline of the same run. The HDF5 write ends at H5Fclose (no "
            "fsync; the '+ fsync' row adds one); a pdcx wait returns when the servers hold the data durably "
            "(local durability). App-visible I/O = elapsed - compute, max over ranks."
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
