"""Tags: the names of the tags pdcx itself reads, the encoding of tag values for the native
layer, and :class:`TagView`, the dict-like view of an object's or container's tags."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from ._native import InvalidArgumentError, NotFoundError

if TYPE_CHECKING:  # annotations only: the client and objects import this module
    from ._client import Client
    from ._object import Object

FIELDS_TAG = "pdcx.fields"
TIER_TAG = "pdcx.tier"
TIER_RULES_TAG = "pdcx.tier.regions"


def _decode_tags(raw: dict) -> dict:
    return {k: bytes(v["__bytes__"]) if isinstance(v, dict) else v for k, v in raw.items()}


def _tag_items(tags: dict | None) -> list:
    if not tags:
        return []
    if not isinstance(tags, dict):
        raise InvalidArgumentError("tags must be a dict of name -> str/int/float/bytes")
    return [(str(k), v) for k, v in tags.items()]


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
