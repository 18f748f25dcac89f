"""Value queries and strided reads evaluated by the servers that hold the data,
against a real 2-server deployment, checked against numpy on the same arrays."""

from __future__ import annotations

import json

import numpy as np
import pdcx
import pytest
from conftest import client_on, names_on_every_server, owner_of_name

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"]


def owner_read_bytes(c: pdcx.Client) -> list[int]:
    return [s["read_bytes"] for s in c.stats()]


@pytest.fixture
def dep(deployment):
    return deployment(n=2)


def test_every_dtype_and_operator_matches_numpy(dep):
    c = dep.client()
    ct = c.create_container("q")
    rng = np.random.default_rng(3)
    for dt in DTYPES:
        info = np.iinfo(dt) if dt[0] in "iu" else None
        if info is not None:
            a = rng.integers(max(info.min, -1000), min(info.max, 1000), size=(37, 41), dtype=dt, endpoint=True)
            v = int(a[5, 7])
        else:
            a = rng.standard_normal((37, 41)).astype(dt)
            v = float(a[5, 7])
        o = ct.create_object(f"v/{dt}", shape=a.shape, dtype=dt)
        o[...] = a
        for cond, ref in [
            (o > v, a > v),
            (o >= v, a >= v),
            (o < v, a < v),
            (o <= v, a <= v),
            (o.eq(v), a == v),
        ]:
            h = o.where(cond)
            assert h.count == ref.sum(), (dt, cond)
            assert np.array_equal(h.coords, np.argwhere(ref)), (dt, cond)
            assert np.array_equal(h.values, a[ref]), (dt, cond)
            assert h.values.dtype == a.dtype


def test_integers_beyond_float_precision_compare_exactly(dep):
    c = dep.client()
    o = c.create_container("big").create_object("i", shape=(3,), dtype="int64")
    o[...] = np.array([2**60, 2**60 + 1, -(2**62)], dtype=np.int64)
    assert o.where(o.eq(2**60 + 1)).coords.tolist() == [[1]]
    u = c.open_container("big").create_object("u", shape=(2,), dtype="uint64")
    u[...] = np.array([2**64 - 1, 5], dtype=np.uint64)
    assert u.where(u > 2**63).coords.tolist() == [[0]]


def test_and_or_over_objects_of_different_owners_held_elsewhere(dep):
    """energy and x are owned by different servers; the writer's node-local server (1) holds
    the data of both, so the owner of energy reads x from x's owner, which reads it from the
    holder: no object moves whole to the client."""
    names = names_on_every_server("vpic", 2)
    c = client_on(dep, 1)
    ct = c.create_container("vpic")
    rng = np.random.default_rng(7)
    n = 300_000
    energy = rng.random(n, dtype=np.float32) * 3
    x = rng.random(n) * 300
    e = ct.create_object(names[0], shape=(n,), dtype="float32")
    xo = ct.create_object(names[1], shape=(n,), dtype="float64")
    assert {owner_of_name(e.name, 2), owner_of_name(xo.name, 2)} == {0, 1}
    e[...] = energy
    xo[...] = x
    before = owner_read_bytes(c)
    h = c.where(((e > 2.5) & (xo < 100)) | (xo > 299.9), values=[e, xo])
    ref = ((energy > 2.5) & (x < 100)) | (x > 299.9)
    assert h.count == ref.sum() > 0
    assert np.array_equal(h.coords[:, 0], np.flatnonzero(ref))
    assert np.array_equal(h.values_of[e.name], energy[ref])
    assert np.array_equal(h.values_of[xo.name], x[ref])
    assert h.min == pytest.approx(float(energy[ref].min()))
    # The client got the hits only: far less than either object.
    sent = sum(owner_read_bytes(c)) - sum(before)
    assert sent < energy.nbytes / 2, sent
    assert h.scanned_bytes == energy.nbytes + x.nbytes


def test_region_restricts_the_search_and_the_data_read(dep):
    c = dep.client()
    o = c.create_container("r").create_object("a", shape=(500, 400), dtype="float64")
    a = np.random.default_rng(1).random((500, 400))
    o[...] = a
    h = o.where("> 0.9 & < 0.95", region=np.s_[100:120, 10:300])
    ref = np.zeros(a.shape, bool)
    ref[100:120, 10:300] = (a[100:120, 10:300] > 0.9) & (a[100:120, 10:300] < 0.95)
    assert np.array_equal(h.coords, np.argwhere(ref))
    assert h.scanned_bytes == 20 * 290 * 8
    with pytest.raises(pdcx.InvalidArgumentError, match="steps"):
        o.where(o > 0, region=np.s_[::2])
    # Python clamps slices like numpy; the server checks the bounds it is sent.
    with pytest.raises(pdcx.OutOfBoundsError):
        c._c.value_query(json.dumps([(o > 0)._expr]), [0, 0], [501, 1])


def test_histogram_counts_and_min_max_match_numpy(dep):
    c = dep.client()
    o = c.create_container("h").create_object("a", shape=(1000,), dtype="float32")
    a = np.random.default_rng(2).standard_normal(1000).astype(np.float32)
    o[...] = a
    counts, edges = o.histogram(bins=8)
    ref, ref_edges = np.histogram(a.astype(np.float64), bins=8)
    assert counts.tolist() == ref.tolist()
    assert np.allclose(edges, ref_edges)
    sel = o.where(o > 1.0, coords=False, values=False, bins=3)
    assert sel.coords is None and sel.count == (a > 1).sum()
    assert sum(sel.histogram) == sel.count


def test_bad_queries_fail_clearly(dep):
    c = dep.client()
    ct = c.create_container("bad")
    a = ct.create_object("a", shape=(10, 10), dtype="float64")
    b = ct.create_object("b", shape=(10, 11), dtype="float64")
    s = ct.create_object("s", shape=(10,), dtype="bytes")
    a[...] = np.arange(100.0).reshape(10, 10)
    with pytest.raises(pdcx.InvalidArgumentError, match="same shape"):
        c.where((a > 1) & (b > 1))
    with pytest.raises(pdcx.InvalidArgumentError, match="bytes"):
        c.where(s > 1)
    with pytest.raises(pdcx.InvalidArgumentError, match="finite"):
        _ = a > float("inf")
    with pytest.raises(pdcx.InvalidArgumentError, match="number"):
        _ = a > "3"
    with pytest.raises(TypeError, match="&"):
        _ = (a > 1) and (a < 5)
    with pytest.raises(pdcx.InvalidArgumentError, match="too many"):
        c.where(a > 10, max_hits=5)
    # The count alone has no limit.
    assert c.where(a > 10, coords=False, values=[], max_hits=5).count == 89
    with pytest.raises(pdcx.InvalidArgumentError, match="parse"):
        a.where("above 3")
    # The wire form is flat (postfix): malformed or oversized ones are refused, not crashed on.
    cond = (a > 1)._expr
    for bad in [[], ["And"], [cond, "Or"], [cond, cond], [cond] * 200]:
        with pytest.raises(pdcx.InvalidArgumentError):
            c._c.value_query(json.dumps(bad))


def test_strided_reads_move_only_the_selected_elements(dep):
    """obj[::20, ::20] is selected by the owner: its reply carries the selection's bytes, not
    the bounding box's."""
    c = client_on(dep, 1)
    names = names_on_every_server("stride", 2)
    for name in names:
        o = c.create_container(f"c-{name}").create_object(name, shape=(400, 300, 5), dtype="float64")
        a = np.random.default_rng(5).random((400, 300, 5))
        o[...] = a
        for key in [
            np.s_[::20, ::20],
            np.s_[3::7, 1:250:9, ::2],
            np.s_[5, ::3, 4],
            np.s_[::399, ::299, ::4],
            np.s_[100:101, 7:8, 1:2],
        ]:
            assert np.array_equal(o[key], a[key]), key
        before = owner_read_bytes(c)
        got = o[::20, ::20]
        moved = sum(owner_read_bytes(c)) - sum(before)
        assert got.shape == (20, 15, 5)
        assert moved == got.nbytes, (moved, got.nbytes)


@pytest.mark.parametrize("direct", ["1", "0"])
def test_strided_reads_of_overlapping_and_missing_writes(dep, monkeypatch, direct):
    """A same-node client gathers a strided selection from the mapped log itself
    (`PiecePlan`, counted in `piece_plans`): from the owner's log, or (object owned by server
    0, written through server 1) from every holder's, merged by sequence number. With
    PDCX_DIRECT_READ=0 the owner selects it. Each way, later writes win over earlier ones,
    the fill value shows where nothing was written, and chunk-shaped extents (as an HDF5
    import leaves them) are read right."""
    monkeypatch.setenv("PDCX_DIRECT_READ", direct)
    c = client_on(dep, 1)
    rng = np.random.default_rng(2)
    for name in names_on_every_server("ov", 2):
        o = c.create_container(f"ov-{name}").create_object(name, shape=(48, 64, 70), dtype="float32", fill=-1.0)
        a = np.full((48, 64, 70), -1.0, dtype=np.float32)
        for t in range(0, 48, 16):  # chunks of 16 x 32 x 32, the last columns left unwritten
            for x in range(0, 64, 32):
                for y in range(0, 64, 32):
                    blk = rng.random((16, 32, 32), dtype=np.float32)
                    o[t : t + 16, x : x + 32, y : y + 32] = blk
                    a[t : t + 16, x : x + 32, y : y + 32] = blk
        over = rng.random((20, 10, 40), dtype=np.float32)  # overwrites parts of several chunks
        o[10:30, 25:35, 20:60] = over
        a[10:30, 25:35, 20:60] = over
        if owner_of_name(name, 2) == 0:
            o2 = client_on(dep, 0).open_object(name)  # a second holder: server 0
            o2[0:5, 0:64:1, 0:10] = np.float32(7.0)
            a[0:5, :, 0:10] = 7.0
        plans, sent, selected = sum(s["piece_plans"] for s in c.stats()), sum(owner_read_bytes(c)), 0
        # The last selection is over 256 KiB: gathered by slabs of its first dim on several
        # threads (`gather_pieces`), the overlapping writes resolved the same in every slab.
        keys = [np.s_[:, 5::20, 5::20], np.s_[::3, ::3, ::3], np.s_[:, 30, 66], np.s_[2:40:5, 20:40:2, 3:70:3]]
        for key in [*keys, np.s_[:, :, 1::2]]:
            got = o[key]
            assert np.array_equal(got, a[key]), (name, key)
            selected += got.nbytes
        made = sum(s["piece_plans"] for s in c.stats()) - plans
        # [:, 30, 66] is a plain region read, of short rows: gathered by extent too
        assert made == (5 if direct == "1" else 0), made
        # Counted once each: a gather that fell back to the owner would count twice.
        assert sum(owner_read_bytes(c)) - sent == selected


def test_point_reads_return_the_elements_in_the_order_asked(dep):
    c = client_on(dep, 1)
    o = c.create_container("pts").create_object("a", shape=(3000, 700), dtype="int32")
    a = np.arange(3000 * 700, dtype=np.int32).reshape(3000, 700)
    o[...] = a
    rng = np.random.default_rng(9)
    pts = np.stack([rng.integers(0, 3000, 5000), rng.integers(0, 700, 5000)], axis=1)
    pts[10] = pts[3]  # repeats are fine
    assert np.array_equal(o.points(pts), a[pts[:, 0], pts[:, 1]])
    h = o.where(o > 2_099_990)
    assert np.array_equal(o.points(h.coords), h.values)
    assert o.points(np.empty((0, 2), dtype=np.int64)).size == 0
    before = owner_read_bytes(c)
    o.points(pts[:100])
    assert sum(owner_read_bytes(c)) - sum(before) == 400
    with pytest.raises(pdcx.OutOfBoundsError, match="outside"):
        o.points([[3000, 0]])
    with pytest.raises(pdcx.InvalidArgumentError, match="coords"):
        o.points([[1, 2, 3]])
    with pytest.raises(pdcx.InvalidArgumentError, match="non-negative"):
        o.points([[-1, 2]])


TIER_TOML = """
[[tier]]
name = "pfs"
kind = "shared"
path = "{path}"

[log]
segment_bytes = "1MiB"

[flush]
interval_ms = 100
"""


def test_extent_statistics_let_a_selective_query_skip_extents_on_a_tier(deployment, tmp_path):
    """Each 256 KiB extent holds values in [k, k+1): a query for (40.5, 40.6) reads only extent
    40 from the tier, on the owner and on another holder, before and after a restart, and
    reads everything when the object turns statistics off."""
    dep = deployment(n=2, start=False)
    (dep.root / "pdcx.toml").write_text(TIER_TOML.format(path=tmp_path / "pfs"))
    dep.start()
    c = client_on(dep, 1)
    ct = c.create_container("stats")
    chunk, n_chunks = 32_768, 64
    rng = np.random.default_rng(11)
    data = np.concatenate([k + rng.random(chunk) for k in range(n_chunks)])
    objs = []
    for name in names_on_every_server("stats", 2) + ["stats/off"]:
        tags = {"pdcx.stats": "off"} if name.endswith("off") else None
        o = ct.create_object(name, shape=data.shape, dtype="float64", tags=tags)
        for k in range(0, data.size, chunk):
            o.write_async(data[k : k + chunk], offset=(k,)).wait()
        objs.append(o)
    c.flush()
    ref = np.flatnonzero((data > 40.5) & (data < 40.6))

    def check(c):
        for o in objs:
            o = c.open_object(o.name)
            assert all("pfs" in e["tier"] for e in o.extents()), "every extent is on the tier"
            h = o.where((o > 40.5) & (o < 40.6))
            assert np.array_equal(h.coords[:, 0], ref)
            assert np.array_equal(h.values, data[ref])
            if o.name.endswith("off"):
                assert h.scanned_bytes == data.nbytes and h.skipped_bytes == 0
            else:
                assert h.scanned_bytes == chunk * 8, (o.name, h.scanned_bytes)
                assert h.skipped_bytes == data.nbytes - chunk * 8
            # A condition every extent may match reads everything.
            assert o.where(o > 0.5, coords=False, values=False).scanned_bytes == data.nbytes

    check(c)
    dep.restart()
    check(client_on(dep, 1))
    stats = client_on(dep, 0).stats()
    assert sum(s["query_skipped_bytes"] for s in stats) > 0


def test_strided_reads_of_data_on_a_tier_extent_by_extent(deployment, tmp_path, monkeypatch):
    """With every extent on a tier (log segments retired, servers restarted: empty caches),
    a strided read is read extent by extent (one tier read of the selected box of each),
    with overlapping writes and unwritten parts (fill) right."""
    monkeypatch.setenv("PDCX_DIRECT_READ", "0")
    dep = deployment(n=1, start=False)
    (dep.root / "pdcx.toml").write_text(TIER_TOML.format(path=tmp_path / "pfs"))
    dep.start()
    c = dep.client()
    o = c.create_container("t").create_object("t/a", shape=(40, 96, 90), dtype="int32", fill=-7)
    a = np.full((40, 96, 90), -7, dtype=np.int32)
    rng = np.random.default_rng(4)
    for t in range(0, 40, 8):
        for x in range(0, 96, 32):
            for y in range(0, 64, 32):  # columns 64.. never written
                blk = rng.integers(0, 1 << 30, (8, 32, 32), dtype=np.int32)
                o[t : t + 8, x : x + 32, y : y + 32] = blk
                a[t : t + 8, x : x + 32, y : y + 32] = blk
    o[3:20, 30:40, 10:70] = 5
    a[3:20, 30:40, 10:70] = 5
    # Later writes fill the log segment "t/a" ends in, so it is sealed and retired too: staged
    # ones (under 256 KiB each), since a one-copy write goes to its writer's own segment.
    pad = c.open_container("t").create_object("t/pad", shape=(3 << 20,), dtype="uint8")
    for at in range(0, 3 << 20, 128 << 10):
        pad[at : at + (128 << 10)] = 1
    c.flush()
    dep.restart()
    o = dep.client().open_object("t/a")
    assert all(e["tier"] == "pfs" for e in o.extents()), {e["tier"] for e in o.extents()}
    for key in [np.s_[:, 5::20, 5::20], np.s_[::3, ::3, ::3], np.s_[1:39:4, 2:90:7, 60:90:2]]:
        assert np.array_equal(o[key], a[key]), key
