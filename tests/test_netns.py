"""Several nodes, for real: 3 network namespaces on one bridge (scripts/netns.sh), one server per
node, client ranks per node (one mpirun per node). Data goes to each writer's node-local server
over the node's own network stack; metadata owners on other nodes are reached over the bridge.

Needs root and `ip netns` (skipped otherwise). The tests share one deployment and run in order:
the kill -9/restart test comes after the ones that write the data it checks."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pdcx
import pytest
from conftest import REPO, TESTS, owner_of_name, pdcx_bin, pid_alive, wait_until

sys.path.insert(0, str(TESTS))
import netns_writer as w  # the worker's data patterns, to check from here

NETNS = REPO / "scripts/netns.sh"
NODES, RANKS = 3, 2  # ranks per node


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    if subprocess.run(["ip", "netns", "list"], capture_output=True, check=False).returncode != 0:
        return "`ip netns` is not available"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))


class Nodes:
    """A netns setup (prefix, subnet) with one pdcx server per node on `root`."""

    def __init__(self, root, prefix: str, subnet: str):
        self.root, self.prefix, self.subnet = root, prefix, subnet
        self.env = dict(os.environ, PDCX_BIN=pdcx_bin(), PDCX_NETNS_PREFIX=prefix, PDCX_ROOT=str(root))
        self.seen_pids: set[int] = set()

    def sh(self, *args, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run(
            ["bash", str(NETNS), *map(str, args)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and p.returncode != 0:
            raise AssertionError(
                f"netns.sh {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
            )
        return p

    def cluster(self) -> dict:
        return json.loads((self.root / "cluster.json").read_text())

    def pids(self) -> list[int]:
        return [s["pid"] for s in self.cluster()["servers"]]

    def start(self) -> None:
        self.sh("servers", self.root)
        self.seen_pids.update(self.pids())

    def stop(self) -> None:
        self.sh("stop", self.root, check=False)
        for pid in self.seen_pids:
            wait_until(lambda pid=pid: not pid_alive(pid), 30, f"server pid {pid} to exit")

    def client(self) -> pdcx.Client:
        return pdcx.connect(self.root)

    def teardown(self) -> None:
        try:
            if (self.root / "cluster.json").exists():
                self.seen_pids.update(self.pids())
            self.sh("stop", self.root, timeout=60, check=False)
        except (subprocess.TimeoutExpired, OSError, ValueError):
            pass
        for pid in self.seen_pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        self.sh("down", timeout=60, check=False)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    why = _why_not()
    if why:
        pytest.skip(why)
    pid = os.getpid()
    n = Nodes(tmp_path_factory.mktemp("netns") / "root", f"t{pid % 10_000_000}", f"10.78.{pid % 250}")
    n.root.mkdir()
    try:
        n.sh("up", "--nodes", NODES, "--subnet", n.subnet, "--delay", "50us")
        n.start()
        yield n
    finally:
        n.teardown()
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    assert f"{n.prefix}-n0" not in left, left


def want_shared(i: int) -> np.ndarray:
    return np.concatenate([w.slab(i, g) for g in range(NODES * RANKS)])


def want_node(node: int) -> np.ndarray:
    return np.concatenate([w.node_slab(node, r) for r in range(RANKS)])


def all_names() -> list[str]:
    return w.shared_names(NODES) + [w.node_name(i, NODES) for i in range(NODES)]


def snapshot(client: pdcx.Client) -> dict[str, bytes]:
    return {n: client.open_object(n)[...].tobytes() for n in all_names()}


def test_netns_setup_is_wired(nodes):
    c = nodes.cluster()
    assert [(s["rank"], s["node"], s["addr"].rsplit(":", 1)[0]) for s in c["servers"]] == [
        (i, f"n{i}", f"{nodes.subnet}.{i + 1}") for i in range(NODES)
    ]
    assert nodes.sh("addr", 2).stdout.strip() == f"{nodes.subnet}.3"
    inside = nodes.sh("exec", 1, "sh", "-c", "echo $PDCX_NODE; ip -o -4 addr show dev eth0").stdout
    assert inside.startswith("n1\n") and f"{nodes.subnet}.2/24" in inside, inside


def test_client_ranks_per_node_write_to_their_node_server(nodes):
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed (run scripts/setup.sh)")
    pytest.importorskip("mpi4py")
    client = nodes.client()
    cont = client.create_container("ns")
    for n in w.shared_names(NODES):
        cont.create_object(n, (NODES * RANKS * w.ROWS, w.COLS), "float64", tags={"kind": "netns"})
    jobs = [
        subprocess.Popen(
            ["bash", str(NETNS), "exec", str(i), "mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(RANKS)]
            + [sys.executable, str(TESTS / "netns_writer.py"), str(i), str(NODES)],
            env=nodes.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(NODES)
    ]
    outs = [j.communicate(timeout=120)[0] for j in jobs]
    for i, (j, out) in enumerate(zip(jobs, outs)):
        assert j.returncode == 0, f"node {i}:\n{out}"

    # Everything back from the root namespace (over the bridge).
    client = nodes.client()
    owners = set()
    for k, n in enumerate(w.shared_names(NODES)):
        obj = client.open_object(n)
        np.testing.assert_array_equal(obj[...], want_shared(k))
        for e in obj.extents():  # each slab lives on its writer's node server
            assert e["server"] == e["offset"][0] // w.ROWS // RANKS, (n, e)
        assert len(obj.extents()) == NODES * RANKS
        owners.add(obj.metadata["owner"])
    for i in range(NODES):
        obj = client.open_object(w.node_name(i, NODES))
        np.testing.assert_array_equal(obj[...], want_node(i))
        assert {e["server"] for e in obj.extents()} == {i}
        assert obj.metadata["owner"] == (i + 1) % NODES != i  # metadata lives on another node
        owners.add(obj.metadata["owner"])
    assert owners == set(range(NODES))


def test_tag_query_inside_a_node_sees_objects_owned_on_every_node(nodes):
    out = nodes.sh("exec", 0, pdcx_bin(), "query", "kind=netns", "--json", "--root", nodes.root).stdout
    found = {o["name"] for o in json.loads(out)}
    assert found == set(all_names()), out
    assert {owner_of_name(n, NODES) for n in found} == set(range(NODES))


READER = """
import sys, numpy as np, pdcx
c = pdcx.connect()
assert c.local_server == 2, c.local_server
o = c.open_object(sys.argv[1])
np.save(sys.argv[2], o.read_async(offset=(0, 0), shape=(int(sys.argv[3]), o.shape[1])).wait())
"""


def test_reader_on_node2_reads_data_held_on_node0_owned_by_node1(nodes, tmp_path):
    name = next(n for n in w.shared_names(NODES) if owner_of_name(n, NODES) == 1)
    rows = RANKS * w.ROWS  # node 0's ranks wrote these rows
    obj = nodes.client().open_object(name)
    assert obj.metadata["owner"] == 1
    assert {e["server"] for e in obj.extents() if e["offset"][0] < rows} == {0}
    out = tmp_path / "got.npy"
    nodes.sh("exec", 2, sys.executable, "-c", READER, name, out, rows)
    np.testing.assert_array_equal(np.load(out), want_shared(w.shared_names(NODES).index(name))[:rows])


WORLD = """
import os, sys, numpy as np, pdcx
from mpi4py import MPI
comm = MPI.COMM_WORLD
node = int(os.environ["PDCX_NODE"][1:])
c = pdcx.connect()
assert c.local_server == node, (c.local_server, node)
o = c.open_object(sys.argv[1])
o[comm.rank : comm.rank + 1] = np.array([node * 100 + comm.rank], dtype="int64")
assert comm.allreduce(1) == comm.size
print("world rank", comm.rank, "node", node, "ok", flush=True)
"""


def mpirun_across_nodes(nodes, n: int, *argv, timeout: float = 120) -> subprocess.CompletedProcess:
    """`netns.sh mpirun`, once: a start that cannot complete fails with a message (see
    test_a_launch_that_cannot_start_says_why), so a timeout here is a bug, not a retry."""
    proc = subprocess.Popen(
        ["bash", str(NETNS), "mpirun", str(n), *map(str, argv)],
        env=nodes.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"netns mpirun hung for {timeout}s:\n{out}\n{err}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_one_mpi_job_across_all_nodes(nodes):
    """`netns.sh mpirun`: one MPI world over every namespace (what bench/c/run.sh --nodes uses)."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed (run scripts/setup.sh)")
    pytest.importorskip("mpi4py")
    n = NODES * RANKS
    obj = nodes.client().open_container("ns").create_object("ns/world", (n,), "int64", tags={"kind": "world"})
    p = mpirun_across_nodes(nodes, n, sys.executable, "-c", WORLD, "ns/world")
    assert p.returncode == 0, p.stdout + p.stderr  # ranks assert inside; output lines interleave
    want = [(r // RANKS) * 100 + r for r in range(n)]  # RANKS consecutive ranks per node
    np.testing.assert_array_equal(obj[...], want)
    assert [e["server"] for e in sorted(obj.extents(), key=lambda e: e["offset"])] == [r // RANKS for r in range(n)]


def test_mpi_jobs_across_nodes_start_every_time(nodes):
    """Back-to-back `netns.sh mpirun` starts, none retried. Before the orteds got a session
    directory per node, about one start in 20 hung for good (two orteds of one job shared
    /tmp/ompi.HOST.UID/jf.N and one removed the other's)."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed (run scripts/setup.sh)")
    n = NODES * RANKS
    for i in range(40):
        t0 = time.monotonic()
        p = mpirun_across_nodes(nodes, n, "sh", "-c", "echo $OMPI_COMM_WORLD_RANK $PDCX_NODE", timeout=60)
        assert p.returncode == 0, f"start {i}: {p.stdout}{p.stderr}"
        got = sorted(tuple(line.split()) for line in p.stdout.splitlines())
        assert got == sorted((str(r), f"n{r // RANKS}") for r in range(n)), (i, p.stdout)
        assert time.monotonic() - t0 < 30, f"start {i} took {time.monotonic() - t0:.1f}s"


def test_a_launch_that_cannot_start_says_why(nodes):
    """A node whose daemon cannot reach mpirun ends the job within seconds with a message."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed (run scripts/setup.sh)")
    ns2 = f"{nodes.prefix}-n2"
    subprocess.run(["ip", "-n", ns2, "link", "set", "eth0", "down"], check=True)
    try:
        t0 = time.monotonic()
        p = mpirun_across_nodes(nodes, NODES * RANKS, "true", timeout=60)
        took = time.monotonic() - t0
    finally:
        subprocess.run(["ip", "-n", ns2, "link", "set", "eth0", "up"], check=True)
    assert p.returncode != 0, p.stdout + p.stderr
    assert took < 30, took
    assert f"node 2 ({ns2}): the orted exited with status" in p.stderr, p.stderr
    host, port = nodes.cluster()["servers"][2]["addr"].rsplit(":", 1)
    wait_until(lambda: _connects(host, int(port)), 30, "node 2's server to be reachable again")


def _connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def test_a_daemon_that_never_connects_back_is_stopped_with_a_message(nodes):
    """The agent's watchdog: an orted alive but silent past PDCX_NETNS_LAUNCH_TIMEOUT is
    killed and the agent exits 124 saying so (mpirun then stops the job)."""
    fake = f'sleep 60 # -mca orte_hnp_uri "1.0;tcp://{nodes.subnet}.254:9"'
    env = dict(nodes.env, PDCX_NETNS_LAUNCH_TIMEOUT="2")
    t0 = time.monotonic()
    p = subprocess.run(
        ["ip", "netns", "exec", f"{nodes.prefix}-n1", "bash", str(NETNS), "agent-run", "1", fake],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert p.returncode == 124, p.stderr
    assert 2 <= time.monotonic() - t0 < 15
    assert "did not connect back to mpirun" in p.stderr and "within 2 s" in p.stderr, p.stderr


def test_kill9_of_one_node_then_restart_keeps_every_byte(nodes):
    before = snapshot(nodes.client())
    assert before[w.shared_names(NODES)[0]] == want_shared(0).tobytes()
    victim = nodes.pids()[1]
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: not pid_alive(victim), 30, "the killed server to vanish")
    nodes.stop()
    nodes.start()
    assert victim not in nodes.pids()
    assert snapshot(nodes.client()) == before
