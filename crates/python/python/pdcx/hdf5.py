"""HDF5 import and export (copy mode), through h5py (the HDF5 library itself).

``pdcx import FILE.h5`` copies every dataset of a file into pdcx; ``pdcx export OBJ... -o
FILE.h5`` writes objects as datasets of a new HDF5 file. Both commands run this module
(``python3 -m pdcx.hdf5 import|export ...``); from Python use :func:`import_file` and
:func:`export_objects`. The mapping (also printed by ``--help``):

- one HDF5 file -> one container (named after the file's stem, or ``--container``);
- one dataset -> one object named ``CONTAINER/GROUP/PATH/DATASET`` (the dataset's path inside
  the file, without the leading ``/``, after the container's name: object names are unique
  across the whole deployment, so the container's name keeps two files' ``/x`` apart);
- numeric datasets keep their dtype (int8..int64, uint8..uint64, float32, float64; big-endian
  data is stored little-endian and the tag ``hdf5_dtype`` remembers the file's order); booleans
  become uint8, enums their base integer type (tags ``hdf5_dtype``, ``hdf5_enum``); compound
  datasets (and complex numbers, which HDF5 stores as compounds) become composite objects;
  fixed-length strings a ``bytes`` object with one extra trailing dim of the string length;
- a scalar dataset becomes a 1-element object (tag ``hdf5_shape=scalar``), a dataset with a
  null dataspace a 0-element object (``hdf5_shape=null``); zero-length dims are kept;
- dataset attributes -> object tags, group attributes -> container tags (root attributes under
  their own name, others as ``/GROUP/PATH@ATTR``); strings and numbers stay strings and numbers,
  arrays become JSON text (``"[1.0, 2.5]"``); ``hdf5_attr_types`` (JSON) keeps each attribute's
  exact dtype and shape so an export writes the same attribute back;
- bookkeeping tags: ``hdf5_path`` (the dataset's full path), ``hdf5_file`` (absolute path of
  the file), ``hdf5_chunks`` and ``hdf5_filters`` (its chunk shape and filters); the container
  gets ``hdf5_file`` and ``hdf5_import`` (``incomplete`` while copying, then ``complete``).

Data moves chunk by chunk: each HDF5 chunk is read through h5py (which applies the file's
filters: gzip, shuffle, and ZFP, LZ4, Blosc, Zstd, ... when the ``hdf5plugin`` package is
installed) and written as its own region of the object, many chunks per message. Contiguous
datasets move in slabs of bounded size. Under ``mpirun`` with mpi4py, rank 0 creates the
container and objects and every rank copies a round-robin share of the chunks.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import (
    FIELDS_TAG,
    AlreadyExistsError,
    Client,
    InvalidArgumentError,
    NotFoundError,
    PdcxError,
    _pdcx_dtype,
    _record_dtype,
    connect,
    start_all,
    wait_all,
)

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

__all__ = ["ExportReport", "HDF5ImportError", "ImportReport", "export_objects", "import_file", "main"]

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


# ----------------------------------------------------------------------------------------------
# What maps to what
# ----------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------
# Moving data
# ----------------------------------------------------------------------------------------------


def _blocks(shape: tuple, itemsize: int, budget: int, align: tuple | None = None):
    """Yields tuples of slices tiling `shape` in C order, each at most `budget` bytes when the
    alignment unit (default one element) allows: whole trailing dims, then as many multiples
    of `align` along the first dim that does not fit whole."""
    n = len(shape)
    if n == 0 or any(s == 0 for s in shape):
        return
    unit = [min(a, s) for a, s in zip(align or (1,) * n, shape)]
    block = list(unit)
    for d in range(n - 1, -1, -1):
        rest = itemsize * math.prod(block[:d]) * math.prod(block[d + 1 :])
        if rest * shape[d] <= budget:
            block[d] = shape[d]
            continue
        block[d] = max(unit[d], (budget // max(rest, 1)) // unit[d] * unit[d])
        break
    counts = [math.ceil(s / b) for s, b in zip(shape, block)]
    for idx in np.ndindex(*counts):
        yield tuple(slice(i * b, min((i + 1) * b, s)) for i, b, s in zip(idx, block, shape))


def _units(dset, plan: _Plan, budget: int):
    """Yields the pieces of a dataset to copy, in the same order on every rank: its chunks
    (each one region of the object), or slabs of a contiguous dataset; () for a scalar."""
    if plan.h5shape is None or 0 in plan.h5shape:
        return
    if plan.h5shape == ():
        yield ()
        return
    item = dset.dtype.itemsize
    if not plan.chunked:
        yield from _blocks(plan.h5shape, item, budget)
        return
    if math.prod(dset.chunks) * item <= budget:
        yield from dset.iter_chunks()
        return
    # A chunk bigger than the memory bound is copied in pieces (HDF5 decodes it once per
    # piece: slower, but the bound holds).
    for sel in dset.iter_chunks():
        sub = tuple(x.stop - x.start for x in sel)
        for b in _blocks(sub, item, budget):
            yield tuple(slice(x.start + y.start, x.start + y.stop) for x, y in zip(sel, b))


def _as_object_data(plan: _Plan, data: np.ndarray) -> np.ndarray:
    """What a piece of a dataset looks like as the object's data."""
    if plan.h5shape == ():
        data = np.asarray(data).reshape(1)
    if plan.kind == "array":
        return np.ascontiguousarray(data, dtype=plan.obj.dtype)
    # composite and strings: the raw bytes of each element along one more trailing dim
    if plan.kind == "composite" and data.dtype != plan.dtype:
        data = data.view(plan.dtype) if data.dtype.kind == "c" else data.astype(plan.dtype)
    data = np.ascontiguousarray(data)
    return data.view(np.uint8).reshape(data.shape + (data.dtype.itemsize,)).view("S1")


class _Progress:
    """Bytes copied and rate on stderr, at most every 2 s, for copies over 64 MiB."""

    def __init__(self, label: str, total: int, enabled: bool, scale: int = 1):
        self.label, self.total, self.enabled, self.scale = label, total, enabled and total >= 64 * MiB, scale
        self.done, self.t0, self.last = 0, time.monotonic(), 0.0

    def add(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and now - self.last >= 2.0:
            self.last = now
            done = min(self.done * self.scale, self.total)  # other ranks copy at the same pace
            rate = done / max(now - self.t0, 1e-9) / 1e6
            print(
                f"{self.label}: {done / MiB:,.0f} / {self.total / MiB:,.0f} MiB  {rate:,.0f} MB/s",
                file=sys.stderr,
                flush=True,
            )


class _Batcher:
    """Writes regions with one message per server per batch, and keeps one batch in flight
    while the next one is read (Transfer.start copies the data, so the arrays are free)."""

    def __init__(self, budget: int, durability: str, progress: _Progress):
        self.budget, self.durability, self.progress = max(budget, 1), durability, progress
        self.batch, self.batch_bytes, self.inflight, self.inflight_bytes = [], 0, [], 0

    def add(self, obj, data: np.ndarray, offset: list) -> None:
        self.batch.append(obj.transfer("w", data, offset, durability=self.durability))
        self.batch_bytes += data.nbytes
        if self.batch_bytes >= self.budget:
            self.flush(False)

    def flush(self, final: bool = True) -> None:
        self._wait()
        if self.batch:
            start_all(self.batch)
            self.inflight, self.inflight_bytes = self.batch, self.batch_bytes
            self.batch, self.batch_bytes = [], 0
        if final:
            self._wait()

    def _wait(self) -> None:
        if self.inflight:
            wait_all(self.inflight)
            self.progress.add(self.inflight_bytes)
            self.inflight, self.inflight_bytes = [], 0


# ----------------------------------------------------------------------------------------------
# Import
# ----------------------------------------------------------------------------------------------


@dataclass
class ImportReport:
    """What an import did."""

    file: str
    container: str
    objects: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "PATH: reason"
    warnings: list[str] = field(default_factory=list)
    bytes: int = 0  # data bytes copied (all ranks)
    bytes_per_rank: list[int] = field(default_factory=list)
    seconds: float = 0.0
    # by_reference=True: the objects whose extents point into the file, their bytes, and
    # the datasets copied instead (with why).
    referenced: list[str] = field(default_factory=list)
    referenced_bytes: int = 0
    copied_instead: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """MB/s (10^6 bytes per second) of the copy."""
        return self.bytes / max(self.seconds, 1e-9) / 1e6


class HDF5ImportError(PdcxError):
    """An import that failed after it started creating objects (the message says what is left)."""


def _mpi_comm(comm: Any):
    """The communicator to split the work over: `comm` if given; COMM_WORLD when this process
    was started by mpirun with more than one rank and mpi4py is installed; else None."""
    if comm is not None:
        return comm if comm.Get_size() > 1 else None
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
    if size <= 1:
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MPI.COMM_WORLD


def _open_h5(path: str):
    if not os.path.exists(path):
        raise NotFoundError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InvalidArgumentError(f"{path} is a directory, not an HDF5 file")
    if not h5py.is_hdf5(path):
        raise InvalidArgumentError(f"{path} is not an HDF5 file (no HDF5 signature)")
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise InvalidArgumentError(f"{path}: HDF5 cannot open it: {e}") from None


def _scan(client: Client, path: str, container: str, into_existing: bool, skip_unsupported: bool):
    """Everything checked before anything is created: the file opens, every dataset maps to an
    object (or is skipped on request), the container and object names are free."""
    file_abs = os.path.abspath(path)
    with _open_h5(path) as f:
        dsets, groups = _walk(f)
        plans, skipped, bad, warns = [], [], [], _link_warnings(f)
        for d in dsets:
            try:
                plan, w = _plan_dataset(d, container, file_abs)
            except _Unsupported as e:
                (skipped if skip_unsupported else bad).append(f"{d.name}: {e}")
                continue
            plans.append(plan)
            warns += w
        ctags, ctypes = {}, {}
        for g in groups:
            prefix = "" if g.name == "/" else g.name + "@"
            t, ty, w = _attr_tags(g.attrs, g.name, prefix)
            ctags.update(t)
            ctypes.update(ty)
            warns += w
    if bad:
        raise InvalidArgumentError(
            f"{path}: {len(bad)} dataset(s) pdcx cannot hold (nothing was imported; "
            "--skip-unsupported imports the others):\n  " + "\n  ".join(bad)
        )
    if ctypes:
        ctags["hdf5_attr_types"] = json.dumps(ctypes)
    ctags["hdf5_file"] = file_abs
    exists = True
    try:
        client.open_container(container)
    except NotFoundError:
        exists = False
    if exists and not into_existing:
        raise AlreadyExistsError(
            f"container {container!r} exists (nothing was imported): pick another name with "
            "--container NAME, or add the datasets to it with --into-existing"
        )
    taken = []
    for p in plans:
        try:
            client.open_object(p.name)
            taken.append(p.name)
        except NotFoundError:
            pass
    if taken:
        raise AlreadyExistsError(
            f"{len(taken)} object name(s) already exist (nothing was imported): " + ", ".join(taken[:10])
        )
    return plans, ctags, exists, skipped, warns


def _discard(client: Client, container: str, created_container: bool, plans: list, reason: str) -> str:
    """Undoes a failed import: deletes the objects it created (and the container, if it made
    it); returns what it did, for the error. If deleting fails too, the container is tagged
    hdf5_import='failed: ...' so nobody mistakes it for a complete import."""
    objs = [p.obj for p in plans if p.obj is not None]
    try:
        for o in objs:
            client.delete_object(o)
        if created_container:
            client.delete_container(container)
        return f"the {len(objs)} object(s) it created were deleted"
    except PdcxError as e:
        reason += f"; deleting them failed too: {e}"
    try:
        client.open_container(container).tags["hdf5_import"] = f"failed: {reason}"[:4000]
    except PdcxError:
        pass
    return f"container {container!r} holds {len(objs)} partly copied object(s) and is tagged hdf5_import='failed: ...'"


# HDF5 filter ids pdcx's servers undo themselves when reading a chunk by reference.
_REF_SHUFFLE, _REF_DEFLATE = 2, 1
# Contiguous datasets are referenced in slabs of about this many bytes (one extent each).
_REF_SLAB = 4 * MiB
# Reference items sent per request.
_REF_BATCH = 4096


def _ref_items(dset, plan: _Plan) -> list[dict]:
    """The reference items (regions of the object and where their bytes are in the file) of a
    dataset, or _Unsupported saying why it must be copied instead."""
    if plan.kind != "array" or plan.h5shape in (None, ()):
        raise _Unsupported("only numeric arrays of rank >= 1 are read by reference")
    if dset.dtype.byteorder == ">" or (dset.dtype.byteorder == "=" and sys.byteorder != "little"):
        raise _Unsupported("big-endian data is copied (pdcx stores little-endian)")
    dcpl = dset.id.get_create_plist()
    if dset.is_virtual or dcpl.get_external_count() > 0:
        raise _Unsupported("virtual or external storage")
    path = os.path.abspath(dset.file.filename)
    item = dset.dtype.itemsize
    shape = dset.shape
    if dset.chunks is None:
        off = dset.id.get_offset()
        if off is None:
            return []  # never written: every element is the fill value
        row = item * int(np.prod(shape[1:], dtype=np.int64))
        rows = max(1, _REF_SLAB // max(row, 1))
        out = []
        for r0 in range(0, shape[0], rows):
            n = min(rows, shape[0] - r0)
            count = [n, *shape[1:]]
            out.append(
                {
                    "region": {"offset": [r0] + [0] * (len(shape) - 1), "count": count},
                    "path": path,
                    "offset": off + r0 * row,
                    "size": n * row,
                    "chunk": count,
                    "filters": [],
                }
            )
        return out
    pipeline = []
    for i in range(dcpl.get_nfilters()):
        fid, _flags, cd, name = dcpl.get_filter(i)
        if fid == _REF_SHUFFLE:
            pipeline.append({"Shuffle": {"elem": int(cd[0]) if cd else item}})
        elif fid == _REF_DEFLATE:
            pipeline.append("Deflate")
        else:
            raise _Unsupported(f"its filter {name.decode(errors='replace') or fid} is decoded by HDF5 only")
    chunks = dset.chunks
    out = []
    for origin in np.ndindex(*[-(-n // c) for n, c in zip(shape, chunks)]):
        start = tuple(i * c for i, c in zip(origin, chunks))
        info = dset.id.get_chunk_info_by_coord(start)
        if info.byte_offset is None:
            continue  # a chunk never written reads as the fill value
        filters = [f for k, f in enumerate(pipeline) if not (info.filter_mask >> k) & 1]
        out.append(
            {
                "region": {"offset": list(start), "count": [min(c, n - o) for c, n, o in zip(chunks, shape, start)]},
                "path": path,
                "offset": int(info.byte_offset),
                "size": int(info.size),
                "chunk": list(chunks),
                "filters": filters,
            }
        )
    return out


def promote(client: Client, name: str) -> int:
    """Copies an object imported by reference into pdcx: its owner reads each chunk from the
    file and appends it to its log under the extent's own sequence number, so writes made
    since the import stay newer; afterwards the HDF5 file is not needed for it. Returns the
    bytes promoted."""
    o = client.open_object(name)
    _n, done = client._c.promote_refs(o.id)
    o.tags["hdf5_import"] = "promoted"
    return done


def import_file(
    client: Client,
    path: str | os.PathLike,
    container: str | None = None,
    *,
    into_existing: bool = False,
    skip_unsupported: bool = False,
    memory: int = DEFAULT_MEMORY,
    durability: str = "local",
    progress: bool = False,
    comm: Any = None,
    by_reference: bool = False,
) -> ImportReport:
    """Copies every dataset of an HDF5 file into pdcx (see the module's doc for the mapping).

    With ``by_reference`` the data is not copied: each chunk (or slab of a contiguous
    dataset) becomes an extent whose bytes stay in the file, read and decoded by the
    object's owner when a read needs them (shuffle and deflate; datasets with other filters,
    big-endian or non-numeric data are copied, listed in ``report.copied_instead``). The
    servers must be able to read the file at its absolute path, and it must not change
    afterwards; :func:`promote` copies such an object into pdcx.

    Creates container ``container`` (default: the file's stem; with ``into_existing`` an
    existing one is fine) and one object per dataset. ``memory`` bounds the bytes of data in
    flight (per rank). Raises before creating anything when the file cannot be read, a dataset
    cannot be held (unless ``skip_unsupported``) or a name is taken. ``comm`` (an mpi4py
    communicator; default COMM_WORLD under mpirun) splits the copy over ranks: every rank
    calls this with the same arguments; rank 0 creates, all copy, all get the same report.
    """
    _need_h5py()
    path = os.fspath(path)
    container = container or os.path.splitext(os.path.basename(path))[0]
    if not container:
        raise InvalidArgumentError(f"{path}: cannot name a container after it; pass container=")
    comm = _mpi_comm(comm)
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    report = ImportReport(os.path.abspath(path), container)
    t0 = time.monotonic()

    # Phase 1 (rank 0): check everything, then create the container and objects.
    plans, error, created_container = [], None, False
    if rank == 0:
        try:
            plans, ctags, exists, report.skipped, report.warnings = _scan(
                client, path, container, into_existing, skip_unsupported
            )
            ctags["hdf5_import"] = "incomplete"
            if exists:
                client.open_container(container).tags.update(ctags)
                cont = client.open_container(container)
            else:
                cont = client.create_container(container, tags=ctags)
                created_container = True
            made = cont.create_objects([p.spec() for p in plans])
            failed = []
            for p, o in zip(plans, made):
                if isinstance(o, Exception):
                    failed.append(f"{p.path}: {o}")
                else:
                    p.obj = o
            if failed:
                why = "creating objects failed: " + "; ".join(failed[:5])
                raise HDF5ImportError(f"{path}: {why}; {_discard(client, container, created_container, plans, why)}")
        except (PdcxError, OSError) as e:
            error = e
    names: list = []
    if comm is not None:
        # Every rank learns the outcome of phase 1: the error to raise, or what to copy.
        if rank == 0:
            msg = (type(error).__name__, str(error)) if error else ("ok", [(p.name, p.path) for p in plans])
        msg = comm.bcast(msg if rank == 0 else None, root=0)
        if rank != 0:
            if msg[0] != "ok":
                cls = getattr(sys.modules[__package__], msg[0], None)
                e = (cls if isinstance(cls, type) and issubclass(cls, PdcxError) else HDF5ImportError)(msg[1])
                e.shared = True  # rank 0 reports it
                raise e
            names = msg[1]
    if error is not None:
        raise error

    # Phase 2 (every rank): copy a round-robin share of the pieces. By reference, rank 0
    # records the references first (metadata only) and the rest is copied as usual.
    copied, local_error = 0, None
    all_names = [p.name for p in plans]
    try:
        if by_reference and rank == 0:
            kept = []
            with h5py.File(path, "r") as f:
                for p in plans:
                    try:
                        items = _ref_items(f[p.path], p)
                    except _Unsupported as why:
                        report.copied_instead.append(f"{p.path}: {why}")
                        kept.append(p)
                        continue
                    for k in range(0, len(items), _REF_BATCH):
                        _n, raw = client._c.import_refs(p.obj.id, json.dumps(items[k : k + _REF_BATCH]))
                        report.referenced_bytes += raw
                    p.obj.tags["hdf5_import"] = "reference"
                    report.referenced.append(p.name)
            referenced = set(report.referenced)
            plans = kept
        if by_reference and comm is not None:
            referenced = comm.bcast(referenced if rank == 0 else None, root=0)
            names = [(n, d) for n, d in names if n not in referenced]
        with h5py.File(path, "r") as f:
            if rank != 0:
                plans = []
                for name, dpath in names:
                    d = f[dpath]
                    plan, _ = _plan_dataset(d, container, report.file)
                    plans.append(plan)
            total = sum(p.nbytes for p in plans)
            prog = _Progress(f"import {os.path.basename(path)}", total, progress and rank == 0, size)
            batch = _Batcher(memory // 4, durability, prog)
            k = -1  # index of the piece over all datasets: rank r copies those with k % size == r
            for p in plans:
                d = f[p.path]
                extra = [0] if p.kind != "array" else []
                for sel in _units(d, p, memory // 4):
                    k += 1
                    if k % size != rank:
                        continue
                    if p.obj is None:
                        p.obj = client.open_object(p.name)
                    try:
                        data = _as_object_data(p, d[sel])
                    except OSError as e:  # say which dataset and chunk HDF5 could not read
                        where = ",".join(f"{x.start}:{x.stop}" for x in sel)
                        raise OSError(f"dataset {p.path}, region [{where}]: {e}") from None
                    offset = [0] if sel == () else [s.start for s in sel]
                    batch.add(p.obj, data, offset + extra)
                    copied += data.nbytes
            batch.flush()
    except (PdcxError, OSError, ValueError) as e:
        local_error = f"rank {rank}: {type(e).__name__}: {e}" if size > 1 else f"{type(e).__name__}: {e}"
    errors = [local_error] if comm is None else comm.allgather(local_error)
    errors = [e for e in errors if e]
    report.bytes_per_rank = [copied] if comm is None else comm.allgather(copied)
    report.bytes = sum(report.bytes_per_rank)
    if errors:
        msg = None
        if rank == 0:
            msg = _discard(client, container, created_container, plans, errors[0])
        if comm is not None:
            msg = comm.bcast(msg, root=0)
        e = HDF5ImportError(f"{path}: copying failed: {'; '.join(errors[:4])}; {msg}")
        e.shared = rank != 0  # every rank has it: rank 0 reports it
        raise e

    # Phase 3: the container says the import is whole.
    if comm is not None:
        comm.Barrier()
    if rank == 0:
        client.open_container(container).tags["hdf5_import"] = "complete"
    report.objects = all_names if comm is None else comm.bcast(all_names, root=0)
    report.seconds = time.monotonic() - t0
    return report


# ----------------------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------------------


@dataclass
class ExportReport:
    file: str
    datasets: dict = field(default_factory=dict)  # object name -> dataset path
    bytes: int = 0
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.bytes / max(self.seconds, 1e-9) / 1e6


def _dataset_path(obj) -> str:
    tags = obj.tags
    p = tags.get("hdf5_path")
    if not isinstance(p, str) or not p.startswith("/"):
        p = "/" + obj.name
    parts = p.split("/")[1:]
    if any(x in ("", ".") for x in parts):
        raise InvalidArgumentError(f"object {obj.name!r}: {p!r} is not a usable HDF5 dataset path")
    return p


def _write_attrs(target, tags: dict, skip: tuple = ()) -> None:
    types = json.loads(tags["hdf5_attr_types"]) if isinstance(tags.get("hdf5_attr_types"), str) else {}
    for k, v in tags.items():
        if k in BOOKKEEPING or k.startswith("pdcx.") or k in skip:
            continue
        name, value = _attr_value(k, v, types)
        target.attrs[name] = value


def export_objects(
    client: Client,
    names: list[str],
    path: str | os.PathLike,
    *,
    overwrite: bool = False,
    compression: str | None = None,
    compression_opts: Any = None,
    memory: int = DEFAULT_MEMORY,
    progress: bool = False,
) -> ExportReport:
    """Writes objects as datasets of a new HDF5 file (see the module's doc for the mapping).

    Each object becomes the dataset at its ``hdf5_path`` tag (objects an import made) or at
    ``/OBJECT/NAME``; its tags become attributes, composite objects compound datasets. Group
    attributes of the containers an import made are written back too (on groups the export
    creates anyway, or on every group when all of a container's objects are exported). Data moves in slabs of
    at most ``memory`` bytes aligned to the dataset's chunks."""
    _need_h5py()
    path = os.fspath(path)
    if not names:
        raise InvalidArgumentError("nothing to export: name at least one object (or --container)")
    if os.path.exists(path) and not overwrite:
        raise AlreadyExistsError(f"{path} exists; pass --overwrite (overwrite=True) to replace it")
    objs = [client.open_object(n) for n in names]  # NotFoundError names the missing one
    report = ExportReport(os.path.abspath(path))
    t0 = time.monotonic()
    seen: dict[str, str] = {}
    for o in objs:
        p = _dataset_path(o)
        if p in seen:
            raise InvalidArgumentError(f"objects {seen[p]!r} and {o.name!r} both map to dataset {p}")
        seen[p] = o.name
    for p, pobj in seen.items():  # one path may not be both a dataset and a group
        for q, qobj in seen.items():
            if q.startswith(p + "/"):
                raise InvalidArgumentError(f"{p} ({pobj}) would be both a dataset and the group of {q} ({qobj})")
    total = sum(o.size * o.dtype.itemsize for o in objs)
    prog = _Progress(f"export {os.path.basename(path)}", total, progress)
    tmp = path + ".partial"
    try:
        with h5py.File(tmp, "w") as f:
            containers: list[str] = []
            for o in objs:
                tags = dict(o.tags)
                dpath = _dataset_path(o)
                report.datasets[o.name] = dpath
                report.bytes += _export_one(f, o, tags, dpath, compression, compression_opts, memory, prog)
                containers += [c for c in o.metadata.get("containers", []) if c not in containers]
            exported = set(report.datasets)
            for cname in containers:
                ctags = dict(client.open_container(cname).tags)
                if "hdf5_file" in ctags:  # an import made it: write its group attributes back
                    whole = {x.name for x in client.objects(cname)} <= exported
                    _export_group_attrs(f, ctags, create=whole)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    report.seconds = time.monotonic() - t0
    return report


def _export_group_attrs(f, ctags: dict, create: bool) -> None:
    """Group attributes from an imported container's tags: on the root and on the groups the
    export wrote; groups that hold no exported dataset only when the whole container was
    exported (`create`), so exporting one object does not bring back every empty group."""
    types = json.loads(ctags["hdf5_attr_types"]) if isinstance(ctags.get("hdf5_attr_types"), str) else {}
    for k, v in ctags.items():
        if k in BOOKKEEPING or k.startswith("pdcx."):
            continue
        group, attr = ("/", k)
        if k.startswith("/") and "@" in k:
            group, attr = k.rsplit("@", 1)
        if group not in f and not create:
            continue
        name, value = _attr_value(k, v, types)
        f.require_group(group).attrs[name if k in types else attr] = value


def _export_one(f, o, tags: dict, dpath: str, compression, compression_opts, memory: int, prog) -> int:
    rec = o.record_dtype
    h5dtype_tag = tags.get("hdf5_dtype")
    shape = o.shape[:-1] if rec is not None else o.shape
    kind = "composite" if rec is not None else "array"
    file_dtype = rec if rec is not None else o.dtype
    if rec is None and isinstance(h5dtype_tag, str) and h5dtype_tag.startswith("|S") and o.dtype == np.dtype("S1"):
        kind, shape, file_dtype = "strings", o.shape[:-1], np.dtype(h5dtype_tag)
    elif isinstance(h5dtype_tag, str):
        file_dtype = np.dtype(h5dtype_tag)
    enum = tags.get("hdf5_enum")
    if isinstance(enum, str):
        file_dtype = h5py.enum_dtype(json.loads(enum), basetype=file_dtype)
    hshape = tags.get("hdf5_shape")
    kw: dict = {}
    if hshape == "null":
        f.create_dataset(dpath, data=h5py.Empty(file_dtype))
        _write_attrs(f[dpath], tags)
        return 0
    scalar = hshape == "scalar" and math.prod(shape) == 1
    if not scalar and 0 not in shape:
        chunks = None
        if isinstance(tags.get("hdf5_chunks"), str):
            try:
                c = tuple(int(x) for x in json.loads(tags["hdf5_chunks"]))
                chunks = c if len(c) == len(shape) and all(x > 0 for x in c) else None
            except (ValueError, TypeError):
                chunks = None
        kw["chunks"] = chunks or True
        if compression:
            kw["compression"], kw["compression_opts"] = compression, compression_opts
    if kind == "array" and rec is None and file_dtype.kind in "iuf":
        fv = o.fill_value
        if fv != 0:
            kw["fillvalue"] = fv
    ds = f.create_dataset(dpath, shape=() if scalar else shape, dtype=file_dtype, **kw)
    _write_attrs(ds, tags)
    itemsize = file_dtype.itemsize
    trailing = [o.shape[-1]] if kind != "array" else []

    def start(sel):  # the slab's read, running while the previous slab is written
        return o.read_async([x.start for x in sel] + [0] * len(trailing), [x.stop - x.start for x in sel] + trailing)

    def as_file_data(raw):
        if kind == "composite":
            data = np.ascontiguousarray(raw).view(np.uint8).view(rec)[..., 0]
            return data.view(file_dtype) if file_dtype.kind == "c" else data
        if kind == "strings":
            return np.ascontiguousarray(raw).view(file_dtype).reshape(raw.shape[:-1])
        return raw.astype(bool) if file_dtype.kind == "b" else raw

    moved = 0
    slabs = list(_blocks(shape, itemsize, max(memory // 2, 1), ds.chunks))
    pending = start(slabs[0]) if slabs else None
    for k, sel in enumerate(slabs):
        data = as_file_data(pending.wait())
        pending = start(slabs[k + 1]) if k + 1 < len(slabs) else None
        if scalar:
            ds[()] = np.asarray(data).reshape(())
        else:
            ds[sel] = data
        moved += data.nbytes
        prog.add(data.nbytes)
    return moved


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

IMPORT_HELP = """\
Copies every dataset of each HDF5 FILE into pdcx: one container per file, one object per dataset.

what maps to what:
  file run.h5                    container "run" (the file's stem; --container NAME)
  dataset /fields/E/x            object "run/fields/E/x" (container name + the dataset's path),
                                 any rank up to 8, same dtype (int8..int64, uint8..uint64,
                                 float32, float64; bool -> uint8, enum -> its integer type)
  compound / complex dataset     composite object (obj.records[...], obj.field("x")[...])
  fixed-length string dataset    bytes object with one more trailing dim (the string length)
  scalar dataset / null space    1-element object (tag hdf5_shape=scalar) / 0-element (=null)
  dataset attribute units="m/s"  object tag units="m/s"; numbers stay numbers, arrays become
                                 JSON text "[1.0, 2.0]" (tag hdf5_attr_types keeps the exact types)
  group attribute on /fields     container tag "/fields@NAME" (root group attributes: "NAME")
  chunks                         each chunk is read (gzip, shuffle, ZFP, ... decoded by HDF5) and
                                 written as one region of the object
  bookkeeping tags               hdf5_path=/fields/E/x, hdf5_file=/abs/run.h5, hdf5_chunks,
                                 hdf5_filters; container tag hdf5_import=complete when done

Nothing is created when the file cannot be read, a dataset has a dtype pdcx lacks (variable-
length strings, float16, references, ...; --skip-unsupported skips them with a warning) or the
container exists (--into-existing adds to it). Under `mpirun -n N` (with mpi4py) rank 0 creates
the objects and all ranks copy a round-robin share of the chunks.

examples:
  pdcx import run.h5                               # container "run"
  pdcx import run.h5 --container run7 --quiet
  pdcx import a.h5 b.h5 c.h5 --skip-unsupported    # containers a, b, c
  mpirun -n 8 pdcx import big.h5                   # 8 ranks copy in parallel
  pdcx import run.h5 --dry-run                     # print the mapping, create nothing
"""

EXPORT_HELP = """\
Writes pdcx objects as datasets of a new HDF5 file that h5py, h5dump and every HDF5 program read.

what maps to what:
  object "run/fields/E/x"        dataset at its hdf5_path tag when an import made it (so
                                 import -> export gives back the same paths), else at
                                 "/run/fields/E/x" (the object's name as a path)
  object tags                    dataset attributes (pdcx.* and hdf5_* bookkeeping tags are not
                                 written; imported attributes get their original type back)
  composite object               compound dataset
  container tags of an import    group attributes ("/fields@units" -> attribute units of /fields)
  chunks                         the imported dataset's chunk shape (hdf5_chunks), else h5py's
                                 choice; --compression gzip compresses them

The file is written as FILE.partial and renamed when complete.

examples:
  pdcx export run/fields/E/x run/fields/E/y -o fields.h5
  pdcx export --container run -o run-copy.h5 --compression gzip
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pdcx",
        description="HDF5 import and export for pdcx (copy mode).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{import,export}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", help="deployment root directory (default: $PDCX_ROOT)")
    common.add_argument("--quiet", "-q", action="store_true", help="no progress or summary on stderr")
    common.add_argument(
        "--memory",
        type=int,
        default=DEFAULT_MEMORY // MiB,
        metavar="MiB",
        help="bound on the data held in memory per process (default %(default)s MiB)",
    )
    imp = sub.add_parser(
        "import",
        parents=[common],
        help="copy HDF5 files into pdcx",
        description=IMPORT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    imp.add_argument("files", nargs="+", metavar="FILE.h5")
    imp.add_argument("--container", "-c", help="container name (one file only; default: the file's stem)")
    imp.add_argument("--into-existing", action="store_true", help="add the objects to an existing container")
    imp.add_argument(
        "--skip-unsupported",
        action="store_true",
        help="skip datasets pdcx cannot hold (with a warning) instead of refusing the file",
    )
    imp.add_argument(
        "--durability",
        choices=["memory", "local", "remote"],
        default="local",
        help="what each written batch waits for (default %(default)s: fsynced in the server's log)",
    )
    imp.add_argument(
        "--by-reference",
        action="store_true",
        help="do not copy the data: each chunk's bytes stay in the file, read on access by the "
        "servers (which must reach the file at its absolute path; it must not change). "
        "Datasets with filters other than shuffle/deflate are copied",
    )
    imp.add_argument("--dry-run", action="store_true", help="print what would be created and exit")
    exp = sub.add_parser(
        "export",
        parents=[common],
        help="write pdcx objects to an HDF5 file",
        description=EXPORT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    exp.add_argument("objects", nargs="*", metavar="OBJ", help="object names")
    exp.add_argument("-o", "--output", required=True, metavar="FILE.h5")
    exp.add_argument(
        "--container", "-c", action="append", default=[], help="also export every object of this container"
    )
    exp.add_argument("--overwrite", action="store_true", help="replace FILE.h5 if it exists")
    exp.add_argument("--compression", choices=["gzip", "lzf"], help="compress the datasets' chunks")
    exp.add_argument("--compression-opts", type=int, metavar="LEVEL", help="gzip level 0-9 (default 4)")
    return p


def _connect(root: str | None) -> Client:
    if root is None and not os.environ.get("PDCX_ROOT"):
        raise InvalidArgumentError(
            "no deployment: pass --root DIR or set PDCX_ROOT (start servers with pdcx server start --root DIR)"
        )
    return connect(root)


def _say(quiet: bool, msg: str) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def _cmd_import(a) -> int:
    _need_h5py()
    if a.container and len(a.files) > 1:
        raise InvalidArgumentError("--container names one container: give it with one file only")
    if a.dry_run:
        if int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0"))) != 0:
            return 0  # under mpirun: one listing
        for path in a.files:
            name = a.container or os.path.splitext(os.path.basename(path))[0]
            with _open_h5(path) as f:
                dsets, _ = _walk(f)
                print(f"{path} -> container {name!r}")
                for d in dsets:
                    try:
                        p, _ = _plan_dataset(d, name, os.path.abspath(path))
                        dt = p.dtype if p.kind == "array" else f"{p.kind} {p.dtype}"
                        print(f"  {d.name} -> {p.name}  shape={list(p.shape)} {dt}  {p.nbytes / MiB:.1f} MiB")
                    except _Unsupported as e:
                        print(f"  {d.name} -> UNSUPPORTED: {e}")
        return 0
    # Every file opens and names its own container before the first one is imported.
    stems: dict[str, str] = {}
    for path in a.files:
        _open_h5(path).close()
        name = a.container or os.path.splitext(os.path.basename(path))[0]
        if name in stems:
            raise InvalidArgumentError(f"{stems[name]} and {path} would both become container {name!r}")
        stems[name] = path
    comm = _mpi_comm(None)
    rank = 0 if comm is None else comm.Get_rank()
    env_size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
    if comm is None and env_size > 1:
        # Started by mpirun but mpi4py is missing: one rank imports, the others would clash.
        my_rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
        if my_rank != 0:
            return 0
        _say(a.quiet, "pdcx import: mpi4py is not installed: rank 0 imports alone (pip install mpi4py)")
    client = _connect(a.root)
    quiet = a.quiet or rank != 0
    for path in a.files:
        r = import_file(
            client,
            path,
            a.container,
            into_existing=a.into_existing,
            skip_unsupported=a.skip_unsupported,
            memory=a.memory * MiB,
            durability=a.durability,
            progress=not a.quiet,
            comm=comm,
            by_reference=a.by_reference,
        )
        for w in r.warnings:
            _say(quiet, f"warning: {w}")
        for s in r.skipped:
            _say(quiet, f"warning: skipped {s}")
        for c in r.copied_instead:
            _say(quiet, f"note: copied instead of referenced: {c}")
        if r.referenced:
            _say(
                quiet,
                f"referenced {len(r.referenced)} dataset(s) of {path} ({r.referenced_bytes / MiB:,.1f} MiB stay in the file)",
            )
        ranks = "" if comm is None else f" over {comm.Get_size()} ranks"
        _say(
            quiet,
            f"imported {len(r.objects)} dataset(s) of {path} into container {r.container!r}: "
            f"{r.bytes / MiB:,.1f} MiB in {r.seconds:.2f} s ({r.rate:,.0f} MB/s){ranks}",
        )
    client.close()
    return 0


def _cmd_export(a) -> int:
    client = _connect(a.root)
    names = list(a.objects)
    for c in a.container:
        client.open_container(c)  # NotFoundError names it
        names += [o.name for o in client.objects(c) if o.name not in names]
    opts = a.compression_opts if a.compression == "gzip" else None
    r = export_objects(
        client,
        names,
        a.output,
        overwrite=a.overwrite,
        compression=a.compression,
        compression_opts=opts,
        memory=a.memory * MiB,
        progress=not a.quiet,
    )
    _say(
        a.quiet,
        f"exported {len(r.datasets)} object(s) to {a.output}: {r.bytes / MiB:,.1f} MiB in {r.seconds:.2f} s "
        f"({r.rate:,.0f} MB/s)",
    )
    client.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    if a.memory < 1:
        print("pdcx: --memory must be at least 1 MiB", file=sys.stderr)
        return 2
    try:
        return _cmd_import(a) if a.command == "import" else _cmd_export(a)
    except (PdcxError, OSError) as e:
        if not getattr(e, "shared", False):  # under mpirun, an error all ranks share is said once
            print(f"pdcx {a.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
