"""pdcx: object-centric data management for scientific computing.

Quick start::

    import numpy as np, pdcx
    client = pdcx.connect()                      # private server unless PDCX_ROOT is set
    cont = client.create_container("run1", tags={"app": "vpic"})
    obj = cont.create_object("run1/energy", shape=(1000, 3), dtype="float64", tags={"step": 0})
    obj[:500] = np.random.rand(500, 3)           # synchronous write (a consistency point)
    t = obj.write_async(np.ones((500, 3)), offset=(500, 0))
    t.wait()                                     # visible to every later reader from here on
    print(obj[::100, 0])                         # numpy indexing: ints, slices with steps, ...
    print(client.query("step=0", app=None))      # tag queries across all servers

A transfer's ``start`` copies the caller's data, so the buffer is reusable at once; ``wait``
is the consistency point. ``pdcx.start_all`` / ``pdcx.wait_all`` batch many transfers into
one message per server.
"""

from __future__ import annotations

import atexit
import json
import operator
import os
import shutil
import tempfile
from collections.abc import Iterable, MutableMapping, Sequence
from typing import Any, Self

import numpy as np

from . import _native
from . import files as _files
from ._native import (
    AlreadyExistsError,
    AuthError,
    DtypeMismatchError,
    InvalidArgumentError,
    NoSpaceError,
    NotFoundError,
    OutOfBoundsError,
    PdcxError,
    ProtocolError,
    UnavailableError,
)

__all__ = [
    "AlreadyExistsError",
    "AuthError",
    "Client",
    "Condition",
    "Container",
    "DtypeMismatchError",
    "Hits",
    "InvalidArgumentError",
    "NoSpaceError",
    "NotFoundError",
    "Object",
    "OutOfBoundsError",
    "PdcxError",
    "ProtocolError",
    "Transfer",
    "UnavailableError",
    "connect",
    "requests_sent",
    "start_all",
    "wait_all",
]

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


FIELDS_TAG = "pdcx.fields"
TIER_TAG = "pdcx.tier"
TIER_RULES_TAG = "pdcx.tier.regions"


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


def _decode_tags(raw: dict) -> dict:
    return {k: bytes(v["__bytes__"]) if isinstance(v, dict) else v for k, v in raw.items()}


def _tag_items(tags: dict | None) -> list:
    if not tags:
        return []
    if not isinstance(tags, dict):
        raise InvalidArgumentError("tags must be a dict of name -> str/int/float/bytes")
    return [(str(k), v) for k, v in tags.items()]


class _Embedded:
    """The private deployment `connect()` starts when none is configured."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="pdcx-embedded-")
        self.server = _native.EmbeddedServer(self.dir)
        atexit.register(self.close)

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
            shutil.rmtree(self.dir, ignore_errors=True)


def connect(root: str | os.PathLike | None = None) -> Client:
    """Connects to a pdcx deployment.

    - ``connect(root="/path")`` joins the deployment whose servers were started with that root
      (``pdcx server start -n 2 --root /path`` or ``mpirun -n 2 pdcx server --root /path``).
    - ``connect()`` with ``PDCX_ROOT`` set joins that one.
    - ``connect()`` with neither starts a private server in this process, in a temporary
      directory that is removed at exit (the embedded default: nothing to set up).
    """
    if root is None and not os.environ.get("PDCX_ROOT"):
        if int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1"))) > 1:
            raise UnavailableError(
                "running under MPI with no deployment: start servers first "
                "(pdcx server start -n 2 --root DIR) and set PDCX_ROOT=DIR, so all ranks share them"
            )
        emb = _Embedded()
        client = Client(_native.Client(emb.dir))
        client._embedded = emb
        return client
    return Client(_native.Client(None if root is None else os.fspath(root)))


def _file_name(name: str) -> str:
    """A file name without its optional ``pdcx://`` scheme."""
    return name.removeprefix("pdcx://")


def _region_spec(region: str | tuple | None) -> str | None:
    """A region as ``pdcx`` takes it (``"0:10,:,5"``) from a string or a tuple of slices and
    indices (steps belong in ``step=``)."""
    if region is None or isinstance(region, str):
        return region
    items = region if isinstance(region, tuple) else (region,)
    parts = []
    for it in items:
        if isinstance(it, slice):
            if it.step not in (None, 1):
                raise InvalidArgumentError("give steps with step=, not in the region's slices")
            parts.append(f"{'' if it.start is None else it.start}:{'' if it.stop is None else it.stop}")
        elif isinstance(it, int) and it >= 0:
            parts.append(str(it))
        else:
            raise InvalidArgumentError(f"a region item is a slice or a non-negative index, got {it!r}")
    return ",".join(parts)


class Client:
    """A connection to one deployment. Create it with :func:`pdcx.connect`."""

    def __init__(self, native: _native.Client):
        self._c = native
        self._embedded: _Embedded | None = None

    @property
    def servers(self) -> int:
        """Number of servers in the deployment."""
        return self._c.size

    @property
    def root(self) -> str | None:
        r = self._c.root
        return None if r is None else os.fspath(r)

    @property
    def local_server(self) -> int:
        """Rank of this process's node-local server (where region-local writes go)."""
        return self._c.local_server

    @property
    def placement(self) -> str:
        """Where the data of writes goes: ``"region-local"`` (default: the node-local server),
        ``"object-static"`` (the object's metadata owner), ``"region-static"`` (spread by region
        offset) or ``"region-dynamic"`` (least data in flight). Set it, or ``PDCX_PLACEMENT``.
        Reads find the data wherever it was placed."""
        return self._c.placement

    @placement.setter
    def placement(self, name: str) -> None:
        self._c.placement = name

    @property
    def aggregation(self) -> bool:
        """Whether lookups (``open_object``, metadata refreshes) of objects owned by another
        server go through this process's node-local server, which shares one request to the
        owner among identical lookups of the node's ranks. On by default when the node-local
        server runs on this node; ``PDCX_AGGREGATE=0`` turns it off."""
        return self._c.aggregation

    @aggregation.setter
    def aggregation(self, on: bool) -> None:
        self._c.aggregation = bool(on)

    def sync(self) -> None:
        """The consistency point of every relaxed write this client waited: when it returns,
        they are visible to every reader (see :meth:`Object.set_consistency`); and of this
        client's creates and tag puts: when it returns they survive power loss (they are
        visible, and survive a server crash, as soon as their call returns)."""
        self._c.sync(None)

    def create_container(self, name: str, tags: dict | None = None) -> Container:
        """Creates a container; raises AlreadyExistsError if the name is taken."""
        return Container(self, json.loads(self._c.create_container(name, _tag_items(tags))))

    def open_container(self, name: str) -> Container:
        return Container(self, json.loads(self._c.get_container(name)))

    def containers(self) -> list[Container]:
        return [Container(self, c) for c in json.loads(self._c.list_containers())]

    def open_object(self, name: str) -> Object:
        """Opens an object by its deployment-wide unique name."""
        return Object(self, json.loads(self._c.open_object(name)))

    def objects(self, container: str | None = None) -> list[Object]:
        return [Object(self, o) for o in json.loads(self._c.list_objects(container))]

    def delete_object(self, obj: Object | str) -> None:
        """Removes an object (by name or :class:`Object`): metadata, memberships, tags, data."""
        o = obj if isinstance(obj, Object) else self.open_object(obj)
        self._c.delete_object(o.id)

    def delete_container(self, name: str) -> None:
        """Removes a container and its tags; its objects stay (delete them first if wanted)."""
        self._c.delete_container(name)

    # -- files: byte-stream objects ------------------------------------------------

    def open(
        self,
        name: str,
        mode: str = "r",
        buffering: int = -1,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = None,
        *,
        aggregate: bool = True,
        prefetch: str = "adaptive",
    ) -> Any:
        """Opens file ``name`` (a byte-stream object; ``pdcx://`` is accepted and dropped) like
        the built-in ``open``: ``"rb"`` gives an ``io.BufferedReader``, ``"w"`` a text file.

        ``aggregate`` keeps writes on the client until flush/close (one commit for all);
        ``prefetch`` is ``"adaptive"``, ``"off"`` or a window size such as ``"4M"``.
        """
        return _files.open_file(
            self._c, _file_name(name), mode, buffering, encoding, errors, newline, aggregate, prefetch
        )

    def stat(self, name: str) -> os.stat_result:
        """Size and times of file ``name``, as ``os.stat`` gives them for a regular file."""
        _, size, ctime, mtime = _native.file_stat(self._c, _file_name(name))
        return os.stat_result((0o100644, 0, 0, 1, os.getuid(), os.getgid(), size, mtime, mtime, ctime))

    def exists(self, name: str) -> bool:
        """Whether ``name`` is a file or a directory (a name prefix)."""
        return _native.file_kind(self._c, _file_name(name)) is not None

    def isdir(self, name: str) -> bool:
        return _native.file_kind(self._c, _file_name(name)) == "dir"

    def remove(self, name: str) -> None:
        """Deletes file ``name``."""
        _native.file_remove(self._c, _file_name(name))

    def flush_files(self, files: list) -> None:
        """Flushes several files opened with ``open`` at one consistency point (their writes
        sent and committed together: one commit per server for all, not one per file)."""
        _files.flush_all(files)

    def rename(self, src: str, dst: str) -> None:
        """Renames file ``src`` to ``dst``, replacing a file there (as ``os.replace``). The
        data does not move."""
        _native.file_rename(self._c, _file_name(src), _file_name(dst))

    def listdir(self, path: str = "") -> list[str]:
        """Names directly under directory ``path`` (a name prefix; "" is the root), like
        ``os.listdir``."""
        return [n for n, _ in _native.file_dir(self._c, _file_name(path))]

    def files(self, prefix: str = "") -> list[tuple[str, int]]:
        """Every file whose name starts with ``prefix``: (name, size), sorted by name."""
        return [(n, size) for n, size, _, _ in _native.file_list(self._c, _file_name(prefix)) if not n.endswith("/")]

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Makes directory ``path`` exist (a marker, so it is listed before anything is in it)."""
        try:
            _native.file_mkdir(self._c, _file_name(path))
        except AlreadyExistsError:
            if not (exist_ok and self.isdir(path)):
                raise

    def rmdir(self, path: str) -> None:
        """Removes an empty directory."""
        _native.file_rmdir(self._c, _file_name(path))

    # -- across sites -------------------------------------------------------------

    def pull(
        self,
        source: str,
        region: str | tuple | None = None,
        *,
        as_name: str | None = None,
        step: Sequence[int] | None = None,
        where: str | None = None,
        streams: int = 4,
    ) -> dict:
        """Copies an object, or a region of it, from a linked site into this deployment, as
        ``pdcx pull`` does: ``client.pull("cloud:run/vx", (slice(0, 16), slice(None), 5))``.

        ``source`` is ``SITE:NAME`` (a site added with ``pdcx remote add``) or the
        ``s3://BUCKET/KEY`` of a bundle pushed there. ``step`` moves a downsampled copy
        (received as ``NAME@step...``), ``where`` only a value query's hits (received as
        ``NAME@where/coords`` and ``/values``). A pull interrupted earlier resumes. Returns what
        moved (chunks, bytes, seconds)."""
        if source.startswith("s3://"):
            return self._c.xsite_pull(source, "")
        site, sep, name = source.partition(":")
        if not sep or not site or not name:
            raise InvalidArgumentError(f"pull takes 'SITE:NAME' or 's3://BUCKET/KEY', got {source!r}")
        return self._c.xsite_pull(
            site, name, _region_spec(region), as_name, list(step) if step else None, where, streams
        )

    def push(
        self,
        name: str,
        to: str,
        region: str | tuple | None = None,
        *,
        step: Sequence[int] | None = None,
        where: str | None = None,
        streams: int = 4,
        site: str | None = None,
        as_name: str | None = None,
    ) -> dict:
        """Copies object ``name`` (or a region of it) to linked site ``to``, or as a bundle to
        ``s3://BUCKET/PREFIX`` (``site``: this site's name in its provenance there), as
        ``pdcx push`` does; ``step`` a downsampled copy, ``where`` a value query's hits only
        (evaluated here), ``as_name`` the name there. Returns what moved."""
        return self._c.xsite_push(
            name, to, _region_spec(region), list(step) if step else None, streams, site, where, as_name
        )

    def query(self, *conditions: str, **equals: Any) -> list[str]:
        """Names of the objects whose tags satisfy every condition.

        Conditions are strings such as ``"step=3"``, ``"energy>=1.5"``, ``"species~elec*"``
        (glob; ``abc*`` is a prefix match), ``"units?"`` (tag exists), ``"name~run1/*"``.
        Keyword arguments are equality tests, or inclusive ranges when given a ``(lo, hi)``
        tuple: ``client.query(step=(2, 4), species="electron")``.
        """
        conds = list(conditions)
        for key, value in equals.items():
            if isinstance(value, tuple) and len(value) == 2:
                lo, hi = value
                if lo is not None:
                    conds.append(f"{key}>={lo!r}")
                if hi is not None:
                    conds.append(f"{key}<={hi!r}")
            elif isinstance(value, bool):  # stored as an int tag
                conds.append(f"{key}={int(value)}")
            elif isinstance(value, str):
                conds.append(f'{key}="{value}"')
            elif isinstance(value, bytes):
                conds.append(f"{key}=bytes:{value.hex()}")
            else:
                conds.append(f"{key}={value!r}")
        return [name for _, name in self._c.query(conds)]

    def where(
        self,
        condition: Condition,
        region: Any = None,
        coords: bool = True,
        values: Iterable[Object] | None = None,
        bins: int = 0,
        max_hits: int = 0,
        first: Object | None = None,
    ) -> Hits:
        """Evaluates ``condition`` (e.g. ``(energy > 1.2) & (x < 100)``) where the data lives:
        the owner of its first object reads every object of the condition (and ``values``)
        and sends back only the hits. ``region`` (an index such as ``np.s_[0:10, :]``, no
        steps) restricts the search; ``coords=False`` skips the coordinates; ``values``: the
        objects whose values at the hits to return (default: the condition's first object);
        ``bins``: a histogram of the first object's hit values."""
        if not isinstance(condition, Condition):
            raise InvalidArgumentError(f"expected a Condition such as (obj > 0.5) & (obj < 2), got {condition!r}")
        expr = condition._expr
        if first is not None and condition._objects[0].id != first.id:
            raise InvalidArgumentError("the histogram's object must come first in its condition")
        objs = condition._objects
        shape = objs[0].shape
        vals = [objs[0]] if values is None else list(values)
        offset = count = None
        if region is not None:
            offset, count, step, _ = _normalize_index(region, shape)
            if any(s != 1 for s in step):
                raise InvalidArgumentError("a query region has no steps: use slices like 0:10")
            if 0 in count:
                return Hits({"nhits": 0}, np.empty((0, len(shape)), np.uint64) if coords else None, {})
        text, payload = self._c.value_query(
            json.dumps(_postfix(expr)), offset, count, coords, [o.id for o in vals], int(bins), int(max_hits)
        )
        answer = json.loads(text)
        n = int(answer["nhits"])
        nd = int(answer["ndim"])
        at = 0
        coord_arr = None
        if coords:
            coord_arr = np.frombuffer(payload, dtype="<u8", count=n * nd).reshape(n, nd)
            at = n * nd * 8
        values_of = {}
        for o in vals:
            dt = o.dtype
            values_of[o.name] = np.frombuffer(payload, dtype=dt, count=n, offset=at)
            at += n * dt.itemsize
        return Hits(answer, coord_arr, values_of)

    def stats(self) -> list[dict]:
        """Per-server statistics (objects, extents, log and cache bytes, tiers, flush queue, ...)."""
        return [json.loads(self._c.stats(r)) for r in range(self.servers)]

    def flush(self, wait: bool = True) -> list[dict]:
        """Flushes every server's committed data to its storage tiers (declared in the
        deployment's pdcx.toml). With `wait`, returns once nothing is pending or a tier fails;
        each report has `pending_extents` and, if a tier failed, `error` (the data then stays
        safe in the server's log and the background flush retries)."""
        if wait:
            # Kick every flusher first so the servers flush in parallel, then wait for each.
            for r in range(self.servers):
                self._c.flush(r, False)
        return [json.loads(self._c.flush(r, wait)) for r in range(self.servers)]

    def close(self) -> None:
        """Makes this client's relaxed writes visible (:meth:`sync`) and stops the private
        server of an embedded client."""
        self._c.sync(None)
        if self._embedded is not None:
            self._embedded.close()
            self._embedded = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "embedded" if self._embedded else self.root
        return f"<pdcx.Client {where} servers={self.servers}>"


class Container:
    """A named, tagged collection of objects."""

    def __init__(self, client: Client, info: dict):
        self._client = client
        self._info = info

    @property
    def name(self) -> str:
        return self._info["name"]

    @property
    def tags(self) -> TagView:
        return TagView(self._client, container=self.name, initial=self._info["tags"])

    def create_object(
        self,
        name: str,
        shape: int | Iterable[int],
        dtype: Any = "float64",
        tags: dict | None = None,
        fill: Any = None,
    ) -> Object:
        """Creates an N-d array object (1..8 dims) in this container.

        ``fill`` is returned for never-written elements (default 0). Dims may grow later
        (``obj.resize``), so a size unknown up front is fine.

        When this returns the object is visible to every client and usable, and a taken name
        has raised ``AlreadyExistsError`` here. It survives a server crash (kill -9 or power
        loss) within about 5 ms and one fsync, and for certain after this client's next
        consistency point (a write, :meth:`Client.sync`, :meth:`Client.close`); its id is never
        given to another object, even if a crash before then loses it.
        """
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        dt = _pdcx_dtype(dtype)
        fill_bytes = None if fill is None else np.asarray(fill, dtype=_np_dtype(dt)).tobytes()
        meta = self._client._c.create_object(name, list(shape), dt, [self.name], _tag_items(tags), fill_bytes)
        return Object(self._client, json.loads(meta))

    def create_composite(self, name: str, shape: int | Iterable[int], fields: Any, tags: dict | None = None) -> Object:
        """Creates a composite object (as in the object-sharding paper): an array of fixed-size
        records of several variables (an array of structs), e.g. ``fields=[("x", "<f4"), ("id", "<i8")]``.

        It is stored as a ``bytes`` object with one extra trailing dim of the record size and
        the record layout in the ``pdcx.fields`` tag, so every region, tier and placement
        feature applies, and one field of a range of records can be read (or written) alone:
        ``obj.field("x")[10:20]`` moves only those bytes. ``obj.records[...]`` reads whole
        records as a numpy structured array.
        """
        dt = _record_dtype(fields)
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        layout = {"itemsize": dt.itemsize, "fields": [[n, dt.fields[n][0].str, dt.fields[n][1]] for n in dt.names]}
        all_tags = dict(tags or {})
        all_tags[FIELDS_TAG] = json.dumps(layout)
        return self.create_object(name, shape + (dt.itemsize,), "bytes", tags=all_tags)

    def create_objects(
        self, specs: Iterable[dict], *, raise_on_error: bool = False, lazy: bool = False
    ) -> list[Object | PdcxError]:
        """Creates many objects in this container with one request and one metadata
        transaction per server (much faster than ``create_object`` in a loop).

        Each spec is a dict with the arguments of ``create_object``: ``name``, ``shape`` and
        optionally ``dtype``, ``tags``, ``fill``. Returns one item per spec, in order: the
        ``Object``, or the exception for that object (e.g. ``AlreadyExistsError``): one bad
        spec does not fail the others. With ``raise_on_error=True`` the first such exception is
        raised instead (after every other object was created). Every returned object is durable,
        or with ``lazy=True`` (faster: no fsync waited) visible and checked as with
        ``create_object`` and durable at this client's next consistency point.
        """
        native = []
        for spec in specs:
            shape = spec["shape"]
            shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
            dt = _pdcx_dtype(spec.get("dtype", "float64"))
            fill = spec.get("fill")
            fill_bytes = None if fill is None else np.asarray(fill, dtype=_np_dtype(dt)).tobytes()
            native.append((spec["name"], list(shape), dt, [self.name], _tag_items(spec.get("tags")), fill_bytes))
        out: list[Object | PdcxError] = []
        for r in self._client._c.create_objects(native, lazy):
            if isinstance(r, str):
                out.append(Object(self._client, json.loads(r)))
            elif raise_on_error:
                raise r
            else:
                out.append(r)
        return out

    def add(self, obj: Object) -> None:
        """Adds an existing object to this container too (objects may be in several)."""
        self._client._c.add_to_container(obj.id, self.name)

    def objects(self) -> list[Object]:
        return self._client.objects(self.name)

    def __repr__(self) -> str:
        return f"<pdcx.Container {self.name!r} tags={self._info['tags']}>"


class TagView(MutableMapping):
    """Dict-like, write-through view of an object's or container's tags."""

    def __init__(self, client: Client, obj: Object | None = None, container: str | None = None, initial=None):
        self._client, self._obj, self._container = client, obj, container
        self._cache = _decode_tags(initial or {})

    def _refresh(self) -> dict:
        if self._obj is not None:
            self._obj._meta = json.loads(self._client._c.get_object(self._obj.id))
            self._cache = _decode_tags(self._obj._meta["tags"])
        else:
            self._cache = _decode_tags(json.loads(self._client._c.get_container(self._container))["tags"])
        return self._cache

    def __getitem__(self, key: str) -> Any:
        return self._refresh()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if self._obj is not None:
            self._client._c.put_object_tags(self._obj.id, [(key, value)])
        else:
            self._client._c.put_container_tags(self._container, [(key, value)])

    def update(self, other=(), /, **kw) -> None:  # one round trip for many tags
        items = _tag_items({**dict(other), **kw})
        if self._obj is not None:
            self._client._c.put_object_tags(self._obj.id, items)
        else:
            self._client._c.put_container_tags(self._container, items)

    def __delitem__(self, key: str) -> None:
        try:
            if self._obj is not None:
                self._client._c.delete_object_tag(self._obj.id, key)
            else:
                self._client._c.delete_container_tag(self._container, key)
        except NotFoundError as e:
            raise KeyError(key) from e

    def __iter__(self):
        return iter(self._refresh())

    def __len__(self) -> int:
        return len(self._refresh())

    def __repr__(self) -> str:
        return f"TagView({self._refresh()!r})"


def _expand_key(key: Any, ndim: int) -> tuple:
    """An index as one entry per dim: '...' expanded, missing trailing dims as ':'."""
    if not isinstance(key, tuple):
        key = (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (ndim - len(key) + 1) + key[i + 1 :]
    if len(key) > ndim:
        raise IndexError(f"too many indices: object has {ndim} dims, got {len(key)}")
    return key + (slice(None),) * (ndim - len(key))


def _normalize_index(key: Any, shape: tuple) -> tuple[list, list, list, list]:
    """numpy basic indexing -> (offset, count, step, dims to drop) over the object's shape."""
    offset, count, step, drop = [], [], [], []
    for d, (k, n) in enumerate(zip(_expand_key(key, len(shape)), shape)):
        if isinstance(k, (int, np.integer)):
            k = int(k)
            if k < -n or k >= n:
                raise IndexError(f"index {k} is out of bounds for dim {d} with size {n}")
            offset.append(k % n)
            count.append(1)
            step.append(1)
            drop.append(d)
        elif isinstance(k, slice):
            start, stop, st = k.indices(n)
            if st <= 0:
                raise IndexError("negative slice steps are not supported")
            c = len(range(start, stop, st))
            offset.append(start)
            count.append(0 if c == 0 else (c - 1) * st + 1)
            step.append(st)
        else:
            raise IndexError(f"unsupported index {k!r}: use ints, slices and '...'")
    return offset, count, step, drop


def _tier_box(key: Any, shape: tuple) -> str:
    """An index (ints, slices without steps, '...') as a tier rule's box ``lo:hi,...``.
    Negative bounds count from the current end; a slice without a stop stays open (the rule
    follows the dim as it grows); the server checks the bounds against the object."""
    parts = []
    for d, (k, n) in enumerate(zip(_expand_key(key, len(shape)), shape)):
        if isinstance(k, (int, np.integer)):
            k = int(k)
            if k < -n or k >= n:
                raise IndexError(f"index {k} is out of bounds for dim {d} with size {n}")
            parts.append(f"{k % n}:{k % n + 1}")
        elif isinstance(k, slice) and k.step in (None, 1):
            lo, hi = (None if b is None else operator.index(b) for b in (k.start, k.stop))
            lo = 0 if lo is None else max(lo + n, 0) if lo < 0 else lo
            hi = "" if hi is None else max(hi + n, 0) if hi < 0 else hi
            parts.append(f"{lo}:{hi}")
        else:
            raise IndexError(f"unsupported tier region index {k!r}: use ints, slices without a step and '...'")
    return ",".join(parts)


def _ints(what: str, values) -> list[int]:
    """A region's offset or shape as ints, with an error that says how to pass slices."""
    try:
        return [operator.index(v) for v in np.atleast_1d(np.asarray(values, dtype=object))]
    except TypeError:
        raise InvalidArgumentError(
            f"{what} must be integers, one per dimension (got {values!r}); for slices index the "
            "object instead: obj[10:20, ::2]"
        ) from None


class Object:
    """A typed N-d array stored in pdcx. Index it like a numpy array."""

    def __init__(self, client: Client, meta: dict):
        self._client = client
        self._meta = meta

    @property
    def id(self) -> int:
        return self._meta["id"]

    @property
    def name(self) -> str:
        return self._meta["name"]

    @property
    def shape(self) -> tuple:
        return tuple(self._meta["dims"])

    @property
    def ndim(self) -> int:
        return len(self._meta["dims"])

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def dtype(self) -> np.dtype:
        return _np_dtype(self._meta["dtype"])

    @property
    def fill_value(self) -> Any:
        return np.frombuffer(bytes(self._meta["fill"]), dtype=self.dtype)[0]

    @property
    def tags(self) -> TagView:
        return TagView(self._client, obj=self, initial=self._meta["tags"])

    @property
    def metadata(self) -> dict:
        """System metadata: id, name, owner server, creator, ctime, mtime, dims, dtype, containers."""
        self._meta = json.loads(self._client._c.get_object(self.id))
        return {k: v for k, v in self._meta.items() if k not in ("tags", "fill")}

    def resize(self, shape: Iterable[int]) -> None:
        """Grows the object's dims (they may not shrink: that would hide written data; the C
        API's ``PDCobj_set_dims`` shrinks, as PDC's does)."""
        new = [int(s) for s in shape]
        if len(new) == self.ndim and any(n < c for n, c in zip(new, self.shape)):
            raise InvalidArgumentError(f"resize only grows: {self.name} is {self.shape}, asked {tuple(new)}")
        self._meta = json.loads(self._client._c.set_dims(self.id, new))

    def refresh(self) -> None:
        """Reloads metadata (e.g. dims grown by another client)."""
        self._meta = json.loads(self._client._c.get_object(self.id))

    @property
    def durability(self) -> str:
        """The least durability every wait on this object gets, whatever a write asks for
        (tag ``pdcx.durability``; ``"local"`` when unset, the default of writes):

        - ``"memory"``: visible when ``wait`` returns; lost if the data server dies before its
          next sync;
        - ``"local"``: also fsynced in the data server's log; survives a server crash;
        - ``"remote"``: also on a tier that survives the loss of the node (a shared directory or
          S3, ``pdcx.toml``) with its home recorded durably. Setting it on a deployment without
          such a tier raises :class:`InvalidArgumentError`.

        A write can ask for more than this with ``durability=`` (:meth:`write_async`)."""
        v = self.tags.get("pdcx.durability", "local")
        return v if isinstance(v, str) else "local"

    @durability.setter
    def durability(self, level: str) -> None:
        self.tags["pdcx.durability"] = level

    def set_consistency(self, mode: str, expected_writes: int = 0) -> None:
        """When this client's later writes of the object become visible to others.

        ``"strong"`` (default): when ``wait`` (or the assignment) returns. ``"relaxed"``: the
        write is durable when ``wait`` returns, but a data server that is not the object's
        owner registers it with the owner (which makes it visible) later and in batches: once
        it holds ``expected_writes`` such writes of the object (0: no count), at
        :meth:`sync`, on its timer (``PDCX_LAZY_FLUSH_MS``, default 100 ms) or at shutdown.
        Until then readers see the object without it. Overlapping relaxed writes resolve in
        registration order (a data server keeps its own commit order)."""
        self._client._c.set_consistency(self.id, mode, int(expected_writes))

    @property
    def consistency(self) -> tuple[str, int]:
        """``(mode, expected_writes)`` of this client's writes of the object."""
        return self._client._c.consistency(self.id)

    def sync(self) -> None:
        """The consistency point of this client's relaxed writes of the object: when it
        returns they are visible to every reader."""
        self._client._c.sync([self.id])

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        a = self[...]
        return a if dtype is None else a.astype(dtype)

    def __getitem__(self, key: Any) -> np.ndarray:
        offset, count, step, drop = _normalize_index(key, self.shape)
        # Steps are applied by the object's owner, so only the selected elements travel.
        picked = [-(-c // s) for c, s in zip(count, step)]
        out = np.empty(picked, dtype=self.dtype)
        if out.size:
            buf = memoryview(out.reshape(-1).view(np.uint8))
            if any(s != 1 for s in step):
                self._client._c.read_strided(self.id, offset, count, step, buf)
            else:
                self._client._c.read_into(self.id, offset, count, buf)
        return out.reshape([c for d, c in enumerate(out.shape) if d not in drop]) if drop else out

    def points(self, coords: Any) -> np.ndarray:
        """The elements at ``coords`` (an ``(n, ndim)`` array of indices, e.g.
        :attr:`Hits.coords`), in that order; the object's owner picks them, so only they
        travel."""
        c = np.asarray(coords)
        if c.ndim == 1 and self.ndim == 1:
            c = c.reshape(-1, 1)
        if c.ndim != 2 or c.shape[1] != self.ndim:
            raise InvalidArgumentError(f"coords must be an (n, {self.ndim}) array of indices, got shape {c.shape}")
        if c.size and (not np.issubdtype(c.dtype, np.integer) or c.min() < 0):
            raise InvalidArgumentError("coords must be non-negative integers")
        out = np.empty(len(c), dtype=self.dtype)
        if len(c):
            flat = np.ascontiguousarray(c, dtype="<u8").tobytes()
            self._client._c.read_points(self.id, self.ndim, flat, memoryview(out.view(np.uint8)))
        return out

    # ---- value queries (evaluated by the servers that hold the data) ----
    def __gt__(self, value: Any) -> Condition:
        return Condition._cond(self, "Gt", value)

    def __ge__(self, value: Any) -> Condition:
        return Condition._cond(self, "Ge", value)

    def __lt__(self, value: Any) -> Condition:
        return Condition._cond(self, "Lt", value)

    def __le__(self, value: Any) -> Condition:
        return Condition._cond(self, "Le", value)

    def eq(self, value: Any) -> Condition:
        """The condition ``element == value`` (``==`` itself keeps comparing objects)."""
        return Condition._cond(self, "Eq", value)

    def where(
        self,
        condition: Condition | str,
        region: Any = None,
        coords: bool = True,
        values: bool = True,
        bins: int = 0,
    ) -> Hits:
        """The elements of this object that satisfy ``condition``, found by the servers: e.g.
        ``obj.where((obj > 0.95) & (obj < 2))`` or ``obj.where("> 0.95 & < 2")`` (conditions on
        this object). ``region`` restricts the search (an index such as ``np.s_[0:10, :]``).
        Returns :class:`Hits` with this object's values at the hits."""
        if isinstance(condition, str):
            condition = Condition._parse_on(self, condition)
        return self._client.where(condition, region=region, coords=coords, values=[self] if values else [], bins=bins)

    def histogram(self, bins: int = 10, condition: Condition | None = None, region: Any = None) -> tuple:
        """``(counts, edges)`` of this object's values (those satisfying ``condition``, if
        given), computed by the servers: ``bins`` equal bins over [min, max]."""
        if condition is None:
            condition = (self >= 0) | (self < 0)  # every element but NaNs
        h = self._client.where(condition, region=region, coords=False, values=[], bins=bins, first=self)
        lo, hi = (h.min, h.max) if h.count else (0.0, 0.0)
        return np.asarray(h.histogram, dtype=np.uint64), np.linspace(lo, hi, bins + 1)

    def __setitem__(self, key: Any, value: Any) -> None:
        offset, count, step, drop = _normalize_index(key, self.shape)
        if 0 in count:
            return
        # Broadcast like numpy against the selection's shape (int-indexed dims dropped), then
        # put those dims back as length 1 so the value lines up with the region.
        picked = [len(range(0, c, s)) for c, s in zip(count, step)]
        kept = [n for d, n in enumerate(picked) if d not in drop]
        value = np.broadcast_to(np.asarray(value, dtype=self.dtype), kept).reshape(picked)
        if any(s != 1 for s in step):
            # Strided write: read the bounding box, assign, write it back. Not atomic against a
            # concurrent writer of the elements in between the strides.
            box = self[tuple(slice(o, o + c) for o, c in zip(offset, count))]
            box[tuple(slice(None, None, s) for s in step)] = value
            data = box
        else:
            data = value
        buf = np.ascontiguousarray(data, dtype=self.dtype)
        self._client._c.write(self.id, offset, count, memoryview(buf.reshape(-1).view(np.uint8)), "local")

    def _region(self, offset, shape) -> tuple[list, list]:
        offset = [0] * self.ndim if offset is None else _ints("offset", offset)
        if shape is None:
            shape = [n - o for n, o in zip(self.shape, offset)]
        return offset, _ints("shape", shape)

    def transfer(
        self, mode: str, array=None, offset=None, shape=None, durability: str = "local", tier: str | None = None
    ) -> Transfer:
        """Creates an unstarted transfer (``mode`` "w" or "r") of the region at ``offset``.
        ``tier`` (writes only) first sets the region's placement, as :meth:`set_tier`."""
        if tier is not None and mode != "w":
            raise InvalidArgumentError("tier= applies to writes only")
        if mode == "w":
            if array is None:
                raise InvalidArgumentError("a write transfer needs an array")
            array = np.asarray(array)
            shape = array.shape if shape is None else shape
        elif mode != "r":
            raise InvalidArgumentError("mode must be 'w' or 'r'")
        off, cnt = self._region(offset, shape)
        if tier is not None:
            self.set_tier(tuple(slice(o, o + c) for o, c in zip(off, cnt)), tier)
        native = self._client._c.transfer(
            self.id, self._meta["dtype"], list(self.shape), off, cnt, mode == "w", durability
        )
        return Transfer(self, native, array, tuple(cnt))

    def write_async(self, array, offset=None, durability: str = "local", tier: str | None = None) -> Transfer:
        """Starts writing ``array`` at ``offset``; the array may be reused as soon as this returns.
        ``durability`` is what ``wait`` guarantees: ``"memory"``, ``"local"`` or ``"remote"``
        (see :attr:`durability`; the object's own level applies if higher). ``tier`` first sets
        where the region goes when flushed (see :meth:`set_tier`)."""
        t = self.transfer("w", array, offset, durability=durability, tier=tier)
        t.start()
        return t

    def set_tier(self, region: Any, tier: str) -> None:
        """Where data of this object goes when the server flushes it from its log to a tier.

        ``tier`` is a tier name from the deployment's ``pdcx.toml``, quotas like
        ``"ssd:25%,s3"``, or ``"auto"``. ``region`` None (or ``...``) sets the whole-object hint
        (tag ``pdcx.tier``); an index as ``obj[...]`` takes (ints, slices without a step; a
        slice without a stop follows the dim as it grows) appends a rule to
        ``pdcx.tier.regions``, atomically on the object's owner, so ranks hinting their own
        blocks at once lose none. A flushed extent takes the last rule whose region holds all
        of it, else the whole-object hint. It applies to data flushed from now on;
        ``pdcx migrate`` moves what is already on a tier."""
        if not isinstance(tier, str) or any(c in tier for c in ";="):
            raise InvalidArgumentError(f"tier must be a pdcx.tier spec like 'ssd' or 'ssd:25%,s3', got {tier!r}")
        if region is None or region is Ellipsis:
            self.tags[TIER_TAG] = tier
        else:
            self.tags[TIER_RULES_TAG] = f"+{_tier_box(region, self.shape)}={tier}"

    def tier_rules(self) -> list[tuple[tuple[slice, ...], str]]:
        """The per-region placement rules, in order (later ones win where regions overlap):
        ``(index, tier)`` pairs, ``index`` a tuple of slices (stop None: to the end of the dim)."""
        self.refresh()
        text = _decode_tags(self._meta["tags"]).get(TIER_RULES_TAG, "")
        rules = []
        for rule in filter(None, (r.strip() for r in text.split(";"))):
            box, tier = rule.split("=", 1)
            bounds = [[b.strip() for b in d.split(":", 1)] for d in box.split(",")]
            index = tuple(slice(int(lo or 0), int(hi) if hi else None) for lo, hi in bounds)
            rules.append((index, tier.strip()))
        return rules

    def read_async(self, offset=None, shape=None) -> Transfer:
        """Starts reading a region; ``.wait()`` (or ``.result()``) returns it as an array."""
        t = self.transfer("r", offset=offset, shape=shape)
        t.start()
        return t

    @property
    def record_dtype(self) -> np.dtype | None:
        """The record layout of a composite object (a numpy structured dtype), else None."""
        raw = self.tags.get(FIELDS_TAG) if self._meta["dtype"] == "bytes" else None
        if raw is None:
            return None
        layout = json.loads(raw)
        return np.dtype(
            {
                "names": [f[0] for f in layout["fields"]],
                "formats": [f[1] for f in layout["fields"]],
                "offsets": [f[2] for f in layout["fields"]],
                "itemsize": layout["itemsize"],
            }
        )

    def _records_dtype(self) -> np.dtype:
        dt = self.record_dtype
        if dt is None:
            raise InvalidArgumentError(f"{self.name} is not a composite object (see Container.create_composite)")
        return dt

    @property
    def records(self) -> _RecordView:
        """Whole records of a composite object: ``obj.records[0:100]`` is a structured array;
        ``obj.records[0:2] = arr`` writes records."""
        return _RecordView(self, self._records_dtype(), None)

    def field(self, name: str) -> _RecordView:
        """One field of a composite object's records: reads and writes move only its bytes."""
        dt = self._records_dtype()
        if name not in dt.names:
            raise InvalidArgumentError(f"{self.name} has no field {name!r} (fields: {', '.join(dt.names)})")
        return _RecordView(self, dt, name)

    def extents(self) -> list[dict]:
        """Where the bytes are: the committed extents of this object, each with the ``server``
        whose log holds it (extents on the owner also give their log location)."""
        return json.loads(self._client._c.extents(self.id))

    def __repr__(self) -> str:
        return f"<pdcx.Object {self.name!r} shape={self.shape} dtype={self._meta['dtype']}>"


class _RecordView:
    """Indexes a composite object by record (all dims but the trailing byte dim)."""

    def __init__(self, obj: Object, dt: np.dtype, field: str | None):
        self._obj, self._dt, self._field = obj, dt, field
        if field is None:
            self._cols, self._out = slice(0, dt.itemsize), dt
        else:
            fdt, off = dt.fields[field][0], dt.fields[field][1]
            self._cols, self._out = slice(off, off + fdt.itemsize), fdt

    @property
    def shape(self) -> tuple:
        return self._obj.shape[:-1]

    def _key(self, key: Any) -> tuple:
        key = key if isinstance(key, tuple) else (key,)
        if any(k is Ellipsis for k in key):
            i = key.index(Ellipsis)
            key = key[:i] + (slice(None),) * (len(self.shape) - len(key) + 1) + key[i + 1 :]
        if len(key) > len(self.shape):
            raise InvalidArgumentError(f"too many indices for records of shape {self.shape}")
        return key + (slice(None),) * (len(self.shape) - len(key)) + (self._cols,)

    def __getitem__(self, key: Any) -> np.ndarray:
        raw = np.ascontiguousarray(self._obj[self._key(key)])
        return raw.view(np.uint8).view(self._out)[..., 0]

    def __setitem__(self, key: Any, value: Any) -> None:
        value = np.ascontiguousarray(np.asarray(value, dtype=self._out))
        raw = value.reshape(value.shape + (1,)).view(np.uint8).view("S1")
        self._obj[self._key(key)] = raw

    def __repr__(self) -> str:
        what = "records" if self._field is None else f"field {self._field!r}"
        return f"<pdcx {what} of {self._obj.name!r} shape={self.shape}>"


class Condition:
    """A condition on objects' elements, built from objects: ``(energy > 1.2) & (x < 100)``
    (``&``, ``|``; ``obj.eq(v)`` for equality). Evaluated by the servers where the data lives
    (:meth:`Client.where`, :meth:`Object.where`); objects of one query must have one shape."""

    def __init__(self, expr: dict, objects: list[Object]):
        self._expr = expr
        self._objects = objects

    @staticmethod
    def _cond(obj: Object, op: str, value: Any) -> Condition:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise InvalidArgumentError(f"a condition compares elements with a number, got {value!r}")
        if isinstance(value, (int, np.integer)):
            v = int(value)
            if -(2**63) <= v < 2**63:
                scalar = {"Int": v}
            elif 0 <= v < 2**64:
                scalar = {"UInt": v}
            else:
                raise InvalidArgumentError(f"{v} does not fit 64 bits")
        else:
            f = float(value)
            if not np.isfinite(f):
                raise InvalidArgumentError(f"compare elements with a finite number, not {f}")
            scalar = {"Float": f}
        return Condition({"Cond": {"obj": obj.id, "op": op, "value": scalar}}, [obj])

    @staticmethod
    def _parse_on(obj: Object, text: str) -> Condition:
        """``"> 0.95 & < 2"``: conditions on one object, joined by & and |."""
        import re

        ops = {">=": "Ge", "<=": "Le", ">": "Gt", "<": "Lt", "==": "Eq"}
        parts = re.split(r"\s*(&&?|\|\|?)\s*", text.strip())
        cond = None
        join = None
        for i, part in enumerate(parts):
            if i % 2:
                join = part[0]
                continue
            m = re.fullmatch(r"(>=|<=|==|>|<)\s*(\S+)", part)
            if not m:
                raise InvalidArgumentError(f"cannot parse {part!r} in {text!r}; example: '> 0.95 & < 2'")
            num = m.group(2)
            try:
                value = int(num)
            except ValueError:
                try:
                    value = float(num)
                except ValueError:
                    raise InvalidArgumentError(f"{num!r} is not a number in {text!r}") from None
            c = Condition._cond(obj, ops[m.group(1)], value)
            cond = c if cond is None else (cond & c if join == "&" else cond | c)
        if cond is None:
            raise InvalidArgumentError("empty condition")
        return cond

    def _join(self, other: Condition, how: str) -> Condition:
        if not isinstance(other, Condition):
            return NotImplemented
        objs = list(self._objects) + [o for o in other._objects if all(o.id != p.id for p in self._objects)]
        return Condition({how: [self._expr, other._expr]}, objs)

    def __and__(self, other: Condition) -> Condition:
        return self._join(other, "And")

    def __or__(self, other: Condition) -> Condition:
        return self._join(other, "Or")

    def __bool__(self) -> bool:
        raise TypeError("a pdcx Condition has no truth value: combine conditions with & and |, not 'and'/'or'")

    def __repr__(self) -> str:
        names = {o.id: o.name for o in self._objects}

        def show(e: dict) -> str:
            ((k, v),) = e.items()
            if k == "Cond":
                sym = {"Gt": ">", "Ge": ">=", "Lt": "<", "Le": "<=", "Eq": "=="}[v["op"]]
                ((_, val),) = v["value"].items()
                return f"{names.get(v['obj'], v['obj'])} {sym} {val}"
            return f"({show(v[0])} {'&' if k == 'And' else '|'} {show(v[1])})"

        return f"Condition({show(self._expr)})"


def _postfix(expr: dict) -> list:
    """A condition tree as the servers take it: its nodes in postfix order (conditions, then
    "And"/"Or" combining the last two), so decoding never recurses."""
    ((kind, v),) = expr.items()
    if kind == "Cond":
        return [expr]
    return _postfix(v[0]) + _postfix(v[1]) + [kind]


class Hits:
    """What a value query found: ``count``; ``coords`` (an ``(count, ndim)`` uint64 array,
    C order of the hits); ``values`` (the first asked object's values at the hits) and
    ``values_of[name]`` for each asked object; ``min``/``max`` of the first object's hit
    values; ``histogram`` when bins were asked; ``scanned_bytes``/``skipped_bytes``: object
    data the servers read, and skipped thanks to per-extent statistics."""

    def __init__(self, answer: dict, coords: np.ndarray | None, values_of: dict):
        self.count = int(answer["nhits"])
        self.coords = coords
        self.values_of = values_of
        self.values = next(iter(values_of.values())) if values_of else None
        self.min = answer.get("min")
        self.max = answer.get("max")
        self.histogram = list(answer.get("histogram") or [])
        self.scanned_bytes = int(answer.get("scanned_bytes", 0))
        self.skipped_bytes = int(answer.get("skipped_bytes", 0))

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"Hits(count={self.count}, min={self.min}, max={self.max})"


class Transfer:
    """One region of one object moving one way: ``start`` -> ``status`` -> ``wait``."""

    def __init__(self, obj: Object, native: _native.Transfer, array, shape: tuple):
        self.object = obj
        self._t = native
        self._array = array
        self._shape = shape
        self._result = None

    def _load(self) -> None:
        if self._t.is_write:
            buf = np.ascontiguousarray(self._array, dtype=self.object.dtype)
            self._t.load(memoryview(buf.reshape(-1).view(np.uint8)))

    def start(self) -> None:
        """Copies the data now (writes) and sends it in the background. May be restarted after wait."""
        self._load()
        self._t.start()

    def status(self) -> str:
        """ "idle" (not started), "pending", "complete" (the server holds the data) or "failed"."""
        return self._t.status()[0]

    @property
    def error(self) -> str | None:
        _, kind, message = self._t.status()
        return None if kind is None else f"{kind}: {message}"

    def wait(self) -> np.ndarray | None:
        """The consistency point: after it, a write is visible to every later transfer."""
        self._t.wait()
        return self._collect()

    def _collect(self):
        if not self._t.is_write:
            buf = self._t.take_result()
            if buf is not None:
                self._result = np.frombuffer(buf, dtype=self.object.dtype).reshape(self._shape)
            return self._result
        return None

    def result(self) -> np.ndarray:
        """The data of a read transfer (waits if needed)."""
        if self._t.is_write:
            raise InvalidArgumentError("result() is for read transfers")
        if self._result is None:
            self.wait()
        return self._result

    def __repr__(self) -> str:
        kind = "write" if self._t.is_write else "read"
        return f"<pdcx.Transfer {kind} {self.object.name!r} shape={self._shape} {self.status()}>"


def _unique(transfers: Iterable[Transfer]) -> list[Transfer]:
    """The transfers in order, each once (the native layer borrows each one mutably)."""
    return list({id(t): t for t in transfers}.values())


def requests_sent() -> int:
    """Requests this process has sent to pdcx servers so far (all clients and threads): the
    difference across a call counts its round trips."""
    return _native.requests_sent()


def start_all(transfers: Iterable[Transfer]) -> None:
    """Starts many transfers with one message per destination server."""
    ts = _unique(transfers)
    for t in ts:
        t._load()
    _native.start_all([t._t for t in ts])


def wait_all(transfers: Iterable[Transfer]) -> None:
    """Waits for many transfers with one commit per server; raises the first failure."""
    ts = _unique(transfers)
    try:
        _native.wait_all([t._t for t in ts])
    finally:
        for t in ts:
            t._collect()
