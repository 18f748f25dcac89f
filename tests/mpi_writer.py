"""MPI worker for test_mpi.py: every rank writes a disjoint part of shared objects and checks
every other rank's part. Run as `mpirun -n N python3 mpi_writer.py PREFIX` with PDCX_ROOT set.

Rank 0 creates the objects; after a barrier each rank writes its part with write_async and
one wait_all; after a second barrier each rank reads whole objects and verifies all parts.
Exits with status 1 (after printing the first mismatch) if anything is wrong."""

from __future__ import annotations

import sys

import numpy as np
import pdcx
from mpi4py import MPI

N1 = 1000  # elements per rank in the 1-D object
ROWS, COLS = 6, 7  # rows per rank and columns of the 2-D (row blocks) object
TILE = 5  # the 2-D column-block object: each rank owns a TILE-wide band of columns


def part_1d(rank: int) -> np.ndarray:
    return rank * 1_000_000 + np.arange(N1, dtype="<i8")


def part_rows(rank: int) -> np.ndarray:
    return rank + np.arange(ROWS * COLS, dtype="<f8").reshape(ROWS, COLS) / 100


def part_cols(rank: int, size: int) -> np.ndarray:
    return np.full((size * 2, TILE), rank + 1, dtype="<u2")


def main() -> int:
    prefix = sys.argv[1]
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    client = pdcx.connect()  # PDCX_ROOT
    names = [f"{prefix}/1d", f"{prefix}/rows", f"{prefix}/cols"]
    if rank == 0:
        cont = client.create_container(prefix, tags={"ranks": size})
        cont.create_object(names[0], (size * N1,), "int64", tags={"kind": "1d"})
        cont.create_object(names[1], (size * ROWS, COLS), "float64", fill=-1.0)
        cont.create_object(names[2], (size * 2, size * TILE), "uint16")
    comm.Barrier()
    o1, orows, ocols = (client.open_object(n) for n in names)
    ts = [
        o1.write_async(part_1d(rank), offset=(rank * N1,)),
        orows.write_async(part_rows(rank), offset=(rank * ROWS, 0)),
        ocols.write_async(part_cols(rank, size), offset=(0, rank * TILE)),
    ]
    pdcx.wait_all(ts)
    if any(t.status() != "complete" for t in ts):
        print(f"rank {rank}: transfer statuses {[t.status() for t in ts]}", flush=True)
        return 1
    comm.Barrier()
    whole1, wrows, wcols = o1[...], orows[...], ocols[...]
    bad = []
    for r in range(size):
        if not np.array_equal(whole1[r * N1 : (r + 1) * N1], part_1d(r)):
            bad.append(f"1d part of rank {r}")
        if not np.array_equal(wrows[r * ROWS : (r + 1) * ROWS], part_rows(r)):
            bad.append(f"row block of rank {r}")
        if not np.array_equal(wcols[:, r * TILE : (r + 1) * TILE], part_cols(r, size)):
            bad.append(f"column band of rank {r}")
    # Every rank also queries: the metadata of rank 0's objects is visible everywhere.
    if client.query(kind="1d") != [names[0]]:
        bad.append(f"query saw {client.query(kind='1d')}")
    comm.Barrier()
    if bad:
        print(f"rank {rank}: MISMATCH in {', '.join(bad)}", flush=True)
        return 1
    print(f"rank {rank}/{size}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
