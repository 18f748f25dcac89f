"""The tier hierarchy with a real S3 server (versitygw on 127.0.0.1): VPIC-IO under mpirun on
memory + local + shared-dir + S3 tiers, servers SIGKILLed in the middle of flushing and
restarted, data read back byte-identical; an S3 outage keeps the data in the log with a clear
error and the flush resumes when S3 is back."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
from conftest import run_mpi, run_pdcx

RANKS = 4


def config(root, tmp_path, s3, interval_ms=50, shard=""):
    (root / "pdcx.toml").write_text(
        f"""
[[tier]]
name = "mem"
kind = "memory"
capacity = "4MiB"

[[tier]]
name = "ssd"
kind = "local"
path = "{tmp_path}/ssd"
capacity = "64MiB"

[[tier]]
name = "pfs"
kind = "shared"
path = "{tmp_path}/pfs"

[[tier]]
name = "s3"
kind = "s3"
endpoint = "{s3["endpoint"]}"
bucket = "{s3["bucket"]}"
region = "us-east-1"
part_size = "5MiB"
timeout_ms = 2000
request_timeout_ms = 3000

[log]
segment_bytes = "1MiB"

[flush]
interval_ms = {interval_ms}

{shard}
"""
    )


def mpirun(dep, phase: str) -> None:
    run_mpi(dep.env(), RANKS, "mpi_vpic_tiers.py", phase)


def tiers_of(root, name):
    doc = json.loads(run_pdcx("show", name, "--json", "--root", root).stdout)
    return {e["tier"].removeprefix("log+") for e in doc["extents"]}


def test_vpic_on_four_tiers_survives_sigkill_mid_flush(deployment, s3_server, tmp_path, monkeypatch):
    pytest.importorskip("mpi4py")
    for k, v in s3_server["env"].items():
        monkeypatch.setenv(k, v)
    dep = deployment(n=2, start=False)
    # Strategy 3 of the object-sharding paper: a server groups two objects' extents per shard blob.
    config(dep.root, tmp_path, s3_server, shard="[shard]\nstrategy = 3")
    dep.start()
    mpirun(dep, "write")
    # The flusher runs every 50 ms: the kill lands in the middle of flushing.
    during = dep.client().stats()
    dep.kill9()
    dep.start()
    mpirun(dep, "check")
    run_pdcx("flush", "--root", dep.root, timeout=180)
    dep.kill9()
    dep.start()
    mpirun(dep, "check")
    client = dep.client()
    stats = client.stats()
    assert sum(s["flush_pending_extents"] for s in stats) == 0
    assert tiers_of(dep.root, "vpic/z") == {"s3"} and tiers_of(dep.root, "vpic/px") == {"s3"}
    assert tiers_of(dep.root, "vpic/x") == {"ssd", "s3"}
    assert tiers_of(dep.root, "vpic/id1") == {"pfs"} and tiers_of(dep.root, "vpic/id2") == {"mem"}
    shards = {
        e["shard"]
        for name in ("vpic/z", "vpic/px", "vpic/x", "vpic/id1")
        for e in json.loads(run_pdcx("show", name, "--json", "--root", dep.root).stdout)["extents"]
    }
    assert len(shards - {""}) > 0, "no extent was grouped into a shard blob"
    s3_bytes = sum(t["used"] for s in stats for t in s["tiers"] if t["name"] == "s3")
    assert s3_bytes > 0
    # The blobs are really in the S3 server's bucket directory, under the deployment's prefix.
    dep_id = (dep.root / "deployment-id").read_text().strip()
    stored = list((tmp_path / "s3").rglob("*"))
    assert any(dep_id in str(p) for p in stored), stored[:5]
    assert sum(s["flushed_bytes"] for s in during) > 0, "the flusher never ran before the kill"


def test_s3_outage_keeps_data_in_the_log_and_the_flush_resumes(deployment, s3_server, tmp_path, monkeypatch):
    for k, v in s3_server["env"].items():
        monkeypatch.setenv(k, v)
    dep = deployment(n=1, start=False)
    config(dep.root, tmp_path, s3_server, interval_ms=100)
    dep.start()
    client = dep.client()
    obj = client.create_container("o").create_object("o/a", 1 << 20, "float64", tags={"pdcx.tier": "s3"})
    data = np.random.default_rng(1).random(1 << 20)
    os.kill(s3_server["pid"], signal.SIGSTOP)  # S3 hangs: requests time out
    try:
        for k in range(0, 1 << 20, 1 << 17):
            obj[k : k + (1 << 17)] = data[k : k + (1 << 17)]
        p = run_pdcx("flush", "--stall", "10", "--quiet", "--root", dep.root, check=False, timeout=120)
        assert p.returncode == 1, p.stdout + p.stderr
        assert "s3" in p.stderr and "safe in the servers' logs" in p.stderr, p.stderr
        assert client.stats()[0]["flush_error"]
        assert np.array_equal(obj[:], data)  # served from the log meanwhile
    finally:
        os.kill(s3_server["pid"], signal.SIGCONT)
    run_pdcx("flush", "--root", dep.root, timeout=120)
    assert tiers_of(dep.root, "o/a") == {"s3"}
    dep.kill9()
    dep.start()
    assert np.array_equal(dep.client().open_object("o/a")[:], data)


def test_bad_credentials_give_a_clear_error_and_lose_nothing(deployment, s3_server, tmp_path, monkeypatch):
    for k, v in s3_server["env"].items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    dep = deployment(n=1, start=False)
    config(dep.root, tmp_path, s3_server)
    dep.start()  # starts anyway: the data waits in the log
    obj = dep.client().create_container("b").create_object("b/a", 4096, "int64", tags={"pdcx.tier": "s3"})
    obj[:] = np.arange(4096)
    p = run_pdcx("flush", "--stall", "4", "--quiet", "--root", dep.root, check=False, timeout=60)
    assert p.returncode == 1 and "AWS_SECRET_ACCESS_KEY" in p.stderr, p.stderr
    dep.stop()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server["secret_access_key"])
    dep.start()
    run_pdcx("flush", "--root", dep.root, timeout=60)
    assert tiers_of(dep.root, "b/a") == {"s3"}
    assert np.array_equal(dep.client().open_object("b/a")[:], np.arange(4096))
