"""How xarray values live in pdcx tags and objects, for :mod:`pdcx.xarray_backend`: attribute
values as tags (with their numpy types kept), variable-length and unicode strings as bytes
objects, and which tags are bookkeeping that never reaches ``.attrs``.

- An attribute that is a plain ``str``, ``int``, ``float`` (finite) or ``bytes`` is one tag of
  that value. Any other value (a numpy scalar such as ``np.float32(0.1)``, an array, a list or
  tuple, a bool, an infinity) is stored as JSON text and its numpy dtype and shape are recorded
  in the bookkeeping tag ``pdcx.xarray.attrs`` (JSON ``{name: [dtype, ndim]}``), so it reads
  back as the same numpy type: CF decoding picks its result dtype from the types of
  ``scale_factor``, ``add_offset`` and ``_FillValue``, so a float32 ``scale_factor`` must stay
  float32 for the decoded dtype to be what netCDF gives.
- A string variable (numpy ``U``, numpy ``StringDType``, or xarray's variable-length ``str``
  or ``bytes`` object dtype) is a ``bytes`` object with one more trailing dim, the longest
  element's UTF-8 length (at least 1), each element NUL-padded; the tag
  ``pdcx.xarray.strings`` (``"str"`` or ``"bytes"``) says so. It reads back as xarray's
  variable-length string dtype, as netCDF4's ``NC_STRING`` does; trailing NULs of an element
  are not kept (as in netCDF character arrays). Fixed-width bytes (``S``) variables are
  netCDF character arrays (``S1`` with a ``string<N>`` dim), exactly as the netCDF4 backend
  writes them.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
from xarray.coding.strings import check_vlen_dtype, create_vlen_dtype

from pdcx import InvalidArgumentError

ATTR_TYPES_TAG = "pdcx.xarray.attrs"
STRINGS_TAG = "pdcx.xarray.strings"
UNLIMITED_TAG = "pdcx.xarray.unlimited_dims"
# Tags of other pdcx tools that are bookkeeping, not attributes: pdcx's own (``pdcx.*``) and
# what ``pdcx import`` records about the HDF5 file (``hdf5_*``). ``hdf5_attr.X`` is the
# user's attribute ``X``, renamed on import because it collided with a pdcx tag name.
_BOOKKEEPING_PREFIXES = ("pdcx.", "hdf5_")
_HDF5_RENAMED = "hdf5_attr."


def string_kind(dtype: np.dtype) -> str | None:
    """``"str"``/``"bytes"`` for the string dtypes stored as padded bytes objects, else None."""
    if dtype.kind in ("U", "T") or check_vlen_dtype(dtype) is str:
        return "str"
    if check_vlen_dtype(dtype) is bytes:
        return "bytes"
    return None


def encode_strings(values: np.ndarray, kind: str, min_width: int = 1) -> np.ndarray:
    """Strings as an ``S1`` array of one more trailing dim (NUL-padded UTF-8), at least
    ``min_width`` wide (an object being written into keeps its width)."""
    flat = [v.encode("utf-8") if kind == "str" else bytes(v) for v in np.asarray(values, dtype=object).ravel()]
    width = max([min_width, *map(len, flat)])
    fixed = np.array(flat, dtype=f"S{width}")  # 1-d: a 0-d array cannot be viewed as S1
    return fixed.view("S1").reshape(values.shape + (width,))


def decode_strings(raw: np.ndarray, kind: str) -> np.ndarray:
    """The inverse of :func:`encode_strings`: ``(..., width)`` S1 to a vlen object array."""
    shape, width = raw.shape[:-1], raw.shape[-1]
    fixed = np.ascontiguousarray(raw).view(f"S{width}").reshape(shape)
    out = np.empty(shape, dtype=create_vlen_dtype(str if kind == "str" else bytes))
    for i, b in np.ndenumerate(fixed):
        out[i] = b.decode("utf-8") if kind == "str" else b
    return out


def _is_plain(value: Any) -> bool:
    if isinstance(value, (bool, np.generic)):
        return False
    if isinstance(value, float):
        return not math.isinf(value)  # NaN is fine: the reader turns a null tag back into NaN
    return isinstance(value, (str, int, bytes))


def attrs_to_tags(attrs: dict, where: str, reserved: tuple[str, ...]) -> tuple[dict, dict]:
    """(tags, types): the tag of each attribute and the recorded types of the typed ones."""
    tags, types = {}, {}
    for k, v in attrs.items():
        if not isinstance(k, str) or not k:
            raise InvalidArgumentError(f"{where}: attribute name {k!r} must be a non-empty str")
        if k in reserved or k.startswith(_BOOKKEEPING_PREFIXES):
            raise InvalidArgumentError(f"{where}: attribute {k!r} is reserved for pdcx's bookkeeping (rename it)")
        if _is_plain(v):
            tags[k] = v
            continue
        try:
            arr = np.asarray(v)
        except (TypeError, ValueError):
            arr = np.asarray(v, dtype=object)
        if arr.dtype.kind not in "biufUS":
            raise InvalidArgumentError(
                f"{where}: attribute {k!r} is {v!r} ({type(v).__name__}); pdcx stores numbers, strings, "
                "bytes and arrays of one of those"
            )
        items = arr.tolist()
        if arr.dtype.kind == "S":  # bytes are not JSON: latin-1 maps each byte to one code point
            items = np.vectorize(lambda b: b.decode("latin-1"), otypes=[object])(arr).tolist() if arr.size else items
        tags[k] = json.dumps(items)
        types[k] = [arr.dtype.str, arr.ndim]
    return tags, types


def _typed(text: Any, dtype: str, ndim: int) -> Any:
    items = json.loads(text)
    dt = np.dtype(dtype)
    if dt.kind == "S":
        items = np.vectorize(lambda s: s.encode("latin-1"), otypes=[object])(np.asarray(items, dtype=object))
    arr = np.asarray(items, dtype=dt)
    return arr[()] if ndim == 0 else arr


def tags_to_attrs(tags: dict) -> dict:
    """The attributes a set of tags holds: bookkeeping left out, typed values restored.
    pdcx's metadata is JSON, where a non-finite float tag reads back as null: the only way a
    tag is None, so it is NaN again here."""
    types = {}
    if ATTR_TYPES_TAG in tags:
        try:
            types = json.loads(tags[ATTR_TYPES_TAG])
        except (TypeError, ValueError):
            types = {}
    out = {}
    for k, v in tags.items():
        if k.startswith(_HDF5_RENAMED):
            out.setdefault(k[len(_HDF5_RENAMED) :], v)
            continue
        if k.startswith(_BOOKKEEPING_PREFIXES):
            continue
        if k in types and isinstance(v, str):
            try:
                out[k] = _typed(v, *types[k])
                continue
            except (TypeError, ValueError):
                pass  # a tag changed by hand since: give its text
        out[k] = float("nan") if v is None else v
    return out
