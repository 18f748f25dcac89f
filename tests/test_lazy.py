"""Lazy region-map updates (relaxed consistency): a data server that is not the object's owner
makes relaxed writes durable and acknowledges them without the owner, then registers them in
one batch: after the expected number of writes, at sync/close, on its timer, at shutdown, and
after a crash at its next start. Three real server processes; a client's node-local server is
picked by its launcher's local rank, which these tests set explicitly."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

import numpy as np
import pdcx
import pytest
from conftest import client_on, owner_of_name, pid_alive, wait_until

N = 64  # small writes per test
W = 16  # elements per write


def name_owned_by(rank: int, n: int, prefix: str) -> str:
    return next(f"{prefix}{i}" for i in range(1000) if owner_of_name(f"{prefix}{i}", n) == rank)


def stat(c: pdcx.Client, rank: int, key: str) -> int:
    return c.stats()[rank][key]


def block(k: int) -> np.ndarray:
    return np.arange(k * W, (k + 1) * W, dtype=np.int64)


def want_all(n: int = N) -> np.ndarray:
    return np.concatenate([block(k) for k in range(n)])


def write_all(obj, n: int = N) -> None:
    """n small writes, each waited on its own (one commit each)."""
    for k in range(n):
        obj.write_async(block(k), offset=(k * W,)).wait()


@pytest.fixture
def slow_timer(monkeypatch):
    """Servers started after this register deferred writes on their timer only after a minute,
    so a test sees exactly the registrations it asks for."""
    monkeypatch.setenv("PDCX_LAZY_FLUSH_MS", "60000")


@dataclass
class Setup:
    dep: object
    name: str
    writer: pdcx.Client  # its writes land on server 1; server 0 owns the object
    reader: pdcx.Client
    obj: pdcx.Object  # opened by the writer


def setup(deployment, prefix: str) -> Setup:
    dep = deployment(n=3)
    name = name_owned_by(0, 3, prefix)
    writer = client_on(dep, 1)
    obj = writer.create_container(prefix).create_object(name, (N * W,), "int64", fill=-1)
    return Setup(dep, name, writer, client_on(dep, 2), obj)


def test_relaxed_writes_are_invisible_until_sync_then_registered_in_one_request(deployment, slow_timer):
    s = setup(deployment, "lazy")
    s.obj.set_consistency("relaxed")
    assert s.obj.consistency == ("relaxed", 0)
    regs = stat(s.reader, 0, "registers")
    write_all(s.obj)
    assert stat(s.reader, 1, "unregistered") == N
    assert stat(s.reader, 0, "registers") == regs, "nothing registered before the consistency point"
    # The owner does not know about them yet: readers see the fill value.
    assert (s.reader.open_object(s.name)[...] == -1).all()
    s.obj.sync()
    assert stat(s.reader, 0, "registers") == regs + 1
    assert stat(s.reader, 0, "registered_regions") >= N
    assert stat(s.reader, 1, "unregistered") == 0
    np.testing.assert_array_equal(s.reader.open_object(s.name)[...], want_all())
    assert {e["server"] for e in s.reader.open_object(s.name).extents()} == {1}


def test_expected_writes_register_the_batch_when_the_last_one_is_waited(deployment, slow_timer):
    s = setup(deployment, "expect")
    s.obj.set_consistency("relaxed", expected_writes=N)
    regs = stat(s.reader, 0, "registers")
    write_all(s.obj, N - 1)
    assert stat(s.reader, 0, "registers") == regs
    s.obj.write_async(block(N - 1), offset=((N - 1) * W,)).wait()
    assert stat(s.reader, 0, "registers") == regs + 1
    np.testing.assert_array_equal(s.reader.open_object(s.name)[...], want_all())


def test_strong_writes_register_one_by_one(deployment, slow_timer):
    s = setup(deployment, "strong")
    regs = stat(s.reader, 0, "registers")
    write_all(s.obj, 8)
    assert stat(s.reader, 0, "registers") == regs + 8
    np.testing.assert_array_equal(s.reader.open_object(s.name)[: 8 * W], want_all(8))


def test_a_later_strong_write_takes_the_deferred_ones_along_in_commit_order(deployment, slow_timer):
    s = setup(deployment, "order")
    s.obj.set_consistency("relaxed")
    s.obj.write_async(np.full(2 * W, 5, dtype=np.int64), offset=(0,)).wait()
    s.obj.set_consistency("strong")
    regs = stat(s.reader, 0, "registers")
    s.obj.write_async(np.full(W, 7, dtype=np.int64), offset=(W // 2,)).wait()  # overlaps, later
    assert stat(s.reader, 0, "registers") == regs + 1, "one Register carried both"
    got = s.reader.open_object(s.name)[: 2 * W]
    want = np.full(2 * W, 5)
    want[W // 2 : W // 2 + W] = 7
    np.testing.assert_array_equal(got, want)


def test_the_timer_registers_without_being_asked(deployment, monkeypatch):
    monkeypatch.setenv("PDCX_LAZY_FLUSH_MS", "200")
    s = setup(deployment, "timer")
    s.obj.set_consistency("relaxed")
    write_all(s.obj, 8)
    wait_until(lambda: stat(s.reader, 1, "unregistered") == 0, 10, "the timer to register")
    np.testing.assert_array_equal(s.reader.open_object(s.name)[: 8 * W], want_all(8))


def test_client_close_is_a_consistency_point(deployment, slow_timer):
    s = setup(deployment, "close")
    s.obj.set_consistency("relaxed")
    write_all(s.obj, 4)
    s.writer.close()
    np.testing.assert_array_equal(s.reader.open_object(s.name)[: 4 * W], want_all(4))


def test_holder_killed_before_registration_re_registers_at_restart(deployment, slow_timer):
    s = setup(deployment, "crash")
    s.obj.set_consistency("relaxed")
    write_all(s.obj)
    assert stat(s.reader, 1, "unregistered") == N
    holder = s.dep.pids()[1]
    os.kill(holder, signal.SIGKILL)  # acknowledged, durable, never registered
    wait_until(lambda: not pid_alive(holder), 30, "the killed holder to vanish")
    s.dep.stop()
    s.dep.start()
    assert holder not in s.dep.pids()
    c = s.dep.client()
    # At start the holder registers what it acknowledged, without being asked (timer: 60 s).
    wait_until(lambda: stat(c, 1, "unregistered") == 0, 20, "the restarted holder to re-register")
    np.testing.assert_array_equal(c.open_object(s.name)[...], want_all())
    assert stat(c, 0, "registers") >= 1
    # And it stays: another restart, nothing to register.
    s.dep.restart()
    c = s.dep.client()
    np.testing.assert_array_equal(c.open_object(s.name)[...], want_all())


def test_kill9_of_every_server_keeps_acknowledged_relaxed_writes(deployment, slow_timer):
    s = setup(deployment, "crashall")
    s.obj.set_consistency("relaxed", expected_writes=3 * N // 4)
    write_all(s.obj)  # three quarters registered by count, the rest deferred
    assert stat(s.reader, 1, "unregistered") == N // 4
    s.dep.kill9()
    s.dep.start()
    c = s.dep.client()
    wait_until(lambda: stat(c, 1, "unregistered") == 0, 20, "the restarted holder to re-register")
    np.testing.assert_array_equal(c.open_object(s.name)[...], want_all())
