"""Composite objects (as in the object-sharding paper): arrays of fixed-size records, readable and
writable per field."""

from __future__ import annotations

import numpy as np
import pdcx
import pytest

HACC = np.dtype([(n, "<f4") for n in ("x", "y", "z", "vx", "vy", "vz", "phi")] + [("pid", "<i8"), ("mask", "<u2")])


def test_hacc_records_round_trip_and_single_fields_move_only_their_bytes(deployment):
    dep = deployment(n=2)
    client = dep.client()
    c = client.create_container("hacc")
    n = 50_000
    obj = c.create_composite("hacc/p", n, HACC, tags={"step": 1})
    rng = np.random.default_rng(5)
    recs = np.zeros(n, dtype=HACC)
    for name in HACC.names:
        recs[name] = rng.integers(0, 1 << 15, n) if HACC[name].kind in "iu" else rng.random(n, dtype="f4")
    for k in range(0, n, 10_000):
        obj.records[k : k + 10_000] = recs[k : k + 10_000]
    assert obj.shape == (n, HACC.itemsize) and obj.records.shape == (n,)
    assert obj.record_dtype.names == HACC.names
    back = obj.records[:]
    assert back.dtype.names == HACC.names and back.tobytes() == recs.tobytes()
    before = sum(s["read_bytes"] for s in client.stats())
    pid = obj.field("pid")[100:1100]
    after = sum(s["read_bytes"] for s in client.stats())
    assert np.array_equal(pid, recs["pid"][100:1100])
    assert after - before == 1000 * 8, "a field read must move only that field's bytes"
    # Writing one field leaves the others alone.
    obj.field("phi")[0:10] = np.arange(10, dtype="<f4")
    got = obj.records[0:10]
    assert np.array_equal(got["phi"], np.arange(10, dtype="<f4"))
    assert np.array_equal(got["x"], recs["x"][:10])
    assert obj.field("mask")[7] == recs["mask"][7]
    # Reopened by name, the layout comes from the tag.
    again = client.open_object("hacc/p")
    assert again.record_dtype == obj.record_dtype
    assert np.array_equal(again.field("vy")[...], recs["vy"])


def test_bad_layouts_and_field_names_say_what_is_wrong(deployment):
    client = deployment(n=1).client()
    c = client.create_container("bad")
    with pytest.raises(pdcx.InvalidArgumentError, match="named fields"):
        c.create_composite("bad/a", 10, "<f8")
    with pytest.raises(pdcx.InvalidArgumentError, match="plain numbers"):
        c.create_composite("bad/b", 10, [("x", "<f4", (3,))])
    obj = c.create_composite("bad/c", 10, [("x", "<f4")])
    with pytest.raises(pdcx.InvalidArgumentError, match="no field 'y'"):
        obj.field("y")
    plain = c.create_object("bad/plain", 10, "float64")
    with pytest.raises(pdcx.InvalidArgumentError, match="not a composite"):
        plain.records[0]
