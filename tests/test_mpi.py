"""mpi4py ranks sharing one 2-server deployment: disjoint writes, then everybody reads all."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import TESTS

sys.path.insert(0, str(TESTS))
import mpi_writer  # the worker's data patterns, to check from here too

RANKS = 4


def test_mpi_ranks_write_disjoint_regions_and_read_everything(deployment):
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed (run scripts/setup.sh)")
    pytest.importorskip("mpi4py")
    dep = deployment(n=2)
    env = dep.env()
    p = subprocess.run(
        [
            "mpirun",
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            str(RANKS),
            sys.executable,
            str(TESTS / "mpi_writer.py"),
            "mpi",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    # Ranks share one stdout pipe, so their lines may interleave.
    assert sorted(re.findall(r"rank \d+/\d+: ok", p.stdout)) == [f"rank {r}/{RANKS}: ok" for r in range(RANKS)], out

    # And from outside the MPI job, after it has exited.
    client = dep.client()
    o1, orows, ocols = (client.open_object(f"mpi/{n}") for n in ("1d", "rows", "cols"))
    assert {o.metadata["owner"] for o in (o1, orows, ocols)} == {0, 1}, "objects should span both servers"
    assert np.array_equal(o1[...], np.concatenate([mpi_writer.part_1d(r) for r in range(RANKS)]))
    assert np.array_equal(orows[...], np.concatenate([mpi_writer.part_rows(r) for r in range(RANKS)]))
    assert np.array_equal(ocols[...], np.hstack([mpi_writer.part_cols(r, RANKS) for r in range(RANKS)]))
    assert dict(client.open_container("mpi").tags) == {"ranks": RANKS}
