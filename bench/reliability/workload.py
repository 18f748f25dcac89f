"""One MPI rank of the crash harness's workload (run by harness.py under mpirun).

Usage: mpirun -n R python3 workload.py RUN_DIR SESSION SEED [ARMED]   (PDCX_ROOT set)

ARMED (NAME or NAME:N) is the crash point a server runs with in this session: every rank then
starts with N priming rounds that reach it (prime_round), not left to the random mix.

Every rank writes VPIC-like output (8 particle variables, each rank its block plus a halo that
overlaps the next rank's block), random rectangles of a shared 2-D grid, small overlapping
writes of a hot object, now and then a large (multipart-sized) write to an S3-placed object,
and tag puts; with a random durability per batch (from the run's config), some objects in
relaxed consistency (with syncs), and a random placement per session. It runs until the
harness creates RUN_DIR/stop (then it syncs and exits 0) or until errors persist.

The oracle's history: each rank appends JSON lines to RUN_DIR/journal/rank-R.jsonl and fsyncs
them *before* starting an operation ("w": issue of a write, "tag", "create") and *after* the
call returned ("ack", "sync"). A line is never written for an acknowledgement the rank did
not receive, so the journal never claims more than what was acknowledged. Times are
CLOCK_MONOTONIC nanoseconds, which every process on the host shares.

Write data is a pattern the oracle can attribute: element e (flat index) of write `wid` holds
(wid << 20) | (e & 0xFFFFF), so a value read back names the write it came from and its place.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import pdcx
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layout as L


class Journal:
    def __init__(self, path: str):
        self.dropped = L.cut_torn_tail(path)
        self.f = open(path, "a", buffering=1 << 16)  # noqa: SIM115 - lives as long as the rank

    def put(self, *recs: dict) -> None:
        for r in recs:
            self.f.write(json.dumps(r, separators=(",", ":")) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())


def now() -> int:
    return time.monotonic_ns()


def main() -> int:
    run_dir, session, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    armed = sys.argv[4] if len(sys.argv) > 4 else None
    with open(os.path.join(run_dir, "config.json")) as f:
        cfg = json.load(f)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng([seed, session, rank])
    jr = Journal(os.path.join(run_dir, "journal", f"rank-{rank}.jsonl"))
    client = pdcx.connect()
    placement = "object-static" if rng.random() < cfg.get("object_static_share", 0.3) else "region-local"
    client.placement = placement
    begin = {"k": "begin", "session": session, "pid": os.getpid(), "placement": placement, "t": now()}
    if jr.dropped:
        begin["dropped_torn_bytes"] = jr.dropped
    jr.put(begin)
    stop_path = os.path.join(run_dir, "stop")
    durs = cfg["durabilities"]
    n = cfg["particles"]
    objs: dict[str, pdcx.Object] = {}

    def obj(name: str) -> pdcx.Object:
        if name not in objs:
            objs[name] = client.open_object(name)
        return objs[name]

    # Step output: rank 0 creates this session's object (VPIC writes one file per time step).
    step_name = f"steps/s{session}"
    if rank == 0:
        jr.put({"k": "create", "obj": step_name, "shape": [size * n], "tags": {"session": session}, "t": now()})
        try:
            client.open_container("steps").create_object(
                step_name, size * n, "int64", fill=-1, tags={"session": session}
            )
            # A create is durable at the creating client's next consistency point (it is
            # visible at once, but a kill -9 in the next few ms may lose it): only then is it
            # acknowledged in the sense the oracle checks.
            client.sync()
            jr.put({"k": "created", "obj": step_name, "t": now()})
        except pdcx.PdcxError as e:  # a server died (a crash point at the first commit): in doubt
            jr.put({"k": "err", "what": "create", "error": str(e)[:300], "t": now()})
    comm.Barrier()

    # Relaxed consistency for a random subset of the shared objects (per rank and session).
    relaxed = set()
    for name in L.shared_objects(cfg):
        if rng.random() < cfg.get("relaxed_share", 0.3):
            expected = int(rng.choice([0, 4]))
            try:
                obj(name).set_consistency("relaxed", expected_writes=expected)
                relaxed.add(name)
            except pdcx.PdcxError as e:
                jr.put({"k": "err", "what": "open", "error": str(e)[:300], "t": now()})
    jr.put({"k": "relaxed", "objs": sorted(relaxed), "t": now()})

    counter = [0]

    def next_wid() -> int:
        counter[0] += 1
        return L.wid(session, rank, counter[0])

    def server_of(o: pdcx.Object, place: str) -> int:
        return o.metadata["owner"] if place == "object-static" else client.local_server

    def write_batch(items: list[tuple[str, list[int], list[int]]], dur: str, place: str | None = None) -> None:
        """items: (object, offset, count). Journals the issues, starts all, waits all.
        `place` overrides the session's placement for this batch."""
        place = place or placement
        recs, ts = [], []
        for name, off, cnt in items:
            o = obj(name)
            w = next_wid()
            recs.append(
                {
                    "k": "w",
                    "wid": w,
                    "obj": name,
                    "off": off,
                    "cnt": cnt,
                    "dur": dur,
                    "cons": "relaxed" if name in relaxed else "strong",
                    "srv": server_of(o, place),
                    "t": 0,
                }
            )
        t0 = now()
        for r in recs:
            r["t"] = t0
        jr.put(*recs)
        client.placement = place
        try:
            for r in recs:
                o = obj(r["obj"])
                data = L.pattern(r["wid"], r["off"], r["cnt"], o.shape)
                ts.append(o.write_async(data, offset=r["off"], durability=dur))
            pdcx.wait_all(ts)
        finally:
            client.placement = placement
        jr.put({"k": "ack", "wids": [r["wid"] for r in recs], "t": now()})

    def vpic_step() -> None:
        total = size * n
        lo, hi = rank * n, min(total, (rank + 1) * n + cfg["halo"])
        write_batch([(f"vpic/{v}", [lo], [hi - lo]) for v in L.VARS], str(rng.choice(durs)))

    def grid_rect() -> None:
        g = cfg["grid"]
        r0, c0 = (int(x) for x in rng.integers(0, g - 1, size=2))
        h, w = int(rng.integers(1, min(g - r0, g // 2) + 1)), int(rng.integers(1, min(g - c0, g // 2) + 1))
        write_batch([("grid", [r0, c0], [h, w])], str(rng.choice(durs)))

    def hot() -> None:
        m = cfg["hot"]
        items = []
        for _ in range(int(rng.integers(1, 4))):
            off = int(rng.integers(0, m - 1))
            items.append(("hot", [off], [int(rng.integers(1, min(m - off, m // 4) + 1))]))
        write_batch(items, str(rng.choice(durs)))

    def big() -> None:
        m, b = cfg["big"], cfg["big_write"]
        off = int(rng.integers(0, m - b + 1))
        write_batch([("big", [off], [b])], str(rng.choice(durs)))

    def tag() -> None:
        name = f"tags/r{rank}"
        o = obj(name)
        key = "step" if rng.random() < 0.7 else f"s{session}"
        val = next_wid()  # unique over the run, so a value read back names its put
        jr.put({"k": "tag", "obj": name, "key": key, "val": val, "t": now()})
        o.tags[key] = val
        jr.put({"k": "tagged", "val": val, "t": now()})

    def sync() -> None:
        t0 = now()
        client.sync()
        jr.put({"k": "sync", "t0": t0, "t": now()})

    def step_output() -> None:
        write_batch([(step_name, [rank * n], [n])], str(rng.choice(durs)))

    def prime_round(place: str) -> None:
        """One write of every priming object (one owned by each server, harness.py) with
        placement `place`, strong and `local`, so that a crash point armed on any server is
        reached whatever the random mix draws: "region-local" puts the data on this rank's
        node-local server, and each other owner records a registration
        (register.after_region_map); "object-static" puts it on the owner, a commit there
        (commit.*, log.*). For an armed s3.* point rank 0's object-static rounds write whole
        slots: on every owner one extent above the S3 part size per round, a multipart upload
        when flushed to the objects' S3 tier (one rank only: every round's extent stays, and
        the oracle reads them all back). Each such round is flushed before the next: with
        `[shard]` on, rounds flushed in one pass would share one blob, one upload, and the
        point's Nth hit would wait for the mix's rare large writes (seen: never within the
        harness's wait). The flush fails when the armed server dies at its point: expected."""
        slot = cfg["big_write"]
        whole = armed.startswith("s3.") and place == "object-static" and rank == 0
        cnt = slot if whole else 1024
        write_batch([(name, [rank * slot], [cnt]) for name in sorted(cfg["prime"].values())], "local", place)
        if whole:
            client.flush(wait=True)

    def prime_region_local() -> None:
        prime_round("region-local")

    def prime_object_static() -> None:
        prime_round("object-static")

    # With a crash point armed, the priming rounds first (one pair per hit the point waits
    # for, each round waited, so the hits are separate requests), then this session's step
    # output, then the mix until told to stop.
    first = [step_output]
    if armed and cfg.get("prime"):
        nth = int(armed.partition(":")[2] or 1)
        first += [prime_object_static, prime_region_local] * nth
    ops = [(vpic_step, 0.35), (grid_rect, 0.2), (hot, 0.2), (tag, 0.1), (sync, 0.1), (big, cfg["big_share"])]
    fns, weights = zip(*ops)
    weights = np.array(weights) / sum(weights)
    errors_since = None
    while not os.path.exists(stop_path):
        fn = first.pop() if first else fns[int(rng.choice(len(fns), p=weights))]
        try:
            fn()
            errors_since = None
        except pdcx.PdcxError as e:
            # A server died under us: the operation is in doubt (its issue is journaled, its
            # ack is not). Keep going: the harness restarts the server and we reconnect.
            jr.put({"k": "err", "what": fn.__name__, "error": f"{type(e).__name__}: {e}"[:300], "t": now()})
            errors_since = errors_since or time.monotonic()
            if time.monotonic() - errors_since > cfg.get("give_up_s", 60):
                print(f"rank {rank}: giving up after persistent errors: {e}", flush=True)
                return 3
            time.sleep(0.1)
            objs.clear()  # re-open: the object may need its metadata again after a restart
    try:
        sync()
    except pdcx.PdcxError as e:
        jr.put({"k": "err", "what": "final sync", "error": str(e)[:300], "t": now()})
    jr.put({"k": "end", "t": now()})
    print(f"rank {rank}/{size}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
