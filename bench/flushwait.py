"""Shared by the MPI bench kernels: flush every server to its home tiers and fail loudly if
anything stayed pending (a timing that silently excluded unflushed data would be wrong)."""

from __future__ import annotations

import time

# How often a waiting rank looks whether the flush is over.
POLL_S = 0.0005


def flush_to_home(client, comm) -> None:
    """Rank 0 flushes all servers (they run in parallel); every rank waits for it.

    The others wait sleeping, not in MPI's spinning barrier: on a machine with fewer cores
    than ranks plus servers (this VM: 2), spinning ranks take the cores the flushing servers
    need, which on a real node they would not (each rank has its own core). The wait adds at
    most POLL_S to the timing.
    """
    if comm.Get_rank() == 0:
        reports = client.flush(wait=True)
        if any(r.get("pending_extents") for r in reports):
            raise SystemExit(f"flush left data pending: {reports}")
    sleeping_barrier(comm)


def sleeping_barrier(comm) -> None:
    """MPI_Barrier without spinning: a rank that arrives early sleeps POLL_S between looks, so
    its core goes to the ranks and servers still working (see `flush_to_home`). Measured on
    the sharding bench's bursts: ranks yielding in MPI's own barrier took 11 % of the machine's
    CPU samples while the servers were flushing."""
    done = comm.Ibarrier()
    while not done.Test():
        time.sleep(POLL_S)
