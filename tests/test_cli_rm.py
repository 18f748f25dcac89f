"""The command line's housekeeping: `pdcx rm` of objects and containers, complete `--json`,
a closed pipe, `pdcx --version` / `pdcx.__version__`, and `pdcx.connect()` never writing
silently into a store deleted at exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pdcx
from conftest import REPO, pdcx_bin, run_pdcx


def test_rm_removes_objects_and_containers_only_with_r(deployment):
    dep = deployment(n=2)
    c = dep.client()
    run1 = c.create_container("run1")
    for n in ("x", "y", "shared"):
        run1.create_object(f"run1/{n}", shape=(1000,), dtype="float64")[:] = np.ones(1000)
    c.create_container("other").add(c.open_object("run1/shared"))
    env = dep.env()

    one = run_pdcx("rm", "run1/x", env=env)
    assert "removed 1 object(s), 7.8 KiB" in one.stderr
    assert sorted(o.name for o in c.objects("run1")) == ["run1/shared", "run1/y"]

    refused = run_pdcx("rm", "run1", check=False, env=env)
    assert refused.returncode == 1 and "-r" in refused.stderr and "2 object(s)" in refused.stderr
    assert len(c.objects("run1")) == 2
    missing = run_pdcx("rm", "nope", check=False, env=env)
    assert missing.returncode == 1 and "no object or container nope" in missing.stderr

    r = run_pdcx("rm", "-r", "run1", env=env)
    assert "removed 1 object(s)" in r.stderr and "1 container(s)" in r.stderr and "run1/shared" in r.stderr
    assert [x.name for x in c.containers()] == ["other"]
    assert [o.name for o in c.objects()] == ["run1/shared"]  # still held by "other"
    assert c.open_object("run1/shared").metadata["containers"] == ["other"]
    assert [x.name for x in c.containers()] == ["other"]


def test_value_query_json_lists_every_hit(deployment):
    dep = deployment(n=1)
    c = dep.client()
    c.create_container("q").create_object("q/v", shape=(500,), dtype="int32")[:] = np.arange(500)
    doc = json.loads(run_pdcx("query", "--values", "q/v >= 100", "--json", env=dep.env()).stdout)
    assert doc["nhits"] == 400 and doc["shown"] == 400 and len(doc["hits"]) == 400
    capped = json.loads(run_pdcx("query", "--values", "q/v >= 100", "--json", "--limit", "5", env=dep.env()).stdout)
    assert len(capped["hits"]) == 5
    text = run_pdcx("query", "--values", "q/v >= 100", env=dep.env()).stdout
    assert "... 380 more" in text  # text stays short by default


def test_closed_pipe_ends_quietly(deployment):
    dep = deployment(n=1)
    c = dep.client()
    cont = c.create_container("many")
    cont.create_objects([{"name": f"many/o{i:04}", "shape": (1,), "dtype": "int8"} for i in range(3000)])
    p = subprocess.run(
        check=False,
        args=f"'{pdcx_bin()}' ls --json | head -1; echo \"status=${{PIPESTATUS[0]}}\"",
        shell=True,
        executable="/bin/bash",
        env=dep.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.stdout.splitlines() == ["{", "status=141"]  # SIGPIPE, as cat ends
    assert p.stderr == ""


def test_versions_agree():
    out = run_pdcx("--version").stdout.split()
    assert out[0] == "pdcx" and out[1][0].isdigit()
    cargo = (REPO / "Cargo.toml").read_text()
    assert f'version = "{out[1]}"' in cargo
    if pdcx.__version__ != "0+unknown":  # an installed package: the same version as the binary
        assert pdcx.__version__ == out[1]


def test_connect_without_root_says_where_the_data_goes(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PDCX_")}
    code = "import pdcx; c = pdcx.connect(); print(c.root)"
    p = subprocess.run(
        check=False, args=[sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "deleted at exit" in lines[0] and p.stdout.strip() in lines[0]
    quiet = "import pdcx; c = pdcx.connect(embedded=True); print(c.root)"
    q = subprocess.run(
        check=False, args=[sys.executable, "-c", quiet], env=env, capture_output=True, text=True, timeout=60
    )
    assert q.returncode == 0 and q.stderr == "", q.stderr
    both = "import pdcx; pdcx.connect('/x', embedded=True)"
    b = subprocess.run(
        check=False, args=[sys.executable, "-c", both], env=env, capture_output=True, text=True, timeout=60
    )
    assert b.returncode != 0 and "not both" in b.stderr
