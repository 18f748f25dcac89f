"""bench/plot_usage.py: `pdcx top --csv` output to an SVG chart (no servers needed)."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "plot_usage.py"
SVG = "{http://www.w3.org/2000/svg}"
HEADER = (
    "t_s,server,tier,used_bytes,capacity_bytes,put_bytes,get_bytes,put_MBps,"
    "log_bytes,cache_bytes,flush_pending_bytes,flushed_bytes"
)
MIB = 1 << 20


def synthetic_csv(samples: int, servers: int = 2, tiers=("fast", "slow")) -> str:
    """What `pdcx top --csv` prints: a row per server and tier per sample, the per-server columns
    repeated on each tier row, t_s taken per server (so it differs slightly within a sample)."""
    rows = [HEADER]
    for k in range(samples):
        for s in range(servers):
            t = 0.5 * k + 0.01 * s
            log, cache, pending, flushed = (k + 1) * MIB, MIB, k * MIB, 2 * k * MIB
            for i, tier in enumerate(tiers):
                used = put = (i + 1) * k * MIB
                rows.append(f"{t:.2f},{s},{tier},{used},,{put},0,0.0,{log},{cache},{pending},{flushed}")
    return "\n".join(rows) + "\n"


def plot(tmp_path: Path, text: str, *args: str) -> subprocess.CompletedProcess:
    src = tmp_path / "usage.csv"
    src.write_text(text)
    return run(str(src), "-o", str(tmp_path / "usage.svg"), *args)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], check=False, capture_output=True, text=True, timeout=60)


def polylines(path: Path) -> dict[str, list[tuple[float, float]]]:
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    out = {}
    for p in root.iter(f"{SVG}polyline"):
        name = p.find(f"{SVG}title").text
        assert name not in out, f"two polylines for {name}"
        out[name] = [tuple(map(float, xy.split(","))) for xy in p.get("points").split()]
    return out


def test_synthetic_csv_gives_one_polyline_per_series(tmp_path):
    n = 7
    p = plot(tmp_path, synthetic_csv(n), "--title", "tiers <50%> & co")
    assert p.returncode == 0, p.stderr
    lines = polylines(tmp_path / "usage.svg")
    assert set(lines) == {
        "log",
        "cache",
        "flush queue (pending)",
        "tier fast: used",
        "tier slow: used",
        "flushed (all tiers)",
        "tier fast: written",
        "tier slow: written",
    }
    assert all(len(pts) == n for pts in lines.values()), {k: len(v) for k, v in lines.items()}
    text = (tmp_path / "usage.svg").read_text()
    assert "tiers &lt;50%&gt; &amp; co" in text
    for label in ("time (s)", "usage (MiB)", "throughput (MB/s)"):
        assert label in text
    # Per-server columns are counted once per server (not once per tier row) and summed over
    # servers: at the last sample log = 2 servers x n MiB and the slow tier uses 2 x 2(n-1) MiB,
    # so slow is drawn higher (smaller y) than log, and the flush queue (2(n-1) MiB) below log.
    last = {k: v[-1][1] for k, v in lines.items()}
    assert last["tier slow: used"] < last["log"] < last["flush queue (pending)"]
    # Cumulative counters grow linearly: a constant rate after the first sample, which is 0.
    ys = [y for _, y in lines["flushed (all tiers)"]]
    assert ys[0] > ys[1] and len(set(ys[1:])) == 1
    # x runs from the first sample to the last, left to right.
    xs = [x for x, _ in lines["log"]]
    assert xs == sorted(xs) and xs[0] < xs[-1]


def test_trim_idle_starts_at_the_last_idle_sample(tmp_path):
    idle = synthetic_csv(1).splitlines()[1:]  # sample 0: every counter 0
    active = synthetic_csv(5).splitlines()[1:]
    # Three idle samples at 0, 0.5, 1.0 s, then samples 1..4 of the synthetic run from 1.5 s on.
    rows = [HEADER]
    for k in range(3):
        rows += [r.replace("0.00,", f"{0.5 * k:.2f},", 1).replace("0.01,", f"{0.5 * k + 0.01:.2f},", 1) for r in idle]
    for r in active[len(idle) :]:
        t, rest = r.split(",", 1)
        rows.append(f"{float(t) + 1.0:.2f},{rest}")
    text = "\n".join(rows) + "\n"
    assert plot(tmp_path, text).returncode == 0
    assert all(len(v) == 7 for v in polylines(tmp_path / "usage.svg").values())
    p = plot(tmp_path, text, "--trim-idle")
    assert p.returncode == 0, p.stderr
    lines = polylines(tmp_path / "usage.svg")
    assert all(len(v) == 5 for v in lines.values())
    assert lines["log"][0][1] != lines["log"][1][1]


def test_without_tiers_and_truncated_last_sample(tmp_path):
    # No tiers configured: one "log" row per server; `pdcx top` killed while printing a sample.
    rows = [HEADER]
    for k in range(4):
        for s in range(2):
            rows.append(f"{k * 0.25:.2f},{s},log,,,,,,{k * MIB},0,0,0")
    rows.append("1.00,0,log,,,,,,0,0,0,0")
    rows.append("1.00,1,lo")
    p = plot(tmp_path, "\n".join(rows) + "\n")
    assert p.returncode == 0, p.stderr
    lines = polylines(tmp_path / "usage.svg")
    assert set(lines) == {"log", "cache", "flush queue (pending)", "flushed (all tiers)"}
    assert all(len(pts) == 4 for pts in lines.values())


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty file"),
        (HEADER + "\n", "no samples"),
        ("t_s,server,tier,used_bytes\n0.0,0,fast,1\n", "missing column(s) log_bytes, cache_bytes"),
        (HEADER + "\n0.0,0,fast,lots,,0,0,0.0,0,0,0,0\n0.5,0,fast,1,,0,0,0.0,0,0,0,0\n", "line 2: column used_bytes"),
    ],
)
def test_bad_input_is_a_clear_error(tmp_path, text, message):
    p = plot(tmp_path, text)
    assert p.returncode == 2
    assert message in p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "usage.svg").exists()


def test_missing_file_and_help(tmp_path):
    p = run(str(tmp_path / "nope.csv"))
    assert p.returncode == 2 and "cannot read" in p.stderr
    p = run("--help")
    assert p.returncode == 0 and "flush_pending_bytes" in p.stdout
