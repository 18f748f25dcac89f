"""The crash harness's deployment: per-rank `pdcx server` processes on fixed ports (started,
killed, stopped by PID), the run's versitygw S3 server, and the waits a recovery needs
(servers answering, deferred writes registered, flushes done)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pdcx
from pdcxbin import pdcx_bin

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def server_bin() -> str:
    """The servers' binary: PDCX_CRASH_BIN (a build with the crash-points feature, inert
    unless PDCX_CRASH_AT is set) if given, else the pdcx binary."""
    return os.environ.get("PDCX_CRASH_BIN") or pdcx_bin()


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def pid_alive(pid: int) -> bool:
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


class HarnessError(Exception):
    """A recovery that did not complete (servers not answering, deferred writes stuck)."""


class S3:
    """A real versitygw on 127.0.0.1 (scripts/s3server.sh), stopped by its PID."""

    def __init__(self, workdir: Path):
        p = subprocess.run(
            ["bash", str(REPO / "scripts/s3server.sh"), "start", str(workdir)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if p.returncode != 0:
            raise SystemExit(f"s3server.sh start failed:\n{p.stdout}\n{p.stderr}")
        out = dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)
        self.pid = int(Path(out["PDCX_TEST_S3_PIDFILE"]).read_text().strip())
        self.endpoint = out["PDCX_TEST_S3_ENDPOINT"]
        self.bucket = out["PDCX_TEST_S3_BUCKET"]
        self.env = {
            "AWS_ACCESS_KEY_ID": out["PDCX_TEST_S3_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": out["PDCX_TEST_S3_SECRET_ACCESS_KEY"],
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": "us-east-1",
        }

    def stop(self) -> None:
        if not pid_alive(self.pid):
            return
        os.kill(self.pid, signal.SIGTERM)
        end = time.monotonic() + 5
        while pid_alive(self.pid) and time.monotonic() < end:
            time.sleep(0.05)
        if pid_alive(self.pid):
            os.kill(self.pid, signal.SIGKILL)


class Servers:
    """One `pdcx server --rank R` process per rank, each on a fixed port, stopped by PID."""

    def __init__(self, root: Path, n: int, env: dict, journal: Path, cache_mb: int = 64):
        self.root, self.n, self.env, self.cache_mb = root, n, env, cache_mb
        self.journal = journal
        self.ports = free_ports(n)
        self.procs: dict[int, subprocess.Popen] = {}
        self.logs = root.parent / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.bin = server_bin()

    def start(self, ranks=None, crash_at: str | None = None) -> None:
        for r in range(self.n) if ranks is None else ranks:
            env = dict(self.env)
            env.pop("PDCX_CRASH_AT", None)
            if crash_at:
                env["PDCX_CRASH_AT"] = crash_at
            logf = open(self.logs / f"server-{r}.log", "a")  # noqa: SIM115 - handed to the child
            logf.write(f"\n=== harness: start rank {r} at {time.time():.3f} crash_at={crash_at}\n")
            logf.flush()
            self.procs[r] = subprocess.Popen(
                [
                    self.bin,
                    "server",
                    "--root",
                    str(self.root),
                    "--rank",
                    str(r),
                    "--size",
                    str(self.n),
                    "--bind",
                    f"127.0.0.1:{self.ports[r]}",
                    "--cache-mb",
                    str(self.cache_mb),
                ],
                env=env,
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            logf.close()

    def wait_ready(self, timeout: float = 120) -> float:
        """Seconds until every server answers through the cluster file (a fresh client)."""
        t0 = time.monotonic()
        last = None
        while time.monotonic() - t0 < timeout:
            for r, p in self.procs.items():
                if p.poll() is not None:
                    raise HarnessError(f"server {r} exited with {p.returncode} while starting (see {self.logs})")
            try:
                c = pdcx.connect(self.root)
                c.stats()
                return time.monotonic() - t0
            except pdcx.PdcxError as e:
                last = e
            time.sleep(0.05)
        raise HarnessError(f"servers did not answer within {timeout}s: {last}")

    def event(self, rec: dict) -> None:
        """The oracle's record of kills and clean stops (what memory-durability writes may lose)."""
        with open(self.journal, "a") as j:
            j.write(json.dumps(rec) + "\n")
            j.flush()
            os.fsync(j.fileno())

    def kill9(self, ranks=None) -> None:
        ranks = list(self.procs) if ranks is None else ranks
        self.event({"k": "kill", "servers": ranks, "t": time.monotonic_ns()})
        for r in ranks:
            p = self.procs.get(r)
            if p is not None and p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
        for r in ranks:
            if r in self.procs:
                self.procs[r].wait(timeout=30)

    def stop(self, ranks=None, timeout: float = 120) -> None:
        """Clean stop (SIGTERM: the server syncs and exits); SIGKILL after `timeout`."""
        ranks = list(self.procs) if ranks is None else ranks
        t0 = time.monotonic_ns()
        for r in ranks:
            p = self.procs.get(r)
            if p is not None and p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
        for r in ranks:
            p = self.procs.get(r)
            if p is None:
                continue
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
                raise HarnessError(f"server {r} did not stop within {timeout}s of SIGTERM") from None
        self.event({"k": "stop", "servers": ranks, "t0": t0, "t": time.monotonic_ns()})

    def last_log(self, r: int) -> str:
        """Server `r`'s log since its latest start."""
        text = (self.logs / f"server-{r}.log").read_text(errors="replace")
        return text[text.rfind("=== harness: start rank") :]

    def alive(self, r: int) -> bool:
        return r in self.procs and self.procs[r].poll() is None


def wait_registered(root: Path, timeout: float = 60) -> None:
    """Relaxed writes a crashed holder kept are registered again at start; wait for them."""
    end = time.monotonic() + timeout
    while True:
        c = pdcx.connect(root)
        left = sum(s.get("unregistered", 0) for s in c.stats())
        if left == 0:
            return
        if time.monotonic() > end:
            raise HarnessError(f"{left} deferred (relaxed) writes still unregistered after {timeout}s")
        time.sleep(0.1)


def flush_all(root: Path, timeout: float = 120) -> bool:
    """Starts every server's flush and polls until nothing is pending (short calls only: a
    client call that takes more than 10 s fails, see README "Found so far")."""
    c = pdcx.connect(root)
    c.flush(wait=False)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if sum(s.get("flush_pending_extents", 0) for s in c.stats()) == 0:
            return True
        time.sleep(0.1)
    return False
