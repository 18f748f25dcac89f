#!/usr/bin/env python3
"""Optional tool, not part of CI: compiles upstream PDC's own test programs (src/tests of a
branch of a LOCAL git mirror of hpc-io/pdc) unchanged against the installed libpdcx and runs
the ones PDC's CMakeLists registers as tests, each on a fresh pdcx deployment with the
arguments, server and client counts PDC gives it. CI has no network and no mirror; without a
mirror this tool says so and exits 2 (it never reports a pass it did not run).

    python3 scripts/pdc_upstream.py --mirror /work/.mirror/hpc-io+pdc/repo --branch stable \
        [--pkg-config-path DIR/lib/pkgconfig] [--pdcx target/release/pdcx] [--only REGEX]

Prints one line per program (compile) and per registered test (run), then a summary; exits 0
only when every compiled, registered test passed. Nothing of PDC's is copied anywhere but the
scratch directory (`--work`, default a fresh temporary directory).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TEST_TIMEOUT_S = 300
NOARGS_TIMEOUT_S = 60


@dataclass
class Case:
    """One `add_test` of PDC's CMakeLists: the programs it runs and how."""

    name: str
    driver: str  # the PDC runner script named in the add_test line ("" for --all-programs)
    programs: list[str]
    args: list[str]
    servers: int = 1
    clients: int = 1


def parse_cases(cmake: str) -> list[Case]:
    """The active (not commented out) add_test lines, as PDC's runner scripts read them."""
    cases = []
    for line in cmake.splitlines():
        m = re.match(r"\s*add_test\s*\(\s*NAME\s+(\S+)\s.*?COMMAND\s+(\S+)\s+(.*)\)\s*$", line)
        if not m:
            continue
        name, driver, rest = m.group(1), Path(m.group(2)).name, shlex.split(m.group(3))
        rest = [a for a in rest if a != "${MPI_RUN_CMD}"]
        if driver == "run_test.sh":
            cases.append(Case(name, driver, [rest[0]], rest[1:4]))
        elif driver == "mpi_test.sh":
            # mpi_test.sh EXE MPI_CMD N_SERVERS N_CLIENTS ARGS... (up to three arguments)
            cases.append(Case(name, driver, [rest[0]], rest[3:6], servers=int(rest[1]), clients=int(rest[2])))
        elif driver in ("run_multiple_test.sh", "run_checkpoint_restart_test.sh"):
            cases.append(Case(name, driver, rest, []))
        elif driver == "run_multiple_mpi_test.sh":
            # run_multiple_mpi_test.sh MPI_CMD N_SERVERS N_CLIENTS EXE...; the script itself
            # gives vpicio and bdcats the argument 1024.
            cases.append(Case(name, driver, rest[2:], ["1024"], servers=int(rest[0]), clients=int(rest[1])))
        else:
            print(f"skipping {name}: unknown runner {driver}", file=sys.stderr)
    return cases


def sh(cmd: list[str], env: dict[str, str], cwd: Path, timeout: int = TEST_TIMEOUT_S) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out + f"\n[timed out after {timeout}s]"
    return p.returncode, p.stdout + p.stderr


class Deployment:
    def __init__(self, pdcx: str, root: Path, servers: int, env: dict[str, str]):
        self.pdcx, self.root, self.servers, self.env = pdcx, root, servers, env

    def start(self) -> None:
        rc, out = sh(
            [self.pdcx, "server", "start", "-n", str(self.servers), "--root", str(self.root)], self.env, self.root
        )
        if rc != 0:
            raise RuntimeError(f"pdcx server start failed: {out}")

    def stop(self) -> None:
        sh([self.pdcx, "server", "stop", "--root", str(self.root)], self.env, self.root, timeout=120)


def mpirun(n: int) -> list[str]:
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(n)]


def run_case(case: Case, bins: Path, pdcx: str, scratch: Path, base_env: dict[str, str]) -> tuple[bool, str]:
    root = Path(tempfile.mkdtemp(prefix=f"{case.name}.", dir=scratch))
    env = dict(base_env, PDCX_ROOT=str(root))
    dep = Deployment(pdcx, root, case.servers, env)
    log = []
    ok = True
    try:
        dep.start()
        for i, prog in enumerate(case.programs):
            exe = bins / Path(prog).name
            if case.driver == "run_checkpoint_restart_test.sh" and i > 0:
                dep.stop()  # the second program reads after a server restart
                dep.start()
            cmd = [*mpirun(case.clients), str(exe), *case.args]
            # A program no add_test names may be a benchmark with large defaults.
            rc, out = sh(cmd, env, root, timeout=TEST_TIMEOUT_S if case.driver else NOARGS_TIMEOUT_S)
            log.append(f"$ {' '.join(cmd[3:])}  -> {rc}\n{out}")
            ok = ok and rc == 0
    except RuntimeError as e:
        ok = False
        log.append(str(e))
    finally:
        dep.stop()
    if ok:
        shutil.rmtree(root, ignore_errors=True)
    return ok, "\n".join(log)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mirror", default=os.environ.get("PDC_MIRROR", "/work/.mirror/hpc-io+pdc/repo"))
    ap.add_argument("--branch", default="stable")
    ap.add_argument("--pkg-config-path", default=None, help="where pdcx.pc is (default: pkg-config's own path)")
    ap.add_argument("--pdcx", default=shutil.which("pdcx") or "pdcx", help="the pdcx binary the servers run")
    ap.add_argument("--work", default=None, help="scratch directory (default: a new temporary one)")
    ap.add_argument("--only", default=None, help="regular expression on test names")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument(
        "--all-programs",
        type=int,
        default=0,
        metavar="RANKS",
        help="also run every compiled program no add_test names, without arguments, on RANKS ranks and 1 server",
    )
    a = ap.parse_args()

    if not (Path(a.mirror) / "HEAD").exists() and not (Path(a.mirror) / ".git").exists():
        print(f"pdc_upstream: no git mirror of hpc-io/pdc at {a.mirror}; nothing was run", file=sys.stderr)
        return 2
    work = Path(a.work or tempfile.mkdtemp(prefix=f"pdc-upstream-{a.branch}."))
    src, bins, scratch = work / "src", work / "bin", work / "deployments"
    for d in (src, bins, scratch):
        d.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if a.pkg_config_path:
        env["PKG_CONFIG_PATH"] = a.pkg_config_path
    archive = subprocess.run(
        ["git", "-C", a.mirror, "archive", a.branch, "src/tests"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        print(f"pdc_upstream: branch {a.branch} has no src/tests: {archive.stderr.decode()}", file=sys.stderr)
        return 2
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    tests_dir = src / "src/tests"
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", "pdcx"], env=env, capture_output=True, text=True, check=True
    ).stdout.split()

    compiled, failed_compile = set(), {}
    for c in sorted(tests_dir.glob("*.c")):
        rc, out = sh(["mpicc", "-o", str(bins / c.stem), str(c), *flags, "-lm"], env, work, timeout=120)
        if rc == 0:
            compiled.add(c.stem)
        else:
            first = next((ln for ln in out.splitlines() if "error" in ln), out.strip()[:200])
            failed_compile[c.stem] = first
    print(f"== {a.branch}: {len(compiled)} of {len(compiled) + len(failed_compile)} programs compile unchanged")
    for name, why in sorted(failed_compile.items()):
        print(f"COMPILE-FAIL {name}: {why}")
    if a.compile_only:
        return 0

    cases = parse_cases((tests_dir / "CMakeLists.txt").read_text())
    if a.all_programs:
        named = {Path(p).name for c in cases for p in c.programs}
        cases += [Case(f"{p}.noargs", "", [p], [], clients=a.all_programs) for p in sorted(compiled - named)]
    if a.only:
        cases = [c for c in cases if re.search(a.only, c.name)]
    passed, failed, not_built = [], [], []
    for case in cases:
        missing = [p for p in case.programs if Path(p).name not in compiled]
        if missing:
            not_built.append(case.name)
            print(f"NOT-BUILT {case.name} ({', '.join(missing)})")
            continue
        t0 = time.monotonic()
        ok, log = run_case(case, bins, a.pdcx, scratch, env)
        dt = time.monotonic() - t0
        (work / f"{case.name}.log").write_text(log)
        label = f"{case.name} [{case.servers} srv, {case.clients} rk] {' '.join(case.args)}".rstrip()
        print(f"{'PASS' if ok else 'FAIL'} {label} ({dt:.1f}s)", flush=True)
        (passed if ok else failed).append(case.name)
    print(f"== {a.branch}: {len(passed)} passed, {len(failed)} failed, {len(not_built)} not built; logs in {work}")
    return 0 if not failed and not not_built else 1


if __name__ == "__main__":
    sys.exit(main())
