"""Files stored as pdcx byte-stream objects, as real Python file objects.

``Client.open(name, mode)`` returns what the built-in ``open`` returns for the same mode: an
``io.BufferedReader``/``BufferedWriter``/``BufferedRandom`` over :class:`RawFile` (an
``io.RawIOBase``), or an ``io.TextIOWrapper`` around one for text modes. So
``astropy.io.fits.open``, ``numpy.load``/``save``, ``shutil.copyfileobj`` and ``tarfile`` take
them as they take local files.

Semantics are close-to-open: writes are kept on the client until ``flush``/``close``
(``aggregate=False`` commits each write), and become visible to other readers then; a
reader sees what was committed when it opened. ``os.fsync``-like durability is
``f.raw.sync()`` (or closing the file, then ``Client.sync``).
"""

from __future__ import annotations

import io
from typing import IO, Any

from . import _native


class RawFile(io.RawIOBase):
    """Unbuffered access to one open pdcx file (what ``Client.open(..., buffering=0)`` returns)."""

    def __init__(self, native: _native.File):
        super().__init__()
        self._f = native
        self._readable, self._writable, self._append = native.mode
        self._defer_flush = False  # set while flush_all commits this file with others

    @property
    def name(self) -> str:
        return self._f.name

    @property
    def mode(self) -> str:
        if self._append:
            return "ab+" if self._readable else "ab"
        if self._readable and self._writable:
            return "rb+"
        return "wb" if self._writable else "rb"

    def readable(self) -> bool:
        self._checkClosed()
        return self._readable

    def writable(self) -> bool:
        self._checkClosed()
        return self._writable

    def seekable(self) -> bool:
        self._checkClosed()
        return True

    def readinto(self, b: Any) -> int:
        self._checkClosed()
        if not self._readable:
            raise io.UnsupportedOperation("not readable")
        m = memoryview(b).cast("B")
        return self._f.readinto(m)

    def readall(self) -> bytes:
        self._checkClosed()
        if not self._readable:
            raise io.UnsupportedOperation("not readable")
        left = max(self._f.size() - self._f.tell(), 0)
        buf = bytearray(left)
        n = self._f.readinto(memoryview(buf)) if left else 0
        return bytes(buf[:n])

    def write(self, b: Any) -> int:
        self._checkClosed()
        if not self._writable:
            raise io.UnsupportedOperation("not writable")
        return self._f.write(memoryview(b).cast("B"))

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._checkClosed()
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        self._checkClosed()
        return self._f.tell()

    def truncate(self, size: int | None = None) -> int:
        self._checkClosed()
        if not self._writable:
            raise io.UnsupportedOperation("not writable")
        size = self._f.tell() if size is None else size
        self._f.truncate(size)
        return size

    def flush(self) -> None:
        if not self.closed and not self._defer_flush:
            self._f.flush()

    def sync(self) -> None:
        """Flush, then make the writes durable on the servers (as ``os.fsync``)."""
        self._checkClosed()
        self._f.sync()

    def fileno(self) -> int:
        raise io.UnsupportedOperation("a pdcx file has no file descriptor")

    def close(self) -> None:
        if not self.closed:
            try:
                super().close()  # flushes first, while the native file is open
            finally:
                self._f.close()


def open_file(
    native_client: _native.Client,
    name: str,
    mode: str = "r",
    buffering: int = -1,
    encoding: str | None = None,
    errors: str | None = None,
    newline: str | None = None,
    aggregate: bool = True,
    prefetch: str = "adaptive",
) -> IO[Any]:
    """``Client.open``: the built-in ``open``'s modes and buffering rules, over pdcx."""
    if not isinstance(mode, str) or len(set(mode)) != len(mode) or set(mode) - set("rwaxbt+"):
        raise ValueError(f"invalid mode: {mode!r}")
    text = "b" not in mode
    if "t" in mode and not text:
        raise ValueError("can't have text and binary mode at once")
    if not text and (encoding is not None or errors is not None or newline is not None):
        raise ValueError("binary mode doesn't take an encoding, errors or newline argument")
    if buffering == 0 and text:
        raise ValueError("can't have unbuffered text I/O")
    raw_mode = mode.replace("t", "").replace("b", "") + "b"
    raw = RawFile(_native.file_open(native_client, name, raw_mode, aggregate, prefetch))
    try:
        if buffering == 0:
            return raw
        size = io.DEFAULT_BUFFER_SIZE if buffering in (-1, 1) else buffering
        if raw.readable() and raw.writable():
            buffered: io.BufferedIOBase = io.BufferedRandom(raw, size)
        elif raw.writable():
            buffered = io.BufferedWriter(raw, size)
        else:
            buffered = io.BufferedReader(raw, size)
        if not text:
            return buffered
        return io.TextIOWrapper(
            buffered, encoding=encoding or "utf-8", errors=errors, newline=newline, line_buffering=buffering == 1
        )
    except BaseException:
        raw.close()
        raise


def _raw_of(f: Any) -> RawFile:
    """The RawFile under a file object ``Client.open`` returned."""
    raw = f
    while not isinstance(raw, RawFile):
        if hasattr(raw, "buffer"):
            raw = raw.buffer
        elif hasattr(raw, "raw"):
            raw = raw.raw
        else:
            raise TypeError(f"{f!r} is not a file opened with pdcx's Client.open")
    return raw


def flush_all(files: list[IO[Any]]) -> None:
    """Flushes several open pdcx files at one consistency point: their writes are sent together
    and committed together (one commit per server for all of them, as PDC's
    ``transfer_all``/``wait_all``), instead of one write and commit per file."""
    raws = [_raw_of(f) for f in files]
    for f, raw in zip(files, raws):
        # The io buffer into the raw file, whose writes stay on the client until below.
        raw._defer_flush = True
        try:
            f.flush()
        finally:
            raw._defer_flush = False
    _native.file_flush_all([raw._f for raw in raws])
