"""The storage hierarchy with real server processes: tiers from ROOT/pdcx.toml, the background
flusher, log retirement, placement tags, `pdcx flush/migrate/top/show`, and SIGKILL of every
server in the middle of flushing."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_pdcx, wait_until

CHUNK = 32_768  # float64 elements per write: 256 KiB


def write_config(root, tmp_path, mem="8MiB", ssd="6MiB", interval_ms=100):
    (root / "pdcx.toml").write_text(
        f"""
[[tier]]
name = "mem"
kind = "memory"
capacity = "{mem}"

[[tier]]
name = "ssd"
kind = "local"
path = "{tmp_path}/ssd"
capacity = "{ssd}"

[[tier]]
name = "pfs"
kind = "shared"
path = "{tmp_path}/pfs"

[log]
segment_bytes = "1MiB"

[flush]
interval_ms = {interval_ms}
"""
    )


def fill(obj, seed: int, n: int) -> np.ndarray:
    data = np.random.default_rng(seed).standard_normal(n)
    for k in range(0, n, CHUNK):
        obj.write_async(data[k : k + CHUNK], offset=(k,)).wait()
    return data


def extent_tiers(root, name: str) -> list[str]:
    doc = json.loads(run_pdcx("show", name, "--json", "--root", root).stdout)
    return [e["tier"] for e in doc["extents"]]


def test_flush_places_by_tag_frees_the_log_and_reads_back(deployment, tmp_path):
    dep = deployment(n=2, start=False)
    write_config(dep.root, tmp_path)
    dep.start()
    client = dep.client()
    c = client.create_container("run")
    n = 8 * CHUNK  # 2 MiB per object
    objs = {
        "auto": c.create_object("run/auto", (n,), "float64"),
        "mem": c.create_object("run/mem", (n,), "float64", tags={"pdcx.tier": "mem"}),
        "ssd": c.create_object("run/ssd", (n,), "float64", tags={"pdcx.tier": "ssd"}),
        "quota": c.create_object("run/quota", (n,), "float64", tags={"pdcx.tier": "ssd:25%,pfs"}),
        "pfs": c.create_object("run/pfs", (n,), "float64", tags={"pdcx.tier": "pfs"}),
    }
    data = {k: fill(o, i, n) for i, (k, o) in enumerate(objs.items())}
    log_before = sum(s["log_bytes"] for s in client.stats())
    p = run_pdcx("flush", "--root", dep.root, timeout=120)
    assert "nothing pending" in p.stdout
    stats = client.stats()
    assert sum(s["flush_pending_extents"] for s in stats) == 0
    # Memory-homed extents keep their log copy (memory is not durable); the rest is retired
    # a whole sealed segment at a time. Automatic placement takes the fastest durable tier.
    assert sum(s["log_bytes"] for s in stats) < log_before, (log_before, stats)
    assert set(extent_tiers(dep.root, "run/mem")) == {"log+mem"}
    assert {t.removeprefix("log+") for t in extent_tiers(dep.root, "run/auto")} == {"ssd"}
    assert {t.removeprefix("log+") for t in extent_tiers(dep.root, "run/ssd")} == {"ssd"}
    assert {t.removeprefix("log+") for t in extent_tiers(dep.root, "run/pfs")} == {"pfs"}
    quota = [t.removeprefix("log+") for t in extent_tiers(dep.root, "run/quota")]
    assert quota.count("ssd") == 2 and quota.count("pfs") == 6, quota
    for k, o in objs.items():
        assert np.array_equal(o[:], data[k]), k
        assert np.array_equal(o[1000:70_000], data[k][1000:70_000]), k
    tiers = {t["name"]: t for t in stats[0]["tiers"]} if stats[0]["tiers"] else {}
    assert set(tiers) == {"mem", "ssd", "pfs"}
    top = run_pdcx("top", "-n", "1", "--root", dep.root).stdout
    assert "FLUSH QUEUE" in top and "ssd (local)" in top

    # Migrate moves every extent, and the data stays identical.
    out = run_pdcx("migrate", "run/ssd", "--tier", "pfs", "--root", dep.root).stdout
    assert "moved 8 extents" in out
    assert {t.removeprefix("log+") for t in extent_tiers(dep.root, "run/ssd")} == {"pfs"}
    assert np.array_equal(objs["ssd"][:], data["ssd"])
    bad = run_pdcx("migrate", "run/ssd", "--tier", "tape", "--root", dep.root, check=False)
    assert bad.returncode == 1 and "no tier named" in bad.stderr

    # A clean restart: data comes back from the tiers (retired segments are gone).
    dep.restart()
    client = dep.client()
    for k in objs:
        assert np.array_equal(client.open_object(f"run/{k}")[:], data[k]), k


def test_sigkill_mid_flush_loses_nothing(deployment, tmp_path):
    dep = deployment(n=2, start=False)
    write_config(dep.root, tmp_path, mem="1MiB", interval_ms=20)
    dep.start()
    client = dep.client()
    n = 16 * CHUNK  # 4 MiB per object
    c = client.create_container("k")
    objs = [c.create_object(f"k/{i}", (n,), "float64", tags={"pdcx.tier": "ssd:50%,pfs"}) for i in range(3)]
    data = [fill(o, 10 + i, n) for i, o in enumerate(objs)]
    # The flusher runs every 20 ms while the writes go on: kill in the middle of it.
    flushing = client.stats()
    dep.kill9()
    assert sum(s["flushed_bytes"] for s in flushing) > 0, "the flusher never ran before the kill"
    dep.start()
    client = dep.client()
    for i in range(3):
        assert np.array_equal(client.open_object(f"k/{i}")[:], data[i]), i
    run_pdcx("flush", "--root", dep.root, timeout=120)
    dep.kill9()
    dep.start()
    client = dep.client()
    for i in range(3):
        assert np.array_equal(client.open_object(f"k/{i}")[:], data[i]), i
    assert sum(s["flush_pending_extents"] for s in client.stats()) == 0


@pytest.mark.parametrize(
    "toml, why",
    [
        ("[[tier]]\nname='x'\nkind='local'\n", "needs `path`"),
        ("[[tier]]\nname='x'\nkind='memory'\ncapacity='lots'\n", 'tier.capacity="lots": expected a size'),
        ("[log]\nsegment_bytes='1KiB'\n", "at least 1MiB"),
        ("[shard]\nservers=3\n", "power of two"),
        ("[shard]\ncomposite=true\n", "set shard.strategy"),
        ("[shard]\nstrategy=3\nservers=4\n", "contradicts shard.strategy"),
    ],
)
def test_bad_config_refuses_to_start_with_a_clear_error(deployment, toml, why):
    dep = deployment(n=1, start=False)
    (dep.root / "pdcx.toml").write_text(toml)
    p = run_pdcx("server", "start", "-n", "1", "--root", dep.root, check=False, timeout=60)
    assert p.returncode != 0
    assert why in p.stderr + dep.server_log(0), p.stderr


def test_flush_without_tiers_succeeds_and_says_how_to_configure(deployment):
    """Job scripts run `pdcx flush` after every job: without tiers there is nothing to flush,
    which is success (exit 0), with a line naming where tiers are declared."""
    dep = deployment(n=1)
    p = run_pdcx("flush", "--root", dep.root, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no tiers configured" in p.stdout and "pdcx.toml" in p.stdout, p.stdout
    assert "no file was waiting" in p.stdout, p.stdout


def test_codec_and_tier_tags_are_checked_when_set(deployment, tmp_path):
    import pdcx

    dep = deployment(n=1, start=False)
    write_config(dep.root, tmp_path)
    dep.start()
    c = dep.client().create_container("t")
    with pytest.raises(pdcx.InvalidArgumentError, match="zfp"):
        c.create_object("t/ints", 100, "int32", tags={"pdcx.codec": "zfp-rate:16"})
    with pytest.raises(pdcx.InvalidArgumentError, match="no tier named"):
        c.create_object("t/tape", 100, "float64", tags={"pdcx.tier": "tape"})
    obj = c.create_object("t/z", 4 * CHUNK, "float64", tags={"pdcx.codec": "zstd:5"})
    with pytest.raises(pdcx.InvalidArgumentError, match="zstd level"):
        obj.tags["pdcx.codec"] = "zstd:99"
    data = np.repeat(np.arange(4 * CHUNK // 64, dtype="f8"), 64)  # compressible
    obj[:] = data
    run_pdcx("flush", "--root", dep.root, timeout=120)
    show = run_pdcx("show", "t/z", "--root", dep.root).stdout
    assert "zstd:5" in show and "x" in show
    ext = json.loads(run_pdcx("show", "t/z", "--json", "--root", dep.root).stdout)["extents"]
    assert all(e["stored_len"] < e["len"] / 4 for e in ext), ext
    assert np.array_equal(obj[:], data)


def test_a_group_shard_mostly_deleted_is_repacked_then_deleted(deployment, tmp_path, monkeypatch):
    # No background compaction, and flush passes only when asked: each step is the command's.
    monkeypatch.setenv("PDCX_COMPACTION_THRESHOLD", "0")
    dep = deployment(n=2, start=False)
    (dep.root / "pdcx.toml").write_text(
        f"""
[[tier]]
name = "pfs"
kind = "shared"
path = "{tmp_path}/pfs"

[shard]
servers = 2
objects = 4

[flush]
interval_ms = 60000
"""
    )
    dep.start()
    client = dep.client()
    client.placement = "region-static"  # each object's regions on both servers
    c = client.create_container("g")
    n = 8 * CHUNK
    objs = [c.create_object(f"g/o{i}", (n,), "float64") for i in range(4)]
    data = [fill(o, i, n) for i, o in enumerate(objs)]
    run_pdcx("flush", "--root", dep.root, timeout=120)

    def shard_files() -> dict[str, int]:
        return {str(p): p.stat().st_size for p in (tmp_path / "pfs").rglob("*") if p.is_file() and "/shard/" in str(p)}

    def extents_of(name: str) -> list[dict]:
        return json.loads(run_pdcx("show", name, "--json", "--root", dep.root).stdout)["extents"]

    kept = extents_of("g/o3")
    assert {e["server"] for e in kept} == {0, 1}, kept
    assert all(e["shard"] for e in kept), kept
    before = shard_files()
    # Group shards are put by the group's leader, server 0, under its prefix.
    assert before and all("/g0000/shard/" in k for k in before), before
    # Three objects of four go: the shards holding them are mostly garbage.
    for o in objs[:3]:
        client.delete_object(o.name)

    def repacked() -> bool:
        run_pdcx("compact", "--root", dep.root, timeout=120)
        run_pdcx("flush", "--root", dep.root, timeout=120)  # the leader's check deletes them
        return not set(before) & set(shard_files())

    wait_until(repacked, 60, "the mostly deleted group shards to be repacked and deleted")
    moved = extents_of("g/o3")
    assert {e["server"] for e in moved} == {0, 1}, moved
    assert all(e["shard"] == "" and e["tier"].removeprefix("log+") == "pfs" for e in moved), moved
    # What stays on the tier is the kept object's bytes, not the deleted ones'.
    on_tier = sum(p.stat().st_size for p in (tmp_path / "pfs").rglob("*") if p.is_file())
    assert on_tier <= sum(e["stored_len"] for e in moved) + 4096, (on_tier, before, moved)
    assert np.array_equal(objs[3][:], data[3])
    dep.restart()
    assert np.array_equal(dep.client().open_object("g/o3")[:], data[3])
