"""Import: checks an HDF5 file and creates its container and objects (rank 0), then copies
the data (split over MPI ranks) or records references to the file's chunks; and promotion
of objects imported by reference."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import AlreadyExistsError, Client, InvalidArgumentError, NotFoundError, PdcxError
from ._copy import _as_object_data, _Batcher, _Progress, _units
from ._mapping import (
    DEFAULT_MEMORY,
    MiB,
    _attr_tags,
    _link_warnings,
    _need_h5py,
    _Plan,
    _plan_dataset,
    _Unsupported,
    _walk,
    h5py,
)


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


def _scan(client: Client, path: str, container: str, into_existing: bool, skip_unsupported: bool, resume: bool = False):
    """Everything checked before anything is created: the file opens, every dataset maps to an
    object (or is skipped on request), the container and object names are free. With
    ``resume``, the container must hold an unfinished import of this file instead, and the
    objects it already made are kept (their plans get ``obj``)."""
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
    try:
        state = _import_state(client.open_container(container), file_abs)
        exists = True
    except NotFoundError:
        state, exists = None, False
    if resume and state is None:
        raise NotFoundError(
            f"container {container!r} holds no unfinished import of {file_abs} (nothing to resume)"
            + ("" if exists else "; import it without --resume")
        )
    if state is not None and not resume:
        raise AlreadyExistsError(
            f"container {container!r} holds an unfinished import of {path} ({state}; nothing was "
            "imported): finish it with --resume, or remove what it left with --undo"
        )
    if exists and not into_existing and not resume:
        raise AlreadyExistsError(
            f"container {container!r} exists (nothing was imported): pick another name with "
            "--container NAME, or add the datasets to it with --into-existing"
        )
    taken = []
    for p in plans:
        try:
            o = client.open_object(p.name)
        except NotFoundError:
            continue
        if resume and o.tags.get("hdf5_file") == file_abs and o.tags.get("hdf5_path") == p.path:
            p.obj = o  # made by the interrupted import: its data is copied again
        else:
            taken.append(p.name)
    if taken:
        raise AlreadyExistsError(
            f"{len(taken)} object name(s) already exist (nothing was imported): " + ", ".join(taken[:10])
        )
    return plans, ctags, exists, skipped, warns


def _import_state(cont, file_abs: str) -> str | None:
    """Why container ``cont`` holds an unfinished import of ``file_abs`` (its hdf5_import
    tag), or None when it does not."""
    tags = cont.tags
    state = str(tags.get("hdf5_import", ""))
    if tags.get("hdf5_file") == file_abs and (state == "incomplete" or state.startswith("failed")):
        return f"hdf5_import={state[:60]}"
    return None


def undo_import(client: Client, path: str | os.PathLike, container: str | None = None) -> tuple[int, bool]:
    """Removes what importing ``path`` into ``container`` (default: the file's stem) made,
    finished or not: the container's objects whose ``hdf5_file`` tag is the file, then the
    container if it was made for the file and is left empty. Returns (objects removed,
    whether the container was removed)."""
    file_abs = os.path.abspath(os.fspath(path))
    container = container or os.path.splitext(os.path.basename(file_abs))[0]
    cont = client.open_container(container)  # NotFoundError names it
    removed = 0
    for o in client.objects(container):
        if o.tags.get("hdf5_file") == file_abs:
            client.delete_object(o)
            removed += 1
    gone = False
    if cont.tags.get("hdf5_file") == file_abs and not client.objects(container):
        client.delete_container(container)
        gone = True
    if removed == 0 and not gone:
        raise NotFoundError(f"container {container!r} holds nothing imported from {file_abs} (nothing to undo)")
    return removed, gone


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
    resume: bool = False,
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
    cannot be held (unless ``skip_unsupported``) or a name is taken. An import interrupted
    part-way leaves the container tagged ``hdf5_import=incomplete``; ``resume=True`` finishes
    it (the objects it made are kept, the data is copied again) and :func:`undo_import`
    removes what it left. ``comm`` (an mpi4py
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
                client, path, container, into_existing, skip_unsupported, resume
            )
            ctags["hdf5_import"] = "incomplete"
            if exists:
                client.open_container(container).tags.update(ctags)
                cont = client.open_container(container)
            else:
                cont = client.create_container(container, tags=ctags)
                created_container = True
            todo = [p for p in plans if p.obj is None]  # on resume, the objects still missing
            made = cont.create_objects([p.spec() for p in todo])
            failed = []
            for p, o in zip(todo, made):
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
                # The error class by name from the top-level package, pdcx (this module is
                # in its hdf5 subpackage).
                cls = getattr(sys.modules[__name__.split(".")[0]], msg[0], None)
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
