"""Versions on purpose with real servers: every write of an N-d object is a version that can be
read (`obj.at`, `pdcx get --version`), named (`obj.name_version`, `pdcx tag --version`) and
listed (`obj.versions`, `pdcx show`); compaction keeps the versions an object's tags ask for
(`pdcx.keep.last`, named ones) and refuses a read of one it dropped, on every server that
holds writes of the object."""

from __future__ import annotations

import json

import numpy as np
import pdcx
import pytest
from conftest import client_on, owner_of_name, run_pdcx

N = 1 << 16


def checkpoints(obj, steps: int) -> list[int]:
    """`steps` whole-object writes; the version number of each."""
    out = []
    for step in range(steps):
        obj[:] = np.full(N, step, "f8")
        out.append(obj.versions()[-1]["version"])
    return out


def test_versions_are_read_named_listed_and_kept_as_tags_ask(deployment, monkeypatch, tmp_path):
    monkeypatch.setenv("PDCX_COMPACTION_THRESHOLD", "0")  # passes only when asked
    dep = deployment(n=2)
    name = next(f"v{i}" for i in range(1000) if owner_of_name(f"v{i}", 2) == 0)
    # Server 1 holds the writes, server 0 owns the object: the holder decides what to drop,
    # the owner refuses the reads.
    c = client_on(dep, 1)
    obj = c.create_container("versions").create_object(name, (N,), "float64")
    obj.tags["pdcx.keep.last"] = 2
    seqs = checkpoints(obj, 6)
    assert seqs == sorted(seqs) and len(set(seqs)) == 6
    for step, v in enumerate(seqs):
        assert (obj.at(v)[:] == step).all()
    assert obj.name_version("newest") == seqs[5], "no number: the newest version"
    assert obj.name_version("second", seqs[1]) == seqs[1]
    assert obj.tags["pdcx.version.second"] == seqs[1]
    run_pdcx("compact", "--root", dep.root, "--json", timeout=120)
    listed = {v["version"]: v["name"] for v in obj.versions()}
    # Kept: the named ones (second; newest is also among the last two) and the last two.
    assert set(listed) == {seqs[1], seqs[4], seqs[5]}, listed
    assert listed[seqs[1]] == "second"
    assert (obj.at("second")[:] == 1).all()
    assert (obj.at(seqs[4])[:10] == 4).all()
    with pytest.raises(pdcx.NotFoundError, match="dropped by compaction"):
        obj.at(seqs[2])[:]
    # Naming a dropped version is refused.
    with pytest.raises(pdcx.NotFoundError, match="dropped"):
        obj.name_version("late", seqs[3])
    # The CLI: show lists them, get reads one, tag names one.
    show = json.loads(run_pdcx("show", "--root", dep.root, "--json", name).stdout)
    assert show["versions"]["readable"][-2:] == [seqs[4], seqs[5]]
    assert {"name": "second", "version": seqs[1]} in show["versions"]["named"]
    out = tmp_path / "v.npy"
    run_pdcx("get", "--root", dep.root, name, "--version", "second", "-o", out)
    assert (np.load(out) == 1).all()
    p = run_pdcx("get", "--root", dep.root, name, "--version", str(seqs[2]), "-o", out, check=False)
    assert p.returncode != 0 and "dropped by compaction" in p.stderr, p.stderr
    p = run_pdcx("get", "--root", dep.root, name, "--version", "nope", "-o", out, check=False)
    assert p.returncode != 0 and "no version named" in p.stderr, p.stderr
    run_pdcx("tag", "--root", dep.root, name, "--version", "cli", "--at", str(seqs[5]))
    assert obj.tags["pdcx.version.cli"] == seqs[5]
    p = run_pdcx("tag", "--root", dep.root, name, "pdcx.keep.last=-1", check=False)
    assert p.returncode != 0 and "pdcx.keep.last" in p.stderr, p.stderr


def test_two_versions_are_compared(deployment, monkeypatch):
    monkeypatch.setenv("PDCX_COMPACTION_THRESHOLD", "0")
    dep = deployment(n=1)
    obj = dep.client().create_container("cmp").create_object("cmp/x", (N,), "float64")
    obj.tags["pdcx.keep.last"] = 10
    obj[:] = np.zeros(N)
    a = obj.versions()[-1]["version"]
    obj[100:200] = np.ones(100)
    obj[150:160] = np.full(10, 2.0)
    obj[1000:1010] = np.zeros(10)  # written, but the same values
    b = obj.versions()[-1]["version"]
    assert sorted(obj.changes(a, b)) == [((100,), (100,)), ((150,), (10,)), ((1000,), (10,))]
    assert obj.changes(b) == []
    d = json.loads(run_pdcx("diff", "--root", dep.root, "cmp/x", str(a), str(b), "--values", "--json").stdout)
    got = {(tuple(c["offset"]), tuple(c["count"])): c["differing"] for c in d["changed"]}
    assert got == {((100,), (100,)): 100, ((150,), (10,)): 10, ((1000,), (10,)): 0}, d
    p = run_pdcx("diff", "--root", dep.root, "cmp/x", str(b), str(a), check=False)
    assert p.returncode != 0 and "older one first" in p.stderr, p.stderr
    text = run_pdcx("diff", "--root", dep.root, "cmp/x", str(a)).stdout
    assert "3 region(s) written after version" in text, text


def test_without_a_policy_only_the_latest_version_survives_compaction(deployment, monkeypatch):
    monkeypatch.setenv("PDCX_COMPACTION_THRESHOLD", "0")
    dep = deployment(n=1)
    obj = dep.client().create_container("plain").create_object("plain/x", (N,), "float64")
    seqs = checkpoints(obj, 3)
    assert (obj.at(seqs[0])[:] == 0).all(), "readable until compaction drops it"
    run_pdcx("compact", "--root", dep.root, timeout=120)
    assert [v["version"] for v in obj.versions()] == [seqs[2]]
    with pytest.raises(pdcx.NotFoundError):
        obj.at(seqs[0])[:]
    assert (obj[:] == 2).all()


def test_a_containers_policy_keeps_versions_of_its_objects_on_every_holder(deployment, monkeypatch):
    """`pdcx.keep.last` on a container applies to its objects (held on another server than
    the container's and the object's), an object's own tag wins, and an object in two
    containers keeps what the more generous asks."""
    monkeypatch.setenv("PDCX_COMPACTION_THRESHOLD", "0")
    dep = deployment(n=3)
    c = client_on(dep, 2)
    kept = c.create_container("kept", tags={"pdcx.keep.last": 3})
    c.create_container("kept-more", tags={"pdcx.keep.last": 4})
    plain = c.create_container("plain")
    inherits = kept.create_object("inherits", (N,), "float64")
    both = kept.create_object("both", (N,), "float64")
    c.open_container("kept-more").add(both)
    own = kept.create_object("own", (N,), "float64", tags={"pdcx.keep.last": 1})
    alone = plain.create_object("alone", (N,), "float64")
    seqs = {o.name: checkpoints(o, 6) for o in (inherits, both, own, alone)}
    run_pdcx("compact", "--root", dep.root, timeout=120)
    versions = {name: [v["version"] for v in c.open_object(name).versions()] for name in seqs}
    assert versions["inherits"] == seqs["inherits"][-3:], versions
    assert versions["both"] == seqs["both"][-4:], versions
    assert versions["own"] == seqs["own"][-1:], versions
    assert versions["alone"] == seqs["alone"][-1:], versions
    assert (c.open_object("inherits").at(seqs["inherits"][3])[:] == 3).all()
    # A bad policy on a container is refused when set.
    with pytest.raises(pdcx.InvalidArgumentError, match="pdcx.keep.last"):
        plain.tags["pdcx.keep.last"] = "x"
