"""Shared memory vs TCP between a client and a same-node server: 4 KiB write+wait latency and
64 MiB write/read bandwidth, each measured with a client that uses the shared-memory path and
one with PDCX_SHM=0 (alternating rounds, medians reported). Placement is object-static, so
every write goes to its object's owner and both modes take the same path.

    python3 bench/shm.py [--root ROOT] [--servers 2] [--rounds 5] [--ops 2000] [--mib 64]

Without --root it starts a deployment of its own (`pdcx server start`, $PDCX or `pdcx` on
PATH) in a temporary directory and stops it at the end. Durability: "memory" isolates the
transport; "local" (the default of the API) adds the fdatasyncs of each wait.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pdcx


def connect(root: Path, shm: bool) -> pdcx.Client:
    saved = os.environ.get("PDCX_SHM")
    os.environ["PDCX_SHM"] = "1" if shm else "0"
    try:
        c = pdcx.connect(root)
        # Data to each object's owner: with region-local placement, whether the writer's
        # server also owns the object (else a commit registers with the owner, one more round
        # trip) would depend on the object's name and swamp the difference measured here.
        c.placement = "object-static"
        return c
    finally:
        if saved is None:
            del os.environ["PDCX_SHM"]
        else:
            os.environ["PDCX_SHM"] = saved


def shm_bytes(c: pdcx.Client) -> int:
    return sum(s.get("shm_bytes", 0) for s in c.stats())


def latency_us(obj, ops: int, durability: str) -> tuple[float, float]:
    """Median and p99 of one 4 KiB write_async + wait, microseconds."""
    data = np.arange(1024, dtype="<i4")
    lat = []
    for i in range(ops):
        t0 = time.perf_counter()
        obj.write_async(data, offset=(1024 * (i % 64),), durability=durability).wait()
        lat.append(time.perf_counter() - t0)
    lat.sort()
    return statistics.median(lat) * 1e6, lat[int(0.99 * (len(lat) - 1))] * 1e6


def bandwidth(fn, nbytes: int, reps: int) -> float:
    """Best-of-reps MiB/s of fn()."""
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 2**20


def round_for(c: pdcx.Client, tag: str, args) -> dict:
    cont = c.create_container(f"bench-{tag}")
    n = args.mib << 18  # float32 elements
    small = cont.create_object(f"bench-{tag}/small", (1024 * 64,), "int32")
    big = cont.create_object(f"bench-{tag}/big", (n,), "float32")
    arr = np.random.default_rng(1).standard_normal(n, dtype=np.float32)
    out = np.empty_like(arr)
    res = {}
    latency_us(small, 50, "memory")  # warm up connections and arenas
    res["lat_mem"] = latency_us(small, args.ops, "memory")
    res["lat_local"] = latency_us(small, max(args.ops // 4, 50), "local")
    nbytes = arr.nbytes
    res["w_async_mem"] = bandwidth(lambda: big.write_async(arr, durability="memory").wait(), nbytes, 3)
    res["w_async_local"] = bandwidth(lambda: big.write_async(arr).wait(), nbytes, 3)

    def sync_write():
        big[...] = arr

    # Reads of an object written once: every overwrite adds an extent that a read of the
    # whole object still visits (no compaction yet), which would measure the engine instead.
    once = cont.create_object(f"bench-{tag}/once", (n,), "float32")
    once.write_async(arr, durability="memory").wait()

    def sync_read():
        c._c.read_into(once.id, [0], [n], memoryview(out.view(np.uint8)))

    res["w_sync_local"] = bandwidth(sync_write, nbytes, 3)
    res["r_sync"] = bandwidth(sync_read, nbytes, 3)
    assert out.tobytes() == arr.tobytes()
    res["r_async"] = bandwidth(lambda: once.read_async().wait(), nbytes, 3)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--mib", type=int, default=64)
    args = ap.parse_args()
    pdcx_bin = os.environ.get("PDCX") or shutil.which("pdcx") or "pdcx"
    tmp = None
    root = args.root
    if root is None:
        tmp = tempfile.mkdtemp(prefix="pdcx-shm-bench-")
        root = Path(tmp) / "root"
        subprocess.run([pdcx_bin, "server", "start", "-n", str(args.servers), "--root", root], check=True)
    try:
        results: dict[str, list[dict]] = {"shm": [], "tcp": []}
        for r in range(args.rounds):
            for mode in ("shm", "tcp") if r % 2 == 0 else ("tcp", "shm"):
                c = connect(root, mode == "shm")
                before = shm_bytes(c)
                results[mode].append(round_for(c, f"{mode}{r}", args))
                moved = shm_bytes(c) - before
                assert (moved > 0) == (mode == "shm"), f"{mode}: {moved} shm bytes"
                c.close()
        rows = [
            ("4 KiB write+wait, memory: median us", "lat_mem", 0),
            ("4 KiB write+wait, memory: p99 us", "lat_mem", 1),
            ("4 KiB write+wait, local: median us", "lat_local", 0),
            (f"{args.mib} MiB write_async+wait, memory: MiB/s", "w_async_mem", None),
            (f"{args.mib} MiB write_async+wait, local: MiB/s", "w_async_local", None),
            (f"{args.mib} MiB obj[...] = a (local): MiB/s", "w_sync_local", None),
            (f"{args.mib} MiB read_into (obj[...]): MiB/s", "r_sync", None),
            (f"{args.mib} MiB read_async+wait: MiB/s", "r_async", None),
        ]
        print(f"| median of {args.rounds} rounds | shm | PDCX_SHM=0 |\n|---|---:|---:|")
        for label, key, idx in rows:
            vals = []
            for mode in ("shm", "tcp"):
                xs = [r[key] if idx is None else r[key][idx] for r in results[mode]]
                vals.append(statistics.median(xs))
            print(f"| {label} | {vals[0]:.1f} | {vals[1]:.1f} |")
    finally:
        if tmp is not None:
            subprocess.run([pdcx_bin, "server", "stop", "--root", root], check=False)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
