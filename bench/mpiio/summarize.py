"""Turn the RESULT lines of bench/mpiio/run.sh into ratio tables against the targets set for
unmodified MPI-IO programs.

Lines look like `RESULT round=N bench=B label=direct|pdcx key=value ... seconds=S`. Every
ratio is taken within its round (the direct figure measured next to the pdcx one) and the
tables show the median over rounds with the min-max range (bench/stats.py). The device's own
figures (bench/seqbw.sh, one file per round, `--seqbw`) give each MB/s row on the local device
a share of the device's direct-I/O figure of the same round, for information.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stats import median, median_cell, read_seqbw, seq_figure


def parse(path: str | None) -> tuple[list[dict], list[str]]:
    """RESULT and VERIFY lines as dicts (a VERIFY line has bench=verify), FAILED lines as text."""
    results, failed = [], []
    if not path or not Path(path).exists():
        return results, failed
    for line in Path(path).read_text(errors="replace").splitlines():
        if line.startswith(("RESULT ", "VERIFY ")):
            r = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
            if line.startswith("VERIFY "):
                r["kind"] = r.pop("bench", "e2e")
                r["bench"] = "verify"
            results.append(r)
        elif line.startswith("FAILED "):
            failed.append(line)
    return results, failed


NOT_MEASURED = "device not measured"


def seqbw_rounds(paths: list[str]) -> dict[str, dict]:
    """round -> bench/seqbw.sh's line of that round: run.sh's seqbw-N.txt is round N; another
    name counts by position (the first file is round 1)."""
    out = {}
    for i, p in enumerate(paths, 1):
        m = re.search(r"seqbw-(\d+)\.txt$", p)
        out[m.group(1) if m else str(i)] = read_seqbw(p)
    return out


def device_cell(rounds: dict, devs: dict[str, dict], key: str = "dev_write_MBps") -> str:
    """pdcx MB/s as a % of the device's figure `key` of the same round, median (min-max) over
    rounds; "device not measured" when no round has the device's figure."""
    shares, measured = [], False
    for rnd, v in rounds.items():
        dev = seq_figure(devs.get(rnd), key)
        measured |= dev is not None
        if dev is not None and "pdcx" in v and "mbps" in v["pdcx"]:
            shares.append(float(v["pdcx"]["mbps"]) / dev * 100)
    return median_cell(shares, "{:.1f}%".format) if measured else NOT_MEASURED


def device_header(devs: dict[str, dict], where: str) -> str:
    """The device's figures named in the header: median (min-max) over rounds."""
    seqs = list(devs.values())

    def fig(key: str) -> str:
        return median_cell(seq_figure(s, key) for s in seqs)

    if not any(seq_figure(s, "dev_write_MBps") for s in seqs):
        return f"The device: {NOT_MEASURED} (bench/seqbw.sh gave no figure)."
    tools = sorted({s.get("tool", "?") for s in seqs if s})
    on = f" on {where}" if where else ""
    return (
        f"The device (bench/seqbw.sh{on}, start of each round, {len(seqs)} round(s), {'/'.join(tools)}): "
        f"direct I/O write {fig('dev_write_MBps')} MB/s, read {fig('dev_read_MBps')} MB/s; buffered write "
        f"{fig('seq_write_MBps')} MB/s, read {fig('seq_read_MBps')} MB/s. Every figure of this bench is a "
        "write: no row compares with the read figures."
    )


DEVICE_NOTE = (
    "pdcx vs the device = pdcx MB/s / the device's direct-I/O write MB/s (bench/seqbw.sh: fio O_DIRECT, "
    "queue depth 16, on the directory of the pdcx log) of the same round; median (min–max) over rounds; "
    "for information, no target. sync=0 figures stop at the page cache, so they may exceed 100%."
)


def home_of(r: dict) -> str:
    """The home kind of an e2e line (logs from before the S3 home have none: a file home)."""
    return r.get("home", "file")


def human(size: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def size_bytes(s: str | None) -> str | None:
    """'4K' -> '4096' (run.sh's flush lines name sizes as given; the programs print bytes)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if s and s[-1] in units and s[:-1].isdigit():
        return str(int(s[:-1]) * units[s[-1]])
    return s


def by_round(results: list[dict], bench: str, keys: tuple[str, ...]) -> dict:
    """(values of keys) -> round -> label -> RESULT dict."""
    out: dict = defaultdict(lambda: defaultdict(dict))
    for r in results:
        if r.get("bench") == bench:
            key = tuple(size_bytes(r.get(k)) if k == "size" else r.get(k) for k in keys)
            out[key][r.get("round", "1")][r["label"]] = r
    return out


def ratios(rounds: dict, f) -> list[float | None]:
    """f(direct, pdcx) per round where both were measured."""
    return [f(v["direct"], v["pdcx"]) if "direct" in v and "pdcx" in v else None for v in rounds.values()]


def col(rounds: dict, label: str, field: str) -> list[float | None]:
    return [float(v[label][field]) if label in v else None for v in rounds.values()]


def overhead(d: dict, p: dict) -> float:
    """Extra time through pdcx, % of the direct time."""
    return (float(p["seconds"]) / float(d["seconds"]) - 1) * 100


def pct(v: float) -> str:
    return f"{v:+.1f}%"


def micro_tables(results: list[dict], have_pdcx: bool, devs: dict[str, dict] | None = None) -> list[str]:
    devs = devs or {}
    out = []
    seg = by_round(results, "seg_create", ("sync", "size"))
    flush = by_round(results, "flush", ("of", "sync", "size"))
    if seg:
        out += [
            "### Segment creation (ParaLog §8.7.1): open, write one segment, [sync,] close",
            "",
            (
                "| sync | size | direct MB/s | pdcx MB/s | pdcx overhead (time) "
                "| pdcx vs the device: direct-I/O write (info) | then `pdcx flush` s "
                "| target (≤ +10% at ≥ 4 MiB, sync=1: both durable on the same disk at close) |"
            ),
            "|---|---|---|---|---|---|---|---|",
        ]
        for (sync, size), rounds in sorted(seg.items(), key=lambda kv: (-int(kv[0][0]), int(kv[0][1]))):
            ov = ratios(rounds, overhead)
            m = median(ov)
            target = ""
            if sync == "1" and int(size) >= 4 << 20:
                target = "n/a" if m is None else ("met" if m <= 10 else "MISSED")
            out.append(
                f"| {sync} | {human(int(size))} | {median_cell(col(rounds, 'direct', 'mbps'))} | "
                f"{median_cell(col(rounds, 'pdcx', 'mbps'))} | {median_cell(ov, pct)} | "
                f"{device_cell(rounds, devs)} | "
                f"{median_cell(col(flush.get(('seg_create', sync, size), {}), 'pdcx', 'seconds'), '{:.2f}'.format)} | "
                f"{target} |"
            )
        out += ["", DEVICE_NOTE, ""]
    app = by_round(results, "append_seek", ("sync", "pattern", "size"))
    if app:
        out += [
            "### Append vs seek-and-write (ParaLog §8.7.2): 100 writes to one file per size",
            "",
            (
                "| sync | pattern | size | direct MB/s | pdcx MB/s | pdcx overhead (time) "
                "| pdcx vs the device: direct-I/O write (info) |"
            ),
            "|---|---|---|---|---|---|---|",
        ]
        for (sync, pattern, size), rounds in sorted(
            app.items(), key=lambda kv: (-int(kv[0][0]), kv[0][1], int(kv[0][2]))
        ):
            out.append(
                f"| {sync} | {pattern} | {human(int(size))} | {median_cell(col(rounds, 'direct', 'mbps'))} | "
                f"{median_cell(col(rounds, 'pdcx', 'mbps'))} | {median_cell(ratios(rounds, overhead), pct)} | "
                f"{device_cell(rounds, devs)} |"
            )
        out += ["", DEVICE_NOTE, ""]
    if out and not have_pdcx:
        out.append("pdcx columns are n/a: `pdcx run` was not available in this run.\n")
    return out


def verify_note(results: list[dict], kind: str, home: str) -> str | None:
    """One line: how many pdcx home copies were byte-identical to the direct run's files."""
    vs = [r for r in results if r.get("bench") == "verify" and r.get("kind") == kind and r.get("home") == home]
    if not vs:
        return None
    files = sum(int(r.get("direct_files", 0)) for r in vs)
    same = sum(int(r.get("identical", 0)) for r in vs)
    bad = [r for r in vs if r.get("identical") != r.get("direct_files") or r.get("pdcx_files") != r.get("direct_files")]
    what = "S3 objects (read back with GET)" if home == "s3" else "home files"
    verdict = "all identical" if not bad and files else f"{len(bad)} run(s) DIFFER"
    return (
        f"Checked (sha256): {same} of {files} pdcx {what} byte-identical to the direct run's files "
        f"over {len(vs)} run(s): {verdict}."
    )


def idle_note(rows: list[dict]) -> str | None:
    """How busy the machine was when each run started (run.sh: 2 s CPU sample, --quiet-wait)."""
    vals = [float(r["idle"]) for r in rows if r.get("idle", "").isdigit()]
    if not vals:
        return None
    return (
        f"CPU idle just before each run (2 s sample; other agents share the 2 cores): "
        f"{median_cell(vals, '{:.0f}%'.format)}; {sum(v < 80 for v in vals)} of {len(vals)} runs started below 80 %."
    )


# How the end-to-end targets are judged, printed under each table. The direct program's
# checkpoints are at their home when it ends; pdcx's are in its log then, and at the home only
# once `pdcx flush` returns, so the verdict takes the program time plus that flush.
E2E_VERDICT_FILE = (
    "target judged on the reduction incl. flush: direct = program time, every checkpoint at the home "
    "(MPI_File_sync, close) when it ends; pdcx = program time + `pdcx flush` (every checkpoint at the "
    "home). Both sides: data at the home, durable. A round without its flush time is not judged."
)
E2E_VERDICT_S3 = (
    "target judged on the reduction incl. flush: direct = program time, every checkpoint uploaded "
    "(object complete on S3) before the next compute phase; pdcx = program time + `pdcx flush` "
    "(every object complete on S3). A round without its flush time is not judged."
)


def e2e_verdict(k: int, everies: list[int], red_fl: list[float | None]) -> str:
    """The target cell of row k: >= 25 % at the smallest k, >= -5 % at the largest, judged on
    the reduction including `pdcx flush` (the data at its home on both sides); n/a without it."""
    if len(everies) < 2 or k not in (everies[0], everies[-1]):
        return ""
    goal = 25 if k == everies[0] else -5
    m = median(red_fl)
    sign = "≥ 25%" if goal == 25 else "≥ -5%"
    return f"{sign}: " + ("n/a (no flush time)" if m is None else ("met" if m >= goal else "MISSED"))


def e2e_table(results: list[dict], have_pdcx: bool, home_mbps: str, home: str = "file") -> list[str]:
    mine = [r for r in results if home_of(r) == home]
    runs = by_round(mine, "e2e", ("every",))
    if not runs:
        return []
    flush = by_round(mine, "flush", ("every",))
    everies = sorted(int(k[0]) for k in runs)
    first = next(iter(next(iter(runs.values())).values()))
    r0 = first.get("direct") or first.get("pdcx")
    s3 = home == "s3"
    where = f"S3 home behind a {home_mbps} MB/s link" if s3 else f"home at {home_mbps} MB/s"
    out = [
        f"### End to end (ParaLog §8.1-8.4): compute + a checkpoint every k steps, {where}",
        "",
        (
            f"{r0['ranks']} ranks, {r0['steps']} steps of {r0['compute']} s compute, {r0['mib']} MiB per rank "
            "per output into one shared file (write_at_all, MPI_File_sync, close)."
        ),
        "",
    ]
    if s3:
        out += [
            (
                "direct = stage + copy, what a program without pdcx does: the same program writes each "
                "checkpoint with MPI-IO to a local directory (same disk as pdcx's log), then one "
                "uploader (boto3 multipart, 8 MiB parts, 8 at once) copies it to the S3 server, and "
                "the next compute phase starts when the object is complete. pdcx = `pdcx run --home "
                "s3://BUCKET/PREFIX` (the servers upload in the background)."
            ),
            "",
            (
                "| k | outputs | direct s | direct I/O s (write + upload) | direct upload s | direct compute s "
                "| pdcx s | pdcx I/O s | pdcx + flush s | reduction (program only) | reduction incl. flush "
                "| target (incl. flush) |"
            ),
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    else:
        out += [
            (
                "| k | outputs | direct s | direct I/O s | direct compute s | pdcx s | pdcx I/O s | pdcx + flush s "
                "| reduction (program only) | reduction incl. flush | target (incl. flush) |"
            ),
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    for k in everies:
        rounds = runs[(str(k),)]
        fl = flush.get((str(k),), {})
        red = ratios(rounds, lambda d, p: (1 - float(p["seconds"]) / float(d["seconds"])) * 100)
        red_fl = []
        tot = []
        for rnd, v in rounds.items():
            f = fl.get(rnd, {}).get("pdcx")
            if "pdcx" in v and f:
                t = float(v["pdcx"]["seconds"]) + float(f["seconds"])
                tot.append(t)
                if "direct" in v:
                    red_fl.append((1 - t / float(v["direct"]["seconds"])) * 100)
        target = e2e_verdict(k, everies, red_fl)
        v0 = next(iter(rounds.values()))
        outputs = (v0.get("direct") or v0.get("pdcx"))["outputs"]
        upload = f"{median_cell(col(rounds, 'direct', 'upload_seconds'), '{:.2f}'.format)} | " if s3 else ""
        out.append(
            f"| {k} | {outputs} | {median_cell(col(rounds, 'direct', 'seconds'), '{:.2f}'.format)} | "
            f"{median_cell(col(rounds, 'direct', 'io_seconds'), '{:.2f}'.format)} | {upload}"
            f"{median_cell(col(rounds, 'direct', 'compute_seconds'), '{:.2f}'.format)} | "
            f"{median_cell(col(rounds, 'pdcx', 'seconds'), '{:.2f}'.format)} | "
            f"{median_cell(col(rounds, 'pdcx', 'io_seconds'), '{:.2f}'.format)} | "
            f"{median_cell(tot, '{:.2f}'.format)} | {median_cell(red, pct)} | {median_cell(red_fl, pct)} | {target} |"
        )
    out.append("")
    out.append(
        "reduction = 1 - pdcx/direct end-to-end time of the program; incl. flush adds the time "
        "`pdcx flush` then waits for the last home copy."
    )
    out.append(E2E_VERDICT_S3 if s3 else E2E_VERDICT_FILE)
    out.append(
        "Not compared with the device: these figures are seconds, and the checkpoints' way to their "
        + ("home is the S3 link" if s3 else f"home is throttled to {home_mbps} MB/s")
        + " by design."
    )
    for note in (verify_note(results, "e2e", home), idle_note([r for r in mine if r.get("bench") == "e2e"])):
        if note:
            out.append(note)
    if not have_pdcx:
        out.append("pdcx columns are n/a: `pdcx run` was not available in this run.")
    out.append("")
    return out


def home_compare_table(results: list[dict]) -> list[str]:
    """For information: pdcx with the S3 home vs pdcx with the file home, same round and k."""
    prog: dict = defaultdict(dict)  # (every, round) -> home -> program seconds
    fl: dict = defaultdict(dict)  # (every, round) -> home -> flush seconds
    for r in results:
        key = (r.get("every"), r.get("round", "1"))
        if r.get("bench") == "e2e" and r.get("label") == "pdcx":
            prog[key][home_of(r)] = float(r["seconds"])
        elif r.get("bench") == "flush":
            fl[key][home_of(r)] = float(r["seconds"])
    rows = []
    for k in sorted({int(e) for e, _ in prog if e}):
        f_s, s_s, f_t, s_t, ratio = [], [], [], [], []
        for (e, rnd), got in prog.items():
            if e != str(k) or "file" not in got or "s3" not in got:
                continue
            f_s.append(got["file"])
            s_s.append(got["s3"])
            ratio.append((got["s3"] / got["file"] - 1) * 100)
            f = fl.get((e, rnd), {})
            if "file" in f and "s3" in f:
                f_t.append(got["file"] + f["file"])
                s_t.append(got["s3"] + f["s3"])
        if ratio:
            rows.append(
                f"| {k} | {median_cell(f_s, '{:.2f}'.format)} | {median_cell(s_s, '{:.2f}'.format)} | "
                f"{median_cell(ratio, pct)} | {median_cell(f_t, '{:.2f}'.format)} | "
                f"{median_cell(s_t, '{:.2f}'.format)} |"
            )
    if not rows:
        return []
    return [
        "### For information: pdcx with the S3 home vs pdcx with the file home (same rounds)",
        "",
        "| k | pdcx, file home s | pdcx, S3 home s | S3 vs file (program) | file home + flush s | S3 home + flush s |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def cpu_table(results: list[dict]) -> list[str]:
    """CPU seconds besides the ranks' in each run: on 2 cores, background work is taken from
    the compute phases (run.sh's bench=cpu lines)."""
    cpu = [r for r in results if r.get("bench") == "cpu"]
    if not cpu:
        return []
    rows = []
    for home in ("file", "s3"):
        ks = sorted({int(r["every"]) for r in cpu if home_of(r) == home})
        for k in ks:
            mine = [r for r in cpu if home_of(r) == home and r.get("every") == str(k)]

            def vals(label: str, field: str, mine: list[dict] = mine) -> list[float | None]:
                return [float(r[field]) for r in mine if r.get("label") == label and field in r]

            gw = f"{median_cell(vals('pdcx', 'versitygw_cpu_s'), '{:.1f}'.format)} | " if home == "s3" else "n/a | "
            gwd = f"{median_cell(vals('direct', 'versitygw_cpu_s'), '{:.1f}'.format)}" if home == "s3" else "n/a"
            rows.append(
                f"| {home} | {k} | {median_cell(vals('pdcx', 'pdcx_servers_cpu_s'), '{:.1f}'.format)} | {gw}{gwd} |"
            )
    return [
        "### CPU seconds used besides the ranks (the 2 cores are shared with them)",
        "",
        (
            "| home | k | pdcx servers, whole life (pdcx run + flush) | versitygw during the pdcx run + flush "
            "| versitygw during the direct run |"
        ),
        "|---|---|---|---|---|",
        *rows,
        "",
    ]


def recovery_table(results: list[dict], home_mbps: str = "100") -> list[str]:
    """ParaLog §8.6: what `pdcx recover` copied after every server was killed -9."""
    rec = [r for r in results if r.get("bench") == "recovery"]
    if not rec:
        return []
    out = [
        "### Recovery throughput (ParaLog §8.6): every server killed -9 with home copies pending",
        "",
        (
            "The writer (e2e without compute) logs its checkpoints under `pdcx run` and exits; right "
            "after its last consistency point every server is killed -9 (PIDs from cluster.json); "
            "`pdcx recover` restarts them and finishes the copies; timed until it returns (every "
            "version at home). recovered = bytes not yet complete at the home at the kill."
        ),
        "",
        (
            "| home | written MB | complete at home at the kill MB | recovered MB | recover s | recovered MB/s "
            "| home raw MB/s (probe) | recovered / raw |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for home in ("file", "s3"):
        rs = [r for r in rec if r.get("home") == home]
        if not rs:
            continue
        tot = [int(r["bytes_total"]) / 1e6 for r in rs]
        at_kill = [int(r["bytes_home_at_kill"]) / 1e6 for r in rs]
        got = [(int(r["bytes_total"]) - int(r["bytes_home_at_kill"])) / 1e6 for r in rs]
        secs = [float(r["seconds"]) for r in rs]
        rate = [g / s if s > 0 else None for g, s in zip(got, secs, strict=True)]
        raw = [float(r.get("raw_mbps", 0)) or None for r in rs]
        frac = [(x / y * 100) if x is not None and y else None for x, y in zip(rate, raw, strict=True)]
        name = "S3 (tc link)" if home == "s3" else "file (loop device, blkio)"
        out.append(
            f"| {name} | {median_cell(tot, '{:.0f}'.format)} | {median_cell(at_kill, '{:.0f}'.format)} | "
            f"{median_cell(got, '{:.0f}'.format)} | {median_cell(secs, '{:.2f}'.format)} | "
            f"{median_cell(rate)} | {median_cell(raw)} | {median_cell(frac, '{:.0f}%'.format)} |"
        )
    out.append("")
    out.append(
        f"- recovered MB/s is not compared with the device: the home limits it by design ({home_mbps} MB/s, "
        "throttled file home or S3 link); it is compared with the home's raw probe instead."
    )
    note = idle_note(rec)
    if note:
        out.append(f"- {note}")
    for home in ("file", "s3"):
        v = verify_note(results, "recovery", home)
        if v:
            out.append(f"- {home}: {v}")
    out.append("")
    return out


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ncpu = subprocess.run(["nproc"], capture_output=True, text=True, check=False).stdout.strip()
    mem = "?"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1048576:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return f"{ncpu} cores ({cpu}), {mem} RAM, Linux {platform.release()}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--micro")
    ap.add_argument("--e2e")
    ap.add_argument("--recovery")
    ap.add_argument("--notes")
    ap.add_argument("--cmd", default="")
    ap.add_argument("--load-start", default="?")
    ap.add_argument("--load-end", default="?")
    ap.add_argument("--have-pdcx", default="0")
    ap.add_argument("--pdcx-bin", default="")
    ap.add_argument("--home-mbps", default="100")
    ap.add_argument("--seqbw", nargs="*", default=[], help="bench/seqbw.sh's output of each round (seqbw-N.txt)")
    ap.add_argument("--seqbw-dir", default="", help="the directory bench/seqbw.sh measured")
    ap.add_argument("--append")
    a = ap.parse_args(argv)
    micro, f1 = parse(a.micro)
    e2e, f2 = parse(a.e2e)
    rec, f3 = parse(a.recovery)
    have = a.have_pdcx == "1"
    devs = seqbw_rounds(a.seqbw)
    lines = [
        f"## bench/mpiio ({datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC)",
        "",
        (
            f"`{a.cmd}` on {machine()}; load average {a.load_start} at start, {a.load_end} at end; "
            f"pdcx: {a.pdcx_bin if have else 'not used (no `pdcx run`)'}"
        ),
        "",
        device_header(devs, a.seqbw_dir),
        "",
    ]
    if a.notes and Path(a.notes).exists():
        lines += [f"- {ln.removeprefix('NOTE ')}" for ln in Path(a.notes).read_text().splitlines() if ln.strip()]
        lines.append("")
    lines += micro_tables(micro, have, devs)
    lines += e2e_table(e2e, have, a.home_mbps, "file")
    lines += e2e_table(e2e, have, a.home_mbps, "s3")
    lines += home_compare_table(e2e)
    lines += cpu_table(e2e)
    lines += recovery_table(rec, a.home_mbps)
    for f in f1 + f2 + f3:
        lines.append(f"- {f}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.append:
        with open(a.append, "a") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
