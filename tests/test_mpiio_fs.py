"""MPI-IO programs see under `pdcx run` what they see on a file system (c/mpiio/).

Each program checks its own results and prints "NAME ok"; it runs directly (the reference:
it must pass there first) and under `pdcx run --prefix OUT --home HOME`, under both of Open
MPI's MPI-IO components, and the home file is compared with the direct run's where the
program's output is deterministic:

- `shared.c`: shared file pointers (`write_shared`, `write_ordered`, `seek_shared`,
  `read_shared`); a rank reading after a barrier sees the others' data, run after run;
- `excl.c`: `MPI_MODE_EXCL` creation and `MPI_File_delete`, which removes the home copy too;
- `pmpi.c` (and `shared.c pmpi`): a program calling only the profiling names
  (`PMPI_File_open`, `PMPI_File_write_shared`, ...) is logged;
- `posixview.c`: after `MPI_File_sync` and after `MPI_File_close`, `stat`/`fopen`/`open` of
  the path see the bytes, in the job and from any other process (write-through; with
  `PDCX_MPIIO_WRITE_THROUGH=off` only the home gets them);
- `pdcx flush` succeeds with nothing to flush and without tiers, and names what it waited for.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, run_pdcx
from test_mpiio import IOS, RANKS, mpi_env, mpirun, need_pdcx_run, ok, pdcx_lines, pdcx_run

PROGS = REPO / "c" / "mpiio"
SHARED_BLOCK = 1024  # ints, shared.c's BLOCK
REPEAT = 5  # runs under pdcx of shared.c: a visibility race shows within a few


@pytest.fixture(scope="module")
def progs(tmp_path_factory) -> dict[str, Path]:
    for tool in ("mpicc", "mpirun"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (scripts/setup.sh --test: openmpi-bin libopenmpi-dev)")
    out = tmp_path_factory.mktemp("mpiio-fs-progs")
    names = ("shared", "excl", "pmpi", "posixview")
    for name in names:
        subprocess.run(
            ["mpicc", "-O2", "-Wall", "-Wextra", "-o", out / name, PROGS / f"{name}.c"], check=True, timeout=120
        )
    return {name: out / name for name in names}


@pytest.fixture
def dirs(tmp_path):
    out, home, direct = tmp_path / "out", tmp_path / "home", tmp_path / "direct"
    for d in (out, home, direct):
        d.mkdir()
    return out, home, direct


def streams(root: Path) -> list[str]:
    return [o["name"] for o in json.loads(run_pdcx("ls", "--json", "--root", root).stdout)["objects"]]


def ordered_round(n: int = RANKS) -> bytes:
    """The second half of shared.c's file: each rank's block in rank order."""
    blocks = []
    for r in range(n):
        b = r * 1000000 + np.arange(SHARED_BLOCK, dtype=np.int32)
        b[0] = r
        blocks.append(b)
    return np.concatenate(blocks).astype("<i4").tobytes()


def run_logged(io: str, dep, out: Path, home: Path, argv: list, banner: str) -> None:
    """One run under `pdcx run`: it must succeed with no pdcx line on stderr."""
    p = pdcx_run(io, out, home, dep.root, argv, env=mpi_env({"PDCX_ROOT": str(dep.root)}))
    ok(p, banner)
    assert not pdcx_lines(p.stderr), f"pdcx complained:\n{p.stderr}"


@pytest.mark.parametrize("io", IOS)
def test_shared_file_pointers_as_on_a_file_system(progs, deployment, dirs, io):
    out, home, direct = dirs
    ok(mpirun(io, [progs["shared"], direct / "s.dat"]), "shared ok")
    need_pdcx_run()
    dep = deployment(n=2)
    for _ in range(REPEAT):
        run_logged(io, dep, out, home, [progs["shared"], out / "s.dat"], "shared ok")
    run_pdcx("flush", "--root", dep.root, timeout=120)
    got, want = (home / "s.dat").read_bytes(), (direct / "s.dat").read_bytes()
    assert len(got) == len(want) == 2 * RANKS * SHARED_BLOCK * 4
    # The first round's order depends on who got the pointer first; the second does not.
    assert got[len(got) // 2 :] == want[len(want) // 2 :] == ordered_round()


@pytest.mark.parametrize("io", IOS)
def test_excl_open_and_delete_remove_the_home_copy(progs, deployment, dirs, io):
    out, home, direct = dirs
    ok(mpirun(io, [progs["excl"], direct / "e.dat"]), "excl ok")
    ok(mpirun(io, [progs["excl"], direct / "gone.dat", "delete"]), "excl ok")
    assert not (direct / "gone.dat").exists()
    need_pdcx_run()
    dep = deployment(n=2)
    # Twice: the second run deletes the first run's file (stream, placeholder and home copy).
    for _ in range(2):
        run_logged(io, dep, out, home, [progs["excl"], out / "e.dat"], "excl ok")
        run_pdcx("flush", "--root", dep.root, timeout=120)
        assert (home / "e.dat").read_bytes() == (direct / "e.dat").read_bytes()
    run_logged(io, dep, out, home, [progs["excl"], out / "gone.dat", "delete"], "excl ok")
    run_pdcx("flush", "--root", dep.root, timeout=120)
    assert not (home / "gone.dat").exists(), "MPI_File_delete left the home copy"
    assert not (out / "gone.dat").exists()
    assert "mpiio/gone.dat" not in streams(dep.root)
    assert "mpiio/e.dat" in streams(dep.root)


@pytest.mark.parametrize("io", IOS)
def test_every_rank_deleting_then_creating_exclusively(progs, deployment, dirs, io):
    """Every rank deletes the file with no barrier after it, then an EXCL create (ROMIO's
    creat_excl test): a rank still deleting must not remove the stream the create makes,
    and concurrent deletes of one stream are not errors."""
    out, home, direct = dirs
    ok(mpirun(io, [progs["excl"], direct / "r.dat", "racing-delete"]), "excl ok")
    need_pdcx_run()
    dep = deployment(n=2)
    for _ in range(4):
        run_logged(io, dep, out, home, [progs["excl"], out / "r.dat", "racing-delete"], "excl ok")
        assert (out / "r.dat").read_bytes() == (direct / "r.dat").read_bytes()
    run_pdcx("flush", "--root", dep.root, timeout=120)
    assert (home / "r.dat").read_bytes() == (direct / "r.dat").read_bytes()


@pytest.mark.parametrize("io", IOS)
def test_profiling_names_are_logged(progs, deployment, dirs, io):
    out, home, direct = dirs
    ok(mpirun(io, [progs["pmpi"], direct / "p.dat"]), "pmpi ok")
    need_pdcx_run()
    dep = deployment(n=2)
    run_logged(io, dep, out, home, [progs["pmpi"], out / "p.dat"], "pmpi ok")
    assert "mpiio/p.dat" in streams(dep.root), "PMPI_File_open was not logged"
    run_pdcx("flush", "--root", dep.root, timeout=120)
    assert (home / "p.dat").read_bytes() == (direct / "p.dat").read_bytes()
    # The shared-pointer calls under their profiling names flush as the MPI_ names do (a
    # rank reading after a barrier sees the others' blocks).
    ok(mpirun(io, [progs["shared"], direct / "s.dat", "pmpi"]), "shared ok")
    for _ in range(3):
        run_logged(io, dep, out, home, [progs["shared"], out / "s.dat", "pmpi"], "shared ok")


@pytest.mark.parametrize("io", IOS)
def test_the_path_shows_the_bytes_after_sync_and_close(progs, deployment, dirs, io):
    """The program itself reads its file with stat/fopen/open after MPI_File_sync and after
    MPI_File_close (posixview.c checks every byte); then this process, outside the job and
    without the preload, reads the same bytes at the path, and the home gets them too."""
    out, home, direct = dirs
    ok(mpirun(io, [progs["posixview"], direct / "v.dat"]), "posixview ok")
    need_pdcx_run()
    dep = deployment(n=2)
    run_logged(io, dep, out, home, [progs["posixview"], out / "v.dat"], "posixview ok")
    assert "mpiio/v.dat" in streams(dep.root), "the file was not logged"
    want = (direct / "v.dat").read_bytes()
    assert (out / "v.dat").read_bytes() == want
    run_pdcx("flush", "--root", dep.root, timeout=120)
    assert (home / "v.dat").read_bytes() == want


def test_a_plain_file_under_the_prefix_is_named_once(progs, deployment, dirs):
    """Files the program writes under the prefix with fopen/open (not MPI-IO) are plain files:
    each is named once on stderr, written as asked, and not logged."""
    need_pdcx_run()
    out, home, _ = dirs
    dep = deployment(n=2)
    env = mpi_env({"PDCX_ROOT": str(dep.root)})
    p = pdcx_run("ompio", out, home, dep.root, [progs["posixview"], out / "v.dat", "plain"], env=env)
    ok(p, "posixview ok")
    lines = pdcx_lines(p.stderr)
    for suffix in ("notes", "raw"):
        named = [ln for ln in lines if f"v.dat.{suffix} is written outside MPI-IO" in ln]
        assert len(named) == 1, p.stderr
        assert str(home / f"v.dat.{suffix}") in named[0], named[0]
    assert len(lines) == 2, p.stderr
    assert (out / "v.dat.notes").read_text() == "notes\n" and (out / "v.dat.raw").read_text() == "raw\n"
    assert streams(dep.root) == ["mpiio/v.dat"]


def test_write_through_off_leaves_only_the_home(progs, deployment, dirs):
    """PDCX_MPIIO_WRITE_THROUGH=off: the file at the path stays empty (what a user with a slow
    prefix asks for), the stream and the home hold the bytes."""
    need_pdcx_run()
    out, home, direct = dirs
    ok(mpirun("ompio", [progs["pmpi"], direct / "p.dat"]), "pmpi ok")
    dep = deployment(n=2)
    env = mpi_env({"PDCX_ROOT": str(dep.root), "PDCX_MPIIO_WRITE_THROUGH": "off"})
    p = pdcx_run("ompio", out, home, dep.root, [progs["pmpi"], out / "p.dat"], env=env)
    ok(p, "pmpi ok")
    assert not pdcx_lines(p.stderr), p.stderr
    assert (out / "p.dat").stat().st_size == 0
    run_pdcx("flush", "--root", dep.root, timeout=120)
    assert (home / "p.dat").read_bytes() == (direct / "p.dat").read_bytes()


def test_flush_with_nothing_to_flush_succeeds(deployment):
    """No tiers, no files: exit 0 and a line for each part saying there was nothing."""
    dep = deployment(n=1)
    p = run_pdcx("flush", "--root", dep.root, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no tiers configured" in p.stdout and "no file was waiting" in p.stdout, p.stdout


def test_flush_names_the_files_it_waited_for(progs, deployment, dirs):
    """Right after a job, flush waits for the home copies it finds pending and names each
    file; a file already home by then is reported as nothing to wait for."""
    need_pdcx_run()
    out, home, _ = dirs
    dep = deployment(n=2)
    run_logged("ompio", dep, out, home, [progs["pmpi"], out / "p.dat"], "pmpi ok")
    p = run_pdcx("flush", "--root", dep.root, check=False, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    if "no file was waiting" not in p.stdout:
        assert "waited" in p.stdout and str(home / "p.dat") in p.stdout, p.stdout
    assert (home / "p.dat").is_file()
    # Once everything is home, a second flush has nothing to wait for, and says so.
    p = run_pdcx("flush", "--root", dep.root, check=False, timeout=120)
    assert p.returncode == 0 and "no file was waiting" in p.stdout, p.stdout
