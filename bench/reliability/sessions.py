"""Workload sessions: one mpirun of workload.py per cycle, its journal records, its progress,
and its end (the stop file, or a kill), with its exit status read as failures."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import oracle
from deploy import HERE, HarnessError, pid_alive

# Session.stop's status for a workload that did not end when told (and was killed).
STOP_TIMEOUT_RC = -1000


def launch_env() -> dict:
    """This process's environment without the variables of an MPI job: a caller that imported
    mpi4py (a pytest process, say) is an MPI singleton, and an mpirun (or a server reading its
    rank from them) started with its OMPI_/PMIX_ variables fails at once without a word."""
    return {
        k: v for k, v in os.environ.items() if not k.startswith(("OMPI_COMM_WORLD", "OMPI_MCA_", "PMIX_", "PMI_"))
    } | {k: v for k, v in os.environ.items() if k.startswith("OMPI_ALLOW_RUN_AS_ROOT")}


class Session:
    """One mpirun of workload.py, ended by the stop file (or killed)."""

    def __init__(self, run_dir: Path, session: int, seed: int, ranks: int, env: dict, armed: str | None = None):
        """`armed`: the crash point (NAME or NAME:N) a server runs with in this session; the
        workload then first does what reaches it (workload.py, prime_round)."""
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
                *([armed] if armed else []),
            ],
            # The servers share this host but stand for nodes of their own (each rank writes
            # through server rank % servers), so a small write is held by the rank's server and
            # registered with another owner, as between nodes, instead of being sent to the owner.
            env=env | {"PDCX_SMALL_WRITE_TO_OWNER": "0"},
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
