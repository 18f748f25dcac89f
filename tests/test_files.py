"""Files as byte-stream objects through Python: `Client.open` returns real `io`
file objects that astropy, numpy, shutil and tarfile use unchanged; stat/listdir/remove and
`pdcx cp`/`pdcx ls pdcx://` behave like their file-system namesakes."""

from __future__ import annotations

import io
import os
import shutil
import tarfile

import numpy as np
import pdcx
import pytest
from conftest import run_pdcx


def test_python_file_objects_work_with_numpy_shutil_and_tarfile(deployment, tmp_path):
    dep = deployment(n=2)
    c = dep.client()

    # numpy.save/load through a buffered binary file.
    arr = np.arange(10_000, dtype=np.float64).reshape(100, 100)
    with c.open("data/arr.npy", "wb") as f:
        assert isinstance(f, io.BufferedWriter)
        np.save(f, arr)
    with c.open("pdcx://data/arr.npy", "rb") as f:
        assert isinstance(f, io.BufferedReader) and f.seekable()
        np.testing.assert_array_equal(np.load(f), arr)
    assert c.stat("data/arr.npy").st_size == os.path.getsize(_save_local(tmp_path, arr))

    # Text mode, append, seek/tell, readline.
    with c.open("data/notes.txt", "w") as f:
        f.write("first line\n")
    with c.open("data/notes.txt", "a") as f:
        f.write("second line\n")
    with c.open("data/notes.txt") as f:
        assert f.readlines() == ["first line\n", "second line\n"]
    with c.open("data/notes.txt", "rb") as f:
        f.seek(6)
        assert f.read(4) == b"line" and f.tell() == 10
        f.seek(-5, io.SEEK_END)
        assert f.read() == b"line\n"

    # shutil.copyfileobj both ways, with a local file.
    blob = os.urandom(3 << 20)
    (tmp_path / "blob.bin").write_bytes(blob)
    with open(tmp_path / "blob.bin", "rb") as src, c.open("data/blob.bin", "wb") as dst:
        shutil.copyfileobj(src, dst)
    with c.open("data/blob.bin", "rb") as src, open(tmp_path / "back.bin", "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert (tmp_path / "back.bin").read_bytes() == blob

    # tarfile writes into a pdcx file and reads it back.
    with c.open("data/bundle.tar", "wb") as f, tarfile.open(fileobj=f, mode="w") as tar:
        tar.add(tmp_path / "blob.bin", arcname="blob.bin")
    with c.open("data/bundle.tar", "rb") as f, tarfile.open(fileobj=f, mode="r") as tar:
        assert tar.getnames() == ["blob.bin"]
        assert tar.extractfile("blob.bin").read() == blob

    # Directory-like views, remove, errors.
    assert c.listdir("data") == ["arr.npy", "blob.bin", "bundle.tar", "notes.txt"]
    assert c.isdir("data") and not c.isdir("data/arr.npy") and c.exists("data/arr.npy")
    c.makedirs("empty/dir")
    assert c.isdir("empty/dir") and c.listdir("empty") == ["dir"] and c.listdir("empty/dir") == []
    c.rmdir("empty/dir")
    assert not c.exists("empty/dir")
    c.remove("data/notes.txt")
    assert not c.exists("data/notes.txt")
    with pytest.raises(pdcx.NotFoundError):
        c.open("data/notes.txt", "rb")
    with pytest.raises(pdcx.AlreadyExistsError):
        c.open("data/arr.npy", "xb")
    with pytest.raises(pdcx.InvalidArgumentError, match="leave its prefix"):
        c.open("data/../../etc/passwd", "rb")
    with pytest.raises(ValueError):
        c.open("data/arr.npy", "rq")
    with c.open("data/arr.npy", "rb") as f, pytest.raises(io.UnsupportedOperation):
        f.write(b"x")


def _save_local(tmp_path, arr):
    p = tmp_path / "local.npy"
    np.save(p, arr)
    return p


def test_writes_are_aggregated_until_close_and_reads_prefetched(deployment):
    dep = deployment(n=1)
    c = dep.client()
    other = dep.client()
    w = c.open("agg/a.bin", "wb", buffering=0)
    for _ in range(100):
        w.write(b"x" * 2880)
    # Not committed yet: another client sees an empty file.
    assert other.stat("agg/a.bin").st_size == 0
    w.close()
    assert other.stat("agg/a.bin").st_size == 288_000
    # Read in 2880-byte blocks: one fetch with read-ahead, one per block without.
    for prefetch, fetches in (("adaptive", 1), ("off", 100)):
        r = other.open("agg/a.bin", "rb", buffering=0, prefetch=prefetch)
        while r.read(2880):
            pass
        assert r._f.fetches() == fetches, prefetch
        r.close()
    # Several files flushed at one consistency point, text and binary alike.
    fs = [c.open(f"agg/many{i}", "wb") for i in range(4)] + [c.open("agg/many.txt", "w")]
    for i, f in enumerate(fs):
        f.write(b"x" * (100 + i) if i < 4 else "text")
    assert other.stat("agg/many0").st_size == 0
    c.flush_files(fs)
    assert [other.stat(f"agg/many{i}").st_size for i in range(4)] == [100, 101, 102, 103]
    assert other.stat("agg/many.txt").st_size == 4
    for f in fs:
        f.close()
    with pytest.raises(TypeError):
        c.flush_files([io.BytesIO()])
    # Without aggregation every write is visible when it returns.
    w = c.open("agg/b.bin", "wb", buffering=0, aggregate=False)
    w.write(b"y" * 100)
    assert other.stat("agg/b.bin").st_size == 100
    w.close()


def _mapped_segments() -> set[str]:
    """Log segment files this process has mapped."""
    with open("/proc/self/maps") as f:
        return {line.split()[-1] for line in f if "/log/seg-" in line}


def test_windows_of_files_just_closed_come_from_the_mapped_log(deployment, tmp_path):
    """On the owner's node a read-ahead window is the owner's log itself (mapped when the
    bytes are one extent, gathered when they are many or have holes), also for files closed
    a moment ago without fsync, and the bytes are those the server reads."""
    dep = deployment(n=1)
    c = dep.client()
    rng = np.random.default_rng(5)
    one = rng.integers(0, 256, 700_000, dtype=np.uint8).tobytes()
    with c.open("win/one.fits", "wb") as w:  # aggregated: one extent
        for k in range(0, len(one), 2880):
            w.write(one[k : k + 2880])
        w.seek(0)
        w.write(b"SIMPLE  =")  # a header rewritten over committed-to-be bytes: later bytes win
    one = b"SIMPLE  =" + one[9:]
    many = rng.integers(0, 256, 100 * 2880, dtype=np.uint8).tobytes()
    with c.open("win/many.bin", "wb", buffering=0, aggregate=False) as w:  # an extent per write
        for k in range(0, len(many), 2880):
            w.write(many[k : k + 2880])
    with c.open("win/holes.bin", "wb") as w:
        w.write(b"a" * 5000)
        w.seek(50_000)
        w.write(b"b" * 5000)
    holes = b"a" * 5000 + bytes(45_000) + b"b" * 5000
    reader = dep.client()
    shm_before = sum(s["shm_bytes"] for s in reader.stats())
    for name, want in (("win/one.fits", one), ("win/many.bin", many), ("win/holes.bin", holes)):
        with reader.open(name, "rb", buffering=0) as r:
            got = bytearray()
            while block := r.read(2880):
                got += block
            assert bytes(got) == want, name
            assert r._f.fetches() == 1, name
    assert sum(s["shm_bytes"] for s in reader.stats()) == shm_before, "a window came through shared memory"
    assert _mapped_segments(), "no log segment is mapped"
    # The same bytes as the server reads them.
    env = {**os.environ, "PDCX_DIRECT_READ": "0", "PDCX_ROOT": str(dep.root)}
    for name, want in (("win/one.fits", one), ("win/many.bin", many), ("win/holes.bin", holes)):
        local = tmp_path / name.replace("/", "_")
        run_pdcx("cp", "-q", f"pdcx://{name}", local, env=env)
        assert local.read_bytes() == want, name


def test_astropy_reads_and_writes_fits_through_client_open(deployment):
    fits = pytest.importorskip("astropy.io.fits")
    dep = deployment(n=1)
    c = dep.client()
    data = np.arange(64 * 48, dtype=np.float32).reshape(48, 64)
    hdu = fits.PrimaryHDU(data)
    hdu.header["OBJECT"] = "pdcx test"
    with c.open("sky/a.fits", "wb") as f:
        hdu.writeto(f)
    with c.open("sky/a.fits", "rb") as f, fits.open(f) as hdul:
        assert hdul[0].header["OBJECT"] == "pdcx test"
        np.testing.assert_array_equal(hdul[0].data, data)


def test_cli_cp_and_ls_move_files_and_trees(deployment, tmp_path):
    dep = deployment(n=2)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.fits").write_bytes(b"A" * 5000)
    (src / "sub" / "b.fits").write_bytes(os.urandom(1 << 20))
    env = dep.env()
    run_pdcx("cp", "-r", src, "pdcx://in", env=env)
    out = run_pdcx("ls", "pdcx://in/", env=env).stdout
    assert "a.fits" in out and "sub/" in out and "5000" in out
    run_pdcx("cp", "-q", "-r", "pdcx://in", f"{tmp_path}/back/", env=env)  # into back/in/
    assert (tmp_path / "back/in/a.fits").read_bytes() == (src / "a.fits").read_bytes()
    assert (tmp_path / "back/in/sub/b.fits").read_bytes() == (src / "sub" / "b.fits").read_bytes()
    run_pdcx("cp", "pdcx://in/a.fits", "pdcx://copy/a2.fits", env=env)
    c = dep.client()
    with c.open("copy/a2.fits", "rb") as f:
        assert f.read() == b"A" * 5000
    # Clear errors: a directory without -r, a missing source, two local paths, escaping names.
    for args, msg in (
        (("cp", "pdcx://in", tmp_path / "x"), "copy it with -r"),
        (("cp", "pdcx://nope.fits", tmp_path / "x"), "nope.fits"),
        (("cp", src / "a.fits", tmp_path / "y"), "use cp(1)"),
        (("cp", src / "a.fits", "pdcx://a/../../b"), "leave its prefix"),
        (("ls", "pdcx://missing/"), "no file or directory"),
    ):
        p = run_pdcx(*args, env=env, check=False)
        assert p.returncode != 0 and msg in p.stderr, (args, p.stderr)


def test_renames_resolve_across_servers_and_after_a_restart(deployment):
    dep = deployment(n=2)
    c = dep.client()
    for i in range(8):
        with c.open(f"mv/a{i}", "wb") as f:
            f.write(bytes([i]) * (1000 + i))
    # Ten names: some hash to the other server than the object's owner (a link there).
    for i in range(8):
        c.rename(f"mv/a{i}", f"mv/renamed/b{i}")
    assert c.listdir("mv") == ["renamed"]
    assert c.listdir("mv/renamed") == [f"b{i}" for i in range(8)]
    with pytest.raises(pdcx.NotFoundError):
        c.open("mv/a0", "rb")
    # Replacing an existing file, as os.replace does.
    c.rename("mv/renamed/b0", "mv/renamed/b1")
    assert not c.exists("mv/renamed/b0")
    dep.restart()
    c = dep.client()
    for i in range(1, 8):
        with c.open(f"mv/renamed/b{i}", "rb") as f:
            want = 0 if i == 1 else i
            assert f.read() == bytes([want]) * (1000 + want), i
    # The names are free again once the files are deleted.
    for i in range(1, 8):
        c.remove(f"mv/renamed/b{i}")
        with c.open(f"mv/renamed/b{i}", "xb") as f:
            f.write(b"new")


def test_acknowledged_renames_survive_kill9_of_every_server(deployment):
    dep = deployment(n=2)
    c = dep.client()
    for i in range(12):
        with c.open(f"k9/a{i}", "wb") as f:
            f.write(bytes([i]) * 5000)
            f.flush()
            f.raw.sync()  # durable on the servers (as fsync)
    for i in range(12):
        c.rename(f"k9/a{i}", f"k9/moved/b{i}")  # acknowledged: link and row are in the WAL
    c.close()
    dep.kill9()
    dep.start()
    c = dep.client()
    assert c.listdir("k9") == ["moved"]
    for i in range(12):
        with c.open(f"k9/moved/b{i}", "rb") as f:
            assert f.read() == bytes([i]) * 5000, i
        assert not c.exists(f"k9/a{i}")
