"""How bench/montage/run.py judges its targets: only configurations in the same state are
compared, and every verdict line says what that state is.

A configuration's state is where its files live, whether the intermediates are still in
memory when the next component starts, and how durable a component's outputs are when it
ends. Two sides that differ in any of these are not judged (NOT JUDGED, with the difference
printed), whatever their ratio: a warm pipeline that commits to memory is not faster than a
cold one that syncs every step, it does less.
"""

from __future__ import annotations

from collections.abc import Callable

KEYS = ("storage", "cache", "durability")

LOCAL = "the local disk"
WARM = "warm: intermediates stay in memory between components"
COLD = "cold: page cache dropped before each component, no other copy in memory"
UNSYNCED = "visible, not synced"
SYNCED = "os.sync() after each component, timed in it"


def states(shared_mbps: int) -> dict[str, dict[str, str]]:
    """The state of each configuration run.py knows, with `how` saying what each side does."""
    shared_dev = f"ext4 on a loop device, reads and writes throttled to {shared_mbps} MB/s"
    warm_pdcx = "pdcx, one server, commits at memory, servers' data cache on (256 MiB)"
    return {
        "plain": {"storage": LOCAL, "cache": WARM, "durability": UNSYNCED, "how": "plain files in the page cache"},
        "none": {"storage": LOCAL, "cache": WARM, "durability": UNSYNCED, "how": f"{warm_pdcx}, no optimisation"},
        "agg": {"storage": LOCAL, "cache": WARM, "durability": UNSYNCED, "how": f"{warm_pdcx}, aggregation"},
        "prefetch": {"storage": LOCAL, "cache": WARM, "durability": UNSYNCED, "how": f"{warm_pdcx}, prefetching"},
        "both": {
            "storage": LOCAL,
            "cache": WARM,
            "durability": UNSYNCED,
            "how": f"{warm_pdcx}, aggregation and prefetching",
        },
        "shared": {"storage": shared_dev, "cache": COLD, "durability": SYNCED, "how": "plain files"},
        "cold": {
            "storage": shared_dev,
            "cache": COLD,
            "durability": SYNCED,
            "how": "pdcx, one server whose root is on that device, its data cache off (--cache-mb 0), "
            "aggregation and prefetching, commits at memory then synced",
        },
    }


# The targets: (label, numerator, denominator, component, goal, is_met, by_design). The ratio is
# numerator time / denominator time of `component` ("total": the whole pipeline). by_design
# names a ratio that follows from what the two sides are made to do, not a speed found.
TARGETS: list[tuple[str, str, str, str, str, Callable[[float], bool], str]] = [
    (
        "mBgExec both vs none, pipeline medians",
        "none",
        "both",
        "mBgExec",
        ">= 6x",
        lambda x: x >= 6,
        "by design: every CFITSIO write of 'none' is a committed transfer and every read a round trip",
    ),
    ("pipeline both / plain files", "both", "plain", "total", "<= 1.0x", lambda x: x <= 1.0, ""),
    ("pipeline cold / shared directory", "cold", "shared", "total", "< 1.0x", lambda x: x < 1.0, ""),
]


def unlike(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """What differs between two states ('' when they are alike)."""
    return [f"{k} {a[k]!r} vs {b[k]!r}" for k in KEYS if a[k] != b[k]]


def state_text(name: str, st: dict[str, str]) -> str:
    return f"{name} = {st['how']}"


def judge(label: str, x: float, goal: str, met: bool, a: str, b: str, st: dict, by_design: str = "") -> str:
    """One verdict line: status, the figure, and the state of both sides (or why it was not judged)."""
    diff = unlike(st[a], st[b])
    design = f"{by_design}; " if by_design else ""
    if diff:
        return f"  NOT JUDGED  {label}: {x:.2f}x; unlike sides: {'; '.join(diff)}"
    status = "MET" if met else "NOT MET"
    alike = f"both sides: on {st[a]['storage']}; {st[a]['cache']}; outputs: {st[a]['durability']}"
    return (
        f"  {status:<10}  {label}: {x:.2f}x (target {goal}) [{design}{alike}; "
        f"{state_text(a, st[a])}; {state_text(b, st[b])}]"
    )


def target_lines(medians: dict[str, dict[str, float]], st: dict[str, dict[str, str]]) -> list[str]:
    """The verdicts of every target whose two configurations ran."""
    out = []
    for label, num, den, comp, goal, ok, design in TARGETS:
        if num in medians and den in medians:
            x = medians[num][comp] / medians[den][comp]
            out.append(judge(label, x, goal, ok(x), num, den, st, design))
    return out
