"""Byte streams written under `pdcx run` have versions like every object: each consistency
point (MPI_File_sync, MPI_File_close) of an unmodified MPI-IO program is a version numbered by
the newest write it holds, listed (`obj.versions()`, with its size), read (`obj.at(v)`, `pdcx
get --version`) and named; once a newer version is at home the older ones are refused, unless
the stream's tags or a container's keep them (`pdcx.keep.last`), in which case the log keeps
their writes.
Real `mpirun` (4 ranks, OpenMPI's ompio) running tests/c/mpiio_epochs.c."""

from __future__ import annotations

import pdcx
import pytest
from conftest import run_pdcx
from test_mpiio_crash import check_run_available, epochs_prog, finish, golden, start_job  # noqa: F401

NAME = "mpiio/ckpt.dat"


def run_job(dep, tmp_path, epochs_prog, epochs: int) -> None:  # noqa: F811
    out, home = tmp_path / "out", tmp_path / "home"
    out.mkdir(exist_ok=True)
    home.mkdir(exist_ok=True)
    rc, synced, text = finish(start_job(dep.root, epochs_prog, out, home, epochs, 0))
    assert rc == 0 and synced == epochs, text
    run_pdcx("flush", "--root", dep.root, "--stall", "60", timeout=120)


@pytest.mark.parametrize("kept_by", ["its own tag", "its container's tag"])
def test_a_streams_versions_are_listed_read_named_and_kept_as_tags_ask(deployment, tmp_path, epochs_prog, kept_by):  # noqa: F811
    check_run_available()
    dep = deployment(n=2)
    run_job(dep, tmp_path, epochs_prog, 2)
    c = dep.client()
    obj = c.open_object(NAME)
    listed = obj.versions()
    # Without a policy: only the version at home is left.
    assert len(listed) == 1 and listed[0]["size"] == len(golden(2, 2)), listed
    newest = listed[0]["version"]
    assert obj.at(newest)[...].tobytes() == golden(2, 2)
    with pytest.raises(pdcx.NotFoundError):
        obj.at(newest - 1)[...]
    # Kept on purpose: the next run's versions all stay readable, and are named like any.
    if kept_by == "its own tag":
        run_pdcx("tag", "--root", dep.root, NAME, "pdcx.keep.last=10")
    else:
        c.create_container("kept", tags={"pdcx.keep.last": 10}).add(obj)
    run_job(dep, tmp_path, epochs_prog, 3)
    listed = [v for v in obj.versions() if v["version"] > newest]
    assert len(listed) >= 3, listed
    contents = [obj.at(v["version"])[...].tobytes() for v in listed]
    for e in (1, 2, 3):
        assert golden(e, 3) in contents, f"epoch {e} of the second run is not a readable version"
    first = next(v["version"] for v, got in zip(listed, contents) if got == golden(1, 3))
    assert obj.name_version("first", first) == first
    assert obj.at("first")[...].tobytes() == golden(1, 3)
    out = tmp_path / "v1.bin"
    run_pdcx("get", "--root", dep.root, NAME, "--version", "first", "-o", out)
    assert out.read_bytes() == golden(1, 3)
    with pytest.raises(pdcx.NotFoundError, match="no version"):
        obj.at(first + 1 if first + 1 not in [v["version"] for v in listed] else 0)[...]
