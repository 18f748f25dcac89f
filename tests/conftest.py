"""Shared fixtures: real pdcx deployments (background server processes) on fresh roots.

The binary is $PDCX_BIN, else `pdcx` on PATH, else target/release/pdcx. Every subprocess call
has its own timeout, so a hung server fails one test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pdcx
import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

# CI (scripts/test.sh) installs everything the tests need, so there a skip means a test that
# checked nothing while the run still passed. PDCX_NO_SKIPS=1 turns every skip (a skip mark,
# pytest.skip, importorskip, a module-level skip) into a failure that names the reason.
NO_SKIPS = os.environ.get("PDCX_NO_SKIPS") == "1"


def _skip_reason(longrepr) -> str:
    # A skip's longrepr is (file, line, "Skipped: reason") for tests and collectors alike.
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


def _fail_skip(rep) -> None:
    if NO_SKIPS and rep.skipped and not hasattr(rep, "wasxfail"):
        rep.outcome = "failed"
        rep.longrepr = (
            f"PDCX_NO_SKIPS=1 (CI installs what every test needs) but this skipped: {_skip_reason(rep.longrepr)}"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_skip(outcome.get_result())


def pdcx_bin() -> str:
    found = os.environ.get("PDCX_BIN") or shutil.which("pdcx") or str(REPO / "target/release/pdcx")
    if not Path(found).exists():
        pytest.skip("pdcx binary not built (run scripts/setup.sh)")
    return found


def run_pdcx(*args, check: bool = True, timeout: float = 60, env: dict | None = None, cwd=None):
    """Runs `pdcx ARGS` and returns the CompletedProcess (text mode)."""
    p = subprocess.run(
        [pdcx_bin(), *map(str, args)],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )
    if check and p.returncode != 0:
        raise AssertionError(f"pdcx {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def pid_alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return not stat.rsplit(")", 1)[1].strip().startswith("Z")
    except OSError:
        return False


def freeze(pid: int) -> None:
    """SIGSTOP `pid` and return once every thread of it is stopped: kill() only queues the
    signal, and a thread running on another core may still answer a request meanwhile."""
    os.kill(pid, signal.SIGSTOP)

    def stopped() -> bool:
        task = f"/proc/{pid}/task"
        for tid in os.listdir(task):
            try:
                with open(f"{task}/{tid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                continue
            if state not in ("T", "t"):
                return False
        return True

    wait_until(stopped, 10, f"pid {pid} to stop")


def wait_until(pred, timeout: float, what: str, interval: float = 0.02) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Deployment:
    """N local servers started with `pdcx server start` on `root`."""

    def __init__(self, root: Path, n: int, cache_mb: int | None = None):
        self.root = Path(root)
        self.n = n
        self.cache_mb = cache_mb
        self._seen_pids: set[int] = set()
        self._clients: list[pdcx.Client] = []
        self.running = False

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        extra = [] if self.cache_mb is None else ["--cache-mb", self.cache_mb]
        run_pdcx("server", "start", "-n", self.n, "--root", self.root, *extra, timeout=90)
        self.running = True
        self._seen_pids.update(self.pids())

    def stop(self) -> None:
        """Clean stop: every server syncs its log and exits."""
        pids = self.pids() if self.cluster_file.exists() else []
        run_pdcx("server", "stop", "--root", self.root, timeout=90)
        for pid in pids:
            wait_until(lambda pid=pid: not pid_alive(pid), 30, f"server pid {pid} to exit")
        self.running = False

    def restart(self) -> None:
        self.stop()
        self.start()

    def kill9(self) -> list[int]:
        """SIGKILLs every server (no sync, no cleanup) and waits until they are gone."""
        pids = self.pids()
        for pid in pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        for pid in pids:
            wait_until(lambda pid=pid: not pid_alive(pid), 30, f"killed server pid {pid} to vanish")
        self.running = False
        return pids

    # -- views -------------------------------------------------------------------------------
    @property
    def cluster_file(self) -> Path:
        return self.root / "cluster.json"

    def cluster(self) -> dict:
        return json.loads(self.cluster_file.read_text())

    def pids(self) -> list[int]:
        return [s["pid"] for s in self.cluster()["servers"]]

    def addr(self, rank: int) -> tuple[str, int]:
        host, port = self.cluster()["servers"][rank]["addr"].rsplit(":", 1)
        return host, int(port)

    def secret(self) -> bytes:
        return bytes.fromhex(self.cluster()["secret"])

    def client(self) -> pdcx.Client:
        c = pdcx.connect(self.root)
        self._clients.append(c)
        return c

    def env(self) -> dict:
        return dict(os.environ, PDCX_ROOT=str(self.root))

    def server_log(self, rank: int) -> str:
        p = self.root / "logs" / f"server-{rank}.log"
        return p.read_text() if p.exists() else ""

    # -- teardown ----------------------------------------------------------------------------
    def cleanup(self) -> None:
        if self.cluster_file.exists():
            try:
                self._seen_pids.update(self.pids())
            except (OSError, ValueError, KeyError):
                pass
        for pid in self._seen_pids:  # a SIGSTOPped server would ignore the stop request
            if pid_alive(pid):
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
        try:
            run_pdcx("server", "stop", "--root", self.root, "--timeout", "10", check=False, timeout=60)
        except subprocess.TimeoutExpired:
            pass
        for pid in self._seen_pids:
            if pid_alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


@pytest.fixture
def deployment(tmp_path):
    """Factory: `dep = deployment(n=2)` starts N servers on a fresh root (or on `root=`;
    `cache_mb=` sets the servers' cache size, `start=False` leaves them unstarted).
    Every deployment made is stopped at teardown, by request and then by pid."""
    made: list[Deployment] = []

    def make(n: int = 2, root: Path | None = None, start: bool = True, cache_mb: int | None = None) -> Deployment:
        r = Path(root) if root is not None else tmp_path / f"root{len(made)}"
        r.mkdir(parents=True, exist_ok=True)
        dep = Deployment(r, n, cache_mb)
        made.append(dep)
        if start:
            dep.start()
        return dep

    yield make
    for dep in made:
        dep.cleanup()


def run_mpi(env: dict, ranks: int, script: str, *args, timeout: float = 180) -> str:
    """`mpirun -n RANKS python3 tests/SCRIPT ARGS` (as root, oversubscribed); fails the test
    with the ranks' output unless every rank printed "rank R...: ok" and the job succeeded.
    Skips when mpirun or mpi4py is missing. Returns stdout."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed (run scripts/setup.sh)")
    pytest.importorskip("mpi4py")
    p = subprocess.run(
        [
            "mpirun",
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            str(ranks),
            sys.executable,
            str(TESTS / script),
            *map(str, args),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    # Ranks share one stdout pipe, so their lines may interleave.
    oks = sorted(int(r) for r in re.findall(r"rank (\d+)(?:/\d+)?: ok", p.stdout))
    assert oks == list(range(ranks)), out
    return p.stdout


def client_on(dep, local: int, placement: str = "region-local") -> pdcx.Client:
    """A client whose node-local server is `local` (all servers share this host), as if each
    server were a node of its own: a small write to an object another server owns is not
    sent to that owner (which a client does when the owner is on its node), so it is held
    by `local` and registered with the owner, as between nodes."""
    emulated = {"OMPI_COMM_WORLD_LOCAL_RANK": str(local), "PDCX_SMALL_WRITE_TO_OWNER": "0"}
    saved = {k: os.environ.get(k) for k in emulated}
    os.environ.update(emulated)
    try:
        c = dep.client()
    finally:
        for k, v in saved.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v
    assert c.local_server == local
    c.placement = placement
    return c


def names_on_every_server(prefix: str, n_servers: int, per_server: int = 1) -> list[str]:
    """Object names whose owners cover every server `per_server` times."""
    picked, count = [], [0] * n_servers
    i = 0
    while min(count) < per_server:
        name = f"{prefix}/{i}"
        if count[owner_of_name(name, n_servers)] < per_server:
            picked.append(name)
            count[owner_of_name(name, n_servers)] += 1
        i += 1
    return picked


def owner_of_name(name: str, n: int) -> int:
    """pdcx_core::owner_of_name, for choosing names that land on given servers."""
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    for mult in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
        h = ((h ^ (h >> 33)) * mult) & 0xFFFFFFFFFFFFFFFF
    h ^= h >> 33
    return h % n


# -- raw wire protocol helpers (tests that speak to a server without the client library) -----

MAGIC = b"PDCX"


def _protocol_version() -> int | None:
    """The version the servers speak, read from the protocol's source (never a copy that
    drifts when the protocol moves on). None only where this file runs outside the repository
    (tests/test_ci_honesty.py runs a copy of it), where no test speaks raw frames."""
    path = REPO / "crates/core/src/protocol/mod.rs"
    if not path.exists():
        return None
    m = re.search(r"^pub const VERSION: u16 = (\d+);", path.read_text(), re.MULTILINE)
    assert m, "no `pub const VERSION: u16 = N;` in crates/core/src/protocol/mod.rs"
    return int(m.group(1))


VERSION = _protocol_version()
# Frame kinds (protocol::FrameKind).
CHALLENGE, HELLO, WELCOME, REQUEST, RESPONSE, PEER_REQUEST, PEER_RESPONSE = 1, 2, 3, 4, 5, 6, 7
ERROR_KINDS = [
    "NotFound",
    "AlreadyExists",
    "InvalidArgument",
    "OutOfBounds",
    "DtypeMismatch",
    "Protocol",
    "Auth",
    "NoSpace",
    "Unavailable",
    "Io",
    "Internal",
]
# Body prefixes of protocol::Request and protocol::Response: the family's variant index, then
# the operation's within the family (bincode encodes each as a varint below 251: one byte).
REQ = {
    "Ping": b"\x00\x00",
    "GetObject": b"\x01\x06",
    "Stage": b"\x02\x00",
    "Commit": b"\x02\x02",
    "Read": b"\x03\x00",
    "Stats": b"\x06\x00",
}
RESP_WELCOME, RESP_STAGED, RESP_COMMITTED, RESP_DATA = b"\x00\x00", b"\x02\x01", b"\x02\x03", b"\x03\x00"
RESP_ERROR = 7  # Response::Error, the one variant without a family


def header(kind: int, body_len: int, request_id: int = 1, payload_len: int = 0, *, magic=MAGIC, version=VERSION):
    return struct.pack("<4sHHIIQQ", magic, version, kind, 0, body_len, request_id, payload_len)


def varint(n: int) -> bytes:
    """bincode's varint encoding of an unsigned integer (DefaultOptions)."""
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfb" + struct.pack("<H", n)
    if n < 1 << 32:
        return b"\xfc" + struct.pack("<I", n)
    return b"\xfd" + struct.pack("<Q", n)


def read_varint(b: bytes, i: int) -> tuple[int, int]:
    tag = b[i]
    if tag < 251:
        return tag, i + 1
    size = {251: 2, 252: 4, 253: 8}[tag]
    return int.from_bytes(b[i + 1 : i + 1 + size], "little"), i + 1 + size


def enc_u64s(xs) -> bytes:
    return varint(len(xs)) + b"".join(varint(x) for x in xs)


def enc_region(offset, count) -> bytes:
    return enc_u64s(offset) + enc_u64s(count)


def enc_stage(items) -> bytes:
    """items: (txn, object id, offset, count, byte length)."""
    out = REQ["Stage"] + varint(len(items))
    for txn, oid, off, cnt, n in items:
        out += varint(txn) + varint(oid) + enc_region(off, cnt) + varint(n)
    return out + varint(0) + varint(0)  # shm: None, commit: None


def enc_commit(txns, local: bool = True) -> bytes:
    # CommitOpts: durability, consistency Strong, no checksums, no seal.
    return REQ["Commit"] + enc_u64s(txns) + varint(1 if local else 0) + varint(0) + varint(0) + varint(0)


def enc_read(oid: int, off, cnt) -> bytes:
    # ReadOpts: not held, no shared memory, the whole region, the latest version.
    return REQ["Read"] + varint(1) + varint(oid) + enc_region(off, cnt) + varint(0) + varint(0) + varint(0) + varint(0)


class RawConn:
    """A socket speaking the pdcx framing by hand: 32-byte header, bincode body, payload."""

    def __init__(self, addr: tuple[str, int], timeout: float = 10):
        self.sock = socket.create_connection(addr, timeout=timeout)

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, kind: int, body: bytes, payload: bytes = b"", request_id: int = 1, **kw) -> None:
        self.send(header(kind, len(body), request_id, len(payload), **kw) + body + payload)

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> tuple[int, int, bytes, bytes]:
        """-> (kind, request_id, body, payload)"""
        magic, version, kind, _flags, body_len, rid, payload_len = struct.unpack("<4sHHIIQQ", self.recv_exact(32))
        assert magic == MAGIC and version == VERSION, (magic, version)
        body = self.recv_exact(body_len)
        payload = self.recv_exact(payload_len) if payload_len else b""
        return kind, rid, body, payload

    def closed_by_peer(self, timeout: float = 10) -> bool:
        """True if the server closes the connection (EOF or reset) within `timeout`."""
        self.sock.settimeout(timeout)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def binding(self) -> str:
        """This connection's channel binding as a client states it: `tcp CLIENT SERVER`."""
        (lh, lp), (ph, pp) = self.sock.getsockname()[:2], self.sock.getpeername()[:2]
        return f"tcp {lh}:{lp} {ph}:{pp}"

    def handshake(self, secret: bytes) -> tuple[int, int]:
        """Answers the server's challenge as a client; returns (rank, size) from its Welcome."""
        kind, _, nonce, _ = self.recv_frame()
        assert kind == CHALLENGE and len(nonce) == 32
        self.send_frame(HELLO, enc_hello(secret, nonce, self.binding()), request_id=0)
        kind, _, body, _ = self.recv_frame()
        assert kind == WELCOME and body[0] == 0, decode_error(body)
        rank, i = read_varint(body, 1)
        size, _ = read_varint(body, i)
        return rank, size

    def call(self, body: bytes, payload: bytes = b"", request_id: int = 7) -> tuple[bytes, bytes]:
        self.send_frame(REQUEST, body, payload, request_id=request_id)
        kind, rid, rbody, rpayload = self.recv_frame()
        assert kind == RESPONSE and rid == request_id, (kind, rid)
        return rbody, rpayload


# Raw connections use a fixed client nonce: nothing here depends on its freshness.
CLIENT_NONCE = bytes(range(32))


def hello_tag(
    secret: bytes,
    nonce: bytes,
    binding: str,
    peer_rank: int | None = None,
    client_nonce: bytes = CLIENT_NONCE,
    wire: int = 0,
) -> bytes:
    """protocol::Hello's tag: HMAC-SHA256 of a label, the role (and a peer's rank), the user
    (none: the deployment's own), both nonces and the channel binding (each length-prefixed),
    and the protection asked for."""
    import hashlib
    import hmac

    role = b"\x00" + bytes(4) if peer_rank is None else b"\x01" + struct.pack("<I", peer_rank)
    msg = b"pdcx hello 3\x00" + role + bytes(5)
    for part in (nonce, client_nonce, binding.encode()):
        msg += struct.pack("<I", len(part)) + part
    return hmac.new(secret, msg + bytes([wire]), hashlib.sha256).digest()


def enc_hello(
    secret: bytes,
    nonce: bytes,
    binding: str,
    peer_rank: int | None = None,
    tag: bytes | None = None,
    client_nonce: bytes = CLIENT_NONCE,
) -> bytes:
    """A Hello body: Role (Client, or Peer{rank}), the user (None: the deployment's own), the
    client nonce, the binding, the wire (plain) and the tag."""
    role = varint(0) if peer_rank is None else varint(1) + varint(peer_rank)
    tag = hello_tag(secret, nonce, binding, peer_rank, client_nonce) if tag is None else tag
    b = binding.encode()
    return (
        role
        + varint(0)
        + varint(len(client_nonce))
        + client_nonce
        + varint(len(b))
        + b
        + varint(0)
        + varint(len(tag))
        + tag
    )


def decode_error(body: bytes, kind: int = RESPONSE) -> tuple[str, str] | None:
    """(kind, message) of an error reply, else None: a Response::Error body, or for a `WELCOME`
    frame a refused handshake (Result::Err)."""
    if not body or body[0] != (1 if kind == WELCOME else RESP_ERROR):
        return None
    k, i = read_varint(body, 1)
    n, i = read_varint(body, i)
    return ERROR_KINDS[k], body[i : i + n].decode()


@pytest.fixture
def s3_server(tmp_path):
    """A real S3 server: versitygw started by scripts/s3server.sh on 127.0.0.1:<random port> with
    fresh credentials and an empty bucket, killed by PID afterwards. Yields a dict with endpoint,
    bucket, access_key_id, secret_access_key, pid and env (the AWS_* variables a pdcx server needs
    for an S3 tier on it). Skips when versitygw is not installed, unless PDCX_REQUIRE_S3=1 (CI),
    where that fails."""
    binary = Path(os.environ.get("VERSITYGW", "/usr/local/bin/versitygw"))
    if not binary.exists():
        msg = "versitygw not installed (scripts/s3server.sh install)"
        if os.environ.get("PDCX_REQUIRE_S3") == "1":
            pytest.fail(f"PDCX_REQUIRE_S3=1 but {msg}")
        pytest.skip(msg)
    p = subprocess.run(
        ["bash", str(REPO / "scripts/s3server.sh"), "start", str(tmp_path / "s3")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if p.returncode != 0:
        raise AssertionError(f"s3server.sh start failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    out = dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)
    pid = int(Path(out["PDCX_TEST_S3_PIDFILE"]).read_text().strip())
    info = {
        "endpoint": out["PDCX_TEST_S3_ENDPOINT"],
        "bucket": out["PDCX_TEST_S3_BUCKET"],
        "access_key_id": out["PDCX_TEST_S3_ACCESS_KEY_ID"],
        "secret_access_key": out["PDCX_TEST_S3_SECRET_ACCESS_KEY"],
        "pid": pid,
    }
    info["env"] = {
        "AWS_ACCESS_KEY_ID": info["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": info["secret_access_key"],
        "AWS_ENDPOINT_URL": info["endpoint"],
        "AWS_REGION": "us-east-1",
    }
    try:
        yield info
    finally:
        # By PID only; SIGKILL if it does not stop within 5 s (a test may also have killed it).
        try:
            os.kill(pid, signal.SIGTERM)
            wait_until(lambda: not pid_alive(pid), 5, "versitygw to stop")
        except ProcessLookupError:
            pass
        except AssertionError:
            os.kill(pid, signal.SIGKILL)


def remote_add(root, name: str, addr: str, token: str, fp: str, as_site: str = "hpc"):
    """`pdcx remote add NAME tls://ADDR ...` at `root`; the CompletedProcess."""
    return run_pdcx(
        "remote", "add", name, f"tls://{addr}", "--token", token, "--fingerprint", fp, "--as", as_site,
        "--root", root,
    )  # fmt: skip


def start_gateway(root, log: Path, listen: str = "127.0.0.1:0", site: str = "cloud"):
    """`pdcx gateway` of `root`, its stderr in `log`: (process, address)."""
    with open(log, "w") as err:  # the gateway's own handle stays open
        gw = subprocess.Popen(
            [pdcx_bin(), "gateway", "--site", site, "--listen", listen, "--root", str(root)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    line = gw.stdout.readline()
    if "listening on" not in line:
        gw.kill()
        gw.wait()
        raise AssertionError(line + log.read_text())
    return gw, line.split()[-1]


@pytest.fixture
def sites(deployment, tmp_path):
    """Site "hpc" (deployment a) linked to site "cloud" (deployment b, whose gateway
    runs on 127.0.0.1): yields (a, b, gateway address, fingerprint, token, gateway process)."""
    a, b = deployment(n=2), deployment(n=2)
    fp = run_pdcx("remote", "init", "--root", b.root).stdout.split()[-1]
    token = run_pdcx("remote", "token", "hpc", "--root", b.root).stdout.strip()
    gw, addr = start_gateway(b.root, tmp_path / "gateway.log")
    try:
        out = remote_add(a.root, "cloud", addr, token, fp)
        assert "linked" in out.stderr, out.stderr
        yield a, b, addr, fp, token, gw
    finally:
        gw.send_signal(signal.SIGKILL)
        gw.wait()
