"""Transfers: one region of one object moving one way in the background
(:class:`Transfer`), and the batch calls that start or wait many with one message per server."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from . import _native
from ._native import InvalidArgumentError

if TYPE_CHECKING:  # annotations only: objects import this module to make transfers
    from ._object import Object


class Transfer:
    """One region of one object moving one way: ``start`` -> ``status`` -> ``wait``."""

    def __init__(self, obj: Object, native: _native.Transfer, array, shape: tuple):
        self.object = obj
        self._t = native
        self._array = array
        self._shape = shape
        self._result = None

    def _bytes(self) -> memoryview:
        """A write's data as the bytes the server stores (C order, the object's dtype)."""
        buf = np.ascontiguousarray(self._array, dtype=self.object.dtype)
        return memoryview(buf.reshape(-1).view(np.uint8))

    def start(self) -> None:
        """Takes the data now (writes) and sends it in the background; the array may be reused
        when this returns. A large write to a server on this node is written into its log from
        the array itself before this returns, any other is copied. May be restarted after wait."""
        if self._t.is_write:
            self._t.start_from(self._bytes())
        else:
            self._t.start()

    def status(self) -> str:
        """ "idle" (not started), "pending", "complete" (the server holds the data) or "failed"."""
        return self._t.status()[0]

    @property
    def error(self) -> str | None:
        _, kind, message = self._t.status()
        return None if kind is None else f"{kind}: {message}"

    def wait(self) -> np.ndarray | None:
        """The consistency point: after it, a write is visible to every later transfer."""
        self._t.wait()
        return self._collect()

    def _collect(self):
        if not self._t.is_write:
            buf = self._t.take_result()
            if buf is not None:
                self._result = np.frombuffer(buf, dtype=self.object.dtype).reshape(self._shape)
            return self._result
        return None

    def result(self) -> np.ndarray:
        """The data of a read transfer (waits if needed)."""
        if self._t.is_write:
            raise InvalidArgumentError("result() is for read transfers")
        if self._result is None:
            self.wait()
        return self._result

    def __repr__(self) -> str:
        kind = "write" if self._t.is_write else "read"
        return f"<pdcx.Transfer {kind} {self.object.name!r} shape={self._shape} {self.status()}>"


def _unique(transfers: Iterable[Transfer]) -> list[Transfer]:
    """The transfers in order, each once (the native layer borrows each one mutably)."""
    return list({id(t): t for t in transfers}.values())


def requests_sent() -> int:
    """Requests this process has sent to pdcx servers so far (all clients and threads): the
    difference across a call counts its round trips."""
    return _native.requests_sent()


def start_all(transfers: Iterable[Transfer]) -> None:
    """Starts many transfers with one message per destination server."""
    ts = _unique(transfers)
    writes = [t for t in ts if t._t.is_write]
    reads = [t for t in ts if not t._t.is_write]
    if writes:
        _native.start_all_from([t._t for t in writes], [t._bytes() for t in writes])
    if reads:
        _native.start_all([t._t for t in reads])


def wait_all(transfers: Iterable[Transfer]) -> None:
    """Waits for many transfers with one commit per server; raises the first failure."""
    ts = _unique(transfers)
    try:
        _native.wait_all([t._t for t in ts])
    finally:
        for t in ts:
            t._collect()
