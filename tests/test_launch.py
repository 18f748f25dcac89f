"""How deployments come up and go down: launched by mpirun, by `pdcx server start`, over the
remains of a crashed run, and refused when one is already running."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pdcx
import pytest

REPO = Path(__file__).resolve().parents[1]


def pdcx_bin() -> str:
    found = os.environ.get("PDCX_BIN") or shutil.which("pdcx") or str(REPO / "target/release/pdcx")
    if not Path(found).exists():
        pytest.skip("pdcx binary not built (run scripts/setup.sh)")
    return found


def run(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    p = subprocess.run([pdcx_bin(), *args], check=False, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"pdcx {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def wait_for(path: Path, timeout: float = 30) -> None:
    end = time.time() + timeout
    while not path.exists():
        if time.time() > end:
            raise AssertionError(f"{path} did not appear within {timeout}s")
        time.sleep(0.05)


def test_mpirun_launches_servers_that_clients_find(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    launcher = subprocess.Popen(
        ["mpirun", "--oversubscribe", "-n", "3", pdcx_bin(), "server", "--root", str(root)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(root / "cluster.json")
        cluster = json.loads((root / "cluster.json").read_text())
        assert cluster["size"] == 3 and [s["rank"] for s in cluster["servers"]] == [0, 1, 2]
        client = pdcx.connect(root)
        assert client.servers == 3
        cont = client.create_container("launched")
        owners = set()
        for i in range(24):
            obj = cont.create_object(f"launched/{i}", shape=(8,), dtype="int64")
            obj[:] = np.arange(8) * i
            owners.add(obj.metadata["owner"])
        assert owners == {0, 1, 2}, "names should spread over all three servers"
        assert all(np.array_equal(client.open_object(f"launched/{i}")[:], np.arange(8) * i) for i in range(24))
        run("server", "stop", "--root", str(root))
        out, _ = launcher.communicate(timeout=30)
        assert launcher.returncode == 0, out
        assert out.count("data synced") == 3, out
    finally:
        if launcher.poll() is None:
            # Killing mpirun alone would orphan the servers it launched.
            run("server", "stop", "--root", str(root), "--timeout", "10", check=False)
            try:
                launcher.wait(timeout=30)
            except subprocess.TimeoutExpired:
                launcher.kill()
                launcher.wait()


def test_start_refuses_a_running_deployment_and_replaces_a_crashed_one(tmp_path):
    root = tmp_path / "root"
    run("server", "start", "-n", "2", "--root", str(root))
    try:
        again = run("server", "start", "-n", "2", "--root", str(root), check=False)
        assert again.returncode != 0 and "already running" in again.stderr, again.stderr
        client = pdcx.connect(root)
        obj = client.create_container("c").create_object("survivor", shape=(4,), dtype="float64")
        obj[:] = [1.0, 2.0, 3.0, 4.0]
        pids = [s["pid"] for s in json.loads((root / "cluster.json").read_text())["servers"]]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.3)
        status = run("server", "status", "--root", str(root), check=False)
        assert status.returncode == 1 and "DOWN" in status.stdout, status.stdout
        # The cluster file and rank files of the dead run are stale; start must clean them up.
        run("server", "start", "-n", "2", "--root", str(root))
        assert run("server", "status", "--root", str(root), check=False).returncode == 0
        assert pdcx.connect(root).open_object("survivor")[:].tolist() == [1.0, 2.0, 3.0, 4.0]
        run("server", "stop", "--root", str(root))
        # Name hashing depends on the server count: a different -n must be refused, not served.
        wrong = run("server", "start", "-n", "3", "--root", str(root), check=False)
        assert wrong.returncode != 0 and "2" in wrong.stderr, wrong.stderr
        run("server", "start", "-n", "2", "--root", str(root))
        assert pdcx.connect(root).open_object("survivor")[3] == 4.0
    finally:
        run("server", "stop", "--root", str(root), check=False)


def test_client_without_deployment_gets_a_clear_error(tmp_path):
    with pytest.raises(pdcx.UnavailableError, match="server start"):
        pdcx.connect(tmp_path / "nothing-here")


def test_embedded_default_cleans_up_after_itself(tmp_path):
    code = (
        "import os, pdcx, numpy as np\n"
        "c = pdcx.connect()\n"
        "o = c.create_container('e').create_object('e/x', (5,), 'int32')\n"
        "o[:] = np.arange(5)\n"
        "assert o[:].tolist() == [0, 1, 2, 3, 4]\n"
        "print(c._embedded.dir)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PDCX_ROOT"}
    p = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    assert not Path(p.stdout.strip()).exists(), "embedded temp dir should be removed at exit"
