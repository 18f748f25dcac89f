"""bench/mpiio/summarize.py against the device: each MB/s row of the micro tables as a share
of bench/seqbw.sh's direct-I/O write figure of the same round, on hand-made run.sh files
(micro.log with round= tags, seqbw-N.txt per round). No servers."""

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "bench/mpiio/summarize.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def micro_log(tmp: Path, pdcx_mbps: dict[int, float]) -> Path:
    """RESULT lines as run.sh tees them (round= added in front; flush lines after pdcx runs)."""
    lines = []
    for rnd, mbps in pdcx_mbps.items():
        for label, v in (("direct", 1000.0), ("pdcx", mbps)):
            secs = 268435456 / v / 1e6
            lines.append(
                f"RESULT round={rnd} bench=seg_create label={label} sync=1 ranks=1 size=4194304 reps=64 "
                f"seconds={secs:.6f} mbps={v:.1f}"
            )
            lines.append(
                f"RESULT round={rnd} bench=append_seek label={label} sync=1 pattern=append ranks=1 size=1048576 "
                f"count=100 seconds={104857600 / v / 1e6:.6f} mbps={v:.1f}"
            )
        lines.append(f"RESULT round={rnd} bench=flush label=pdcx of=seg_create sync=1 size=4M seconds=0.120")
        lines.append(f"RESULT round={rnd} bench=flush label=pdcx of=append_seek sync=1 size=1M seconds=0.050")
    f = tmp / "micro.log"
    f.write_text("\n".join(lines) + "\n")
    return f


def seqbw(tmp: Path, rnd: int, dev_w: float) -> str:
    f = tmp / f"seqbw-{rnd}.txt"
    f.write_text(
        f"seq_write_MBps=1500.0 seq_read_MBps=2000.0 dev_write_MBps={dev_w:.1f} dev_read_MBps=1800.0 tool=fio\n"
    )
    return str(f)


def rows(out: str, prefix: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(prefix)]


def test_share_of_the_device_per_round(tmp_path, capsys):
    summ = load("bench_mpiio_summarize_dev")
    log = micro_log(tmp_path, {1: 900.0, 2: 600.0, 3: 1000.0})
    # Round 1: 900 / 1200 = 75 %; round 2: 600 / 1000 = 60 %; round 3: 1000 / 1250 = 80 %.
    seqs = [seqbw(tmp_path, 1, 1200), seqbw(tmp_path, 2, 1000), seqbw(tmp_path, 3, 1250)]
    argv = ["--micro", str(log), "--have-pdcx", "1", "--seqbw", *seqs, "--seqbw-dir", "/x/local"]
    assert summ.main(argv) == 0
    out = capsys.readouterr().out
    assert "pdcx vs the device: direct-I/O write (info)" in out
    (seg,) = rows(out, "| 1 | 4 MiB |")
    assert "| 75.0% (60.0%–80.0%) |" in seg
    (app,) = rows(out, "| 1 | append | 1 MiB |")
    assert app.rstrip().endswith("| 75.0% (60.0%–80.0%) |")
    head = next(line for line in out.splitlines() if line.startswith("The device"))
    assert "on /x/local" in head and "3 round(s)" in head
    assert "direct I/O write 1200.0 (1000.0–1250.0) MB/s, read 1800.0 (1800.0–1800.0) MB/s" in head


def test_one_round(tmp_path, capsys):
    summ = load("bench_mpiio_summarize_dev1")
    log = micro_log(tmp_path, {1: 900.0})
    assert summ.main(["--micro", str(log), "--have-pdcx", "1", "--seqbw", seqbw(tmp_path, 1, 1200)]) == 0
    (seg,) = rows(capsys.readouterr().out, "| 1 | 4 MiB |")
    assert "| 75.0% |" in seg


def test_missing_or_garbled_seqbw_says_device_not_measured(tmp_path, capsys):
    summ = load("bench_mpiio_summarize_dev2")
    log = micro_log(tmp_path, {1: 900.0, 2: 900.0})
    garbled = tmp_path / "seqbw-2.txt"
    garbled.write_text("fio: engine libaio not loadable\ndev_write_MBps=oops\n")
    argv = ["--micro", str(log), "--have-pdcx", "1", "--seqbw", str(tmp_path / "seqbw-1.txt"), str(garbled)]
    assert summ.main(argv) == 0
    out = capsys.readouterr().out
    (seg,) = rows(out, "| 1 | 4 MiB |")
    assert "| device not measured |" in seg
    (app,) = rows(out, "| 1 | append | 1 MiB |")
    assert "| device not measured |" in app
    assert "The device: device not measured" in out
    # Without --seqbw at all (an older run.sh) the cells say the same.
    assert summ.main(["--micro", str(log), "--have-pdcx", "1"]) == 0
    assert "| device not measured |" in rows(capsys.readouterr().out, "| 1 | 4 MiB |")[0]


def test_a_round_without_its_device_figure_counts_no_share(tmp_path, capsys):
    summ = load("bench_mpiio_summarize_dev3")
    log = micro_log(tmp_path, {1: 900.0, 2: 600.0})
    # Round 2's file is missing: only round 1's share (75 %), not 600 against round 1's device.
    argv = ["--micro", str(log), "--have-pdcx", "1", "--seqbw", seqbw(tmp_path, 1, 1200), str(tmp_path / "seqbw-2.txt")]
    assert summ.main(argv) == 0
    (seg,) = rows(capsys.readouterr().out, "| 1 | 4 MiB |")
    assert "| 75.0% |" in seg
