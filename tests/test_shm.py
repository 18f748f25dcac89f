"""Shared-memory bulk path. A client on the same node as a server moves write and read data
through a sealed memfd arena that the server maps (no socket copy of the bytes); a client on
another node (a different PDCX_NODE than the servers' --node) or with PDCX_SHM=0 uses TCP.
Bad shared-memory requests get clear errors and the server keeps serving; a killed client's
arena is unmapped by the server."""

from __future__ import annotations

import fcntl
import gc
import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pdcx
import pytest
from conftest import RESP_DATA, RESP_ERROR, RESP_STAGED, RawConn, decode_error, enc_commit, wait_until
from pdcx import _native

RESP_ATTACHED = b"\x00\x01"  # protocol::Response::Handshake(Attached)


def shm_total(c: pdcx.Client) -> int:
    return sum(s["shm_bytes"] for s in c.stats())


def client_with(dep, monkeypatch, **env: str) -> pdcx.Client:
    """A client of `dep` created with extra environment (PDCX_NODE, PDCX_SHM)."""
    with monkeypatch.context() as m:
        for k, v in env.items():
            m.setenv(k, v)
        return dep.client()


def exercise(c: pdcx.Client, prefix: str) -> int:
    """Writes and reads every way the API offers, checks the bytes, returns the bulk bytes moved."""
    cont = c.create_container(prefix)
    rng = np.random.default_rng(7)
    big = rng.standard_normal((512, 1024))  # 4 MiB of float64
    small = np.arange(1024, dtype="<i4")  # 4 KiB
    o_big = cont.create_object(f"{prefix}/big", big.shape, "float64")
    o_small = cont.create_object(f"{prefix}/small", small.shape, "int32")
    moved = 0

    o_big[...] = big  # synchronous write
    o_small[...] = small
    moved += big.nbytes + small.nbytes
    got = o_big[...]  # synchronous read
    assert got.tobytes() == big.tobytes()
    assert o_small[...].tobytes() == small.tobytes()
    moved += big.nbytes + small.nbytes

    # Transfers: a non-contiguous source, a batch over one object, async reads.
    flipped = np.asfortranarray(big[::-1])
    t = o_big.write_async(flipped)
    t.wait()
    moved += big.nbytes
    assert o_big[...].tobytes() == np.ascontiguousarray(flipped).tobytes()
    moved += big.nbytes
    quarters = [rng.integers(0, 1 << 30, size=256, dtype="<i4") for _ in range(4)]
    ts = [o_small.transfer("w", q, offset=(256 * i,)) for i, q in enumerate(quarters)]
    pdcx.start_all(ts)
    pdcx.wait_all(ts)
    moved += small.nbytes
    reads = [o_small.transfer("r", offset=(256 * i,), shape=(256,)) for i in range(4)]
    pdcx.start_all(reads)
    pdcx.wait_all(reads)
    for r, q in zip(reads, quarters):
        assert r.result().tobytes() == q.tobytes()
    moved += small.nbytes
    half = o_big.read_async(offset=(256, 0), shape=(256, 1024)).wait()
    assert half.tobytes() == np.ascontiguousarray(flipped[256:]).tobytes()
    moved += big.nbytes // 2
    return moved


def test_same_node_data_goes_through_shared_memory(deployment, monkeypatch):
    dep = deployment(n=2)
    monkeypatch.delenv("PDCX_SHM", raising=False)
    # Reads of committed log bytes and large writes would bypass the server
    # (tests/test_direct_read.py, tests/test_direct_write.py).
    monkeypatch.setenv("PDCX_DIRECT_READ", "0")
    monkeypatch.setenv("PDCX_DIRECT_WRITE", "0")
    c = dep.client()
    before = shm_total(c)
    moved = exercise(c, "same")
    # Every bulk byte of the exercise, written and read, went through an arena.
    assert shm_total(c) - before == moved

    # An async read's array is the arena block itself: it stays intact while later reads and
    # writes reuse the arena, and outlives its client.
    c2 = pdcx.connect(dep.root)  # not kept by the fixture, so it can really go away
    obj = c2.open_object("same/small")
    kept = obj.read_async().wait()
    want = kept.copy()
    for i in range(20):
        obj.write_async(np.full(1024, i, dtype="<i4")).wait()
        assert (obj.read_async().wait() == i).all()
    assert kept.tobytes() == want.tobytes()
    del c2, obj
    gc.collect()
    assert kept.tobytes() == want.tobytes()


@pytest.mark.parametrize("env", [{"PDCX_NODE": "a-different-node"}, {"PDCX_SHM": "0"}])
def test_other_nodes_and_pdcx_shm_0_use_tcp(deployment, monkeypatch, env):
    monkeypatch.setenv("PDCX_DIRECT_READ", "0")  # see above
    dep = deployment(n=2)
    servers_node = dep.cluster()["servers"][0]["node"]
    assert servers_node != "a-different-node"
    c = client_with(dep, monkeypatch, **env)
    exercise(c, "tcp")
    assert shm_total(c) == 0
    # The same data read by a same-node client through shared memory is identical.
    same = client_with(dep, monkeypatch, PDCX_NODE=servers_node)
    obj = same.open_object("tcp/big")
    a = obj[...]
    b = c.open_object("tcp/big")[...]
    assert a.tobytes() == b.tobytes()
    assert shm_total(same) == a.nbytes


def arena_name(secret: bytes, tag: str) -> str:
    """A name the server accepts: pdcx_client::shm::arena_prefix + anything."""
    digest = hmac.new(secret, b"pdcx shm arena", hashlib.sha256).digest()
    return f"pdcx-{digest[:6].hex()}-{os.getpid()}-{tag}"


def memfd(name: str, size: int, sealed: bool = True) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if sealed:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd


def req(family: str, op: str, **fields) -> bytes:
    """The frame body of protocol::Request::<family>(<op>) (encoded by the native module)."""
    return _native._encode_request(json.dumps({family: {op: fields}}))


def stage_shm(txn: int, oid: int, n: int, arena: int, offset: int) -> bytes:
    item = {"txn": txn, "id": oid, "region": {"offset": [0], "count": [n]}, "len": 4 * n}
    return req("Write", "Stage", items=[item], shm=[{"arena": arena, "offset": offset}], commit=None)


def shm_opts(offset: int) -> dict:
    """ReadOpts of a read into arena 1 at `offset`."""
    return {"held": False, "shm": [{"arena": 1, "offset": offset}], "select": "Region"}


def test_bad_shared_memory_requests_get_clear_errors_and_the_server_keeps_serving(deployment):
    dep = deployment(n=1)
    c = dep.client()
    obj = c.create_container("raw").create_object("raw/o", (1000,), "int32", fill=-1)
    secret = dep.secret()
    size = 1 << 20
    good = memfd(arena_name(secret, "good"), size)
    unsealed = memfd(arena_name(secret, "unsealed"), size, sealed=False)
    data = np.arange(1000, dtype="<i4") * 3
    os.pwrite(good, data.tobytes(), 8192)
    raw = RawConn(dep.addr(0))
    raw.handshake(secret)
    try:

        def call_error(body: bytes) -> tuple[str, str]:
            rbody, _ = raw.call(body)
            err = decode_error(rbody)
            assert err is not None, rbody[:40]
            return err

        def attach(arena: int, fd: int, name: str, length: int = size) -> bytes:
            return req("Handshake", "AttachShm", arena=arena, pid=os.getpid(), fd=fd, name=name, len=length)

        # Attach checks: unsealed file, a name of no pdcx deployment, a file shorter than claimed.
        kind, msg = call_error(attach(1, unsealed, arena_name(secret, "unsealed")))
        assert kind == "InvalidArgument" and "F_SEAL_SHRINK" in msg, msg
        kind, msg = call_error(attach(1, good, "pdcx-000000000000-1-x"))
        assert "not a shared-memory arena of this deployment" in msg, msg
        kind, msg = call_error(attach(1, good, arena_name(secret, "good"), 2 * size))
        assert "fewer than" in msg, msg
        rbody, _ = raw.call(attach(1, good, arena_name(secret, "good")))
        assert rbody.startswith(RESP_ATTACHED), decode_error(rbody)

        # Offsets beyond the mapping, straddling its end, overflowing; an unknown arena.
        for offset in (size, size - 100, 2**64 - 1):
            kind, msg = call_error(stage_shm(1, obj.id, 1000, 1, offset))
            assert kind == "InvalidArgument" and "outside shared-memory arena 1" in msg, msg
        kind, msg = call_error(stage_shm(1, obj.id, 1000, 7, 0))
        assert "arena 7 is not attached" in msg, msg
        # A read into a place outside the arena is refused the same way.
        read = {"id": obj.id, "region": {"offset": [0], "count": [1000]}}
        kind, msg = call_error(req("Read", "Read", items=[read], opts=shm_opts(size - 8)))
        assert "outside shared-memory arena 1" in msg, msg

        # The client cannot shrink the arena under the server's mapping (no SIGBUS possible).
        with pytest.raises(PermissionError):
            os.ftruncate(good, 0)

        # The same connection goes on: a correct shared-memory stage, its commit, a shared-memory read.
        rbody, _ = raw.call(stage_shm(1, obj.id, 1000, 1, 8192))
        assert rbody.startswith(RESP_STAGED), decode_error(rbody)
        rbody, _ = raw.call(enc_commit([1]))
        assert rbody[0] != RESP_ERROR, decode_error(rbody)
        rbody, payload = raw.call(req("Read", "Read", items=[read], opts=shm_opts(65536)))
        assert rbody.startswith(RESP_DATA) and payload == b"", decode_error(rbody)
        assert os.pread(good, 4000, 65536) == data.tobytes()
    finally:
        raw.close()
        os.close(good)
        os.close(unsealed)
    # A fresh client sees the data, and the server still serves everyone.
    c2 = dep.client()
    assert c2.open_object("raw/o")[...].tobytes() == data.tobytes()
    obj2 = c2.open_container("raw").create_object("raw/after", (5,), "int8")
    obj2[...] = [1, 2, 3, 4, 5]
    assert obj2[...].tolist() == [1, 2, 3, 4, 5]
    assert shm_total(c2) >= 2 * data.nbytes


def arenas_mapped_by(pid: int) -> list[str]:
    maps = Path(f"/proc/{pid}/maps").read_text()
    return [line for line in maps.splitlines() if "/memfd:pdcx-" in line]


def test_a_killed_clients_arena_is_unmapped_by_the_server(deployment):
    dep = deployment(n=1)
    server = dep.pids()[0]
    script = textwrap.dedent(
        f"""
        import sys, numpy as np, pdcx
        c = pdcx.connect({str(dep.root)!r})
        o = c.create_container("k").create_object("k/o", (1 << 20,), "uint8")
        o[...] = np.ones(1 << 20, dtype="uint8")
        print("written", flush=True)
        sys.stdin.read()
        """
    )
    # A 1 MiB write would be a one-copy write into the log (tests/test_direct_write.py).
    env = {**os.environ, "PDCX_DIRECT_WRITE": "0"}
    p = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert p.stdout.readline().strip() == "written"
        assert arenas_mapped_by(server), "the server maps the live client's arena"
        assert shm_total(dep.client()) == 1 << 20
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    # The memfd has no name in any directory: once the server unmaps it, it is gone.
    wait_until(lambda: not arenas_mapped_by(server), 10, "the server to unmap the dead client's arena")
