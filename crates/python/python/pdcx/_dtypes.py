"""Element types: pdcx's dtype names and their numpy dtypes, and the record layouts of
composite objects (numpy structured dtypes of plain numeric fields)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._native import InvalidArgumentError

_NUMPY_DTYPES = {
    "int8": "i1",
    "int16": "<i2",
    "int32": "<i4",
    "int64": "<i8",
    "uint8": "u1",
    "uint16": "<u2",
    "uint32": "<u4",
    "uint64": "<u8",
    "float32": "<f4",
    "float64": "<f8",
    "bytes": "S1",
}


def _np_dtype(name: str) -> np.dtype:
    return np.dtype(_NUMPY_DTYPES[name])


def _pdcx_dtype(dtype: Any) -> str:
    if isinstance(dtype, str) and dtype in _NUMPY_DTYPES:
        return dtype
    dt = np.dtype(dtype)
    if dt.kind == "S" and dt.itemsize == 1:
        return "bytes"
    for name, code in _NUMPY_DTYPES.items():
        if np.dtype(code) == dt.newbyteorder("<"):
            return name
    raise InvalidArgumentError(f"unsupported dtype {dt}; supported: {', '.join(_NUMPY_DTYPES)}")


def _record_dtype(fields: Any) -> np.dtype:
    """A numpy structured dtype of plain numeric fields, or a clear error."""
    try:
        dt = np.dtype(fields)
    except TypeError as e:
        raise InvalidArgumentError(f"bad record layout {fields!r}: {e}") from None
    if not dt.names:
        raise InvalidArgumentError("a composite object needs named fields, e.g. [('x', '<f4'), ('id', '<i8')]")
    for n in dt.names:
        f = dt.fields[n][0]
        if f.kind not in "iufS" or f.subdtype is not None or f.names:
            raise InvalidArgumentError(f"field {n!r} has type {f}; fields must be plain numbers or fixed bytes")
    return dt
