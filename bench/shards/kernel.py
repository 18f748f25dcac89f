"""One MPI run of a sharding experiment of "Object sharding across storage layers" (run.sh
drives the sweep).

Kernels (each rank writes `--particles` particles in `--chunks` regions per variable, so a
server has many small extents to group, as the paper's sub-objects per process):
- `vpic-basic`: VPIC-IO, 8 basic objects (x y z id1 id2 px py pz, 4 bytes each);
- `vpic-composite`: the same particles as one composite object (32-byte records);
- `hacc`: HACC-IO, one composite object of 9 variables (38-byte records).

pdcx time = app writes + `flush` until every extent sits on its home tier (what the paper's
I/O rate measures: data stored on the file system). With `--steps S` every system writes S
bursts of these bytes back to back (new objects, datasets or file ranges per burst): pdcx hands
each burst to its flushers as it ends (`flush(wait=False)`), so a burst's flush overlaps the next
burst, and the clock stops when every burst is on the tier; the baselines fsync once, after the
last burst (the same durability at the end, none promised between bursts).

Baselines in the same run, writing the same bytes to the same directory, fsynced: parallel
HDF5 (h5py, one dataset per variable, collective) for VPIC basic; MPI-IO (one shared file of
records, `Write_at_all`) for the composite kernels. Each run reads back a sample to check it stored the right bytes, and
records the machine's CPU time over its clock (/proc/stat: busy, and idle waiting for I/O),
which tells a run bound by the cores from one bound by the device.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from flushwait import flush_to_home, sleeping_barrier

VPIC = (
    [(n, "<f4") for n in ("x", "y", "z")] + [("id1", "<i4"), ("id2", "<i4")] + [(n, "<f4") for n in ("px", "py", "pz")]
)
HACC = [(n, "<f4") for n in ("xx", "yy", "zz", "vx", "vy", "vz", "phi")] + [("pid", "<i8"), ("mask", "<u2")]


def records(kernel: str, n: int, rank: int) -> np.ndarray:
    dt = np.dtype(HACC if kernel == "hacc" else VPIC)
    rng = np.random.default_rng(rank)
    out = np.empty(n, dtype=dt)
    for name in dt.names:
        kind = dt[name].kind
        out[name] = rng.integers(0, 1 << 30, n) if kind in "iu" else rng.random(n, dtype="f4")
    return out


def cpu_now() -> tuple[float, float]:
    """Seconds the machine's CPUs were busy and idle waiting for I/O since boot (/proc/stat's
    first line: user nice system idle iowait irq softirq steal)."""
    with open("/proc/stat") as f:
        t = [int(x) for x in f.readline().split()[1:9]]
    hz = os.sysconf("SC_CLK_TCK")
    return (t[0] + t[1] + t[2] + t[5] + t[6] + t[7]) / hz, t[4] / hz


def cpu_since(start: tuple[float, float]) -> dict:
    end = cpu_now()
    return {"cpu_busy_s": end[0] - start[0], "cpu_iowait_s": end[1] - start[1]}


def pdcx_write(a, comm, recs: np.ndarray) -> dict:
    import pdcx

    rank, size = comm.Get_rank(), comm.Get_size()
    n, chunks = len(recs), a.chunks
    client = pdcx.connect(a.root)
    basic = a.kernel == "vpic-basic"
    names = recs.dtype.names
    if rank == 0:
        c = client.create_container("shards")
        for step in range(a.steps):
            if basic:
                for v in names:
                    c.create_object(f"shards/s{step}/{v}", size * n, recs.dtype[v])
            else:
                c.create_composite(f"shards/s{step}/p", size * n, recs.dtype)
    q = n // chunks
    # The application's arrays, as the baselines hold them before their clocks start: one
    # contiguous column per variable (basic), the records as bytes (composite).
    cols = [np.ascontiguousarray(recs[v]) for v in names] if basic else []
    # A composite object is a bytes array with a trailing record dim: write whole records.
    raw = recs.view(np.uint8).reshape(n, recs.dtype.itemsize).view("S1")
    comm.Barrier()
    cpu0 = cpu_now()
    t0 = time.perf_counter()
    for step in range(a.steps):
        # Every region of this rank's step started at once and waited at once, as PDC's
        # VPIC-IO does (PDCregion_transfer_start_all / wait_all; bench/c's kernels too) and as
        # the HDF5 and MPI-IO baselines write collectively: one reservation and one commit per
        # server.
        if basic:
            objs = [client.open_object(f"shards/s{step}/{v}") for v in names]
            ts = [
                o.transfer("w", col[k * q : (k + 1) * q], (rank * n + k * q,))
                for o, col in zip(objs, cols)
                for k in range(chunks)
            ]
        else:
            obj = client.open_object(f"shards/s{step}/p")
            ts = [obj.transfer("w", raw[k * q : (k + 1) * q], (rank * n + k * q, 0)) for k in range(chunks)]
        pdcx.start_all(ts)
        pdcx.wait_all(ts)
        if step + 1 < a.steps and rank == 0:
            # The burst goes to the flushers now and moves while the next one is written (what
            # the background flush does on its own; its interval is off in this bench so that
            # every run starts its flushes at the same points). Ranks still committing this
            # burst are picked up by the next kick or the final flush.
            client.flush(wait=False)
    sleeping_barrier(comm)
    t_app = time.perf_counter() - t0
    flush_to_home(client, comm)
    t_all = time.perf_counter() - t0
    cpu = cpu_since(cpu0)
    # Check a sample came back right (after the flush: from the tier, or the log if unretired).
    if basic:
        got = client.open_object(f"shards/s0/{names[0]}")[rank * n : rank * n + q]
        assert np.array_equal(got, recs[names[0]][:q])
    else:
        got = client.open_object("shards/s0/p").records[rank * n : rank * n + q]
        assert got.tobytes() == recs[:q].tobytes()
    # Bytes each server put to the home tier (its counter; the bytes of a group shard its
    # members wrote are counted at each writer, of one the leader put at the leader): shows
    # who wrote the group's bytes.
    puts = [sum(t["put_bytes"] for t in s["tiers"]) for s in client.stats()] if rank == 0 else []
    return {"app_s": t_app, "total_s": t_all, "put_bytes": puts, **cpu}


def hdf5_write(a, comm, recs: np.ndarray) -> dict:
    import h5py

    rank, size = comm.Get_rank(), comm.Get_size()
    n, q = len(recs), len(recs) // a.chunks
    path = os.path.join(a.dir, "vpic.h5")
    cols = [np.ascontiguousarray(recs[v]) for v in recs.dtype.names]
    comm.Barrier()
    cpu0 = cpu_now()
    t0 = time.perf_counter()
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        for step in range(a.steps):
            dsets = [f.create_dataset(f"s{step}/{v}", (size * n,), dtype=recs.dtype[v]) for v in recs.dtype.names]
            for d, col in zip(dsets, cols):
                for k in range(a.chunks):
                    with d.collective:
                        d[rank * n + k * q : rank * n + (k + 1) * q] = col[k * q : (k + 1) * q]
        f.flush()
    # h5py has no fsync; the file is closed, so an fsync of it makes the bytes durable.
    if rank == 0:
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    sleeping_barrier(comm)
    t_all = time.perf_counter() - t0
    cpu = cpu_since(cpu0)
    with h5py.File(path, "r", driver="mpio", comm=comm) as f:
        assert np.array_equal(f[f"s0/{recs.dtype.names[0]}"][rank * n : rank * n + q], cols[0][:q])
    return {"app_s": t_all, "total_s": t_all, **cpu}


def mpiio_write(a, comm, recs: np.ndarray) -> dict:
    rank, _ = comm.Get_rank(), comm.Get_size()
    n, q, rb = len(recs), len(recs) // a.chunks, recs.dtype.itemsize
    path = os.path.join(a.dir, "records.bin")
    burst = comm.Get_size() * n * rb
    comm.Barrier()
    cpu0 = cpu_now()
    t0 = time.perf_counter()
    fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_WRONLY)
    for step in range(a.steps):
        for k in range(a.chunks):
            # The records' own bytes (a contiguous slice), not a copy.
            fh.Write_at_all(step * burst + (rank * n + k * q) * rb, recs[k * q : (k + 1) * q].view(np.uint8))
    fh.Sync()
    fh.Close()
    sleeping_barrier(comm)
    t_all = time.perf_counter() - t0
    cpu = cpu_since(cpu0)
    back = np.empty(q * rb, dtype=np.uint8)
    fh = MPI.File.Open(comm, path, MPI.MODE_RDONLY)
    fh.Read_at_all(rank * n * rb, back)
    fh.Close()
    assert back.tobytes() == recs[:q].tobytes()
    return {"app_s": t_all, "total_s": t_all, **cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("system", choices=["pdcx", "hdf5", "mpiio"])
    ap.add_argument("kernel", choices=["vpic-basic", "vpic-composite", "hacc"])
    ap.add_argument("--root", help="pdcx deployment root")
    ap.add_argument("--dir", help="baseline output directory")
    ap.add_argument("--particles", type=int, default=1 << 18, help="per rank")
    ap.add_argument("--chunks", type=int, default=8, help="regions per variable per rank")
    ap.add_argument("--steps", type=int, default=1, help="bursts written back to back (1-64)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.particles % a.chunks:
        ap.error("--particles must be a multiple of --chunks")
    if not 1 <= a.steps <= 64:
        ap.error("--steps must be 1..64")
    comm = MPI.COMM_WORLD
    recs = records(a.kernel, a.particles, comm.Get_rank())
    run = {"pdcx": pdcx_write, "hdf5": hdf5_write, "mpiio": mpiio_write}[a.system]
    r = run(a, comm, recs)
    if comm.Get_rank() == 0:
        r["bytes"] = recs.nbytes * comm.Get_size() * a.steps
        r["steps"] = a.steps
        with open(a.out, "w") as f:
            json.dump(r, f)


if __name__ == "__main__":
    main()
