"""Moving data: the pieces a dataset is copied in (chunks, or slabs of bounded size), their
bytes as the object's data, and the batches that write them with one message per server."""

from __future__ import annotations

import math
import sys
import time

import numpy as np

from .. import start_all, wait_all
from ._mapping import MiB, _Plan


def _blocks(shape: tuple, itemsize: int, budget: int, align: tuple | None = None):
    """Yields tuples of slices tiling `shape` in C order, each at most `budget` bytes when the
    alignment unit (default one element) allows: whole trailing dims, then as many multiples
    of `align` along the first dim that does not fit whole."""
    n = len(shape)
    if n == 0 or any(s == 0 for s in shape):
        return
    unit = [min(a, s) for a, s in zip(align or (1,) * n, shape)]
    block = list(unit)
    for d in range(n - 1, -1, -1):
        rest = itemsize * math.prod(block[:d]) * math.prod(block[d + 1 :])
        if rest * shape[d] <= budget:
            block[d] = shape[d]
            continue
        block[d] = max(unit[d], (budget // max(rest, 1)) // unit[d] * unit[d])
        break
    counts = [math.ceil(s / b) for s, b in zip(shape, block)]
    for idx in np.ndindex(*counts):
        yield tuple(slice(i * b, min((i + 1) * b, s)) for i, b, s in zip(idx, block, shape))


def _units(dset, plan: _Plan, budget: int):
    """Yields the pieces of a dataset to copy, in the same order on every rank: its chunks
    (each one region of the object), or slabs of a contiguous dataset; () for a scalar."""
    if plan.h5shape is None or 0 in plan.h5shape:
        return
    if plan.h5shape == ():
        yield ()
        return
    item = dset.dtype.itemsize
    if not plan.chunked:
        yield from _blocks(plan.h5shape, item, budget)
        return
    if math.prod(dset.chunks) * item <= budget:
        yield from dset.iter_chunks()
        return
    # A chunk bigger than the memory bound is copied in pieces (HDF5 decodes it once per
    # piece: slower, but the bound holds).
    for sel in dset.iter_chunks():
        sub = tuple(x.stop - x.start for x in sel)
        for b in _blocks(sub, item, budget):
            yield tuple(slice(x.start + y.start, x.start + y.stop) for x, y in zip(sel, b))


def _as_object_data(plan: _Plan, data: np.ndarray) -> np.ndarray:
    """What a piece of a dataset looks like as the object's data."""
    if plan.h5shape == ():
        data = np.asarray(data).reshape(1)
    if plan.kind == "array":
        return np.ascontiguousarray(data, dtype=plan.obj.dtype)
    # composite and strings: the raw bytes of each element along one more trailing dim
    if plan.kind == "composite" and data.dtype != plan.dtype:
        data = data.view(plan.dtype) if data.dtype.kind == "c" else data.astype(plan.dtype)
    data = np.ascontiguousarray(data)
    return data.view(np.uint8).reshape(data.shape + (data.dtype.itemsize,)).view("S1")


class _Progress:
    """Bytes copied and rate on stderr, at most every 2 s, for copies over 64 MiB."""

    def __init__(self, label: str, total: int, enabled: bool, scale: int = 1):
        self.label, self.total, self.enabled, self.scale = label, total, enabled and total >= 64 * MiB, scale
        self.done, self.t0, self.last = 0, time.monotonic(), 0.0

    def add(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and now - self.last >= 2.0:
            self.last = now
            done = min(self.done * self.scale, self.total)  # other ranks copy at the same pace
            rate = done / max(now - self.t0, 1e-9) / 1e6
            print(
                f"{self.label}: {done / MiB:,.0f} / {self.total / MiB:,.0f} MiB  {rate:,.0f} MB/s",
                file=sys.stderr,
                flush=True,
            )


class _Batcher:
    """Writes regions with one message per server per batch, and keeps one batch in flight
    while the next one is read (Transfer.start copies the data, so the arrays are free)."""

    def __init__(self, budget: int, durability: str, progress: _Progress):
        self.budget, self.durability, self.progress = max(budget, 1), durability, progress
        self.batch, self.batch_bytes, self.inflight, self.inflight_bytes = [], 0, [], 0

    def add(self, obj, data: np.ndarray, offset: list) -> None:
        self.batch.append(obj.transfer("w", data, offset, durability=self.durability))
        self.batch_bytes += data.nbytes
        if self.batch_bytes >= self.budget:
            self.flush(False)

    def flush(self, final: bool = True) -> None:
        self._wait()
        if self.batch:
            start_all(self.batch)
            self.inflight, self.inflight_bytes = self.batch, self.batch_bytes
            self.batch, self.batch_bytes = [], 0
        if final:
            self._wait()

    def _wait(self) -> None:
        if self.inflight:
            wait_all(self.inflight)
            self.progress.add(self.inflight_bytes)
            self.inflight, self.inflight_bytes = [], 0
