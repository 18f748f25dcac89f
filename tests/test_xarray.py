"""xarray and dask over pdcx ("Where analysts already are"), with the real libraries:
a container opens as a lazily indexed Dataset whose selections read only the selected region
(counted by the servers' `read_bytes`), and dask wraps an Object without reading all of it.

CI sets PDCX_REQUIRE_XARRAY=1 (scripts/test.sh): a missing xarray or dask fails there instead
of skipping."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import pickle
import subprocess
import sys

import numpy as np
import pdcx
import pytest


def _need(module: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        msg = f"{module} is not installed (scripts/setup.sh --test installs it): {e}"
        if os.environ.get("PDCX_REQUIRE_XARRAY") == "1":
            pytest.fail(f"PDCX_REQUIRE_XARRAY=1 but {msg}", pytrace=False)
        pytest.skip(msg, allow_module_level=True)


xr = _need("xarray")
da = _need("dask.array")
pd = _need("pandas")
backend = _need("pdcx.xarray_backend")
ENGINE = backend.PdcxBackendEntrypoint  # engine="pdcx" itself: test_engine_name_is_registered

T, X, Y = 100, 60, 40


def read_bytes(client: pdcx.Client) -> int:
    """Bytes the deployment's servers have read for clients (every read path counts them)."""
    return sum(s["read_bytes"] for s in client.stats())


@pytest.fixture
def client():
    c = pdcx.connect()
    yield c
    c.close()


def make_run(client: pdcx.Client, name: str = "run1") -> dict:
    """A container as a simulation would leave it, written with the plain pdcx API."""
    rng = np.random.default_rng(12)
    arrays = {
        "v": rng.random((T, X, Y), dtype="f4"),
        "time": np.arange(T, dtype="f8") * 0.5,
        "lat": rng.random((X, Y)),
        "grid": np.arange(X * Y, dtype="i4").reshape(X, Y),
        "hist": np.arange(7, dtype="u2"),
        "step": np.array([42], dtype="i8"),
    }
    cont = client.create_container(name, tags={"app": "eqsim", "run": 3, "dt": 0.01, "key": b"\x00\x01"})
    tags = {
        "v": {"dims": "time,x,y", "units": "m/s", "scale": 2, "origin": b"sim"},
        "time": {"dims": "time", "units": "s"},
        "lat": {"dims": "x,y", "coordinate": 1, "units": "degrees_north"},
        "grid": {},  # no dims tag: dim_0, dim_1
        "hist": {},  # no dims tag, and dim_0 would clash in length with grid: its own dim
        "step": {"dims": ""},  # a scalar
    }
    for k, a in arrays.items():
        obj = cont.create_object(f"{name}/{k}", a.shape, a.dtype, tags=tags[k])
        obj[...] = a
    rec = np.zeros(X, dtype=[("x", "<f4"), ("id", "<i8")])
    rec["x"] = rng.random(X, dtype="f4")
    rec["id"] = np.arange(X) * 7
    comp = cont.create_composite(f"{name}/particles", X, rec.dtype, tags={"dims": "x", "kind": "tracer"})
    comp.records[:] = rec
    arrays["particles"] = rec
    return arrays


def test_open_dataset_variables_attributes_dims_and_coordinates(client):
    a = make_run(client)
    ds = xr.open_dataset("run1", engine=ENGINE, client=client)
    assert set(ds.variables) == {"v", "time", "lat", "grid", "hist", "step", "particles.x", "particles.id"}
    assert ds.attrs == {"app": "eqsim", "run": 3, "dt": 0.01, "key": b"\x00\x01"}
    assert ds["v"].dims == ("time", "x", "y") and ds["v"].dtype == np.float32
    assert ds["v"].attrs == {"units": "m/s", "scale": 2, "origin": b"sim"}  # dims tag is structure, not an attr
    assert ds["grid"].dims == ("dim_0", "dim_1")
    assert ds["hist"].dims == ("hist_dim_0",)  # dim_0 has length 60 (grid): not shared
    assert ds["step"].dims == () and ds["step"].values == 42
    assert ds["particles.x"].dims == ("x",) and ds["particles.x"].attrs == {"kind": "tracer"}
    assert dict(ds.sizes) == {"time": T, "x": X, "y": Y, "dim_0": X, "dim_1": Y, "hist_dim_0": 7}
    # "time" is a dimension coordinate by its name; "lat" by its coordinate tag.
    assert set(ds.coords) == {"time", "lat"} and set(ds.indexes) == {"time"}
    assert set(ds.data_vars) == {"v", "grid", "hist", "step", "particles.x", "particles.id"}
    assert ds["v"].encoding["pdcx_object"] == "run1/v"
    assert ds["particles.id"].encoding["pdcx_field"] == "id"
    np.testing.assert_array_equal(ds["time"].values, a["time"])
    np.testing.assert_array_equal(ds["particles.id"].values, a["particles"]["id"])
    np.testing.assert_array_equal(ds["grid"].values, a["grid"])
    ds.close()
    assert client.open_container("run1").name == "run1"  # closing left the caller's client usable
    # A pdcx.Container opens without naming the engine (it brings its client).
    ds = xr.open_dataset(client.open_container("run1"))
    np.testing.assert_array_equal(ds["v"][3, 4].values, a["v"][3, 4])


def test_selections_equal_numpy_and_read_only_what_they_select(client):
    a = make_run(client)
    whole = a["v"].nbytes
    before = read_bytes(client)
    ds = xr.open_dataset("run1", engine=ENGINE, client=client)
    # Opening reads the dimension coordinate ("time", for xarray's index) and nothing else.
    assert read_bytes(client) - before == a["time"].nbytes

    before = read_bytes(client)
    np.testing.assert_array_equal(ds["v"].isel(time=5).values, a["v"][5])
    assert read_bytes(client) - before == X * Y * 4  # one slab of the 100

    before = read_bytes(client)
    np.testing.assert_array_equal(ds["v"][::20, ::20].values, a["v"][::20, ::20])
    moved = read_bytes(client) - before
    # At most the bounding box of the strided selection (what a client-side step reads; a
    # server-side step reads less), and never the whole object.
    assert 0 < moved <= 81 * 41 * Y * 4 < whole

    before = read_bytes(client)
    np.testing.assert_array_equal(ds["v"].sel(time=2.5).isel(x=slice(10, 20), y=3).values, a["v"][5, 10:20, 3])
    assert read_bytes(client) - before == 10 * 4

    # Label and array selections, negative steps: xarray reads the bounding box, picks in memory.
    np.testing.assert_array_equal(ds["v"].isel(x=[1, 5, 7], y=slice(None, None, -3)).values, a["v"][:, [1, 5, 7], ::-3])
    np.testing.assert_array_equal(ds["lat"][-5:, :3].values, a["lat"][-5:, :3])
    before = read_bytes(client)
    np.testing.assert_array_equal(ds["particles.x"][10:20].values, a["particles"]["x"][10:20])
    assert read_bytes(client) - before == 10 * 4  # one field of 10 records, not the 12-byte records
    np.testing.assert_allclose(float(ds["v"].isel(time=slice(0, 10)).mean()), a["v"][:10].mean(), rtol=1e-5)


def test_dask_from_array_reads_one_chunk_per_chunk(client):
    a = make_run(client)
    obj = client.open_object("run1/v")
    before = read_bytes(client)
    x = da.from_array(obj, chunks=(10, 30, 40))
    assert x.shape == a["v"].shape and x.dtype == np.float32 and x.numblocks == (10, 2, 1)
    assert read_bytes(client) == before  # wrapping reads nothing (dask's meta is built from the dtype)

    np.testing.assert_array_equal(x.blocks[3, 1, 0].compute(), a["v"][30:40, 30:60])
    assert read_bytes(client) - before == 10 * 30 * 40 * 4  # that chunk, not the object

    before = read_bytes(client)
    np.testing.assert_allclose(x.sum().compute(), a["v"].sum(dtype="f8"), rtol=1e-5)
    assert read_bytes(client) - before == a["v"].nbytes  # every chunk once (threaded scheduler)
    np.testing.assert_array_equal(x[::7, 5, ::3].compute(scheduler="sync"), a["v"][::7, 5, ::3])


def test_open_with_dask_chunks(client):
    a = make_run(client)
    before = read_bytes(client)
    ds = xr.open_dataset("run1", engine=ENGINE, client=client, chunks={})
    assert isinstance(ds["v"].data, da.Array) and isinstance(ds["particles.x"].data, da.Array)
    assert read_bytes(client) - before == a["time"].nbytes  # the index only
    np.testing.assert_allclose(ds["v"].mean("time").values, a["v"].mean(axis=0), rtol=1e-5)

    ds = xr.open_dataset("run1", engine=ENGINE, client=client, chunks={"time": 10})
    assert ds["v"].chunks == ((10,) * 10, (X,), (Y,))
    before = read_bytes(client)
    np.testing.assert_array_equal(ds["v"].isel(time=slice(20, 30)).values, a["v"][20:30])
    assert read_bytes(client) - before == 10 * X * Y * 4  # one dask chunk
    np.testing.assert_allclose(ds["v"].max(dim=("x", "y")).values, a["v"].max(axis=(1, 2)))


def test_arrays_pickle_into_other_processes(client):
    """A dataset's arrays name their object and deployment root, so dask's process scheduler
    (like its distributed one) and multiprocessing read them from other processes."""
    a = make_run(client)
    ds = xr.open_dataset("run1", engine=ENGINE, client=client, chunks={"time": 25})
    before = read_bytes(client)
    total = ds["v"].sum().compute(scheduler="processes", num_workers=2)
    np.testing.assert_allclose(float(total), a["v"].sum(dtype="f8"), rtol=1e-5)
    assert read_bytes(client) - before == a["v"].nbytes  # each chunk read once, by a worker

    lazy = xr.open_dataset("run1", engine=ENGINE, client=client)["v"].isel(time=7, x=slice(0, 5))
    code = "import pickle, sys; v = pickle.load(sys.stdin.buffer); sys.stdout.buffer.write(v.values.tobytes())"
    before = read_bytes(client)
    p = subprocess.run(
        [sys.executable, "-c", code], check=False, input=pickle.dumps(lazy), capture_output=True, timeout=120
    )
    assert p.returncode == 0, p.stderr.decode()
    np.testing.assert_array_equal(np.frombuffer(p.stdout, dtype="f4").reshape(5, Y), a["v"][7, :5])
    assert read_bytes(client) - before == 5 * Y * 4


def test_to_pdcx_round_trip(client):
    rng = np.random.default_rng(3)
    ds = xr.Dataset(
        {
            "temp": (("time", "x", "y"), rng.random((12, 8, 5), dtype="f4"), {"units": "K", "valid": 1, "nan": np.nan}),
            "mask": (("x", "y"), rng.random((8, 5)) > 0.5),  # bool: CF-encoded as int8 and back
            "code": (("x",), np.arange(8, dtype="u8") << 40),
            "total": ((), np.float64(3.25), {"long_name": "sum"}),
        },
        coords={
            "time": pd.date_range("2026-01-01", periods=12, freq="6h"),
            "x": np.arange(8) * 10.0,
            "lon": (("x", "y"), rng.random((8, 5))),
        },
        attrs={"title": "round trip", "version": np.int32(2), "blob": b"\xff"},
    )
    cont = backend.to_pdcx(ds, client, "rt")
    assert cont.name == "rt" and sorted(o.name for o in cont.objects()) == [
        "rt/code",
        "rt/lon",
        "rt/mask",
        "rt/temp",
        "rt/time",
        "rt/total",
        "rt/x",
    ]
    assert client.open_object("rt/temp").tags["dims"] == "time,x,y"
    back = xr.open_dataset("rt", engine=ENGINE, client=client)
    xr.testing.assert_identical(back.load(), ds)
    assert back["mask"].dtype == bool and back["time"].dtype.kind == "M"
    raw = xr.open_dataset("rt", engine=ENGINE, client=client, decode_cf=False)  # the tags as stored
    assert raw["time"].dtype == np.int64 and raw["time"].attrs["units"].startswith("hours since 2026-01-01")
    assert client.open_object("rt/mask").dtype == np.int8  # bool is stored as int8 (xarray decodes it always)

    # Dask-backed variables are stored chunk by chunk; mode="a" adds to an existing container.
    chunked = xr.Dataset({"big": (("sample", "x"), da.from_array(rng.random((50, 8)), chunks=(7, 3)))})
    backend.to_pdcx(chunked, client, "rt", mode="a")
    back = xr.open_dataset("rt", engine=ENGINE, client=client)
    np.testing.assert_array_equal(back["big"].values, chunked["big"].values)
    assert back.attrs["title"] == "round trip"
    # ... but not with a dim whose length contradicts the container's: nothing is written.
    clash = xr.Dataset({"more": (("sample",), np.arange(49.0))})
    with pytest.raises(ValueError, match="Unable to update size for existing dimension'sample' \\(49 != 50\\)"):
        backend.to_pdcx(clash, client, "rt", mode="a")
    assert "rt/more" not in [o.name for o in cont.objects()]


def test_to_pdcx_bad_input_writes_nothing(client):
    ds = xr.Dataset({"v": ("x", np.arange(3.0))})
    backend.to_pdcx(ds, client, "exists")
    with pytest.raises(pdcx.AlreadyExistsError, match="mode='a'"):
        backend.to_pdcx(ds, client, "exists")
    # mode="a" writes a stored variable's values in place, as netCDF's append mode does.
    backend.to_pdcx(ds * 2, client, "exists", mode="a")
    np.testing.assert_array_equal(client.open_object("exists/v")[:], [0.0, 2.0, 4.0])
    bad = [
        (xr.Dataset({"v": ("x", np.arange(3.0), {"dims": "x"})}), "reserved"),
        (xr.Dataset({"v": ("x", np.arange(3.0), {"pdcx.tier": "ssd"})}), "reserved for pdcx's bookkeeping"),
        (xr.Dataset({"v": ("a,b", np.arange(3.0))}), "without commas"),
        (xr.Dataset({"v": ("x", np.arange(3.0), {"obj": {"a": 1}})}), "attribute 'obj'"),
        (xr.Dataset({"v": ("x", np.arange(3, dtype="c8"))}), "complex64"),
    ]
    for ds_bad, msg in bad:
        with pytest.raises(pdcx.InvalidArgumentError, match=msg):
            backend.to_pdcx(ds_bad, client, "never")
        assert [c.name for c in client.containers() if c.name == "never"] == []  # checked before creating
    with pytest.raises(pdcx.InvalidArgumentError, match="needs a name"):
        backend.to_pdcx(xr.DataArray(np.arange(3.0)), client, "never")
    with pytest.raises(pdcx.InvalidArgumentError, match="mode must be"):
        backend.to_pdcx(ds, client, "never", mode="r+")


def test_bad_inputs_give_clear_errors(client, tmp_path, monkeypatch):
    make_run(client)
    with pytest.raises(pdcx.NotFoundError, match=r"no container named 'nope'.*containers: run1"):
        xr.open_dataset("nope", engine=ENGINE, client=client)
    with pytest.raises(pdcx.UnavailableError, match="no pdcx deployment at"):
        xr.open_dataset("run1", engine=ENGINE, root=tmp_path / "nothing-here")
    monkeypatch.delenv("PDCX_ROOT", raising=False)
    with pytest.raises(pdcx.InvalidArgumentError, match="which pdcx deployment"):
        xr.open_dataset("run1", engine=ENGINE)
    with pytest.raises(pdcx.InvalidArgumentError, match="not both"):
        xr.open_dataset("run1", engine=ENGINE, client=client, root=tmp_path)
    with pytest.raises(pdcx.InvalidArgumentError, match="must be a pdcx.Client"):
        xr.open_dataset("run1", engine=ENGINE, client="localhost")
    with pytest.raises(pdcx.InvalidArgumentError, match="by name"):
        xr.open_dataset(42, engine=ENGINE, client=client)

    # Tags that contradict the objects: named errors, and drop_variables opens the rest.
    cont = client.open_container("run1")
    cont.create_object("run1/wrongdims", (4, 4), "f4", tags={"dims": "time"})
    with pytest.raises(pdcx.InvalidArgumentError, match=r"'run1/wrongdims'.*each of its 2 dims"):
        xr.open_dataset("run1", engine=ENGINE, client=client)
    ds = xr.open_dataset("run1", engine=ENGINE, client=client, drop_variables=["wrongdims"])
    assert "wrongdims" not in ds and "v" in ds
    cont.create_object("run1/short", (T - 1,), "f4", tags={"dims": "time"})
    with pytest.raises(pdcx.InvalidArgumentError, match=r"dim 'time' has length .*'run1/short'"):
        xr.open_dataset("run1", engine=ENGINE, client=client, drop_variables="wrongdims")
    cont.create_object("run1/notscalar", (3,), "f4", tags={"dims": ""})
    with pytest.raises(pdcx.InvalidArgumentError, match="marks a scalar"):
        xr.open_dataset("run1", engine=ENGINE, client=client, drop_variables=["wrongdims", "short"])
    cont.create_object("run1/particles.x", (X,), "f4")
    with pytest.raises(pdcx.InvalidArgumentError, match="two objects of container 'run1' give variable 'particles.x'"):
        xr.open_dataset("run1", engine=ENGINE, client=client, drop_variables=["wrongdims", "short", "notscalar"])


def test_engine_name_is_registered():
    """`engine="pdcx"` works through xarray's plugin lookup: the installed package declares the
    entry point (crates/python/pyproject.toml). Fails if the wheel was built without it."""
    eps = importlib.metadata.entry_points(group="xarray.backends")
    assert "pdcx" in eps.names, "pdcx's xarray.backends entry point is not installed (crates/python/pyproject.toml)"
    assert eps["pdcx"].value == "pdcx.xarray_backend:PdcxBackendEntrypoint"
    assert "pdcx" in xr.backends.list_engines()
    c = pdcx.connect()
    try:
        backend.to_pdcx(xr.Dataset({"v": ("x", np.arange(5.0))}), c, "named")
        ds = xr.open_dataset("named", engine="pdcx", client=c)
        np.testing.assert_array_equal(ds["v"].values, np.arange(5.0))
    finally:
        c.close()


def test_open_by_root_over_two_server_processes(deployment, monkeypatch):
    """The deployment a user points at: real server processes, objects spread over both, the
    dataset owning (and closing) its own client."""
    dep = deployment(n=2)
    c = dep.client()
    a = make_run(c, "eq")
    assert {o._meta["owner"] for o in c.objects("eq")} == {0, 1}
    before = read_bytes(c)
    ds = xr.open_dataset("eq", engine=ENGINE, root=dep.root)
    assert read_bytes(c) - before == a["time"].nbytes
    np.testing.assert_array_equal(ds["v"].isel(x=7, y=9).values, a["v"][:, 7, 9])  # one point's history
    assert read_bytes(c) - before == a["time"].nbytes + T * 4
    np.testing.assert_array_equal(ds["lat"].values, a["lat"])
    ds.close()
    monkeypatch.setenv("PDCX_ROOT", str(dep.root))  # the default deployment, as for pdcx.connect()
    ds = xr.open_dataset("eq", engine=ENGINE, chunks={"time": 25})
    np.testing.assert_allclose(ds["v"].sum().values, a["v"].sum(dtype="f8"), rtol=1e-5)
    ds.close()
