"""MPI worker for test_netns.py: the client ranks of one emulated node. Run inside node NODE's
network namespace as `mpirun -n RANKS python3 netns_writer.py NODE NODES` with PDCX_ROOT and
PDCX_NODE set (scripts/netns.sh exec does the latter).

Every rank checks that its node-local server is its node's server, writes its slab of each
shared object (created beforehand by the test) and of its node's object (created here by local
rank 0) with region-local placement, waits, and prints `node N rank R: ok`."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pdcx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import names_on_every_server, owner_of_name

ROWS, COLS = 4, 64  # rows per rank slab, columns


def shared_names(nodes: int) -> list[str]:
    """One shared object owned by each node."""
    return names_on_every_server("ns/shared", nodes)


def node_name(node: int, nodes: int) -> str:
    """The per-node object of `node`, owned by the next node (so never by the writer's)."""
    names = (f"ns/node{node}-{i}" for i in range(1000))
    return next(n for n in names if owner_of_name(n, nodes) == (node + 1) % nodes)


def slab(obj_index: int, global_rank: int) -> np.ndarray:
    base = obj_index * 1000 + global_rank
    return base + np.arange(ROWS * COLS, dtype="<f8").reshape(ROWS, COLS) / 1000


def node_slab(node: int, local_rank: int) -> np.ndarray:
    return np.full((ROWS, COLS), node * 100 + local_rank, dtype="<i4")


def main() -> int:
    from mpi4py import MPI  # here, so that the test can import this module without MPI

    node, nodes = int(sys.argv[1]), int(sys.argv[2])
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    g = node * size + rank  # global rank across the nodes' separate mpiruns
    client = pdcx.connect()
    client.placement = "region-local"
    if client.local_server != node:
        print(f"node {node} rank {rank}: local_server {client.local_server} != {node}", flush=True)
        return 1
    mine = node_name(node, nodes)
    if rank == 0:
        client.open_container("ns").create_object(mine, (size * ROWS, COLS), "int32", tags={"kind": "netns"})
    comm.Barrier()
    ts = [
        client.open_object(n).write_async(slab(i, g), offset=(g * ROWS, 0)) for i, n in enumerate(shared_names(nodes))
    ]
    ts.append(client.open_object(mine).write_async(node_slab(node, rank), offset=(rank * ROWS, 0)))
    pdcx.wait_all(ts)
    if any(t.status() != "complete" for t in ts):
        print(f"node {node} rank {rank}: statuses {[t.status() for t in ts]}", flush=True)
        return 1
    comm.Barrier()
    got = client.open_object(mine)[...]
    want = np.concatenate([node_slab(node, r) for r in range(size)])
    if not np.array_equal(got, want):
        print(f"node {node} rank {rank}: node object mismatch", flush=True)
        return 1
    print(f"node {node} rank {rank}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
