"""Creates answered from the owner's in-memory catalog (ARCHITECTURE.md,
"Creates"): what a returned `create_object` promises at once (visible, checked, usable, an id
never reused), and what the consistency point adds (durable)."""

import numpy as np
import pdcx
import pytest
from conftest import names_on_every_server


def test_a_returned_create_is_visible_checked_usable_and_durable_at_the_consistency_point(deployment):
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
    # Tags put after the create, a last create, the consistency point, then kill -9.
    last = a.open_object(names[-1])
    last.tags["after"] = "yes"
    late = cont.create_object("cr/late", (4,), "int32", tags={"late": 1})
    a.sync()
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


def test_ids_stay_unique_across_clients_and_after_kill9(deployment):
    """Two clients create concurrently on both owners; the owners are killed right after the
    last answer (no consistency point: the newest creates may be lost); objects created after
    the restart never get an id handed out before it (ids are recorded as reserved before use)."""
    import threading

    dep = deployment(n=2)
    a, b = dep.client(), dep.client()
    a.create_container("u")
    ids: dict[str, int] = {}
    lock = threading.Lock()

    def make(client, tag):
        cont = client.open_container("u")
        for i in range(150):
            o = cont.create_object(f"u/{tag}{i}", 4, "int32")
            with lock:
                ids[o.name] = o.id

    threads = [threading.Thread(target=make, args=(c, t)) for c, t in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids.values())) == len(ids) == 300
    dep.kill9()
    dep.start()
    c = dep.client()
    survivors = {o.name: o.id for o in c.open_container("u").objects()}
    # What survived kept its id; nothing that never was created appears.
    assert all(ids[n] == i for n, i in survivors.items())
    cont = c.open_container("u")
    fresh = [cont.create_object(f"u/after{i}", 4, "int32").id for i in range(20)]
    assert not set(fresh) & set(ids.values())
    # A lost name (if any) can be created again, under a new id.
    for name in sorted(set(ids) - set(survivors))[:3]:
        assert cont.create_object(name, 4, "int32").id not in ids.values()


def test_batched_lazy_creates_fail_alone_and_are_durable_at_sync(deployment):
    """`Client.create_objects(..., lazy=True)`: one request per owner, durable at the next
    consistency point; a duplicate fails alone."""
    dep = deployment(n=2)
    client = dep.client()
    cont = client.create_container("bl")
    cont.create_object("bl/taken", 4, "int32")
    specs = [{"name": f"bl/o{i}", "shape": (4,), "dtype": "int32"} for i in range(500)]
    specs.append({"name": "bl/taken", "shape": (4,), "dtype": "int32"})
    made = cont.create_objects(specs, lazy=True)
    assert all(isinstance(m, pdcx.Object) for m in made[:500])
    assert isinstance(made[500], pdcx.AlreadyExistsError)
    # Visible to another client at once.
    assert dep.client().open_object("bl/o499").id == made[499].id
    client.sync()
    dep.kill9()
    dep.start()
    assert len(dep.client().open_container("bl").objects()) == 501
