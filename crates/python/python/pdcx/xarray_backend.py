"""xarray over pdcx: a container opens as a lazily indexed :class:`xarray.Dataset`, and
:func:`to_pdcx` writes one as netCDF would write a file.

::

    import xarray as xr
    ds = xr.open_dataset("run1", engine="pdcx", root="/scratch/pdcx")  # or client=, or PDCX_ROOT
    ds["energy"].isel(time=5).values      # reads only that slab, through obj[5, :, :]
    ds["energy"][::20, ::20].values       # steps go to pdcx as they are (obj[::20, ::20])
    ds = xr.open_dataset("run1", engine="pdcx", chunks={})  # dask-backed, one chunk a variable

    from pdcx.xarray_backend import to_pdcx
    to_pdcx(ds, client, "run2")                   # one object per variable, attrs as tags
    to_pdcx(ds, client, "run2", mode="w", encoding={"t": {"dtype": "f4"}})  # replace it
    to_pdcx(more, client, "run2", mode="a", append_dim="time")  # grow along "time"

Mapping (the conventions, both ways):

- every object of the container is a variable; its name is the object's name without the
  ``"<container>/"`` prefix (objects named otherwise keep their full name);
- the container's tags are the dataset's attributes, an object's tags the variable's, except
  the structure tags below and bookkeeping (``pdcx.*`` tags, ``pdcx import``'s ``hdf5_*``),
  which never reach ``.attrs``. Attribute values keep their numpy types and may be arrays
  (see :mod:`pdcx._xarray_codec`);
- tag ``dims``: the dimension names, comma-separated (``"time,x,y"``), one per dim of the
  object. ``""`` on a one-element object is a 0-d (scalar) variable. Without the tag the dims
  are ``dim_0, dim_1, ...``, shared between objects only where their lengths agree (else the
  object gets ``<variable>_dim_<i>``). Two objects whose ``dims`` tags give one name two
  lengths are an error (fix the tag or pass ``drop_variables``);
- tag ``coordinate`` (1, or "1"/"true"/"yes"): the variable is a coordinate (unless opened
  with ``decode_coords=False``). A 1-d variable named like its dim is a dimension coordinate
  anyway. :func:`to_pdcx` writes CF's ``coordinates`` attributes instead, as netCDF does;
- strings: unicode and variable-length string variables are padded UTF-8 ``bytes`` objects
  with one more trailing dim and the tag ``pdcx.xarray.strings``; they read back as xarray's
  variable-length ``str`` dtype, as netCDF4's strings do. Fixed-width bytes are netCDF
  character arrays (``S1`` along a ``string<N>`` dim);
- a composite object (``Container.create_composite``) is one variable per field, named
  ``<variable>.<field>``, over the record dims; reading a field moves only its bytes;
- CF decoding applies as for netCDF (``units: "days since ..."`` decodes times,
  ``scale_factor``/``_FillValue`` tags mask and scale) unless turned off
  (``decode_cf=False`` or the individual ``decode_*``/``mask_and_scale`` options).

Each variable's ``encoding["pdcx_object"]`` names its object. The arrays pickle as their
object's name and deployment root (another process joins that deployment), so dask's process
and distributed schedulers work on datasets opened here. Indexing is
``IndexingSupport.BASIC``: ints and positive-step slices go to ``Object.__getitem__`` as they
are; xarray turns array (outer/vectorized) indexers into their bounding slice and picks the
elements from that in memory.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import xarray as xr
from xarray.backends import BackendEntrypoint
from xarray.backends.common import ArrayWriter
from xarray.backends.store import StoreBackendEntrypoint

import pdcx
from pdcx import InvalidArgumentError

from ._xarray_store import COORDINATE_TAG, DIMS_TAG, PdcxBackendArray, PdcxDataStore

__all__ = ["COORDINATE_TAG", "DIMS_TAG", "PdcxBackendArray", "PdcxBackendEntrypoint", "PdcxDataStore", "to_pdcx"]


def _client_for(root: Any, client: Any) -> tuple[pdcx.Client, bool]:
    """The client to read with, and whether the dataset owns (closes) it."""
    if client is not None:
        if root is not None:
            raise InvalidArgumentError("pass either root= or client=, not both")
        if not isinstance(client, pdcx.Client):
            raise InvalidArgumentError(f"client= must be a pdcx.Client (pdcx.connect()), got {type(client).__name__}")
        return client, False
    if root is None and not os.environ.get("PDCX_ROOT"):
        # pdcx.connect() would start a new, empty embedded server: no container could be there.
        raise InvalidArgumentError(
            "which pdcx deployment? pass root='/path/to/root' or client=pdcx.connect(...), or set PDCX_ROOT"
        )
    return pdcx.connect(root), True


class PdcxBackendEntrypoint(BackendEntrypoint):
    """``xr.open_dataset(container, engine="pdcx", root=... | client=...)``."""

    description = "Open a pdcx container: objects as variables, tags as attributes, lazily indexed"

    def open_dataset(
        self,
        filename_or_obj: Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        root: str | os.PathLike | None = None,
        client: pdcx.Client | None = None,
        mask_and_scale: bool = True,
        decode_times: bool = True,
        concat_characters: bool = True,
        decode_coords: bool = True,
        use_cftime: bool | None = None,
        decode_timedelta: bool | None = None,
    ) -> xr.Dataset:
        if isinstance(filename_or_obj, pdcx.Container):
            if root is not None or (client is not None and client is not filename_or_obj._client):
                raise InvalidArgumentError("a pdcx.Container already has its client: pass no root=/client=")
            client, name = filename_or_obj._client, filename_or_obj.name
        elif isinstance(filename_or_obj, str):
            name = filename_or_obj
        else:
            raise InvalidArgumentError(
                f"engine='pdcx' opens a container by name (a str) or a pdcx.Container, got {type(filename_or_obj).__name__}"
            )
        client, own = _client_for(root, client)
        try:
            store = PdcxDataStore(client, name, drop_variables or (), own_client=own, mode="r")
        except BaseException:
            if own:
                client.close()
            raise
        try:
            ds = StoreBackendEntrypoint().open_dataset(
                store,
                mask_and_scale=mask_and_scale,
                decode_times=decode_times,
                concat_characters=concat_characters,
                decode_coords=decode_coords,
                use_cftime=use_cftime,
                decode_timedelta=decode_timedelta,
            )
        except BaseException:
            store.close()  # e.g. a CF attribute that does not decode: no client left behind
            raise
        # The `coordinate` tag marks coordinates as CF's `coordinates` attribute does: both
        # are left alone with decode_coords=False.
        coords = store.coordinate_names.intersection(ds.data_vars) if decode_coords else set()
        return ds.set_coords(sorted(coords)) if coords else ds

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        # A container name looks like any string; only an explicit engine="pdcx" (or a
        # pdcx.Container) selects this backend.
        return isinstance(filename_or_obj, pdcx.Container)


def _check_names(ds: xr.Dataset) -> None:
    """Variable names as netCDF and zarr require them (the same errors as ``to_netcdf``)."""
    for k in ds.variables:
        if isinstance(k, str):
            if not k:
                raise ValueError(f"Invalid name {k!r} for DataArray or Dataset key: string must be length 1 or greater")
        elif k is not None:
            raise TypeError(f"Invalid name {k!r} for DataArray or Dataset key: must be either a string or None")


def _unlimited_dims(ds: xr.Dataset, unlimited_dims: Any) -> set | None:
    """``unlimited_dims=`` (else ``ds.encoding["unlimited_dims"]``) as a set, checked as
    ``to_netcdf`` checks it: an unknown dim is an error in the argument, a warning in the
    encoding."""
    origin = "unlimited_dims-kwarg"
    if unlimited_dims is None:
        unlimited_dims, origin = ds.encoding.get("unlimited_dims"), "dataset.encoding"
    if unlimited_dims is None:
        return None
    if isinstance(unlimited_dims, str) or not isinstance(unlimited_dims, Iterable):
        unlimited_dims = [unlimited_dims]
    dims = set(unlimited_dims)
    unknown = dims - set(ds.dims)
    if unknown:
        msg = f"Unlimited dimension(s) {unknown!r} declared in {origin!r}, but not part of current dataset dimensions."
        if origin == "unlimited_dims-kwarg":
            raise ValueError(msg)
        import warnings

        warnings.warn(msg, UserWarning, stacklevel=3)
        dims -= unknown
    return dims


def to_pdcx(
    ds: xr.Dataset | xr.DataArray,
    client: pdcx.Client,
    container: str,
    mode: str = "w-",
    *,
    encoding: Mapping[Hashable, Mapping[str, Any]] | None = None,
    unlimited_dims: Iterable[Hashable] | None = None,
    append_dim: str | None = None,
) -> pdcx.Container:
    """Writes ``ds`` into a pdcx container, as ``to_netcdf`` writes a netCDF4 file: one object
    ``<container>/<variable>`` per variable (coordinates included), its attrs as tags plus the
    ``dims`` tag; the dataset's attrs become the container's tags. Variables are CF-encoded
    exactly as for netCDF4 first (times as numbers with ``units``/``calendar``, ``_FillValue``,
    ``scale_factor``/``add_offset``, bools as int8, ``coordinates`` attributes), honouring
    ``encoding`` (per variable: ``dtype``, ``_FillValue``, ``units``, ``calendar``, ...) and
    each variable's ``.encoding``, so ``xr.open_dataset(container, engine="pdcx")`` gives the
    dataset back with the dtypes netCDF4 gives.

    ``mode``: ``"w-"`` (default) the container must not exist yet; ``"w"`` replaces it (its
    objects are deleted once the new dataset has been encoded); ``"a"`` adds to it (or
    creates it): new variables are added, stored ones overwritten in place (dims keep their
    lengths), except along ``append_dim``, where the new values go after the stored ones.
    ``unlimited_dims`` are recorded (``open_dataset(...).encoding["unlimited_dims"]``); every
    pdcx dim can grow. Dask-backed variables are written chunk by chunk (``dask.array.store``
    into the object), others in one write each. Returns the :class:`pdcx.Container`."""
    if isinstance(ds, xr.DataArray):
        if ds.name is None:
            raise InvalidArgumentError("a DataArray needs a name to be written (da.rename('v'))")
        ds = ds.to_dataset()
    if not isinstance(ds, xr.Dataset):
        raise InvalidArgumentError(f"to_pdcx writes an xarray Dataset or named DataArray, got {type(ds).__name__}")
    if not isinstance(client, pdcx.Client):
        raise InvalidArgumentError(f"client must be a pdcx.Client (pdcx.connect()), got {type(client).__name__}")
    if mode not in ("w-", "w", "a"):
        raise InvalidArgumentError(
            f"mode must be 'w-' (new container), 'w' (replace it) or 'a' (add to it), got {mode!r}"
        )
    _check_names(ds)
    unlimited = _unlimited_dims(ds, unlimited_dims)
    if append_dim is not None and append_dim not in ds.dims:
        raise ValueError(
            f"append_dim={append_dim!r} is not a dimension of the dataset (dims: {sorted(map(str, ds.dims))})"
        )
    store = PdcxDataStore(client, container, mode=mode, append_dim=append_dim)
    writer = ArrayWriter()
    ds.dump_to_store(store, writer=writer, encoding=encoding or {}, unlimited_dims=unlimited)
    writer.sync()
    return client.open_container(container)
