"""Per-region placement hints (`pdcx.tier.regions`, `Object.set_tier`, `write_async(tier=)`)
with real server processes: each flushed extent lands on the tier of the last rule holding it,
rules override the object's `pdcx.tier`, bad rules are refused when set, and a node-local
server flushing another server's object sees rules set after it cached that object."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pdcx
import pytest
from conftest import client_on, owner_of_name, run_pdcx
from test_tiers import CHUNK, write_config


def homes(obj) -> dict[tuple, str]:
    """Tier of each extent (the log copy aside), by the extent's region (offset, count)."""
    return {(tuple(e["offset"]), tuple(e["count"])): e["tier"].removeprefix("log+") for e in obj.extents()}


def tiered(deployment, tmp_path, n: int = 1):
    """A started deployment of `n` servers with test_tiers' tiers (mem, ssd, pfs)."""
    dep = deployment(n=n, start=False)
    write_config(dep.root, tmp_path)
    dep.start()
    return dep


def test_rules_place_regions_and_override_the_object_tag(deployment, tmp_path):
    dep = tiered(deployment, tmp_path)
    client = dep.client()
    c = client.create_container("h")
    obj = c.create_object("h/x", (8 * CHUNK,), "float64", tags={"pdcx.tier": "pfs"})
    obj.set_tier(slice(0, 4 * CHUNK), "ssd")
    obj.set_tier(slice(None, CHUNK), "pfs")  # later and inside the ssd rule: wins there
    obj.set_tier(slice(-2 * CHUNK, None), "mem")
    assert obj.tier_rules() == [
        ((slice(0, 4 * CHUNK),), "ssd"),
        ((slice(0, CHUNK),), "pfs"),
        ((slice(6 * CHUNK, None),), "mem"),
    ]
    data = np.random.default_rng(1).standard_normal(8 * CHUNK)
    for k in range(0, 8 * CHUNK, CHUNK):
        obj.write_async(data[k : k + CHUNK], offset=(k,)).wait()
    # Straddles two rules' boxes: no box holds it, so the object's tag.
    obj.write_async(data[3 * CHUNK + 10 : 4 * CHUNK + 10], offset=(3 * CHUNK + 10,)).wait()
    # Rewriting the first chunk with tier= replaces the rules that box holds (no growth).
    obj.write_async(data[:CHUNK], tier="ssd").wait()
    assert obj.tier_rules()[-1] == ((slice(0, CHUNK),), "ssd")
    assert len(obj.tier_rules()) == 3
    client.flush()
    got = homes(obj)
    chunks = [got[((k * CHUNK,), (CHUNK,))] for k in range(8)]
    # Chunk 0 by the rewrite's rule, 1..3 by the first rule, 4..5 by pdcx.tier (no rule).
    assert chunks == ["ssd"] * 4 + ["pfs"] * 2 + ["mem"] * 2, chunks
    assert got[((3 * CHUNK + 10,), (CHUNK,))] == "pfs"
    assert np.array_equal(obj[:], data)

    # The whole-object form is the pdcx.tier tag; rules still win inside their boxes.
    obj.set_tier(None, "ssd")
    assert obj.tags["pdcx.tier"] == "ssd"
    obj.set_tier(..., "pfs")
    assert obj.tags["pdcx.tier"] == "pfs"


def test_rules_in_two_dims_and_with_transfers(deployment, tmp_path):
    dep = tiered(deployment, tmp_path)
    client = dep.client()
    c = client.create_container("h2")
    rows = 8
    obj = c.create_object("h2/x", (rows, CHUNK), "float64", tags={"pdcx.tier.regions": f"0:{rows},0:{CHUNK}=ssd"})
    obj.set_tier((slice(4, None), ...), "pfs")
    assert obj.tags["pdcx.tier.regions"] == f"0:{rows},0:{CHUNK}=ssd;4:,0:=pfs"
    data = np.random.default_rng(2).standard_normal((rows, CHUNK))
    ts = [obj.transfer("w", data[r : r + 1], offset=(r, 0)) for r in range(rows - 1)]
    ts.append(obj.transfer("w", data[rows - 1 :], offset=(rows - 1, 0), tier="mem"))
    pdcx.start_all(ts)
    pdcx.wait_all(ts)
    client.flush()
    got = [homes(obj)[((r, 0), (1, CHUNK))] for r in range(rows)]
    assert got == ["ssd"] * 4 + ["pfs"] * 3 + ["mem"], got
    assert np.array_equal(obj[:], data)
    assert obj.tier_rules()[-1] == ((slice(7, 8), slice(0, CHUNK)), "mem")
    with pytest.raises(pdcx.InvalidArgumentError, match="writes only"):
        obj.transfer("r", tier="ssd")
    run_pdcx("tag", "h2/x", "pdcx.tier.regions=+:,:=auto", "--root", dep.root)
    assert obj.tier_rules() == [((slice(0, None), slice(0, None)), "auto")]
    bad = run_pdcx("tag", "h2/x", "pdcx.tier.regions=+0:9,:=ssd", "--root", dep.root, check=False)
    assert bad.returncode == 1 and 'rule 1 "0:9,:=ssd": dim 0 reaches 9' in bad.stderr, bad.stderr


def test_bad_rules_are_refused_with_the_rule_and_the_reason(deployment, tmp_path):
    dep = tiered(deployment, tmp_path)
    c = dep.client().create_container("b")
    obj = c.create_object("b/x", (100,), "float64")
    for rule, why in [
        ("0:10=tape", r'rule 1 "0:10=tape": no tier named "tape"'),
        ("0:10=ssd;0:5,0:5=pfs", r"rule 2 .*the box has 2 dims but the object has 1"),
        ("0:101=ssd", r"dim 0 reaches 101 but the object's dims are \[100\]"),
        ("10:5=ssd", "is empty"),
        ("ssd", "expected BOX=TIER"),
        ("0:10=ssd,pfs", "needs a quota"),
        ("+0:x=ssd", "not a non-negative integer"),
    ]:
        with pytest.raises(pdcx.InvalidArgumentError, match=why):
            obj.tags["pdcx.tier.regions"] = rule
    with pytest.raises(pdcx.InvalidArgumentError, match="must be a string"):
        obj.tags["pdcx.tier.regions"] = 5
    assert obj.tier_rules() == []
    with pytest.raises(pdcx.InvalidArgumentError, match="no tier named"):
        obj.set_tier(slice(0, 10), "tape")
    with pytest.raises(pdcx.InvalidArgumentError, match="tier spec"):
        obj.set_tier(slice(0, 10), "ssd;0:100=pfs")
    with pytest.raises(IndexError, match="without a step"):
        obj.set_tier(slice(0, 10, 2), "ssd")
    with pytest.raises(pdcx.InvalidArgumentError, match="reaches 200"):
        obj.write_async(np.zeros(10), offset=(190,), tier="ssd")
    with pytest.raises(pdcx.InvalidArgumentError, match="no tier named"):
        c.create_object("b/y", (10,), "float64", tags={"pdcx.tier.regions": "0:5=tape"})
    ok, bad = c.create_objects(
        [
            {"name": "b/z", "shape": 10, "tags": {"pdcx.tier.regions": "0:5=ssd"}},
            {"name": "b/w", "shape": 10, "tags": {"pdcx.tier.regions": "0:50=ssd"}},
        ]
    )
    assert ok.tier_rules() == [((slice(0, 5),), "ssd")]
    assert isinstance(bad, pdcx.InvalidArgumentError) and "reaches 50" in str(bad)


def test_concurrent_appends_lose_no_rule(deployment, tmp_path):
    dep = tiered(deployment, tmp_path)
    dep.client().create_container("c").create_object("c/x", (64, 64), "float64")
    objs = [dep.client().open_object("c/x") for _ in range(8)]

    def hint(k: int) -> None:
        for r in range(8):
            objs[k].set_tier((slice(8 * k + r, 8 * k + r + 1), ...), "ssd" if r % 2 else "pfs")

    with ThreadPoolExecutor(len(objs)) as pool:
        list(pool.map(hint, range(len(objs))))
    rules = objs[0].tier_rules()
    assert sorted(i[0].start for i, _ in rules) == list(range(64)), rules


def test_rules_need_tiers(deployment):
    dep = deployment(n=1)
    obj = dep.client().create_container("n").create_object("n/x", (10,), "float64")
    with pytest.raises(pdcx.InvalidArgumentError, match="no tiers"):
        obj.set_tier(slice(0, 5), "ssd")
    obj.tags["pdcx.tier.regions"] = ""  # nothing to honour


def test_a_node_local_server_sees_rules_set_after_it_cached_the_object(deployment, tmp_path):
    dep = tiered(deployment, tmp_path, n=2)
    name = next(f"f/{i}" for i in range(1000) if owner_of_name(f"f/{i}", 2) == 0)
    dep.client().create_container("f").create_object(name, (4 * CHUNK,), "float64", tags={"pdcx.tier": "pfs"})
    writer = client_on(dep, 1)
    obj = writer.open_object(name)
    data = np.random.default_rng(3).standard_normal(4 * CHUNK)
    # Server 1 caches the object's metadata with this first write, before any rule exists.
    obj.write_async(data[:CHUNK]).wait()
    writer.flush()
    obj.set_tier(slice(2 * CHUNK, None), "ssd")
    for k in range(CHUNK, 4 * CHUNK, CHUNK):
        obj.write_async(data[k : k + CHUNK], offset=(k,)).wait()
    writer.flush()
    ext = obj.extents()
    assert {e["server"] for e in ext} == {1}, ext
    got = [homes(obj)[((k * CHUNK,), (CHUNK,))] for k in range(4)]
    assert got == ["pfs", "pfs", "ssd", "ssd"], got
    assert np.array_equal(obj[:], data)
