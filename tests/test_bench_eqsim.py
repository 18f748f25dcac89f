"""bench/eqsim/run.py (the EQSIM access patterns of PDC-XF §V-E) runs against a real
deployment, prints its table, and checks every pdcx answer against h5py's: a run on correct
data passes, a run after one element of the pdcx copy was changed fails loudly.

CI (scripts/test.sh sets PDCX_REQUIRE_H5PY=1) fails here instead of skipping without h5py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import pdcx_bin

RUN = Path(__file__).resolve().parents[1] / "bench/eqsim/run.py"

try:
    import h5py  # noqa: F401 (the benchmark needs it)
except ImportError:
    if os.environ.get("PDCX_REQUIRE_H5PY") == "1":
        pytest.fail("PDCX_REQUIRE_H5PY=1 (CI: scripts/setup.sh --test installs it) but h5py is missing", pytrace=False)
    pytest.skip("h5py is not installed", allow_module_level=True)


def run(dep, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PDCX_BIN=pdcx_bin())
    args = [sys.executable, str(RUN), "--small", "--reps", "1", "--no-drop-caches", "--root", str(dep.root)]
    args += ["--out", str(out), "--json", str(out / "r.json"), *extra]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_small_run_prints_the_table_and_matches_h5py(deployment, tmp_path):
    dep = deployment(n=2)
    p = run(dep, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "EQSIM patterns on vx[32, 128, 128]" in out, out
    assert "caches NOT dropped" in out, out  # --no-drop-caches says its cold is not cold
    for name in ("1 point", "2 box 32x32", "3 threshold", "4 down x20", "5 down x3", "6 lat/lon box"):
        assert sum(line.startswith(name) for line in out.splitlines()) == 2, (name, out)  # times, bytes
    assert out.count("MET ") + out.count("NOT MET") >= 6, out
    r = json.loads((tmp_path / "r.json").read_text())
    # h5py with a chunk cache gives the reference; h5py cold, pdcx warm and cold are checked.
    assert r["verified_results"] == 3 * 6
    assert r["hits"] > 0 and abs(r["hits"] / np.prod(r["shape"]) - 0.01) < 0.005
    # Downsampling is done by the servers: they send only the selected elements.
    res = r["extra"]["result_bytes"]
    assert r["bytes"]["pdcx warm"]["4"] == [res["4"]], (r["bytes"], res)
    for k in map(str, range(1, 7)):
        assert all(t > 0 for m in ("h5 cold", "h5 cache", "pdcx warm", "pdcx cold") for t in r["times_s"][m][k])

    # The check can fail: change one element of the pdcx copy that pattern 4 (offset 0 in
    # rep 0) reads, and the reused import's run stops with the difference.
    c = dep.client()
    vx = c.open_object("eqsim/vx")
    vx[0, 0, 0] = np.float32(123.0)
    p = run(dep, tmp_path, "--reuse")
    assert p.returncode != 0, p.stdout
    assert "WRONG RESULT" in p.stdout + p.stderr and "differs from h5py" in p.stdout + p.stderr, p.stderr
