"""Metadata rate and small-transfer latency of pdcx, with baselines measured in the same run.

    python3 bench/meta_small.py [--servers 1] [--objects 20000] [--batch 1000] [--ops 2000] [--dir DIR]

Starts `pdcx server start -n S --root DIR/pdcx` ($PDCX_BIN or `pdcx` on PATH) and prints:

- creates/s per server, single: `cont.create_object(name, 1, "int32", tags={"step": i % 100})`
  in a loop (create + tag in one request, answered at the owner's commit) ended by
  `client.sync()` (every create on stable storage; timed), and from 4 clients at once;
- creates/s per server, batched: `cont.create_objects([...])`, `--batch` specs per call
  (durable at return), and with `lazy=True` (durable at the consistency point, a final
  `client.sync()`, timed);
- 4 KiB write + wait latency (`write_async(..).wait()`) with `local` and `memory` durability;
- baselines: h5py dataset creation rate (one file, an int attribute each; no fsync: HDF5 has
  no durability point per create) and `os.pwrite` + `os.fdatasync` of 4 KiB in DIR (the cost of
  one durable small write on this disk).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pdcx
from pdcxbin import pdcx_bin


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s"


def lat(samples: list[float]) -> str:
    us = sorted(s * 1e6 for s in samples)
    p99 = us[min(len(us) - 1, int(len(us) * 0.99))]
    return f"mean {statistics.fmean(us):7.1f} us  p50 {us[len(us) // 2]:7.1f} us  p99 {p99:7.1f} us"


def bench_creates(client, servers: int, n: int, batch: int, prefix: str) -> None:
    cont = client.create_container(f"{prefix}-c")
    t0 = time.perf_counter()
    for i in range(n):
        cont.create_object(f"{prefix}-s-{i}", 1, "int32", tags={"step": i % 100})
    client.sync()  # the consistency point: every create above is on stable storage (timed)
    dt = time.perf_counter() - t0
    print(f"pdcx create+tag, single, 1 thread    : {rate(n, dt)} total, {rate(n // servers, dt)} per server")

    threads, per = 4, n // 4

    def worker(t: int) -> None:
        # One client per thread: a client has one pooled connection per server, shared (and
        # serialised) by its threads; separate clients are what concurrent ranks look like.
        pdcx_client = pdcx.connect(client.root)
        c = pdcx_client.open_container(f"{prefix}-c")
        for i in range(per):
            c.create_object(f"{prefix}-t{t}-{i}", 1, "int32", tags={"step": i % 100})
        pdcx_client.sync()

    ths = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    t0 = time.perf_counter()
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    dt = time.perf_counter() - t0
    tot = threads * per
    print(f"pdcx create+tag, single, 4 clients   : {rate(tot, dt)} total, {rate(tot // servers, dt)} per server")

    try:
        cont.create_objects([])
        cont.create_objects([{"name": f"{prefix}-probe", "shape": 1}], raise_on_error=True)
    except pdcx.PdcxError as e:
        print(f"pdcx create_objects unsupported by this server ({type(e).__name__}): batched rate skipped")
        return
    t0 = time.perf_counter()
    made = 0
    for b in range(0, n, batch):
        specs = [
            {"name": f"{prefix}-b-{i}", "shape": 1, "dtype": "int32", "tags": {"step": i % 100}}
            for i in range(b, min(n, b + batch))
        ]
        made += sum(isinstance(o, pdcx.Object) for o in cont.create_objects(specs))
    dt = time.perf_counter() - t0
    assert made == n, f"{n - made} batched creates failed"
    print(f"pdcx create+tag, batched ({batch:>5}/call): {rate(n, dt)} total, {rate(n // servers, dt)} per server")
    try:
        cont.create_objects([], lazy=True)
    except TypeError:
        print("pdcx create_objects(lazy=True) unsupported by this pdcx: lazy batched rate skipped")
        return
    t0 = time.perf_counter()
    made = 0
    for b in range(0, n, batch):
        specs = [
            {"name": f"{prefix}-l-{i}", "shape": 1, "dtype": "int32", "tags": {"step": i % 100}}
            for i in range(b, min(n, b + batch))
        ]
        made += sum(isinstance(o, pdcx.Object) for o in cont.create_objects(specs, lazy=True))
    client.sync()
    dt = time.perf_counter() - t0
    assert made == n, f"{n - made} lazy batched creates failed"
    print(f"pdcx create+tag, lazy batched ({batch:>5}): {rate(n, dt)} total, {rate(n // servers, dt)} per server")


def bench_h5py(path: Path, n: int) -> None:
    try:
        import h5py
    except ImportError:
        print("h5py not installed: HDF5 baseline skipped")
        return
    t0 = time.perf_counter()
    with h5py.File(path, "w", libver="latest") as f:
        for i in range(n):
            d = f.create_dataset(f"s-{i}", shape=(1,), dtype="i4")
            d.attrs["step"] = i % 100
    dt = time.perf_counter() - t0
    print(f"h5py create_dataset+attr (no fsync) : {rate(n, dt)}")
    path.unlink()


def bench_small(client, ops: int, prefix: str) -> None:
    cont = client.create_container(f"{prefix}-small")
    obj = cont.create_object(f"{prefix}-small", (ops * 1024,), "int32")
    data = np.arange(1024, dtype=np.int32)
    for durability in ("local", "memory"):
        for i in range(50):  # warm-up: connections, worker thread, cache
            obj.write_async(data, i * 1024, durability=durability).wait()
        samples = []
        for i in range(ops):
            t0 = time.perf_counter()
            obj.write_async(data, i * 1024, durability=durability).wait()
            samples.append(time.perf_counter() - t0)
        print(f"pdcx 4 KiB write+wait, {durability:<6}       : {lat(samples)}")
    samples = []
    for i in range(ops):
        t0 = time.perf_counter()
        obj[i * 1024 : (i + 1) * 1024] = data
        samples.append(time.perf_counter() - t0)
    print(f"pdcx 4 KiB obj[a:b] = arr (sync)    : {lat(samples)}")


def bench_fdatasync(path: Path, ops: int) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    buf = b"\x01" * 4096
    samples = []
    try:
        for i in range(ops):
            t0 = time.perf_counter()
            os.pwrite(fd, buf, i * 4096)
            os.fdatasync(fd)
            samples.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()
    print(f"os.pwrite 4 KiB + os.fdatasync      : {lat(samples)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--objects", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir under /tmp)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pdcx-meta-small-", dir=args.dir))
    root = work / "pdcx"
    exe = pdcx_bin()
    print(f"# {exe}, {args.servers} server(s), dir {work}, nproc {os.cpu_count()}, load {os.getloadavg()}")
    subprocess.run([exe, "server", "start", "-n", str(args.servers), "--root", str(root)], check=True, timeout=120)
    try:
        client = pdcx.connect(root)
        bench_creates(client, args.servers, args.objects, args.batch, "m")
        bench_small(client, args.ops, "m")
    finally:
        subprocess.run([exe, "server", "stop", "--root", str(root)], check=False, timeout=120)
    bench_h5py(work / "meta.h5", args.objects)
    bench_fdatasync(work / "probe.bin", args.ops)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
