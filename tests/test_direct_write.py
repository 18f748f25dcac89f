"""One-copy writes: a large write to a server on the client's node is
written by the client itself, straight from its buffer into room the server reserved in its
log, then committed as usual. The bytes read back exactly (N-D regions, overlaps, two
clients), a `local` write survives kill -9 of every server, and PDCX_DIRECT_WRITE=0 turns the
path off (the server then copies the bytes itself, as before)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from conftest import client_on

MIB = 1 << 20


def direct_bytes(c) -> int:
    return sum(s["direct_write_bytes"] for s in c.stats())


def test_large_writes_are_written_by_the_client_and_survive_kill9(deployment):
    dep = deployment(n=2)
    a, b = client_on(dep, 0), client_on(dep, 1)
    cont = a.create_container("dw")
    one = cont.create_object("dw/one", (2 * MIB,), "float64", fill=-1.0)  # 16 MiB
    two = cont.create_object("dw/two", (512, 1024), "int32", fill=7)  # 2 MiB
    want1 = np.full(2 * MIB, -1.0)
    want2 = np.full((512, 1024), 7, dtype="<i4")
    rng = np.random.default_rng(10)

    before = direct_bytes(a)
    # Synchronous writes (from the caller's array, no copy) and transfers (loaded, then
    # written from the loaded block), from clients on both servers' nodes, overlapping.
    v = rng.standard_normal(MIB)
    one[0:MIB] = v
    want1[0:MIB] = v
    v = rng.standard_normal(MIB // 2)
    b.open_object("dw/one").write_async(v, offset=(MIB // 4,)).wait()
    want1[MIB // 4 : MIB // 4 + MIB // 2] = v
    ts = []
    for k in range(4):
        v = rng.standard_normal(MIB // 4) + k
        ts.append(one.write_async(v, offset=(MIB + k * (MIB // 4),)))
        want1[MIB + k * (MIB // 4) : MIB + (k + 1) * (MIB // 4)] = v
    for t in ts:
        t.wait()
    block = rng.integers(-1000, 1000, size=(300, 600), dtype="<i4")
    two.write_async(block, offset=(100, 200)).wait()
    want2[100:400, 200:800] = block
    small = np.arange(1000, dtype="<i4").reshape(1, 1000)  # 4 KB: staged, not by the client
    two.write_async(small, offset=(0, 0)).wait()
    want2[0:1, :1000] = small

    wrote = 8 * (MIB + MIB // 2 + MIB) + 4 * 300 * 600
    assert direct_bytes(a) - before == wrote
    for c in (a, b):
        assert np.array_equal(c.open_object("dw/one")[...], want1)
        assert np.array_equal(c.open_object("dw/two")[...], want2)

    # Acknowledged at `local` means durable: kill every server, restart, read.
    dep.kill9()
    dep.start()
    c = dep.client()
    assert np.array_equal(c.open_object("dw/one")[...], want1)
    assert np.array_equal(c.open_object("dw/two")[...], want2)


def test_direct_write_env_off_writes_through_the_server(deployment):
    dep = deployment(n=1)
    c = dep.client()
    o = c.create_container("off").create_object("off/x", (MIB,), "float32")
    before = direct_bytes(c)
    code = (
        "import numpy as np, pdcx\n"
        f"c = pdcx.connect({str(dep.root)!r})\n"
        "o = c.open_object('off/x')\n"
        "o[...] = np.arange(o.shape[0], dtype='<f4')\n"
        "o.write_async(np.full(1000, 3, dtype='<f4'), offset=(5,)).wait()\n"
    )
    env = {**os.environ, "PDCX_DIRECT_WRITE": "0"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    assert direct_bytes(c) == before
    want = np.arange(MIB, dtype="<f4")
    want[5:1005] = 3
    assert np.array_equal(o[...], want)
    # The same writes with the path on are written by the client.
    o[...] = want[::-1].copy()
    assert direct_bytes(c) == before + 4 * MIB
    assert np.array_equal(o[...], want[::-1])


def test_memory_durability_writes_are_visible_at_once(deployment):
    dep = deployment(n=1)
    a = dep.client()
    o = a.create_container("m").create_object("m/x", (MIB,), "int64")
    v = np.arange(MIB, dtype="<i8") * 3
    o.write_async(v, durability="memory").wait()
    b = dep.client()
    assert np.array_equal(b.open_object("m/x")[...], v)
    assert direct_bytes(a) >= 8 * MIB


def test_an_array_may_change_as_soon_as_start_returns(deployment):
    # A large transfer to a server on this node is written into its log from the array itself
    # before `start` returns (no copy in the client); a small one, or one whose server takes no
    # one-copy writes, is copied at start. Either way the bytes stored are those the array held
    # at start, whatever the program does to it afterwards.
    import pdcx

    dep = deployment(n=2)
    c = client_on(dep, 0)
    o = c.create_container("re").create_object("re/a", (6 * MIB,), "u1")
    buf = np.zeros(MIB, np.uint8)
    before = direct_bytes(c)
    ts = []
    for k in range(4):
        buf[:] = k + 1
        ts.append(o.write_async(buf, offset=(k * MIB,)))
        # Written from the array before start returned: the server already holds the bytes.
        assert ts[-1].status() == "complete"
    buf[:] = 99
    small = np.full(1000, 7, np.uint8)
    ts.append(o.write_async(small, offset=(4 * MIB,)))
    small[:] = 98
    pdcx.wait_all(ts)
    want = np.zeros(6 * MIB, np.uint8)
    want[: 4 * MIB] = np.repeat(np.arange(1, 5, dtype=np.uint8), MIB)
    want[4 * MIB : 4 * MIB + 1000] = 7
    assert np.array_equal(o[...], want)
    assert direct_bytes(c) - before == 4 * MIB, "the large writes went one-copy"

    # start_all: writes from their arrays, a read of the same object in the same batch.
    parts = [np.full(MIB // 2, 50 + k, np.uint8) for k in range(2)]
    ws = [o.transfer("w", p, (5 * MIB + k * (MIB // 2),)) for k, p in enumerate(parts)]
    r = o.transfer("r", offset=(0,), shape=(MIB,))
    pdcx.start_all(ws + [r])
    for p in parts:
        p[:] = 0
    pdcx.wait_all(ws + [r])
    assert np.array_equal(r.result(), want[:MIB])
    want[5 * MIB :] = np.repeat(np.array([50, 51], np.uint8), MIB // 2)
    assert np.array_equal(o[...], want)


def test_a_transfer_goes_one_copy_from_64_kib_and_a_synchronous_write_from_256_kib(deployment):
    # A transfer past the one-message size is staged by a worker and committed at `wait` in
    # messages of its own: reserving instead costs no round trip, so it goes one-copy. A
    # synchronous write of the same size travels with its commit in one message: staged.
    dep = deployment(n=1)
    c = dep.client()
    o = c.create_container("mid").create_object("mid/x", (MIB,), "u1")
    chunk = 128 << 10
    before = direct_bytes(c)
    o[0:chunk] = np.full(chunk, 1, np.uint8)
    assert direct_bytes(c) == before, "a 128 KiB synchronous write is staged"
    ts = [o.write_async(np.full(chunk, k + 2, np.uint8), offset=(chunk * (k + 1),)) for k in range(3)]
    for t in ts:
        t.wait()
    assert direct_bytes(c) - before == 3 * chunk, "128 KiB transfers went one-copy"
    small = o.write_async(np.full(64 << 10, 9, np.uint8), offset=(4 * chunk,))
    small.wait()
    assert direct_bytes(c) - before == 3 * chunk, "a 64 KiB transfer is sent with its commit"
    want = np.zeros(MIB, np.uint8)
    for k in range(4):
        want[k * chunk : (k + 1) * chunk] = k + 1
    want[4 * chunk : 4 * chunk + (64 << 10)] = 9
    assert np.array_equal(o[...], want)
