"""`pdcx import` stopped part-way: one line (no traceback), a clear state, then `--resume`
finishes it and `--undo` (or `pdcx rm -r`) removes what it made."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import numpy as np
import pytest
from conftest import pdcx_bin, run_pdcx

h5py = pytest.importorskip("h5py")  # a failure under PDCX_NO_SKIPS=1, as in CI


def _big_file(path, n=24, rows=1 << 20):
    """n datasets of `rows` float32 (4 MiB each), in small chunks: long enough to interrupt."""
    with h5py.File(path, "w") as f:
        for i in range(n):
            f.create_dataset(f"d{i:02}", data=np.full(rows, i, "f4"), chunks=(1 << 14,))


def _tag(client, container, key):
    try:
        return client.open_container(container).tags.get(key)
    except Exception:  # noqa: BLE001  (not created yet)
        return None


def test_interrupted_import_says_one_line_then_resumes_or_undoes(deployment, tmp_path):
    dep = deployment(n=2)
    h5 = tmp_path / "big.h5"
    _big_file(h5)
    client = dep.client()
    p = subprocess.Popen(
        [pdcx_bin(), "import", str(h5), "--memory", "1", "-q"],
        env=dep.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    # Once the container exists (phase 1 done), the copy is under way: Ctrl-C from the terminal
    # reaches the whole foreground group, as killpg does.
    deadline = time.monotonic() + 60
    while _tag(client, "big", "hdf5_import") != "incomplete":
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "import never started"
        time.sleep(0.01)
    time.sleep(0.2)
    os.killpg(p.pid, signal.SIGINT)
    _out, err = p.communicate(timeout=60)
    assert p.returncode == 130, (p.returncode, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "--resume" in lines[0] and "--undo" in lines[0] and "'big'" in lines[0], err
    assert _tag(client, "big", "hdf5_import") == "incomplete"

    # A plain rerun is refused, and says what to do.
    again = run_pdcx("import", h5, "-q", check=False, env=dep.env())
    assert again.returncode == 1 and "--resume" in again.stderr and "Traceback" not in again.stderr

    # --resume finishes it: every dataset whole.
    run_pdcx("import", h5, "--resume", "-q", env=dep.env(), timeout=300)
    assert _tag(client, "big", "hdf5_import") == "complete"
    for i in (0, 23):
        assert (client.open_object(f"big/d{i:02}")[...] == i).all()
    # Nothing left to resume.
    nothing = run_pdcx("import", h5, "--resume", check=False, env=dep.env())
    assert nothing.returncode == 1 and "nothing to resume" in nothing.stderr

    # --undo removes the objects and the container made for the file.
    u = run_pdcx("import", h5, "--undo", env=dep.env())
    assert "removed 24 object(s)" in u.stderr and "container 'big'" in u.stderr
    assert _tag(client, "big", "hdf5_import") is None
    assert not [o for o in client.objects() if o.name.startswith("big/")]
    gone = run_pdcx("import", h5, "--undo", check=False, env=dep.env())
    assert gone.returncode == 1 and "Traceback" not in gone.stderr


def test_undo_into_existing_keeps_the_container_and_other_objects(deployment, tmp_path):
    dep = deployment(n=1)
    h5 = tmp_path / "small.h5"
    with h5py.File(h5, "w") as f:
        f["a"] = np.arange(10.0)
    client = dep.client()
    cont = client.create_container("mine")
    cont.create_object("mine/own", shape=(4,), dtype="int32")
    run_pdcx("import", h5, "--container", "mine", "--into-existing", "-q", env=dep.env())
    assert client.open_object("mine/a")[3] == 3.0
    u = run_pdcx("import", h5, "--container", "mine", "--undo", env=dep.env())
    assert "removed 1 object(s)" in u.stderr and "stays" in u.stderr
    assert [o.name for o in client.objects("mine")] == ["mine/own"]
