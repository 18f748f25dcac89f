"""One deployment shared by several users, checked with a real second user (`nobody`, via
`setpriv`): a user the deployment lists in `users` proves who it is by the kernel's word (or its
user key), reaches what it creates, and reaches the deployment user's objects only once they are
shared with it; a user the deployment does not list gets nothing; only the deployment's user
stops servers; and the deployment's files stay private throughout."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import pdcx_bin, run_pdcx

NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
# A second unprivileged user the deployment does not list.
DAEMON = ["setpriv", "--reuid=daemon", "--regid=daemon", "--clear-groups"]


def need_second_user() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.fail("these tests run as root with setpriv (util-linux) to act as other users")


def as_user(who: list[str], root: Path, *argv, env: dict | None = None) -> subprocess.CompletedProcess:
    e = {"PATH": os.environ["PATH"], "PDCX_ROOT": str(root), "HOME": "/tmp", **(env or {})}
    return subprocess.run(
        [*who, pdcx_bin(), *map(str, argv)], capture_output=True, text=True, timeout=60, check=False, env=e
    )


@pytest.fixture
def shared_dir(request) -> Path:
    """A directory outside pytest's private temporary tree, so other users can reach it."""
    d = Path(tempfile.mkdtemp(prefix="pdcx-users-"))
    d.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(d, ignore_errors=True))
    return d


@pytest.fixture
def shared(deployment, shared_dir, monkeypatch):
    """Two servers serving their own user (root) and `nobody`, with an object of root's."""
    need_second_user()
    monkeypatch.setenv("PDCX_USERS", "nobody")
    dep = deployment(n=2, root=shared_dir / "root", start=False)
    dep.root.rmdir()
    dep.start()
    c = dep.client()
    obj = c.create_container("owner").create_object("owner/secret", (1000,), "float64")
    obj[:] = np.arange(1000, dtype=np.float64)
    c.sync()
    return dep


def test_a_listed_user_reaches_its_own_objects_and_no_others(shared, shared_dir):
    root = shared.root
    # The root lets users in to the published addresses and the sockets, nothing more.
    assert stat.S_IMODE(root.stat().st_mode) == 0o711
    assert stat.S_IMODE((root / "cluster.json").stat().st_mode) == 0o600
    public = root / "cluster.pub.json"
    assert stat.S_IMODE(public.stat().st_mode) == 0o644
    assert "secret" not in public.read_text() or '"secret": ""' in public.read_text()
    segment = next(p for p in root.rglob("*") if p.is_file() and "log" in p.parts)
    for argv in (["ls", root], ["cat", segment], ["cat", root / "cluster.json"]):
        p = subprocess.run([*NOBODY, *map(str, argv)], capture_output=True, text=True, check=False)
        assert p.returncode != 0 and "Permission denied" in p.stderr, (argv, p.stderr)

    # nobody writes and reads its own object.
    data = shared_dir / "mine.npy"
    np.save(data, np.arange(12.0).reshape(3, 4))
    data.chmod(0o644)
    out = shared_dir / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    p = as_user(NOBODY, root, "put", data, "--name", "nob/mine", "--container", "nob")
    assert p.returncode == 0, p.stderr
    p = as_user(NOBODY, root, "get", "nob/mine", "-o", out / "mine.npy")
    assert p.returncode == 0, p.stderr
    assert np.array_equal(np.load(out / "mine.npy"), np.arange(12.0).reshape(3, 4))

    # It does not see root's object, container or bytes.
    p = as_user(NOBODY, root, "ls")
    assert p.returncode == 0, p.stderr
    assert "nob/mine" in p.stdout and "owner/secret" not in p.stdout and "owner" not in p.stdout.split(), p.stdout
    p = as_user(NOBODY, root, "get", "owner/secret", "-o", out / "stolen.npy")
    assert p.returncode != 0 and "may not read" in p.stderr, p.stdout + p.stderr
    assert not (out / "stolen.npy").exists()
    p = as_user(NOBODY, root, "tag", "owner/secret", "x=1")
    assert p.returncode != 0 and "may not read" in p.stderr, p.stderr
    p = as_user(NOBODY, root, "rm", "owner/secret")
    assert p.returncode != 0, p.stdout + p.stderr
    assert shared.client().open_object("owner/secret")[:].sum() == sum(range(1000))

    # The deployment's user reaches everything (the servers act with its rights anyway), and
    # the object is nobody's.
    mine = shared.client().open_object("nob/mine")
    assert np.array_equal(mine[:], np.arange(12.0).reshape(3, 4))


def test_sharing_grants_and_takes_back(shared, shared_dir):
    root = shared.root
    out = shared_dir / "out"
    out.mkdir()
    out.chmod(0o777)
    p = run_pdcx("share", "owner/secret", "--user", "nobody", "--root", root)
    assert "nobody" in p.stdout and "may read" in p.stdout, p.stdout
    p = as_user(NOBODY, root, "get", "owner/secret", "-o", out / "shared.npy")
    assert p.returncode == 0, p.stderr
    assert np.array_equal(np.load(out / "shared.npy"), np.arange(1000, dtype=np.float64))
    # Read, not write: a tag (a change) is refused; only the owner shares or deletes.
    p = as_user(NOBODY, root, "tag", "owner/secret", "x=1")
    assert p.returncode != 0 and "may not change" in p.stderr, p.stderr
    p = as_user(NOBODY, root, "share", "owner/secret", "--everyone")
    assert p.returncode != 0 and "may not delete, rename or share" in p.stderr, p.stderr
    run_pdcx("share", "owner/secret", "--user", "nobody", "--write", "--root", root)
    p = as_user(NOBODY, root, "tag", "owner/secret", "x=1")
    assert p.returncode == 0, p.stderr
    run_pdcx("share", "owner/secret", "--user", "nobody", "--revoke", "--root", root)
    p = as_user(NOBODY, root, "get", "owner/secret", "-o", out / "again.npy")
    assert p.returncode != 0 and "may not read" in p.stderr, p.stderr


def test_an_unlisted_user_and_a_claimed_identity_get_nothing(shared, shared_dir):
    root = shared.root
    # daemon is not in `users`: refused at the handshake, even over the open socket.
    p = as_user(DAEMON, root, "ls")
    assert p.returncode != 0 and "is not a user of this deployment" in p.stderr, p.stdout + p.stderr
    # A user key proves exactly its uid: daemon holding nobody's key is refused, since the
    # kernel says who it is.
    key = shared_dir / "nobody.key"
    made = run_pdcx("server", "user-key", "nobody", "--root", root)
    key.write_text(made.stdout.strip())
    key.chmod(0o644)
    p = as_user(DAEMON, root, "ls", env={"PDCX_USER_KEY": str(key)})
    assert p.returncode != 0, p.stdout
    assert "is not a user of this deployment" in p.stderr or "the kernel says" in p.stderr, p.stderr
    # nobody with its key, over TCP: accepted.
    p = as_user(NOBODY, root, "ls", env={"PDCX_USER_KEY": str(key), "PDCX_UNIX": "0"})
    assert p.returncode == 0, p.stderr
    # A wrong key is refused.
    bad = shared_dir / "bad.key"
    bad.write_text("00" * 32)
    bad.chmod(0o644)
    p = as_user(NOBODY, root, "ls", env={"PDCX_USER_KEY": str(bad), "PDCX_UNIX": "0"})
    assert p.returncode != 0 and "does not hold the key of uid" in p.stderr, p.stderr


def test_only_the_deployment_user_stops_servers(shared):
    p = as_user(NOBODY, shared.root, "server", "stop")
    # nobody cannot even read the secret the admin role needs.
    assert p.returncode != 0 or "no deployment" in p.stdout, p.stdout + p.stderr
    assert run_pdcx("server", "status", "--root", shared.root, check=False).returncode == 0


def test_a_deployment_that_lists_no_users_serves_only_its_own(deployment, shared_dir):
    need_second_user()
    dep = deployment(n=1, root=shared_dir / "root", start=False)
    dep.root.rmdir()
    dep.start()
    assert stat.S_IMODE(dep.root.stat().st_mode) == 0o700
    assert not (dep.root / "cluster.pub.json").exists()
    p = as_user(NOBODY, dep.root, "ls")
    assert p.returncode != 0, p.stdout
    assert "does not serve other users" in p.stderr or "Permission denied" in p.stderr, p.stderr


def test_nobody_is_a_real_other_user():
    """The tests above mean something only if nobody and daemon are distinct from root."""
    assert pwd.getpwnam("nobody").pw_uid not in (0, os.geteuid())
    assert pwd.getpwnam("daemon").pw_uid not in (0, os.geteuid(), pwd.getpwnam("nobody").pw_uid)


# Run by the system Python as nobody (the test's interpreter and packages may sit in a home
# nobody cannot enter), with pdcx's native module alone: it needs no numpy.
IMPORT_AS_NOBODY = """
import json, sys
import _native
c = _native.Client(sys.argv[1])
o = json.loads(c.create_object("nob2/ref", [10], "float64", [], [], None))
item = [{"region": {"offset": [0], "count": [10]}, "path": sys.argv[2], "offset": 0,
         "size": 80, "chunk": [10], "filters": []}]
try:
    c.import_refs(o["id"], json.dumps(item))
except Exception as e:
    print("refused:", e)
else:
    print("imported")
"""


def test_a_user_cannot_make_the_server_read_a_file_for_it(shared, shared_dir):
    """The servers read with the deployment user's rights: another user may not name a file for
    them to import by reference unless `access.import_paths` lists its place."""
    import pdcx

    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.fail("needs the system python3 (Debian's) to run a client as nobody")
    native = next(Path(pdcx.__file__).parent.glob("_native*.so"))
    lib = shared_dir / "lib"
    lib.mkdir()
    shutil.copy(native, lib / native.name)
    for p in (lib, lib / native.name):
        p.chmod(0o755)
    root = shared.root
    private = shared_dir / "root-only.bin"
    private.write_bytes(np.arange(10, dtype=np.float64).tobytes())
    private.chmod(0o600)
    script = shared_dir / "imp.py"
    script.write_text(IMPORT_AS_NOBODY)
    script.chmod(0o644)
    p = subprocess.run(
        [*NOBODY, python, str(script), str(root), str(private)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": os.environ["PATH"], "HOME": "/tmp", "PYTHONPATH": str(lib)},
    )
    assert p.returncode == 0, p.stderr
    assert "refused:" in p.stdout and "only the deployment's user" in p.stdout, p.stdout


def test_users_listed_in_the_config_file(deployment, shared_dir, monkeypatch):
    """`access.users` in ROOT/pdcx.toml works as PDCX_USERS does."""
    need_second_user()
    monkeypatch.delenv("PDCX_USERS", raising=False)
    dep = deployment(n=1, root=shared_dir / "root", start=False)
    dep.root.chmod(0o700)
    conf = dep.root / "pdcx.toml"
    conf.write_text('[access]\nusers = ["nobody"]\n')
    conf.chmod(0o600)
    dep.start()
    assert stat.S_IMODE(dep.root.stat().st_mode) == 0o711
    assert (dep.root / "cluster.pub.json").exists()
    data = shared_dir / "mine.npy"
    np.save(data, np.arange(6.0))
    data.chmod(0o644)
    p = as_user(NOBODY, dep.root, "put", data, "--name", "nob/mine", "--container", "nob")
    assert p.returncode == 0, p.stderr
    p = as_user(DAEMON, dep.root, "ls")
    assert p.returncode != 0, p.stdout
    # A name the node does not know is an error naming the setting, before anything starts.
    bad = deployment(n=1, root=shared_dir / "bad", start=False)
    bad.root.chmod(0o700)
    (bad.root / "pdcx.toml").write_text('[access]\nusers = ["no-such-user-here"]\n')
    (bad.root / "pdcx.toml").chmod(0o600)
    p = subprocess.run(
        [pdcx_bin(), "server", "start", "-n", "1", "--root", str(bad.root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode != 0, p.stdout
    assert "access.users" in p.stdout + p.stderr + "".join(f.read_text() for f in (bad.root / "logs").glob("*.log"))
