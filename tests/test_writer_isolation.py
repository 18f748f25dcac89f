"""A writer ruins only its own write: attacks on the same-node paths that skip the server.

A same-node client writes one-copy payloads straight into the server's segment file and reads
committed records straight from it (mapped or `pread`); the server gathers strided reads from
its own mappings. Each test here changes a segment file under a live deployment the way a
buggy program of the same user can (a stray `pwrite` over committed records, `truncate`) and
passes when every such read reports an error instead of returning the changed bytes, and the
server keeps serving. Each one-copy writer writes into a segment of its own, so the damage
stays within its own writes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pdcx
import pytest
from conftest import pid_alive


def segments(dep) -> list[Path]:
    return sorted((dep.root / "server-0000" / "log").glob("seg-*.log"))


def segment_with(dep, needle: bytes) -> tuple[Path, int]:
    """The segment file holding `needle` and its offset there."""
    for p in segments(dep):
        at = p.read_bytes().find(needle)
        if at >= 0:
            return p, at
    raise AssertionError("bytes not found in any segment")


def server_reads(dep, code: str) -> subprocess.CompletedProcess:
    """Runs `code` (with `c`, a client) in a process whose reads all go through the server
    (PDCX_DIRECT_READ=0: the server reads its log, strided reads from its own mappings)."""
    env = {**os.environ, "PDCX_DIRECT_READ": "0"}
    prog = f"import numpy as np, pdcx\nc = pdcx.connect({str(dep.root)!r})\n" + code
    return subprocess.run(
        [sys.executable, "-c", prog], check=False, env=env, capture_output=True, text=True, timeout=60
    )


def written(dep, name: str, rows: int) -> tuple[pdcx.Client, pdcx.Object, np.ndarray]:
    """A one-node deployment's client and object `name/a` of `rows` x 512 float32, written
    one-copy (>= 256 KiB to a server on this node) and committed at `local`."""
    c = dep.client()
    a = c.create_container(name).create_object(f"{name}/a", (rows, 512), "float32")
    want = np.arange(rows * 512, dtype="<f4").reshape(rows, 512)
    a[...] = want
    return c, a, want


def new_object_round_trips(c: pdcx.Client, name: str) -> None:
    """The server still serves: a new object written and read back."""
    obj = c.create_container(name).create_object(f"{name}/x", (1000,), "int64")
    vals = np.arange(1000, dtype="<i8") * 3
    obj[...] = vals
    assert np.array_equal(obj[...], vals)
    assert np.array_equal(obj[::7], vals[::7])


def test_a_stray_write_over_committed_records_is_an_error_never_garbage(deployment):
    dep = deployment(n=1)
    c, a, want = written(dep, "iso", 512)
    assert np.array_equal(a[...], want)
    assert np.array_equal(a[::3, ::5], want[::3, ::5])
    # Another writer's stray pwrite lands in the middle of a's committed payload: 16 bytes
    # at row 300, which neither the partial nor the strided reads below select.
    seg, at = segment_with(dep, want[300, 0:4].tobytes())
    with open(seg, "r+b") as f:
        f.seek(at + 4 * 8)
        f.write(b"\xff" * 16)
    # One-copy reads (whole, part, many small rows) and the client's mapped gathers.
    for read in (
        lambda: a[...],
        lambda: a[10:20, 100:200],
        lambda: a[0:64, 7],
        lambda: a[::3, ::5],
        lambda: a[::2, ::2],
    ):
        with pytest.raises(pdcx.PdcxError, match="checksum"):
            read()
    # Strided and short-row reads the server gathers from its own mappings, and a whole
    # read the server makes with `pread` (whole records are checked there too).
    for sel in ("[::3, ::5]", "[0:64, 7]", "[...]"):
        r = server_reads(dep, f"a = c.open_object('iso/a')\nprint(a{sel}.sum())\n")
        assert r.returncode != 0, r.stdout
        assert "checksum" in r.stderr, r.stderr
    assert all(pid_alive(p) for p in dep.pids())
    new_object_round_trips(c, "after")
    # The writer repairs what it scribbled: the record reads as committed again.
    with open(seg, "r+b") as f:
        f.seek(at + 4 * 8)
        f.write(want[300, 8:12].tobytes())
    assert np.array_equal(a[::3, ::5], want[::3, ::5])
    assert np.array_equal(a[...], want)


@pytest.mark.parametrize("cut", ["zero", "half"])
def test_a_segment_cut_under_mapped_reads_is_an_error_and_the_server_lives(deployment, cut):
    dep = deployment(n=1)
    c, a, want = written(dep, "cut", 1024)
    # The server maps the segment (strided read through it), the client maps it too.
    gather = "a = c.open_object('cut/a')\nprint(a[::3, ::5].astype('f8').sum())\n"
    r = server_reads(dep, gather)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout) == want[::3, ::5].astype("f8").sum()
    assert np.array_equal(a[::3, ::5], want[::3, ::5])
    seg, at = segment_with(dep, want[0, 0:4].tobytes())
    size = seg.stat().st_size
    os.truncate(seg, 0 if cut == "zero" else at + size // 4)
    # The server's gather faults inside its live mapping: an error, not SIGBUS.
    r = server_reads(dep, gather)
    assert r.returncode != 0, r.stdout
    assert "PdcxError" in r.stderr, r.stderr
    assert all(pid_alive(p) for p in dep.pids()), dep.server_log(0)
    # The client's own gather faults inside its mapping: it falls back to the server, which
    # reports the cut file; the client process is alive to see the error.
    with pytest.raises(pdcx.PdcxError):
        a[::3, ::5]
    with pytest.raises(pdcx.PdcxError):
        a[...]
    assert all(pid_alive(p) for p in dep.pids()), dep.server_log(0)
    new_object_round_trips(c, "still")


def test_each_one_copy_writer_has_a_segment_of_its_own(deployment):
    """A one-copy writer's file holds only its own records, so the most a buggy writer can
    do (write over every byte of the file it was given) ruins only its own writes."""
    dep = deployment(n=1)
    _c, a, want = written(dep, "mine", 512)
    other = dep.client()
    b = other.create_container("theirs").create_object("theirs/b", (512, 512), "float32")
    theirs = (np.arange(512 * 512, dtype="<f4") + 0.5).reshape(512, 512)
    b[...] = theirs
    small = other.create_container("small").create_object("small/s", (16,), "int64")
    small[...] = np.arange(16, dtype="<i8") + 77
    mine, _ = segment_with(dep, want[100, 0:64].tobytes())
    seg_b, _ = segment_with(dep, theirs[100, 0:64].tobytes())
    seg_small, _ = segment_with(dep, (np.arange(16, dtype="<i8") + 77).tobytes())
    assert len({mine, seg_b, seg_small}) == 3, (mine, seg_b, seg_small)
    # Everything a stray writer holding `mine` can reach: the whole file, from offset 0.
    size = mine.stat().st_size
    with open(mine, "r+b") as f:
        f.write(b"\xa5" * size)
    with pytest.raises(pdcx.PdcxError, match="checksum"):
        a[...]
    r = server_reads(dep, "a = c.open_object('mine/a')\nprint(a[...].sum())\n")
    assert r.returncode != 0 and "checksum" in r.stderr, (r.stdout, r.stderr)
    # The other writer's data, read one-copy and through the server, is untouched.
    assert np.array_equal(b[...], theirs)
    assert np.array_equal(small[...], np.arange(16, dtype="<i8") + 77)
    r = server_reads(dep, "b = c.open_object('theirs/b')\nprint(b[...].astype('f8').sum())\n")
    assert r.returncode == 0, r.stderr
    assert float(r.stdout) == theirs.astype("f8").sum()
    assert all(pid_alive(p) for p in dep.pids())
    new_object_round_trips(other, "after")
