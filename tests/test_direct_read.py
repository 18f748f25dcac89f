"""One-copy reads: a client on a server's node asks it for a read plan
and preads the committed log bytes straight from the segment files into its own buffer.
The bytes are exactly those of a read through the server: overlapping writes from two
clients (the last waited wins), fill values, N-D regions. Whatever a plan cannot express
(several holders, `memory` writes not synced yet, segments retired to a tier) and a server
restart fall back to the usual read, correctly. PDCX_DIRECT_READ=0 turns it off."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pdcx
from conftest import client_on, run_pdcx
from test_tiers import write_config


def seg_fds() -> set[str]:
    """Segment files this process has open (the direct read path keeps them open)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "/log/seg-" in target:
            out.add(target)
    return out


def shm_total(c: pdcx.Client) -> int:
    return sum(s["shm_bytes"] for s in c.stats())


def through_server(dep, *names: str) -> bytes:
    """The objects' bytes as a client with PDCX_DIRECT_READ=0 reads them (the server reads,
    merging other holders' pieces at the owner); it must open no segment file."""
    code = (
        "import os, sys, pdcx\n"
        f"c = pdcx.connect({str(dep.root)!r})\n"
        f"out = b''.join(c.open_object(n)[...].tobytes() for n in {list(names)!r})\n"
        "fds = [os.readlink('/proc/self/fd/' + f) for f in os.listdir('/proc/self/fd')\n"
        "       if os.path.exists('/proc/self/fd/' + f)]\n"
        "assert not [t for t in fds if '/log/seg-' in t], fds\n"
        "sys.stdout.buffer.write(out)\n"
    )
    env = {**os.environ, "PDCX_DIRECT_READ": "0"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True, timeout=60).stdout


def reads_sync(obj, want: np.ndarray) -> None:
    """The synchronous reads: one-copy from the log wherever the region can be planned."""
    assert np.array_equal(obj[...], want)
    if want.ndim == 1:
        assert np.array_equal(obj[123:1789], want[123:1789])
    else:
        assert np.array_equal(obj[3:17, 5:40], want[3:17, 5:40])


def reads_every_way(obj, want: np.ndarray) -> None:
    """Also the asynchronous ones. Those of at most 64 KiB are sent at wait on the calling
    thread (one round trip, no worker hand-off), through the server's shared memory."""
    reads_sync(obj, want)
    assert np.array_equal(obj.read_async().wait(), want)
    if want.ndim == 1:
        n = want.shape[0]
        parts = [obj.transfer("r", offset=(k,), shape=(min(700, n - k),)) for k in range(0, n, 700)]
        pdcx.start_all(parts)
        pdcx.wait_all(parts)
        assert np.array_equal(np.concatenate([p.result() for p in parts]), want)
        assert np.array_equal(obj[123:1789], want[123:1789])
    else:
        assert np.array_equal(obj[3:17, 5:40], want[3:17, 5:40])
        assert np.array_equal(obj.read_async(offset=(1, 2), shape=(9, 11)).wait(), want[1:10, 2:13])


def test_overlapping_writes_from_two_clients_and_fill_read_directly(deployment):
    dep = deployment(n=2)
    a, b = client_on(dep, 0), client_on(dep, 0)  # both write to server 0
    cont = a.create_container("d")
    o = cont.create_object("d/one", (5000,), "int32", fill=-7)
    m = cont.create_object("d/two", (40, 64), "float32", fill=2.5)
    want = np.full(5000, -7, dtype="<i4")
    ob = b.open_object("d/one")
    for k, (cl, lo, hi) in enumerate([(o, 100, 3000), (ob, 2000, 4500), (o, 2500, 2600), (ob, 0, 50)]):
        vals = np.arange(lo, hi, dtype="<i4") * 10 + k
        cl.write_async(vals, offset=(lo,)).wait()
        want[lo:hi] = vals
    # Two transfers started together, the one waited last wins the overlap.
    t1 = o.write_async(np.full(1000, 111, dtype="<i4"), offset=(3500,))
    t2 = ob.write_async(np.full(1000, 222, dtype="<i4"), offset=(3000,))
    t1.wait()
    t2.wait()
    want[3500:4500] = 111
    want[3000:4000] = 222
    want2 = np.full((40, 64), 2.5, dtype="<f4")
    mb = b.open_object("d/two")
    for k, (cl, r0, c0, r1, c1) in enumerate([(m, 0, 0, 20, 40), (mb, 10, 30, 35, 64), (m, 15, 10, 25, 50)]):
        block = np.full((r1 - r0, c1 - c0), k + 0.5, dtype="<f4")
        cl.write_async(block, offset=(r0, c0)).wait()
        want2[r0:r1, c0:c1] = block

    for c in (a, b, client_on(dep, 1)):
        shm_before = shm_total(c)
        reads_sync(c.open_object("d/one"), want)
        reads_sync(c.open_object("d/two"), want2)
        # Read straight from the log files, not through the server's shared memory.
        assert shm_total(c) == shm_before
        reads_every_way(c.open_object("d/one"), want)
        reads_every_way(c.open_object("d/two"), want2)
    assert any("/server-0000/log/seg-" in p for p in seg_fds()), seg_fds()

    assert through_server(dep, "d/one", "d/two") == want.tobytes() + want2.tobytes()


def test_several_holders_and_unsynced_memory_writes_fall_back(deployment):
    dep = deployment(n=2)
    a, b = client_on(dep, 0), client_on(dep, 1)
    o = a.create_container("h").create_object("h/x", (4000,), "int64", fill=5)
    want = np.full(4000, 5, dtype="<i8")
    o.write_async(np.arange(0, 2500, dtype="<i8"), offset=(0,)).wait()  # on server 0
    want[0:2500] = np.arange(0, 2500)
    b.open_object("h/x").write_async(np.full(2000, -1, dtype="<i8"), offset=(1500,)).wait()  # server 1
    want[1500:3500] = -1
    for c in (a, b):
        reads_every_way(c.open_object("h/x"), want)
    assert through_server(dep, "h/x") == want.tobytes()
    # `memory` durability: visible before the next sync, not under the log's manifest yet.
    mem = a.open_object("h/x")
    mem.write_async(np.full(100, 9, dtype="<i8"), offset=(3900,), durability="memory").wait()
    want[3900:4000] = 9
    for c in (a, b):
        reads_every_way(c.open_object("h/x"), want)
    assert through_server(dep, "h/x") == want.tobytes()


def test_reads_after_a_segment_is_retired_and_after_a_restart(deployment, tmp_path, monkeypatch):
    dep = deployment(n=1, start=False)
    write_config(dep.root, tmp_path, interval_ms=3_600_000)  # flushes only when asked
    # No background compaction: every retirement here is the flush's.
    monkeypatch.setenv("PDCX_COMPACTION_THRESHOLD", "0")
    dep.start()
    c = dep.client()
    cont = c.create_container("r")
    n = 8 * 32_768
    o = cont.create_object("r/auto", (n,), "float64", fill=1.5)
    data = np.random.default_rng(3).standard_normal(n)
    for k in range(0, n, 32_768):
        o.write_async(data[k : k + 32_768], offset=(k,)).wait()
    want = data.copy()
    reads_every_way(o, want)  # direct: opens the segments
    opened = seg_fds()
    assert opened
    log_before = sum(s["log_bytes"] for s in c.stats())
    run_pdcx("flush", "--root", dep.root, timeout=120)
    assert sum(s["log_bytes"] for s in c.stats()) < log_before  # segments retired
    reads_every_way(o, want)  # the tier copy (or this client's descriptor of the old file)
    fresh = dep.client()
    reads_every_way(fresh.open_object("r/auto"), want)
    # Descriptors of retired segments are not kept (they would pin the disk space): closed at
    # the next plan answer once a sweep is due (at most a second apart; at once when a plan
    # shows an item's extents left the log entirely, which with spare segments ahead need not
    # happen here).
    time.sleep(1.1)
    reads_every_way(o, want)
    gone = {p for p in seg_fds() if p.endswith("(deleted)")}
    assert not gone, gone

    # New writes after the flush go to a live segment and are read directly again.
    o.write_async(np.full(1000, 4.0), offset=(5000,)).wait()
    want[5000:6000] = 4.0
    reads_every_way(o, want)
    dep.restart()
    for cl in (c, dep.client()):
        reads_every_way(cl.open_object("r/auto"), want)


def test_a_forked_child_gathers_without_the_parents_threads(deployment):
    """A strided read large enough to be split over threads works in a child forked after
    the parent's reads started the thread pool (its threads do not exist in the child): it
    is gathered on the calling thread instead of waiting for them forever."""
    dep = deployment(n=1)
    c = dep.client()
    o = c.create_container("f").create_object("f/x", (64, 256, 256), "float32")
    data = np.random.default_rng(1).standard_normal((64, 256, 256), dtype=np.float32)
    for k in range(0, 64, 16):
        o.write_async(data[k : k + 16], offset=(k, 0, 0)).wait()
    want = data[:, ::2, ::2]  # 4 MiB: split over the pool's threads
    assert np.array_equal(o[:, ::2, ::2], want)
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 4
        try:
            code = 0 if np.array_equal(o[:, ::2, ::2], want) else 3
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("the forked child's strided read hung")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0
