#!/usr/bin/env python3
"""pdcx crash harness: kill loops and crash points against a real deployment, checked by the
oracle after every recovery. Run through bench/reliability/run.sh (see README.md there).

A *run* is a fresh deployment: per-rank `pdcx server` processes on 127.0.0.1 (fixed ports, so a
restarted server is found at its old address), a tier config whose flusher moves data to a
shared-directory tier and to S3 (a real versitygw), and the base objects. A run is a sequence of
*cycles*; each cycle starts the MPI workload (workload.py), waits a random time, then:

- `server`: kill -9 one random server, restart it while the clients keep going;
- `all`:    kill -9 every server, restart them while the clients keep going;
- `client`: kill -9 one random workload rank (mpirun then ends the others);
- `crash`:  restart one random server with PDCX_CRASH_AT=<point> (a server built with the
            `crash-points` feature dies there), wait until it dies, restart it without;

then ends the workload, checks the whole history with the oracle (oracle.py), and recovers a
second time (kill -9 every server, restart, nothing written) and compares everything read.
Each cycle appends one JSON line to OUT/results.jsonl; the table is computed from that file,
so `--out DIR` with an existing DIR resumes (interrupted runs are abandoned, new ones start).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

import layout as L
import numpy as np
import oracle
import pdcx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: pdcxbin
from pdcxbin import pdcx_bin

KINDS = ("server", "all", "client")
# Session.stop's status for a workload that did not end when told (and was killed).
STOP_TIMEOUT_RC = -1000


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


# -- S3 ----------------------------------------------------------------------------------------


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


# -- servers -----------------------------------------------------------------------------------


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


# -- the workload ------------------------------------------------------------------------------


def launch_env() -> dict:
    """This process's environment without the variables of an MPI job: a caller that imported
    mpi4py (a pytest process, say) is an MPI singleton, and an mpirun (or a server reading its
    rank from them) started with its OMPI_/PMIX_ variables fails at once without a word."""
    return {
        k: v for k, v in os.environ.items() if not k.startswith(("OMPI_COMM_WORLD", "OMPI_MCA_", "PMIX_", "PMI_"))
    } | {k: v for k, v in os.environ.items() if k.startswith("OMPI_ALLOW_RUN_AS_ROOT")}


class Session:
    """One mpirun of workload.py, ended by the stop file (or killed)."""

    def __init__(self, run_dir: Path, session: int, seed: int, ranks: int, env: dict):
        self.run_dir, self.session, self.ranks = run_dir, session, ranks
        (run_dir / "stop").unlink(missing_ok=True)
        self.out = open(run_dir / "logs" / f"session-{session}.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                "mpirun",
                "--allow-run-as-root",
                "--oversubscribe",
                "-n",
                str(ranks),
                sys.executable,
                str(HERE / "workload.py"),
                str(run_dir),
                str(session),
                str(seed),
            ],
            env=env,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def records(self) -> dict[int, list[dict]]:
        out = {}
        for r in range(self.ranks):
            p = self.run_dir / "journal" / f"rank-{r}.jsonl"
            recs = oracle.read_jsonl(p) if p.exists() else []
            # This session's records: from the last "begin" of this session on.
            start = max(
                (i for i, x in enumerate(recs) if x["k"] == "begin" and x["session"] == self.session), default=None
            )
            out[r] = [] if start is None else recs[start:]
        return out

    def wait_progress(self, acks: int, timeout: float = 120) -> None:
        """Until every rank has `acks` acknowledged batches in this session."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise HarnessError(f"workload exited early ({self.proc.returncode}); see {self.out.name}")
            recs = self.records()
            if all(sum(1 for x in rs if x["k"] == "ack") >= acks for rs in recs.values()):
                return
            time.sleep(0.1)
        raise HarnessError(f"workload made no progress in {timeout}s; see {self.out.name}")

    def rank_pid(self, r: int) -> int | None:
        for x in self.records()[r]:
            if x["k"] == "begin":
                return x["pid"]
        return None

    def stop(self, timeout: float = 60) -> int:
        (self.run_dir / "stop").touch()
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = STOP_TIMEOUT_RC
        self.out.close()
        return rc

    def kill(self) -> None:
        pids = [self.rank_pid(r) for r in range(self.ranks)]
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # mpirun's own group (start_new_session)
        except ProcessLookupError:
            pass
        for pid in pids:
            if pid and pid_alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.proc.wait(timeout=30)


# -- a run -------------------------------------------------------------------------------------


def tier_config(run_dir: Path, s3: S3, shard: bool) -> str:
    return f"""
[[tier]]
name = "ssd"
kind = "local"
path = "{run_dir}/ssd"
capacity = "16MiB"

[[tier]]
name = "pfs"
kind = "shared"
path = "{run_dir}/pfs"

[[tier]]
name = "s3"
kind = "s3"
endpoint = "{s3.endpoint}"
bucket = "{s3.bucket}"
region = "us-east-1"
part_size = "5MiB"
timeout_ms = 2000
request_timeout_ms = 5000

[log]
segment_bytes = "1MiB"

[flush]
interval_ms = 100
{"[shard]" + chr(10) + "strategy = 3" if shard else ""}
"""


def supports_remote(root: Path) -> bool:
    """Feature detection: does this pdcx accept durability="remote"? (Creates no data.)"""
    c = pdcx.connect(root)
    o = c.open_object("hot")
    try:
        o.transfer("w", np.zeros(1, dtype=L.DTYPE), offset=[0], durability="remote")
        return True
    except (pdcx.PdcxError, ValueError) as e:
        if "durability" in str(e):
            return False
        raise


def crash_points(spec: str) -> list[str]:
    """Crash point names: from a file (one per line), from `pdcx debug crash-points`, or none."""
    if spec == "none":
        return []
    if spec != "auto":
        return [ln.strip() for ln in Path(spec).read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    binary = server_bin()
    try:
        p = subprocess.run([binary, "debug", "crash-points"], capture_output=True, text=True, timeout=30, check=False)
        if p.returncode == 0:
            names = [ln.split()[0] for ln in p.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
            return [n for n in names if not n.startswith(NOT_IN_WORKLOAD)]
    except OSError:
        pass
    if not os.environ.get("PDCX_CRASH_BIN"):
        log("no crash points: this pdcx has no `debug crash-points` and PDCX_CRASH_BIN is not set")
        return []
    # PDCX_CRASH_BIN names a build with the feature: take the names from the source's list.
    path = REPO / "crates/fsio/src/crash.rs"
    if not path.exists():
        log(f"no crash points: PDCX_CRASH_BIN is set but {path} (their list) is missing; pass --crash-points FILE")
        return []
    src = path.read_text()
    body = src.split("pub const POINTS", 1)[1].split("];", 1)[0]
    names = [ln.split('"')[1] for ln in body.splitlines() if ln.strip().startswith('"')]
    return [n for n in names if not n.startswith(NOT_IN_WORKLOAD)]


# Crash points this harness's workload never passes (it seals no byte-stream versions and
# forms no group shards): crates/server/tests/homecrash.rs and groupshard.rs kill servers at
# each of them instead.
NOT_IN_WORKLOAD = ("seal.", "home.", "s3.after_create_upload", "shard.")


def workload_failures(kind: str, rc: int, log_name: str) -> list[str]:
    """The workload's exit status as failures. Its ranks exit 0 once the stop file appears,
    whatever servers died meanwhile (they retry through restarts); a rank that gives up, hits
    an exception or hangs past the stop exits otherwise. Only a `client` cycle kills a rank,
    and then mpirun's status is that kill's."""
    if kind == "client" or rc == 0:
        return []
    if rc == STOP_TIMEOUT_RC:
        return [f"workload did not stop when told and was killed; see {log_name}"]
    return [f"workload exited with {rc}; see {log_name}"]


def crash_evidence(returncode: int | None, log_text: str, point: str) -> str | None:
    """None when a server's exit shows it died at crash point `point` (SIGKILL, after the
    line crates/fsio/src/crash.rs prints there); else what it did instead."""
    said = f"crash point {point} reached" in log_text
    if returncode == -signal.SIGKILL and said:
        return None
    if returncode != -signal.SIGKILL:
        return f"exited with {returncode}, not killed at the point" + ("" if said else " (its log never reached it)")
    return "was killed but its log never reached the point (killed by something else)"


class Run:
    def __init__(self, out: Path, run_id: int, args, rng: random.Random):
        self.id, self.args, self.rng = run_id, args, rng
        self.dir = out / f"run-{run_id:04d}"
        if self.dir.exists():
            shutil.rmtree(self.dir)
        (self.dir / "journal").mkdir(parents=True)
        # A fresh S3 server per run: its bucket holds only this run's blobs, removed with it.
        self.s3 = s3 = S3(self.dir / "s3")
        (self.dir / "logs").mkdir()
        self.root = self.dir / "root"
        self.root.mkdir()
        (self.root / "pdcx.toml").write_text(tier_config(self.dir, s3, shard=run_id % 2 == 1))
        server_env = dict(launch_env(), **s3.env)
        server_env.pop("PDCX_ROOT", None)
        self.servers = Servers(self.root, args.servers, server_env, self.dir / "journal" / "harness.jsonl")
        self.client_env = dict(launch_env(), PDCX_ROOT=str(self.root))
        self.session = 0
        self.cfg = {
            "ranks": args.ranks,
            "particles": args.particles,
            "halo": args.particles // 4,
            "grid": 96,
            "hot": 4096,
            "big": 1 << 20,
            "big_write": 768 * 1024,  # 6 MiB: one extent above part_size, an S3 multipart upload
            "big_share": args.big_share,
            "relaxed_share": 0.3,
            "object_static_share": 0.3,
            "give_up_s": 60,
        }

    def setup(self) -> None:
        self.servers.start()
        self.servers.wait_ready()
        c = pdcx.connect(self.root)
        with open(self.dir / "journal" / "harness.jsonl", "a") as j:
            base = c.create_container("rel")
            c.create_container("steps")
            for spec in L.base_objects(self.cfg):
                base.create_object(spec["name"], spec["shape"], "int64", fill=L.FILL, tags=spec["tags"])
                j.write(
                    json.dumps({"k": "create", "obj": spec["name"], "shape": spec["shape"], "tags": spec["tags"]})
                    + "\n"
                )
                j.write(json.dumps({"k": "created", "obj": spec["name"]}) + "\n")
            c.sync()  # the creates' consistency point (durable from here on)
            j.flush()
            os.fsync(j.fileno())
        self.cfg["durabilities"] = ["memory", "local"] + (["remote"] if supports_remote(self.root) else [])
        (self.dir / "config.json").write_text(json.dumps(self.cfg, indent=1))
        log(
            f"run {self.id}: {self.args.servers} servers, {self.args.ranks} ranks, durabilities {self.cfg['durabilities']}"
        )

    def close(self) -> None:
        try:
            self.servers.stop(timeout=60)
        except HarnessError as e:
            log(f"run {self.id}: {e}")
        self.s3.stop()
        if not self.args.keep:
            shutil.rmtree(self.root, ignore_errors=True)
            for d in ("pfs", "ssd", "s3"):
                shutil.rmtree(self.dir / d, ignore_errors=True)

    def cycle(self, kind: str, point: str | None = None) -> dict:
        self.session += 1
        seed = self.rng.randrange(1 << 30)
        res = {"run": self.id, "session": self.session, "kind": kind, "seed": seed, "recover_s": [], "failures": []}
        if point:
            res["point"] = point
        victim = self.rng.randrange(self.args.servers)
        if kind == "crash":
            # The victim runs with the crash point armed; the others as usual. A point on the
            # start-up path (recovery) fires right here.
            res["victim"] = victim
            nth = self.rng.randint(1, max(1, self.args.crash_nth))
            res["armed"] = armed = point if nth == 1 else f"{point}:{nth}"
            self.servers.stop([victim])
            self.servers.start([victim], crash_at=armed)
            try:
                self.servers.wait_ready()
            except HarnessError:
                if self.servers.alive(victim):
                    raise
                self.crashed(res, victim, point, at_start=True)
        sess = Session(self.dir, self.session, seed, self.args.ranks, self.client_env)
        try:
            sess.wait_progress(acks=0 if kind == "crash" else 2)
            delay = self.rng.uniform(0.2, self.args.max_delay)
            res["delay_s"] = round(delay, 3)
            if kind != "crash":
                time.sleep(delay)
            if kind == "server":
                res["victim"] = victim
                self.servers.kill9([victim])
                time.sleep(self.rng.uniform(0, 1))
                self.servers.start([victim])
                res["recover_s"].append(self.servers.wait_ready())
            elif kind == "all":
                self.servers.kill9()
                time.sleep(self.rng.uniform(0, 1))
                self.servers.start()
                res["recover_s"].append(self.servers.wait_ready())
            elif kind == "client":
                r = self.rng.randrange(self.args.ranks)
                pid = sess.rank_pid(r)
                res["victim"] = r
                if pid and pid_alive(pid):
                    os.kill(pid, signal.SIGKILL)
            elif kind == "crash" and not res.get("hit"):
                end = time.monotonic() + self.args.crash_wait
                while self.servers.alive(victim) and time.monotonic() < end:
                    time.sleep(0.05)
                if self.servers.alive(victim):
                    res["hit"] = False
                    res["failures"].append(
                        f"crash point {res['armed']} was never reached (server {victim} still alive after "
                        f"{self.args.crash_wait:g} s)"
                    )
                    self.servers.stop([victim])
                    self.servers.start([victim])
                    self.servers.wait_ready()
                else:
                    self.crashed(res, victim, point, at_start=False)
            time.sleep(self.rng.uniform(0.5, 1.5))  # the clients carry on against the restarted servers
            res["workload_rc"] = sess.stop()
            res["failures"] += workload_failures(kind, res["workload_rc"], sess.out.name)
        except BaseException:
            sess.kill()
            raise
        self.check(res)
        return res

    def crashed(self, res: dict, victim: int, point: str, at_start: bool) -> None:
        """The armed server died: a failure unless it died at its crash point (killed by
        SIGKILL, after saying so in its log). Restart it without the point."""
        res["exit"] = rc = self.servers.procs[victim].returncode
        why = crash_evidence(rc, self.servers.last_log(victim), point)
        res["hit"], res["at_start"] = why is None, at_start
        if why:
            res["failures"].append(f"server {victim} armed with {res['armed']} {why}")
        self.servers.event({"k": "kill", "servers": [victim], "t": time.monotonic_ns(), "point": point})
        self.servers.start([victim])
        res["recover_s"].append(self.servers.wait_ready())

    def check(self, res: dict) -> None:
        """The oracle after this recovery, then a second recovery that must change nothing."""
        t0 = time.monotonic()
        h = oracle.load(self.dir)
        load_s = time.monotonic() - t0
        wait_registered(self.root)
        t0 = time.monotonic()
        rep = oracle.check(pdcx.connect(self.root), h)
        res["check_s"] = round(time.monotonic() - t0, 2)
        res["check_parts_s"] = {
            "journal": round(load_s, 2),
            **{k: v if isinstance(v, tuple) else round(v, 2) for k, v in rep.timing.items()},
        }
        res["acked"] = h.acked_bytes()
        res["lost"] = [[d, w, n] for (d, w), n in rep.lost.items()]
        res["torn"] = rep.torn
        res["failures"] += rep.failures()
        res["errors_seen"] = h.errors
        res["mem_at_risk_bytes"] = sum(h.writes[w].nbytes for w in rep.at_risk)
        # Memory-durability writes acknowledged since the last local commit may be lost by the
        # next kill; make everything durable first, so the second recovery must change nothing.
        t0 = time.monotonic_ns()
        if flush_all(self.root):
            self.servers.event({"k": "flush", "t0": t0, "t": time.monotonic_ns()})
        else:
            res["flush_incomplete"] = True
        self.servers.kill9()
        self.servers.start()
        res["recover_s"].append(self.servers.wait_ready())
        wait_registered(self.root)
        again = oracle.snapshot(pdcx.connect(self.root))
        diff = sorted(k for k in set(again) | set(rep.snapshot) if again.get(k) != rep.snapshot.get(k))
        res["second_recovery_diff"] = diff
        if diff:
            res["failures"].append(f"a second recovery changed {diff}")


# -- the table ---------------------------------------------------------------------------------


def failure_kind(f: str) -> str:
    """A short name for a failure line, for the table's summary."""
    for needle, kind in (
        ("is not part of the log", "reads racing segment retirement"),
        ("os error 11", "client calls timed out after 10 s"),
        ("no blob", "reads racing demotion"),
        ("workload exited", "workload crashes (see its session log)"),
        ("workload did not stop", "workloads that hung"),
        ("was never reached", "crash points never reached"),
        ("not killed at the point", "servers that died elsewhere than their crash point"),
        ("log never reached the point", "servers that died elsewhere than their crash point"),
        ("malformed journal", "malformed journals"),
        ("recovery failed", "recoveries that failed"),
        ("torn", "torn writes"),
        ("never written", "data never written"),
        ("second recovery", "second recoveries that changed data"),
        ("lost", "lost writes"),
        ("tag ", "tag problems"),
        ("object ", "create problems"),
    ):
        if needle in f:
            return kind
    return "other"


def table(results: list[dict], power: str, mpiio: str = "n/a") -> str:
    runs = sorted({r["run"] for r in results})
    kinds = {k: sum(1 for r in results if r["kind"] == k) for k in (*KINDS, "crash")}
    hit = sum(1 for r in results if r["kind"] == "crash" and r.get("hit"))
    missed = sorted({r["point"] for r in results if r["kind"] == "crash" and not r.get("hit")})
    acked: dict[str, int] = {}
    lost: dict[str, int] = {}
    at_risk = 0
    torn = 0
    for run in runs:
        rs = [r for r in results if r["run"] == run]
        for d, n in rs[-1].get("acked", {}).items():  # cumulative within a run
            acked[d] = acked.get(d, 0) + n
        at_risk += max((r.get("mem_at_risk_bytes", 0) for r in rs), default=0)
        per: dict[tuple, int] = {}
        for r in rs:
            for d, w, n in r.get("lost", []):
                per[(d, w)] = max(per.get((d, w), 0), n)
            torn += len(r.get("torn", []))
        for (d, _), n in per.items():
            lost[d] = lost.get(d, 0) + n * L.ITEM
    rec = [t for r in results for t in r.get("recover_s", [])]
    failures = [f for r in results for f in r.get("failures", [])]
    durs = [d for d in ("memory", "local", "remote") if d in acked or d in lost]

    def mib(n: int) -> str:
        return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} B"

    rows = [
        ("runs (fresh deployments)", str(len(runs))),
        ("cycles (kills and crash points)", str(len(results))),
        ("  kill -9 one server", str(kinds["server"])),
        ("  kill -9 all servers", str(kinds["all"])),
        ("  kill -9 one client rank", str(kinds["client"])),
        (
            "crash points hit / tried",
            f"{hit} / {kinds['crash']}" + (f" (not hit: {', '.join(missed)})" if missed else ""),
        ),
        ("power cuts (Rust crash tests)", power),
        ("MPI-IO programs under pdcx run (tests/test_mpiio_crash.py)", mpiio),
    ]
    for d in durs:
        rows.append((f"bytes acknowledged at {d}", mib(acked.get(d, 0))))
    for d in durs:
        note = f" of {mib(at_risk)} that may be lost (see README)" if d == "memory" else ""
        rows.append((f"bytes lost at {d}", mib(lost.get(d, 0)) + note))
    rows.append(("torn regions found", str(torn)))
    rows.append(("second recoveries that changed data", str(sum(1 for r in results if r.get("second_recovery_diff")))))
    if rec:
        rows.append(("time to recover (median / max)", f"{statistics.median(rec):.2f} s / {max(rec):.2f} s"))
    kinds_of = Counter(failure_kind(f) for f in failures)
    rows.append(
        (
            "failures",
            f"{len(failures)}" + (f" ({', '.join(f'{n} {k}' for k, n in kinds_of.most_common())})" if failures else ""),
        )
    )
    w = max(len(k) for k, _ in rows)
    out = ["| what | value |", "|---|---|"] + [f"| {k.ljust(w)} | {v} |" for k, v in rows]
    if failures:
        out.append("")
        out += [f"FAILURE: {f}" for f in failures[:50]]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=200, help="kill cycles in total (default 200)")
    ap.add_argument("--kills-per-run", type=int, default=10, help="cycles per fresh deployment")
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--particles", type=int, default=16384, help="VPIC particles per rank per variable")
    ap.add_argument("--big-share", type=float, default=0.03, help="weight of 6 MiB (S3 multipart) writes")
    ap.add_argument("--max-delay", type=float, default=3.0, help="longest wait before a kill (s)")
    ap.add_argument("--kinds", default="server,all,client", help="kill kinds to draw from")
    ap.add_argument("--crash-points", default="auto", help="'auto' (pdcx debug crash-points), FILE, or 'none'")
    ap.add_argument("--crash-wait", type=float, default=30, help="how long to wait for an armed point (s)")
    ap.add_argument("--crash-nth", type=int, default=3, help="arm NAME:N, N random in 1..this (the Nth hit)")
    ap.add_argument("--cycle-kinds-in-order", action="store_true", help="kinds in turn instead of at random")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None, help="results directory (an existing one is resumed)")
    ap.add_argument("--power", default="n/a", help="the power-cut column (run.sh fills it)")
    ap.add_argument("--power-failed", action="store_true", help="the power-cut test failed (run.sh)")
    ap.add_argument("--mpiio", default="n/a", help="the MPI-IO crash row (run.sh fills it)")
    ap.add_argument("--mpiio-failed", action="store_true", help="an MPI-IO crash run failed (run.sh)")
    ap.add_argument("--keep", action="store_true", help="keep each run's data")
    ap.add_argument("--table-only", action="store_true", help="print the table of --out and exit")
    args = ap.parse_args()

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    # SIGTERM, and SIGINT even when started in the background (where the shell ignores it),
    # end the harness cleanly: the current cycle's workload is killed, servers and S3 stopped.
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)

    out = args.out or HERE / "out" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.jsonl"
    results = oracle.read_jsonl(results_path, key="kind") if results_path.exists() else []
    if args.table_only:
        print(table(results, args.power, args.mpiio))
        return 1 if any(r.get("failures") for r in results) else 0
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    kinds = [k for k in args.kinds.split(",") if k]
    points = crash_points(args.crash_points)
    tried = {r.get("point") for r in results if r["kind"] == "crash"}
    todo_points = [p for p in points if p not in tried]
    run_id = max((r["run"] for r in results), default=-1) + 1
    log(f"out {out}; seed {seed}; {len(results)} cycles done; crash points to try: {len(todo_points)}")
    argv = [a for i, a in enumerate(sys.argv) if a != "--seed" and (i == 0 or sys.argv[i - 1] != "--seed")]
    log(f"reproduce: {shlex.join([sys.executable, *argv])} --seed {seed}")
    rng = random.Random(seed)
    status = 0
    try:
        while len([r for r in results if r["kind"] != "crash"]) < args.kills or todo_points:
            run = Run(out, run_id, args, rng)
            try:
                run.setup()
                for _ in range(args.kills_per_run):
                    done = len([r for r in results if r["kind"] != "crash"])
                    if done >= args.kills and not todo_points:
                        break
                    if todo_points and (done >= args.kills or rng.random() < 0.3):
                        kind, point = "crash", todo_points.pop(0)
                    elif args.cycle_kinds_in_order:
                        kind, point = kinds[done % len(kinds)], None
                    else:
                        kind, point = rng.choice(kinds), None
                    t0 = time.monotonic()
                    try:
                        res = run.cycle(kind, point)
                    except (HarnessError, oracle.JournalError) as e:
                        # Both leave the run unusable: a deployment in an unknown state, or a
                        # history that cannot be trusted.
                        what = "recovery failed" if isinstance(e, HarnessError) else "malformed journal"
                        res = {
                            "run": run.id,
                            "session": run.session,
                            "kind": kind,
                            "failures": [f"{what}: {e}"],
                        }
                        if point:
                            res["point"] = point
                    res["cycle_s"] = round(time.monotonic() - t0, 1)
                    results.append(res)
                    with open(results_path, "a") as f:
                        f.write(json.dumps(res) + "\n")
                    what = kind + (f" {point}" + (" hit" if res.get("hit") else " not hit") if point else "")
                    log(
                        f"run {run.id} session {res['session']}: {what}, victim {res.get('victim')}, "
                        f"recover {[f'{t:.2f}' for t in res.get('recover_s', [])]}, "
                        f"{len(res['failures'])} failures ({res['cycle_s']} s)"
                    )
                    for f in res["failures"]:
                        log(f"  FAILURE (run {run.id}, session {res['session']}, seed {seed}): {f}")
                    if any(f.startswith(("recovery failed", "malformed journal")) for f in res["failures"]):
                        break  # the deployment is in an unknown state: start a fresh run
            finally:
                run.close()
            run_id += 1
    except KeyboardInterrupt:
        log("interrupted; rerun with the same --out to resume")
        status = 130
    print()
    print(table(results, args.power, args.mpiio))
    if args.power_failed:
        print("FAILURE: the power-cut test failed")
    if args.mpiio_failed:
        print("FAILURE: an MPI-IO crash run failed")
    if any(r.get("failures") for r in results) or args.power_failed or args.mpiio_failed:
        status = status or 1
    return status


if __name__ == "__main__":
    sys.exit(main())
