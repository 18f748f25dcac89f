"""xarray's own backend round-trip suite, ``xarray.tests.test_backends.CFEncodedBase`` (it ships
with xarray), run against pdcx: ``to_pdcx`` writes, ``open_dataset(engine="pdcx")`` reads, on a
real deployment (two servers, started once for the module). The netCDF4 and zarr backends are
tested by subclassing the same class; so is pdcx here.

Tests pdcx declines are listed in ``DECLINED`` with their reason and marked
``xfail(strict=True)``: each must still fail (a declined test that starts passing fails the
run, so the list stays true). docs/ARCHITECTURE.md lists the same tests.

CI sets PDCX_REQUIRE_XARRAY=1 (scripts/test.sh): a missing xarray fails there instead of
skipping."""

from __future__ import annotations

import contextlib
import hashlib
import os
import types
import uuid

import pdcx
import pytest
from conftest import Deployment
from test_xarray import _need  # a missing xarray fails under CI, skips elsewhere

xr = _need("xarray")
_plugin_path = os.environ.get("HDF5_PLUGIN_PATH")
suite = _need("xarray.tests.test_backends")
# Importing the suite imports netCDF4, which points HDF5_PLUGIN_PATH at its own plugins for the
# whole test session; other modules' subprocesses (h5dump with Debian's ZFP filter) need theirs.
if _plugin_path is None:
    os.environ.pop("HDF5_PLUGIN_PATH", None)
else:
    os.environ["HDF5_PLUGIN_PATH"] = _plugin_path
backend = _need("pdcx.xarray_backend")
# The suite's parametrized fixtures live in xarray's own conftest, which pytest does not load
# for this directory: bring in the two CFEncodedBase uses.
from xarray.tests.conftest import time_unit, use_dask  # noqa: F401

# test name -> why pdcx declines it. Each is xfail(strict=True): it must fail.
DECLINED = {
    "test_load_async": (
        "asynchronous loading (BackendArray.async_getitem): pdcx's Python client is synchronous; "
        "xarray's netCDF backends decline it too"
    ),
}

# test name -> why it is not collected here: xarray itself skips it on this machine for every
# backend (netCDF4's too), and a skip fails CI (PDCX_NO_SKIPS). test_not_run_still_skipped_upstream
# checks that xarray still skips each; when it no longer does, the test must come back.
NOT_RUN = {
    "test_roundtrip_example_1_netcdf": "needs xarray's `requires_netcdf` (a module named `netcdf`, which no package here provides)",
    "test_coordinate_variables_after_iris_roundtrip": "needs iris and xarray's `requires_netcdf` (see above)",
}


@pytest.fixture(scope="module")
def suite_client(tmp_path_factory):
    dep = Deployment(tmp_path_factory.mktemp("xarray-suite"), 2)
    try:
        dep.start()
        yield dep.client()
    finally:
        dep.cleanup()


def _container(path) -> str:
    """The container a test's temporary "file" path stands for (the suite makes paths)."""
    return "xr-" + hashlib.sha1(str(path).encode()).hexdigest()[:16]


class TestPdcxCFEncoded(suite.CFEncodedBase):
    engine = "pdcx"
    # pdcx holds the netCDF4 data model (uint8, unsigned ints, strings): the suite runs its
    # NETCDF4-only cases (h5netcdf's class says the same).
    file_format = "NETCDF4"

    @pytest.fixture(autouse=True)
    def _client(self, suite_client):
        self.client = suite_client

    @contextlib.contextmanager
    def create_store(self):
        yield backend.PdcxDataStore(self.client, f"xr-store-{uuid.uuid4().hex}", mode="w-")

    def save(self, dataset, path, **kwargs):
        return backend.to_pdcx(dataset, self.client, _container(path), **kwargs)

    @contextlib.contextmanager
    def open(self, path, **kwargs):
        with xr.open_dataset(_container(path), engine="pdcx", client=self.client, **kwargs) as ds:
            yield ds

    @contextlib.contextmanager
    def roundtrip(self, data, save_kwargs=None, open_kwargs=None, allow_cleanup_failure=False):
        name = f"xr-rt-{uuid.uuid4().hex}"
        backend.to_pdcx(data, self.client, name, **(save_kwargs or {}))
        with xr.open_dataset(name, engine="pdcx", client=self.client, **(open_kwargs or {})) as ds:
            yield ds


def _declined(name: str, reason: str):
    """A copy of the suite's test (its own marks kept) marked xfail: marking the suite's
    function itself would mark it for every backend's class."""
    f = getattr(suite.CFEncodedBase, name)
    copy = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    copy.__dict__.update({k: list(v) if k == "pytestmark" else v for k, v in f.__dict__.items()})
    copy.__qualname__ = f"TestPdcxCFEncoded.{name}"
    return pytest.mark.xfail(strict=True, reason=f"declined by pdcx: {reason}")(copy)


for _name, _reason in DECLINED.items():
    setattr(TestPdcxCFEncoded, _name, _declined(_name, _reason))
for _name in NOT_RUN:
    setattr(TestPdcxCFEncoded, _name, None)  # pytest collects only callables


def test_not_run_still_skipped_upstream():
    for name in NOT_RUN:
        marks = getattr(getattr(suite.CFEncodedBase, name), "pytestmark", [])
        assert any(m.name == "skipif" and m.args and m.args[0] for m in marks), (
            f"xarray no longer skips {name} here: remove it from NOT_RUN"
        )


def test_declined_tests_exist():
    """A declined name that is not a test of the suite (renamed upstream) would hide nothing."""
    for name in [*DECLINED, *NOT_RUN]:
        assert callable(getattr(suite.CFEncodedBase, name, None)), name


# -- pdcx's side of the mapping, beyond what the suite checks -----------------------------------
np = _need("numpy")
pd = _need("pandas")


def test_strings_are_padded_bytes_objects_read_as_vlen_str(suite_client):
    c = suite_client
    ds = xr.Dataset(
        {
            "name": ("x", np.array(["héllo ✓", "", "a\x00b"], dtype=object)),
            "fixed": ("x", np.array(["ab", "c", "def"])),  # numpy U3
            "one": ((), "scalar ✓"),
            "none": ("e", np.array([], dtype="U1")),
        }
    )
    backend.to_pdcx(ds, c, "strings")
    obj = c.open_object("strings/name")
    # UTF-8 of the longest element ("héllo ✓" is 10 bytes), one more dim, the kind in a tag.
    assert obj.dtype == np.dtype("S1") and obj.shape == (3, 10)
    assert obj.tags["pdcx.xarray.strings"] == "str" and obj.tags["dims"] == "x"
    for decode in (True, False):  # strings even undecoded, as netCDF4's NC_STRING
        back = xr.open_dataset("strings", engine="pdcx", client=c, decode_cf=decode).load()
        xr.testing.assert_identical(back, ds)
        assert back["name"].dtype == object and xr.coding.strings.check_vlen_dtype(back["name"].dtype) is str
        assert "pdcx.xarray.strings" not in back["name"].attrs
    # a selection reads only the selected elements' bytes
    lazy = xr.open_dataset("strings", engine="pdcx", client=c)
    assert lazy["name"][1:].values.tolist() == ["", "a\x00b"]


def test_attributes_keep_their_numpy_types(suite_client):
    c = suite_client
    attrs = {"f4": np.float32(0.1), "range": np.array([0, 10], dtype="i2"), "inf": np.inf, "flag": True, "s": "x"}
    ds = xr.Dataset({"v": ("x", np.arange(3.0), attrs)}, attrs={"names": ["a", "bc"], "b": np.bytes_(b"\xff")})
    backend.to_pdcx(ds, c, "typed")
    back = xr.open_dataset("typed", engine="pdcx", client=c)
    got = back["v"].attrs
    assert type(got["f4"]) is np.float32 and got["f4"] == np.float32(0.1)
    assert got["range"].dtype == np.dtype("i2") and got["range"].tolist() == [0, 10]
    assert got["inf"] == np.inf and got["flag"] is np.True_ and got["s"] == "x"
    assert back.attrs["names"].tolist() == ["a", "bc"] and back.attrs["b"] == b"\xff"
    assert "pdcx.xarray.attrs" not in got and "pdcx.xarray.attrs" not in back.attrs


def test_bookkeeping_tags_never_reach_attrs(suite_client):
    c = suite_client
    cont = c.create_container("imported", tags={"hdf5_file": "/data/a.h5", "hdf5_import": "complete", "title": "t"})
    obj = cont.create_object(
        "imported/v",
        (3,),
        "float64",
        tags={"dims": "x", "hdf5_path": "/v", "hdf5_chunks": "[3]", "pdcx.durability": "local", "hdf5_attr.dims": "d"},
    )
    obj[:] = np.arange(3.0)
    back = xr.open_dataset("imported", engine="pdcx", client=c)
    assert back.attrs == {"title": "t"}
    # hdf5_attr.X is the file's attribute X, renamed on import because X is a pdcx tag name
    assert back["v"].attrs == {"dims": "d"}


def test_mode_w_replaces_the_container_and_keeps_it_on_bad_input(suite_client):
    c = suite_client
    backend.to_pdcx(xr.Dataset({"a": ("x", [1, 2]), "b": ("y", [3.0])}), c, "replace")
    with pytest.raises(pdcx.InvalidArgumentError, match="complex128"):
        backend.to_pdcx(xr.Dataset({"z": ("x", np.ones(2, dtype=complex))}), c, "replace", mode="w")
    assert sorted(o.name for o in c.objects("replace")) == ["replace/a", "replace/b"]  # untouched
    new = xr.Dataset({"c": ("t", np.arange(4, dtype="i2"))}, attrs={"v": 2})
    backend.to_pdcx(new, c, "replace", mode="w", encoding={"c": {"dtype": "f4"}})
    assert sorted(o.name for o in c.objects("replace")) == ["replace/c"]
    assert [o.name for o in c.objects() if o.name in ("replace/a", "replace/b")] == []  # deleted
    back = xr.open_dataset("replace", engine="pdcx", client=c)
    assert back["c"].encoding["dtype"] == np.dtype("f4") and back.attrs == {"v": 2}


def test_append_dim_grows_variables_with_the_stored_encoding(suite_client):
    c = suite_client

    def part(start, n):
        t = pd.date_range("2026-01-01", periods=start + n, freq="h")[start:]
        return xr.Dataset(
            {
                "temp": (("time", "x"), np.arange(start * 2, (start + n) * 2, dtype="f4").reshape(n, 2)),
                "label": ("time", [f"step {i}" + "!" * i for i in range(start, start + n)]),
                "grid": ("x", [10.0, 20.0]),
            },
            coords={"time": t},
        )

    first, second = part(0, 3), part(3, 4)
    backend.to_pdcx(first, c, "grow", unlimited_dims=["time"])
    backend.to_pdcx(second, c, "grow", mode="a", append_dim="time")
    back = xr.open_dataset("grow", engine="pdcx", client=c)
    expected = xr.concat([first, second], dim="time", data_vars="minimal")
    xr.testing.assert_identical(back.load(), expected)
    # the appended times are encoded with the first write's units: hours since the first
    raw = xr.open_dataset("grow", engine="pdcx", client=c, decode_cf=False)
    assert raw["time"].attrs["units"] == back["time"].encoding["units"] == "hours since 2026-01-01"
    assert raw["time"].values.tolist() == list(range(7))
    assert back.encoding["unlimited_dims"] == {"time"}
    assert c.open_object("grow/temp").shape == (7, 2)
    with pytest.raises(ValueError, match="Unable to update size for existing dimension'x'"):
        backend.to_pdcx(part(7, 1).isel(x=[0]), c, "grow", mode="a", append_dim="time")
