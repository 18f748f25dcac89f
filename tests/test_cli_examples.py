"""Every documented example runs as written: the EXAMPLES (and QUICK START) sections of
`pdcx --help` and of every `pdcx COMMAND --help`, and the code blocks of README.md.

Each help section (or README block) is one shell script, run with `set -e` in a fresh
directory against a fresh deployment (PDCX_ROOT), after a setup that makes the files and
objects the examples name (field.npy, run1/x, pdcx://proj/a.fits, run.h5, ...). Absolute
paths in examples (/tmp/pdcx, /scratch/..., /lustre/..., /local/...) are placed under the
test's temporary directory, so `pdcx server start -n 2 --root /tmp/pdcx` starts servers of
its own there (stopped afterwards).

Examples this machine cannot run are listed below with the reason (NOT_RUN, NOT_RUN_SECTIONS);
the test says how many it did not run and fails when a listed example no longer exists, so
the lists stay true. KNOWN_BROKEN examples must still fail: once one passes, move it out.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
from conftest import REPO, pdcx_bin, run_pdcx

# Whole help sections (by command path) that need what a single test machine lacks.
NOT_RUN_SECTIONS = {
    "remote": "links two sites through a TLS gateway: tests/test_xsite*.py run that with two deployments",
    "gateway": "links two sites through a TLS gateway: tests/test_xsite*.py run that with two deployments",
    "pull": "needs a second site or an S3 bucket: tests/test_xsite*.py run pulls and pushes",
    "push": "needs a second site or an S3 bucket: tests/test_xsite*.py run pulls and pushes",
    "migrate": "needs tiers named ssd and s3 in pdcx.toml: tests/test_tiers*.py migrate between tiers",
}

# Single examples, by their text (without the trailing comment).
NOT_RUN = {
    "mpirun -n 8 pdcx server --root /lustre/me/run1": "foreground servers under mpirun run until stopped",
    "srun -N 8 --ntasks-per-node 1 sh -c 'pdcx server --root /lustre/me/run1 --bind $(hostname -i):0'": "needs Slurm",
    "pdcx server --root /tmp/pdcx --rank 0 --size 1": "a foreground server runs until Ctrl-C",
    "mpirun -n 4 pdcx server --root /scratch/pdcx": "foreground servers under mpirun run until stopped",
    "mpirun -n 8 pdcx import big.h5": "8 MPI ranks; tests/test_hdf5.py imports under mpirun",
    "pdcx import run.h5 --resume": "needs an interrupted import: tests/test_cli_import.py interrupts and resumes one",
    "mpirun -n 64 pdcx run --root /local/pdcx --prefix /local/out --home /lustre/out -- ./app": (
        "needs an MPI-IO program ./app: tests/test_mpiio*.py run real ones"
    ),
    "pdcx fits mkdir pdcx://proj": "needs libpdcx_fits.so: tests/test_fits*.py run CFITSIO programs",
    "pdcx fits mProjExec -p pdcx://raw images.tbl hdr pdcx://proj stats.tbl": "needs Montage and its tables",
    "pdcx fits mProjExec -p pdcx://raw images.tbl template.hdr pdcx://proj stats.tbl": "needs Montage and its tables",
    "pdcx fits fitscopy 'pdcx://raw/a.fits[1:100,1:100]' cut.fits": "needs libpdcx_fits.so and a real FITS image",
    "LD_PRELOAD=/usr/local/lib/libpdcx_fits.so fitscopy 'pdcx://proj/a.fits[1:100,1:100]' cut.fits": (
        "needs libpdcx_fits.so installed and a real FITS image"
    ),
    "pdcx top": "refreshes until Ctrl-C",
    "pdcx top --csv --interval 0.5 > usage.csv": "samples until Ctrl-C",
    "bash scripts/demo.sh": "installs packages and builds release binaries",
    "bash scripts/test.sh": "the whole test suite",
    "bash scripts/install-capi.sh": "installs into /usr/local",
    "mpicc prog.c $(pkg-config --cflags --libs pdcx)": "needs a PDC program prog.c: tests/test_capi*.py compile real ones",
    "PDCX_ROOT=/scratch/pdcx mpirun -n 4 ./a.out": "needs the compiled PDC program",
}

# Examples that fail today for a known reason; they must keep failing until fixed.
KNOWN_BROKEN: dict[str, str] = {}

# Made once (locally), copied into every section's directory.
FILES = r"""
import numpy as np, h5py, os
np.save("field.npy", np.arange(400.0).reshape(100, 4))
np.save("x.npy", np.arange(1000, dtype="f4") % 300)
np.save("energy.npy", np.linspace(0, 3, 1000))
np.save("temp.npy", 250 + np.arange(2000.0).reshape(20, 100) % 100)
np.save("cube.npy", np.zeros((4, 8, 200), "f4"))
for d in ("raw", "sky"):
    os.makedirs(d, exist_ok=True)
    for n in ("a", "b"):
        open(f"{d}/{n}.fits", "wb").write(bytes(2880))
open("image.fits", "wb").write(bytes(2880))
for name in ("run", "a", "b", "c", "big"):
    with h5py.File(f"{name}.h5", "w") as f:
        f.create_dataset("fields/E/x", data=np.arange(100.0), chunks=(10,))
        f.create_dataset("fields/E/y", data=np.ones(100))
"""

# The objects and files the examples name, made in the section's deployment first.
SETUP = """
pdcx put field.npy --tag step=3 >/dev/null
pdcx put x.npy --name run1/x --container run1 --tag step=3 --tag species=electron >/dev/null
pdcx put energy.npy --name run1/energy --container run1 >/dev/null
pdcx put temp.npy --name run1/temp --container run1 --tag units=K >/dev/null
pdcx put cube.npy >/dev/null
pdcx cp -q raw/a.fits raw/b.fits pdcx://proj/
pdcx cp -q raw/a.fits pdcx://work/t/a.fits
pdcx cp -q raw/a.fits pdcx://out/a.fits
"""
# Sections that make their own objects, or need more.
SETUP_FOR = {
    "put": "",
    "import": "",
    "export": SETUP + "pdcx import -q run.h5\n",
    # Versions: one named, as `pdcx tag --version` does.
    "get": SETUP + "pdcx tag field --version good >/dev/null 2>&1\n",
    "diff": SETUP + "pdcx tag field --version good >/dev/null 2>&1\n",
    "server stop": "pdcx server start -n 1 --root /tmp/pdcx >/dev/null\n",
    "server status": "pdcx server start -n 1 --root /tmp/pdcx >/dev/null\n",
    # A deployment of 3 with data, to stop and resize.
    "resize": "pdcx server start -n 3 --root /scratch/pdcx >/dev/null\n"
    "PDCX_ROOT=/scratch/pdcx pdcx put energy.npy --name e >/dev/null\n",
    # After a node restart: a root with data whose servers are down.
    "recover": "pdcx server start -n 1 --root /local/pdcx >/dev/null\npdcx server stop --root /local/pdcx\n",
}

ABS_PATH = re.compile(r"(?<![\w.])/(?:tmp|scratch|lustre|local)(?:/[\w.-]+)*")


def _examples(text: str) -> list[str]:
    """The example command lines of a help text's EXAMPLES-like sections (indented lines right
    after an all-capitals heading, or argparse's `examples:`), without their comments. EXIT
    STATUS is a table of codes, not commands."""
    out = []
    heading = r"^(?!EXIT STATUS)(?:[A-Z][A-Z ]+[^\n]*|examples):\n((?:  .*\n?)+)"
    for sec in re.finditer(heading, text, re.MULTILINE):
        for line in sec.group(1).splitlines():
            out.append(re.sub(r"\s+#\s.*$", "", line.strip()))
    return out


def _help_sections() -> list[tuple[str, list[str]]]:
    """(command path, examples) for `pdcx` and every subcommand, depth first."""
    found = []

    def walk(path: tuple[str, ...]) -> None:
        text = run_pdcx(*path, "--help").stdout
        found.append((" ".join(path) or "pdcx", _examples(text)))
        m = re.search(r"^Commands:\n((?:  .*\n)+)", text, re.MULTILINE)
        for line in m.group(1).splitlines() if m else []:
            name = line.split()[0]
            if name != "help":
                walk((*path, name))

    walk(())
    return found


def _readme_blocks() -> tuple[list[list[str]], str]:
    """README.md's bash blocks (as lines without comments) and its Python blocks, joined."""
    text = (REPO / "README.md").read_text()
    bash = [
        [re.sub(r"\s+#\s.*$", "", ln).strip() for ln in b.splitlines() if ln.strip()]
        for b in re.findall(r"^```bash\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    ]
    python = "\n".join(re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL))
    return bash, python


class _Runner:
    def __init__(self, tmp_path: Path, deployment):
        self.tmp = tmp_path
        self.deployment = deployment
        self.files = tmp_path / "files"
        self.files.mkdir()
        subprocess.run(["python3", "-c", FILES], cwd=self.files, check=True)
        bindir = str(Path(pdcx_bin()).resolve().parent)
        self.path = bindir + os.pathsep + os.environ["PATH"]
        self.not_run: list[str] = []
        self.failures: list[str] = []
        self.n = 0

    def section(self, key: str, lines: list[str], setup: str) -> None:
        reason = NOT_RUN_SECTIONS.get(key)
        run, broken = [], []
        for ln in lines:
            if reason or ln in NOT_RUN:
                self.not_run.append(f"{ln}  ({reason or NOT_RUN[ln]})")
            elif ln in KNOWN_BROKEN:
                broken.append(ln)
            else:
                run.append(ln)
        if not run and not broken:
            return
        self.n += 1
        work = self.tmp / f"s{self.n}"
        shutil.copytree(self.files, work)
        dep = self.deployment(n=1)
        places = work / "abs"
        # Every absolute path an example names lives under this section's directory.
        subst = lambda s: ABS_PATH.sub(lambda m: str(places) + m.group(0), s)
        env = dict(os.environ, PDCX_ROOT=str(dep.root), PATH=self.path)
        for p in set(ABS_PATH.findall(setup + "\n".join(run + broken))):
            (places / p.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        try:
            pre = subprocess.run(
                check=False, args=["bash", "-ec", subst(setup)], cwd=work, env=env, capture_output=True, text=True
            )
            assert pre.returncode == 0, f"setup of {key}: {pre.stderr}"
            script = "set -e\n" + "\n".join(subst(ln) for ln in run)
            p = subprocess.run(
                check=False, args=["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=300
            )
            if p.returncode != 0:
                self.failures.append(f"[{key}] exit {p.returncode}\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
            for ln in broken:
                b = subprocess.run(
                    check=False, args=["bash", "-c", subst(ln)], cwd=work, env=env, capture_output=True, timeout=120
                )
                if b.returncode == 0:
                    self.failures.append(f"[{key}] {ln!r} passes now: remove it from KNOWN_BROKEN")
        finally:
            for cluster in places.rglob("cluster.json") if places.exists() else []:
                run_pdcx("server", "stop", "--root", cluster.parent, "--timeout", "10", check=False)

    def report(self, listed: set[str], seen: set[str]) -> None:
        stale = sorted(listed - seen)
        assert not stale, f"listed examples that no longer exist: {stale}"
        if self.not_run:
            warnings.warn(f"{len(self.not_run)} examples not run here:\n  " + "\n  ".join(self.not_run), stacklevel=1)
        assert not self.failures, "\n\n".join(self.failures)


def test_help_examples_run(tmp_path, deployment):
    assert shutil.which("jq"), "the examples pipe into jq: install it (scripts/setup.sh --test)"
    sections = _help_sections()
    r = _Runner(tmp_path, deployment)
    seen = set()
    for key, lines in sections:
        seen.update(lines)
        if key == "pdcx":  # QUICK START makes its own deployment at /tmp/pdcx
            setup = ""
        else:
            setup = SETUP_FOR.get(key.removeprefix("pdcx "), SETUP)
        r.section(key, lines, setup)
    assert r.n >= 15, f"only {r.n} sections ran"
    readme = {ln for block in _readme_blocks()[0] for ln in block}
    r.report(set(NOT_RUN) | set(KNOWN_BROKEN), seen | readme)


def test_readme_examples_run(tmp_path, deployment):
    bash, python = _readme_blocks()
    r = _Runner(tmp_path, deployment)
    seen = set()
    for i, lines in enumerate(bash):
        seen.update(lines)
        r.section(f"README block {i + 1}", lines, SETUP)
    r.report(set(), seen)  # stale entries: test_help_examples_run checks both sources
    # The Python blocks run in order in one interpreter, as a reader pastes them.
    dep = deployment(n=2)
    p = subprocess.run(
        ["python3", "-c", python],
        check=False,
        cwd=tmp_path,
        env=dict(os.environ, PDCX_ROOT=str(dep.root)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(shell):
    out = run_pdcx("completion", shell).stdout
    for word in ("server", "import", "query", "completion"):
        assert word in out, (shell, word)
    if shell == "bash":
        check = subprocess.run(
            check=False,
            args=["bash", "-c", "source /dev/stdin && complete -p pdcx"],
            input=out,
            text=True,
            capture_output=True,
        )
        assert check.returncode == 0 and "pdcx" in check.stdout, check.stderr
