"""Shared by the MPI bench kernels: flush every server to its home tiers and fail loudly if
anything stayed pending (a timing that silently excluded unflushed data would be wrong)."""

from __future__ import annotations


def flush_to_home(client, comm) -> None:
    """Rank 0 flushes all servers (they run in parallel); every rank waits at a barrier."""
    if comm.Get_rank() == 0:
        reports = client.flush(wait=True)
        if any(r.get("pending_extents") for r in reports):
            raise SystemExit(f"flush left data pending: {reports}")
    comm.Barrier()
