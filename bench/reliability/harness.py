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
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: pdcxbin

# The harness by job, in sibling modules: deploy (servers, S3, recovery waits), sessions (the
# workload under mpirun), crashpoints, results_table, and the oracle; this file runs cycles.
import layout as L
import numpy as np
import oracle
import pdcx
from crashpoints import crash_evidence, crash_points
from deploy import HERE, S3, HarnessError, Servers, flush_all, log, pid_alive, wait_registered
from results_table import (
    failure_kind,  # noqa: F401 - tests use harness.failure_kind
    table,
)
from sessions import (
    STOP_TIMEOUT_RC,  # noqa: F401 - tests use harness.STOP_TIMEOUT_RC
    Session,
    launch_env,
    workload_failures,
)


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

[compaction]
threshold = 0.9
interval_ms = 300
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


def journal_create(journal, spec: dict) -> None:
    """The oracle's record of an object the harness created (acknowledged at the next sync:
    setup fsyncs the journal after it)."""
    journal.write(json.dumps({"k": "create", "obj": spec["name"], "shape": spec["shape"], "tags": spec["tags"]}) + "\n")
    journal.write(json.dumps({"k": "created", "obj": spec["name"]}) + "\n")


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
            "object_static_share": args.object_static_share,
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
                journal_create(j, spec)
            self.cfg["prime"] = self.create_prime_objects(base, j)
            c.sync()  # the creates' consistency point (durable from here on)
            j.flush()
            os.fsync(j.fileno())
        self.cfg["durabilities"] = ["memory", "local"] + (["remote"] if supports_remote(self.root) else [])
        (self.dir / "config.json").write_text(json.dumps(self.cfg, indent=1))
        log(
            f"run {self.id}: {self.args.servers} servers, {self.args.ranks} ranks, durabilities {self.cfg['durabilities']}"
        )

    def create_prime_objects(self, base, journal) -> dict[str, str]:
        """One object owned by each server (owner -> name), for the crash-point priming: the
        owner of an object is fixed at its create, so objects are created (and journaled)
        until every server owns one. Without them a point such as register.after_region_map
        (an owner recording a region another server holds) is reached only if the random
        mix happens to write an object of the armed server with the data elsewhere."""
        prime: dict[str, str] = {}
        i = 0
        while len(prime) < self.args.servers:
            if i == 64 * self.args.servers:
                raise HarnessError(f"after {i} creates some server still owns no priming object: {prime}")
            spec = L.prime_object(self.cfg, i)
            o = base.create_object(spec["name"], spec["shape"], "int64", fill=L.FILL, tags=spec["tags"])
            journal_create(journal, spec)
            prime.setdefault(str(o.metadata["owner"]), spec["name"])
            i += 1
        return prime

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
        sess = Session(self.dir, self.session, seed, self.args.ranks, self.client_env, armed=res.get("armed"))
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=200, help="kill cycles in total (default 200)")
    ap.add_argument("--kills-per-run", type=int, default=10, help="cycles per fresh deployment")
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--particles", type=int, default=16384, help="VPIC particles per rank per variable")
    ap.add_argument("--big-share", type=float, default=0.03, help="weight of 6 MiB (S3 multipart) writes")
    ap.add_argument(
        "--object-static-share",
        type=float,
        default=0.3,
        help="share of ranks (per session) writing with object-static placement, the rest region-local",
    )
    ap.add_argument("--max-delay", type=float, default=3.0, help="longest wait before a kill (s)")
    ap.add_argument("--kinds", default="server,all,client", help="kill kinds to draw from")
    ap.add_argument("--crash-points", default="auto", help="'auto' (pdcx server crash-points), FILE, or 'none'")
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
