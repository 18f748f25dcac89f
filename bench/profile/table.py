"""Table of a bench/profile/run.sh work dir: the cost of each phase per MB moved (bulk
kernels) or per operation (4 KiB kernels).

Inputs, per pass (clean/, strace/) and phase (vpic-write, bdcats-read, small-write,
small-read): kernel.log (RESULT line), server-I.{before,after}.{stat,io,mem,metrics},
client-R.{cpu,io}, and in the strace pass strace-{server-I,client-R}.txt (`strace -c`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import sys
from pathlib import Path

PHASES = ("vpic-write", "bdcats-read", "small-write", "small-read")
TOTAL = "(all)"  # perf's raw_syscalls:sys_enter: every syscall, named or not
SYNC_CALLS = ("fsync", "fdatasync", "sync_file_range", "syncfs", "msync")
# Where the payload is copied by a CPU, from the code and docs/ARCHITECTURE.md ("Shared
# memory", "One read") of the build before the fast-path work (same-node client, shared memory).
# Override with --copies PHASE=TEXT for another build; the measured counters next to it
# (server bytes through read/write syscalls and shared memory, per payload byte) confirm it.
COPIES_BEFORE = {
    "vpic-write": "3: app -> arena (client), arena -> receive buffer (server), pwrite -> page cache",
    "bdcats-read": "3: page cache -> buffer (pread), buffer -> arena (server), arena -> app (client)",
    "small-write": "3: as VPIC write",
    "small-read": "3: as BDCATS read",
}


def kv_file(path: Path) -> dict[str, float]:
    """`key: value` (/proc/PID/io, status) or `key=value ...` files -> floats."""
    out: dict[str, float] = {}
    if not path.exists():
        return out
    for k, v in re.findall(r"(\w+)[:=]\s*(\d+(?:\.\d+)?)", path.read_text()):
        out[k] = float(v)
    return out


def proc_cpu_s(path: Path) -> float | None:
    """utime + stime of a /proc/PID/stat snapshot, in seconds."""
    if not path.exists():
        return None
    rest = path.read_text().rsplit(") ", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def metrics(path: Path) -> dict[str, float]:
    """Prometheus text -> {'name{labels}': value} (comments skipped)."""
    out: dict[str, float] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, val = line.rpartition(" ")
        try:
            out[key] = float(val)
        except ValueError:
            continue
    return out


def strace_calls(path: Path) -> dict[str, int]:
    """`strace -c` summary -> {syscall: calls}."""
    out: dict[str, int] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        f = line.split()
        # % time, seconds, usecs/call, calls, [errors], syscall
        if len(f) >= 5 and re.match(r"^\d+\.\d+$", f[0]) and f[-1] != "total":
            try:
                out[f[-1]] = out.get(f[-1], 0) + int(f[3])
            except ValueError:
                continue
    return out


def perf_calls(path: Path) -> dict[str, int]:
    """`perf stat -x,` of syscall tracepoints -> {syscall: calls, TOTAL: all syscalls}."""
    out: dict[str, int] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        f = line.split(",")
        if line.startswith("#") or len(f) < 3 or not f[0].strip().isdigit():
            continue
        ev = f[2].strip()
        name = TOTAL if ev == "raw_syscalls:sys_enter" else ev.removeprefix("syscalls:sys_enter_")
        out[name] = out.get(name, 0) + int(f[0])
    return out


def result(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("RESULT "):
            return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    return {}


def add(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


class Phase:
    """Everything measured of one phase in one pass."""

    def __init__(self, d: Path):
        self.d = d
        self.res = result(d / "kernel.log")
        self.servers = sorted(
            {int(m.group(1)) for p in d.glob("server-*.before.stat") if (m := re.search(r"server-(\d+)", p.name))}
        )
        self.wall = kv_file(d / "wall.txt").get("wall_s")

    def server_delta(self, kind: str, key: str | None = None) -> float | None:
        tot = 0.0
        for i in self.servers:
            b, a = self.d / f"server-{i}.before.{kind}", self.d / f"server-{i}.after.{kind}"
            if kind == "stat":
                cb, ca = proc_cpu_s(b), proc_cpu_s(a)
                if cb is None or ca is None:
                    return None
                tot += ca - cb
            else:
                vb, va = kv_file(b), kv_file(a)
                if key not in va:
                    return None
                tot += va[key] - vb.get(key, 0)
        return tot

    def metric_delta(self) -> dict[str, float]:
        tot: dict[str, float] = {}
        for i in self.servers:
            b = metrics(self.d / f"server-{i}.before.metrics")
            a = metrics(self.d / f"server-{i}.after.metrics")
            for k, v in a.items():
                tot[k] = tot.get(k, 0) + v - b.get(k, 0)
        return tot

    def peak_rss_mib(self) -> float | None:
        vals = [kv_file(self.d / f"server-{i}.after.mem").get("VmHWM") for i in self.servers]
        vals = [v for v in vals if v is not None]
        return max(vals) / 1024 if vals else None

    def clients(self, kind: str) -> dict[str, float]:
        tot: dict[str, float] = {}
        for p in sorted(self.d.glob(f"client-*.{kind}")):
            tot = add(tot, kv_file(p))
        return tot

    def syscalls(self, who: str) -> dict[str, int]:
        """Calls by name (and TOTAL) of the servers or the ranks: perf stat or strace -c files."""
        tot: dict[str, int] = {}
        for p in sorted(self.d.glob(f"perf-{who}-*.txt")):
            tot = add(tot, perf_calls(p))
        for p in sorted(self.d.glob(f"strace-{who}-*.txt")):
            tot = add(tot, strace_calls(p))
        if tot and TOTAL not in tot:
            tot[TOTAL] = sum(tot.values())
        return tot


def fnum(v: float | None, nd: int = 2) -> str:
    if v is None:
        return "n/a"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.{nd}f}"


def per(v: float | None, d: float | None) -> float | None:
    return v / d if v is not None and d else None


def top(calls: dict[str, int], n: int = 6) -> str:
    items = sorted(((k, v) for k, v in calls.items() if k != TOTAL and v > 0), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} {v}" for k, v in items)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("work")
    ap.add_argument("--label", default="?")
    ap.add_argument("--pdcx", default="?")
    ap.add_argument("--lib", default="?")
    ap.add_argument("--servers", default="?")
    ap.add_argument("--ranks", default="?")
    ap.add_argument("--cache-mb", default="?")
    ap.add_argument("--durability", default="local")
    ap.add_argument("--syscalls", default="?", help="how syscalls were counted (perf, strace, none)")
    ap.add_argument("--load", default="?")
    ap.add_argument("--cmd", default="")
    ap.add_argument("--copies", action="append", default=[], help="PHASE=TEXT: the payload copies of this build")
    ap.add_argument("--append")
    ap.add_argument("--json", help="also write the per-phase figures here (bench/profile/scale.py)")
    a = ap.parse_args(argv)
    work = Path(a.work)
    copies = dict(COPIES_BEFORE)
    for c in a.copies:
        k, _, v = c.partition("=")
        copies[k] = v

    rows, details, figs = [], [], {}
    for name in PHASES:
        clean, traced = Phase(work / "clean" / name), Phase(work / "strace" / name)
        res = clean.res
        if not res:
            rows.append([name] + ["n/a"] * 15)
            continue
        nbytes = float(res.get("bytes", 0))
        mb = nbytes / 1e6
        small = name.startswith("small")
        # Per operation for the 4 KiB kernels (the unit their targets are stated in),
        # per MB (10^6 payload bytes) for the bulk kernels.
        unit_n = float(res.get("ops", 0)) * float(res.get("ranks", 1)) if small else mb
        unit = "op" if small else "MB"
        md = clean.metric_delta()
        reqs = sum(v for k, v in md.items() if k.startswith("pdcx_requests_total"))
        by_kind = {
            re.sub(r'.*kind="([^"]+)".*', r"\1", k): v
            for k, v in md.items()
            if k.startswith("pdcx_requests_total") and v > 0
        }
        log_syncs = md.get("pdcx_log_syncs_total")
        wal_syncs = md.get("pdcx_metadata_wal_fsyncs_total")
        shm = md.get("pdcx_shm_bytes_total")
        scpu = clean.server_delta("stat")
        ccpu_t = clean.clients("cpu")
        ccpu = (ccpu_t.get("cutime", 0) + ccpu_t.get("cstime", 0)) / os.sysconf("SC_CLK_TCK") if ccpu_t else None
        s_wchar, s_rchar = clean.server_delta("io", "wchar"), clean.server_delta("io", "rchar")
        s_wdev = clean.server_delta("io", "write_bytes")
        cio = clean.clients("io")
        c_rchar, c_wchar = cio.get("rchar"), cio.get("wchar")
        # perf counts in the measured pass; strace in a pass of its own.
        ss = clean.syscalls("server") or traced.syscalls("server")
        cs = clean.syscalls("client") or traced.syscalls("client")
        s_sys = ss.get(TOTAL)
        # MPI ranks idle in a barrier spin on sched_yield (mpi_yield_when_idle): not the data path.
        c_sys = cs[TOTAL] - cs.get("sched_yield", 0) if TOTAL in cs else None
        syncs = sum(ss.get(k, 0) + cs.get(k, 0) for k in SYNC_CALLS) if ss or cs else None
        gb = nbytes / 1e9
        figs[name] = {
            "bytes": nbytes,
            "seconds": float(res.get("seconds", 0)),
            "mbps": float(res.get("mbps", 0)),
            "p50_us": float(res["p50_us"]) if "p50_us" in res else None,
            "ops": unit_n if small else None,
            "ranks": int(res.get("ranks", 0)),
            "requests": reqs if md else None,
            "server_cpu_s": scpu,
            "client_cpu_s": ccpu,
            "server_peak_rss_mib": clean.peak_rss_mib(),
            "syscalls_server": s_sys,
            "syscalls_client": c_sys,
            "syncs": syncs,
        }
        rows.append(
            [
                name,
                f"{mb:.1f} MB" + (f", {int(unit_n)} ops" if small else ""),
                unit,
                fnum(per(reqs, unit_n)) if md else "n/a",
                fnum(per(c_sys, unit_n)),
                fnum(per(s_sys, unit_n)),
                fnum(per(syncs, unit_n), 3),
                f"{fnum(per(log_syncs, unit_n), 3)} / {fnum(per(wal_syncs, unit_n), 3)}" if md else "n/a",
                fnum(per(scpu, gb)) if not small else fnum(per(scpu * 1e6 if scpu is not None else None, unit_n), 0),
                fnum(per(ccpu, gb)) if not small else fnum(per(ccpu * 1e6 if ccpu is not None else None, unit_n), 0),
                f"{fnum(per(s_wchar, nbytes))} / {fnum(per(s_rchar, nbytes))}",
                f"{fnum(per(c_wchar, nbytes))} / {fnum(per(c_rchar, nbytes))}",
                fnum(per(s_wdev, nbytes)),
                fnum(per(shm, nbytes)) if md else "n/a",
                fnum(clean.peak_rss_mib(), 0),
                copies.get(name, "?"),
            ]
        )
        details.append(
            f"- **{name}** ({res.get('mbps', '?')} MB/s"
            + (f", p50 {res.get('p50_us', '?')} us" if small else "")
            + f" in the clean pass): requests by kind: {', '.join(f'{k} {int(v)}' for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])) or 'n/a'}"
            + f"; server syscalls: {top(ss) or 'n/a'}; client syscalls: {top(cs) or 'n/a'}"
        )

    head = [
        "phase",
        "moved",
        "per",
        "requests",
        "client syscalls",
        "server syscalls",
        "fsync+fdatasync",
        "log syncs / WAL fsyncs (metrics)",
        "server CPU s/GB (us/op)",
        "client CPU s/GB (us/op)",
        "server wchar / rchar per payload byte",
        "client wchar / rchar per payload byte",
        "server bytes to device per payload byte",
        "shm bytes per payload byte",
        "server peak RSS MiB",
        "payload copies (code path)",
    ]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        f"## Profile: {a.label} ({now})",
        "",
        f"- pdcx: {a.pdcx}; libpdcx: {a.lib}",
        (
            f"- {a.ranks} ranks (4 KiB kernels: 1), {a.servers} servers, data cache {a.cache_mb} MiB, "
            f"durability {a.durability}; syscalls counted with {a.syscalls}"
        ),
        f"- machine: {os.cpu_count()} cpus, kernel {platform.release()}; load average (1/5/15): {a.load}",
        "",
        "```",
        a.cmd,
        "```",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    out += [
        "",
        (
            "Counts per MB (10^6 payload bytes) for the bulk kernels, per operation for the 4 KiB ones. "
            "requests: the servers' `pdcx_requests_total` (client and peer requests), the round trips. "
            "Syscalls and fsync+fdatasync (servers and clients): `perf stat` syscall tracepoints during "
            "the run (or `strace -c -f` in a pass of its own); client syscalls include MPI's but not "
            "its idle sched_yield. CPU: utime+stime of the servers, of the ranks (with MPI start-up). wchar/rchar: bytes through the servers' read/write "
            "syscalls (/proc/PID/io), ~1 per copy through the kernel; the ranks' also count what MPI and the "
            "loader read at start-up (a few MB: noise for the 4 KiB kernels); shm: `pdcx_shm_bytes_total`."
        ),
        "",
        *details,
        "",
    ]
    text = "\n".join(out)
    print(text)
    if a.json:
        Path(a.json).write_text(json.dumps({"servers": a.servers, "phases": figs}, indent=1))
    if a.append:
        Path(a.append).parent.mkdir(parents=True, exist_ok=True)
        with open(a.append, "a") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
