"""Compaction with real servers: the disk space of overwritten and deleted data comes back
(`pdcx compact`, the background compactor), what is live reads back exactly, and the
numbers are visible in `pdcx server status --json`, `pdcx top` and `pdcx show`."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pdcx
import pytest
from conftest import client_on, owner_of_name, run_pdcx, wait_until

N = 1 << 20  # float32 elements: 4 MiB per object


def disk_bytes(root: Path) -> int:
    """Bytes the servers' logs take on disk (allocated blocks of every file)."""
    total = 0
    for log in root.glob("server-*/log"):
        for e in os.scandir(log):
            try:
                total += e.stat().st_blocks * 512
            except FileNotFoundError:
                pass  # retired while we looked
    return total


def extents(dep, name: str) -> list[dict]:
    return json.loads(run_pdcx("show", "--root", dep.root, "--json", name).stdout)["extents"]


def checkpoint(objs, step: int) -> None:
    for i, o in enumerate(objs):
        o[:] = np.full(N, step * 10 + i, "f4")


def test_pdcx_compact_gives_back_the_space_of_overwrites(deployment, monkeypatch):
    # Background compaction off: the command alone must do it.
    monkeypatch.setenv("PDCX_COMPACTION_THRESHOLD", "0")
    dep = deployment(n=1)
    c = dep.client()
    cont = c.create_container("ck")
    objs = [cont.create_object(f"ck/o{i}", shape=(N,), dtype="float32") for i in range(2)]
    for step in range(10):
        checkpoint(objs, step)
    live = 2 * N * 4
    before = disk_bytes(dep.root)
    assert before >= 9 * live, f"the log holds every overwrite: {before} bytes"
    p = run_pdcx("compact", "--root", dep.root, "--json", timeout=120)
    (report,) = [json.loads(line) for line in p.stdout.splitlines()]
    assert report["dropped_writes"] == 18, report
    assert report["log_bytes"] <= live * 1.1 + (1 << 20), report
    after = disk_bytes(dep.root)
    assert after <= live * 1.1 + (2 << 20), f"{after} bytes on disk for {live} live ({report})"
    for i, o in enumerate(objs):
        assert (o[:] == 90 + i).all()
    st = json.loads(run_pdcx("server", "status", "--root", dep.root, "--json").stdout)[0]["stats"]
    assert st["log_live_bytes"] >= live and st["log_garbage_bytes"] <= live // 10 + (1 << 20), st
    assert st["compaction"]["freed_bytes"] >= before - after - (4 << 20), st
    show = run_pdcx("show", "--root", dep.root, "ck/o0").stdout
    assert "hidden by newer writes" in show
    top = run_pdcx("top", "--root", dep.root, "--count", "1").stdout
    assert "GARBAGE" in top
    # The data stays after a restart.
    dep.restart()
    c = dep.client()
    assert (c.open_object("ck/o1")[:] == 91).all()


def test_deleted_objects_free_their_space_on_every_server_without_a_restart(deployment, monkeypatch):
    monkeypatch.setenv("PDCX_COMPACTION_INTERVAL_MS", "500")
    dep = deployment(n=2)
    c = dep.client()
    # Region-static placement spreads each object's regions over both servers, so many
    # writes are held by a server that does not own their object.
    c.placement = "region-static"
    cont = c.create_container("d")
    objs = [cont.create_object(f"d/o{i}", shape=(N,), dtype="float32") for i in range(4)]
    for step in range(3):
        checkpoint(objs, step)
    per_server = {p.parent.name: 0 for p in dep.root.glob("server-*/log")}
    peak = disk_bytes(dep.root)
    assert peak >= 4 * N * 4
    held = [int(h) for o in objs for h in {e["server"] for e in extents(dep, o.name)}]
    assert set(held) == {0, 1}, f"both servers hold writes: {held}"
    for o in objs:
        c.delete_object(o.name)
    # No restart, no command: the owners tell the holders, their compactors free it.
    wait_until(lambda: disk_bytes(dep.root) <= peak * 0.02 + (2 << 20), 30, "deleted data's space to come back")
    for p in dep.root.glob("server-*/log"):
        per_server[p.parent.name] = sum(e.stat().st_blocks * 512 for e in os.scandir(p))
    # Each server held ~24 MiB. What a log keeps when idle is not data: the zeros it writes
    # ahead of small records (up to 1 MiB in each segment that takes them, `PREZERO` in
    # crates/store/src/log/append.rs) and its MANIFEST. A 2 MiB bound once failed at
    # 2 MiB + 4 KiB (two segments' zeros and the MANIFEST).
    assert all(v <= (3 << 20) for v in per_server.values()), per_server


def test_an_owner_forgets_the_rows_of_writes_another_server_dropped(deployment, monkeypatch):
    monkeypatch.setenv("PDCX_COMPACTION_THRESHOLD", "0")
    dep = deployment(n=2)
    name = next(f"rows{i}" for i in range(1000) if owner_of_name(f"rows{i}", 2) == 0)
    writer = client_on(dep, 1)  # its writes are held by server 1, registered with server 0
    obj = writer.create_container("rows").create_object(name, (1024,), "int64")
    obj.set_consistency("relaxed")
    for step in range(30):
        obj.write_async(np.full(1024, step, "i8"), offset=(0,)).wait()
        obj.sync()
    p = run_pdcx("compact", "--root", dep.root, "--json", timeout=120)
    reports = [json.loads(line) for line in p.stdout.splitlines()]
    assert [r["rank"] for r in reports] == [0, 1]
    assert reports[1]["dropped_writes"] == 29, reports
    # Server 1 told server 0 of the 29 writes it dropped: their region-map rows went there.
    assert reports[1]["forgotten_rows"] >= 29, reports
    assert (dep.client().open_object(name)[...] == 29).all()
    st = json.loads(run_pdcx("server", "status", "--root", dep.root, "--json").stdout)
    assert all(s["stats"]["meta_bytes"] > 0 for s in st), st
    assert st[0]["stats"]["compaction"]["forgotten_rows"] == 0, "server 0 forgot for server 1"
    assert st[1]["stats"]["compaction"]["forgotten_rows"] >= 29


def test_compaction_settings_out_of_bounds_are_refused(deployment, monkeypatch):
    monkeypatch.setenv("PDCX_COMPACTION_THRESHOLD", "0.99")
    dep = deployment(n=1, start=False)
    p = run_pdcx("server", "start", "-n", "1", "--root", dep.root, check=False, timeout=60)
    assert p.returncode != 0
    assert "compaction.threshold" in p.stderr + p.stdout and "0.95" in p.stderr + p.stdout
    p = run_pdcx("compact", "--root", dep.root, "--threshold", "1.5", check=False)
    assert p.returncode != 0 and "--threshold" in p.stderr


def test_compact_help_teaches():
    out = run_pdcx("compact", "--help").stdout
    assert "EXAMPLES" in out and "compaction.threshold" in out and "--threshold" in out
    # A deployment that was never started is a clear error, not a hang.
    p = run_pdcx("compact", "--root", "/nonexistent-pdcx-root", check=False, timeout=30)
    assert p.returncode != 0
    time.sleep(0)


def run_bench(script: str):
    """`python3 bench/SCRIPT --quick`, which must succeed."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    p = subprocess.run(
        [sys.executable, str(repo / "bench" / script), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def test_reclaim_bench_quick_prints_its_tables():
    p = run_bench("reclaim/run.py")
    for heading in ("## 1. Steady state", "## 2. Foreground", "## 3. Read of 16 MiB", "MiB kept per step"):
        assert heading in p.stdout, p.stdout
    assert "after `pdcx compact`" in p.stdout and "on / off" in p.stdout


def test_churn_bench_quick_kills_servers_and_loses_nothing():
    p = run_bench("churn/run.py")
    assert "4 kills" in p.stdout and "; 0 bytes lost" in p.stdout, p.stdout
    for series in ("disk_mib", "meta_mib", "rss_mib", "latency_ms", "write_mb_s", "read_mb_s"):
        assert series in p.stdout, p.stdout


def test_a_holder_down_when_an_object_is_deleted_frees_its_writes_once_back(tmp_path, monkeypatch):
    """The owner cannot tell a holder that is down to drop a deleted object's writes; the
    holder's compaction asks the owners about the objects it holds and forgets those gone.
    Real `pdcx server` processes on fixed ports (bench/reliability/deploy.py), so server 1 can
    be killed and started again alone."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "reliability"))
    from deploy import Servers

    monkeypatch.setenv("PDCX_COMPACTION_THRESHOLD", "0")  # passes only when asked
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    (tmp_path / "logs").mkdir()
    servers = Servers(root, 2, dict(os.environ), tmp_path / "journal")
    servers.start()
    try:
        servers.wait_ready()
        name = next(f"gone{i}" for i in range(1000) if owner_of_name(f"gone{i}", 2) == 0)

        class Dep:  # what client_on needs of a deployment
            def client(self):
                return pdcx.connect(root)

        obj = client_on(Dep(), 1).create_container("c").create_object(name, (1 << 20,), "float64")
        obj[...] = np.arange(1 << 20, dtype=np.float64)  # 8 MiB, held by server 1
        assert {e["server"] for e in obj.extents()} == {1}
        servers.kill9([1])
        obj._client.delete_object(name)  # the owner deletes; server 1 cannot be told
        servers.start([1])
        servers.wait_ready()

        def live(rank: int) -> int:
            p = run_pdcx("compact", "--root", root, "--json", timeout=120)
            return {r["rank"]: r for r in map(json.loads, p.stdout.splitlines())}[rank]["live_bytes"]

        assert live(1) < 1 << 20, "server 1 still holds the deleted object's 8 MiB"
    finally:
        servers.stop()


def test_a_write_hidden_by_another_servers_newer_write_is_dropped_by_the_owner(deployment, monkeypatch):
    """A region rewritten from another node: the old write's holder never sees it hidden, so
    the owner drops it (after the newer write's holder confirms it holds it), and records the
    version it breaks; with `pdcx.keep.last = 2` it stays."""
    monkeypatch.setenv("PDCX_COMPACTION_THRESHOLD", "0")  # passes only when asked
    dep = deployment(n=3)
    names = [n for n in (f"moved{i}" for i in range(1000)) if owner_of_name(n, 3) == 0][:2]
    n = 1 << 20  # 8 MiB of float64 per write
    objs = {}
    for name, keep in zip(names, (None, 2)):
        tags = {} if keep is None else {"pdcx.keep.last": keep}
        obj = client_on(dep, 1).create_container(f"c{name}").create_object(name, (n,), "float64", tags=tags)
        obj[...] = np.zeros(n)  # held by server 1
        first = obj.versions()[-1]["version"]
        client_on(dep, 2).open_object(name)[...] = np.ones(n)  # held by server 2
        assert [e["server"] for e in obj.extents()] == [1, 2], obj.extents()
        objs[name] = (obj, first)
    p = run_pdcx("compact", "--root", dep.root, "--json", timeout=120)
    reports = {r["rank"]: r for r in map(json.loads, p.stdout.splitlines())}
    moved, kept = objs[names[0]][0], objs[names[1]][0]
    assert [e["server"] for e in moved.extents()] == [2], moved.extents()
    assert (moved[...] == 1).all()
    with pytest.raises(pdcx.NotFoundError, match="dropped"):
        moved.at(objs[names[0]][1])[...]
    assert [e["server"] for e in kept.extents()] == [1, 2], "kept: its last 2 versions"
    assert (kept.at(objs[names[1]][1])[...] == 0).all()
    assert reports[1]["live_bytes"] < 9 << 20, reports[1]
