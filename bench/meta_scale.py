"""Metadata at scale: lazy region-map updates and per-node lookup aggregation.

    python3 bench/meta_scale.py [--writes 2000] [--bytes 1024] [--ranks 4,8] [--rounds 20]
                                [--agg-window-us US] [--dir DIR]

Starts `pdcx server start -n 2 --root DIR/pdcx` ($PDCX_BIN or `pdcx` on PATH) and prints:

- foreign small writes: `--writes` writes of `--bytes` each, every one waited on its own
  (`write_async(..).wait()`), from a client whose node-local server (1) is not the object's
  owner (0), placement region-local: strong (one Register per write, under the holder's commit
  lock, with the owner's WAL fsync) against relaxed (`set_consistency("relaxed")`, one sync at
  the end, included in the time), with `local` and `memory` durability; plus the owner's
  Register requests counted by its stats;
- opens: `mpirun -n R python3 tests/mpi_open.py` — R ranks whose node-local server is 1 open
  one object owned by server 0 right after a barrier, `--rounds` times, with and without
  aggregation (`PDCX_AGGREGATE`): lookups the owner answered per round and the slowest rank's
  open time (median over rounds). `--agg-window-us` sets the servers' aggregation window
  (`PDCX_AGG_WINDOW_US`, default 1000); `--writes 0` or `--ranks ""` skip a part.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pdcx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from conftest import owner_of_name
from pdcxbin import pdcx_bin


def name_owned_by(rank: int, n: int, prefix: str) -> str:
    return next(f"{prefix}{i}" for i in range(10000) if owner_of_name(f"{prefix}{i}", n) == rank)


def client_on(root: Path, local: int) -> pdcx.Client:
    os.environ["OMPI_COMM_WORLD_LOCAL_RANK"] = str(local)
    try:
        return pdcx.connect(root)
    finally:
        del os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]


def bench_writes(root: Path, n: int, nbytes: int) -> None:
    c = client_on(root, 1)
    cont = c.create_container("w")
    elems = nbytes // 8
    data = np.arange(elems, dtype=np.float64)
    print(f"{n} foreign writes of {nbytes} B, each waited; data server 1, owner 0")
    for durability in ("local", "memory"):
        for mode in ("strong", "relaxed"):
            name = name_owned_by(0, 2, f"w/{mode}-{durability}-")
            obj = cont.create_object(name, (n * elems,), "float64")
            obj.set_consistency(mode)
            regs = c.stats()[0]["registers"]
            t0 = time.perf_counter()
            for k in range(n):
                obj.write_async(data, offset=(k * elems,), durability=durability).wait()
            t_writes = time.perf_counter() - t0
            obj.sync()
            dt = time.perf_counter() - t0
            regs = c.stats()[0]["registers"] - regs
            got = obj[(n - 1) * elems :]
            assert np.array_equal(got, data), "last write not visible after the sync"
            print(
                f"  {durability:6} {mode:7}: {n / dt:8,.0f} writes/s  ({t_writes / n * 1e6:7.1f} us per wait, "
                f"sync {1e3 * (dt - t_writes):6.1f} ms)  owner Register requests: {regs}"
            )


def bench_opens(root: Path, ranks: list[int], rounds: int) -> None:
    if shutil.which("mpirun") is None:
        print("opens: mpirun not found, skipped")
        return
    c = pdcx.connect(root)
    name = name_owned_by(0, 2, "o/")
    c.create_container("o").create_object(name, (4,), "int32")
    print(f"R ranks with node-local server 1 open one object owned by server 0 after a barrier ({rounds} rounds)")
    for r in ranks:
        for agg in (True, False):
            env = dict(os.environ, PDCX_ROOT=str(root), PDCX_AGGREGATE="1" if agg else "0")
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
            cmd += ["--mca", "mpi_yield_when_idle", "1", "-n", str(r)]
            cmd += [sys.executable, str(REPO / "tests/mpi_open.py"), name, str(rounds), "1"]
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
            if p.returncode != 0:
                print(p.stdout, p.stderr)
                raise SystemExit("mpi_open.py failed")
            out = json.loads(next(ln for ln in p.stdout.splitlines() if ln.startswith("{")))
            rows = out["rounds"]
            look = [x["lookups"] for x in rows]
            slow = statistics.median(x["slowest_open_ms"] for x in rows)
            print(
                f"  {r:2} ranks, aggregation {'on ' if agg else 'off'}: owner lookups per round "
                f"mean {statistics.fmean(look):5.2f} (min {min(look)}, max {max(look)}), "
                f"slowest open median {slow:6.2f} ms"
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writes", type=int, default=2000)
    ap.add_argument("--bytes", type=int, default=1024)
    ap.add_argument("--ranks", default="4,8")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--agg-window-us", type=int, default=None)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    work = Path(a.dir or tempfile.mkdtemp(prefix="pdcx-metascale-"))
    root = work / "pdcx"
    root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if a.agg_window_us is not None:
        env["PDCX_AGG_WINDOW_US"] = str(a.agg_window_us)
    subprocess.run([pdcx_bin(), "server", "start", "-n", "2", "--root", str(root)], check=True, env=env)
    try:
        if a.writes > 0:
            bench_writes(root, a.writes, a.bytes)
        ranks = [int(x) for x in a.ranks.split(",") if x.strip()]
        if ranks:
            bench_opens(root, ranks, a.rounds)
    finally:
        subprocess.run([pdcx_bin(), "server", "stop", "--root", str(root)], check=False)
        if a.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
