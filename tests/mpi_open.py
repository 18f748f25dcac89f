"""MPI worker for test_metaagg.py and bench/meta_open.py: every rank opens the same object right
after a barrier, ROUNDS times, as an application's ranks do after rank 0 created it.

    mpirun -n N python3 mpi_open.py NAME ROUNDS [LOCAL]

With LOCAL every rank takes server LOCAL as its node-local server (all servers share this host,
so this stands for "all N ranks on one node whose server is LOCAL"). Rank 0 reads the owner's
stats before and after each round and prints one JSON line: per round, the lookups the owner
answered, how many of them other servers forwarded, the client requests those stood for, and
the slowest rank's open time.
"""

from __future__ import annotations

import json
import os
import sys
import time

if len(sys.argv) > 3:
    # Before the client reads it (the launcher's own value would spread ranks over servers).
    os.environ["OMPI_COMM_WORLD_LOCAL_RANK"] = sys.argv[3]

import pdcx
from mpi4py import MPI

KEYS = ("lookups", "lookups_forwarded", "lookups_forwarded_clients")


def main() -> int:
    name, rounds = sys.argv[1], int(sys.argv[2])
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    client = pdcx.connect()  # PDCX_ROOT
    owner = client.open_object(name).metadata["owner"]
    rows = []
    for _ in range(rounds):
        comm.Barrier()
        before = client._c.stats(owner) if rank == 0 else None
        comm.Barrier()
        t0 = time.perf_counter()
        obj = client.open_object(name)
        dt = time.perf_counter() - t0
        assert obj.name == name
        slowest = comm.reduce(dt, op=MPI.MAX, root=0)
        if rank == 0:
            b, a = json.loads(before), json.loads(client._c.stats(owner))
            row = {k: a[k] - b[k] for k in KEYS}
            row["slowest_open_ms"] = slowest * 1e3
            rows.append(row)
    if rank == 0:
        print(json.dumps({"ranks": comm.Get_size(), "aggregation": client.aggregation, "rounds": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
