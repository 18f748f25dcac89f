"""Crash points: the names to arm (from a file, the server binary, or the source's list),
those the workload never passes, and whether an armed server died at its point."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from deploy import REPO, log, server_bin


def crash_points(spec: str) -> list[str]:
    """Crash point names: from a file (one per line), from `pdcx server crash-points`, or none."""
    if spec == "none":
        return []
    if spec != "auto":
        return [ln.strip() for ln in Path(spec).read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    binary = server_bin()
    try:
        p = subprocess.run([binary, "server", "crash-points"], capture_output=True, text=True, timeout=30, check=False)
        if p.returncode == 0 and "no crash points compiled in" in p.stderr:
            log(f"no crash points: {binary} was built without them (set PDCX_CRASH_BIN to a build with them)")
            return []
        if p.returncode == 0:
            names = [ln.split()[0] for ln in p.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
            return [n for n in names if not n.startswith(NOT_IN_WORKLOAD)]
    except OSError:
        pass
    if not os.environ.get("PDCX_CRASH_BIN"):
        log("no crash points: this pdcx has no `server crash-points` and PDCX_CRASH_BIN is not set")
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
# forms no group shards), or passes too rarely to arm (compaction copies only extents without
# a durable tier home, and this deployment flushes every 100 ms: its compactor runs, every
# 300 ms, but mostly drops hidden writes and retires): crates/server/tests/homecrash.rs,
# groupshard.rs and compact.rs kill processes at each of them instead. A resize runs with the
# servers stopped (`pdcx resize`): tests/test_resize.py kills it at each of its points.
NOT_IN_WORKLOAD = ("seal.", "home.", "s3.after_create_upload", "shard.", "compact.", "resize.")


def crash_evidence(returncode: int | None, log_text: str, point: str) -> str | None:
    """None when a server's exit shows it died at crash point `point` (SIGKILL, after the
    line crates/fsio/src/crash.rs prints there); else what it did instead."""
    said = f"crash point {point} reached" in log_text
    if returncode == -signal.SIGKILL and said:
        return None
    if returncode != -signal.SIGKILL:
        return f"exited with {returncode}, not killed at the point" + ("" if said else " (its log never reached it)")
    return "was killed but its log never reached the point (killed by something else)"
