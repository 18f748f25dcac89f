"""`remote` durability with real server processes: when `wait` returns, the data is on a tier
that survives the loss of the node (a shared directory, or S3 on versitygw) with its home
recorded durably, so SIGKILL of every server plus the loss of their log directories (node loss)
keeps it; `pdcx show` says which durability each extent reached; a deployment without such a
tier refuses `remote` with a clear error."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pdcx
import pytest
from conftest import run_pdcx

N = 65_536  # float64 elements per object


def write_config(root, tmp_path, home: str) -> None:
    """A node-local tier plus `home` (TOML of one off-node tier). The flusher's interval is long:
    whatever reaches the home tier in these tests got there through the commit itself."""
    (root / "pdcx.toml").write_text(
        f"""
[[tier]]
name = "ssd"
kind = "local"
path = "{tmp_path}/ssd"

{home}

[flush]
interval_ms = 600000
"""
    )


def shared_home(tmp_path, _request) -> str:
    return f'[[tier]]\nname = "home"\nkind = "shared"\npath = "{tmp_path}/pfs"\n'


def s3_home(_tmp_path, request) -> str:
    s3 = request.getfixturevalue("s3_server")
    mp = request.getfixturevalue("monkeypatch")
    for k, v in s3["env"].items():
        mp.setenv(k, v)
    return (
        f'[[tier]]\nname = "home"\nkind = "s3"\nendpoint = "{s3["endpoint"]}"\n'
        f'bucket = "{s3["bucket"]}"\nregion = "us-east-1"\ntimeout_ms = 2000\n'
    )


def durabilities(root, name: str) -> list[tuple[str, str]]:
    doc = json.loads(run_pdcx("show", name, "--json", "--root", root).stdout)
    return [(e["durability"], e["tier"]) for e in doc["extents"]]


def lose_nodes(dep) -> None:
    """SIGKILL every server, then delete their logs: what a lost node takes with it (the
    metadata shard stays, as on a node whose log device died)."""
    dep.kill9()
    for rank in range(dep.n):
        shutil.rmtree(dep.root / f"server-{rank:04d}" / "log")


@pytest.mark.parametrize("home", [shared_home, s3_home], ids=["shared", "s3"])
def test_remote_waits_survive_kill9_and_the_loss_of_the_log(deployment, tmp_path, request, home):
    dep = deployment(n=2, start=False)
    write_config(dep.root, tmp_path, home(tmp_path, request))
    dep.start()
    client = dep.client()
    c = client.create_container("r")
    rng = np.random.default_rng(7)
    # Its placement prefers the node-local tier; `remote` still puts it off the node.
    x = c.create_object("r/x", (N,), "float64", tags={"pdcx.tier": "ssd"})
    a, b = rng.standard_normal(N // 2), rng.standard_normal(N // 2)
    x.write_async(a, offset=(0,), durability="remote").wait()
    x.write_async(b, offset=(N // 2,), durability="local").wait()
    assert durabilities(dep.root, "r/x") == [("remote", "log+home"), ("local", "log")]
    show = run_pdcx("show", "r/x", "--root", dep.root).stdout
    assert "remote (durable home)" in show and "local (log fsynced)" in show, show
    # Per object: the tag raises every wait on it, also the synchronous assignment's.
    y = c.create_object("r/y", (N,), "float64")
    y.durability = "remote"
    assert client.open_object("r/y").durability == "remote"
    ydata = rng.standard_normal(N)
    y[:] = ydata
    assert [d for d, _ in durabilities(dep.root, "r/y")] == ["remote"]

    lose_nodes(dep)
    dep.start()
    client = dep.client()
    x, y = client.open_object("r/x"), client.open_object("r/y")
    assert np.array_equal(x[: N // 2], a)
    assert np.array_equal(y[:], ydata)
    # The `local` write was only in the lost log: gone whole (fill value), never torn.
    assert np.array_equal(x[N // 2 :], np.zeros(N // 2))
    # (The owner's region map may still name the lost write at its holder, which no longer
    # has it: listed without detail, skipped by reads.)
    assert [d for d in durabilities(dep.root, "r/x") if d[0]] == [("remote", "home")]
    # And it stays readable across a later crash, with new writes in the new log.
    z = rng.standard_normal(N // 2)
    x.write_async(z, offset=(N // 2,)).wait()
    dep.kill9()
    dep.start()
    x = dep.client().open_object("r/x")
    assert np.array_equal(x[:], np.concatenate([a, z]))


def test_remote_is_refused_without_a_tier_that_survives_the_node(deployment, tmp_path):
    dep = deployment(n=1, start=False)
    (dep.root / "pdcx.toml").write_text(f'[[tier]]\nname = "ssd"\nkind = "local"\npath = "{tmp_path}/ssd"\n')
    dep.start()
    client = dep.client()
    x = client.create_container("r").create_object("r/x", (16,), "float64")
    with pytest.raises(pdcx.InvalidArgumentError, match="survives the loss of a node"):
        x.write_async(np.ones(16), durability="remote").wait()
    with pytest.raises(pdcx.InvalidArgumentError, match="survives the loss of a node"):
        x.durability = "remote"
    with pytest.raises(pdcx.InvalidArgumentError, match="memory, local or remote"):
        x.durability = "disk"
    # Nothing of the refused write is visible; a `local` one goes through.
    assert np.array_equal(x[:], np.zeros(16))
    x.write_async(np.ones(16), durability="local").wait()
    assert np.array_equal(x[:], np.ones(16))
