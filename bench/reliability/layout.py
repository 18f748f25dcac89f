"""What the crash harness's workload writes: object layout, write ids and data patterns.

Shared by the workload ranks (workload.py), the harness that creates the objects and the
oracle that reads them back, so the three agree on names, shapes and patterns (and on the
journal's lines: see cut_torn_tail).
"""

from __future__ import annotations

import os

import numpy as np

# VPIC-IO's eight particle variables, each placed on a tier (and some compressed) so the
# flusher moves data to the shared directory ("pfs") and to S3 while the harness kills servers.
VARS = {
    "x": {"pdcx.tier": "pfs"},
    "y": {"pdcx.tier": "pfs:50%,s3"},
    "z": {"pdcx.tier": "s3"},
    "ux": {"pdcx.tier": "s3", "pdcx.codec": "zstd"},
    "uy": {"pdcx.tier": "pfs", "pdcx.codec": "lz4"},
    "uz": {},
    "id1": {"pdcx.tier": "pfs"},
    "id2": {"pdcx.tier": "s3"},
}
FILL = -1
DTYPE = "<i8"
ITEM = 8
POS_BITS = 20
POS_MASK = (1 << POS_BITS) - 1

# wid = session << 27 | rank << 20 | n: unique over a run, and wid << 20 stays below 2^63.
SESSION_BITS, RANK_BITS, N_BITS = 16, 7, 20


def wid(session: int, rank: int, n: int) -> int:
    if not (0 <= session < 1 << SESSION_BITS and 0 <= rank < 1 << RANK_BITS and 0 < n < 1 << N_BITS):
        raise ValueError(f"write id out of range: session {session} rank {rank} n {n}")
    return (session << (RANK_BITS + N_BITS)) | (rank << N_BITS) | n


def flat_index(offset, count, shape) -> np.ndarray:
    """Flat (C-order) element indices of the region, shaped like the region."""
    grids = np.ix_(*[np.arange(o, o + c, dtype=np.int64) for o, c in zip(offset, count)])
    idx = np.zeros(tuple(count), dtype=np.int64)
    stride = 1
    for d in range(len(shape) - 1, -1, -1):
        idx += grids[d] * stride
        stride *= int(shape[d])
    return idx


def pattern(w: int, offset, count, shape) -> np.ndarray:
    """The data of write `w` over the region: (w << 20) | (flat index & 0xFFFFF)."""
    return ((np.int64(w) << POS_BITS) | (flat_index(offset, count, shape) & POS_MASK)).astype(DTYPE)


def region_slices(offset, count) -> tuple:
    return tuple(slice(o, o + c) for o, c in zip(offset, count))


def base_objects(cfg: dict) -> list[dict]:
    """The objects the harness creates before the first session: name, shape, tags."""
    ranks, n = cfg["ranks"], cfg["particles"]
    out = [{"name": f"vpic/{v}", "shape": [ranks * n], "tags": {**tags, "var": v}} for v, tags in VARS.items()]
    out.append(
        {"name": "grid", "shape": [cfg["grid"], cfg["grid"]], "tags": {"pdcx.tier": "pfs:50%,s3", "kind": "grid"}}
    )
    out.append({"name": "hot", "shape": [cfg["hot"]], "tags": {"kind": "hot"}})
    out.append({"name": "big", "shape": [cfg["big"]], "tags": {"pdcx.tier": "s3", "kind": "big"}})
    out += [{"name": f"tags/r{r}", "shape": [4], "tags": {"rank": r}} for r in range(ranks)]
    return out


def prime_object(cfg: dict, i: int) -> dict:
    """The i-th priming object: the harness creates them until every server owns one, and the
    workload writes them only when a crash point is armed (workload.py, prime_round), each rank
    its own slot of one multipart-sized write (so an S3 upload of it has parts)."""
    return {
        "name": f"prime/{i}",
        "shape": [cfg["ranks"] * cfg["big_write"]],
        "tags": {"pdcx.tier": "s3", "kind": "prime"},
    }


def shared_objects(cfg: dict) -> list[str]:
    """Objects every rank writes (candidates for relaxed consistency)."""
    return [f"vpic/{v}" for v in VARS] + ["grid", "hot", "big"]


def cut_torn_tail(path: str) -> int:
    """Drops an incomplete last line (this rank's previous process was killed mid-append) and
    returns how many bytes it had. Appending after it would glue this process's first record
    to it, a malformed line inside the journal, which the oracle refuses (only a journal's last
    line may be torn). Dropping it loses nothing: the record was never complete on disk, so the
    operation it would have issued never started (the issue is journaled first) and the
    acknowledgement it would have recorded is not claimed."""
    try:
        f = open(path, "rb+")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return 0
    with f:
        size = f.seek(0, os.SEEK_END)
        end = size
        while end > 0:
            start = max(0, end - (1 << 16))
            f.seek(start)
            chunk = f.read(end - start)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                keep = start + nl + 1
                break
            end = start
        else:
            keep = 0
        if keep < size:
            f.truncate(keep)
            os.fsync(f.fileno())
        return size - keep
