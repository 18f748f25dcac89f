"""Per-node aggregation of metadata lookups: MPI ranks of one node opening the same object reach
its owner with about one request, through their node-local server, and nothing is cached."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pdcx
import pytest
from conftest import TESTS, owner_of_name

RANKS = 6


def name_owned_by(rank: int, n: int, prefix: str) -> str:
    return next(f"{prefix}{i}" for i in range(1000) if owner_of_name(f"{prefix}{i}", n) == rank)


def run_opens(dep, name: str, rounds: int, local: int, aggregate: bool) -> dict:
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed (run scripts/setup.sh)")
    pytest.importorskip("mpi4py")
    env = dep.env()
    env["PDCX_AGGREGATE"] = "1" if aggregate else "0"
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(RANKS)]
    cmd += [sys.executable, str(TESTS / "mpi_open.py"), name, str(rounds), str(local)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("{"))
    return json.loads(line)


@pytest.fixture
def dep(deployment, monkeypatch):
    # A wide window: oversubscribed Python ranks leave a barrier up to tens of ms apart here.
    monkeypatch.setenv("PDCX_AGG_WINDOW_US", "100000")
    return deployment(n=2)


def test_ranks_of_one_node_opening_one_object_reach_the_owner_once(dep):
    name = name_owned_by(0, 2, "agg/")
    dep.client().create_container("agg").create_object(name, (4,), "int32")
    out = run_opens(dep, name, rounds=3, local=1, aggregate=True)
    assert out["aggregation"] is True
    for row in out["rounds"]:
        # One forwarded lookup standing for every rank (a straggler may need a second one).
        assert row["lookups"] == row["lookups_forwarded"] <= 2, out
        assert row["lookups_forwarded_clients"] == RANKS, out

    plain = run_opens(dep, name, rounds=2, local=1, aggregate=False)
    for row in plain["rounds"]:
        assert row == {**row, "lookups": RANKS, "lookups_forwarded": 0, "lookups_forwarded_clients": 0}, plain


def test_relayed_lookups_see_new_dims_at_once(dep, monkeypatch):
    """Nothing is cached on the way: a lookup through the node-local server right after a
    change at the owner sees the change (deletion is covered in crates/server/tests/metaagg.rs;
    Python has no delete call)."""
    name = name_owned_by(0, 2, "fresh/")
    dep.client().create_container("fresh").create_object(name, (4,), "int32")
    out = run_opens(dep, name, rounds=1, local=1, aggregate=True)
    assert out["rounds"][0]["lookups_forwarded"] >= 1
    owner = dep.client()
    owner.open_object(name).resize((10,))
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    relayed = pdcx.connect(dep.root)
    assert relayed.local_server == 1 and relayed.aggregation
    before = json.loads(relayed._c.stats(0))["lookups_forwarded"]
    assert relayed.open_object(name).shape == (10,)
    assert json.loads(relayed._c.stats(0))["lookups_forwarded"] == before + 1
