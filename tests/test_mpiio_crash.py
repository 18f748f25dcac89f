"""Crashes of unmodified MPI-IO programs logged by pdcx: after a crash and `pdcx recover`,
the home file holds one complete epoch, at least the last synced one.

The program (tests/c/mpiio_epochs.c, 4 ranks under real `mpirun`, collective writes) writes a
checkpoint file in epochs, each ended by MPI_File_sync, under `pdcx run`. We kill -9 a rank,
every server, or a server at a named crash point (a pdcx built with crash points), then run
`pdcx recover`, and check the oracle:

- the home file is exactly the content of one complete epoch (never a mix, never torn);
- that epoch is at least the last one whose MPI_File_sync returned (0 bytes lost);
- a rerun of the program completes and leaves exactly its final epoch at the home (the
  crashed run's writes after its last consistency point never reach it).

Random kill times come from a seeded generator (PDCX_CRASH_SEED, printed) so a failure can be
replayed.
"""

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, pdcx_bin, pid_alive, run_pdcx, wait_until

RANKS = 4
BLOCK = 300_000  # > 256 KiB: one-copy writes into the node's log
HEADER = 64


def golden(epoch: int, epochs: int) -> bytes:
    """The file after `epoch` epochs (see mpiio_epochs.c)."""
    out = bytearray(HEADER + RANKS * BLOCK)
    head = f"epoch {epoch} of {epochs}".encode()
    out[: len(head)] = head
    for r in range(RANKS):
        base = (epoch * 31 + r * 7) % 251
        row = bytes((base + i) % 251 for i in range(251))
        block = (row * (BLOCK // 251 + 1))[:BLOCK]
        out[HEADER + r * BLOCK : HEADER + (r + 1) * BLOCK] = block
    return bytes(out)


def home_epoch(path: Path, epochs: int) -> int:
    """Which complete epoch the home file holds (0: none yet); fails on anything else."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    m = re.match(rb"epoch (\d+) of", data)
    assert m, f"home file {path} has no header: {data[:80]!r}"
    e = int(m.group(1))
    assert data == golden(e, epochs), f"home file holds a torn or mixed epoch {e}"
    return e


@pytest.fixture(scope="module")
def epochs_prog(tmp_path_factory):
    if shutil.which("mpicc") is None or shutil.which("mpirun") is None:
        pytest.skip("mpicc/mpirun not installed (scripts/setup.sh --test)")
    out = tmp_path_factory.mktemp("prog") / "mpiio_epochs"
    subprocess.run(["mpicc", "-O2", "-o", str(out), str(REPO / "tests/c/mpiio_epochs.c")], check=True)
    return out


def check_run_available():
    p = run_pdcx("run", "--help", check=False)
    if p.returncode != 0:
        pytest.skip("this pdcx has no `run`")


def start_job(dep_root: Path, prog: Path, out: Path, home: Path, epochs: int, sleep_ms: int, io: str = "ompio"):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("PDCX_CRASH_AT", None)
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(RANKS), "--mca", "io", io]
    cmd += [pdcx_bin(), "run", "--root", str(dep_root), "--prefix", str(out), "--home", str(home), "--"]
    cmd += [str(prog), str(out / "ckpt.dat"), str(epochs), str(BLOCK), str(sleep_ms)]
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def finish(job, timeout: float = 120, may_hang: bool = False) -> tuple[int, int, str]:
    """(exit code, last epoch rank 0 saw synced, output). With `may_hang` a job still running
    after `timeout` is killed (an MPI job whose storage died may block in a collective, as it
    would on a failed file system); else that fails the test."""
    try:
        out, err = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        out, err = job.communicate()
        if not may_hang:
            raise AssertionError(f"job hung:\n{out}\n{err}") from None
    synced = [int(x) for x in re.findall(r"synced (\d+)", out)]
    return job.returncode, max(synced, default=0), out + err


def rerun_and_check(dep_root: Path, prog: Path, out: Path, home: Path, epochs: int):
    job = start_job(dep_root, prog, out, home, epochs, 0)
    rc, synced, text = finish(job)
    assert rc == 0 and synced == epochs, text
    run_pdcx("flush", "--root", dep_root, "--stall", "60", timeout=120)
    assert home_epoch(home / "ckpt.dat", epochs) == epochs
    # `pdcx ls` lists the file with its last version copied home.
    listing = run_pdcx("ls", "--root", dep_root).stdout
    row = next((ln for ln in listing.splitlines() if ln.startswith("mpiio/ckpt.dat ") and "done" in ln), None)
    assert row and str(home / "ckpt.dat") in row, listing


def seed() -> int:
    s = int(os.environ.get("PDCX_CRASH_SEED", str(int(time.time()) % 100000)))
    print(f"PDCX_CRASH_SEED={s}", file=sys.stderr)
    return s


EPOCHS = 10  # x 300 ms of "compute": the job runs ~3 s, past the latest kill time


def start_running_job(deployment, prog: Path, tmp_path: Path):
    """A 2-server deployment and the epochs job running on it, after a seeded random delay:
    (dep, out, home, job, rng)."""
    check_run_available()
    rng = random.Random(seed())
    dep = deployment(n=2)
    out, home = tmp_path / "out", tmp_path / "home"
    job = start_job(dep.root, prog, out, home, EPOCHS, 300)
    time.sleep(rng.uniform(0.4, 1.6))
    return dep, out, home, job, rng


def check_no_synced_epoch_lost(home: Path, synced: int, text: str) -> int:
    got = home_epoch(home / "ckpt.dat", EPOCHS)
    assert got >= synced, f"epoch {synced} was synced but the home holds epoch {got}\n{text}"
    return got


def test_kill9_of_a_rank_loses_no_synced_epoch(deployment, epochs_prog, tmp_path):
    dep, out, home, job, rng = start_running_job(deployment, epochs_prog, tmp_path)
    pgrep = subprocess.run(["pgrep", "-f", str(epochs_prog)], check=False, capture_output=True, text=True)
    victims = [int(p) for p in pgrep.stdout.split() if int(p) != job.pid]
    assert victims, "no rank of the job was running at the kill time: nothing was tested"
    os.kill(rng.choice(victims), signal.SIGKILL)
    _rc, synced, text = finish(job)
    run_pdcx("flush", "--root", dep.root, "--stall", "60", timeout=120)
    check_no_synced_epoch_lost(home, synced, text)
    rerun_and_check(dep.root, epochs_prog, out, home, EPOCHS)


def test_kill9_of_every_server_then_recover(deployment, epochs_prog, tmp_path):
    dep, out, home, job, _rng = start_running_job(deployment, epochs_prog, tmp_path)
    dep.kill9()
    rc, synced, text = finish(job, timeout=12, may_hang=True)
    assert rc != 0 or synced == EPOCHS, text
    p = run_pdcx("recover", "--root", dep.root, "--stall", "60", timeout=180)
    dep.running = True
    assert "recovered" in p.stdout, p.stdout + p.stderr
    got = check_no_synced_epoch_lost(home, synced, text)
    # Recovering again finds nothing to do.
    p = run_pdcx("recover", "--root", dep.root, timeout=60)
    assert "recovered: 0 versions" in p.stdout, p.stdout
    assert home_epoch(home / "ckpt.dat", EPOCHS) == got
    rerun_and_check(dep.root, epochs_prog, out, home, EPOCHS)


@pytest.mark.skipif(not os.environ.get("PDCX_CRASH_BIN"), reason="needs PDCX_CRASH_BIN: a pdcx built with crash points")
@pytest.mark.parametrize(
    "point",
    [
        "seal.after_row:2",
        "home.after_tmp_written:1",
        "home.after_tmp_written:2",
        "home.after_rename:2",
        "home.after_base:1",
    ],
)
def test_server_crash_at_a_named_point_then_recover(deployment, epochs_prog, tmp_path, point):
    check_run_available()
    dep = deployment(n=2, start=False)
    crash_bin = os.environ["PDCX_CRASH_BIN"]
    env = dict(os.environ, PDCX_CRASH_AT=point)
    subprocess.run(
        [crash_bin, "server", "start", "-n", "2", "--root", str(dep.root)],
        env=env,
        check=True,
        capture_output=True,
        timeout=90,
    )
    dep.running = True
    pids = dep.pids()
    dep._seen_pids.update(pids)
    out, home = tmp_path / "out", tmp_path / "home"
    epochs = 3
    job = start_job(dep.root, epochs_prog, out, home, epochs, 300)
    # The owner dies at the point; the program then fails at its next consistency point.
    wait_until(lambda: any(not pid_alive(p) for p in pids), 60, f"a server to die at {point}")
    _rc, synced, text = finish(job, timeout=12, may_hang=True)
    for p in pids:  # the survivor too: recover restarts the whole deployment
        if pid_alive(p):
            os.kill(p, signal.SIGKILL)
    wait_until(lambda: not any(pid_alive(p) for p in pids), 30, "servers to be gone")
    before = home_epoch(home / "ckpt.dat", epochs)
    assert before <= synced + 1, text
    run_pdcx("recover", "--root", dep.root, "--stall", "60", timeout=180)
    got = home_epoch(home / "ckpt.dat", epochs)
    assert got >= max(synced, before), f"{point}: synced {synced}, home before {before}, after {got}\n{text}"
    rerun_and_check(dep.root, epochs_prog, out, home, epochs)
