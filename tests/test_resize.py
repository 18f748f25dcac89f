"""`pdcx resize`: a deployment written by N servers restarts on M, fewer or more, every object
keeping its id, name, tags, containers, data and named versions; data a retired server held is
read where it is (adopted by rank % M); an interrupted resize blocks starts until run again.
Real server processes; the crash test kills a crash-point build of `pdcx resize` (SIGKILL) at
each of its points."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import client_on, run_pdcx, wait_until

N_OBJECTS = 24
ELEMS = 40_000  # 320 KB of float64: over the small-write size, so the writer's server holds it


def first(i: int) -> np.ndarray:
    return np.arange(ELEMS, dtype=np.float64) + i * 1e6


def latest(i: int) -> np.ndarray:
    a = first(i)
    a[: ELEMS // 2] = -a[: ELEMS // 2]
    return a


def populate(dep) -> dict[str, int]:
    """Objects written through every server (so every server holds data of objects others
    own), overwritten once, the first version named; two containers; tags. Returns name -> id."""
    ids = {}
    clients = [client_on(dep, r) for r in range(dep.n)]
    clients[0].create_container("run", tags={"kind": "sim"})
    clients[0].create_container("odd")
    for i in range(N_OBJECTS):
        c = clients[i % dep.n]
        o = c.open_container("run").create_object(f"field{i}", (ELEMS,), "float64", tags={"i": i, "s": f"v{i}"})
        if i % 2:
            c.open_container("odd").add(o)
        o[...] = first(i)
        o.name_version("start")
        o[: ELEMS // 2] = latest(i)[: ELEMS // 2]
        ids[o.name] = o.id
    return ids


def check(dep, ids: dict[str, int]) -> None:
    for r in range(dep.n):
        c = client_on(dep, r)
        for i, (name, oid) in enumerate(sorted(ids.items(), key=lambda kv: int(kv[0].removeprefix("field")))):
            o = c.open_object(name)
            assert o.id == oid, (name, hex(o.id), hex(oid))
            np.testing.assert_array_equal(o[...], latest(i), err_msg=name)
            assert dict(o.tags)["i"] == i and dict(o.tags)["s"] == f"v{i}"
            if r == 0:
                np.testing.assert_array_equal(o.at("start")[...], first(i), err_msg=name)
        assert sorted(o.name for o in c.open_container("run").objects()) == sorted(ids)
        assert len(c.open_container("odd").objects()) == N_OBJECTS // 2
        assert dict(c.open_container("run").tags)["kind"] == "sim"
    # By id, through the CLI (routed by the id's home modulo the count).
    for name, oid in list(ids.items())[:4]:
        shown = json.loads(run_pdcx("show", hex(oid), "--json", "--root", dep.root).stdout)
        assert shown["name"] == name


def resize(dep, to: int, check_rc: bool = True, env=None, binary=None) -> subprocess.CompletedProcess:
    args = [
        binary or os.environ.get("PDCX_BIN") or "pdcx",
        "resize",
        "--root",
        str(dep.root),
        "--to",
        str(to),
        "--json",
    ]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env, check=False)
    if check_rc:
        assert p.returncode == 0, p.stderr
    return p


def with_pfs_tier(dep, tmp_path, rest: str) -> None:
    """Gives the deployment a shared-directory tier `pfs` under tmp_path, then `rest`."""
    (dep.root / "pdcx.toml").write_text(f'[[tier]]\nname = "pfs"\nkind = "shared"\npath = "{tmp_path}/pfs"\n\n{rest}')


def restart_as(dep, n: int) -> None:
    dep.n = n
    dep.start()


def test_a_deployment_shrinks_and_grows_keeping_ids_names_tags_data_and_versions(deployment):
    dep = deployment(n=4)
    ids = populate(dep)
    dep.stop()

    report = json.loads(resize(dep, 2).stdout)
    assert (report["from"], report["to"]) == (4, 2)
    assert report["objects_moved"] > 0 and report["extents_adopted"] > 0, report
    assert not (dep.root / "server-0002").exists() and not (dep.root / "resize.json").exists()
    retired = list((dep.root / "retired").glob("*/server-0003/log"))
    assert retired, "the retired server's log is kept where its adopter reads it"
    restart_as(dep, 2)
    check(dep, ids)
    # Moved later: `pdcx compact` copies adopted data into the adopters' logs (the background
    # passes do it at a bounded rate) and removes the retired logs nothing reads any more.
    run_pdcx("compact", "--root", dep.root)
    assert not list((dep.root / "retired").glob("*/server-*")), list((dep.root / "retired").rglob("*"))
    check(dep, ids)
    # New objects and containers after the resize get fresh ids that clash with none.
    c = dep.client()
    new = c.create_container("after").create_object("later", (10,), "int32")
    new[...] = np.arange(10, dtype=np.int32)
    assert new.id not in ids.values()
    ids_after = dict(ids, later=new.id)
    dep.stop()

    # A count that is not a multiple: names now resolve through links.
    report = json.loads(resize(dep, 5).stdout)
    assert (report["from"], report["to"]) == (2, 5) and report["name_links"] > 0, report
    restart_as(dep, 5)
    del ids_after["later"]
    check(dep, ids_after)
    later = dep.client().open_object("later")
    assert later.id == new.id
    np.testing.assert_array_equal(later[...], np.arange(10, dtype=np.int32))
    # Writes after the resize number above every earlier one (versions stay ordered).
    o = dep.client().open_object("field3")
    before = [v["version"] for v in o.versions()]
    o[:10] = np.zeros(10)
    assert o.versions()[-1]["version"] > max(before)
    assert dep.client().open_object("field3").at("start")[:5].tolist() == first(3)[:5].tolist()


def test_starting_with_another_count_names_the_resize_and_a_live_deployment_is_refused(deployment):
    dep = deployment(n=2)
    dep.client().create_container("c").create_object("x", (4,), "int8")
    p = resize(dep, 1, check_rc=False)
    assert p.returncode != 0 and "in use by another pdcx server" in p.stderr, p.stderr
    dep.stop()
    dep.n = 3
    with pytest.raises(AssertionError, match=r"pdcx resize --root .* --to 3"):
        dep.start()
    p = resize(dep, 0, check_rc=False)
    assert p.returncode != 0 and "--to must be 1..=4096" in p.stderr


def resize_points() -> list[str]:
    """The resize's crash points, as the crash-point build lists them (`pdcx server
    crash-points --json`); none without that build (the test is then skipped)."""
    crash_bin = os.environ.get("PDCX_CRASH_BIN")
    if not crash_bin:
        return []
    out = subprocess.run([crash_bin, "server", "crash-points", "--json"], capture_output=True, text=True, check=True)
    points = [p for p in json.loads(out.stdout)["points"] if p.startswith("resize.")]
    assert points, f"{crash_bin} lists no resize crash points"
    return points


CRASH_POINTS = resize_points()


@pytest.mark.skipif(not os.environ.get("PDCX_CRASH_BIN"), reason="needs PDCX_CRASH_BIN: a pdcx built with crash points")
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_resize_killed_anywhere_is_finished_by_running_it_again(deployment, point):
    dep = deployment(n=3)
    ids = populate(dep)
    dep.stop()
    env = dict(os.environ, PDCX_CRASH_AT=point)
    p = resize(dep, 2, check_rc=False, env=env, binary=os.environ["PDCX_CRASH_BIN"])
    assert p.returncode == -9, f"not killed at {point}: rc {p.returncode}\n{p.stderr}"
    journal = dep.root / "resize.json"
    assert journal.exists()
    # Servers refuse a half-resized root, naming the command that finishes it.
    dep.n = 2
    with pytest.raises(AssertionError, match=r"did not finish.*pdcx resize --root"):
        dep.start()
    again = json.loads(resize(dep, 2).stdout)
    assert again["resumed"] and not journal.exists()
    dep.start()
    check(dep, ids)


def test_a_retired_servers_unregistered_writes_block_the_resize(deployment, tmp_path):
    """Resize refuses (changing nothing) when a server to retire holds relaxed writes its
    owners never numbered: only that server's restart can register them."""
    dep = deployment(n=2)
    dep.client().create_container("c").create_object("x", (4,), "int8")
    dep.stop()
    import sqlite3

    db = sqlite3.connect(dep.root / "server-0001" / "meta.sqlite")
    db.execute(
        "INSERT INTO extent_map (object, seq, region, segment, offset, len, crc) VALUES (1, ?, x'00', 1, 0, 4, 0)",
        (1 << 62,),
    )
    db.commit()
    db.close()
    p = resize(dep, 1, check_rc=False)
    assert p.returncode != 0 and "relaxed writes not yet registered" in p.stderr, p.stderr
    assert not (dep.root / "resize.json").exists()
    assert Path(dep.root / "server-0001" / "meta.sqlite").exists()


def test_resize_bench_quick_shrinks_grows_and_verifies():
    """bench/resize/run.py --quick: 20,000 objects with tags, 4 -> 2 -> 8 servers, each time
    every object listed and a sample checked by name and by id."""
    repo = Path(__file__).resolve().parents[1]
    p = subprocess.run(
        ["python3", str(repo / "bench" / "resize" / "run.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert p.stdout.count("verified: 20,000 listed") == 2, p.stdout


def test_adopted_data_that_changed_on_disk_is_an_error_not_other_bytes(deployment):
    """A retired server's records keep their checksums: a byte flipped in the retired log
    makes the read fail, never return other data."""
    dep = deployment(n=2)
    c = client_on(dep, 1)
    o = c.create_container("c").create_object("victim", (ELEMS,), "float64")
    o[...] = first(5)
    held_by_1 = [e for e in o.extents() if e["server"] == 1]
    assert held_by_1, o.extents()
    dep.stop()
    resize(dep, 1)
    needle = first(5)[ELEMS // 2 : ELEMS // 2 + 4].tobytes()
    hits = [(p, bytearray(p.read_bytes())) for p in (dep.root / "retired").glob("*/server-0001/log/seg-*.log")]
    hits = [(p, raw, raw.find(needle)) for p, raw in hits if needle in raw]
    assert len(hits) == 1, [p for p, *_ in hits]
    seg, raw, at = hits[0]
    raw[at] ^= 0xFF
    seg.write_bytes(bytes(raw))
    restart_as(dep, 1)
    with pytest.raises(Exception, match="checksum"):
        dep.client().open_object("victim")[...]


def test_data_flushed_to_a_tier_and_gone_from_the_log_stays_readable_after_a_shrink(deployment, tmp_path):
    """A retired server's extents that only a tier holds (flushed, their log segments
    retired) keep their blobs: the adopter reads them under the retired server's keys."""
    dep = deployment(n=2, start=False)
    with_pfs_tier(dep, tmp_path, '[log]\nsegment_bytes = "1MiB"\n\n[flush]\ninterval_ms = 100\n')
    dep.start()
    c = client_on(dep, 1)
    data = {}
    for i in range(6):
        o = c.open_container("t") if i else c.create_container("t")
        obj = o.create_object(f"flushed{i}", (ELEMS,), "float64", tags={"pdcx.tier": "pfs"})
        obj[...] = first(i)
        data[obj.name] = (obj.id, first(i))
    run_pdcx("flush", "--root", dep.root, timeout=120)
    shown = json.loads(run_pdcx("show", "flushed1", "--json", "--root", dep.root).stdout)
    assert {e["tier"] for e in shown["extents"]} == {"pfs"}, shown["extents"]
    dep.stop()
    resize(dep, 1)
    restart_as(dep, 1)
    r = dep.client()
    for name, (oid, want) in data.items():
        o = r.open_object(name)
        assert o.id == oid
        np.testing.assert_array_equal(o[...], want, err_msg=name)


def test_group_shards_of_a_leader_gone_in_a_shrink_are_repacked_by_the_one_acting_for_it(
    deployment, tmp_path, monkeypatch
):
    """Servers 2 and 3 form a shard group led by 2; after a shrink to 2 servers, server 0
    leads the group that rank 2 falls in: it repacks and deletes those shards once mostly
    garbage, as the leader would have."""
    monkeypatch.setenv("PDCX_COMPACTION_THRESHOLD", "0")
    dep = deployment(n=4, start=False)
    with_pfs_tier(dep, tmp_path, "[shard]\nservers = 2\nobjects = 4\n\n[flush]\ninterval_ms = 60000\n")
    dep.start()
    c = client_on(dep, 2)
    c.placement = "region-static"  # each object's regions on every server
    cont = c.create_container("g")
    objs = [cont.create_object(f"g/o{i}", (ELEMS,), "float64") for i in range(4)]
    for i, o in enumerate(objs):
        o[...] = first(i)
    run_pdcx("flush", "--root", dep.root, timeout=120)

    def shards(leader: str) -> set[Path]:
        return {p for p in (tmp_path / "pfs").rglob("*") if p.is_file() and f"/{leader}/shard/" in str(p)}

    led_by_2 = shards("g0002")
    assert led_by_2, "servers 2 and 3 put no group shard"
    dep.stop()
    resize(dep, 2)
    restart_as(dep, 2)
    c = dep.client()
    for o in objs[:3]:
        c.delete_object(o.name)

    def repacked() -> bool:
        run_pdcx("compact", "--root", dep.root, timeout=120)
        run_pdcx("flush", "--root", dep.root, timeout=120)  # the acting leader's check deletes
        return not led_by_2 & shards("g0002")

    wait_until(repacked, 60, "the shards of the retired leader to be repacked and deleted")
    np.testing.assert_array_equal(c.open_object("g/o3")[...], first(3))
