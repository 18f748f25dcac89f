"""Region placement: data goes to the writer's node-local server (or where the placement mode
says) while the owner keeps the region map; reads merge every holder's pieces, overlapping
writes from different holders resolve to the last one waited, and all of it survives restart
and kill -9. Three real server processes on one host: a client's "node-local" server is picked
by its launcher's local rank, which these tests set explicitly."""

from __future__ import annotations

import os

import numpy as np
import pdcx
import pytest
from conftest import client_on, owner_of_name, run_pdcx


def name_owned_by(rank: int, n: int, prefix: str) -> str:
    return next(f"{prefix}{i}" for i in range(1000) if owner_of_name(f"{prefix}{i}", n) == rank)


def holders(obj) -> list[int]:
    return [e["server"] for e in obj.extents()]


def test_region_local_writes_land_on_the_writers_server_and_read_back_anywhere(deployment):
    dep = deployment(n=3)
    name = name_owned_by(0, 3, "loc")
    w1 = client_on(dep, 1)
    obj = w1.create_container("c").create_object(name, (100, 8), "float64")
    a = np.arange(800, dtype=np.float64).reshape(100, 8)
    obj[:50] = a[:50]
    t = obj.write_async(a[50:], offset=(50, 0))
    t.wait()
    assert holders(obj) == [1, 1], obj.extents()
    for reader in (dep.client(), client_on(dep, 2)):
        got = reader.open_object(name)
        np.testing.assert_array_equal(got[...], a)
        np.testing.assert_array_equal(got[10:90:7, 1::3], a[10:90:7, 1::3])
        np.testing.assert_array_equal(got.read_async(offset=(40, 0), shape=(20, 8)).wait(), a[40:60])
    shown = run_pdcx("show", name, "--root", dep.root).stdout
    assert "server 1 log seg-" in shown, shown


def test_small_writes_go_to_a_same_node_owner_and_large_ones_stay_with_the_writer(deployment, monkeypatch):
    """Servers of one node: a small write is sent to the object's owner (it commits in one round
    trip there, with no registration from another holder); a large one stays with the writer's
    own server. `PDCX_SMALL_WRITE_TO_OWNER` sets the size (0: never)."""
    dep = deployment(n=2)
    name = name_owned_by(0, 2, "own")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    c = dep.client()
    assert c.local_server == 1
    obj = c.create_container("c").create_object(name, (100_000,), "float64")
    big = np.arange(100_000, dtype=np.float64)
    obj[:10] = big[:10]
    assert holders(obj) == [0], obj.extents()
    obj[...] = big  # 800 KB: over the 256 KiB default
    assert holders(obj)[-1] == 1, obj.extents()
    monkeypatch.setenv("PDCX_SMALL_WRITE_TO_OWNER", "0")
    never = dep.client()
    never.open_object(name)[20:30] = big[20:30] * 2
    assert holders(obj)[-1] == 1, obj.extents()
    want = big.copy()
    want[20:30] *= 2
    np.testing.assert_array_equal(dep.client().open_object(name)[...], want)
    monkeypatch.setenv("PDCX_SMALL_WRITE_TO_OWNER", "lots")
    with pytest.raises(pdcx.PdcxError, match="small_write_to_owner|PDCX_SMALL_WRITE_TO_OWNER"):
        dep.client().open_object(name)[0:1] = big[:1]


def test_overlapping_writes_from_several_holders_resolve_to_the_last_waited(deployment):
    dep = deployment(n=3)
    name = name_owned_by(1, 3, "ovl")
    writers = [client_on(dep, 0), client_on(dep, 2), client_on(dep, 1, "object-static")]
    obj0 = writers[0].create_container("c").create_object(name, (200,), "int32", fill=-1)
    want = np.full(200, -1, dtype=np.int32)
    plan = [(0, 0, 100, 1), (1, 50, 150, 2), (2, 25, 75, 3), (0, 140, 160, 4), (1, 0, 10, 5)]
    for who, lo, hi, value in plan:
        o = writers[who].open_object(name)
        o.write_async(np.full(hi - lo, value, dtype=np.int32), offset=(lo,)).wait()
        want[lo:hi] = value
    assert sorted(set(holders(obj0))) == [0, 1, 2]
    np.testing.assert_array_equal(dep.client().open_object(name)[...], want)
    # Partial reads that cut through pieces of several holders.
    np.testing.assert_array_equal(dep.client().open_object(name)[45:155:3], want[45:155:3])

    dep.restart()
    np.testing.assert_array_equal(dep.client().open_object(name)[...], want)


def test_batched_writes_to_many_objects_from_two_nodes(deployment):
    dep = deployment(n=3)
    names = [name_owned_by(r, 3, f"batch{r}-") for r in range(3)]
    a, b = client_on(dep, 0), client_on(dep, 2)
    cont = a.create_container("c")
    for n in names:
        cont.create_object(n, (64, 64), "float32")
    data = {n: np.random.default_rng(i).random((64, 64), dtype=np.float32) for i, n in enumerate(names)}
    ts = []
    for n in names:  # top half from a, bottom half from b, all in one batch per client
        ts.append(a.open_object(n).write_async(data[n][:32], offset=(0, 0)))
        ts.append(b.open_object(n).write_async(data[n][32:], offset=(32, 0)))
    pdcx.start_all([])  # an empty batch is fine
    pdcx.wait_all(ts)
    for n in names:
        np.testing.assert_array_equal(dep.client().open_object(n)[...], data[n])
        assert sorted(holders(dep.client().open_object(n))) == [0, 2]


def test_foreign_writes_survive_kill9_of_every_server(deployment):
    dep = deployment(n=3)
    name = name_owned_by(2, 3, "k9p")
    w = client_on(dep, 0)
    obj = w.create_container("c").create_object(name, (1000,), "uint16")
    data = np.arange(1000, dtype=np.uint16)
    obj[:600] = data[:600]
    obj.write_async(data[600:], offset=(600,)).wait()
    dep.kill9()
    dep.start()
    got = dep.client().open_object(name)
    np.testing.assert_array_equal(got[...], data)
    assert holders(got) == [0, 0]


def test_a_missing_holder_is_a_clear_error_not_wrong_data(deployment):
    dep = deployment(n=3)
    name = name_owned_by(0, 3, "gone")
    w = client_on(dep, 1)
    obj = w.create_container("c").create_object(name, (10,), "int64")
    obj[...] = np.arange(10)
    holder_pid = dep.pids()[1]
    os.kill(holder_pid, 9)
    with pytest.raises(pdcx.PdcxError) as e:
        dep.client().open_object(name)[...]
    assert "server 1" in str(e.value) or "unavailable" in str(e.value).lower(), e.value


def test_region_static_and_dynamic_spread_and_read_back(deployment):
    dep = deployment(n=3)
    name = name_owned_by(0, 3, "spread")
    c = client_on(dep, 2, "region-static")
    obj = c.create_container("c").create_object(name, (3000,), "float32")
    data = np.random.default_rng(7).random(3000, dtype=np.float32)
    for i in range(30):
        obj[i * 100 : (i + 1) * 100] = data[i * 100 : (i + 1) * 100]
    assert len(set(holders(obj))) == 3, holders(obj)
    c.placement = "region-dynamic"
    ts = [obj.write_async(data[i * 100 : (i + 1) * 100] * 2, offset=(i * 100,)) for i in range(30)]
    pdcx.wait_all(ts)
    np.testing.assert_array_equal(dep.client().open_object(name)[...], data * 2)
    with pytest.raises(pdcx.InvalidArgumentError):
        c.placement = "nearest"


def test_large_reads_go_straight_to_a_sole_holder_and_merge_otherwise(deployment):
    """Reads of >= 256 KiB ask the owner where the region lives: one holder other than the
    owner is read directly (ReadHeld), several are merged by the owner. Both must agree."""
    dep = deployment(n=3)
    name = name_owned_by(0, 3, "big")
    w1, w2 = client_on(dep, 1), client_on(dep, 2)
    obj = w1.create_container("c").create_object(name, (512, 1024), "float32")
    data = np.random.default_rng(3).random((512, 1024), dtype=np.float32)
    obj[:256] = data[:256]  # held by server 1 only
    w2.open_object(name).write_async(data[256:], offset=(256, 0)).wait()  # held by server 2
    reader = client_on(dep, 0)
    r = reader.open_object(name)
    before = [s["read_bytes"] for s in reader.stats()]
    np.testing.assert_array_equal(r[:256], data[:256])  # sole holder 1, read there
    served = [s["read_bytes"] - b for s, b in zip(reader.stats(), before)]
    assert served == [0, 256 * 1024 * 4, 0], served
    np.testing.assert_array_equal(r.read_async(offset=(256, 0), shape=(256, 1024)).wait(), data[256:])
    np.testing.assert_array_equal(r[...], data)  # two holders: merged at the owner
    # The object grows and server 1 gets more of it: it must learn the new dims (its cached
    # metadata is stale) before accepting the write and serving the direct read.
    r.resize((1024, 1024))
    more = np.random.default_rng(4).random((512, 1024), dtype=np.float32)
    w1.open_object(name)[512:] = more
    np.testing.assert_array_equal(reader.open_object(name)[512:], more)
