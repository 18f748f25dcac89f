#!/usr/bin/env python3
"""Optional tool, not part of CI: compiles the MPI-IO test programs that ship with ROMIO
(`src/mpi/romio/test/*.c` of a LOCAL git mirror of pmodels/mpich; written for MPI
implementations, not for pdcx) unchanged with `mpicc -O2`, and runs each one the way ROMIO's
own harness (`parallel_run.sh.in`) runs it, under each Open MPI IO component (`--mca io ompio`
and `--mca io romio321`): once directly, once under `pdcx run` on a fresh deployment. A
program that passes directly must pass under pdcx, and where its output files are
deterministic, the file at its path under the prefix and its home copy must equal the direct
run's file. CI has no mirror; without one this tool says so and exits 2 (it never reports a
pass it did not run).

    python3 scripts/mpiio_upstream.py --mirror /work/.mirror/pmodels+mpich/repo \
        [--pdcx /usr/local/bin/pdcx] [--only REGEX] [--io ompio,romio321] [--ranks 4] [--work DIR]

Prints one line per program (compile) and per program and component (run), then a summary
(also written as WORK/results.md and WORK/results.json); exits 0 only when every program that
passed directly also passed under pdcx with identical deterministic files. Nothing of MPICH's
is copied anywhere but the scratch directory (`--work`, default a fresh temporary directory).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

RUN_TIMEOUT_S = 120
FILE = "testfile"  # the name each program gets (ROMIO's harness uses romio_test_<exe>)

# Programs ROMIO's harness does not run, and why this tool does or does not run them.
EXTRAS = {
    "creat_excl": "not in ROMIO's CTESTS",
    "perf": "ROMIO's harness skips it (16 MiB per run)",
    "external32": "ROMIO's harness skips it; fixed name test.datarep in the cwd",
}
NOT_RUN = {
    "coll_perf": "ROMIO's harness skips it; a 14 GiB array",
    "large_array": "ROMIO's harness skips it; a multi-GiB array",
    "large_file": "ROMIO's harness skips it; 4 GiB file",
    "big_extents": "not in ROMIO's CTESTS; up to 6 GiB files",
}
# Output whose bytes depend on timing: only the pdcx copies are compared with each other.
NONDETERMINISTIC = {
    "shared_fp": "MPI_File_write_shared: the ranks' order is whoever gets the shared pointer first",
}
# Programs whose success is not a printed " No Errors": their stdout must match the direct run.
COMPARE_STDOUT = {"external32"}


@dataclass
class Spec:
    name: str
    ranks: int
    args: list[str]  # {f}: the file name; {hint}: ROMIO's test_hintfile copied next to it
    note: str = ""


@dataclass
class Outcome:
    ok: bool
    rc: int
    seconds: float
    stdout: str
    stderr: str
    why: str = ""


@dataclass
class Row:
    program: str
    io: str
    ranks: int
    direct: Outcome | None = None
    pdcx: Outcome | None = None
    files: dict[str, str] = field(default_factory=dict)
    files_ok: bool = True
    pdcx_lines: list[str] = field(default_factory=list)
    note: str = ""


def parse_harness(text: str, ranks: int) -> dict[str, Spec | None]:
    """ROMIO's parallel_run.sh.in: per program its rank count and arguments (None: skipped);
    `None` key for the default branch is returned as the '' entry."""
    specs: dict[str, Spec | None] = {}
    blocks = re.findall(r'x\$exe_name" = x(\w+) ; then\n(.*?)\n(?=elif|else|fi)', text, re.DOTALL)
    for name, body in blocks:
        if "skip testing" in body:
            specs[name] = None
            continue
        lines = body.splitlines()
        if "for fs in" in body:  # file_info: one run per file system; this machine's is "ufs"
            ufs = next(i for i, ln in enumerate(lines) if '$fs = "ufs"' in ln)
            lines = lines[ufs + 1 : ufs + 2]
        m = next(m for ln in lines if (m := re.search(r"-np (\d+) \$\{valgrind_opt\} \S+\s*(.*)$", ln)))
        args = m.group(2).replace("$FILENAME", "{f}").replace("$srcdir/test_hintfile", "{hint}").split()
        n = int(m.group(1))
        specs[name] = Spec(name, ranks if n == 4 else n, args)
    m = re.search(r"\nelse\n\s*\$mpirun -np (\d+) \$\{valgrind_opt\} \$1 (.*)\n", text)
    if not m:
        raise SystemExit("mpiio_upstream: cannot read the default branch of parallel_run.sh.in")
    specs[""] = Spec("", ranks, m.group(2).replace("$FILENAME", "{f}").split())
    return specs


def programs_in(makefile_am: str) -> list[str]:
    m = re.search(r"CTESTS\s*=\s*((?:.*\\\n)*.*)", makefile_am)
    if not m:
        raise SystemExit("mpiio_upstream: no CTESTS in Makefile.am")
    return m.group(1).replace("\\\n", " ").split()


def kill_leftovers(exe: Path) -> None:
    """Ranks of a timed-out run that outlived mpirun: exactly the processes running `exe`."""
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if os.readlink(p / "exe") == str(exe):
                os.kill(int(p.name), signal.SIGKILL)
        except OSError:
            continue


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int, exe: Path | None = None) -> Outcome:
    t0 = time.monotonic()
    p = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            out, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
        if exe is not None:
            kill_leftovers(exe)
        return Outcome(False, 124, time.monotonic() - t0, out, err, f"timed out after {timeout}s")
    return Outcome(rc == 0, rc, time.monotonic() - t0, out, err)


def judge(o: Outcome, expects_marker: bool) -> Outcome:
    """ROMIO's programs print ' No Errors' (rank 0) on success and 'Found N errors' otherwise."""
    if o.why:
        return o
    if o.rc != 0:
        o.ok, o.why = False, f"exit {o.rc}"
    elif re.search(r"Found \d+ error", o.stdout + o.stderr):
        o.ok, o.why = False, "Found errors"
    elif expects_marker and "No Errors" not in o.stdout + o.stderr:
        o.ok, o.why = False, "no ' No Errors'"
    return o


def listing(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()} if d.exists() else set()


def compare(row: Row, direct: Path, prefix: Path, home: Path, deterministic: bool, inputs: set[str]) -> None:
    d_files, p_files, h_files = listing(direct), listing(prefix), listing(home)
    for name in sorted((d_files | p_files | h_files) - inputs):
        parts, ok = [], True
        if name not in d_files:
            parts.append("not in direct run")
        for label, d, have in (("prefix", prefix, p_files), ("home", home, h_files)):
            if name not in have:
                parts.append(f"{label} missing")
                # The prefix copy is written through; the home copy of an empty file is only noted.
                empty = name in d_files and (direct / name).stat().st_size == 0
                ok = ok and label == "home" and (empty or not deterministic)
            elif name in d_files and deterministic:
                same = filecmp.cmp(direct / name, d / name, shallow=False)
                parts.append(f"{label} {'identical' if same else 'DIFFERS'}")
                ok = ok and same
        if not deterministic and name in p_files and name in h_files:
            same = filecmp.cmp(prefix / name, home / name, shallow=False)
            parts.append(f"prefix vs home {'identical' if same else 'DIFFER'} (direct not compared)")
            ok = ok and same
        if name not in d_files:
            ok = False
        row.files[name] = ", ".join(parts)
        row.files_ok = row.files_ok and ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mirror", default=os.environ.get("MPICH_MIRROR", "/work/.mirror/pmodels+mpich/repo"))
    ap.add_argument("--rev", default="HEAD", help="the mirror's revision to take the tests from")
    ap.add_argument("--pdcx", default=shutil.which("pdcx") or "pdcx")
    ap.add_argument("--ranks", type=int, default=4, help="for the programs ROMIO runs on 4 ranks")
    ap.add_argument("--io", default="ompio,romio321", help="Open MPI io components, comma-separated")
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--work", default=None, help="scratch directory (default: a new temporary one)")
    ap.add_argument("--only", default=None, help="regular expression on program names")
    ap.add_argument("--no-extras", action="store_true", help="only the programs ROMIO's harness runs")
    ap.add_argument("--timeout", type=int, default=RUN_TIMEOUT_S, help="seconds per run")
    ap.add_argument("--compile-only", action="store_true")
    a = ap.parse_args()

    if not (Path(a.mirror) / "HEAD").exists() and not (Path(a.mirror) / ".git").exists():
        print(f"mpiio_upstream: no git mirror of pmodels/mpich at {a.mirror}; nothing was run", file=sys.stderr)
        return 2
    work = Path(a.work or tempfile.mkdtemp(prefix="mpiio-upstream.")).resolve()
    src, bins, runs = work / "src", work / "bin", work / "runs"
    for d in (src, bins, runs):
        d.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    archive = subprocess.run(
        ["git", "--git-dir", a.mirror, "archive", a.rev, "src/mpi/romio/test"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        print(f"mpiio_upstream: {a.rev} has no src/mpi/romio/test: {archive.stderr.decode()}", file=sys.stderr)
        return 2
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    commit = subprocess.run(
        ["git", "--git-dir", a.mirror, "rev-parse", a.rev], capture_output=True, text=True, check=False
    ).stdout.strip()
    print(f"== ROMIO tests of pmodels/mpich {commit or a.rev}; pdcx {a.pdcx}")
    tdir = src / "src/mpi/romio/test"
    harness = parse_harness((tdir / "parallel_run.sh.in").read_text(), a.ranks)
    registered = programs_in((tdir / "Makefile.am").read_text())

    # Compile every C program; misc and large_file are configure templates whose only
    # substitution is @LL@, the printf length modifier of MPI_Offset.
    compiled, failed_compile, source = set(), {}, {}
    sources = sorted(tdir.glob("*.c")) + sorted(tdir.glob("*.c.in"))
    for c in sources:
        name = c.name.split(".")[0]
        if a.only and not re.search(a.only, name):
            continue
        source[name] = c
        if c.name.endswith(".in"):
            text = c.read_text()
            if set(re.findall(r"@(\w+)@", text)) - {"LL"}:
                failed_compile[name] = "template with substitutions other than @LL@"
                continue
            c = bins / f"{name}.c"
            c.write_text(text.replace("@LL@", "lld"))
        p = subprocess.run(
            ["mpicc", "-O2", "-o", str(bins / name), str(c)], capture_output=True, text=True, check=False
        )
        if p.returncode == 0:
            compiled.add(name)
        else:
            out = p.stdout + p.stderr
            failed_compile[name] = next((ln for ln in out.splitlines() if "error" in ln), out.strip()[:200])
    print(f"== {len(compiled)} of {len(compiled) + len(failed_compile)} programs compile with Open MPI's mpicc -O2")
    for name, why in sorted(failed_compile.items()):
        print(f"DOES-NOT-COMPILE {name}: {why}", flush=True)
    if a.compile_only:
        return 0

    plan: list[Spec] = []
    skipped: dict[str, str] = {}
    for name in sorted(set(registered) | set(EXTRAS) | set(NOT_RUN)):
        if a.only and not re.search(a.only, name):
            continue
        if name in NOT_RUN:
            skipped[name] = NOT_RUN[name]
            continue
        if name in EXTRAS and a.no_extras:
            continue
        if name not in compiled:
            continue
        spec = harness.get(name, harness[""])
        if spec is None and name not in EXTRAS:
            skipped[name] = "ROMIO's harness skips it"
            continue
        if name == "external32":
            # It writes test.datarep in its cwd: every run's cwd is the directory of its file.
            spec = Spec(name, a.ranks, [], note=EXTRAS[name])
        elif spec is None or spec.name != name:
            spec = Spec(name, harness[""].ranks, list(harness[""].args), note=EXTRAS.get(name, ""))
        else:
            spec.note = EXTRAS.get(name, "")
        plan.append(spec)
    for name, why in sorted(skipped.items()):
        print(f"NOT-RUN {name}: {why}", flush=True)

    rows: list[Row] = []
    for spec in plan:
        exe = bins / spec.name
        expects_marker = "No Errors" in source[spec.name].read_text()
        for io in a.io.split(","):
            row = Row(spec.name, io, spec.ranks, note=spec.note)
            case = runs / f"{spec.name}.{io}"
            shutil.rmtree(case, ignore_errors=True)
            direct, prefix, home, root = (case / d for d in ("direct", "prefix", "home", "root"))
            for d in (direct, prefix, home):
                d.mkdir(parents=True)
            inputs = set()
            if "{hint}" in spec.args:
                inputs.add("test_hintfile")
                for d in (direct, prefix):
                    shutil.copy(tdir / "test_hintfile", d / "test_hintfile")
            mpi = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(spec.ranks), "--mca", "io", io]

            def args(d: Path, spec: Spec = spec) -> list[str]:
                return [x.format(f=d / FILE, hint=d / "test_hintfile") for x in spec.args]

            row.direct = judge(run([*mpi, str(exe), *args(direct)], direct, env, a.timeout, exe), expects_marker)
            start = run([a.pdcx, "server", "start", "-n", str(a.servers), "--root", str(root)], case, env, 120)
            if not start.ok:
                row.pdcx = Outcome(False, start.rc, 0.0, start.stdout, start.stderr, "pdcx server start failed")
            else:
                pdcx_cmd = [a.pdcx, "run", "--prefix", str(prefix), "--home", str(home), "--root", str(root), "--"]
                o = run([*mpi, *pdcx_cmd, str(exe), *args(prefix)], prefix, env, a.timeout, exe)
                row.pdcx = judge(o, expects_marker)
                flush = run([a.pdcx, "flush", "--root", str(root)], case, env, a.timeout)
                if not flush.ok:
                    row.pdcx.ok = False
                    row.pdcx.why = (row.pdcx.why + "; " if row.pdcx.why else "") + f"pdcx flush: exit {flush.rc}"
                row.pdcx_lines = [ln for ln in (o.stderr + flush.stderr).splitlines() if ln.startswith("pdcx")]
            run([a.pdcx, "server", "stop", "--root", str(root)], case, env, 120)
            same_out = sorted(row.direct.stdout.splitlines()) == sorted(row.pdcx.stdout.splitlines())
            if spec.name in COMPARE_STDOUT and row.direct.ok and row.pdcx.ok and not same_out:
                row.pdcx.ok, row.pdcx.why = False, "stdout differs from the direct run's"
            if row.direct.ok and row.pdcx.ok:
                compare(row, direct, prefix, home, spec.name not in NONDETERMINISTIC, inputs)
            for label, o in (("direct", row.direct), ("pdcx", row.pdcx)):
                (case / f"{label}.log").write_text(f"exit {o.rc} {o.why}\n--- stdout\n{o.stdout}--- stderr\n{o.stderr}")
            rows.append(row)
            print(line(row), flush=True)

    report(rows, skipped, failed_compile, work)
    bad = [r for r in rows if r.direct and r.direct.ok and not (r.pdcx and r.pdcx.ok and r.files_ok)]
    return 1 if bad else 0


def verdict(o: Outcome | None) -> str:
    if o is None:
        return "-"
    return f"pass ({o.seconds:.1f}s)" if o.ok else f"FAIL: {o.why}"


def files_cell(r: Row) -> str:
    if not (r.direct and r.direct.ok and r.pdcx and r.pdcx.ok):
        return "not compared (a run failed)"
    if not r.files:
        return "not compared: no file remains (the program deletes its files)"
    return "; ".join(f"{k}: {v}" for k, v in r.files.items())


def line(r: Row) -> str:
    status = "OK" if r.direct.ok and r.pdcx.ok and r.files_ok else ("DIRECT-FAIL" if not r.direct.ok else "PDCX-FAIL")
    lines = Counter(r.pdcx_lines)
    pl = "; ".join(f"{k} (x{n})" if n > 1 else k for k, n in lines.items()) or "none"
    return (
        f"{status} {r.program} [{r.io}, {r.ranks} rk] direct {verdict(r.direct)}, pdcx {verdict(r.pdcx)}, "
        f"files: {files_cell(r)}; pdcx stderr: {pl}"
    )


def report(rows: list[Row], skipped: dict[str, str], failed: dict[str, str], work: Path) -> None:
    md = ["| program | io | ranks | direct | pdcx | files | pdcx stderr lines |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines = Counter(r.pdcx_lines)
        pl = "<br>".join(f"`{k}` (x{n})" if n > 1 else f"`{k}`" for k, n in lines.items()) or "none"
        prog = f"{r.program} ({r.note})" if r.note else r.program
        md.append(f"| {prog} | {r.io} | {r.ranks} | {verdict(r.direct)} | {verdict(r.pdcx)} | {files_cell(r)} | {pl} |")
    for name, why in sorted(failed.items()):
        md.append(f"| {name} | both | - | does not compile with Open MPI: `{why}` | - | - | - |")
    for name, why in sorted(skipped.items()):
        md.append(f"| {name} | both | - | not run: {why} | - | - | - |")
    (work / "results.md").write_text("\n".join(md) + "\n")
    (work / "results.json").write_text(
        json.dumps(
            [
                {
                    "program": r.program,
                    "io": r.io,
                    "ranks": r.ranks,
                    "direct": {"ok": r.direct.ok, "why": r.direct.why, "seconds": round(r.direct.seconds, 2)},
                    "pdcx": {"ok": r.pdcx.ok, "why": r.pdcx.why, "seconds": round(r.pdcx.seconds, 2)},
                    "files": r.files,
                    "files_ok": r.files_ok,
                    "pdcx_stderr": r.pdcx_lines,
                }
                for r in rows
            ],
            indent=1,
        )
    )
    both = sum(1 for r in rows if r.direct.ok and r.pdcx.ok and r.files_ok)
    direct_ok = sum(1 for r in rows if r.direct.ok)
    print(
        f"== {len(rows)} runs: {direct_ok} pass directly, {both} of those pass under pdcx with identical files; "
        f"{len(failed)} do not compile, {len(skipped)} not run; table in {work / 'results.md'}"
    )


if __name__ == "__main__":
    sys.exit(main())
