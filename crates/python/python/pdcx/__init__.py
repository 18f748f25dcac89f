"""pdcx: object-centric data management for scientific computing.

Quick start::

    import numpy as np, pdcx
    client = pdcx.connect(embedded=True)         # a private scratch server; root=DIR to keep data
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

# The package is split by job, one module each; the names users import (and pdcx.hdf5 and
# pdcx.xarray_backend, the helpers too) are re-exported here as `pdcx.X`. Imports point one
# way: _client -> _container -> _object -> _query, _transfer, _indexing, _tags, _dtypes.
from . import _native as _native
from ._client import Client, connect
from ._container import Container
from ._dtypes import _pdcx_dtype as _pdcx_dtype
from ._dtypes import _record_dtype as _record_dtype
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
from ._object import Object, ObjectVersion
from ._query import Condition, Hits
from ._tags import FIELDS_TAG as FIELDS_TAG
from ._tags import TIER_RULES_TAG as TIER_RULES_TAG
from ._tags import TIER_TAG as TIER_TAG
from ._tags import TagView as TagView
from ._tags import _decode_tags as _decode_tags
from ._transfer import Transfer, requests_sent, start_all, wait_all


def _version() -> str:
    """The installed distribution's version (maturin takes it from the Cargo workspace)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pdcx")
    except PackageNotFoundError:  # a source tree on PYTHONPATH, never installed
        return "0+unknown"


__version__ = _version()

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
    "ObjectVersion",
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
