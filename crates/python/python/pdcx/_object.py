"""Objects: :class:`Object`, a typed N-d array indexed like numpy (reads, writes, transfers,
tier hints, value queries on it), and the record views of composite objects."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ._dtypes import _np_dtype
from ._indexing import _ints, _normalize_index, _tier_box
from ._native import InvalidArgumentError, NotFoundError
from ._query import Condition, Hits
from ._tags import FIELDS_TAG, TIER_RULES_TAG, TIER_TAG, TagView, _decode_tags
from ._transfer import Transfer

if TYPE_CHECKING:  # annotations only: the client imports this module
    from ._client import Client


VERSION_TAG_PREFIX = "pdcx.version."


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
        """The element type. An object created without one (PDC programs may create such
        objects; their metadata says ``"untyped"``) has none and holds no data: this raises
        :class:`InvalidArgumentError` naming it, as indexing it does."""
        if self._meta["dtype"] == "untyped":
            raise InvalidArgumentError(
                f"object {self.name!r} has no element type yet, so it holds no data (it was "
                "created without one; a PDC program sets it with PDCprop_set_obj_type)"
            )
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

    # ---- versions (the object as of one of its writes) ----
    def versions(self) -> list[dict]:
        """The versions :meth:`at` can read, oldest first: ``{"version": n, "name": str | None}``.
        A version is the object as of one of its writes (number ``n``: every write numbered up
        to it). Compaction keeps only the latest unless the object's tags ask for more:
        ``pdcx.keep.last`` (the last N versions), ``pdcx.keep.seconds`` (those of the last D
        seconds) or a named version (:meth:`name_version`); a dropped one cannot be read.

        A byte stream's versions are its consistency points (a sync or close under ``pdcx run``,
        a file's close), numbered the same way (the newest write each holds), each with its
        ``"size"`` in bytes."""
        v = json.loads(self._client._c.versions(self.id))
        names = {n: k[len(VERSION_TAG_PREFIX) :] for k, n in self.tags.items() if k.startswith(VERSION_TAG_PREFIX)}
        dropped = v["dropped"]
        if v.get("sizes"):
            sizes = dict(zip(v["readable"], v["sizes"]))
            return [{"version": n, "name": names.get(n), "size": s} for n, s in sorted(sizes.items())]
        kept = set(v["readable"]) | {n for n in names if not any(f <= n < t for f, t in dropped)}
        return [{"version": n, "name": names.get(n)} for n in sorted(kept)]

    def name_version(self, name: str, version: int | None = None) -> int:
        """Names ``version`` (default: the latest), so compaction keeps it readable (tag
        ``pdcx.version.NAME``); returns its number. A version already dropped is refused."""
        if not name:
            raise InvalidArgumentError("a version name must not be empty")
        if version is None:
            readable = json.loads(self._client._c.versions(self.id))["readable"]
            if not readable:
                raise InvalidArgumentError(f"{self.name} has no writes yet: nothing to name")
            version = readable[-1]
        self.tags[VERSION_TAG_PREFIX + name] = int(version)
        return int(version)

    def at(self, version: int | str) -> ObjectVersion:
        """The object as of ``version`` (a number from :meth:`versions`, or a name), read-only:
        ``obj.at(7)[0:10]``. Reading a version compaction dropped raises :class:`NotFoundError`."""
        if isinstance(version, str):
            n = self.tags.get(VERSION_TAG_PREFIX + version)
            if not isinstance(n, int):
                raise InvalidArgumentError(f"{self.name} has no version named {version!r}")
            version = n
        if not isinstance(version, int) or version < 0:
            raise InvalidArgumentError(f"version {version!r}: expected a version number (int >= 0) or name")
        return ObjectVersion(self, version)

    def changes(self, since: int | str, until: int | str | None = None) -> list[tuple[tuple, tuple]]:
        """The regions ``(offset, count)`` written after version ``since`` up to ``until``
        (default: the newest): every change between the two versions is inside them (both
        must be readable). Compare the values with ``obj.at(since)[box]`` and ``obj.at(until)[box]``;
        ``pdcx diff`` does both."""
        a = self.at(since).version
        b = self.versions()[-1]["version"] if until is None else self.at(until).version
        if a > b:
            raise InvalidArgumentError(f"version {a} is newer than {b}: give the older one first")
        v = json.loads(self._client._c.versions(self.id))
        for n in (a, b):
            if any(f <= n < t for f, t in v["dropped"]):
                raise NotFoundError(f"version {n} of {self.name} was dropped by compaction")
        out: list[tuple[tuple, tuple]] = []
        for e in json.loads(self._client._c.extents(self.id)):
            box = (tuple(e["offset"]), tuple(e["count"]))
            if a < e["seq"] <= b and box not in out:
                out.append(box)
        return out

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


class ObjectVersion:
    """An object as of one version (:meth:`Object.at`): read-only, indexed like numpy over the
    object's current shape (whole boxes; no steps)."""

    def __init__(self, obj: Object, version: int):
        self._obj, self.version = obj, version

    @property
    def shape(self) -> tuple:
        """The object's shape now; a byte stream's version has its own size."""
        if self._obj._meta["dtype"] == "bytes":
            for v in self._obj.versions():
                if v["version"] == self.version:
                    return (v["size"],)
        return self._obj.shape

    @property
    def dtype(self) -> np.dtype:
        return self._obj.dtype

    def __array__(self, dtype=None, copy=None):
        a = self[...]
        return a if dtype is None else a.astype(dtype)

    def __getitem__(self, key: Any) -> np.ndarray:
        offset, count, step, drop = _normalize_index(key, self.shape)
        if any(s != 1 for s in step):
            raise InvalidArgumentError("a read of a version takes whole boxes (no steps)")
        out = np.empty(count, dtype=self.dtype)
        if out.size:
            buf = memoryview(out.reshape(-1).view(np.uint8))
            self._obj._client._c.read_version(self._obj.id, offset, count, self.version, buf)
        return out.reshape([c for d, c in enumerate(out.shape) if d not in drop]) if drop else out

    def __repr__(self) -> str:
        return f"<pdcx version {self.version} of {self._obj.name}>"
