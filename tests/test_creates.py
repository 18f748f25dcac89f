"""Creates answered at the owner's commit (issue 10, item 5; ARCHITECTURE.md, "Creates"): what a
returned `create_object` promises at once, and what the consistency point adds."""

import numpy as np
import pdcx
import pytest
from conftest import names_on_every_server


def test_a_returned_create_is_visible_checked_usable_and_survives_kill9(deployment):
    dep = deployment(n=2)
    a, b = dep.client(), dep.client()
    cont = a.create_container("cr")
    names = names_on_every_server("cr/o", 2, per_server=3)
    made = {}
    for i, name in enumerate(names):
        o = cont.create_object(name, (16,), "int32", tags={"i": i})
        made[name] = o.id
        # Another client finds it by name at once (what create; barrier; open relies on).
        other = b.open_object(name)
        assert other.id == o.id and other.tags["i"] == i
        # A taken name fails in this call, whoever asks, and changes nothing.
        with pytest.raises(pdcx.AlreadyExistsError):
            cont.create_object(name, (99,), "float64")
        with pytest.raises(pdcx.AlreadyExistsError):
            b.open_container("cr").create_object(name, (99,), "float64")
        assert b.open_object(name).shape == (16,)
    # The id is usable for a write at once (the write makes the creates durable first).
    first = a.open_object(names[0])
    first[...] = np.arange(16, dtype=np.int32)
    # Tags put after the create, then kill -9 right after the last answer: nothing synced by
    # this client since the write above.
    last = a.open_object(names[-1])
    last.tags["after"] = "yes"
    late = cont.create_object("cr/late", (4,), "int32", tags={"late": 1})
    dep.kill9()
    dep.start()
    c = dep.client()
    for name, oid in made.items():
        assert c.open_object(name).id == oid, name
    assert c.open_object(names[0])[...].tolist() == list(range(16))
    assert c.open_object(names[-1]).tags["after"] == "yes"
    assert c.open_object("cr/late").id == late.id
    assert sorted(o.name for o in c.open_container("cr").objects()) == sorted([*names, "cr/late"])


def test_invalid_specs_fail_at_once_and_leave_nothing(deployment):
    dep = deployment(n=1)
    client = dep.client()
    cont = client.create_container("bad")
    with pytest.raises(pdcx.PdcxError):
        cont.create_object("bad/tag", 4, "int32", tags={"": 1})
    with pytest.raises(pdcx.PdcxError):
        cont.create_object("bad/dims", (0, 0, 0, 0, 0, 0, 0, 0, 0), "int32")
    with pytest.raises(pdcx.NotFoundError):
        client.open_object("bad/tag")
    with pytest.raises(pdcx.NotFoundError):
        client.open_object("bad/dims")
    with pytest.raises(pdcx.NotFoundError):
        pdcx.Container(client, {"name": "nope", "id": 0}).create_object("bad/nocont", 4, "int32")
    # The names stay free for a valid create.
    assert cont.create_object("bad/tag", 4, "int32").shape == (4,)


def test_sync_is_the_consistency_point_of_creates(deployment):
    """`Client.sync` asks each owner this client created on for a WAL fsync covering the
    creates (SyncMeta); with nothing created since, it sends nothing."""
    dep = deployment(n=2)
    client = dep.client()
    cont = client.create_container("sy")
    for name in names_on_every_server("sy/o", 2, per_server=2):
        cont.create_object(name, 4, "int32")
    client.sync()
    client.sync()  # nothing left to sync: no request, no error
    dep.kill9()
    dep.start()
    assert len(dep.client().open_container("sy").objects()) == 4
