"""A deployment's files are its user's alone, checked with a real second user (`nobody`, via
`setpriv`): everything `pdcx server start` and the servers create under the root is 0600/0700,
so another user can read no byte, name or log of it; and a root that another user owns or can
write (planted first, e.g. the documented /tmp/pdcx) is refused with the fix in the message."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import pdcx_bin, run_pdcx

NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def need_second_user() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.fail("these tests run as root with setpriv (util-linux) to act as a second user")


def as_nobody(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([*NOBODY, *map(str, argv)], capture_output=True, text=True, timeout=60, check=False)


def test_every_file_of_a_deployment_is_private(deployment, tmp_path):
    need_second_user()
    # The parent others may enter, as a shared scratch directory is.
    tmp_path.chmod(0o755)
    dep = deployment(n=2, root=tmp_path / "fresh" / "root", start=False)
    dep.root.rmdir()  # a root that does not exist yet: pdcx creates it
    dep.root.parent.chmod(0o755)
    dep.start()
    c = dep.client()
    obj = c.create_container("secret").create_object("array", (4096,), "float64")
    obj[:] = np.arange(4096, dtype=np.float64)
    c.sync()
    assert stat.S_IMODE(dep.root.stat().st_mode) == 0o700
    shared = []
    files = 0
    for p in dep.root.rglob("*"):
        if p.is_symlink():
            continue
        files += p.is_file()
        if stat.S_IMODE(p.stat().st_mode) & 0o077:
            shared.append(f"{p} {stat.filemode(p.stat().st_mode)}")
    assert files >= 5 and not shared, "\n".join(shared)
    # Another user: no listing, no bytes, no metadata, no log.
    segment = next(p for p in dep.root.rglob("*") if p.is_file() and "log" in p.parts)
    for argv in (["ls", dep.root], ["cat", segment], ["cat", next(dep.root.rglob("meta.sqlite"))]):
        p = as_nobody(*argv)
        assert p.returncode != 0 and "Permission denied" in p.stderr, (argv, p.stdout, p.stderr)


@pytest.mark.parametrize("how", ["owned by another user", "writable by anyone", "writable by its group"])
def test_a_root_someone_else_could_plant_is_refused(tmp_path, how):
    need_second_user()
    root = tmp_path / "root"
    root.mkdir()
    if how == "owned by another user":
        os.chown(root, 65534, 65534)
        words = ["owned by uid 65534", "mkdir -m 700"]
    elif how == "writable by anyone":
        root.chmod(0o777)
        words = ["can be written by anyone", f"chmod 700 {root}"]
    else:
        root.chmod(0o770)
        words = ["can be written by its group", "chmod 700"]
    p = run_pdcx("server", "start", "-n", 1, "--root", root, check=False, timeout=60)
    assert p.returncode != 0, p.stdout + p.stderr
    for w in words:
        assert w in p.stderr, p.stderr
    # Refused before anything was created in it.
    assert list(root.iterdir()) == []
    # The foreground server refuses the same root.
    p = subprocess.run(
        [pdcx_bin(), "server", "--root", str(root), "--rank", "0", "--size", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode != 0 and words[0] in p.stderr, p.stderr
    assert list(root.iterdir()) == []


def test_the_logs_are_private_and_not_followed_through_a_symlink(deployment, tmp_path):
    need_second_user()
    dep = deployment(n=1)
    log = dep.root / "logs" / "server-0.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    dep.stop()
    # A symlink where the log goes (only the owner can put one there: the root is theirs):
    # the server does not write through it.
    target = tmp_path / "elsewhere.txt"
    target.write_text("untouched\n")
    log.unlink()
    log.symlink_to(target)
    p = run_pdcx("server", "start", "-n", 1, "--root", dep.root, check=False, timeout=60)
    assert p.returncode != 0 and "server-0.log" in p.stderr, p.stdout + p.stderr
    assert target.read_text() == "untouched\n"
    Path(log).unlink()


@pytest.mark.parametrize("how", ["owned by another user", "writable by others"])
def test_a_config_someone_else_could_change_is_refused(deployment, how):
    """pdcx.toml decides where the data goes (tiers, buckets): a server refuses one another
    user owns or can change, naming it and the fix."""
    need_second_user()
    dep = deployment(n=1, start=False)
    cfg = dep.root / "pdcx.toml"
    cfg.write_text("")
    if how == "owned by another user":
        os.chown(cfg, 65534, 65534)
        word = "owned by uid 65534"
    else:
        cfg.chmod(0o666)
        word = f"chmod 600 {cfg}"
    p = run_pdcx("server", "start", "-n", 1, "--root", dep.root, check=False, timeout=60)
    assert p.returncode != 0, p.stdout + p.stderr
    log = (dep.root / "logs" / "server-0.log").read_text()
    assert word in p.stderr + log, p.stderr + log


def test_an_entry_of_the_root_another_user_owns_is_refused(deployment):
    """A directory planted in the root before it was made private (here the log directory,
    owned by nobody): the server refuses the root instead of writing its logs where another
    user can read or redirect them."""
    need_second_user()
    dep = deployment(n=1, start=False)
    dep.root.chmod(0o700)
    planted = dep.root / "logs"
    planted.mkdir()
    os.chown(planted, 65534, 65534)
    p = run_pdcx("server", "start", "-n", 1, "--root", dep.root, check=False, timeout=60)
    assert p.returncode != 0, p.stdout + p.stderr
    assert f"{planted} in the deployment root is owned by uid 65534" in p.stderr, p.stderr
    assert list(planted.iterdir()) == []


def test_group_access_is_an_explicit_setting(deployment, monkeypatch, request):
    """PDCX_GROUP_ACCESS=read: the deployment's group may read its files (0640/0750), a user
    outside the group still may not, and nobody but the owner may write."""
    need_second_user()
    monkeypatch.setenv("PDCX_GROUP_ACCESS", "read")
    # Outside pytest's private temporary tree, so the group can reach it.
    shared = Path(tempfile.mkdtemp(prefix="pdcx-group-"))
    shared.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    dep = deployment(n=1, root=shared / "root", start=False)
    dep.root.rmdir()
    dep.start()
    c = dep.client()
    obj = c.create_container("g").create_object("g", (1024,), "float64")
    obj[:] = np.arange(1024, dtype=np.float64)
    c.sync()
    assert stat.S_IMODE(dep.root.stat().st_mode) == 0o750
    segment = next(p for p in dep.root.rglob("*") if p.is_file() and "log" in p.parts)
    assert stat.S_IMODE(segment.stat().st_mode) == 0o640
    writable = [p for p in dep.root.rglob("*") if not p.is_symlink() and p.stat().st_mode & 0o022]
    assert not writable, writable
    gid = dep.root.stat().st_gid
    in_group = subprocess.run(
        ["setpriv", "--reuid=nobody", f"--regid={gid}", "--clear-groups", "cat", str(segment)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert in_group.returncode == 0 and len(in_group.stdout) > 0, in_group.stderr
    outside = as_nobody("cat", segment)
    assert outside.returncode != 0 and "Permission denied" in outside.stderr
