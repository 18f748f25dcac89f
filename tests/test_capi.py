"""The PDC-compatible C API (libpdcx): C programs in tests/c, compiled with mpicc against the
INSTALLED library through `pkg-config --cflags --libs pdcx`, run against a real 2-server
deployment. The session installs the current libpdcx first (scripts/install-capi.sh, an
incremental release build) unless PDCX_CAPI_NO_INSTALL is set."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, TESTS

C_DIR = TESTS / "c"
RANKS = 4


@pytest.fixture(scope="session")
def capi_flags() -> list[str]:
    if shutil.which("mpicc") is None or shutil.which("pkg-config") is None:
        pytest.skip("mpicc / pkg-config not installed (run scripts/setup.sh)")
    if not os.environ.get("PDCX_CAPI_NO_INSTALL"):
        prefix = os.environ.get("PDCX_CAPI_PREFIX", "/usr/local")
        p = subprocess.run(
            ["bash", str(REPO / "scripts/install-capi.sh"), prefix],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run(["pkg-config", "--cflags", "--libs", "pdcx"], capture_output=True, text=True, check=False)
    assert p.returncode == 0, f"pkg-config does not know pdcx: {p.stderr}"
    flags = p.stdout.split()
    assert "-lpdcx" in flags and any(f.startswith("-I") for f in flags), flags
    return flags


@pytest.fixture(scope="session")
def server_bin() -> None:
    """The servers must speak this tree's protocol: use its release `pdcx` unless told otherwise."""
    if os.environ.get("PDCX_BIN"):
        return
    p = subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "pdcx-cli"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    os.environ["PDCX_BIN"] = str(REPO / "target/release/pdcx")


@pytest.fixture(scope="session")
def build(capi_flags, tmp_path_factory):
    out = tmp_path_factory.mktemp("capi_bin")

    def compile_one(name: str) -> Path:
        exe = out / name
        if not exe.exists():
            p = subprocess.run(
                ["mpicc", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(C_DIR / f"{name}.c"), *capi_flags],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert p.returncode == 0, p.stderr
        return exe

    return compile_one


@pytest.fixture
def dep(deployment, server_bin):
    return deployment(n=2)


def run(cmd, env, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.parametrize(
    "prog", ["obj_create_rw", "region_partial_overlap", "transfer_restart", "pdc_compat", "pdc_query", "file_api"]
)
def test_c_program(build, dep, prog):
    p = run([str(build(prog))], dep.env())
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().endswith(f"{prog}: ok"), p.stdout


def test_c_data_is_visible_from_python(build, dep):
    p = run([str(build("obj_create_rw"))], dep.env())
    assert p.returncode == 0, p.stdout + p.stderr
    import numpy as np

    client = dep.client()
    o = client.open_object("rw/2d")
    assert o.shape == (30, 40) and str(o.dtype) == "float64"
    np.testing.assert_array_equal(o[...], np.arange(1200, dtype="f8").reshape(30, 40) * 0.5)
    three = client.open_object("rw/3d")
    np.testing.assert_array_equal(three[1, 2], np.arange(336, dtype="f4").reshape(6, 7, 8)[1, 2] + 0.25)
    assert dict(client.open_object("rw/1d").tags)["time_step"] == 3


def test_cont_tags_iter_and_python_tags(build, dep):
    client = dep.client()
    cont = client.create_container("pyside")
    obj = cont.create_object("pyside/tagged", shape=(2,), dtype="int32")
    obj.tags["species"] = "electron"
    obj.tags["step"] = 7
    obj.tags["dt"] = 0.125
    obj.tags["blob"] = b"\x01\x02\x03"
    p = run([str(build("cont_tags_iter")), "pyside/tagged"], dep.env())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "cont_tags_iter: ok" in p.stdout
    # Failures the program provoked on purpose are reported, never silent.
    assert 'PDCobj_open: no object named "ct/c"' in p.stderr
    tags = dict(client.open_object("pyside/tagged").tags)
    assert tags["from_c"] == "yes"
    assert tags["c_int"] == (-5).to_bytes(4, "little", signed=True)
    assert [o.name for o in client.open_container("ct/one").objects()] == ["ct/a", "ct/b", "ct/blob"]
    assert "ct/two" not in [c.name for c in client.containers()]


def container_creates(port: int, servers: int) -> int:
    """`CreateContainer` requests the servers answered, from their metrics (rank r: port + r)."""
    import urllib.request

    total = 0
    for r in range(servers):
        with urllib.request.urlopen(f"http://127.0.0.1:{port + r}/metrics", timeout=10) as f:
            for line in f.read().decode().splitlines():
                if line.startswith('pdcx_requests_total{kind="CreateContainer"}'):
                    total += int(float(line.rsplit(" ", 1)[1]))
    return total


def test_mpi_collective(build, deployment, server_bin, monkeypatch):
    """PDCcont_create_col and PDCobj_create_mpi as in PDC: rank 0 creates and broadcasts, so
    the servers answer one container create per call however many ranks make it (each rank
    creating it raced the others and the losers looked it up again)."""
    import socket

    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed")
    with socket.socket() as s:  # a free port for rank 0's metrics (rank 1: the next one)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("PDCX_METRICS_ADDR", f"127.0.0.1:{port}")
    dep = deployment(n=2)
    before = container_creates(port, 2)
    exe = build("mpi_collective")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(RANKS), str(exe)]
    p = run(cmd, dep.env(), timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(re.findall(r"rank \d+/\d+: ok", p.stdout)) == [f"rank {r}/{RANKS}: ok" for r in range(RANKS)]
    # Two PDCcont_create_col calls: one create each (the second answered "exists", then a lookup).
    assert container_creates(port, 2) - before == 2
    import numpy as np

    o = dep.client().open_object("mpi/field")
    want = np.arange(RANKS * 8)[:, None] * 1000.0 + np.arange(33)[None, :]
    np.testing.assert_array_equal(o[...], want)


def test_bad_input_fails_cleanly(build, dep):
    p = run([str(build("bad_input"))], dep.env())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "bad_input: ok" in p.stdout
    err = p.stderr
    for expected in [
        "PDCcont_create: container name is NULL",
        "PDCobj_close: unknown id",
        "is a container property (PDC_CONT_CREATE)",
        "is outside the object's dims [4, 4]",
        "has 15 elements but remote region",
        "pdcx: PDCquery_create: value is NULL",
        "pdcx: PDCquery_get_nhits: the output pointer is NULL",
        "is not a live query",
        "cannot change to 3 (only an object with no elements",
        "PDCinit has not been called",
    ]:
        assert expected in err, f"missing {expected!r} in:\n{err}"
    assert "panic" not in err.lower()


def test_init_without_deployment(build, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PDCX_ROOT"}
    p = run([str(build("obj_create_rw"))], env)
    assert p.returncode != 0
    assert "pdcx: PDCinit: cannot join a pdcx deployment" in p.stderr
    assert "PDCX_ROOT" in p.stderr


def test_static_library_links(capi_flags, dep, tmp_path):
    """The .a with the documented extra libs builds a working program too."""
    libdir = next(f[2:] for f in capi_flags if f.startswith("-L"))
    inc = [f for f in capi_flags if f.startswith("-I")]
    exe = tmp_path / "static_rw"
    p = subprocess.run(
        ["mpicc", "-o", str(exe), str(C_DIR / "transfer_restart.c"), *inc, f"{libdir}/libpdcx.a"]
        + ["-lpthread", "-ldl", "-lm", "-lgcc_s", "-lutil", "-lrt"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    p = run([str(exe)], dep.env())
    assert p.returncode == 0, p.stdout + p.stderr


def test_open_col_looks_up_once_for_all_ranks(build, dep):
    """PDCobj_open_col / PDCcont_open_col: rank 0 looks up and broadcasts (PDC's collective
    open), so the servers answer a fixed number of lookups however many ranks open."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed")
    client = dep.client()
    # Tags past 1 KiB: the broadcast metadata does not fit the first broadcast, so the rest
    # takes the second (every rank checks the dtype it decoded).
    tags = {f"note{i}": "x" * 200 for i in range(8)}
    client.create_container("colc").create_object("colc/obj", shape=(8,), dtype="int32", tags=tags)

    def lookups() -> int:
        return sum(s["lookups"] for s in client.stats())

    before = lookups()
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(RANKS)]
    p = run([*cmd, str(build("mpi_open_col")), "colc", "colc/obj"], dep.env(), timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(re.findall(r"rank \d+/\d+: ok", p.stdout)) == [f"rank {r}/{RANKS}: ok" for r in range(RANKS)]
    # rank 0: the open, its PDCobj_get_info refresh, the open of a missing name.
    assert lookups() - before == 3
    assert 'PDCobj_open_col: no object named "no/such/object"' in p.stderr


def test_relaxed_consistency_through_the_c_api(build, deployment, server_bin, monkeypatch):
    from conftest import owner_of_name

    monkeypatch.setenv("PDCX_LAZY_FLUSH_MS", "60000")  # only the program's own consistency points
    dep = deployment(n=2)
    names = [n for n in (f"capi_lazy/{i}" for i in range(100)) if owner_of_name(n, 2) == 0][:2]
    # Data server 1, owner 0: the two servers stand for two nodes (a small write is not sent to
    # a same-node owner).
    env = dict(dep.env(), OMPI_COMM_WORLD_LOCAL_RANK="1", PDCX_SMALL_WRITE_TO_OWNER="0")
    client = dep.client()
    regs = client.stats()[0]["registers"]
    p = run([str(build("obj_lazy")), *names], env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "obj_lazy: ok" in p.stdout
    # flush, close, and the expected-writes batch (plus the batch the 8th write triggered).
    assert client.stats()[0]["registers"] - regs == 3
    assert client.stats()[1]["unregistered"] == 0


def test_c_remote_durability(build, deployment, server_bin, tmp_path):
    import json

    from conftest import run_pdcx

    # No tier survives the node: the remote wait fails, the program says so and goes on.
    plain = deployment(n=2)
    p = run([str(build("obj_durability")), "refused"], plain.env())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "survives the loss of a node" in p.stderr, p.stderr
    # With a shared-directory tier the wait returns once the data is there.
    dep = deployment(n=2, start=False)
    (dep.root / "pdcx.toml").write_text(f'[[tier]]\nname = "pfs"\nkind = "shared"\npath = "{tmp_path}/pfs"\n')
    dep.start()
    p = run([str(build("obj_durability")), "ok"], dep.env())
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(run_pdcx("show", "dur/x", "--json", "--root", dep.root).stdout)
    assert [e["durability"] for e in doc["extents"]] == ["remote"], doc["extents"]


def test_create_many_fails_alone_and_is_durable_at_pdcclose(build, dep):
    """pdcx_ext.h PDCXobj_create_many (creates): a taken name and a name repeated in
    the call fail alone (id 0, FAIL, one stderr line each); the other objects are usable at once
    and survive kill -9 of every server after PDCclose (the consistency point)."""
    p = run([str(build("obj_create_many"))], dep.env())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "obj_create_many: ok" in p.stdout
    assert 'object 7: object "many/taken" already exists' in p.stderr, p.stderr
    assert 'object 200: object "many/o100" already exists' in p.stderr, p.stderr
    assert "2 of 300 objects were not created" in p.stderr, p.stderr
    dep.kill9()
    dep.start()
    client = dep.client()
    names = {o.name for o in client.open_container("many").objects()}
    assert len(names) == 299 and "many/o299" in names and "many/taken" in names
    assert client.open_object("many/o123")[...].tolist() == [1, 2, 3, 4]


def test_versions_from_c(build, dep):
    """pdcx_ext.h PDCXobj_read_version / _latest_version / _name_version: four versions, the
    last two kept by pdcx.keep.last and the first by its name; after `pdcx compact` the second
    is refused, the others read as written."""
    p = run([str(build("obj_versions")), "write"], dep.env())
    assert p.returncode == 0 and "obj_versions write: ok" in p.stdout, p.stdout + p.stderr
    versions = next(line.split()[1:] for line in p.stdout.splitlines() if line.startswith("versions "))
    subprocess.run(
        [os.environ.get("PDCX_BIN", "pdcx"), "compact", "--root", str(dep.root)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    p = run([str(build("obj_versions")), "read", *versions], dep.env())
    assert p.returncode == 0 and "obj_versions read: ok" in p.stdout, p.stdout + p.stderr
    assert "dropped by compaction" in p.stderr, p.stderr


def test_sites_pull_and_push_from_c(build, sites):
    """pdcx_ext.h PDCXsite_pull / PDCXsite_push against two real linked sites."""
    import numpy as np

    a, b, *_ = sites
    data = np.arange(8 * 6, dtype=np.float64).reshape(8, 6)
    b.client().create_container("xs").create_object("xs/a", shape=data.shape, dtype="float64")[...] = data
    a.client().create_container("xl").create_object("xs/local", shape=(5,), dtype="int32")[...] = np.arange(5)
    p = run([str(build("xsite"))], a.env())
    assert p.returncode == 0 and "xsite: ok" in p.stdout, p.stdout + p.stderr
    assert "PDCXsite_pull" in p.stderr and "no remote site" in p.stderr
    part = a.client().open_object("xs/a-part")
    assert np.array_equal(part[2:5], data[2:5]) and not part[0:2].any()
    # The other site files a push under the pushing site's name.
    assert b.client().open_object("hpc/xs/local")[...].tolist() == [0, 1, 2, 3, 4]


def test_objects_created_without_a_type(build, dep):
    """PDC's default object property has no type and no dims: such an object exists with its
    metadata only (open, tags, info, buffer, dims, delete), data is refused with a message
    naming it until a type is set on its property, then it takes data; the type is the
    owner's, durably. Region locks fail with a message (pdcx has none)."""
    import json

    import numpy as np
    import pdcx
    from conftest import run_pdcx

    p = run([str(build("obj_untyped"))], dep.env())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "obj_untyped: ok" in p.stdout, p.stdout
    err = p.stderr
    for expected in [
        'pdcx: PDCregion_transfer_create: object "untyped/a" has no type yet',
        'pdcx: PDCobj_get_data: object "untyped/a" has no type yet',
        "call PDCprop_set_obj_type on its property",
        "pdcx: PDCreg_obtain_lock: pdcx has no region locks",
        "pdcx: PDCreg_release_lock: pdcx has no region locks",
    ]:
        assert expected in err, f"missing {expected!r} in:\n{err}"
    assert "panic" not in err.lower()

    # The object left without a type: the CLI says so, Python opens it and refuses data.
    show = run_pdcx("show", "untyped/left", "--root", dep.root).stdout
    assert re.search(r"dtype\s+untyped", show), show
    doc = json.loads(run_pdcx("show", "untyped/left", "--json", "--root", dep.root).stdout)
    assert doc["dtype"] == "untyped" and doc["numpy_dtype"] is None, doc
    assert "untyped" in run_pdcx("ls", "untyped", "--root", dep.root).stdout
    client = dep.client()
    left = client.open_object("untyped/left")
    assert left.shape == (0,) and "untyped" in repr(left)
    with pytest.raises(pdcx.InvalidArgumentError, match="'untyped/left' has no element type"):
        left[...]
    # The servers refuse data themselves, whatever the client believes the type is.
    a = client.open_object("untyped/a")
    assert dict(a.tags)["step"] == (7).to_bytes(4, "little", signed=True)
    with pytest.raises(pdcx.InvalidArgumentError, match='object "untyped/a" has no element type yet'):
        client._c.write(a.id, [0], [1], b"\0", "local")
    with pytest.raises(pdcx.InvalidArgumentError, match='object "untyped/a" has no element type yet'):
        client._c.read_into(a.id, [0], [1], bytearray(1))
    # The type set through the property is the owner's, and survives kill -9 of every server.
    dep.kill9()
    dep.start()
    client = dep.client()
    typed = client.open_object("untyped/typed-later")
    assert typed.dtype == np.dtype("int32") and typed[...].tolist() == list(range(100, 108))
    dims = client.open_object("untyped/dims")
    np.testing.assert_array_equal(dims[...], np.add.outer(np.arange(4) * 10.0, np.arange(5)) + 0.5)
    assert client.open_object("untyped/left").metadata["dtype"] == "untyped"


def test_untyped_object_created_collectively(build, dep):
    """PDCobj_create_mpi with the default property: every rank holds the same untyped object,
    tags it, then each sets the type and dims on its own property and writes its slice."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(RANKS), str(build("obj_untyped_mpi"))]
    p = run(cmd, dep.env(), timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(re.findall(r"rank \d+/\d+: ok", p.stdout)) == [f"rank {r}/{RANKS}: ok" for r in range(RANKS)]
    import numpy as np

    o = dep.client().open_object("untyped_mpi/shared")
    assert o.dtype == np.dtype("float32") and o.shape == (RANKS * 16,)
    want = (np.arange(RANKS)[:, None] * 1000.0 + np.arange(16)[None, :]).ravel()
    np.testing.assert_array_equal(o[...], want)
    assert {k for k in dict(o.tags) if k.startswith("rank")} == {f"rank{r}" for r in range(RANKS)}
