"""The Python API against a real 2-server deployment: arrays of every dtype and rank indexed like
numpy (checked against a numpy reference), fill values, growing dims, transfers and their
consistency points, batches across servers, tags, containers, queries and errors."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pdcx
import pytest
from conftest import freeze, wait_until

DTYPES = {
    "int8": "i1",
    "int16": "<i2",
    "int32": "<i4",
    "int64": "<i8",
    "uint8": "u1",
    "uint16": "<u2",
    "uint32": "<u4",
    "uint64": "<u8",
    "float32": "<f4",
    "float64": "<f8",
    "bytes": "S1",
}
# Largest extent per dim for an object of that many dims (keeps every object <= 256 elements).
MAX_EXTENT = {1: 40, 2: 9, 3: 5, 4: 4, 5: 3, 6: 3, 7: 2, 8: 2}


def random_values(rng: np.random.Generator, dt: np.dtype, shape) -> np.ndarray:
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return np.asarray(rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True))
    if dt.kind == "f":
        return np.asarray((rng.standard_normal(shape) * 1000).astype(dt))
    return np.asarray(rng.integers(0, 256, size=shape, dtype=np.uint8)).view("S1")


def random_key(rng: np.random.Generator, shape: tuple):
    """A random numpy basic index: ints (also negative), slices with steps and open ends, and
    sometimes an Ellipsis or fewer entries than dims."""
    parts: list = []
    for n in shape:
        r = rng.random()
        if r < 0.25:
            parts.append(int(rng.integers(-n, n)))
        elif r < 0.35:
            parts.append(slice(None))
        else:

            def bound(n=n):
                return None if rng.random() < 0.3 else int(rng.integers(-n - 1, n + 2))

            step = [None, 1, 1, 2, 3][int(rng.integers(0, 5))]
            parts.append(slice(bound(), bound(), step))
    r = rng.random()
    if r < 0.25:
        i = int(rng.integers(0, len(parts) + 1))
        j = int(rng.integers(i, len(parts) + 1))
        parts = parts[:i] + [Ellipsis] + parts[j:]
    elif r < 0.4:
        parts = parts[: int(rng.integers(0, len(parts) + 1))]
    if len(parts) == 1 and rng.random() < 0.5:
        return parts[0]
    return tuple(parts)


def same(got, want) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    return got.shape == want.shape and got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_every_dtype_and_rank_matches_a_numpy_reference(deployment):
    """Random reads and writes (ints, negative ints, slices with steps and open ends, Ellipsis,
    scalars and broadcast values) on objects of every dtype in 1..8 dims; after every read the
    result must equal the same index of a numpy array kept in parallel."""
    dep = deployment(n=2)
    client = dep.client()
    cont = client.create_container("ref")
    rng = np.random.default_rng(20261122)
    objects = []
    ops = 0
    for name, code in DTYPES.items():
        dt = np.dtype(code)
        for ndim in range(1, 9):
            shape = tuple(int(x) for x in rng.integers(1, MAX_EXTENT[ndim] + 1, size=ndim))
            custom = ndim % 2 == 0
            fill = random_values(rng, dt, ())[()] if custom else None
            obj = cont.create_object(f"ref/{name}/{ndim}d", shape, name, fill=fill)
            assert (obj.shape, obj.ndim, obj.dtype) == (shape, ndim, dt)
            ref = np.zeros(shape, dtype=dt) if fill is None else np.full(shape, fill, dtype=dt)
            assert same(obj.fill_value, ref.reshape(-1)[0])
            assert same(obj[...], ref), f"{obj.name}: never-written elements must read as the fill value"
            for _ in range(8):
                key = random_key(rng, shape)
                want_shape = np.asarray(ref[key]).shape
                if rng.random() < 0.55:
                    r = rng.random()
                    if r < 0.15:
                        value = random_values(rng, dt, ())  # scalar, broadcast over the selection
                    elif r < 0.3 and want_shape:
                        value = random_values(rng, dt, want_shape[-1:])  # broadcast along leading dims
                    else:
                        value = random_values(rng, dt, want_shape)
                    ref[key] = value
                    obj[key] = value
                else:
                    got = obj[key]
                    assert same(got, ref[key]), f"{obj.name}[{key!r}]: {got!r} != {ref[key]!r}"
                ops += 1
            objects.append((obj.name, ref))
    assert ops >= 700
    other = dep.client()  # a second client sees the same bytes
    owners = set()
    for name, ref in objects:
        o = other.open_object(name)
        owners.add(o.metadata["owner"])
        assert same(o[...], ref), name
        assert same(np.asarray(o), ref), name
    assert owners == {0, 1}

    # After a restart every read comes from the logs (the caches are empty): the same random
    # reads must assemble the same bytes from many overlapping extents.
    dep.restart()
    fresh = dep.client()
    for name, ref in objects:
        o = fresh.open_object(name)
        assert same(o[...], ref), name
        for _ in range(3):
            key = random_key(rng, ref.shape)
            assert same(o[key], ref[key]), f"{name}[{key!r}] after restart"


def test_threads_and_clients_work_concurrently(deployment):
    """Threads sharing one client and threads with their own clients write disjoint rows of the
    same objects (sync and async, both servers) at the same time; nothing is lost or mixed."""
    from concurrent.futures import ThreadPoolExecutor

    dep = deployment(n=2)
    shared = dep.client()
    cont = shared.create_container("conc")
    names = [f"conc/{i}" for i in range(4)]
    for n in names:
        cont.create_object(n, (16, 500), "int64", fill=-1)

    def work(t: int, client) -> None:
        objs = [client.open_object(n) for n in names]
        for rep in range(5):
            for k, o in enumerate(objs):
                row = np.full(500, t * 1000 + rep * 10 + k, "<i8")
                if (rep + k) % 2:
                    o[2 * t + rep % 2] = row
                else:
                    o.write_async(row[None, :], offset=(2 * t + rep % 2, 0)).wait()
                assert o[2 * t + rep % 2].tolist() == row.tolist()

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(work, t, shared if t % 2 else dep.client()) for t in range(8)]
        for f in futures:
            f.result(timeout=120)  # re-raises a thread's failure here
    for k, n in enumerate(names):
        got = shared.open_object(n)[...]
        for t in range(8):
            assert (got[2 * t] == t * 1000 + 40 + k).all() and (got[2 * t + 1] == t * 1000 + 30 + k).all()


def test_reads_assembled_from_the_log_with_a_tiny_cache(deployment):
    """With a 1 MiB cache most extents must be read back from the segment log: overlapping
    3-D boxes of many sizes, read through random (strided) selections, against numpy."""
    dep = deployment(n=2, cache_mb=1)
    client = dep.client()
    cont = client.create_container("log")
    rng = np.random.default_rng(99)
    shape = (24, 40, 64)
    objs = {n: cont.create_object(n, shape, "float64", fill=np.nan) for n in ("log/a", "log/b")}
    refs = {n: np.full(shape, np.nan) for n in objs}
    for step in range(60):
        for n, o in objs.items():
            off = [int(rng.integers(0, s)) for s in shape]
            cnt = [int(rng.integers(1, s - x + 1)) for s, x in zip(shape, off)]
            data = rng.random(cnt) + step
            sel = tuple(slice(x, x + c) for x, c in zip(off, cnt))
            if step % 3:
                o[sel] = data
            else:
                o.write_async(data, offset=off).wait()
            refs[n][sel] = data
    assert sum(s["cache_bytes"] for s in client.stats()) <= 2 << 20
    for n, o in objs.items():
        assert same(o[...], refs[n]), n
        for _ in range(25):
            key = random_key(rng, shape)
            assert same(o[key], refs[n][key]), (n, key)
    big = cont.create_object("log/big", (3, 1 << 21), "int32")  # 24 MiB, larger than any cache
    data = np.random.default_rng(1).integers(-(2**31), 2**31, size=(3, 1 << 21), dtype=np.int32)
    t = big.write_async(data)
    t.wait()
    assert same(big[...], data) and same(big[1, 12345::7777], data[1, 12345::7777])


def test_index_errors_follow_numpy(deployment):
    obj = deployment(n=1).client().create_container("c").create_object("x", (4, 5), "int32")
    for bad in [(4, 0), (0, -6), (0, 0, 0), (Ellipsis, 0, Ellipsis)]:
        with pytest.raises(IndexError):
            obj[bad]
        with pytest.raises(IndexError):
            obj[bad] = 1
    with pytest.raises(IndexError):
        obj[::-1]
    with pytest.raises(IndexError):
        obj[[0, 1]]  # fancy indexing is not supported; it must not be misread
    assert obj[1:1].shape == (0, 5) and obj[:, 5:].shape == (4, 0)
    obj[1:1] = 7  # an empty selection writes nothing
    assert not obj[...].any()
    with pytest.raises(ValueError):
        obj[0:2, 0:2] = np.arange(3)  # numpy broadcasting rules


def test_requests_sent_counts_round_trips(deployment):
    """pdcx.requests_sent() counts the requests this process sent: benchmarks print it per
    pattern. A small read of an open object is one; a read served from nothing is none."""
    obj = deployment(n=1).client().create_container("c").create_object("x", (4, 5), "int32")
    obj[...] = np.arange(20, dtype="int32").reshape(4, 5)
    n0 = pdcx.requests_sent()
    assert obj[2, 3] == 13
    assert pdcx.requests_sent() - n0 == 1
    n0 = pdcx.requests_sent()
    assert obj[1:1].shape == (0, 5)  # empty: asks nobody
    assert pdcx.requests_sent() == n0


def test_fill_values_default_and_custom(deployment):
    cont = deployment(n=2).client().create_container("fill")
    customs = {"int8": -3, "uint16": 65535, "int64": -(2**62), "float32": 1.5, "float64": -0.25, "bytes": b"z"}
    for name, code in DTYPES.items():
        dt = np.dtype(code)
        plain = cont.create_object(f"fill/{name}/default", (6, 3), name)
        assert same(plain[...], np.zeros((6, 3), dt)), name
        if name in customs:
            obj = cont.create_object(f"fill/{name}/custom", (6, 3), name, fill=customs[name])
            ref = np.full((6, 3), customs[name], dt)
            assert same(obj[...], ref)
            part = random_values(np.random.default_rng(len(name)), dt, (2, 3))
            obj[2:4] = part
            ref[2:4] = part
            assert same(obj[...], ref), name
            assert same(obj[1:5:3, 1], ref[1:5:3, 1])
            assert obj.fill_value == np.asarray(customs[name], dt)[()]


def test_dims_grow_and_the_new_part_can_be_written(deployment):
    dep = deployment(n=2)
    client = dep.client()
    cont = client.create_container("grow")
    obj = cont.create_object("grow/2d", (3, 4), "int32", fill=-7)
    stale = client.open_object("grow/2d")
    ref = np.arange(12, dtype="<i4").reshape(3, 4)
    obj[...] = ref
    obj.resize((5, 6))
    assert obj.shape == (5, 6)
    grown = np.full((5, 6), -7, dtype="<i4")
    grown[:3, :4] = ref
    assert same(obj[...], grown), "growing must keep data at its coordinates and fill the rest"
    obj[3:, :] = 100 + np.arange(12).reshape(2, 6)
    obj[:3, 4:] = -np.arange(6).reshape(3, 2)
    grown[3:, :] = 100 + np.arange(12).reshape(2, 6)
    grown[:3, 4:] = -np.arange(6).reshape(3, 2)
    assert same(obj[...], grown)
    assert stale.shape == (3, 4)
    assert same(stale[...], grown[:3, :4])
    stale.refresh()
    assert stale.shape == (5, 6) and same(stale[...], grown)
    assert same(dep.client().open_object("grow/2d")[...], grown)
    with pytest.raises(pdcx.InvalidArgumentError):
        obj.resize((4, 6))  # shrinking would hide written data
    with pytest.raises(pdcx.InvalidArgumentError):
        obj.resize((5, 6, 1))
    assert obj.shape == (5, 6) and same(obj[...], grown)

    # Append pattern: size unknown up front, start empty and grow chunk by chunk.
    log = cont.create_object("grow/log", (0,), "float64")
    assert log[...].shape == (0,)
    chunks = [np.random.default_rng(i).random(i + 3) for i in range(6)]
    for c in chunks:
        n = log.shape[0]
        log.resize((n + len(c),))
        log.write_async(c, offset=(n,)).wait()
    assert same(log[...], np.concatenate(chunks))


def test_overlapping_writes_last_waited_wins(deployment):
    """Visibility order is wait order, not start order: the transfer waited last wins where
    regions overlap, whichever client started it and whenever it was started."""
    dep = deployment(n=2)
    c1, c2 = dep.client(), dep.client()
    obj = c1.create_container("ov").create_object("ov/1d", (15,), "int16")
    a = obj.write_async(np.full(10, 1, "<i2"), offset=(0,))
    b = obj.write_async(np.full(10, 2, "<i2"), offset=(5,))
    b.wait()
    a.wait()
    assert obj[...].tolist() == [1] * 10 + [2] * 5, "a was waited last: a wins in 5..10"
    obj[...] = 0
    a = obj.write_async(np.full(10, 1, "<i2"), offset=(0,))
    b = obj.write_async(np.full(10, 2, "<i2"), offset=(5,))
    a.wait()
    b.wait()
    assert obj[...].tolist() == [1] * 5 + [2] * 10

    # Two clients, same region: the later wait wins even though it started first.
    other = c2.open_object("ov/1d")
    t1 = obj.write_async(np.full(15, 11, "<i2"))
    t2 = other.write_async(np.full(15, 22, "<i2"))
    t2.wait()
    t1.wait()
    assert set(other[...].tolist()) == {11}

    # A batch commits in list order.
    a = obj.write_async(np.full(10, 5, "<i2"), offset=(0,))
    b = obj.write_async(np.full(10, 6, "<i2"), offset=(5,))
    pdcx.wait_all([b, a])
    assert obj[...].tolist() == [5] * 10 + [6] * 5

    # Random overlapping boxes in 2-D, waited in a random order, against a numpy replay.
    rng = np.random.default_rng(7)
    box = c1.open_container("ov").create_object("ov/2d", (12, 10), "float64", fill=-1.0)
    ref = np.full((12, 10), -1.0)
    for _round in range(5):
        ts = []
        for k in range(6):
            off = (int(rng.integers(0, 8)), int(rng.integers(0, 6)))
            shp = (int(rng.integers(1, 13 - off[0])), int(rng.integers(1, 11 - off[1])))
            data = rng.random(shp) + k
            writer = box if k % 2 else c2.open_object("ov/2d")
            ts.append((writer.write_async(data, offset=off), off, data))
        for i in rng.permutation(len(ts)):
            t, off, data = ts[i]
            t.wait()
            ref[off[0] : off[0] + data.shape[0], off[1] : off[1] + data.shape[1]] = data
        assert same(box[...], ref)


def test_a_write_is_invisible_until_waited(deployment):
    dep = deployment(n=2)
    c1, c2 = dep.client(), dep.client()
    obj = c1.create_container("vis").create_object("vis/x", (1000,), "uint32", fill=9)
    reader = c2.open_object("vis/x")
    t = obj.write_async(np.arange(1000, dtype="<u4"))
    wait_until(lambda: t.status() == "complete", 10, "the staged write to reach the server")
    assert set(reader[...].tolist()) == {9}, "a staged write must not be visible before wait"
    assert set(obj[...].tolist()) == {9}
    t.wait()
    assert reader[...].tolist() == list(range(1000))


def test_transfer_copies_at_start_and_restarts_after_wait(deployment):
    dep = deployment(n=2)
    client = dep.client()
    obj = client.create_container("rs").create_object("rs/x", (4, 8), "int64")
    arr = np.arange(32, dtype="<i8").reshape(4, 8)
    t = obj.transfer("w", arr)
    assert t.status() == "idle"
    t.start()
    with pytest.raises(pdcx.InvalidArgumentError, match="already started"):
        t.start()
    arr[:] = -1  # start copied the data: this must not leak into the running transfer
    t.wait()
    assert t.status() == "complete"
    assert obj[...].tolist() == np.arange(32).reshape(4, 8).tolist()
    t.start()  # restart after wait sends the array's current contents
    t.wait()
    assert (obj[...] == -1).all()
    arr[:] = 42
    t.start()
    t.wait()
    assert (obj[...] == 42).all()

    part = obj.transfer("w", np.full((2, 3), 5, "<i8"), offset=(1, 2))
    part.start()
    part.wait()
    want = np.full((4, 8), 42)
    want[1:3, 2:5] = 5
    assert obj[...].tolist() == want.tolist()

    r = obj.read_async(offset=(1, 1), shape=(2, 4))
    assert r.wait().tolist() == want[1:3, 1:5].tolist()
    obj[...] = 0
    r.start()
    assert r.wait().tolist() == [[0] * 4] * 2, "a restarted read fetches fresh data"
    assert r.result().tolist() == [[0] * 4] * 2
    with pytest.raises(pdcx.DtypeMismatchError):
        obj.transfer("w", np.zeros((2, 3), "<i8"), offset=(0, 0), shape=(2, 2)).start()


def owner_pid(dep, obj) -> int:
    return dep.cluster()["servers"][obj.metadata["owner"]]["pid"]


def test_status_pending_complete_failed(deployment):
    """Deterministic states: a SIGSTOPped server keeps transfers pending; a forged region the
    server rejects and a server killed mid-transfer both make them failed."""
    dep = deployment(n=2)
    client = dep.client()
    client.placement = "object-static"  # the owner gets the data too, so stopping it stalls both
    cont = client.create_container("st")
    obj = cont.create_object("st/x", (64,), "float32")
    pid = owner_pid(dep, obj)
    w = obj.transfer("w", np.arange(64, dtype="<f4"))
    assert w.status() == "idle"
    freeze(pid)
    try:
        w.start()
        r = obj.read_async(offset=(0,), shape=(8,))
        time.sleep(0.3)
        assert w.status() == "pending" and r.status() == "pending"
    finally:
        os.kill(pid, signal.SIGCONT)
    w.wait()
    assert w.status() == "complete" and w.error is None
    assert r.wait().tolist() == [0.0] * 8, "the read was queued before the write's commit"
    assert r.status() == "complete"
    assert obj[...].tolist() == list(range(64))

    # The client believes the object is bigger than it is: the server re-checks and refuses.
    forged = pdcx.Object(client, {**obj._meta, "dims": [128]})
    bad = forged.write_async(np.ones(128, "<f4"))
    with pytest.raises(pdcx.OutOfBoundsError):
        bad.wait()
    assert bad.status() == "failed" and "OutOfBounds" in bad.error
    assert obj[...].tolist() == list(range(64)), "a refused write must change nothing"
    ok = obj.write_async(np.full(64, 3, "<f4"))
    ok.wait()
    assert ok.status() == "complete"

    # The server dies while a transfer is in flight.
    obj.write_async(np.full(64, 9, "<f4")).wait()  # committed: must survive the kill below
    freeze(pid)
    late = obj.write_async(np.full(64, 10, "<f4"))
    time.sleep(0.1)
    assert late.status() == "pending"
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: late.status() == "failed", 10, "the transfer to fail")
    with pytest.raises(pdcx.PdcxError):
        late.wait()
    assert late.status() == "failed"
    dep.kill9()  # the other server too, then start over the remains
    dep.start()
    assert dep.client().open_object("st/x")[...].tolist() == [9.0] * 64


def test_batches_span_servers(deployment):
    dep = deployment(n=2)
    client = dep.client()
    client.placement = "object-static"  # data on each object's owner, so the batch spans both
    cont = client.create_container("batch")
    objs = [cont.create_object(f"batch/{i}", (50, 4), "int32") for i in range(8)]
    assert {o.metadata["owner"] for o in objs} == {0, 1}
    arrays = [np.arange(200, dtype="<i4").reshape(50, 4) * (i + 1) for i in range(8)]
    ws = [o.transfer("w", a) for o, a in zip(objs, arrays)]
    ws += [o.transfer("w", np.full((10, 4), -i, "<i4"), offset=(40, 0)) for i, o in enumerate(objs)]
    pdcx.start_all(ws + ws[:3])  # a transfer listed twice is started once
    pdcx.wait_all(ws + ws[::-1])
    assert all(t.status() == "complete" for t in ws)
    for i, a in enumerate(arrays):
        a[40:] = -i
    rs = [o.transfer("r") for o in objs] + [o.transfer("r", offset=(45, 1), shape=(5, 2)) for o in objs]
    pdcx.start_all(rs)
    pdcx.wait_all(rs)
    for i, a in enumerate(arrays):
        assert same(rs[i].result(), a)
        assert same(rs[8 + i].result(), a[45:, 1:3])
    assert all(s["extents"] > 0 for s in client.stats()), "both servers should hold data"

    # A restarted batch sends the arrays' new contents.
    for a in arrays:
        a += 1000
    pdcx.start_all(ws[:8])
    pdcx.wait_all(ws[:8])
    for o, a in zip(objs, arrays):
        assert same(o[...], a)

    # One bad transfer fails the batch's wait, the rest (on the other server) still land.
    victim = next(o for o in objs if o.metadata["owner"] == 1)
    forged = pdcx.Object(client, {**victim._meta, "dims": [60, 4]})
    good = [o.transfer("w", np.full((50, 4), 77, "<i4")) for o in objs if o.metadata["owner"] == 0]
    bad = forged.transfer("w", np.ones((60, 4), "<i4"))
    pdcx.start_all(good + [bad])
    with pytest.raises(pdcx.OutOfBoundsError):
        pdcx.wait_all(good + [bad])
    assert bad.status() == "failed"
    assert all(t.status() == "complete" for t in good)
    assert all((t.object[...] == 77).all() for t in good)


def test_object_and_container_tags(deployment):
    dep = deployment(n=2)
    client = dep.client()
    cont = client.create_container("tags", tags={"app": "vpic", "nodes": 64})
    obj = cont.create_object("tags/x", 4, "float64", tags={"s": "electron", "i": -(2**63), "f": 2.5, "b": b"\x00\xff"})
    tv = obj.tags
    assert dict(tv) == {"s": "electron", "i": -(2**63), "f": 2.5, "b": b"\x00\xff"}
    assert [type(tv[k]) for k in ("s", "i", "f", "b")] == [str, int, float, bytes]
    tv["u"] = "ünïcode ✓"
    tv["i"] = 2**63 - 1
    tv["f"] = -1e-300
    tv["flag"] = True
    tv.update({"n1": 1}, n2=2.0)
    assert tv["u"] == "ünïcode ✓" and tv["i"] == 2**63 - 1 and tv["f"] == -1e-300 and tv["flag"] == 1
    assert sorted(tv) == ["b", "f", "flag", "i", "n1", "n2", "s", "u"] and len(tv) == 8
    assert "s" in tv and "zz" not in tv
    del tv["s"]
    with pytest.raises(KeyError):
        tv["s"]
    with pytest.raises(KeyError):
        del tv["s"]
    tv["n1"] = "now a string"
    for bad in ([1, 2], None, {"a": 1}, 2**64, -(2**63) - 1, np.uint64(2**64 - 1)):
        with pytest.raises(pdcx.InvalidArgumentError):
            tv["bad"] = bad  # (an int beyond int64 must not be rounded into a float)
    tv["np"] = np.int16(-5)
    tv["npf"] = np.float32(0.5)
    assert (tv["np"], tv["npf"]) == (-5, 0.5)
    del tv["np"], tv["npf"]
    with pytest.raises(pdcx.InvalidArgumentError):
        tv[""] = 1
    want = {
        "b": b"\x00\xff",
        "f": -1e-300,
        "flag": 1,
        "i": 2**63 - 1,
        "n1": "now a string",
        "n2": 2.0,
        "u": "ünïcode ✓",
    }
    assert dict(tv) == want
    assert dict(dep.client().open_object("tags/x").tags) == want

    ct = cont.tags
    assert dict(ct) == {"app": "vpic", "nodes": 64}
    ct["when"] = 1.25
    ct["blob"] = b"\x01"
    del ct["nodes"]
    with pytest.raises(KeyError):
        del ct["nodes"]
    want_c = {"app": "vpic", "when": 1.25, "blob": b"\x01"}
    assert dict(ct) == want_c
    assert dict(dep.client().open_container("tags").tags) == want_c
    assert [c.name for c in client.containers()] == ["tags"]


def test_an_object_in_several_containers(deployment):
    dep = deployment(n=2)
    client = dep.client()
    c1, c2, c3 = (client.create_container(n) for n in ("alpha", "beta", "gamma"))
    obj = c1.create_object("shared/x", (3,), "int8")
    only1 = c1.create_object("only/one", (1,), "int8")
    c2.add(obj)
    c2.add(obj)  # adding twice is harmless
    assert obj.metadata["containers"] == ["alpha", "beta"]
    assert [o.name for o in c1.objects()] == ["only/one", "shared/x"]
    assert [o.name for o in c2.objects()] == ["shared/x"]
    assert c3.objects() == []
    obj[...] = [1, 2, 3]
    via2 = c2.objects()[0]
    assert via2.id == obj.id and via2[...].tolist() == [1, 2, 3]
    assert [o.name for o in client.objects()] == ["only/one", "shared/x"]
    assert [o.name for o in dep.client().objects("beta")] == ["shared/x"]
    assert only1.metadata["containers"] == ["alpha"]
    with pytest.raises(pdcx.NotFoundError):
        client.objects("nope")
    with pytest.raises(pdcx.NotFoundError):
        client._c.add_to_container(obj.id, "nope")
    assert obj.metadata["containers"] == ["alpha", "beta"]


def test_tag_queries(deployment):
    dep = deployment(n=2)
    client = dep.client()
    cont = client.create_container("q")
    species = ["electron", "ion", "positron"]
    tags = {}
    for s in range(8):
        t = {"step": s, "species": species[s % 3], "energy": s * 0.75, "raw": bytes([s, 255])}
        if s < 3:
            t["units"] = "eV"
        tags[f"run1/s{s}"] = t
    tags["run2/x"] = {"step": 3, "species": "electron", "energy": 2.0, "path": "a<=b"}
    tags["run2/y"] = {"step": 3.0, "species": "muon"}
    for name, t in tags.items():
        cont.create_object(name, (2,), "int8", tags=t)
    owners = {client.open_object(n).metadata["owner"] for n in tags}
    assert owners == {0, 1}

    def expect(pred):
        return sorted(n for n, t in tags.items() if pred(t))

    def num(t, k):
        return t.get(k) if isinstance(t.get(k), (int, float)) else None

    cases = [
        (("step=3",), {}, lambda t: t["step"] == 3),
        (("step=3.0",), {}, lambda t: t["step"] == 3),
        (("step!=3",), {}, lambda t: t["step"] != 3),
        (("energy>=1.5",), {}, lambda t: (num(t, "energy") or -1) >= 1.5),
        (("energy<1.5",), {}, lambda t: "energy" in t and t["energy"] < 1.5),
        (("energy>0.75", "energy<=3"), {}, lambda t: "energy" in t and 0.75 < t["energy"] <= 3),
        (("species~elec*",), {}, lambda t: t["species"].startswith("elec")),
        (("species~*tron",), {}, lambda t: t["species"].endswith("tron")),
        (("species~?on",), {}, lambda t: t["species"] == "ion"),
        (("species~[ei]*",), {}, lambda t: t["species"][0] in "ei"),
        (("name~run1/*",), {}, lambda t: "raw" in t),
        (("name~run1/s[0-2]",), {}, lambda t: "units" in t),
        (("name~run2/?",), {}, lambda t: "raw" not in t),
        (("units?",), {}, lambda t: "units" in t),
        (("nothing?",), {}, lambda t: False),
        ((), {"species": "electron"}, lambda t: t["species"] == "electron"),
        ((), {"step": (2, 4)}, lambda t: 2 <= t["step"] <= 4),
        ((), {"step": (None, 1)}, lambda t: t["step"] <= 1),
        ((), {"energy": (1.5, None)}, lambda t: (num(t, "energy") or -1) >= 1.5),
        ((), {"energy": 1.5}, lambda t: t.get("energy") == 1.5),
        ((), {"raw": bytes([2, 255])}, lambda t: t.get("raw") == bytes([2, 255])),
        ((), {"path": "a<=b"}, lambda t: t.get("path") == "a<=b"),
        (("species~*on",), {"step": (1, 6)}, lambda t: t["species"].endswith("on") and 1 <= t["step"] <= 6),
        ((), {"name": "run2/x"}, lambda t: t.get("path") == "a<=b"),
        ((), {"species": "nobody"}, lambda t: False),
    ]
    for conds, kwargs, pred in cases:
        got = client.query(*conds, **kwargs)
        assert got == expect(pred), (conds, kwargs)
    assert len(client.query("step=3")) == 3
    flagged = client.open_object("run1/s1")
    flagged.tags["ok"] = True
    assert client.query(ok=True) == ["run1/s1"]
    with pytest.raises(pdcx.InvalidArgumentError):
        client.query("energy>high")
    with pytest.raises(pdcx.InvalidArgumentError):
        client.query("just words")


def test_duplicates_and_unknown_names(deployment):
    dep = deployment(n=2)
    client = dep.client()
    cont = client.create_container("dup", tags={"v": 1})
    obj = cont.create_object("dup/x", (3,), "int16", fill=4)
    obj[0] = 1
    other = client.create_container("dup2")
    with pytest.raises(pdcx.AlreadyExistsError):
        client.create_container("dup")
    with pytest.raises(pdcx.AlreadyExistsError):
        dep.client().create_container("dup", tags={"v": 2})
    with pytest.raises(pdcx.AlreadyExistsError):
        cont.create_object("dup/x", (9, 9), "float64")
    with pytest.raises(pdcx.AlreadyExistsError):
        other.create_object("dup/x", (3,), "int16")
    again = client.open_object("dup/x")
    assert again.shape == (3,) and again[...].tolist() == [1, 4, 4] and again.metadata["containers"] == ["dup"]
    assert dict(client.open_container("dup").tags) == {"v": 1}
    for call in (
        lambda: client.open_object("dup/nope"),
        lambda: client.open_container("nope"),
        lambda: dep.client().open_object(""),
    ):
        with pytest.raises((pdcx.NotFoundError, pdcx.InvalidArgumentError)) as ei:
            call()
        assert isinstance(ei.value, pdcx.PdcxError)
    with pytest.raises(pdcx.NotFoundError):
        client.open_object("dup/nope")
    with pytest.raises(pdcx.NotFoundError):
        client.open_container("nope")


def test_batched_creates_fail_per_object(deployment):
    dep = deployment(n=2)
    client = dep.client()
    cont = client.create_container("bc")
    cont.create_object("bc/taken", (2,), "int8")
    specs = [
        {"name": f"bc/o{i}", "shape": (i + 1, 2), "dtype": "float32", "tags": {"i": i, "s": "x"}} for i in range(50)
    ]
    specs.insert(7, {"name": "bc/taken", "shape": 3})
    specs.insert(9, {"name": "", "shape": 3})
    specs.append({"name": "bc/filled", "shape": 4, "dtype": "int16", "fill": 5})
    out = cont.create_objects(specs)
    assert len(out) == len(specs)
    assert isinstance(out[7], pdcx.AlreadyExistsError)
    assert isinstance(out[9], pdcx.InvalidArgumentError)
    made = [o for o in out if isinstance(o, pdcx.Object)]
    assert len(made) == 51
    assert {o.metadata["owner"] for o in made} == {0, 1}, "the batch spans both servers"
    for spec, o in zip(specs, out):
        if isinstance(o, pdcx.Object):
            again = dep.client().open_object(spec["name"])
            assert again.metadata == o.metadata
            assert again.metadata["containers"] == ["bc"]
    assert client.open_object("bc/o3").shape == (4, 2) and client.open_object("bc/o3").tags["i"] == 3
    assert client.open_object("bc/filled")[...].tolist() == [5, 5, 5, 5]
    assert sorted(client.query("i>=48")) == ["bc/o48", "bc/o49"]
    assert cont.create_objects([]) == []
    with pytest.raises(pdcx.AlreadyExistsError):
        cont.create_objects([{"name": "bc/o1", "shape": 1}], raise_on_error=True)


def test_embedded_default_leaves_nothing_behind(tmp_path):
    """`pdcx.connect()` with PDCX_ROOT unset starts a private server in the process; when the
    script exits (without calling close) its temp directory is gone and nothing listens."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = (
        "import json, os, numpy as np, pdcx\n"
        "c = pdcx.connect()\n"
        "o = c.create_container('e').create_object('e/x', (3, 4), 'float32', tags={'k': 1})\n"
        "o[1:, ::2] = 7\n"
        "assert o[...].tolist() == [[0] * 4, [7, 0, 7, 0], [7, 0, 7, 0]]\n"
        "assert c.query(k=1) == ['e/x']\n"
        "print(c._embedded.dir)\n"
        "print(json.load(open(os.path.join(c._embedded.dir, 'cluster.json')))['servers'][0]['addr'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PDCX_ROOT"}
    env["TMPDIR"] = str(tmp)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, check=False)
    assert p.returncode == 0, p.stderr
    emb_dir, addr = p.stdout.split()
    assert emb_dir.startswith(str(tmp))
    assert list(tmp.iterdir()) == [], "the embedded deployment's temp dir must be removed at exit"
    host, port = addr.rsplit(":", 1)
    with pytest.raises(OSError):
        socket.create_connection((host, int(port)), timeout=2).close()

    # Under MPI there is no sensible private server: every rank would get its own.
    env["OMPI_COMM_WORLD_SIZE"] = "4"
    p = subprocess.run(
        [sys.executable, "-c", "import pdcx; pdcx.connect()"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert p.returncode != 0 and "UnavailableError" in p.stderr and "PDCX_ROOT" in p.stderr
    assert list(tmp.iterdir()) == []


def test_metadata_is_reported(deployment):
    dep = deployment(n=2)
    client = dep.client()
    before = time.time()
    obj = client.create_container("md").create_object("md/x", (2, 3), "uint8", tags={"a": 1})
    md = obj.metadata
    assert md["name"] == "md/x" and md["dims"] == [2, 3] and md["dtype"] == "uint8"
    assert md["containers"] == ["md"] and md["owner"] in (0, 1)
    assert before - 5 <= md["ctime"] <= md["mtime"] <= time.time() + 5
    assert "tags" not in md and "fill" not in md
    obj[...] = 1
    assert obj.metadata["mtime"] >= md["mtime"]
    stats = client.stats()
    assert [s["rank"] for s in stats] == [0, 1] and sum(s["objects"] for s in stats) == 1
    assert json.loads(json.dumps(stats))  # plain JSON-able dicts


def test_region_arguments_must_be_integers_and_say_how_to_slice():
    client = pdcx.connect()
    obj = client.create_container("args").create_object("args/x", (10, 4), "int32")
    obj[...] = np.arange(40).reshape(10, 4)
    with pytest.raises(pdcx.InvalidArgumentError, match=r"obj\[10:20"):
        obj.read_async((slice(2, 4), slice(None)))
    with pytest.raises(pdcx.InvalidArgumentError, match="shape must be integers"):
        obj.read_async(offset=(0, 0), shape=(2.5, 4))
    assert obj.read_async(offset=np.array([2, 0]), shape=(2, 4)).wait().tolist() == [[8, 9, 10, 11], [12, 13, 14, 15]]
