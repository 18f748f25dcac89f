"""Indexes and regions: numpy basic indexing (ints, slices, '...') turned into the offset,
count and step of a region, and regions spelled as ``pdcx`` and tier rules take them."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ._native import InvalidArgumentError


def _region_spec(region: str | tuple | None) -> str | None:
    """A region as ``pdcx`` takes it (``"0:10,:,5"``) from a string or a tuple of slices and
    indices (steps belong in ``step=``)."""
    if region is None or isinstance(region, str):
        return region
    items = region if isinstance(region, tuple) else (region,)
    parts = []
    for it in items:
        if isinstance(it, slice):
            if it.step not in (None, 1):
                raise InvalidArgumentError("give steps with step=, not in the region's slices")
            parts.append(f"{'' if it.start is None else it.start}:{'' if it.stop is None else it.stop}")
        elif isinstance(it, int) and it >= 0:
            parts.append(str(it))
        else:
            raise InvalidArgumentError(f"a region item is a slice or a non-negative index, got {it!r}")
    return ",".join(parts)


def _expand_key(key: Any, ndim: int) -> tuple:
    """An index as one entry per dim: '...' expanded, missing trailing dims as ':'."""
    if not isinstance(key, tuple):
        key = (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (ndim - len(key) + 1) + key[i + 1 :]
    if len(key) > ndim:
        raise IndexError(f"too many indices: object has {ndim} dims, got {len(key)}")
    return key + (slice(None),) * (ndim - len(key))


def _normalize_index(key: Any, shape: tuple) -> tuple[list, list, list, list]:
    """numpy basic indexing -> (offset, count, step, dims to drop) over the object's shape."""
    offset, count, step, drop = [], [], [], []
    for d, (k, n) in enumerate(zip(_expand_key(key, len(shape)), shape)):
        if isinstance(k, (int, np.integer)):
            k = int(k)
            if k < -n or k >= n:
                raise IndexError(f"index {k} is out of bounds for dim {d} with size {n}")
            offset.append(k % n)
            count.append(1)
            step.append(1)
            drop.append(d)
        elif isinstance(k, slice):
            start, stop, st = k.indices(n)
            if st <= 0:
                raise IndexError("negative slice steps are not supported")
            c = len(range(start, stop, st))
            offset.append(start)
            count.append(0 if c == 0 else (c - 1) * st + 1)
            step.append(st)
        else:
            raise IndexError(f"unsupported index {k!r}: use ints, slices and '...'")
    return offset, count, step, drop


def _tier_box(key: Any, shape: tuple) -> str:
    """An index (ints, slices without steps, '...') as a tier rule's box ``lo:hi,...``.
    Negative bounds count from the current end; a slice without a stop stays open (the rule
    follows the dim as it grows); the server checks the bounds against the object."""
    parts = []
    for d, (k, n) in enumerate(zip(_expand_key(key, len(shape)), shape)):
        if isinstance(k, (int, np.integer)):
            k = int(k)
            if k < -n or k >= n:
                raise IndexError(f"index {k} is out of bounds for dim {d} with size {n}")
            parts.append(f"{k % n}:{k % n + 1}")
        elif isinstance(k, slice) and k.step in (None, 1):
            lo, hi = (None if b is None else operator.index(b) for b in (k.start, k.stop))
            lo = 0 if lo is None else max(lo + n, 0) if lo < 0 else lo
            hi = "" if hi is None else max(hi + n, 0) if hi < 0 else hi
            parts.append(f"{lo}:{hi}")
        else:
            raise IndexError(f"unsupported tier region index {k!r}: use ints, slices without a step and '...'")
    return ",".join(parts)


def _ints(what: str, values) -> list[int]:
    """A region's offset or shape as ints, with an error that says how to pass slices."""
    try:
        return [operator.index(v) for v in np.atleast_1d(np.asarray(values, dtype=object))]
    except TypeError:
        raise InvalidArgumentError(
            f"{what} must be integers, one per dimension (got {values!r}); for slices index the "
            "object instead: obj[10:20, ::2]"
        ) from None
