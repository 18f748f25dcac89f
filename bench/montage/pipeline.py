"""Background-matched Montage mosaic, one timed subprocess per component.

    python3 bench/montage/pipeline.py RAW WORK TABLES

RAW holds the input images (e.g. from ``sky.py``), every FITS image the pipeline writes goes
under WORK (``proj/``, ``diff/``, ``corr/``, ``mosaic.fits``), and the small text tables
(``*.tbl``, ``template.hdr``) go to TABLES, always a plain local directory.

RAW and WORK are deliberately handled as opaque string prefixes: the benchmark runs the same
pipeline once on plain files and once on ``pdcx://...`` prefixes served by a preloaded CFITSIO
driver, so paths are only ever built by string joins (``f"{work}/proj"``), never through
os.path/pathlib, and directories are only created when the prefix is a local path (no
``://``). For such prefixes the directories are made by mkdir(1) under the tools' environment.
(The one os.path call, relpath, is applied to local absolute prefixes only; see below.)

Not all I/O goes through CFITSIO, which matters for a CFITSIO-level driver. Montage itself
calls libc on the prefixes (seen with strace on Montage 6.0): stat() of the directories
(mImgtbl on its input, mProjExec on -p RAW and WORK/proj, mDiffExec on WORK/diff, mBgExec on
WORK/corr; a failing stat is "Output directory ... does not exist"), opendir()/readdir() plus
a stat() per entry in mImgtbl, stat() of each input before opening it (mProjExec, mFitExec)
and unlink() of every output image and its _area twin before creating it (mProjExec,
mDiffExec, mBgExec, mAdd). Image data itself is only read/written through CFITSIO.

The steps are the classic Montage background-matching recipe::

    mImgtbl   RAW                                  -> images.tbl
    mMakeHdr  images.tbl                           -> template.hdr
    mProjExec -p RAW images.tbl template.hdr       -> WORK/proj, stats.tbl
    mImgtbl   WORK/proj                            -> pimages.tbl
    mOverlaps pimages.tbl                          -> diffs.tbl
    mDiffExec -p WORK/proj diffs.tbl template.hdr  -> WORK/diff
    mFitExec  diffs.tbl WORK/diff                  -> fits.tbl
    mBgModel  pimages.tbl fits.tbl                 -> corrections.tbl
    mBgExec   -p WORK/proj pimages.tbl corrections.tbl -> WORK/corr
    mAdd      -p WORK/corr pimages.tbl template.hdr -> WORK/mosaic.fits

Montage tools report their outcome on stdout as ``[struct stat="OK", key=value, ...]`` and
often exit 0 even on ``stat="ERROR"``; worse, the *Exec drivers say ``OK`` when some of
their per-image sub-steps failed and only count them (``failed=3``). A benchmark that
silently times a half-failed run is worse than useless, so every step's status line is
parsed and checked, including those counts.

One Montage trap shapes how mImgtbl is called: it records file names *with* the directory
when that directory is an absolute path, and every later tool then ignores its ``-p dir``
for absolute names (Montage's filePath()). Listing an absolute WORK/proj would thus make
mAdd silently build the mosaic from the uncorrected projections instead of WORK/corr. So
local absolute prefixes are handed to mImgtbl as paths relative to the current directory
(``pdcx://...`` never starts with "/" and needs nothing), and the tables are checked to hold
bare file names.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable

#: The status line every Montage tool prints last: ``[struct stat="OK", count=12, ...]``.
STATUS_RE = re.compile(r"^\[struct\s+stat=\"(?P<stat>[^\"]*)\"(?P<rest>.*)\]\s*$")
#: ``key=value`` items of a status line; values are numbers or double-quoted strings.
ITEM_RE = re.compile(r"(\w+)\s*=\s*(\"(?:[^\"\\]|\\.)*\"|[^,\]]+)")
#: Status keys that count per-item failures: any non-zero value fails the step.
FAILURE_KEYS = ("failed", "badfits", "badwcs", "missing")


class MontageError(RuntimeError):
    """A Montage tool failed: non-zero exit, ``stat != "OK"`` or a failure count > 0."""


def parse_status(stdout: str) -> dict[str, str | int | float]:
    """The last ``[struct stat=...]`` line of a tool's stdout as a dict (``stat`` included).

    Numbers are converted, quoted strings unquoted. Returns ``{}`` if there is no status line.
    """
    for line in reversed(stdout.splitlines()):
        m = STATUS_RE.match(line.strip())
        if not m:
            continue
        out: dict[str, str | int | float] = {"stat": m["stat"]}
        for key, raw in ITEM_RE.findall(m["rest"]):
            raw = raw.strip()
            if raw.startswith('"'):
                out[key] = raw[1:-1]
                continue
            try:
                out[key] = int(raw)
            except ValueError:
                try:
                    out[key] = float(raw)
                except ValueError:
                    out[key] = raw
        return out
    return {}


def montage(tool: str, *args: str, env: dict[str, str] | None = None) -> tuple[dict[str, str | int | float], float]:
    """Run one Montage tool, check its status; return (status dict, wall seconds).

    Raises MontageError naming the tool, its arguments and Montage's message when the exit
    code is non-zero, there is no status line, ``stat`` is not ``OK`` or a failure count
    (see FAILURE_KEYS) is non-zero.
    """
    cmd = [tool, *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    status = parse_status(proc.stdout)
    problem = None
    if proc.returncode != 0:
        problem = f"exit code {proc.returncode}"
    elif not status:
        problem = "no [struct stat=...] status line"
    elif status["stat"] != "OK":
        problem = f"stat={status['stat']}"
    else:
        bad = {k: status[k] for k in FAILURE_KEYS if isinstance(status.get(k), int) and status[k] != 0}
        if bad:
            problem = "failures reported: " + ", ".join(f"{k}={v}" for k, v in bad.items())
    if problem:
        msg = status.get("msg", "")
        detail = "\n".join(s for s in (proc.stdout.strip(), proc.stderr.strip()) if s)
        raise MontageError(f"{tool} {' '.join(args)}: {problem}" + (f": {msg}" if msg else "") + f"\n{detail}")
    return status, elapsed


def expect_count(tool: str, status: dict[str, str | int | float], expected: int) -> None:
    """Fail if a tool processed a different number of items than the previous step produced.

    Catches e.g. stale or missing files under a prefix making mImgtbl see the wrong set.
    """
    if status.get("count") != expected:
        raise MontageError(f"{tool}: count={status.get('count')}, expected {expected}: {status}")


def is_local(prefix: str) -> bool:
    """A prefix is a plain local path unless it looks like a URL (``scheme://...``)."""
    return "://" not in prefix


def listing_dir(prefix: str) -> str:
    """The directory argument for mImgtbl: ``prefix``, made relative if it is absolute.

    mImgtbl strips the directory from the recorded names only for non-absolute directories
    (see the module docstring); URL-like prefixes are passed through untouched.
    """
    if is_local(prefix) and prefix.startswith("/"):
        return os.path.relpath(prefix)
    return prefix


def table_column(path: str, column: str) -> list[str]:
    """Values of one column of a Montage (IPAC fixed-width) table, stripped.

    Columns are delimited by the ``|`` positions of the first header line; a tiny parser
    keeps this module stdlib-only.
    """
    with open(path) as f:
        lines = [ln.rstrip("\n") for ln in f if not ln.startswith("\\")]
    header = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
    bars = [i for i, c in enumerate(lines[header]) if c == "|"]
    names = [lines[header][a + 1 : b].strip() for a, b in itertools.pairwise(bars)]
    k = names.index(column)
    start, end = bars[k], bars[k + 1] + 1
    return [ln[start:end].strip() for ln in lines[header + 1 :] if not ln.startswith("|") and ln.strip()]


def expect_bare_names(path: str) -> None:
    """Fail unless the table's ``fname`` column holds names without directories.

    Names with directories would override the ``-p`` of later tools (see module docstring).
    """
    bad = [n for n in table_column(path, "fname") if "/" in n]
    if bad:
        raise MontageError(f"{path}: file names carry a directory, -p would be ignored: {bad[:3]}")


def run(
    raw: str,
    work: str,
    tables: str,
    env: dict[str, str] | None = None,
    before_step: Callable[[str], None] | None = None,
    after_step: Callable[[str], None] | None = None,
) -> dict[str, float]:
    """Run the background-matched mosaic pipeline; return component -> wall seconds.

    ``raw``/``work`` are string prefixes (local paths or e.g. ``pdcx://w``), ``tables`` a
    local directory. ``env`` entries are added to (and override) the current environment of
    every tool, so callers can pass just ``{"LD_PRELOAD": ...}`` without losing PATH.
    Components are keyed by tool name, with ``mImgtbl`` split into ``mImgtbl_raw`` and
    ``mImgtbl_proj``; the dict is in pipeline order. ``before_step(name)`` runs untimed before
    each component (e.g. dropping the page cache); ``after_step(name)`` runs after it and is
    counted in its time (e.g. syncing its outputs to a shared file system).
    """
    full_env = None if env is None else {**os.environ, **env}
    proj, diff, corr, mosaic = f"{work}/proj", f"{work}/diff", f"{work}/corr", f"{work}/mosaic.fits"
    os.makedirs(tables, exist_ok=True)
    # mProjExec/mDiffExec/mBgExec refuse to run if their output directory is missing.
    if is_local(work):
        for d in (proj, diff, corr):
            os.makedirs(d, exist_ok=True)
    else:
        # mkdir(1) under the tools' environment: the preloaded driver makes the directory
        # (pdcx: a marker object), so this works for any scheme whose driver handles mkdir.
        for d in (work, proj, diff, corr):
            subprocess.run(["mkdir", d], env=full_env, capture_output=True, check=False)
    names = ("images.tbl", "template.hdr", "stats.tbl", "pimages.tbl", "diffs.tbl", "fits.tbl", "corrections.tbl")
    tbl = {n: os.path.join(tables, n) for n in names}

    times: dict[str, float] = {}

    def step(name: str, tool: str, *args: str) -> dict[str, str | int | float]:
        if before_step is not None:
            before_step(name)
        status, times[name] = montage(tool, *args, env=full_env)
        if after_step is not None:
            t0 = time.perf_counter()
            after_step(name)
            times[name] += time.perf_counter() - t0
        return status

    st = step("mImgtbl_raw", "mImgtbl", listing_dir(raw), tbl["images.tbl"])
    n_raw = int(st.get("count", 0))
    if n_raw == 0:
        raise MontageError(f"mImgtbl {raw}: no FITS images found")
    expect_bare_names(tbl["images.tbl"])

    step("mMakeHdr", "mMakeHdr", tbl["images.tbl"], tbl["template.hdr"])

    st = step("mProjExec", "mProjExec", "-p", raw, tbl["images.tbl"], tbl["template.hdr"], proj, tbl["stats.tbl"])
    expect_count("mProjExec", st, n_raw)
    n_proj = n_raw - int(st.get("nooverlap", 0))

    st = step("mImgtbl_proj", "mImgtbl", listing_dir(proj), tbl["pimages.tbl"])
    expect_count("mImgtbl (projected)", st, n_proj)
    expect_bare_names(tbl["pimages.tbl"])

    st = step("mOverlaps", "mOverlaps", tbl["pimages.tbl"], tbl["diffs.tbl"])
    n_diff = int(st.get("count", 0))
    if n_diff == 0 and n_proj > 1:
        raise MontageError("mOverlaps: no overlapping image pairs, nothing to background-match")

    st = step("mDiffExec", "mDiffExec", "-p", proj, tbl["diffs.tbl"], tbl["template.hdr"], diff)
    expect_count("mDiffExec", st, n_diff)

    st = step("mFitExec", "mFitExec", tbl["diffs.tbl"], tbl["fits.tbl"], diff)
    expect_count("mFitExec", st, n_diff)

    step("mBgModel", "mBgModel", tbl["pimages.tbl"], tbl["fits.tbl"], tbl["corrections.tbl"])

    st = step("mBgExec", "mBgExec", "-p", proj, tbl["pimages.tbl"], tbl["corrections.tbl"], corr)
    expect_count("mBgExec", st, n_proj)

    step("mAdd", "mAdd", "-p", corr, tbl["pimages.tbl"], tbl["template.hdr"], mosaic)
    return times


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: run the pipeline and print per-component times."""
    p = argparse.ArgumentParser(
        description="Run the background-matched Montage mosaic pipeline (mImgtbl .. mAdd) and time each tool.",
        epilog="RAW/WORK may be URL-like prefixes (pdcx://raw) when a CFITSIO driver is preloaded; "
        "pass it with --preload or LD_PRELOAD in the environment.",
    )
    p.add_argument("raw", help="prefix holding the input FITS images")
    p.add_argument("work", help="prefix for all intermediate and output images (proj/ diff/ corr/ mosaic.fits)")
    p.add_argument("tables", help="local directory for the .tbl and .hdr files")
    p.add_argument("--preload", help="shared library to LD_PRELOAD into every Montage tool")
    a = p.parse_args(argv)
    env = {"LD_PRELOAD": a.preload} if a.preload else None
    try:
        times = run(a.raw, a.work, a.tables, env)
    except MontageError as e:
        sys.exit(f"error: {e}")
    width = max(len(k) for k in times)
    for name, secs in times.items():
        print(f"{name:<{width}}  {secs:8.3f} s")
    print(f"{'total':<{width}}  {sum(times.values()):8.3f} s")


if __name__ == "__main__":
    main()
