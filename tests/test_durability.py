"""What survives a clean restart, and what survives SIGKILL of every server."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pdcx
import pytest
from conftest import TESTS, names_on_every_server, run_pdcx, wait_until


def snapshot(client) -> dict:
    """Everything a client can see, as comparable plain data (array bytes included)."""
    out = {"containers": {}, "objects": {}}
    for c in client.containers():
        out["containers"][c.name] = (dict(c.tags), sorted(o.name for o in c.objects()))
    for o in client.objects():
        md = o.metadata
        out["objects"][o.name] = (
            md["dims"],
            md["dtype"],
            md["containers"],
            dict(o.tags),
            o.fill_value.tobytes(),
            o[...].tobytes(),
        )
    return out


def test_everything_survives_a_clean_restart(deployment):
    dep = deployment(n=2)
    client = dep.client()
    rng = np.random.default_rng(3)
    a = client.create_container("keep", tags={"run": 7, "note": "α"})
    b = client.create_container("also", tags={"blob": b"\x00\x01"})
    specs = [((100,), "float64"), ((7, 9), "int16"), ((3, 4, 5), "uint8"), ((64,), "bytes")]
    for i, (shape, dtype) in enumerate(specs):
        obj = a.create_object(f"keep/{i}", shape, dtype, tags={"i": i, "x": i / 3, "s": f"v{i}"})
        raw = rng.integers(0, 100, size=shape)
        obj[...] = raw.astype("u1").view("S1") if dtype == "bytes" else raw
        if i % 2:
            b.add(obj)
    grown = a.create_object("keep/grown", (4, 4), "int32", fill=-5)
    grown[...] = np.arange(16).reshape(4, 4)
    grown.resize((6, 5))
    grown[4:, :] = 9
    x = client.open_object("keep/0")
    ts = [x.write_async(np.full(20, k, dtype="<f8"), offset=(10 * k,)) for k in range(5)]
    pdcx.wait_all(ts[::-1])  # overlapping: list order is commit order, so ts[0] wins
    mem = client.open_object("keep/1")
    mem.write_async(np.full((2, 9), 77, dtype="<i2"), offset=(5, 0), durability="memory").wait()
    client.open_object("keep/3").tags["late"] = b"\xff"
    del client.open_object("keep/2").tags["s"]
    assert x[:20].tolist() == [0.0] * 20 and x[20:30].tolist() == [1.0] * 10
    before = snapshot(client)
    extents_before = [s["extents"] for s in client.stats()]
    assert len(before["objects"]) == 5 and set(before["containers"]) == {"keep", "also"}

    dep.stop()
    assert not dep.cluster_file.exists()
    with pytest.raises(pdcx.UnavailableError):
        pdcx.connect(dep.root)
    dep.start()
    after_client = dep.client()
    assert snapshot(after_client) == before
    assert [s["extents"] for s in after_client.stats()] == extents_before
    assert after_client.open_object("keep/1")[5:7].tolist() == [[77] * 9] * 2, "memory writes are synced at stop"
    assert run_pdcx("server", "status", "--root", dep.root).returncode == 0
    # A client connected before the restart finds the servers on their new ports.
    assert snapshot(client) == before
    t = x.write_async(np.full(5, -3.0), offset=(95,))
    t.wait()
    assert after_client.open_object("keep/0")[95:].tolist() == [-3.0] * 5
    # And it keeps working after the restart.
    after_client.open_object("keep/grown")[0, 0] = 1000
    dep.restart()
    assert dep.client().open_object("keep/grown")[0, 0] == 1000


def test_waited_writes_survive_kill9_immediately(deployment):
    dep = deployment(n=2)
    client = dep.client()
    cont = client.create_container("k9", tags={"t": 1})
    names = names_on_every_server("k9", 2, per_server=2)
    want = {}
    for i, name in enumerate(names):
        obj = cont.create_object(name, (256, 33), "float32", tags={"i": i})
        data = np.random.default_rng(i).random((256, 33), dtype=np.float32)
        if i % 2:
            obj[...] = data
        else:
            t = obj.write_async(data)
            t.wait()
        want[name] = data
    last = client.open_object(names[0])
    last.tags["after"] = "yes"
    pids = dep.kill9()  # right after the last acknowledgement, no chance to sync
    assert len(pids) == 2
    dep.start()
    c2 = dep.client()
    for i, (name, data) in enumerate(want.items()):
        o = c2.open_object(name)
        assert o[...].tobytes() == data.tobytes(), name
        assert o.tags["i"] == i
    assert c2.open_object(names[0]).tags["after"] == "yes"
    assert dict(c2.open_container("k9").tags) == {"t": 1}


def acks_since(log, first: int) -> int:
    return sum(1 for line in log.read_text().splitlines() if line.startswith("ack ") and int(line.split()[1]) >= first)


def replay(length: int, writes) -> np.ndarray:
    a = np.full(length, -1, dtype="<i4")
    for w, off, n in writes:
        a[off : off + n] = w
    return a


class CrashWriter:
    """One crash_writer.py process and what the test knows about the objects it writes."""

    LENGTH = 256 * 1024

    def __init__(self, tag: str, log, client):
        self.tag, self.log = tag, log
        self.names = names_on_every_server(f"crash{tag}", 2)
        cont = client.create_container(f"crash{tag}")
        owners = {cont.create_object(n, (self.LENGTH,), "int32", fill=-1).metadata["owner"] for n in self.names}
        assert owners == {0, 1}
        log.touch()
        self.applied: list[tuple[int, int, int, int]] = []  # (w, j, off, n) known to be in the state
        self.first = 1
        self.proc = None

    def spawn(self, dep, seed: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(TESTS / "crash_writer.py"), str(self.log), str(self.first), str(seed), *self.names],
            env=dep.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def progress(self) -> int:
        return acks_since(self.log, self.first)

    def reap(self) -> None:
        """After the kill: the writer must notice and fail (exit 3)."""
        try:
            out, _ = self.proc.communicate(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        assert self.proc.returncode == 3, f"writer {self.tag} should fail when the servers die:\n{out}"

    def verify(self, client) -> None:
        starts, acks = {}, []
        for line in self.log.read_text().splitlines():
            parts = line.split()
            if parts[0] == "start" and int(parts[1]) >= self.first:
                starts[int(parts[1])] = tuple(int(p) for p in parts[2:])
            elif parts[0] == "ack" and int(parts[1]) >= self.first:
                acks.append(int(parts[1]))
        assert acks == list(range(self.first, self.first + len(acks))), "acks are sequential"
        doubt = self.first + len(acks)
        assert sorted(starts) == list(range(self.first, doubt + 1)), "exactly one write was in flight"
        for j, name in enumerate(self.names):
            got = client.open_object(name)[...]
            acked = [(w, off, n) for w, jj, off, n in self.applied if jj == j]
            acked += [(w, *starts[w][1:]) for w in acks if starts[w][0] == j]
            started = {w: (off, n) for w, off, n in acked}
            if starts[doubt][0] == j:
                started[doubt] = starts[doubt][1:]
            # nothing never started, nothing outside its block
            values = np.unique(got)
            for v in values[values != -1]:
                assert int(v) in started, f"{name}: value {v} was never written"
                off, n = started[int(v)]
                where = np.flatnonzero(got == v)
                assert where.min() >= off and where.max() < off + n, f"{name}: value {v} outside its block"
            # durability of acknowledged writes
            for w, off, n in acked:
                covered = np.zeros(n, dtype=bool)
                for w2, (off2, n2) in started.items():
                    lo, hi = max(off, off2), min(off + n, off2 + n2)
                    if w2 > w and lo < hi:
                        covered[lo - off : hi - off] = True
                lost = np.flatnonzero((got[off : off + n] != w) & ~covered)
                assert lost.size == 0, f"{name}: acknowledged write {w} lost at {off + lost[:5]}"
            # atomicity: exactly one of the two possible states
            if np.array_equal(got, replay(self.LENGTH, acked)):
                continue
            assert starts[doubt][0] == j, f"{name}: state is not the replay of its acknowledged writes"
            with_doubt = replay(self.LENGTH, [*acked, (doubt, *starts[doubt][1:])])
            assert np.array_equal(got, with_doubt), f"{name}: write {doubt} is torn or partial"
            self.applied.append((doubt, j, *starts[doubt][1:]))
        self.applied.extend((w, *starts[w]) for w in acks)
        self.applied.sort()
        self.first = doubt + 1


def test_kill9_mid_stream_leaves_whole_writes_only(deployment, tmp_path):
    """Writer processes do write_async+wait of constant blocks (write w fills its random block
    R_w of object w % 2 with the value w; blocks overlap) while the test SIGKILLs every server.
    Each writer logs "start w" (fsynced) before starting write w and "ack w" after its wait.

    Because a writer is sequential, commit order is w order and at most one of its writes (the
    last started, u = acked + 1) can be in doubt. So after recovery each object must equal
    EXACTLY the replay of writes 1..acked, or of 1..u: write u applied entirely or not at all.
    Checked separately so a failure says which property broke:
    - nothing never started: every element is fill (-1) or a started w, and lies inside R_w;
    - durability: every acknowledged write is intact wherever no later started write covers it;
    - atomicity: the whole object is one of the two replays (no torn or partial block).
    Two writers run at once (their objects share the servers, so commits interleave in one
    log), over four rounds: each round continues on the state the previous crash left."""
    dep = deployment(n=2)
    client = dep.client()
    writers = [CrashWriter(tag, tmp_path / f"writes-{tag}.log", client) for tag in "ab"]
    for round_, min_acks in enumerate((10, 30, 20, 45)):
        for k, w in enumerate(writers):
            w.spawn(dep, seed=10 * round_ + k)
        try:
            wait_until(
                lambda m=min_acks: all(w.progress() >= m or w.proc.poll() is not None for w in writers),
                90,
                "the writers to make progress",
                0.005,
            )
            assert all(w.proc.poll() is None for w in writers), [w.proc.communicate()[0] for w in writers]
            dep.kill9()
        finally:
            for w in writers:
                w.reap()
        dep.start()
        c = dep.client()
        for w in writers:
            w.verify(c)
    assert all(len(w.applied) >= 105 for w in writers)


def test_memory_durability_loses_a_suffix_never_a_torn_write(deployment):
    """Writes waited with durability="memory" may be lost by kill -9, but only as a suffix of
    the commit order after the last "local" write, and never torn."""
    dep = deployment(n=1)
    client = dep.client()
    obj = client.create_container("mem").create_object("mem/x", (4096,), "int64", fill=-1)
    rng = np.random.default_rng(11)
    writes = []
    for w in range(1, 16):
        off = int(rng.integers(0, 4000))
        n = int(rng.integers(1, 4096 - off + 1))
        obj.write_async(np.full(n, w, "<i8"), offset=(off,), durability="local" if w <= 5 else "memory").wait()
        writes.append((w, off, n))
    assert obj[...].tolist() == replay(4096, writes).astype("<i8").tolist()
    dep.kill9()
    dep.start()
    got = dep.client().open_object("mem/x")[...]
    matches = [k for k in range(5, 16) if np.array_equal(got, replay(4096, writes[:k]))]
    assert matches, "after kill -9 the object must be the state after some prefix of >= 5 writes"


def test_restart_after_crash_twice_in_a_row(deployment):
    """Recovery is idempotent: crash, recover, crash again right away, recover."""
    dep = deployment(n=2)
    client = dep.client()
    cont = client.create_container("twice")
    names = names_on_every_server("twice", 2)
    for n in names:
        cont.create_object(n, (1000,), "uint16")[...] = 5
    dep.kill9()
    dep.start()
    dep.kill9()
    time.sleep(0.05)
    dep.start()
    c = dep.client()
    for n in names:
        assert c.open_object(n)[...].tolist() == [5] * 1000
        c.open_object(n)[10:20] = 6
    dep.restart()
    for n in names:
        assert dep.client().open_object(n)[8:22].tolist() == [5, 5] + [6] * 10 + [5, 5]


def test_group_committed_metadata_survives_kill9(deployment):
    """Creates, tag puts and batched creates from many threads share WAL fsyncs (group commit);
    every acknowledged one must exist after kill -9 right after the client's consistency point
    (`sync`: creates and tags are durable there, as HDF5's at H5Fflush; docs/ARCHITECTURE.md,
    "Creates")."""
    import threading

    dep = deployment(n=2)
    client = dep.client()
    cont = client.create_container("gc")
    acked: dict[str, int] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def single(t: int) -> None:
        try:
            for i in range(60):
                name = f"gc/s{t}-{i}"
                o = cont.create_object(name, (4,), "int32", tags={"t": t})
                o.tags["i"] = i
                with lock:
                    acked[name] = i
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def batched(t: int) -> None:
        try:
            for b in range(5):
                specs = [
                    {"name": f"gc/b{t}-{b}-{k}", "shape": 4, "dtype": "int32", "tags": {"i": k}} for k in range(40)
                ]
                for spec, r in zip(specs, cont.create_objects(specs)):
                    assert isinstance(r, pdcx.Object), r
                    with lock:
                        acked[spec["name"]] = spec["tags"]["i"]
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=single, args=(t,)) for t in range(4)]
    threads += [threading.Thread(target=batched, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    client.sync()
    dep.kill9()
    dep.start()
    c2 = dep.client()
    assert len(acked) == 4 * 60 + 2 * 5 * 40
    names = {o.name for o in c2.open_container("gc").objects()}
    missing = set(acked) - names
    assert not missing, sorted(missing)[:5]
    for name in list(acked)[::37]:
        assert c2.open_object(name).tags["i"] == acked[name], name
