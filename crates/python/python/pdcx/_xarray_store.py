"""The xarray data store of one pdcx container, read and write: :class:`PdcxDataStore` (what
``open_dataset(engine="pdcx")``, ``to_pdcx`` and ``Dataset.dump_to_store`` use) and the lazily
indexed :class:`PdcxBackendArray`. The conventions are in :mod:`pdcx.xarray_backend`; the tag
and string encodings in :mod:`pdcx._xarray_codec`.

Writing goes through xarray's own CF encoder (``WritableCFDataStore``) and then the string
coders the netCDF4 backend applies, so what is stored is what netCDF4 would store: times as
numbers with ``units``/``calendar``, ``_FillValue``/``scale_factor`` as given, bools as int8
with ``dtype: "bool"``; netCDF4's ``NC_STRING`` becomes a padded bytes object."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any

import numpy as np
import xarray as xr
from xarray import conventions
from xarray.backends import BackendArray
from xarray.backends.common import ArrayWriter, WritableCFDataStore
from xarray.coding.strings import CharacterArrayCoder, EncodedStringCoder
from xarray.core import indexing

import pdcx
from pdcx import FIELDS_TAG, InvalidArgumentError, NotFoundError, _decode_tags, _pdcx_dtype

from ._xarray_codec import (
    ATTR_TYPES_TAG,
    STRINGS_TAG,
    UNLIMITED_TAG,
    attrs_to_tags,
    decode_strings,
    encode_strings,
    string_kind,
    tags_to_attrs,
)

DIMS_TAG = "dims"
COORDINATE_TAG = "coordinate"
_STRUCTURE_TAGS = (DIMS_TAG, COORDINATE_TAG)
# Encoding keys a variable may carry into a write: consumed by the CF coders, or meaningless
# for pdcx and dropped (as netCDF4 drops a zarr "chunks"), unless given in ``encoding=``,
# where anything but these is an error, as for netCDF4.
_VALID_ENCODINGS = {"dtype", "_FillValue", "endian"}
# What an existing variable's encoding contributes when new data is written into it (appended
# or overwritten): the new values are encoded as the stored ones were.
_KEPT_ON_APPEND = {
    "dtype",
    "units",
    "calendar",
    "_FillValue",
    "missing_value",
    "scale_factor",
    "add_offset",
    "_Unsigned",
}


def _is_true(value: Any) -> bool:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return bool(value)


class PdcxBackendArray(BackendArray):
    """One object (or one field of a composite object) as a lazily indexed array: a selection
    is one ``obj[...]`` read of the selected region, never of the whole object. A string
    variable (``strings`` = ``"str"``/``"bytes"``) reads the selected elements' padded bytes."""

    def __init__(self, obj: pdcx.Object, field: str | None = None, scalar: bool = False, strings: str | None = None):
        self.obj, self.field, self.scalar, self.strings = obj, field, scalar, strings
        # obj.field() reads the record layout from the tags: resolve it once, not per read.
        self._src = obj if field is None else obj.field(field)
        shape = tuple(self._src.shape)
        self.shape: tuple[int, ...] = () if scalar else shape[:-1] if strings else shape
        if strings:
            self.dtype = decode_strings(np.zeros((0, 1), "S1"), strings).dtype
        else:
            self.dtype = obj.dtype if field is None else self._src._out  # the field's numpy dtype

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC, self._raw_getitem)

    def _raw_getitem(self, key: tuple) -> np.ndarray:
        if self.scalar:  # stored as one element (pdcx objects have at least one dim)
            raw = np.asarray(self._src[0:1])
            return decode_strings(raw, self.strings).reshape(()) if self.strings else raw.reshape(())
        if self.strings:
            return decode_strings(np.asarray(self._src[tuple(key) + (slice(None),)]), self.strings)
        return np.asarray(self._src[key])

    # Pickling (dask's process and distributed schedulers, multiprocessing): the object by name
    # and its deployment's root; the other process joins that deployment, once per root.
    def __getstate__(self) -> dict:
        root = self.obj._client.root
        if root is None:
            raise TypeError(f"cannot pickle a view of {self.obj.name!r}: its client has no deployment root")
        return {
            "root": root,
            "name": self.obj.name,
            "field": self.field,
            "scalar": self.scalar,
            "strings": self.strings,
            "shape": self.shape,
        }

    def __setstate__(self, state: dict) -> None:
        obj = _shared_client(state["root"]).open_object(state["name"])
        self.__init__(obj, state["field"], state["scalar"], state.get("strings"))
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


class _Target:
    """Where :class:`xarray.backends.common.ArrayWriter` (or ``dask.array.store``) puts one
    variable's encoded values: its object, shifted by ``offset`` along the dims being appended
    to; a 0-d variable is the object's one element."""

    def __init__(self, obj: pdcx.Object, shape: tuple, offset: tuple, scalar: bool):
        self.obj, self.shape, self.offset, self.scalar = obj, shape, offset, scalar

    def __setitem__(self, key: Any, value: Any) -> None:
        value = np.asarray(value)
        if self.scalar:
            self.obj[0:1] = value.reshape((1,) + self.obj.shape[1:])
            return
        if key is Ellipsis:
            key = ()
        key = tuple(key) + (slice(None),) * (len(self.shape) - len(tuple(key)))
        region = []
        for k, n, off in zip(key, self.shape, self.offset):
            start, stop, step = k.indices(n) if isinstance(k, slice) else (int(k), int(k) + 1, 1)
            region.append(slice(start + off, stop + off, step))
        region += [slice(0, m, 1) for m in value.shape[len(self.shape) :]]  # a string's bytes
        self.obj[tuple(region)] = value.reshape(tuple(len(range(r.start, r.stop, r.step)) for r in region))


def _force_native_endianness(var: xr.Variable) -> xr.Variable:
    if var.dtype.byteorder not in ("=", "|"):
        var = xr.Variable(var.dims, var.data.astype(var.dtype.newbyteorder("=")), var.attrs, var.encoding)
        var.encoding.pop("endian", None)
    if var.encoding.get("endian", "native") != "native":
        raise NotImplementedError("pdcx stores numbers little-endian: a non-native 'endian' encoding is not supported")
    return var


class PdcxDataStore(WritableCFDataStore):
    """The objects of one container, as xarray variables; writable unless opened with
    ``mode="r"``. ``mode="w-"`` creates the container (it must not exist), ``"w"`` replaces
    it (its objects deleted), ``"a"`` adds to it or creates it; ``append_dim`` (with ``"a"``)
    grows the variables that have that dim and writes the new values after the stored ones.
    The container is created at the first write, after the dataset has been encoded and
    checked, so input that cannot be stored leaves nothing behind."""

    def __init__(
        self,
        client: pdcx.Client,
        container: str,
        drop_variables: Iterable[str] = (),
        own_client: bool = False,
        mode: str = "r",
        append_dim: str | None = None,
    ):
        if mode not in ("r", "w", "w-", "a"):
            raise InvalidArgumentError(f"mode must be 'r', 'w', 'w-' or 'a', got {mode!r}")
        if append_dim is not None and mode != "a":
            raise InvalidArgumentError(f"append_dim needs mode='a' (got mode={mode!r})")
        self.client, self.container_name, self._own = client, container, own_client
        self.mode, self.append_dim = mode, append_dim
        self._drop = {drop_variables} if isinstance(drop_variables, str) else set(drop_variables or ())
        self._variables: dict[str, xr.Variable] | None = None
        self._cont: pdcx.Container | None = None
        self._growing: str | None = None
        self._existing: dict[str, pdcx.Object] = {}
        self.coordinate_names: set[str] = set()
        try:
            self._cont = client.open_container(container)
        except NotFoundError:
            if mode == "r":
                names = sorted(c.name for c in client.containers())
                shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "") if names else "none"
                where = f"the pdcx deployment at {client.root}" if client.root else "this pdcx deployment"
                raise NotFoundError(f"no container named {container!r} in {where} (containers: {shown})") from None
        if self._cont is not None and mode == "w-":
            raise pdcx.AlreadyExistsError(
                f"container {container!r} already exists; to_pdcx(..., mode='a') adds variables to it, mode='w' replaces it"
            )

    # -- reading -------------------------------------------------------------------------
    def _var_name(self, obj: pdcx.Object) -> str:
        return obj.name.removeprefix(self.container_name + "/")

    def _objects(self) -> dict[str, pdcx.Object]:
        if self._cont is None:
            return {}
        return {self._var_name(o): o for o in self.client.objects(self.container_name)}

    def _build(self) -> dict[str, xr.Variable]:
        # (name, array, attrs, dims from the tag or None, where, is a coordinate) per variable.
        entries, seen = [], set()
        for _, obj in sorted(self._objects().items()):
            tags = _decode_tags(obj._meta["tags"])
            base = self._var_name(obj)
            layout = obj.record_dtype if obj._meta["dtype"] == "bytes" and FIELDS_TAG in tags else None
            strings = tags.get(STRINGS_TAG) if obj._meta["dtype"] == "bytes" and layout is None else None
            if strings not in (None, "str", "bytes") or (strings and obj.ndim < 2):
                strings = None  # a tag changed by hand: show the bytes as they are
            pieces = [(base, None)] if layout is None else [(f"{base}.{f}", f) for f in layout.names]
            for name, field in pieces:
                if name in self._drop:
                    continue
                if name in seen:  # e.g. object "a.x" and field x of composite "a"
                    raise InvalidArgumentError(
                        f"two objects of container {self.container_name!r} give variable {name!r}; "
                        "rename one or open with drop_variables=[...]"
                    )
                where = f"object {obj.name!r}" + (f" field {field!r}" if field else "")
                arr = PdcxBackendArray(obj, field, strings=strings)
                dims, scalar = None, False
                if DIMS_TAG in tags:
                    dims, scalar = _dims_from_tag(tags[DIMS_TAG], where, len(arr.shape), int(np.prod(arr.shape)))
                if scalar:
                    arr = PdcxBackendArray(obj, field, scalar=True, strings=strings)
                attrs = tags_to_attrs({k: v for k, v in tags.items() if k not in _STRUCTURE_TAGS})
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
        if self._variables is None:
            self._variables = self._build()
        return self._variables

    def _container_tags(self) -> dict:
        if self._cont is None:
            return {}
        return _decode_tags(json.loads(self.client._c.get_container(self.container_name))["tags"])

    def get_attrs(self) -> dict[str, Any]:
        return tags_to_attrs(self._container_tags())

    def get_dimensions(self) -> dict[str, int]:
        dims = {d: n for v in self.get_variables().values() for d, n in zip(v.dims, v.shape)}
        if self._growing is not None:
            dims.pop(self._growing, None)  # it grows: its stored length is no constraint
        return dims

    def _unlimited(self) -> set[str]:
        text = self._container_tags().get(UNLIMITED_TAG, "")
        return {d for d in text.split(",") if d} if isinstance(text, str) else set()

    def get_encoding(self) -> dict[str, Any]:
        return {"pdcx_container": self.container_name, "unlimited_dims": self._unlimited()}

    # -- writing -------------------------------------------------------------------------
    def encode_variable(self, variable: xr.Variable, name=None) -> xr.Variable:
        variable = _force_native_endianness(variable)
        # netCDF4's string coders: unicode stays unicode unless encoding dtype is "S1";
        # fixed-width bytes become character arrays along a "string<N>" dim.
        for coder in (EncodedStringCoder(allows_unicode=True), CharacterArrayCoder()):
            variable = coder.encode(variable, name=name)
        where = f"variable {name!r}"
        if string_kind(variable.dtype) is None:
            try:
                _pdcx_dtype(variable.dtype)
            except InvalidArgumentError:
                raise InvalidArgumentError(
                    f"{where} has dtype {variable.dtype}; pdcx objects hold int8..uint64, float32/64, bytes and strings"
                ) from None
        if any("," in str(d) or str(d).strip() != str(d) or not str(d) for d in variable.dims):
            raise InvalidArgumentError(
                f"{where}: dim names must be non-empty, without commas or edge spaces: {variable.dims}"
            )
        if variable.ndim > (7 if string_kind(variable.dtype) else 8):
            raise InvalidArgumentError(f"{where} has {variable.ndim} dims; pdcx objects have at most 8 (strings 7)")
        attrs_to_tags(variable.attrs, where, _STRUCTURE_TAGS)  # refuses what cannot be a tag
        return variable

    def encode_attribute(self, a: Any) -> Any:
        return a

    def store(self, variables, attributes, check_encoding_set=frozenset(), writer=None, unlimited_dims=None):
        if self.mode == "r":
            raise InvalidArgumentError(f"container {self.container_name!r} was opened read-only (mode='r')")
        if writer is None:
            writer = ArrayWriter()
        variables = dict(variables)
        existing = self._objects() if self.mode == "a" else {}
        if self.append_dim is not None and not existing:
            raise InvalidArgumentError(
                f"append_dim={self.append_dim!r}: container {self.container_name!r} has no variables to append to"
            )
        if existing:
            # New values of a stored variable are encoded as the stored ones (same units,
            # dtype, fill value), as netCDF4 and zarr do on append.
            stored = {k: v for k, v in self.get_variables().items() if k in variables}
            decoded, _, _ = conventions.decode_cf_variables(stored, {})
            for k, v in decoded.items():
                variables[k] = variables[k].copy(deep=False)
                kept = {e: val for e, val in v.encoding.items() if e in _KEPT_ON_APPEND}
                variables[k].encoding = {**kept, **variables[k].encoding}
        variables, attributes = self.encode(variables, attributes)
        cont_tags, cont_types = attrs_to_tags(attributes, f"dataset {self.container_name!r}", _STRUCTURE_TAGS)

        if self.mode == "w" and self._cont is not None:
            self._delete_container()  # only now: input that cannot be encoded leaves it as it was
        self._growing = self.append_dim
        try:
            self.set_dimensions(variables, unlimited_dims=unlimited_dims)  # raises on a length clash
        finally:
            self._growing = None
        if self._cont is None:
            self._cont = self.client.create_container(self.container_name)
        self._put_tags(None, cont_tags, cont_types)
        if unlimited_dims:
            self.client._c.put_container_tags(
                self.container_name,
                [(UNLIMITED_TAG, ",".join(sorted(self._unlimited() | set(map(str, unlimited_dims)))))],
            )
        self._existing = existing
        try:
            self.set_variables(variables, check_encoding_set, writer, unlimited_dims=unlimited_dims)
        finally:
            self._variables = None  # re-read from the deployment next time

    def _delete_container(self) -> None:
        prefix = self.container_name + "/"
        for obj in self.client.objects(self.container_name):
            if obj.name.startswith(prefix):  # objects named for another container are left alone
                self.client.delete_object(obj)
        self.client.delete_container(self.container_name)
        self._cont, self._variables = None, None

    def _put_tags(self, obj: pdcx.Object | None, tags: dict, types: dict) -> None:
        """Puts attribute tags and merges their recorded types with those already there."""
        old = _decode_tags(obj._meta["tags"]) if obj is not None else self._container_tags()
        try:
            merged = json.loads(old.get(ATTR_TYPES_TAG, "{}"))
        except (TypeError, ValueError):
            merged = {}
        merged = {k: v for k, v in merged.items() if k not in tags}
        merged.update(types)
        items = dict(tags)
        if merged or ATTR_TYPES_TAG in old:
            items[ATTR_TYPES_TAG] = json.dumps(merged, sort_keys=True)
        if not items:
            return
        if obj is None:
            self.client._c.put_container_tags(self.container_name, list(items.items()))
        else:
            obj.tags.update(items)

    def set_dimension(self, name, length, is_unlimited=False) -> None:
        pass  # pdcx has no dimension objects: dims are the `dims` tags; unlimited ones a tag

    def set_attribute(self, k, v) -> None:
        raise NotImplementedError("attributes are written together by store()")

    def prepare_variable(self, name, variable: xr.Variable, check_encoding=False, unlimited_dims=None):
        encoding = {k: v for k, v in variable.encoding.items() if k not in ("source", "original_shape")}
        if check_encoding:
            invalid = [k for k in encoding if k not in _VALID_ENCODINGS]
            if invalid:
                raise ValueError(
                    f"unexpected encoding parameters for 'pdcx' backend: {invalid!r}. Valid encodings are: "
                    f"{sorted(_VALID_ENCODINGS)!r}"
                )
        attrs = dict(variable.attrs)
        kind = string_kind(variable.dtype)
        if "_FillValue" in attrs and not kind and variable.dtype.kind in "iuf" and np.size(attrs["_FillValue"]) == 1:
            # netCDF keeps a variable's _FillValue in the variable's own type (CF decoding of
            # `_Unsigned` relies on it): so does pdcx, whatever type it was given in.
            attrs["_FillValue"] = np.array(attrs["_FillValue"]).astype(variable.dtype).reshape(())[()]
        tags, types = attrs_to_tags(attrs, f"variable {name!r}", _STRUCTURE_TAGS)
        tags[DIMS_TAG] = ",".join(map(str, variable.dims))
        obj = self._existing.get(name)
        scalar = variable.ndim == 0
        offset = [0] * variable.ndim
        if kind:
            tags[STRINGS_TAG] = kind
            old_width = obj.shape[-1] if obj is not None and obj._meta["dtype"] == "bytes" else 1
            data = encode_strings(np.asarray(variable.values), kind, old_width)
            dtype, shape = "bytes", (data.shape if not scalar else (1, data.shape[-1]))
        else:
            data, dtype = variable.data, _pdcx_dtype(variable.dtype)
            shape = variable.shape if not scalar else (1,)
        if obj is not None:
            obj, offset = self._reuse(obj, name, variable, dtype, shape, kind)
            self._put_tags(obj, tags, types)
        else:
            fill = attrs.get("_FillValue") if not kind and dtype != "bytes" else None
            fill = None if fill is None or np.size(fill) != 1 else fill
            obj = self._cont.create_object(f"{self.container_name}/{name}", shape, dtype, tags=tags, fill=fill)
            if types:
                self._put_tags(obj, {}, types)
        return _Target(obj, variable.shape, tuple(offset), scalar), data

    def _reuse(self, obj: pdcx.Object, name: str, variable: xr.Variable, dtype: str, shape: tuple, kind):
        """The stored object ``name`` made ready for new values: same dtype and rank, grown
        along ``append_dim`` (and, for strings, to the longest element). Returns (obj, offset)."""
        if _pdcx_dtype(obj.dtype) != dtype or obj.ndim != len(shape):
            raise ValueError(
                f"variable {name!r} is stored as {obj.dtype} with {obj.ndim} dims; the new values are {dtype} "
                f"with {len(shape)}: write them under another name or with mode='w'"
            )
        offset = [0] * variable.ndim
        new = list(obj.shape)
        if self.append_dim is not None and self.append_dim in variable.dims:
            axis = variable.dims.index(self.append_dim)
            offset[axis] = obj.shape[axis]
            new[axis] += variable.shape[axis]
        if kind:
            new[-1] = max(new[-1], shape[-1])
        if new != list(obj.shape):
            obj.resize(new)
        return obj, offset

    def sync(self) -> None:
        pass  # every write is synchronous: visible to every reader when it returns

    def close(self, **kwargs) -> None:
        if self._own:
            self._own = False
            self.client.close()

    def __getstate__(self) -> dict:
        # A pickled dataset carries its store (for close()); the copy owns no client.
        return {"container_name": self.container_name, "_own": False, "client": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
