"""The attack suite: each test is one attack on a running deployment (real `pdcx server`
processes on 127.0.0.1, real sockets, a real second user), and passes when the attack is
refused or survived and the deployment still serves honest clients. `python3 -m pytest -v
tests/test_attacks.py` prints the table. docs/SECURITY.md says what each one defends.

Attacks on other parts live beside the code they attack and are listed in SECURITY.md:
another uid reading files and a hostile pre-created root (test_private.py), the raw handshake
forgeries (test_bad_input.py), the Rust handshake tests (crates/server/tests/protocol.rs).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import CHALLENGE, RawConn, pdcx_bin, run_pdcx

NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def relay(to: tuple[str, int]) -> tuple[tuple[str, int], list[int]]:
    """A process in the middle: accepts on a port of its own and copies every byte both ways
    to `to`, as whoever takes over a dead server's port can. Returns its address and a list
    that counts the connections it relayed."""
    lsock = socket.create_server(("127.0.0.1", 0))
    relayed: list[int] = []

    def pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while chunk := a.recv(65536):
                b.sendall(chunk)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def serve() -> None:
        while True:
            try:
                c, _ = lsock.accept()
            except OSError:
                return
            s = socket.create_connection(to)
            relayed.append(1)
            threading.Thread(target=pipe, args=(c, s), daemon=True).start()
            threading.Thread(target=pipe, args=(s, c), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return lsock.getsockname()[:2], relayed


def honest_round_trip(dep, name: str = "honest") -> float:
    """Seconds for a fresh client to write and read back a small object."""
    t0 = time.monotonic()
    c = dep.client()
    unique = f"{name}-{time.monotonic_ns()}"
    obj = c.create_container(unique).create_object(unique, (256,), "int32")
    obj[:] = np.arange(256, dtype=np.int32)
    assert np.array_equal(obj[:], np.arange(256, dtype=np.int32))
    return time.monotonic() - t0


def test_a_relayed_handshake_is_refused(deployment, tmp_path):
    """The port of a server listed in a stale cluster file is taken by a relay that forwards
    everything to the real server: the client's proof names its connection to the relay,
    the server sees another one, and refuses."""
    dep = deployment(n=1)
    (host, port), relayed = relay(dep.addr(0))
    victim = tmp_path / "victim-root"
    victim.mkdir(mode=0o700)
    cluster = dep.cluster()
    cluster["servers"][0]["addr"] = f"{host}:{port}"
    (victim / "cluster.json").write_text(json.dumps(cluster))
    (victim / "cluster.json").chmod(0o600)
    p = run_pdcx("ls", "--root", victim, check=False, env=dict(os.environ, PDCX_UNIX="0"))
    assert relayed, "the client went through the relay"
    assert p.returncode != 0 and "relayed" in p.stderr, (p.stdout, p.stderr)
    assert "refused a relayed handshake" in dep.server_log(0)
    assert honest_round_trip(dep) < 10


def test_a_handshake_that_trickles_is_closed_at_its_deadline(deployment, monkeypatch):
    """One byte every 300 ms: each read is quick, the handshake never ends. The total
    deadline (PDCX_HANDSHAKE_TIMEOUT_S) closes it, not a per-read timeout."""
    monkeypatch.setenv("PDCX_HANDSHAKE_TIMEOUT_S", "2")
    dep = deployment(n=1)
    raw = RawConn(dep.addr(0))
    kind, _, _, _ = raw.recv_frame()
    assert kind == CHALLENGE
    t0 = time.monotonic()
    closed = False
    while time.monotonic() - t0 < 15:
        try:
            raw.send(b"P")
        except OSError:
            closed = True
            break
        raw.sock.settimeout(0.3)
        try:
            if not raw.sock.recv(4096):
                closed = True
                break
        except TimeoutError:
            pass
        except OSError:
            closed = True
            break
    took = time.monotonic() - t0
    assert closed and took < 6, f"closed={closed} after {took:.1f}s"
    assert honest_round_trip(dep) < 10


def test_unauthenticated_connections_cannot_crowd_out_honest_clients(deployment, monkeypatch):
    """200 connections that take their challenge and say nothing, against a server that lets
    8 authenticate at once: honest clients still get in at once, and the silent ones are closed
    as soon as their grace (a tenth of the 2 s handshake deadline) is over, not held to it."""
    monkeypatch.setenv("PDCX_MAX_HANDSHAKES", "8")
    monkeypatch.setenv("PDCX_HANDSHAKE_TIMEOUT_S", "2")
    dep = deployment(n=1)
    silent = []
    for _ in range(200):
        r = RawConn(dep.addr(0))
        silent.append(r)
    took = max(honest_round_trip(dep, f"h{i}") for i in range(3))
    assert took < 5, f"an honest client took {took:.1f}s"
    closed = sum(r.closed_by_peer(timeout=0.2) for r in silent)
    assert closed >= 190, f"only {closed} of 200 silent connections were closed"
    for r in silent:
        r.close()


def test_another_user_is_refused_on_a_unix_socket_it_can_reach(deployment, tmp_path):
    """A root whose socket path is too long for sun_path gets an abstract socket, which has no
    file permissions: any local user can connect to it. A user who also got hold of the
    secret is still refused: the server reads the connecting uid from the kernel
    (SO_PEERCRED), not from anything the client says."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.fail("this test runs as root with setpriv (util-linux) to act as a second user")
    tmp_path.chmod(0o755)
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.parent.mkdir()
    deep.parent.chmod(0o755)
    dep = deployment(n=1, root=deep)
    spec = dep.cluster()["servers"][0].get("unix", "")
    assert spec.startswith("@"), f"expected an abstract socket, got {spec!r}"
    # The leaked secret, readable by nobody (outside pytest's private temporary tree).
    leaked = Path(tempfile.mkdtemp(prefix="pdcx-leaked-"))
    try:
        leaked.chmod(0o755)
        shutil.copy(dep.cluster_file, leaked / "cluster.json")
        (leaked / "cluster.json").chmod(0o644)
        p = subprocess.run(
            [*NOBODY, pdcx_bin(), "ls", "--root", str(leaked)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        shutil.rmtree(leaked)
    assert p.returncode != 0, (p.stdout, p.stderr)
    assert "uid 65534" in p.stderr and "is not the deployment's user" in p.stderr, p.stderr
    assert honest_round_trip(dep) < 10
