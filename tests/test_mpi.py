"""mpi4py ranks sharing one 2-server deployment: disjoint writes, then everybody reads all."""

from __future__ import annotations

import re
import sys

import numpy as np
from conftest import TESTS, run_mpi

sys.path.insert(0, str(TESTS))
import mpi_writer  # the worker's data patterns, to check from here too

RANKS = 4


def test_mpi_ranks_write_disjoint_regions_and_read_everything(deployment):
    dep = deployment(n=2)
    out = run_mpi(dep.env(), RANKS, "mpi_writer.py", "mpi", timeout=120)
    assert sorted(re.findall(r"rank \d+/\d+: ok", out)) == [f"rank {r}/{RANKS}: ok" for r in range(RANKS)], out

    # And from outside the MPI job, after it has exited.
    client = dep.client()
    o1, orows, ocols = (client.open_object(f"mpi/{n}") for n in ("1d", "rows", "cols"))
    assert {o.metadata["owner"] for o in (o1, orows, ocols)} == {0, 1}, "objects should span both servers"
    assert np.array_equal(o1[...], np.concatenate([mpi_writer.part_1d(r) for r in range(RANKS)]))
    assert np.array_equal(orows[...], np.concatenate([mpi_writer.part_rows(r) for r in range(RANKS)]))
    assert np.array_equal(ocols[...], np.hstack([mpi_writer.part_cols(r, RANKS) for r in range(RANKS)]))
    assert dict(client.open_container("mpi").tags) == {"ranks": RANKS}
