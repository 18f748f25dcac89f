"""The crash harness (bench/reliability): its oracle on histories built by hand (each property
it checks must catch a violation), and a short kill loop against real servers, real mpirun
and a real S3 server (versitygw) that must find nothing wrong."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "bench" / "reliability"))
import layout as L
import oracle

HARNESS = REPO / "bench" / "reliability" / "harness.py"
# A read that lost the race with log-segment retirement (Engine::fetch drops the log lock
# for tier reads, then reads pieces from a segment the flusher retired meanwhile).


def write(wid, off, cnt, issue, ack=None, dur="local", cons="strong", od=None):
    w = oracle.Write(wid, "o", list(off), list(cnt), dur, cons, 0, 0, issue, ack)
    w.od = od if od is not None else (ack if ack is not None and cons == "strong" else oracle.INF)
    return w


def state(shape, *applied):
    """The object after applying (write, region) in order."""
    a = np.full(shape, L.FILL, dtype=np.int64)
    for w in applied:
        a[L.region_slices(w.off, w.cnt)] = L.pattern(w.wid, w.off, w.cnt, shape)
    return a


def run_check(arr, writes) -> oracle.Report:
    rep = oracle.Report()
    oracle.check_array("o", arr, sorted(writes, key=lambda w: (w.issue, w.wid)), rep)
    return rep


def test_a_consistent_state_passes():
    a = write(1, [0], [50], issue=1, ack=2)
    b = write(2, [25], [50], issue=3, ack=4)
    doubt = write(3, [60], [30], issue=5)  # never acknowledged: may or may not be there
    for arr in (state((100,), a, b), state((100,), a, b, doubt)):
        assert run_check(arr, [a, b, doubt]).failures() == []


def test_a_lost_acknowledged_write_is_caught_and_counted():
    a = write(1, [0], [50], issue=1, ack=2)
    b = write(2, [25], [50], issue=3, ack=4)
    rep = run_check(state((100,), a), [a, b])  # b acknowledged, gone
    assert rep.lost == {("local", 2): 50}
    assert rep.lost_bytes() == {"local": 50 * L.ITEM}
    assert any("lost" in f for f in rep.failures())
    # An older write showing where a later acknowledged one should be is a loss too.
    rep = run_check(state((100,), b, a), [a, b])
    assert rep.lost == {("local", 2): 25}


def test_memory_losses_are_counted_not_failed():
    a = write(1, [0], [50], issue=1, ack=2)
    m = write(2, [10], [10], issue=3, ack=4, dur="memory")
    rep = run_check(state((100,), a), [a, m])
    assert rep.lost == {("memory", 2): 10}
    assert rep.failures() != []  # unless a kill may have lost it:
    rep.at_risk = {2}
    assert rep.failures() == []


def test_concurrent_overlapping_writes_may_land_in_either_order():
    a = write(1, [0], [60], issue=1, ack=5)
    b = write(2, [40], [60], issue=2, ack=4)  # issued before a was acknowledged
    for arr in (state((100,), a, b), state((100,), b, a)):
        assert run_check(arr, [a, b]).failures() == []
    c = write(3, [40], [60], issue=6, ack=7)  # issued after a: must win
    assert run_check(state((100,), a, c), [a, c]).failures() == []
    assert run_check(state((100,), c, a), [a, c]).lost == {("local", 3): 20}


def test_relaxed_writes_are_ordered_by_their_sync():
    r = write(1, [0], [50], issue=1, ack=2, cons="relaxed")  # never synced: order point unknown
    s = write(2, [0], [50], issue=4, ack=5)
    assert run_check(state((100,), s, r), [r, s]).failures() == []
    synced = write(1, [0], [50], issue=1, ack=2, cons="relaxed", od=3)  # synced before s was issued
    assert run_check(state((100,), s, synced), [synced, s]).lost == {("local", 2): 50}


def test_a_torn_write_is_caught():
    a = write(1, [0], [100], issue=1, ack=2)
    b = write(2, [0], [100], issue=3)  # in doubt: all or nothing
    arr = state((100,), a, b)
    arr[70:] = state((100,), a)[70:]
    rep = run_check(arr, [a, b])
    assert rep.torn == [("o", 2, 30)]
    # Also in 2-D, and also with the fill value showing through.
    g = write(5, [2, 3], [4, 5], issue=1)
    arr = state((10, 10), g)
    arr[3, 4] = L.FILL
    assert run_check(arr, [g]).torn == [("o", 5, 1)]


def test_data_never_written_is_caught():
    a = write(1, [0], [50], issue=1, ack=2)
    arr = state((100,), a)
    arr[80] = 12345  # no write's pattern
    arr[10] = arr[11]  # a's data, but at the wrong place
    arr[60] = L.pattern(1, [60], [1], (100,))[0]  # a's pattern outside a's region
    rep = run_check(arr, [a])
    text = " ".join(d for _, d in rep.never_written)
    assert "no write" in text and "another place" in text and "outside its region" in text


def test_tags_and_creates():
    h = oracle.History()
    h.tags = [
        oracle.TagPut("t", "step", 1, 1, acked=True),
        oracle.TagPut("t", "step", 2, 2, acked=True),
        oracle.TagPut("t", "step", 3, 3, acked=False),
        oracle.TagPut("t", "other", 4, 4, acked=False),
    ]
    for have, ok in (({"step": 2}, True), ({"step": 3}, True), ({"step": 1}, False), ({}, False)):
        rep = oracle.Report()
        oracle.check_tags(h, {"t": have}, rep)
        assert (rep.tag_problems == []) == ok, (have, rep.tag_problems)
    h.creates = {"a": {"shape": [4], "tags": {"k": 1}, "acked": True}, "b": {"shape": [4], "tags": {}, "acked": False}}
    rep = oracle.Report()
    oracle.check_creates(h, {"a": [4], "c": [1]}, {"a": {"k": 1}}, rep)
    assert rep.create_problems == [] and [o for o, _ in rep.never_written] == ["c"]
    rep = oracle.Report()
    oracle.check_creates(h, {}, {}, rep)
    assert rep.create_problems == ["object a was created (acknowledged), now missing"]


def test_journal_parsing_orders_relaxed_writes_by_sync(tmp_path):
    j = tmp_path / "journal"
    j.mkdir()
    recs = [
        {"k": "begin", "session": 1, "pid": 1, "placement": "region-local", "t": 0},
        {"k": "w", "wid": 7, "obj": "o", "off": [0], "cnt": [4], "dur": "local", "cons": "relaxed", "srv": 0, "t": 1},
        {"k": "ack", "wids": [7], "t": 2},
        {"k": "w", "wid": 8, "obj": "o", "off": [0], "cnt": [4], "dur": "memory", "cons": "strong", "srv": 0, "t": 3},
        {"k": "ack", "wids": [8], "t": 4},
        {"k": "sync", "t0": 5, "t": 6},
        {"k": "w", "wid": 9, "obj": "o", "off": [0], "cnt": [4], "dur": "local", "cons": "strong", "srv": 0, "t": 7},
    ]
    (j / "rank-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs) + '{"k": "ack", "wi')
    h = oracle.load(tmp_path)
    assert (h.writes[7].od, h.writes[8].od, h.writes[9].od) == (6, 4, oracle.INF)
    assert h.writes[9].ack is None and h.acked_bytes() == {"local": 32, "memory": 32}


def test_only_a_torn_last_line_is_tolerated(tmp_path):
    (tmp_path / "journal").mkdir()
    j = tmp_path / "journal" / "rank-0.jsonl"
    good = '{"k": "w", "wid": 1}\n{"k": "ack", "wids": [1]}\n'
    j.write_text(good + '{"k": "ack", "wi')  # killed mid-append: no newline after it
    assert [r["k"] for r in oracle.read_jsonl(j)] == ["w", "ack"]
    j.write_text(good)
    assert len(oracle.read_jsonl(j)) == 2
    for bad in (
        '{"k": "w", "wid": 1}\n{"k": "ack", "wi\n{"k": "ack", "wids": [2]}\n',  # torn, then more
        good + '{"k": "ack", "wi\n',  # a whole last line (it has its newline) that is malformed
        '{"k": "w", "wid": 1}\n\n{"k": "ack", "wids": [1]}\n',  # an empty line inside
        "[1, 2]\n" + good,  # JSON, but no record
    ):
        j.write_text(bad)
        with pytest.raises(oracle.JournalError):
            oracle.read_jsonl(j)
        with pytest.raises(oracle.JournalError):
            oracle.load(tmp_path)


def test_a_killed_ranks_torn_line_is_cut_before_its_next_session(tmp_path):
    j = tmp_path / "rank-0.jsonl"
    assert L.cut_torn_tail(str(j)) == 0  # no journal yet
    whole = '{"k": "begin", "session": 1}\n' + '{"k": "w", "wid": 1}\n' * 5000  # > one 64 KiB chunk
    j.write_text(whole + '{"k": "ack", "wids": [1')
    nxt = '{"k": "begin", "session": 2}\n'
    # Without the cut, the next session's first record would be glued to the torn line.
    with open(j, "a") as f:
        f.write(nxt)
    with pytest.raises(oracle.JournalError):
        oracle.read_jsonl(j)
    j.write_text(whole + '{"k": "ack", "wids": [1')
    assert L.cut_torn_tail(str(j)) == len('{"k": "ack", "wids": [1')
    assert j.read_text() == whole
    with open(j, "a") as f:
        f.write(nxt)
    assert [r["k"] for r in oracle.read_jsonl(j)][-2:] == ["w", "begin"]
    assert L.cut_torn_tail(str(j)) == 0  # a journal ending with a whole line is left alone
    j.write_text('{"k": "begi')  # only a torn line
    assert L.cut_torn_tail(str(j)) == 11 and j.read_text() == ""


def test_workload_errors_and_missed_crash_points_are_failures():
    import harness

    assert harness.workload_failures("server", 0, "s.log") == []
    assert harness.workload_failures("client", 137, "s.log") == []  # the cycle killed a rank
    for kind in ("server", "all", "crash"):
        assert harness.workload_failures(kind, 3, "s.log") == ["workload exited with 3; see s.log"]
    assert "did not stop" in harness.workload_failures("all", harness.STOP_TIMEOUT_RC, "s.log")[0]
    said = "=== harness: start rank 1\npdcx: crash point flush.after_put reached: killing this process\n"
    kill = -9
    assert harness.crash_evidence(kill, said, "flush.after_put") is None
    assert "never reached" in harness.crash_evidence(kill, said, "commit.after_publish")
    assert "exited with 1" in harness.crash_evidence(1, said, "flush.after_put")
    assert "exited with 101" in harness.crash_evidence(101, "panicked", "flush.after_put")
    for why in (harness.crash_evidence(1, "", "x.y"), harness.crash_evidence(kill, "", "x.y")):
        assert harness.failure_kind(why) == "servers that died elsewhere than their crash point", why


def crash_point_cycles(
    tmp_path, points: str, *args: str, seed: int = 5
) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """The harness with crash-point cycles only, one per line of `points`: its run and results."""
    if shutil.which("mpirun") is None or not Path(os.environ.get("VERSITYGW", "/usr/local/bin/versitygw")).exists():
        pytest.skip("mpirun or versitygw not installed")
    pytest.importorskip("mpi4py")
    (tmp_path / "points").write_text(points)
    out = tmp_path / "rel"
    cmd = [sys.executable, str(HARNESS), "--kills", "0", "--servers", "2", *args]
    cmd += ["--crash-points", str(tmp_path / "points"), "--seed", str(seed), "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
    return p, [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_the_harness_fails_when_an_armed_point_is_never_reached(tmp_path):
    """A crash-point cycle whose point the servers never pass (no such point here) is a
    failure, and the harness exits 1: a crash test that crashed nothing must not pass."""
    p, results = crash_point_cycles(
        tmp_path, "commit.no_such_point\n", "--ranks", "2", "--particles", "2048", "--crash-wait", "3"
    )
    assert [(r["kind"], r.get("point"), r.get("hit")) for r in results] == [("crash", "commit.no_such_point", False)], (
        p.stdout[-5000:] + p.stderr[-5000:]
    )
    assert [f for f in results[0]["failures"] if "was never reached" in f], results[0]["failures"]
    assert p.returncode == 1 and "crash points never reached" in p.stdout, p.stdout[-5000:]


def test_harness_kill_loop_finds_nothing_wrong(tmp_path):
    """A short run: kill -9 of one server, of all servers and of a client rank, while 3 MPI
    ranks write with memory/local durability and strong/relaxed consistency and the flusher
    moves data to a shared directory and to S3; the oracle checks after every recovery."""
    for tool in ("mpirun", "pdcx"):
        if shutil.which(tool) is None and not os.environ.get("PDCX_BIN"):
            pytest.skip(f"{tool} not installed")
    pytest.importorskip("mpi4py")
    if not Path(os.environ.get("VERSITYGW", "/usr/local/bin/versitygw")).exists():
        pytest.skip("versitygw not installed (scripts/s3server.sh install)")
    out = tmp_path / "rel"
    cmd = [sys.executable, str(HARNESS), "--kills", "3", "--kinds", "server,all,client", "--kills-per-run", "3"]
    cmd += ["--servers", "2", "--ranks", "3", "--particles", "4096", "--max-delay", "1.5"]
    cmd += ["--crash-points", "none", "--seed", "7", "--out", str(out), "--cycle-kinds-in-order"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in results] == ["server", "all", "client"], p.stdout[-5000:] + p.stderr[-5000:]
    failures = [f for r in results for f in r["failures"]]
    assert p.returncode == 0 and not failures, p.stdout[-5000:] + p.stderr[-5000:]
    assert all(r["second_recovery_diff"] == [] for r in results)
    last = results[-1]
    assert last["acked"].get("local", 0) > 0 and last["acked"].get("memory", 0) > 0
    assert "| torn regions found" in p.stdout and "| bytes lost at local" in p.stdout


def test_the_oracle_catches_damage_on_a_real_deployment(tmp_path):
    """The oracle reads what the servers hold: after one kill cycle, a write the journal does
    not know (fill over acknowledged data) shows as lost data and torn writes."""
    if shutil.which("mpirun") is None or not Path(os.environ.get("VERSITYGW", "/usr/local/bin/versitygw")).exists():
        pytest.skip("mpirun or versitygw not installed")
    pytest.importorskip("mpi4py")
    import argparse
    import random

    import harness
    import pdcx

    args = argparse.Namespace(
        servers=2,
        ranks=2,
        particles=2048,
        big_share=0.0,
        object_static_share=0.3,
        max_delay=0.5,
        crash_wait=10,
        keep=False,
    )
    run = harness.Run(tmp_path, 0, args, random.Random(3))
    try:
        run.setup()
        res = run.cycle("all")
        assert res["failures"] == [], res["failures"]
        h = oracle.load(run.dir)
        acked = [w for w in h.writes.values() if w.ack is not None and w.dur == "local" and w.obj.startswith("vpic/")]
        assert acked
        client = pdcx.connect(run.root)
        victim = acked[-1]
        client.open_object(victim.obj)[victim.off[0] : victim.off[0] + 10] = L.FILL
        rep = oracle.check(client, oracle.load(run.dir))
        assert any(d in ("local", "remote") for d, _ in rep.lost), rep.failures()
        assert rep.torn, rep.failures()
    finally:
        run.close()


def test_reads_survive_segment_retirement(deployment):
    """Found by the crash harness (no kill needed): a read whose pieces are partly on a tier
    (retired) and partly in sealed log segments fails with "seg-N.log is not part of the log"
    when the flusher retires those segments during the tier read. A small cache (so pieces
    come from the log) and a slow tier (so the window is wide) make it frequent."""
    import threading
    import time

    import pdcx

    dep = deployment(n=1, start=False, cache_mb=1)
    (dep.root / "pdcx.toml").write_text(
        f"""
[[tier]]
name = "pfs"
kind = "shared"
path = "{dep.root}/pfs"
max_mbps = 50
[log]
segment_bytes = "1MiB"
[flush]
interval_ms = 20
"""
    )
    dep.start()
    o = dep.client().create_container("c").create_object("c/x", 1 << 20, "int64")
    failures, reads, done = [], [0], threading.Event()

    def reader():
        r = pdcx.connect(dep.root).open_object("c/x")
        while not done.is_set():
            try:
                r[...]
            except pdcx.PdcxError as e:
                failures.append(str(e))
            reads[0] += 1

    th = threading.Thread(target=reader)
    th.start()
    try:
        end, i = time.monotonic() + 15, 0
        while time.monotonic() < end:
            i += 1
            off = (i * 16384) % (1 << 20)
            o[off : off + 16384] = i
    finally:
        done.set()
        th.join()
    assert reads[0] > 10
    assert failures == [], f"{len(failures)} of {reads[0]} reads failed, first: {failures[0]}"


def test_memory_writes_at_risk_are_those_no_later_commit_covered():
    h = oracle.History()
    m1 = write(1, [0], [10], issue=1, ack=2, dur="memory")  # server 0, covered by l (3..4)
    l2 = write(2, [20], [10], issue=3, ack=4)
    m3 = write(3, [0], [10], issue=5, ack=6, dur="memory")  # nothing after it on server 0
    m4 = write(4, [0], [10], issue=5, ack=6, dur="memory")  # server 1: never killed
    m4.srv = 1
    h.writes = {w.wid: w for w in (m1, l2, m3, m4)}
    h.events = [{"k": "kill", "servers": [0], "t": 10}]
    assert h.memory_at_risk() == {3}
    h.events.insert(0, {"k": "flush", "t0": 7, "t": 8})  # a flush after m3's ack covers it
    assert h.memory_at_risk() == set()
    h.events = [{"k": "kill", "servers": [0, 1], "t": 3.5}]  # before l2 was acknowledged
    assert h.memory_at_risk() == {1}
    rep = oracle.Report(at_risk={1})
    rep.lost = {("memory", 1): 10, ("memory", 4): 3}
    assert rep.failures() == ["memory write 0x4 lost at 3 elements after a later local commit on its server"]


def test_calls_longer_than_ten_seconds_work(deployment):
    """Found by the crash harness: any client call whose reply takes more than 10 s fails
    with "reading frame header: Resource temporarily unavailable (os error 11)". Conn::connect
    bounds the handshake with a 10 s read timeout and says it lifts it afterwards, but never
    does. Here: a flush that waits for 48 MiB to reach a 4 MB/s tier."""
    import pdcx

    dep = deployment(n=1, start=False, cache_mb=1)
    (dep.root / "pdcx.toml").write_text(
        f"""
[[tier]]
name = "pfs"
kind = "shared"
path = "{dep.root}/pfs"
max_mbps = 4
[flush]
interval_ms = 60000
"""
    )
    dep.start()
    client = dep.client()
    o = client.create_container("c").create_object("c/x", 6 << 20, "int64")
    for k in range(0, 6 << 20, 1 << 19):
        o[k : k + (1 << 19)] = k
    try:
        reports = client.flush(wait=True)
    except pdcx.PdcxError as e:
        pytest.fail(f"a flush that takes more than 10 s failed: {e}")
    assert all(r["pending_extents"] == 0 for r in reports), reports


@pytest.mark.skipif(not os.environ.get("PDCX_CRASH_BIN"), reason="needs PDCX_CRASH_BIN: a pdcx built with crash points")
def test_harness_crash_points_lose_nothing(tmp_path):
    """Crash-point cycles with the instrumented build: a server dies at a commit, a flush and a
    retirement point (the Nth hit, N in 1..3) while 3 ranks write; it is restarted and the
    oracle finds nothing lost, torn or changed by a second recovery."""
    points = ["commit.after_register", "flush.after_home_rows", "retire.after_manifest"]
    p, results = crash_point_cycles(
        tmp_path, "".join(f"{n}\n" for n in points), "--ranks", "3", "--particles", "4096", "--crash-wait", "30"
    )
    assert [r.get("point") for r in results] == points, p.stdout[-5000:] + p.stderr[-5000:]
    assert all(r.get("hit") for r in results), [(r["point"], r.get("armed"), r.get("hit")) for r in results]
    failures = [f for r in results for f in r["failures"]]
    assert p.returncode == 0 and not failures, p.stdout[-5000:]


@pytest.mark.skipif(not os.environ.get("PDCX_CRASH_BIN"), reason="needs PDCX_CRASH_BIN: a pdcx built with crash points")
def test_an_armed_registration_point_is_reached_whatever_the_placement(tmp_path):
    """register.after_region_map fires on an object's owner when another server registers a
    region of it that it holds. With every rank writing object-static (data on the owner) the
    random mix never makes such a registration, so only the workload's priming rounds reach
    the point: armed on either server (two seeds, two victims), at its Nth hit, it fires."""
    victims = set()
    for seed in (5, 7):  # victims 1 and 0
        (tmp_path / str(seed)).mkdir()
        p, results = crash_point_cycles(
            tmp_path / str(seed),
            "register.after_region_map\n",
            "--ranks",
            "3",
            "--particles",
            "2048",
            "--crash-wait",
            "20",
            "--object-static-share",
            "1",
            seed=seed,
        )
        assert [(r.get("point"), r.get("hit")) for r in results] == [("register.after_region_map", True)], (
            p.stdout[-5000:] + p.stderr[-5000:]
        )
        failures = [f for r in results for f in r["failures"]]
        assert p.returncode == 0 and not failures, p.stdout[-5000:]
        victims.add(results[0]["victim"])
    assert victims == {0, 1}, victims
