"""Export: pdcx objects written as datasets of a new HDF5 file, their tags as attributes,
and the group attributes of the containers an import made."""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import AlreadyExistsError, Client, InvalidArgumentError
from ._copy import _blocks, _Progress
from ._mapping import BOOKKEEPING, DEFAULT_MEMORY, _attr_value, _need_h5py, h5py


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
