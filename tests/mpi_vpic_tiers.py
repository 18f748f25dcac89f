"""VPIC-IO under mpirun against a tiered deployment (run by test_s3_tiers.py).

`write`: rank 0 creates 8 variables with per-variable placement/codec tags; every rank writes
its N particles of each (async, then wait_all). `check`: every rank reads everything back in a
different split and compares with the deterministic data. Prints "rank R: ok"."""

from __future__ import annotations

import sys

import numpy as np
import pdcx
from mpi4py import MPI

N = 65_536  # particles per rank: 256 KiB per variable per rank
VARS = {
    "x": {"pdcx.tier": "ssd:25%,s3"},
    "y": {"pdcx.tier": "ssd:25%,s3"},
    "z": {"pdcx.tier": "s3", "pdcx.codec": "zstd"},
    "id1": {"pdcx.tier": "pfs"},
    "id2": {"pdcx.tier": "mem"},
    "px": {"pdcx.tier": "s3"},
    "py": {},
    "pz": {"pdcx.tier": "pfs", "pdcx.codec": "lz4"},
}


def data(var: str, rank: int) -> np.ndarray:
    rng = np.random.default_rng([rank, sum(map(ord, var))])
    if var.startswith("id"):
        return np.arange(rank * N, (rank + 1) * N, dtype="f4")  # compressible, like ids
    return rng.random(N, dtype="f4")


def main() -> None:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    client = pdcx.connect()
    if sys.argv[1] == "write":
        if rank == 0:
            c = client.create_container("vpic")
            for v, tags in VARS.items():
                c.create_object(f"vpic/{v}", size * N, "float32", tags=tags)
        comm.Barrier()
        ts = []
        for v in VARS:
            o = client.open_object(f"vpic/{v}")
            d = data(v, rank)
            # Two regions per rank, so quotas have several regions to split.
            ts += [
                o.write_async(d[: N // 2], offset=(rank * N,)),
                o.write_async(d[N // 2 :], offset=(rank * N + N // 2,)),
            ]
        pdcx.wait_all(ts)
    else:
        peer = (rank + 1) % size
        for v in VARS:
            got = client.open_object(f"vpic/{v}")[peer * N : (peer + 1) * N]
            if not np.array_equal(got, data(v, peer)):
                raise SystemExit(f"rank {rank}: vpic/{v} of rank {peer} differs")
    comm.Barrier()
    print(f"rank {rank}: ok", flush=True)


if __name__ == "__main__":
    main()
