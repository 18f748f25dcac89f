"""The cross-site gateway against an open network and against accepted but hostile sites:
connection cap, authentication deadline, pre-authentication frame limit, loopback default;
sites as namespaces (transfer keys bound to the pushing site, pushes under the site's own
names unless granted, the puller choosing a pull's local name, staging objects refused).

A raw link client here speaks the link protocol itself (TLS, then frames of a u32 LE header
length, the JSON header, a u64 LE payload length, the payload), so a test can say what a
hostile site would say."""

from __future__ import annotations

import json
import os
import socket
import ssl
import struct
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import pdcx_bin, remote_add, run_pdcx


def tls_context() -> ssl.SSLContext:
    # The gateway's certificate is self-signed; what is tested here is the gateway's side.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def frame(msg: dict, payload: bytes = b"") -> bytes:
    h = json.dumps(msg).encode()
    return struct.pack("<I", len(h)) + h + struct.pack("<Q", len(payload)) + payload


class Raw:
    """One TLS connection to a gateway, spoken to frame by frame."""

    def __init__(self, addr: str, timeout: float = 10):
        host, port = addr.rsplit(":", 1)
        tcp = socket.create_connection((host, int(port)), timeout=timeout)
        self.s = tls_context().wrap_socket(tcp, server_hostname="pdcx-site")

    def exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            got = self.s.recv(n - len(buf))
            if not got:
                raise EOFError(f"closed after {len(buf)} of {n} bytes")
            buf += got
        return buf

    def recv(self) -> tuple[dict, bytes]:
        (hlen,) = struct.unpack("<I", self.exact(4))
        header = json.loads(self.exact(hlen))
        (plen,) = struct.unpack("<Q", self.exact(8))
        return header, self.exact(plen)

    def call(self, msg: dict, payload: bytes = b"") -> tuple[dict, bytes]:
        self.s.sendall(frame(msg, payload))
        return self.recv()

    def hello(self, site: str, token: str) -> None:
        got, _ = self.call({"t": "Hello", "site": site, "token": token, "version": 1})
        assert got["t"] == "Welcome", got

    def close(self) -> None:
        self.s.close()


def closed_within(s: socket.socket, seconds: float, drip: bytes = b"") -> float | None:
    """Seconds until the peer closes `s` (sending `drip` a byte at a time meanwhile, every
    0.25 s), or None if it is still open after `seconds`."""
    t0 = time.monotonic()
    s.settimeout(0.25)
    i = 0
    while time.monotonic() - t0 < seconds:
        try:
            if s.recv(4096) == b"":
                return time.monotonic() - t0
        except (TimeoutError, ssl.SSLWantReadError):
            pass
        except (ConnectionError, ssl.SSLError, OSError):
            return time.monotonic() - t0
        if drip:
            try:
                s.sendall(drip[i % len(drip) : i % len(drip) + 1])
            except (ConnectionError, ssl.SSLError, OSError):
                return time.monotonic() - t0
            i += 1
    return None


def gateway(root: Path, log: Path, env: dict | None = None, listen: str | None = "127.0.0.1:0"):
    """`pdcx gateway` of site cloud at `root` with extra environment: (process, address) or,
    when it does not start, (process, its first stdout line and log)."""
    cmd = [pdcx_bin(), "gateway", "--site", "cloud", "--root", str(root)]
    full = dict(os.environ, **(env or {}))
    if listen is not None:
        cmd += ["--listen", listen]
    else:
        full.pop("PDCX_GATEWAY_LISTEN", None)  # the built-in default is what is tested
    with open(log, "w") as err:
        gw = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=full)
    line = gw.stdout.readline()
    if "listening on" not in line:
        gw.wait(timeout=30)
        return gw, line + log.read_text()
    return gw, line.split()[-1]


@pytest.fixture
def limited(sites, tmp_path):
    """A second gateway of site cloud with a cap of 8 connections and a 2 s authentication
    deadline, linked from hpc as remote "capped": yields (sites..., process, address)."""
    a, b, _, fp, token, _ = sites
    env = {"PDCX_GATEWAY_MAX_CONNECTIONS": "8", "PDCX_GATEWAY_AUTH_TIMEOUT_S": "2"}
    gw, addr = gateway(b.root, tmp_path / "capped.log", env)
    assert gw.poll() is None, addr
    try:
        assert "linked" in remote_add(a.root, "capped", addr, token, fp).stderr
        yield a, b, fp, token, gw, addr
    finally:
        gw.kill()
        gw.wait()


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_a_flood_of_silent_connections_is_capped_and_does_not_lock_sites_out(limited):
    a, b, _, _, gw, addr = limited
    host, port = addr.rsplit(":", 1)
    base = threads(gw.pid)
    flood = [socket.create_connection((host, int(port))) for _ in range(40)]
    try:
        time.sleep(1.0)
        # One thread per connection at most up to the cap (plus evicted ones on their way out).
        assert threads(gw.pid) <= base + 8 + 2, (threads(gw.pid), base)
        # The oldest silent connections were closed to make room: at most the cap remain open.
        still_open = sum(closed_within(s, 0.3) is None for s in flood)
        assert still_open <= 8, still_open
        # A real site still gets through, while the newest silent connections hold slots.
        data = np.arange(1 << 18, dtype=np.float64)
        a.client().create_container("fl").create_object("fl/x", shape=data.shape, dtype="float64")[...] = data
        run_pdcx("push", "fl/x", "--to", "capped", "--chunk-mib", "1", "--streams", "3", "-q", "--root", a.root)
        assert np.array_equal(b.client().open_object("hpc/fl/x")[...], data)
        assert gw.poll() is None
    finally:
        for s in flood:
            s.close()


def test_connections_that_never_authenticate_are_closed_by_the_deadline(limited):
    *_, gw, addr = limited
    host, port = addr.rsplit(":", 1)
    # A TLS ClientHello dripped a byte every 0.25 s never completes the handshake in 2 s.
    drip = socket.create_connection((host, int(port)))
    took = closed_within(drip, 8, drip=b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64)
    assert took is not None and took < 4.5, took
    # Past the handshake: a Hello dripped byte by byte is cut off at the same deadline.
    raw = Raw(addr)
    hello = frame({"t": "Hello", "site": "hpc", "token": "0" * 64, "version": 1})
    took = closed_within(raw.s, 8, drip=hello)
    assert took is not None and took < 4.5, took
    # Silent after the handshake: the same.
    raw = Raw(addr)
    took = closed_within(raw.s, 8)
    assert took is not None and took < 4.5, took
    assert gw.poll() is None


def test_a_large_frame_before_authentication_is_refused_at_its_length(sites):
    *_, addr, _, token, gw = sites
    raw = Raw(addr)
    # A header of 1 MiB was within the old limit: the gateway waited for the megabyte. Now its
    # length alone is refused, with a reason, and the connection closed.
    raw.s.sendall(struct.pack("<I", 1 << 20))
    raw.s.settimeout(3)
    got, _ = raw.recv()
    assert got["t"] == "Error" and "at most 4096" in got["message"], got
    assert closed_within(raw.s, 3) is not None
    # No payload before authentication either (a Hello carrying 60 MiB).
    raw = Raw(addr)
    h = json.dumps({"t": "Hello", "site": "hpc", "token": token, "version": 1}).encode()
    raw.s.sendall(struct.pack("<I", len(h)) + h + struct.pack("<Q", 60 << 20))
    raw.s.settimeout(3)
    got, _ = raw.recv()
    assert got["t"] == "Error" and "payload" in got["message"], got
    # After authentication the normal limits hold: a real Hello, then a 1 MiB header is read.
    raw = Raw(addr)
    raw.hello("hpc", token)
    pad = " " * (1 << 20)
    h = ('{"t": "Meta", "name": "no/such"' + pad + "}").encode()
    raw.s.sendall(struct.pack("<I", len(h)) + h + struct.pack("<Q", 0))
    got, _ = raw.recv()
    assert got["t"] == "Error" and "no/such" in got["message"], got
    assert gw.poll() is None


def spec_for(raw: Raw, template: str, name: str, key: str, site: str, chunks: list[tuple[int, int]]) -> dict:
    """A push's description of a 1-D object shaped like `template` (at the gateway's site)."""
    meta, _ = raw.call({"t": "Meta", "name": template})
    assert meta["t"] == "MetaIs", meta
    m = dict(meta["meta"], name=name, containers=[], tags=[])
    n = m["dims"][0]
    return {
        "key": key,
        "source_site": site,
        "meta": m,
        "region": {"offset": [0], "count": [n]},
        "chunks": [{"offset": [lo], "count": [hi - lo]} for lo, hi in chunks],
    }


def crc32c(b: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in b:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_a_site_cannot_touch_another_sites_transfer_or_read_staging_objects(sites):
    _, b, addr, _, token, gw = sites
    cb = b.client()
    evil_token = run_pdcx("remote", "token", "evil", "--root", b.root).stdout.strip()
    cb.create_container("tpl").create_object("tpl/x", shape=(8,), dtype="int32")
    hpc, evil = Raw(addr), Raw(addr)
    hpc.hello("hpc", token)
    evil.hello("evil", evil_token)
    key = "ab" * 16
    spec = spec_for(hpc, "tpl/x", "inj/x", key, "hpc", [(0, 4), (4, 8)])
    got, _ = hpc.call({"t": "Begin", "spec": spec})
    assert got == {"t": "Missing", "chunks": [0, 1]}, got
    bad = np.full(4, -1, dtype=np.int32).tobytes()
    # Evil knows the key: its chunk, its Finish and a Begin in hpc's name are all refused.
    for msg, payload in [
        ({"t": "Chunk", "key": key, "index": 0, "crc": crc32c(bad)}, bad),
        ({"t": "Finish", "key": key}, b""),
        ({"t": "Begin", "spec": spec}, b""),
    ]:
        got, _ = evil.call(msg, payload)
        assert got["t"] == "Error", (msg["t"], got)
    # Evil's own transfer with the same key is its own (under evil/), not hpc's.
    got, _ = evil.call({"t": "Begin", "spec": dict(spec, source_site="evil")})
    assert got == {"t": "Missing", "chunks": [0, 1]}, got
    got, _ = evil.call({"t": "Chunk", "key": key, "index": 0, "crc": crc32c(bad)}, bad)
    assert got["t"] == "Stored", got
    # Staging objects (hpc's transfer not yet verified) are neither read nor queried.
    staging = [o.name for o in cb.objects() if o.name.startswith("xsite.staging/")]
    assert len(staging) == 2 and all("@hpc/" in n or "@evil/" in n for n in staging), staging
    for msg in [
        {"t": "Meta", "name": staging[0]},
        {"t": "Read", "name": staging[0], "region": {"offset": [0], "count": [4]}},
        {"t": "Query", "name": staging[0], "expr": "tpl/x>0", "region": None},
        {"t": "Query", "name": "tpl/x", "expr": f"{staging[0]}>0", "region": None},
    ]:
        got, _ = hpc.call(msg)
        assert got["t"] == "Error", (msg, got)
    # hpc's transfer is untouched: its own chunks publish its own data, under hpc/.
    mine = np.arange(8, dtype=np.int32)
    for i, (lo, hi) in enumerate([(0, 4), (4, 8)]):
        part = mine[lo:hi].tobytes()
        got, _ = hpc.call({"t": "Chunk", "key": key, "index": i, "crc": crc32c(part)}, part)
        assert got["t"] == "Stored", got
    got, _ = hpc.call({"t": "Finish", "key": key})
    assert got["t"] == "Published", got
    assert np.array_equal(cb.open_object("hpc/inj/x")[...], mine)
    assert "inj/x" not in {o.name for o in cb.objects()}
    assert gw.poll() is None


def test_a_push_lands_under_the_sites_names_unless_granted(sites):
    a, b, *_ = sites
    ca, cb = a.client(), b.client()
    theirs = np.arange(8, dtype=np.uint8) + 100
    ours = np.arange(8, dtype=np.uint8)
    cb.create_container("loc").create_object("loc/x", shape=(8,), dtype="uint8")[...] = theirs
    ca.create_container("loc").create_object("loc/x", shape=(8,), dtype="uint8")[...] = ours
    # Same name, same shape: it lands as hpc/loc/x, cloud's loc/x untouched (also with --as).
    run_pdcx("push", "loc/x", "--to", "cloud", "-q", "--root", a.root)
    run_pdcx("push", "loc/x", "--as", "loc/x", "--region", "0:2", "--to", "cloud", "-q", "--root", a.root)
    assert np.array_equal(cb.open_object("loc/x")[...], theirs)
    assert np.array_equal(cb.open_object("hpc/loc/x")[...], ours)
    # Under hpc/ too, an object hpc did not send is not written into.
    cb.create_container("hpc/own").create_object("hpc/own/y", shape=(8,), dtype="uint8")[...] = theirs
    p = run_pdcx("push", "loc/x", "--as", "own/y", "--to", "cloud", "--root", a.root, check=False)
    assert p.returncode != 0 and "not received from site hpc" in p.stderr, p.stderr
    assert np.array_equal(cb.open_object("hpc/own/y")[...], theirs)
    # A grant at cloud lets hpc push to that name itself; revoked, it no longer does.
    run_pdcx("remote", "grant", "hpc", "loc/", "--root", b.root)
    run_pdcx("push", "loc/x", "--to", "cloud", "-q", "--root", a.root)
    assert np.array_equal(cb.open_object("loc/x")[...], ours)
    assert dict(cb.open_object("loc/x").tags)["xsite.source"] == "hpc:loc/x"
    cb.open_object("loc/x")[...] = theirs
    run_pdcx("remote", "grant", "hpc", "loc/", "--revoke", "--root", b.root)
    run_pdcx("push", "loc/x", "--to", "cloud", "-q", "--root", a.root)
    assert np.array_equal(cb.open_object("loc/x")[...], theirs)


def test_a_pull_lands_where_the_puller_says_not_where_the_gateway_says(sites):
    """A gateway (here a fake one with site cloud's identity) answering a pull of `wanted`
    with the metadata of another object does not choose where the data lands."""
    a, b, addr, fp, token, _ = sites
    raw = Raw(addr)
    raw.hello("hpc", token)
    b.client().create_container("w").create_object("w/wanted", shape=(4,), dtype="int8")
    meta, _ = raw.call({"t": "Meta", "name": "w/wanted"})
    raw.close()
    a.client().create_container("victim").create_object("victim/x", shape=(4,), dtype="int8")[...] = [1, 2, 3, 4]
    lie = dict(meta["meta"], name="victim/x")
    xsite = Path(b.root) / "xsite"
    srv = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    srv.load_cert_chain(xsite / "cert.pem", xsite / "key.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with srv.wrap_socket(conn, server_side=True) as s:
                r = Raw.__new__(Raw)
                r.s = s
                try:
                    r.recv()
                    s.sendall(frame({"t": "Welcome", "site": "cloud"}))
                    while True:
                        msg, _ = r.recv()
                        if msg["t"] == "Meta" and msg["name"] == "w/wanted":
                            s.sendall(frame({"t": "MetaIs", "meta": lie}))
                        elif msg["t"] == "Meta":
                            s.sendall(frame({"t": "MetaIs", "meta": dict(lie, name=msg["name"])}))
                        elif msg["t"] == "Query":
                            # A hit count whose byte size overflows 64 bits, and no bytes.
                            s.sendall(frame({"t": "Hits", "nhits": 1 << 62, "ndim": 1, "crc": 0}))
                        else:
                            data = bytes([9, 9, 9, 9])
                            s.sendall(frame({"t": "Data", "crc": crc32c(data)}, data))
                except (EOFError, OSError):
                    pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        remote_add(a.root, "liar", f"127.0.0.1:{port}", token, fp)
        p = run_pdcx("pull", "liar:w/wanted", "--root", a.root, check=False)
        assert p.returncode != 0 and "answered with the metadata of" in p.stderr, p.stderr
        assert a.client().open_object("victim/x")[...].tolist() == [1, 2, 3, 4]
        # Counts in the remote's answers are checked, not trusted (no overflow, no panic).
        p = run_pdcx("pull", "liar:w/other", "--where", "w/other>0", "--root", a.root, check=False)
        assert p.returncode == 1 and "hits of 1 dims" in p.stderr, p.stderr
    finally:
        listener.close()


def listening(pid: int) -> list[str]:
    """The local addresses process `pid` listens on (TCP), from `ss -ltnp`."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return [ln.split()[3] for ln in out.splitlines() if f"pid={pid}," in ln]


def test_the_gateway_listens_on_loopback_unless_told_otherwise(sites, tmp_path):
    b_root = sites[1].root
    gw, addr = gateway(b_root, tmp_path / "default.log", listen=None)
    try:
        if gw.poll() is None:
            assert addr == "127.0.0.1:7070", addr
            bound = listening(gw.pid)
            assert bound == ["127.0.0.1:7070"], bound
        else:
            # Another program holds the port: what was tried is still the loopback default.
            assert "listen on 127.0.0.1:7070" in addr, addr
    finally:
        gw.kill()
        gw.wait()
    # Asked for every interface, it binds every interface.
    gw, addr = gateway(b_root, tmp_path / "any.log", listen="0.0.0.0:0")
    try:
        assert gw.poll() is None, addr
        bound = listening(gw.pid)
        assert len(bound) == 1 and bound[0].startswith("0.0.0.0:"), bound
    finally:
        gw.kill()
        gw.wait()
    help_text = run_pdcx("gateway", "--help").stdout
    assert "127.0.0.1:7070" in help_text and "0.0.0.0" in help_text
