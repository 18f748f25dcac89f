"""The connection: :func:`connect` (to a deployment, or a private embedded server) and
:class:`Client`, which opens containers, objects and files, queries, and moves data across
sites."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any, Self

import numpy as np

from . import _native
from . import files as _files
from ._container import Container
from ._indexing import _normalize_index, _region_spec
from ._native import AlreadyExistsError, InvalidArgumentError, UnavailableError
from ._object import Object
from ._query import Condition, Hits, _postfix
from ._tags import _tag_items


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


def connect(root: str | os.PathLike | None = None, *, embedded: bool = False) -> Client:
    """Connects to a pdcx deployment.

    - ``connect(root="/path")`` joins the deployment whose servers were started with that root
      (``pdcx server start -n 2 --root /path`` or ``mpirun -n 2 pdcx server --root /path``).
    - ``connect()`` with ``PDCX_ROOT`` set joins that one.
    - ``connect(embedded=True)`` starts a private server in this process, in a temporary
      directory that is removed at exit: a scratch store, nothing to set up.
    - ``connect()`` with neither a root nor ``PDCX_ROOT`` does the same, but says so on stderr
      (where, and that it is deleted at exit), so data meant to be kept is never lost silently.
    """
    if embedded and root is not None:
        raise InvalidArgumentError("connect(): give a root or embedded=True, not both")
    if embedded or (root is None and not os.environ.get("PDCX_ROOT")):
        if int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1"))) > 1:
            raise UnavailableError(
                "running under MPI with no deployment: start servers first "
                "(pdcx server start -n 2 --root DIR) and set PDCX_ROOT=DIR, so all ranks share them"
            )
        emb = _Embedded()
        if not embedded:
            print(
                f"pdcx: no root given and PDCX_ROOT unset: using a private store in {emb.dir}, "
                "deleted at exit (connect(root=DIR) keeps data; connect(embedded=True) says nothing)",
                file=sys.stderr,
                flush=True,
            )
        client = Client(_native.Client(emb.dir))
        client._embedded = emb
        return client
    return Client(_native.Client(None if root is None else os.fspath(root)))


def _file_name(name: str) -> str:
    """A file name without its optional ``pdcx://`` scheme."""
    return name.removeprefix("pdcx://")


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
        (evaluated here), ``as_name`` the name there. A linked site files what this site pushes
        under this site's name (``SITE/NAME``) unless it granted the name (``pdcx remote
        grant``). Returns what moved."""
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
