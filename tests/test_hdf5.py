"""HDF5 import and export (pdcx.hdf5, copy mode) against real h5py, hdf5plugin's ZFP, h5dump
and, for the parallel import, a real 2-server deployment under mpirun.

CI (scripts/test.sh sets PDCX_REQUIRE_H5PY=1) fails here instead of skipping when h5py, the
ZFP filter or h5dump is missing: scripts/setup.sh --test installs them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pdcx
import pytest
from conftest import run_mpi

REQUIRE = os.environ.get("PDCX_REQUIRE_H5PY") == "1"


def _missing(why: str) -> None:
    if REQUIRE:
        pytest.fail(f"PDCX_REQUIRE_H5PY=1 (CI: scripts/setup.sh --test installs it) but {why}", pytrace=False)
    pytest.skip(why, allow_module_level=True)


try:
    import h5py
except ImportError:
    _missing("h5py is not installed")
try:
    import hdf5plugin
except ImportError:
    _missing("hdf5plugin is not installed (it provides the H5Z-ZFP filter to h5py)")
if not h5py.h5z.filter_avail(32013):
    _missing("the H5Z-ZFP filter (id 32013) is not available to h5py")
if shutil.which("h5dump") is None:
    _missing("h5dump is not installed (apt hdf5-tools)")

# After the checks above, so that a missing h5py is reported as such.
from pdcx import hdf5

ZFP_ID = 32013


def make_sample(path: Path) -> dict:
    """A file with several groups, ranks 1-4, int/uint/float dtypes (one big-endian), a compound
    and a complex dataset, attributes on datasets and groups, gzip, shuffle+gzip and ZFP chunks,
    a scalar, a null dataspace, a zero-length dim, bools, fixed strings, a fill value.
    Returns the datasets' values by path."""
    rng = np.random.default_rng(12)
    v = {
        "/fields/E": rng.random((40, 30, 20)).astype("f4"),  # shuffle+gzip
        "/fields/B": rng.random((50, 30)),  # ZFP (reversible: exact)
        "/fields/deep/T": rng.random((6, 7, 8, 9)).astype("<f8"),  # rank 4, ZFP lossy? no: gzip
        "/ids": np.arange(1000, dtype=">i8"),  # contiguous, big-endian
        "/counts/u8": rng.integers(0, 255, (3, 4, 5, 6), dtype="u1"),
        "/counts/u16": rng.integers(0, 2**16, (33,), dtype="<u2"),
        "/counts/u32": rng.integers(0, 2**32, (5, 7), dtype="<u4"),
        "/counts/u64": np.array([0, 2**64 - 1, 12345], dtype="<u8"),
        "/counts/i8": rng.integers(-128, 127, (10,), dtype="i1"),
        "/counts/i16": rng.integers(-(2**15), 2**15, (4, 4), dtype="<i2"),
        "/counts/i32": rng.integers(-(2**31), 2**31, (9, 2), dtype="<i4"),
        "/parts": np.array(
            [(1.0, 2, b"ab"), (3.0, 4, b"cd"), (5.5, -6, b"ef")], dtype=[("x", "<f4"), ("id", "<i8"), ("tag", "S2")]
        ),
        "/z": np.arange(4) + 1j * np.arange(4, 8),
        "/scalar": np.float64(3.25),
        "/flags": np.array([True, False, True]),
        "/names": np.array([b"alpha", b"be"]),
    }
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "sample run"
        f.attrs["step"] = np.int32(7)
        f.attrs["pdcx.tier"] = "not a tier hint"  # must not become pdcx's own tag
        g = f.create_group("fields")
        g.attrs["units"] = "m/s"
        g.attrs["origin"] = np.array([0.0, 1.5])
        e = g.create_dataset("E", data=v["/fields/E"], chunks=(8, 16, 20), compression="gzip", shuffle=True)
        e.attrs["scale"] = 2.5
        e.attrs["dims"] = ["t", "x", "y"]
        e.attrs["big"] = np.uint64(2**64 - 1)
        e.attrs["lens"] = np.arange(3, dtype="i2")
        e.attrs["bytes"] = np.bytes_(b"\xff\x00raw")
        g.create_dataset("B", data=v["/fields/B"], chunks=(16, 16), **hdf5plugin.Zfp(reversible=True))
        g.create_dataset("deep/T", data=v["/fields/deep/T"], chunks=(2, 7, 8, 3), compression="gzip")
        f["/fields/deep"].attrs["level"] = 2
        f.create_dataset("ids", data=v["/ids"])
        for k in ("u8", "u16", "u32", "u64", "i8", "i16", "i32"):
            f.create_dataset(f"counts/{k}", data=v[f"/counts/{k}"])
        f.create_dataset("parts", data=v["/parts"], chunks=(2,), compression="gzip")
        f.create_dataset("z", data=v["/z"])
        f.create_dataset("scalar", data=v["/scalar"])
        f.create_dataset("empty", data=h5py.Empty("f8"))
        f.create_dataset("zero", shape=(0, 4), dtype="f4")
        f.create_dataset("flags", data=v["/flags"])
        f.create_dataset("names", data=v["/names"])
        fill = f.create_dataset("fillme", shape=(100,), dtype="f8", chunks=(10,), fillvalue=-1.0)
        fill[:10] = 5
    v["/fillme"] = np.r_[np.full(10, 5.0), np.full(90, -1.0)]
    return v


def read_back(client, name: str, src: h5py.Dataset) -> np.ndarray:
    """An imported object's data in the dataset's own numpy form."""
    o = client.open_object(name)
    if o.record_dtype is not None:
        recs = o.records[...]
        return recs.view(src.dtype) if src.dtype.kind == "c" else recs
    if src.dtype.kind == "S" and src.dtype.itemsize > 1:
        raw = np.ascontiguousarray(o[...])
        return raw.view(src.dtype).reshape(raw.shape[:-1])
    a = o[...]
    return a.reshape(()) if src.shape == () else a


def assert_same_file(a: Path, b: Path) -> None:
    """Same datasets (paths, shapes, dtypes, values), same attributes everywhere."""
    with h5py.File(a) as fa, h5py.File(b) as fb:
        items_a, items_b = {}, {}
        fa.visititems(lambda n, o: items_a.setdefault(n, o))
        fb.visititems(lambda n, o: items_b.setdefault(n, o))
        assert sorted(items_a) == sorted(items_b)
        for n, x in items_a.items():
            y = items_b[n]
            assert type(x) is type(y), n
            assert sorted(x.attrs) == sorted(y.attrs), n
            for k in x.attrs:
                xa, ya = x.attrs[k], y.attrs[k]
                assert np.asarray(xa).dtype == np.asarray(ya).dtype, (n, k, xa, ya)
                np.testing.assert_array_equal(xa, ya, err_msg=f"{n}@{k}")
            if isinstance(x, h5py.Dataset):
                assert (x.shape, x.dtype) == (y.shape, y.dtype), n
                if x.shape is not None:
                    np.testing.assert_array_equal(x[()], y[()], err_msg=n)
        assert dict(fa.attrs).keys() == dict(fb.attrs).keys()
        for k in fa.attrs:
            np.testing.assert_array_equal(fa.attrs[k], fb.attrs[k])


@pytest.fixture
def client():
    c = pdcx.connect()  # embedded server, removed at close
    yield c
    c.close()


def test_import_values_tags_and_chunk_regions(tmp_path, client):
    src = tmp_path / "sample.h5"
    values = make_sample(src)
    r = hdf5.import_file(client, src)
    assert r.container == "sample" and not r.skipped
    assert len(r.objects) == len(values) + 2  # + empty, zero
    with h5py.File(src) as f:
        for path, expect in values.items():
            got = read_back(client, "sample" + path, f[path])
            np.testing.assert_array_equal(got, f[path][()], err_msg=path)  # equal to h5py's reading
            np.testing.assert_array_equal(got, expect, err_msg=path)
            want = np.dtype("u1") if path == "/flags" else f[path].dtype  # bools are stored as uint8
            assert got.dtype.newbyteorder("=") == want.newbyteorder("="), path
        # Each HDF5 chunk became one region (extent) of the object.
        assert len(client.open_object("sample/fields/E").extents()) == len(list(f["fields/E"].iter_chunks()))
    assert client.open_object("sample/empty").shape == (0,)
    assert client.open_object("sample/zero").shape == (0, 4)
    assert client.open_object("sample/fillme").fill_value == -1.0
    t = dict(client.open_object("sample/fields/E").tags)
    assert t["hdf5_path"] == "/fields/E" and t["hdf5_file"] == str(src)
    assert t["scale"] == 2.5 and t["dims"] == '["t", "x", "y"]' and t["lens"] == "[0, 1, 2]"
    assert t["big"] == str(2**64 - 1)  # beyond int64: kept exactly, as text
    assert t["bytes"] == b"\xff\x00raw"
    assert json.loads(t["hdf5_chunks"]) == [8, 16, 20] and t["hdf5_filters"] == "shuffle,gzip"
    assert client.open_object("sample/fields/B").tags["hdf5_filters"] == "zfp"
    assert client.open_object("sample/ids").tags["hdf5_dtype"] == ">i8"
    assert client.open_object("sample/scalar").tags["hdf5_shape"] == "scalar"
    assert client.open_object("sample/parts").field("x")[1:3].tolist() == [3.0, 5.5]
    ct = dict(client.open_container("sample").tags)
    assert ct["title"] == "sample run" and ct["step"] == 7 and ct["hdf5_import"] == "complete"
    assert ct["/fields@units"] == "m/s" and ct["/fields/deep@level"] == 2
    assert "pdcx.tier" not in ct and ct["hdf5_attr.pdcx.tier"] == "not a tier hint"
    assert client.query("hdf5_path=/fields/B") == ["sample/fields/B"]


def test_export_reads_in_h5py_and_h5dump(tmp_path, client):
    rng = np.random.default_rng(3)
    c = client.create_container("made")
    a = c.create_object("made/grid/temp", shape=(64, 48), dtype="float32", tags={"units": "K", "step": 3})
    a[...] = rng.random((64, 48)).astype("f4")
    b = c.create_object("made/n", shape=(1000,), dtype="int16", fill=-7)
    b[:500] = np.arange(500, dtype="i2")
    rec = c.create_composite("made/parts", 5, [("x", "<f8"), ("id", "<i4")])
    recs = np.array([(i * 0.5, i) for i in range(5)], dtype=[("x", "<f8"), ("id", "<i4")])
    rec.records[...] = recs
    out = tmp_path / "out.h5"
    r = hdf5.export_objects(client, ["made/grid/temp", "made/n", "made/parts"], out, memory=64 * 1024)
    assert r.datasets == {"made/grid/temp": "/made/grid/temp", "made/n": "/made/n", "made/parts": "/made/parts"}
    with h5py.File(out) as f:
        np.testing.assert_array_equal(f["made/grid/temp"][()], a[...])
        assert f["made/grid/temp"].attrs["units"] == "K" and f["made/grid/temp"].attrs["step"] == 3
        assert f["made/grid/temp"].chunks is not None
        np.testing.assert_array_equal(f["made/n"][()], np.r_[np.arange(500), np.full(500, -7)])
        assert f["made/n"].fillvalue == -7
        got = f["made/parts"][()]
        assert got.dtype.names == ("x", "id")
        np.testing.assert_array_equal(got["x"], recs["x"])
        np.testing.assert_array_equal(got["id"], recs["id"])
    # h5dump (the HDF5 tools, not h5py) reads the whole file and the same values.
    p = subprocess.run(["h5dump", str(out)], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    assert 'ATTRIBUTE "units"' in p.stdout and '"K"' in p.stdout
    assert "H5T_COMPOUND" in p.stdout and '"id"' in p.stdout
    raw = tmp_path / "temp.bin"
    p = subprocess.run(
        ["h5dump", "-d", "/made/grid/temp", "-b", "LE", "-o", str(raw), str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    np.testing.assert_array_equal(np.fromfile(raw, dtype="<f4").reshape(64, 48), a[...])


def test_round_trip_gives_the_same_file(tmp_path, client):
    src = tmp_path / "run.h5"
    make_sample(src)
    r = hdf5.import_file(client, src, "rt")
    out = tmp_path / "back.h5"
    e = hdf5.export_objects(client, r.objects, out, memory=4096)  # tiny slabs: many per dataset
    assert e.datasets["rt/fields/E"] == "/fields/E"  # paths come back from hdf5_path
    assert_same_file(src, out)
    with h5py.File(src) as a, h5py.File(out) as b:
        assert b["fields/E"].chunks == a["fields/E"].chunks
        assert b["fillme"].fillvalue == -1.0
    # h5dump agrees with h5py on the re-exported file (ZFP data came back as plain chunks).
    p = subprocess.run(
        ["h5dump", "-d", "/fields/deep/T", "-b", "LE", "-o", str(tmp_path / "t.bin"), str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    with h5py.File(src) as a:
        np.testing.assert_array_equal(
            np.fromfile(tmp_path / "t.bin", "<f8").reshape(6, 7, 8, 9), a["fields/deep/T"][()]
        )


def test_chunks_bigger_than_the_memory_bound_and_links(tmp_path, client):
    src = tmp_path / "huge.h5"
    data = np.random.default_rng(2).random((64, 512))  # chunks of 256 KiB
    with h5py.File(src, "w", libver="latest") as f:  # latest: attributes over 64 KiB
        f.create_dataset("x", data=data, chunks=(64, 512), compression="gzip")
        f.create_dataset("y", data=np.arange(10))
        f["y"].attrs["huge"] = np.arange(20000.0)  # too long for a tag: skipped with a warning
        f["y"].attrs["fine"] = 1
        f["soft"] = h5py.SoftLink("/y")
        f["ext"] = h5py.ExternalLink("elsewhere.h5", "/z")
    r = hdf5.import_file(client, src, memory=4 * 16 * 1024)  # 16 KiB per piece
    np.testing.assert_array_equal(client.open_object("huge/x")[...], data)
    assert len(client.open_object("huge/x").extents()) == 16  # one chunk, copied in 16 pieces
    assert r.objects == ["huge/x", "huge/y"]
    assert any("/ext: external link to elsewhere.h5:/z not followed" in w for w in r.warnings)
    assert any("/soft: soft link to /y" in w for w in r.warnings)
    assert any("/y: attribute 'huge' skipped: 20000 values" in w for w in r.warnings)
    assert "huge" not in client.open_object("huge/y").tags and client.open_object("huge/y").tags["fine"] == 1


def test_h5dump_reads_the_zfp_test_data(tmp_path):
    """The ZFP chunks the tests write (hdf5plugin) are standard H5Z-ZFP: Debian's plugin, loaded
    by h5dump, decodes them to the same values."""
    src = tmp_path / "z.h5"
    data = np.random.default_rng(5).random((20, 16))
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=data, chunks=(8, 8), **hdf5plugin.Zfp(reversible=True))
    out = tmp_path / "x.bin"
    # Debian's plugin directory, not one a Python package (netCDF4) pointed the variable at.
    debian_plugins = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    p = subprocess.run(
        ["h5dump", "-d", "/x", "-b", "LE", "-o", str(out), str(src)],
        env=debian_plugins,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if p.returncode != 0 or not out.exists() or out.stat().st_size == 0:
        msg = f"h5dump cannot decode ZFP (apt hdf5-filter-plugin-zfp-serial): {p.stderr.strip()[-300:]}"
        if REQUIRE:
            pytest.fail(msg)
        pytest.skip(msg)
    np.testing.assert_array_equal(np.fromfile(out, "<f8").reshape(20, 16), data)


def cli(*args, env=None, check=True):
    """`pdcx import|export ...` through the pdcx binary (which runs python3 -m pdcx.hdf5)."""
    from conftest import pdcx_bin

    p = subprocess.run([pdcx_bin(), *map(str, args)], capture_output=True, text=True, env=env, timeout=300, check=False)
    if check:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


def test_cli_help_teaches():
    for cmd, words in (
        ("import", ["examples:", "what maps to what", "--skip-unsupported", "mpirun"]),
        ("export", ["examples:", "hdf5_path", "-o"]),
    ):
        out = cli(cmd, "--help").stdout
        for w in words:
            assert w in out, (cmd, w)


def test_cli_import_export_real_servers(tmp_path, deployment):
    dep = deployment(n=2)
    src = tmp_path / "cli.h5"
    values = make_sample(src)
    p = cli("import", src, env=dep.env())
    assert "imported 19 dataset(s)" in p.stderr and "container 'cli'" in p.stderr
    q = cli("import", src, "--container", "cli2", "--quiet", env=dep.env())
    assert q.stderr == ""
    c = dep.client()
    with h5py.File(src) as f:
        np.testing.assert_array_equal(read_back(c, "cli2/fields/B", f["fields/B"]), values["/fields/B"])
    out = tmp_path / "cli-out.h5"
    cli("export", "--container", "cli", "-o", out, env=dep.env())
    assert_same_file(src, out)
    again = cli("export", "cli/ids", "-o", out, env=dep.env(), check=False)
    assert again.returncode == 1 and "exists" in again.stderr and "--overwrite" in again.stderr
    cli("export", "cli/ids", "-o", out, "--overwrite", "--compression", "gzip", env=dep.env())
    with h5py.File(out) as f:
        assert list(f) == ["ids"] and f["ids"].compression == "gzip"
        np.testing.assert_array_equal(f["ids"][()], values["/ids"])
    big = tmp_path / "big.h5"
    with h5py.File(big, "w") as f:  # over 64 MiB: progress is reported
        f.create_dataset("v", data=np.ones((72, 1024, 256), dtype="f4"), chunks=(8, 1024, 256))
    p = cli("import", big, "--container", "big1", env=dep.env())
    assert "import big.h5: " in p.stderr and " MiB " in p.stderr and "MB/s" in p.stderr
    p = cli("import", big, tmp_path / "nope.h5", env=dep.env(), check=False)
    assert p.returncode == 1 and "nope.h5: no such file" in p.stderr
    assert "big" not in [x.name for x in c.containers()]  # checked before the first file was imported
    nodep = {k: v for k, v in os.environ.items() if k != "PDCX_ROOT"}
    p = cli("import", src, env=nodep, check=False)
    assert p.returncode == 1 and "PDCX_ROOT" in p.stderr


def test_mpi_parallel_import_two_ranks(tmp_path, deployment):
    dep = deployment(n=2)
    src = tmp_path / "par.h5"
    rng = np.random.default_rng(8)
    big = rng.random((64, 128, 64)).astype("f4")  # 32 chunks: 16 per rank
    with h5py.File(src, "w") as f:
        f.create_dataset("a/big", data=big, chunks=(16, 32, 64), compression="gzip", shuffle=True)
        f.create_dataset("a/zfp", data=big[:, :, 0].astype("f8"), chunks=(16, 32), **hdf5plugin.Zfp(reversible=True))
        f.create_dataset("flat", data=np.arange(10000, dtype="u4"))
    # The two servers stand for two nodes: a rank's chunks stay with its own server rather than
    # going to a same-node owner (conftest.client_on says the same).
    nodes = dep.env() | {"PDCX_SMALL_WRITE_TO_OWNER": "0"}
    run_mpi(nodes, 2, "mpi_hdf5_import.py", src, "par", tmp_path / "report.json")
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["local_servers"] == [0, 1]
    assert all(b > 0 for b in report["bytes_per_rank"])  # both ranks copied
    assert sum(report["bytes_per_rank"]) == big.nbytes + big[:, :, 0].nbytes * 2 + 40000
    c = dep.client()
    np.testing.assert_array_equal(c.open_object("par/a/big")[...], big)
    np.testing.assert_array_equal(c.open_object("par/a/zfp")[...], big[:, :, 0].astype("f8"))
    np.testing.assert_array_equal(c.open_object("par/flat")[...], np.arange(10000, dtype="u4"))
    # Each rank wrote its chunks to its node-local server: the data sits on both.
    assert {e["server"] for e in c.open_object("par/a/big").extents()} == {0, 1}
    assert c.open_container("par").tags["hdf5_import"] == "complete"


def test_bad_inputs_leave_nothing(tmp_path, client):
    with pytest.raises(pdcx.NotFoundError, match="no such file"):
        hdf5.import_file(client, tmp_path / "missing.h5")
    txt = tmp_path / "notes.h5"
    txt.write_text("not hdf5 at all\n")
    with pytest.raises(pdcx.InvalidArgumentError, match="not an HDF5 file"):
        hdf5.import_file(client, txt)
    bad = tmp_path / "bad.h5"
    with h5py.File(bad, "w") as f:
        f.create_dataset("ok", data=np.arange(5.0))
        f.create_dataset("half", data=np.arange(5, dtype="f2"))
        f.create_dataset("g/text", data=["vlen", "strings"], dtype=h5py.string_dtype())
        f.create_dataset("tab\there", data=np.arange(2))  # pdcx names have no control characters
    with pytest.raises(pdcx.InvalidArgumentError) as e:
        hdf5.import_file(client, bad)
    msg = str(e.value)
    assert "/half: float16" in msg and "/g/text: variable-length strings" in msg and "--skip-unsupported" in msg
    assert "control characters" in msg
    names = [c.name for c in client.containers()]
    assert "missing" not in names and "notes" not in names and "bad" not in names  # nothing created
    r = hdf5.import_file(client, bad, skip_unsupported=True)
    assert r.objects == ["bad/ok"] and len(r.skipped) == 3
    with pytest.raises(pdcx.AlreadyExistsError, match="--into-existing"):
        hdf5.import_file(client, bad, skip_unsupported=True)
    assert [o.name for o in client.objects("bad")] == ["bad/ok"]  # the refused import added nothing
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("more", data=np.arange(3))
    r = hdf5.import_file(client, other, "bad", into_existing=True)
    assert sorted(o.name for o in client.objects("bad")) == ["bad/more", "bad/ok"]


def test_failure_mid_copy_deletes_what_it_created(tmp_path, client):
    """A chunk HDF5 cannot decode (corrupt gzip stream) fails the import after the objects
    exist: the error says so, and the objects and the container are deleted."""
    src = tmp_path / "corrupt.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("good", data=np.arange(100.0))
        d = f.create_dataset("bad", data=np.random.default_rng(1).random(4096), chunks=(1024,), compression="gzip")
        info = d.id.get_chunk_info(2)
    with open(src, "r+b") as fh:
        fh.seek(info.byte_offset)
        fh.write(b"\xde\xad\xbe\xef" * (info.size // 4))
    with pytest.raises(hdf5.HDF5ImportError, match=r"copying failed: OSError: dataset /bad, region \[2048:3072\]") as e:
        hdf5.import_file(client, src)
    assert "were deleted" in str(e.value)
    assert "corrupt" not in [c.name for c in client.containers()]
    with pytest.raises(pdcx.NotFoundError):
        client.open_object("corrupt/good")


def test_missing_filter_is_named_before_anything_is_created(tmp_path):
    """Without hdf5plugin h5py cannot decode ZFP: the import refuses the file up front, naming
    the dataset, the filter and the package that provides it (run in a process where importing
    hdf5plugin fails)."""
    src = tmp_path / "zfp.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("ok", data=np.arange(4.0))
        f.create_dataset("g/z", data=np.ones((8, 8)), chunks=(4, 4), **hdf5plugin.Zfp(reversible=True))
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "hdf5plugin.py").write_text("raise ImportError('hidden by the test')\n")
    code = (
        "import sys, pdcx\n"
        "from pdcx import hdf5\n"
        "c = pdcx.connect()\n"
        "try:\n"
        "    hdf5.import_file(c, sys.argv[1])\n"
        "except pdcx.InvalidArgumentError as e:\n"
        "    print('ERROR', e)\n"
        "print('containers', [x.name for x in c.containers()])\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(fake), os.environ.get("PYTHONPATH")])))
    env.pop("HDF5_PLUGIN_PATH", None)
    p = subprocess.run(
        [sys.executable, "-c", code, str(src)], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert p.returncode == 0, p.stderr
    assert "/g/z: its filter zfp (id 32013) is not available" in p.stdout and "pip install hdf5plugin" in p.stdout
    assert "containers []" in p.stdout


def test_cli_under_mpirun_says_things_once(tmp_path, deployment):
    """`mpirun -n 2 pdcx import` (what the pdcx command execs): both ranks copy, the summary
    and a shared error are printed once, not once per rank."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed (run scripts/setup.sh)")
    pytest.importorskip("mpi4py")
    dep = deployment(n=2)
    src = tmp_path / "m.h5"
    data = np.random.default_rng(4).random((32, 64, 64))
    with h5py.File(src, "w") as f:
        f.create_dataset("d", data=data, chunks=(4, 64, 64), compression="gzip", shuffle=True)

    def mpirun(*args):
        return subprocess.run(
            ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "2", sys.executable, "-m", "pdcx.hdf5", *args],
            env=dep.env() | {"PDCX_SMALL_WRITE_TO_OWNER": "0"},  # the two servers stand for two nodes
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    p = mpirun("import", str(src))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stderr.count("imported 1 dataset(s)") == 1 and "over 2 ranks" in p.stderr
    c = dep.client()
    np.testing.assert_array_equal(c.open_object("m/d")[...], data)
    assert {e["server"] for e in c.open_object("m/d").extents()} == {0, 1}
    p = mpirun("import", str(src))
    assert p.returncode != 0
    assert (p.stdout + p.stderr).count("container 'm' exists") == 1, p.stdout + p.stderr


def test_import_by_reference_reads_the_chunks_in_the_file(tmp_path, deployment, monkeypatch):
    """`pdcx import --by-reference`: each chunk's bytes stay in the file (shuffle+gzip, plain,
    contiguous, partly written); reads, strided reads and value queries equal h5py's, also after
    the servers restart; a ZFP dataset is copied instead (the servers do not decode ZFP); promote
    copies an object into pdcx, after which the file is not needed for it."""
    monkeypatch.setenv("PDCX_REF_PROMOTE_READS", "0")  # no automatic promotion here (below)
    dep = deployment(n=2)
    src = tmp_path / "ref.h5"
    rng = np.random.default_rng(3)
    a = rng.random((100, 70, 33)).astype("f4")
    with h5py.File(src, "w") as f:
        f.create_dataset("g/plain", data=a, chunks=(16, 32, 16))
        f.create_dataset("g/gz", data=a, chunks=(16, 32, 16), compression="gzip", shuffle=True)
        f.create_dataset("contig", data=np.arange(9000 * 13, dtype="<i8").reshape(9000, 13))
        f.create_dataset("zfp", data=a, chunks=(16, 32, 16), **hdf5plugin.Zfp(rate=16))
        f.create_dataset("partial", shape=(50, 50), chunks=(10, 10), dtype="f8", fillvalue=-1)[0:10, 0:10] = 3.0
    p = cli("import", src, "--by-reference", env=dep.env())
    assert "copied instead of referenced: /zfp" in p.stderr and "referenced 4 dataset(s)" in p.stderr

    def check(c):
        with h5py.File(src) as f:
            for n in ["g/plain", "g/gz", "contig", "zfp", "partial"]:
                o = c.open_object(f"ref/{n}")
                np.testing.assert_array_equal(o[...], f[n][()], err_msg=n)
                assert {e["tier"] for e in o.extents()} == ({"log"} if n == "zfp" else {"ref"}), n
            gz = c.open_object("ref/g/gz")
            np.testing.assert_array_equal(gz[5:40:3, ::7, 2], f["g/gz"][5:40:3, ::7, 2])
            h = gz.where(gz > 0.999)
            assert h.count == (a > 0.999).sum() and np.array_equal(h.values, a[a > 0.999])

    check(dep.client())
    dep.restart()
    c = dep.client()
    check(c)
    gz = c.open_object("ref/g/gz")
    assert gz.tags["hdf5_import"] == "reference"
    gz[3:5, 0:40, 1] = -7.0  # a write after the import stays newer than the promoted chunks
    expect = a.copy()
    expect[3:5, 0:40, 1] = -7.0
    assert hdf5.promote(c, "ref/g/gz") == a.nbytes
    assert {e["tier"] for e in gz.extents()} == {"log"}
    src.rename(tmp_path / "moved.h5")
    np.testing.assert_array_equal(gz[...], expect)  # promoted: in pdcx now
    dep.restart()
    c = dep.client()
    np.testing.assert_array_equal(c.open_object("ref/g/gz")[...], expect)
    with pytest.raises(pdcx.PdcxError, match="ref.h5"):
        c.open_object("ref/g/plain")[...]  # still a reference: the missing file is named


def test_bad_references_are_refused_before_anything_is_recorded(tmp_path, client):
    """The server checks every item (file, bounds, sizes) before recording any."""
    src = tmp_path / "r.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=np.arange(100.0), chunks=(10,))
    o = client.create_container("bad-ref").create_object("bad-ref/x", shape=(100,), dtype="float64")
    good = {
        "region": {"offset": [0], "count": [10]},
        "path": str(src),
        "offset": 0,
        "size": 80,
        "chunk": [10],
        "filters": [],
    }
    for change, why in [
        ({"path": "relative.h5"}, "absolute"),
        ({"path": str(tmp_path / "none.h5")}, "cannot read"),
        ({"offset": 10**9}, "past the end"),
        ({"size": 79}, "unfiltered chunk"),
        ({"region": {"offset": [95], "count": [10]}}, "outside|bounds|dims"),
        ({"chunk": [5]}, "does not hold"),
        ({"filters": [{"Shuffle": {"elem": 4}}]}, "shuffle of 4-byte"),
    ]:
        with pytest.raises(pdcx.PdcxError, match=why):
            client._c.import_refs(o.id, json.dumps([good, {**good, **change}]))
    assert o.extents() == []


def test_objects_read_often_by_reference_are_promoted_into_pdcx(tmp_path, deployment, monkeypatch):
    """With PDCX_REF_PROMOTE_READS=2 the owner copies an object into its log after a chunk was
    read twice (in the background); the file is not needed afterwards, values unchanged."""
    from conftest import wait_until

    monkeypatch.setenv("PDCX_REF_PROMOTE_READS", "2")
    dep = deployment(n=2)
    src = tmp_path / "hot.h5"
    a = np.random.default_rng(4).random((64, 40)).astype("f8")
    with h5py.File(src, "w") as f:
        f.create_dataset("v", data=a, chunks=(16, 40), compression="gzip")
        f.create_dataset("cold", data=a, chunks=(16, 40))
    c = dep.client()
    hdf5.import_file(c, src, by_reference=True)
    hot, cold = c.open_object("hot/v"), c.open_object("hot/cold")
    np.testing.assert_array_equal(cold[0:16], a[0:16])  # one read: stays a reference
    for _ in range(2):
        np.testing.assert_array_equal(hot[...], a)
    wait_until(lambda: {e["tier"] for e in hot.extents()} == {"log"}, 15, "the object read twice to be promoted")
    assert {e["tier"] for e in cold.extents()} == {"ref"}
    src.rename(tmp_path / "gone.h5")
    np.testing.assert_array_equal(hot[...], a)
