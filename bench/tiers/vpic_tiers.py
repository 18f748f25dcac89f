"""VPIC-IO write + BDCATS-IO read with a share of each object's regions on a fast tier and the
rest on a slow one (Fig. 11-12 of Proactive Data Containers; the vertical sharding of the
object-sharding paper). One MPI run does one phase (`write` or `read`) of one split; run.sh
drives the sweep and prints the ratios.

Write time = app writes (async, all 8 variables) + `flush` until every extent is on its home
tier: the time until the data sits where the placement put it. Read time = every rank reads
its particles back after the servers restarted (empty caches) and the page cache was dropped,
so reads come from the tiers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pdcx
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from flushwait import flush_to_home

VARS = ("x", "y", "z", "id1", "id2", "px", "py", "pz")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("phase", choices=["write", "read"])
    ap.add_argument("--root", required=True)
    ap.add_argument("--particles", type=int, default=1 << 20)
    ap.add_argument("--fast-share", type=int, required=True, help="percent of regions on the fast tier")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    n = a.particles
    client = pdcx.connect(a.root)
    share = a.fast_share
    hint = "slow" if share == 0 else "fast" if share == 100 else f"fast:{share}%,slow"
    rng = np.random.default_rng(rank)
    if a.phase == "write":
        if rank == 0:
            c = client.create_container("vpic")
            for v in VARS:
                # Each rank's part goes in 4 regions, so the quota has regions to split.
                c.create_object(f"vpic/{v}", size * n, "float32", tags={"pdcx.tier": hint})
        comm.Barrier()
        objs = [client.open_object(f"vpic/{v}") for v in VARS]
        data = rng.random(n, dtype="f4")
        comm.Barrier()
        t0 = time.perf_counter()
        q = n // 4
        ts = [o.write_async(data[k * q : (k + 1) * q], offset=(rank * n + k * q,)) for o in objs for k in range(4)]
        pdcx.wait_all(ts)
        comm.Barrier()
        t_app = time.perf_counter() - t0
        flush_to_home(client, comm)
        t_all = time.perf_counter() - t0
        if rank == 0:
            with open(a.out, "w") as f:
                json.dump({"app_s": t_app, "total_s": t_all, "bytes": 8 * 4 * n * size}, f)
    else:
        objs = [client.open_object(f"vpic/{v}") for v in VARS]
        # Load-balanced split different from the writers' (BDCATS reads in its own pattern).
        total = size * n
        lo, hi = (total * ((rank + 1) % size)) // size, (total * ((rank + 1) % size + 1)) // size
        comm.Barrier()
        t0 = time.perf_counter()
        ts = [o.read_async(offset=(lo,), shape=(hi - lo,)) for o in objs]
        got = [t.wait() for t in ts]
        comm.Barrier()
        t_read = time.perf_counter() - t0
        assert all(g.shape == (hi - lo,) for g in got)
        writer = lo // n
        expect = np.random.default_rng(writer).random(n, dtype="f4")
        assert np.array_equal(got[0][: min(hi - lo, n - lo % n)], expect[lo % n : lo % n + min(hi - lo, n - lo % n)])
        if rank == 0:
            with open(a.out, "w") as f:
                json.dump({"read_s": t_read, "bytes": 8 * 4 * total}, f)


if __name__ == "__main__":
    main()
