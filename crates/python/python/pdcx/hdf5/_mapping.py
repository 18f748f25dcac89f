"""What maps to what: HDF5 datasets, dtypes and attributes as pdcx objects and tags (and the
tags back as attributes), with h5py (loaded when installed) and the limits and tag names the
import and the export share."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import FIELDS_TAG, InvalidArgumentError, _pdcx_dtype, _record_dtype

try:
    import h5py
except ImportError:  # reported when the module is used, with the command that installs it
    h5py = None

try:
    # Registers the filters HDF5 lacks by default (ZFP as H5Z-ZFP id 32013, LZ4, Blosc, Zstd,
    # bitshuffle, ...) with the HDF5 library h5py uses. Debian's H5Z-ZFP plugin package is
    # built against the serial libhdf5 and cannot load into an h5py linked with the MPI build.
    import hdf5plugin
except ImportError:
    hdf5plugin = None


MiB = 1 << 20
DEFAULT_MEMORY = 256 * MiB
MAX_NAME_BYTES = 1024  # pdcx_core::model::MAX_NAME_LEN
# Attributes whose tag text would be longer are skipped with a warning: tags are metadata, kept
# in every server's catalog, not a place for arrays of data.
MAX_TAG_TEXT = 64 * 1024
# Tags this module reads back on export; never written to the HDF5 file as attributes.
BOOKKEEPING = (
    "hdf5_path",
    "hdf5_file",
    "hdf5_dtype",
    "hdf5_shape",
    "hdf5_chunks",
    "hdf5_filters",
    "hdf5_enum",
    "hdf5_attr_types",
    "hdf5_import",
)
# Attribute names that would collide with pdcx's own tags (which change server behaviour,
# e.g. pdcx.tier) or with the bookkeeping above are stored under this prefix instead.
RENAMED_PREFIX = "hdf5_attr."
# Well-known filter ids (HDF5's registry), for messages and the hdf5_filters tag.
FILTER_NAMES = {
    1: "gzip",
    2: "shuffle",
    3: "fletcher32",
    4: "szip",
    5: "nbit",
    6: "scaleoffset",
    307: "bzip2",
    32000: "lzf",
    32001: "blosc",
    32004: "lz4",
    32008: "bitshuffle",
    32013: "zfp",
    32015: "zstd",
    32026: "blosc2",
}


def _need_h5py() -> None:
    if h5py is None:
        raise InvalidArgumentError("HDF5 import/export needs h5py: python3 -m pip install h5py hdf5plugin")


class _Unsupported(Exception):
    """A dataset pdcx cannot hold; the message says why."""


@dataclass
class _Plan:
    """One dataset and the object it becomes."""

    path: str  # the dataset's path in the file, "/g/x"
    name: str  # the pdcx object name
    shape: tuple  # the object's shape
    h5shape: tuple | None  # the dataset's shape (None: null dataspace)
    kind: str  # "array" | "composite" | "strings"
    dtype: Any  # pdcx dtype name (array, strings) or record dtype (composite)
    tags: dict
    fill: Any = None
    nbytes: int = 0
    chunked: bool = False
    obj: Any = None  # the pdcx Object once created / opened

    def spec(self) -> dict:
        """The create_objects spec of this plan."""
        if self.kind == "composite":
            dt = self.dtype
            layout = {"itemsize": dt.itemsize, "fields": [[n, dt.fields[n][0].str, dt.fields[n][1]] for n in dt.names]}
            return {
                "name": self.name,
                "shape": self.shape,
                "dtype": "bytes",
                "tags": {**self.tags, FIELDS_TAG: json.dumps(layout)},
            }
        spec = {"name": self.name, "shape": self.shape, "dtype": self.dtype, "tags": self.tags}
        if self.fill is not None:
            spec["fill"] = self.fill
        return spec


def _map_dtype(dt: np.dtype) -> tuple[str, Any, dict]:
    """(kind, pdcx dtype or record dtype, extra tags) for a dataset dtype, or _Unsupported."""
    enum = h5py.check_enum_dtype(dt)
    if dt.kind == "b":  # h5py's bool is an HDF5 enum {FALSE, TRUE} of int8
        return "array", "uint8", {"hdf5_dtype": "bool"}
    if dt.kind in "iuf":
        if dt.kind == "f" and dt.itemsize not in (4, 8):
            raise _Unsupported(f"float{dt.itemsize * 8} (pdcx stores float32 and float64)")
        name = _pdcx_dtype(dt)  # knows every size of int/uint; byte order is dropped
        tags = {} if dt.byteorder in "=<|" or dt.itemsize == 1 else {"hdf5_dtype": dt.str}
        if enum:
            tags["hdf5_enum"] = json.dumps({k: int(v) for k, v in enum.items()})
        return "array", name, tags
    if dt.kind == "c":  # HDF5 has no complex type: h5py reads a compound {r, i} as complex
        part = f"{dt.str[0]}f{dt.itemsize // 2}"
        return "composite", np.dtype([("r", part), ("i", part)]), {"hdf5_dtype": dt.str}
    if dt.kind == "S":
        if dt.itemsize == 1:
            return "array", "bytes", {}
        return "strings", "bytes", {"hdf5_dtype": dt.str}
    if dt.kind == "V" and dt.names:
        try:
            rec = _record_dtype(dt)
        except InvalidArgumentError as e:
            raise _Unsupported(f"compound type {dt}: {e}") from None
        return "composite", rec, {}
    if dt.kind == "O":
        what = "variable-length strings" if h5py.check_string_dtype(dt) else "variable-length or reference data"
        raise _Unsupported(what)
    raise _Unsupported(f"dtype {dt}")


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", "surrogateescape")
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def _attr_tags(attrs, where: str, prefix: str = "") -> tuple[dict, dict, list[str]]:
    """Tags for the attributes of a dataset or group: (tags, hdf5_attr_types, warnings).

    ``prefix`` goes before every tag name (group attributes on the container); names that
    would collide with pdcx's or this module's own tags get RENAMED_PREFIX."""
    tags, types, warns = {}, {}, []
    for name in attrs:
        try:
            value = attrs[name]
            aid = attrs.get_id(name)
            shape = aid.shape
        except (OSError, TypeError, ValueError) as e:  # e.g. a type h5py cannot read
            warns.append(f"{where}: attribute {name!r} skipped: h5py cannot read it ({e})")
            continue
        key = prefix + name
        if not prefix and (name.startswith(("pdcx.", RENAMED_PREFIX)) or name in BOOKKEEPING):
            key = RENAMED_PREFIX + name
        if not key:
            warns.append(f"{where}: attribute with an empty name skipped")
            continue
        if isinstance(value, h5py.Empty) or shape is None:
            warns.append(f"{where}: attribute {name!r} skipped: it has no value (empty dataspace)")
            continue
        dt = aid.dtype
        if h5py.check_string_dtype(dt) and dt.kind == "O":
            tagval = value if not isinstance(value, np.ndarray) else json.dumps(_jsonable(value.tolist()))
            if isinstance(tagval, bytes):
                tagval = tagval.decode("utf-8", "surrogateescape")
            tags[key], types[key] = tagval, [name, "str", list(shape)]
            continue
        arr = np.asarray(value)
        if arr.dtype.kind not in "biufcS":
            warns.append(f"{where}: attribute {name!r} skipped: type {dt} has no tag form")
            continue
        if arr.ndim == 0:
            v = arr.item()
            if arr.dtype.kind == "S":
                try:
                    v = v.decode("utf-8")
                except UnicodeDecodeError:
                    pass  # stays a bytes tag
            elif arr.dtype.kind == "c":
                v = json.dumps([v.real, v.imag])
            elif arr.dtype.kind in "bu" or (arr.dtype.kind == "i"):
                v = int(v)
                if v > 2**63 - 1:
                    v = str(v)  # int tags are int64; the exact value stays readable as text
            tags[key] = v
        else:
            if arr.dtype.kind == "c":
                lst = np.stack([arr.real, arr.imag], axis=-1).tolist()
            else:
                lst = _jsonable(arr.tolist())
            text = json.dumps(lst)
            if len(text) > MAX_TAG_TEXT:
                warns.append(
                    f"{where}: attribute {name!r} skipped: {arr.size} values exceed {MAX_TAG_TEXT} bytes as text"
                )
                continue
            tags[key] = text
        types[key] = [name, arr.dtype.str, list(arr.shape)]
    return tags, types, warns


def _attr_value(tag: str, value: Any, types: dict) -> tuple[str, Any]:
    """(attribute name, value) that writes a tag back as the attribute it came from."""
    if tag not in types:
        if isinstance(value, bytes):
            return tag, np.void(value)
        return tag, value  # str / int (int64) / float (float64)
    name, dts, shape = types[tag]
    if dts == "str":
        return name, json.loads(value) if shape else value
    dt = np.dtype(dts)
    v = json.loads(value) if shape or dt.kind == "c" or isinstance(value, str) and dt.kind not in "S" else value
    if dt.kind == "c":
        a = np.asarray(v, dtype=f"f{dt.itemsize // 2}")
        return name, (a[..., 0] + 1j * a[..., 1]).astype(dt).reshape(shape)
    if dt.kind == "S" and isinstance(v, str):
        v = v.encode("utf-8", "surrogateescape") if not shape else [s.encode("utf-8", "surrogateescape") for s in v]
    return name, np.asarray(v, dtype=dt).reshape(shape)


def _filters(dset) -> list[tuple[int, str]]:
    """(id, name) of each filter in a chunked dataset's pipeline."""
    out = []
    dcpl = dset.id.get_create_plist()
    for i in range(dcpl.get_nfilters()):
        fid, _flags, _cd, name = dcpl.get_filter(i)
        out.append((fid, FILTER_NAMES.get(fid) or name.decode(errors="replace") or str(fid)))
    return out


def _plan_dataset(dset, container: str, file_abs: str) -> tuple[_Plan, list[str]]:
    """The object a dataset becomes, or _Unsupported."""
    path = dset.name
    h5shape = dset.shape
    if h5shape is not None and len(h5shape) > 8:
        raise _Unsupported(f"rank {len(h5shape)} (pdcx objects have 1..8 dims)")
    kind, dtype, tags = _map_dtype(dset.dtype)
    if h5shape is None:
        shape, tags["hdf5_shape"] = (0,), "null"
    elif h5shape == ():
        shape, tags["hdf5_shape"] = (1,), "scalar"
    else:
        shape = tuple(h5shape)
    if kind == "composite":
        shape = shape + (dtype.itemsize,)
    elif kind == "strings":
        shape = shape + (dset.dtype.itemsize,)
    if len(shape) > 8:
        raise _Unsupported(f"rank {len(h5shape)} plus the record dim exceeds pdcx's 8 dims")
    missing = []
    chunked = dset.chunks is not None
    if chunked:
        tags["hdf5_chunks"] = json.dumps(list(dset.chunks))
        filt = _filters(dset)
        if filt:
            tags["hdf5_filters"] = ",".join(n for _, n in filt)
        missing = [f"{n} (id {i})" for i, n in filt if not h5py.h5z.filter_avail(i)]
    if missing:
        hint = "" if hdf5plugin is not None else " (python3 -m pip install hdf5plugin provides ZFP, LZ4, Blosc, Zstd)"
        raise _Unsupported(f"its filter {', '.join(missing)} is not available to this HDF5{hint}")
    atags, types, warns = _attr_tags(dset.attrs, path)
    tags.update(atags)
    if types:
        tags["hdf5_attr_types"] = json.dumps(types)
    tags["hdf5_path"] = path
    tags["hdf5_file"] = file_abs
    fill = None
    if kind == "array" and dset.dtype.kind in "iuf" and dset.fillvalue is not None:
        fv = np.asarray(dset.fillvalue)
        if fv.size == 1 and fv.item() != 0:  # never-written chunks read as the file's fill value
            fill = fv.item()
    name = f"{container}/{path.lstrip('/')}"
    if len(name.encode()) > MAX_NAME_BYTES or any(ord(ch) < 32 or 127 <= ord(ch) < 160 for ch in name):
        raise _Unsupported(f"object name {name!r} has control characters or exceeds {MAX_NAME_BYTES} bytes")
    item = dset.dtype.itemsize
    nbytes = 0 if h5shape is None else int(np.prod(h5shape, dtype=np.int64)) * item
    plan = _Plan(path, name, shape, h5shape, kind, dtype, tags, fill, nbytes, chunked)
    return plan, warns


def _walk(f) -> tuple[list, list]:
    """(datasets, groups) of a file, each once (hard links visited once), in name order."""
    dsets, groups, seen = [], [f], set()

    def visit(name, obj):
        key = obj.id.__hash__() if hasattr(obj.id, "__hash__") else name
        if key in seen:
            return
        seen.add(key)
        if isinstance(obj, h5py.Dataset):
            dsets.append(obj)
        elif isinstance(obj, h5py.Group):
            groups.append(obj)

    f.visititems(visit)  # does not follow soft or external links
    return dsets, groups


def _link_warnings(f) -> list[str]:
    """What the import leaves out: soft links (their target is imported once, under its own
    path) and external links (to other files; import those files themselves)."""
    out = []

    def visit(name, link):
        if isinstance(link, h5py.ExternalLink):
            out.append(f"/{name}: external link to {link.filename}:{link.path} not followed")
        elif isinstance(link, h5py.SoftLink):
            out.append(f"/{name}: soft link to {link.path} not imported (its target is, under its own path)")

    if hasattr(f, "visititems_links"):  # h5py >= 3.11
        f.visititems_links(visit)
    return out
