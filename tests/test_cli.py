"""Light checks of the `pdcx` command line against a real deployment."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
from conftest import run_pdcx


def test_help_teaches_how_to_start(tmp_path):
    top = run_pdcx("--help").stdout
    for word in ("server", "ls", "put", "get", "query", "tag", "QUICK START", "PDCX_ROOT"):
        assert word in top, word
    for sub in (["server", "start"], ["server", "stop"], ["ls"], ["put"], ["get"], ["query"], ["tag"]):
        out = run_pdcx(*sub, "--help").stdout
        assert "EXAMPLES:" in out and "pdcx " + sub[0] in out, sub
    missing = run_pdcx("ls", check=False, env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert missing.returncode != 0 and "PDCX_ROOT" in missing.stderr
    nothing = run_pdcx("ls", "--root", tmp_path / "none", check=False)
    assert nothing.returncode != 0 and "server start" in nothing.stderr


def _clean_env(**extra):
    """The environment without pdcx settings (the harness's own variables may be set), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PDCX_") or k == "PDCX_BIN"}
    env.update(extra)
    return env


def test_server_config_says_where_each_value_came_from(tmp_path):
    (tmp_path / "pdcx.toml").write_text(
        '[flush]\ninterval_ms = 300\n[[tier]]\nname = "ssd"\nkind = "local"\npath = "/x"\n'
    )
    env = _clean_env(PDCX_SPIN_US="7", PDCX_SHMM="1", PDCX_TIER_SSD_PATH="/y")
    p = run_pdcx("server", "config", "--cache-mb", "512", "--root", tmp_path, env=env)
    rows = {line.split()[0]: line.split()[1:] for line in p.stdout.splitlines()[2:]}
    assert rows["cache_mb"] == ["512", "flag"]
    assert rows["root"] == [str(tmp_path), "flag"]
    assert rows["spin_us"] == ["7", "env"]
    assert rows["flush.interval_ms"] == ["300", "pdcx.toml"]
    assert rows["tier.ssd.path"] == ["/y", "env"]
    assert rows["max_connections"] == ["4096", "default"]
    assert "PDCX_SHMM is not a pdcx setting" in p.stderr

    doc = json.loads(run_pdcx("server", "config", "--json", env=_clean_env(PDCX_ROOT=str(tmp_path))).stdout)
    by_name = {s["name"]: s for s in doc["settings"]}
    assert by_name["root"]["source"] == "env" and by_name["root"]["value"] == str(tmp_path)
    assert by_name["flush.interval_ms"]["source"] == "pdcx.toml"
    assert doc["errors"] == [] and doc["unknown_env"] == []

    # A malformed value names the variable and what it expects; the exit code says so.
    bad = run_pdcx("server", "config", "--json", check=False, env=_clean_env(PDCX_MAX_CONNECTIONS="lots"))
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["errors"] == ['PDCX_MAX_CONNECTIONS="lots": expected a whole number of at least 1']
    # ... and a server refuses to start with it.
    refused = run_pdcx(
        "server",
        "--root",
        tmp_path,
        "--rank",
        "0",
        "--size",
        "1",
        check=False,
        timeout=30,
        env=_clean_env(PDCX_MAX_CONNECTIONS="lots"),
    )
    assert refused.returncode != 0 and "PDCX_MAX_CONNECTIONS" in refused.stderr

    # An unknown pdcx.toml key is an error naming it.
    (tmp_path / "pdcx.toml").write_text("[flush]\nintervall_ms = 3\n")
    typo = run_pdcx("server", "config", "--root", tmp_path, check=False, env=_clean_env())
    assert typo.returncode == 1 and "flush.intervall_ms: unknown key in pdcx.toml" in typo.stderr

    md = run_pdcx("server", "config", "--markdown", env=_clean_env()).stdout
    assert md.startswith("| setting |") and "`PDCX_MAX_CONNECTIONS`" in md


def test_put_get_ls_query_tag_round_trip(deployment, tmp_path):
    dep = deployment(n=2)
    env = dep.env()
    a = np.random.default_rng(5).standard_normal((30, 7)).astype("<f4")
    src = tmp_path / "a.npy"
    np.save(src, a)
    run_pdcx("put", src, "--name", "run1/a", "--container", "run1", "--tag", "step=3", "--tag", "species=ion", env=env)
    b = np.arange(24, dtype="<i2").reshape(2, 3, 4)
    np.save(tmp_path / "b.npy", b)
    run_pdcx("put", tmp_path / "b.npy", "--name", "run1/b", "--container", "run1", "--tag", "step=4", env=env)

    out = tmp_path / "out.npy"
    run_pdcx("get", "run1/a", "-o", out, env=env)
    got = np.load(out)
    assert got.dtype == a.dtype and got.tobytes() == a.tobytes()
    run_pdcx("get", "run1/a", "--region", "5:9,2:", "-o", out, env=env)
    assert np.load(out).tobytes() == np.ascontiguousarray(a[5:9, 2:]).tobytes()
    run_pdcx("get", "run1/b", "--region", ":,1,1:3", "-o", out, env=env)
    assert np.load(out).tolist() == b[:, 1:2, 1:3].tolist()  # an INDEX item keeps its dim

    listing = json.loads(run_pdcx("ls", "--json", env=env).stdout)
    assert [c["name"] for c in listing["containers"]] == ["run1"]
    objs = {o["name"]: o for o in listing["objects"]}
    assert set(objs) == {"run1/a", "run1/b"}
    assert objs["run1/a"]["dims"] == [30, 7] and objs["run1/a"]["dtype"] == "float32"
    assert objs["run1/a"]["tags"] == {"step": 3, "species": "ion"}
    assert objs["run1/b"]["containers"] == ["run1"]
    assert {o["owner"] for o in objs.values()} <= {0, 1}

    q = json.loads(run_pdcx("query", "step>=3", "species~i*", "--json", env=env).stdout)
    assert [m["name"] for m in q] == ["run1/a"]
    run_pdcx("tag", "run1/b", "species=electron", "--delete", "step", env=env)
    q = json.loads(run_pdcx("query", "species~*on", "--json", env=env).stdout)
    assert [m["name"] for m in q] == ["run1/a", "run1/b"]
    assert json.loads(run_pdcx("query", "step?", "--json", env=env).stdout)[0]["name"] == "run1/a"

    # What the CLI stored, the Python client reads (and the other way round).
    client = dep.client()
    assert client.open_object("run1/a")[...].tobytes() == a.tobytes()
    assert dict(client.open_object("run1/b").tags) == {"species": "electron"}
    client.open_object("run1/b")[1] = -1
    run_pdcx("get", "run1/b", "-o", out, env=env)
    b[1] = -1
    assert np.load(out).tolist() == b.tolist()

    dup = run_pdcx("put", src, "--name", "run1/a", env=env, check=False)
    assert dup.returncode != 0 and "already exists" in dup.stderr
    bad = run_pdcx("get", "run1/a", "--region", "0:99,:", "-o", out, env=env, check=False)
    assert bad.returncode != 0 and bad.stderr.startswith("error:")
    status = json.loads(run_pdcx("server", "status", "--json", env=env).stdout)
    assert [s["up"] for s in status] == [True, True]


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_server_status_reports_a_dead_server(deployment, fmt):
    dep = deployment(n=2)
    pid = dep.pids()[1]
    os.kill(pid, signal.SIGKILL)
    args = ["server", "status", "--root", dep.root] + (["--json"] if fmt == "json" else [])
    p = run_pdcx(*args, check=False)
    assert p.returncode == 1
    if fmt == "json":
        assert [s["up"] for s in json.loads(p.stdout)] == [True, False]
    else:
        assert "DOWN" in p.stdout


def test_query_values_prints_the_hits_the_servers_found(deployment, tmp_path):
    dep = deployment(n=2)
    env = dep.env()
    e = (np.random.default_rng(4).random((40, 30)) * 3).astype("<f4")
    x = np.arange(1200, dtype="<i8").reshape(40, 30) + 2**60
    np.save(tmp_path / "e.npy", e)
    np.save(tmp_path / "x.npy", x)
    run_pdcx("put", tmp_path / "e.npy", "--name", "run1/energy", "--container", "run1", env=env)
    run_pdcx("put", tmp_path / "x.npy", "--name", "run1/x", "--container", "run1", env=env)
    ref = (e > 2.5) & (x < 2**60 + 600) | (x == 2**60 + 1199)
    out = json.loads(
        run_pdcx(
            "query",
            "--values",
            "--in",
            "run1",
            f"energy>2.5 & x<{2**60 + 600} | x=={2**60 + 1199}",
            "--limit",
            "10000",
            "--json",
            env=env,
        ).stdout
    )
    assert out["nhits"] == ref.sum() == len(out["hits"])
    assert [h["coords"] for h in out["hits"]] == np.argwhere(ref).tolist()
    assert [h["values"]["run1/x"] for h in out["hits"]] == x[ref].tolist()  # int64 exact
    assert [h["values"]["run1/energy"] for h in out["hits"]] == pytest.approx(e[ref].tolist())
    text = run_pdcx("query", "--values", "run1/energy>2.9", "--region", "0:10,:", "--bins", "2", env=env).stdout
    n = int((e[:10] > 2.9).sum())
    assert text.startswith(f"{n} hits")
    assert "histogram of run1/energy" in text
    count = run_pdcx("query", "--values", "--in", "run1", "energy<1", "--count", env=env).stdout
    assert count.split()[0] == str(int((e < 1).sum()))
    for bad, why in [
        (["query", "--values", "run1/energy>"], "needs a number"),
        (["query", "--values", "nope>1"], "no object named"),
        (["query", "--values", "run1/energy>1", "--region", "0:99,:"], "region"),
        (["query", "--region", "0:1", "step=3"], "go with --values"),
    ]:
        p = run_pdcx(*bad, env=env, check=False)
        assert p.returncode != 0 and why in p.stderr, (bad, p.stderr)
