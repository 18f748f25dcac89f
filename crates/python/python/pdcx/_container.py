"""Containers: :class:`Container`, a named, tagged collection, and the creation of objects in
it (one at a time, composite, or many in one request)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ._dtypes import _np_dtype, _pdcx_dtype, _record_dtype
from ._native import PdcxError
from ._object import Object
from ._tags import FIELDS_TAG, TagView, _tag_items

if TYPE_CHECKING:  # annotations only: the client imports this module
    from ._client import Client


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
