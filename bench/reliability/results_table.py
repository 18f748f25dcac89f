"""The harness's summary table: runs, cycles by kind, crash points hit, bytes acknowledged
and lost per durability, torn regions, recovery times, and the failures by kind."""

from __future__ import annotations

import statistics
from collections import Counter

import layout as L

KINDS = ("server", "all", "client")


def failure_kind(f: str) -> str:
    """A short name for a failure line, for the table's summary."""
    for needle, kind in (
        ("is not part of the log", "reads racing segment retirement"),
        ("os error 11", "client calls timed out after 10 s"),
        ("no blob", "reads racing demotion"),
        ("workload exited", "workload crashes (see its session log)"),
        ("workload did not stop", "workloads that hung"),
        ("was never reached", "crash points never reached"),
        ("not killed at the point", "servers that died elsewhere than their crash point"),
        ("log never reached the point", "servers that died elsewhere than their crash point"),
        ("malformed journal", "malformed journals"),
        ("recovery failed", "recoveries that failed"),
        ("torn", "torn writes"),
        ("never written", "data never written"),
        ("second recovery", "second recoveries that changed data"),
        ("lost", "lost writes"),
        ("tag ", "tag problems"),
        ("object ", "create problems"),
    ):
        if needle in f:
            return kind
    return "other"


def table(results: list[dict], power: str, mpiio: str = "n/a") -> str:
    runs = sorted({r["run"] for r in results})
    kinds = {k: sum(1 for r in results if r["kind"] == k) for k in (*KINDS, "crash")}
    hit = sum(1 for r in results if r["kind"] == "crash" and r.get("hit"))
    missed = sorted({r["point"] for r in results if r["kind"] == "crash" and not r.get("hit")})
    acked: dict[str, int] = {}
    lost: dict[str, int] = {}
    at_risk = 0
    torn = 0
    for run in runs:
        rs = [r for r in results if r["run"] == run]
        for d, n in rs[-1].get("acked", {}).items():  # cumulative within a run
            acked[d] = acked.get(d, 0) + n
        at_risk += max((r.get("mem_at_risk_bytes", 0) for r in rs), default=0)
        per: dict[tuple, int] = {}
        for r in rs:
            for d, w, n in r.get("lost", []):
                per[(d, w)] = max(per.get((d, w), 0), n)
            torn += len(r.get("torn", []))
        for (d, _), n in per.items():
            lost[d] = lost.get(d, 0) + n * L.ITEM
    rec = [t for r in results for t in r.get("recover_s", [])]
    failures = [f for r in results for f in r.get("failures", [])]
    durs = [d for d in ("memory", "local", "remote") if d in acked or d in lost]

    def mib(n: int) -> str:
        return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} B"

    rows = [
        ("runs (fresh deployments)", str(len(runs))),
        ("cycles (kills and crash points)", str(len(results))),
        ("  kill -9 one server", str(kinds["server"])),
        ("  kill -9 all servers", str(kinds["all"])),
        ("  kill -9 one client rank", str(kinds["client"])),
        (
            "crash points hit / tried",
            f"{hit} / {kinds['crash']}" + (f" (not hit: {', '.join(missed)})" if missed else ""),
        ),
        ("power cuts (Rust crash tests)", power),
        ("MPI-IO programs under pdcx run (tests/test_mpiio_crash.py)", mpiio),
    ]
    for d in durs:
        rows.append((f"bytes acknowledged at {d}", mib(acked.get(d, 0))))
    for d in durs:
        note = f" of {mib(at_risk)} that may be lost (see README)" if d == "memory" else ""
        rows.append((f"bytes lost at {d}", mib(lost.get(d, 0)) + note))
    rows.append(("torn regions found", str(torn)))
    rows.append(("second recoveries that changed data", str(sum(1 for r in results if r.get("second_recovery_diff")))))
    if rec:
        rows.append(("time to recover (median / max)", f"{statistics.median(rec):.2f} s / {max(rec):.2f} s"))
    kinds_of = Counter(failure_kind(f) for f in failures)
    rows.append(
        (
            "failures",
            f"{len(failures)}" + (f" ({', '.join(f'{n} {k}' for k, n in kinds_of.most_common())})" if failures else ""),
        )
    )
    w = max(len(k) for k, _ in rows)
    out = ["| what | value |", "|---|---|"] + [f"| {k.ljust(w)} | {v} |" for k, v in rows]
    if failures:
        out.append("")
        out += [f"FAILURE: {f}" for f in failures[:50]]
    return "\n".join(out)
