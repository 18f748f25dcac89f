"""xarray over pdcx: a container opens as a lazily indexed :class:`xarray.Dataset`.

::

    import xarray as xr
    ds = xr.open_dataset("run1", engine="pdcx", root="/scratch/pdcx")  # or client=, or PDCX_ROOT
    ds["energy"].isel(time=5).values      # reads only that slab, through obj[5, :, :]
    ds["energy"][::20, ::20].values       # steps go to pdcx as they are (obj[::20, ::20])
    ds = xr.open_dataset("run1", engine="pdcx", chunks={})  # dask-backed, one chunk a variable

    from pdcx.xarray_backend import to_pdcx
    to_pdcx(ds, client, "run2")           # one object per variable, attrs as tags

Mapping (the conventions, both ways):

- every object of the container is a variable; its name is the object's name without the
  ``"<container>/"`` prefix (objects named otherwise keep their full name);
- the container's tags are the dataset's attributes, an object's tags the variable's (tags are
  str, int, float or bytes; they arrive as those Python values), except the two below;
- tag ``dims``: the dimension names, comma-separated (``"time,x,y"``), one per dim of the
  object. ``""`` on a one-element object is a 0-d (scalar) variable. Without the tag the dims
  are ``dim_0, dim_1, ...``, shared between objects only where their lengths agree (else the
  object gets ``<variable>_dim_<i>``). Two objects whose ``dims`` tags give one name two
  lengths are an error (fix the tag or pass ``drop_variables``);
- tag ``coordinate`` (1, or "1"/"true"/"yes"): the variable is a coordinate. A 1-d variable
  named like its dim is a dimension coordinate anyway (xarray loads those at open for its
  index; everything else is read only when selected or computed);
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
import threading
from collections.abc import Iterable
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends import BackendArray, BackendEntrypoint
from xarray.backends.common import AbstractDataStore
from xarray.backends.store import StoreBackendEntrypoint
from xarray.core import indexing

import pdcx
from pdcx import FIELDS_TAG, InvalidArgumentError, NotFoundError, _decode_tags, _pdcx_dtype

__all__ = ["COORDINATE_TAG", "DIMS_TAG", "PdcxBackendArray", "PdcxBackendEntrypoint", "PdcxDataStore", "to_pdcx"]

DIMS_TAG = "dims"
COORDINATE_TAG = "coordinate"
_STRUCTURE_TAGS = (DIMS_TAG, COORDINATE_TAG)


def _attrs_of(tags: dict) -> dict:
    """Tags as attributes. pdcx's metadata is JSON, where a non-finite float tag reads back as
    null: the only way a tag is None, so it is NaN again here (+-inf come back as NaN too;
    :func:`to_pdcx` refuses them)."""
    return {k: float("nan") if v is None else v for k, v in tags.items()}


def _is_true(value: Any) -> bool:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return bool(value)


class PdcxBackendArray(BackendArray):
    """One object (or one field of a composite object) as a lazily indexed array: a selection
    is one ``obj[...]`` read of the selected region, never of the whole object."""

    def __init__(self, obj: pdcx.Object, field: str | None = None, scalar: bool = False):
        self.obj, self.field, self.scalar = obj, field, scalar
        # obj.field() reads the record layout from the tags: resolve it once, not per read.
        self._src = obj if field is None else obj.field(field)
        if scalar:
            self.shape: tuple[int, ...] = ()
        else:
            self.shape = tuple(self._src.shape)
        self.dtype = obj.dtype if field is None else self._src._out  # the field's numpy dtype

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC, self._raw_getitem)

    def _raw_getitem(self, key: tuple) -> np.ndarray:
        if self.scalar:  # stored as one element (pdcx objects have at least one dim)
            return np.asarray(self._src[0:1]).reshape(())
        return np.asarray(self._src[key])

    # Pickling (dask's process and distributed schedulers, multiprocessing): the object by name
    # and its deployment's root; the other process joins that deployment, once per root.
    def __getstate__(self) -> dict:
        root = self.obj._client.root
        if root is None:
            raise TypeError(f"cannot pickle a view of {self.obj.name!r}: its client has no deployment root")
        return {"root": root, "name": self.obj.name, "field": self.field, "scalar": self.scalar, "shape": self.shape}

    def __setstate__(self, state: dict) -> None:
        obj = _shared_client(state["root"]).open_object(state["name"])
        self.__init__(obj, state["field"], state["scalar"])
        self.shape = state["shape"]  # as when opened, even if the object grew since


_CLIENTS: dict[str, pdcx.Client] = {}
_CLIENTS_LOCK = threading.Lock()


def _shared_client(root: str) -> pdcx.Client:
    """This process's client of the deployment at ``root``, for unpickled arrays (one per root,
    kept for the life of the process, as a worker reads many chunks)."""
    with _CLIENTS_LOCK:
        if root not in _CLIENTS:
            _CLIENTS[root] = pdcx.connect(root)
        return _CLIENTS[root]


def _dims_from_tag(value: Any, where: str, ndim: int, size: int) -> tuple[tuple[str, ...], bool]:
    """(dims, is_scalar) from a ``dims`` tag value, or a clear error."""
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f'{where}: tag {DIMS_TAG!r} must be a comma-separated string like "time,x,y", got {value!r}'
        )
    if value.strip() == "":
        if size != 1:
            raise InvalidArgumentError(f'{where}: tag {DIMS_TAG}="" marks a scalar, but the object has {size} elements')
        return (), True
    dims = tuple(d.strip() for d in value.split(","))
    if len(dims) != ndim or "" in dims or len(set(dims)) != len(dims):
        raise InvalidArgumentError(
            f"{where}: tag {DIMS_TAG}={value!r} must name each of its {ndim} dims once, comma-separated"
        )
    return dims, False


class PdcxDataStore(AbstractDataStore):
    """The objects of one container, as xarray variables (read-only)."""

    def __init__(self, client: pdcx.Client, container: str, drop_variables: Iterable[str] = (), own_client=False):
        self.client, self.container_name, self._own = client, container, own_client
        try:
            cont = client.open_container(container)
        except NotFoundError:
            names = sorted(c.name for c in client.containers())
            shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "") if names else "none"
            where = f"the pdcx deployment at {client.root}" if client.root else "this pdcx deployment"
            raise NotFoundError(f"no container named {container!r} in {where} (containers: {shown})") from None
        self._attrs = _attrs_of(_decode_tags(cont._info["tags"]))
        drop = {drop_variables} if isinstance(drop_variables, str) else set(drop_variables or ())
        self._variables = self._build(client.objects(container), drop)

    def _var_name(self, obj: pdcx.Object) -> str:
        prefix = self.container_name + "/"
        return obj.name.removeprefix(prefix)

    def _build(self, objects: list[pdcx.Object], drop: set[str]) -> dict[str, xr.Variable]:
        # (name, array, attrs, dims from the tag or None, where, is a coordinate) per variable.
        entries, seen = [], set()
        for obj in sorted(objects, key=lambda o: o.name):
            tags = _attrs_of(_decode_tags(obj._meta["tags"]))
            base = self._var_name(obj)
            layout = obj.record_dtype if obj._meta["dtype"] == "bytes" and FIELDS_TAG in tags else None
            pieces = [(base, None)] if layout is None else [(f"{base}.{f}", f) for f in layout.names]
            for name, field in pieces:
                if name in drop:
                    continue
                if name in seen:  # e.g. object "a.x" and field x of composite "a"
                    raise InvalidArgumentError(
                        f"two objects of container {self.container_name!r} give variable {name!r}; "
                        "rename one or open with drop_variables=[...]"
                    )
                where = f"object {obj.name!r}" + (f" field {field!r}" if field else "")
                arr = PdcxBackendArray(obj, field)
                dims, scalar = None, False
                if DIMS_TAG in tags:
                    dims, scalar = _dims_from_tag(tags[DIMS_TAG], where, len(arr.shape), int(np.prod(arr.shape)))
                if scalar:
                    arr = PdcxBackendArray(obj, field, scalar=True)
                attrs = {k: v for k, v in tags.items() if k not in _STRUCTURE_TAGS and k != FIELDS_TAG}
                entries.append((name, arr, attrs, dims, where, _is_true(tags.get(COORDINATE_TAG, 0))))
                seen.add(name)

        # Tagged dims first: they must agree, since the user named them.
        lengths: dict[str, tuple[int, str]] = {}
        for _, arr, _, dims, where, _ in entries:
            for d, n in zip(dims or (), arr.shape):
                if d in lengths and lengths[d][0] != n:
                    raise InvalidArgumentError(
                        f"dim {d!r} has length {n} in {where} but {lengths[d][0]} in {lengths[d][1]} "
                        f"(tag {DIMS_TAG!r}); fix the tag or open with drop_variables=[...]"
                    )
                lengths.setdefault(d, (n, where))
        variables = {}
        self.coordinate_names = set()
        for name, arr, attrs, dims, where, is_coord in entries:
            if dims is None:  # dim_i, shared only with objects whose dim has the same length
                dims = []
                for i, n in enumerate(arr.shape):
                    d = f"dim_{i}"
                    if d in lengths and lengths[d][0] != n:
                        d = f"{name}_dim_{i}"
                        while d in lengths and lengths[d][0] != n:
                            d += "_"
                    lengths.setdefault(d, (n, where))
                    dims.append(d)
            var = xr.Variable(tuple(dims), indexing.LazilyIndexedArray(arr), attrs)
            var.encoding = {"pdcx_object": arr.obj.name, "dtype": arr.dtype}
            if arr.field is not None:
                var.encoding["pdcx_field"] = arr.field
            variables[name] = var
            if is_coord:
                self.coordinate_names.add(name)
        return variables

    def get_variables(self) -> dict[str, xr.Variable]:
        return self._variables

    def get_attrs(self) -> dict[str, Any]:
        return self._attrs

    def get_dimensions(self) -> dict[str, int]:
        return {d: n for v in self._variables.values() for d, n in zip(v.dims, v.shape)}

    def get_encoding(self) -> dict[str, Any]:
        return {"pdcx_container": self.container_name}

    def close(self) -> None:
        if self._own:
            self._own = False
            self.client.close()

    def __getstate__(self) -> dict:
        # A pickled dataset carries its store (for close()); the copy owns no client.
        return {"container_name": self.container_name, "_own": False, "client": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)


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
            store = PdcxDataStore(client, name, drop_variables or (), own_client=own)
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
        coords = store.coordinate_names.intersection(ds.data_vars)
        return ds.set_coords(sorted(coords)) if coords else ds

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        # A container name looks like any string; only an explicit engine="pdcx" (or a
        # pdcx.Container) selects this backend.
        return isinstance(filename_or_obj, pdcx.Container)


def _tag_value(value: Any, where: str) -> str | int | float | bytes:
    """An attribute value as a pdcx tag value (str, int, float, bytes), or a clear error."""
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and np.isinf(value):
        # Tags travel as JSON, which has no infinities: it would read back as NaN.
        raise InvalidArgumentError(f"{where} is {value}; pdcx tags cannot hold infinities (store it as a string)")
    if isinstance(value, (str, int, float, bytes)):
        return value
    raise InvalidArgumentError(
        f"{where} is {value!r} ({type(value).__name__}); pdcx tags hold one str, int, float or bytes "
        "(drop it or turn it into a string first)"
    )


def _tags_of(attrs: dict, where: str) -> dict:
    out = {}
    for k, v in attrs.items():
        if k in _STRUCTURE_TAGS:
            raise InvalidArgumentError(f"{where}: attribute {k!r} is reserved for the pdcx mapping (rename it)")
        out[str(k)] = _tag_value(v, f"{where}: attribute {k!r}")
    return out


def to_pdcx(ds: xr.Dataset, client: pdcx.Client, container: str, mode: str = "w-") -> pdcx.Container:
    """Writes ``ds`` into a pdcx container: one object ``<container>/<variable>`` per variable
    (coordinates included), its attrs as tags plus the ``dims`` tag (and ``coordinate=1`` for
    coordinates); the dataset's attrs become the container's tags. Variables are CF-encoded as
    for netCDF first (datetimes become numbers with a ``units`` tag; bools int8), so
    :func:`xarray.open_dataset` with ``engine="pdcx"`` gives the dataset back.

    ``mode="w-"`` (default): the container must not exist yet. ``mode="a"``: it may exist (its
    tags are updated with the attrs); the variables must not. Dask-backed variables are written
    chunk by chunk (``dask.array.store`` into the object), others in one write each. Variables
    must be numeric or bytes (pdcx dtypes); attribute values one str, int, float or bytes.
    Returns the :class:`pdcx.Container`."""
    from xarray import conventions

    if isinstance(ds, xr.DataArray):
        if ds.name is None:
            raise InvalidArgumentError("a DataArray needs a name to be written (da.rename('v'))")
        ds = ds.to_dataset()
    if not isinstance(ds, xr.Dataset):
        raise InvalidArgumentError(f"to_pdcx writes an xarray Dataset or named DataArray, got {type(ds).__name__}")
    if not isinstance(client, pdcx.Client):
        raise InvalidArgumentError(f"client must be a pdcx.Client (pdcx.connect()), got {type(client).__name__}")
    if mode not in ("w-", "a"):
        raise InvalidArgumentError(f"mode must be 'w-' (new container) or 'a' (add to one), got {mode!r}")

    variables, attrs = conventions.cf_encoder(dict(ds.variables), dict(ds.attrs))
    cont_tags = _tags_of(attrs, f"dataset {container!r}")
    # Check everything before creating anything, so bad input leaves nothing half-written.
    specs = []
    for name, var in variables.items():
        name = str(name)
        where = f"variable {name!r}"
        try:
            dtype = _pdcx_dtype(var.dtype)
        except InvalidArgumentError:
            raise InvalidArgumentError(
                f"{where} has dtype {var.dtype}; pdcx objects hold int8..uint64, float32/64 or bytes (S1)"
            ) from None
        if any("," in str(d) or str(d).strip() != str(d) or not str(d) for d in var.dims):
            raise InvalidArgumentError(
                f"{where}: dim names must be non-empty, without commas or edge spaces: {var.dims}"
            )
        tags = _tags_of(var.attrs, where)
        tags[DIMS_TAG] = ",".join(map(str, var.dims))
        if name in ds.coords:
            tags[COORDINATE_TAG] = 1
        shape = var.shape if var.ndim else (1,)
        if var.ndim > 8:
            raise InvalidArgumentError(f"{where} has {var.ndim} dims; pdcx objects have at most 8")
        specs.append((name, var, dtype, shape, tags))

    if mode == "a":
        try:
            existing = PdcxDataStore(client, container).get_dimensions()
        except NotFoundError:
            existing = None
        if existing is not None:
            # The container must still open afterwards: a dim keeps its length.
            for name, var, *_ in specs:
                for d, n in zip(var.dims, var.shape):
                    if existing.get(d, n) != n:
                        raise InvalidArgumentError(
                            f"variable {name!r}: dim {d!r} has length {n} but {existing[d]} in container {container!r}"
                        )
            cont = client.open_container(container)
            if cont_tags:
                cont.tags.update(cont_tags)
        else:
            cont = client.create_container(container, tags=cont_tags)
    else:
        try:
            cont = client.create_container(container, tags=cont_tags)
        except pdcx.AlreadyExistsError:
            raise pdcx.AlreadyExistsError(
                f"container {container!r} already exists; to_pdcx(..., mode='a') adds variables to it"
            ) from None

    for name, var, dtype, shape, tags in specs:
        try:
            obj = cont.create_object(f"{container}/{name}", shape, dtype, tags=tags)
        except pdcx.AlreadyExistsError:
            raise pdcx.AlreadyExistsError(f"object {container}/{name} (variable {name!r}) already exists") from None
        if 0 in shape:
            continue
        data = var.data
        if hasattr(data, "dask") and hasattr(data, "chunks"):
            import dask.array as da

            # Each chunk is one write of its region (Object.__setitem__), in parallel.
            da.store(data if var.ndim else data.reshape(1), obj, lock=False)
        else:
            obj[...] = np.asarray(var.values).reshape(shape)
    return cont
