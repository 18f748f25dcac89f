"""bench/c/scaling_summary.py on hand-made per-run files in the layout bench/c/scaling.sh
writes: aggregates per node count, the scaling ratio taken within each round against the first
node count, its verdict for writes, and the aggregate against nodes x the per-node device. No
servers."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUMMARY = REPO / "bench" / "c" / "scaling_summary.py"


def _round(work: Path, k: int, r: int, vpic: float, hacc_w: float, cold: float, dev_w: float, dev_r: float) -> None:
    (work / f"{k}-r{r}.log").write_text(
        "noise before\n"
        f"RESULT kernel=vpic backend=pdc ranks={2 * k} bytes=1 seconds=1 mbps={vpic} steps=1\n"
        f"RESULT kernel=bdcats backend=pdc ranks={2 * k} bytes=1 seconds=1 mbps={cold} label=cold\n"
        f"RESULT kernel=hacc-write backend=pdc ranks={2 * k} bytes=1 seconds=1 mbps={hacc_w} durability=local\n"
        "FAILED kernel=hacc-read backend=pdc (exit status 1)\n"
    )
    (work / f"seqbw-{k}-r{r}.txt").write_text(
        f"seq_write_MBps=90.0 seq_read_MBps=95.0 dev_write_MBps={dev_w} dev_read_MBps={dev_r} tool=fio\n"
    )


def _summary(work: Path, nodes: str, repeat: int) -> str:
    argv = [sys.executable, str(SUMMARY), str(work), "--nodes", nodes, "--repeat", str(repeat)]
    res = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _row(out: str, label: str, k: int) -> list[str]:
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 7 and cells[0] == label and cells[1] == str(k):
            return cells
    raise AssertionError(f"no row {label!r} for {k} nodes in:\n{out}")


def test_ratios_within_rounds_and_verdicts(tmp_path):
    # Round 1: 1 node 100, 2 nodes 190 (0.95), 4 nodes 300 (0.75); round 2: 1 node 80,
    # 2 nodes 160 (1.00), 4 nodes 300 (0.9375). Medians: 0.975 and 0.84375.
    for r, one, two, four in ((1, 100, 190, 300), (2, 80, 160, 300)):
        _round(tmp_path, 1, r, one, one, 50, 100, 120)
        _round(tmp_path, 2, r, two, two / 2, 50, 100, 120)
        _round(tmp_path, 4, r, four, four / 2, 50, 100, 120)
    out = _summary(tmp_path, "1 2 4", 2)
    one = _row(out, "VPIC write, local", 1)
    assert one[2] == "90 (80–100)" and one[4] == "1 (reference)" and one[5] == "-", one
    two = _row(out, "VPIC write, local", 2)
    assert two[4] == "0.97 (0.95–1.00)" and two[5] == ">= 0.80: PASS", two
    # 190 / (2 x 100) = 95 %, 160 / 200 = 80 %: median 88 %.
    assert two[6] == "88% (80%–95%)", two
    four = _row(out, "VPIC write, local", 4)
    assert four[4] == "0.84 (0.75–0.94)" and four[5] == ">= 0.80: PASS", four
    # HACC scaled at half the rate: 0.5 of the reference in every round, a miss.
    assert _row(out, "HACC write, local", 2)[5] == ">= 0.80: miss"
    # Reads: no target; compared with the device's read figure (50 / (4 x 120) = 10 %).
    cold = _row(out, "BDCATS read, cold", 4)
    assert cold[5] == "-" and cold[6] == "10% (10%–10%)", cold
    # A kernel that failed leaves no figure, not a made-up one.
    assert _row(out, "HACC read, cold", 2)[2] == "n/a"
    assert _row(out, "HACC read, cold", 2)[5] == "-"


def test_a_missing_round_leaves_its_ratio_out(tmp_path):
    _round(tmp_path, 1, 1, 100, 100, 50, 100, 120)
    _round(tmp_path, 2, 1, 150, 150, 50, 100, 120)
    _round(tmp_path, 2, 2, 200, 200, 50, 100, 120)  # round 2 of 1 node never ran
    out = _summary(tmp_path, "1 2", 2)
    two = _row(out, "VPIC write, local", 2)
    assert two[2] == "175 (150–200)" and two[4] == "0.75" and two[5] == ">= 0.80: miss", two
