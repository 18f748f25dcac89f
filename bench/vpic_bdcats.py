#!/usr/bin/env python3
"""VPIC-IO write + BDCATS-IO read benchmark for pdcx and parallel HDF5.

Run under MPI, for example:

    mpirun --allow-run-as-root --oversubscribe -n 4 \\
        python3 bench/vpic_bdcats.py --backend hdf5 --particles 65536 --dir /tmp/x

Write phase (VPIC-IO): every rank owns N particles with 8 variables
(x, y, z, px, py, pz as float32; id1, id2 as int32).  For each step every
variable is one 1-D global array of R*N elements and rank r writes elements
[r*N, (r+1)*N).

Read phase (BDCATS-IO): every rank reads N elements of every (step, variable)
but from the slice that rank (r+1) % R wrote, so the data crosses ranks, and
checks it against regenerated data (outside the timed region).

Each phase is timed as: barrier, t0, all I/O including open/create and
making the data durable (HDF5: file close; pdcx: wait_all), barrier, t1.
MB means 10**6 bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np
from mpi4py import MPI

VARS = ("x", "y", "z", "px", "py", "pz", "id1", "id2")
DTYPES = {v: np.dtype("float32") for v in VARS[:6]}
DTYPES.update({"id1": np.dtype("int32"), "id2": np.dtype("int32")})
BYTES_PER_PARTICLE = sum(d.itemsize for d in DTYPES.values())  # 32
SEED = 0x5DC0

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
size = comm.Get_size()


def _abort_on_exception(exc_type, exc, tb):
    """An exception on one rank would leave the others hanging in a barrier."""
    sys.stderr.write(f"[rank {rank}] fatal error:\n")
    traceback.print_exception(exc_type, exc, tb)
    sys.stderr.flush()
    comm.Abort(1)


def log(msg: str) -> None:
    if rank == 0:
        print(msg, flush=True)


def fail_all(local_msg: str | None, what: str) -> None:
    """Collective: if any rank reports a problem, every rank exits with status 1."""
    if local_msg:
        sys.stderr.write(f"[rank {rank}] {local_msg}\n")
        sys.stderr.flush()
    nbad = comm.allreduce(1 if local_msg else 0, op=MPI.SUM)
    if nbad:
        log(f"ERROR: {what} failed on {nbad} of {size} ranks (details above)")
        sys.exit(1)


# ----------------------------------------------------------------------------
# data


def gen(owner: int, step: int, vi: int, n: int) -> np.ndarray:
    """Deterministic data of the slice written by rank `owner`."""
    rng = np.random.default_rng([SEED, owner, step, vi])
    var = VARS[vi]
    if DTYPES[var].kind == "f":
        return rng.random(n, dtype=np.float32) * np.float32(100.0)
    return rng.integers(0, 2**31 - 1, size=n, dtype=np.int32)


def names(steps: int):
    """(step, var index, var name) for every array, in I/O order."""
    return [(s, vi, v) for s in range(steps) for vi, v in enumerate(VARS)]


def verify(results: dict, steps: int, n: int, src: int) -> str | None:
    for s, vi, v in names(steps):
        got = np.asarray(results[(s, vi)])
        exp = gen(src, s, vi, n)
        if got.dtype != exp.dtype or got.shape != exp.shape:
            return (
                f"verification: step {s} var {v}: got dtype {got.dtype} shape "
                f"{got.shape}, expected dtype {exp.dtype} shape {exp.shape}"
            )
        if not np.array_equal(got, exp):
            bad = np.flatnonzero(got != exp)
            i = int(bad[0])
            return (
                f"verification: step {s} var {v} (slice of rank {src}): "
                f"{bad.size} of {n} elements differ; first at element {i} "
                f"(global {src * n + i}): got {got[i].item()!r}, expected {exp[i].item()!r}"
            )
    return None


# ----------------------------------------------------------------------------
# page cache (optional, outside timing)


def evict_page_cache(root: str) -> int:
    """fdatasync + POSIX_FADV_DONTNEED every regular file under root.

    Only touches this benchmark's own files, unlike `echo 3 > drop_caches`.
    Returns the number of files processed on this rank.
    """
    paths = []
    for dirpath, _dirs, files in os.walk(root):
        paths += [os.path.join(dirpath, f) for f in files]
    paths.sort()
    count = 0
    for p in paths[rank::size]:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue  # sockets, vanished files, ...
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            count += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return count


# ----------------------------------------------------------------------------
# HDF5 backend (parallel h5py, contiguous datasets, collective I/O)


def h5_path(args) -> str:
    return os.path.join(args.dir, "vpic.h5")


def h5_dset(s: int, v: str) -> str:
    return f"/Step#{s}/{v}"


def hdf5_write(args, data: dict) -> float:
    import h5py

    n, total = args.particles, args.particles * size
    start = rank * n
    f = h5py.File(h5_path(args), "w", driver="mpio", comm=comm)
    dsets = {}
    for s, vi, v in names(args.steps):
        # Dataset creation is collective; no chunks = contiguous layout.
        dsets[(s, vi)] = f.create_dataset(h5_dset(s, v), shape=(total,), dtype=DTYPES[v], fill_time="never")
    t_setup = time.perf_counter()
    for s, vi, _v in names(args.steps):
        d = dsets[(s, vi)]
        with d.collective:
            d[start : start + n] = data[(s, vi)]
    f.close()
    return t_setup


def hdf5_fsync(args) -> float:
    """Collective: fsync vpic.h5 after the write phase. Returns the seconds it took.

    pdcx's wait_all (durability "local") returns only once the server has fdatasync'ed its
    log, while HDF5's close leaves the data in the page cache. This is the extra cost HDF5
    would pay for the same guarantee; it is reported separately, never added to write_s.
    """
    comm.Barrier()
    t0 = time.perf_counter()
    if rank == 0:
        fd = os.open(h5_path(args), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    comm.Barrier()
    return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)


def hdf5_read(args, src: int, results: dict) -> float:
    import h5py

    n = args.particles
    start = src * n
    f = h5py.File(h5_path(args), "r", driver="mpio", comm=comm)
    dsets = {(s, vi): f[h5_dset(s, v)] for s, vi, v in names(args.steps)}
    t_setup = time.perf_counter()
    for key, d in dsets.items():
        with d.collective:
            results[key] = d[start : start + n]
    f.close()
    return t_setup


def hdf5_check(args) -> None:
    import h5py

    if not h5py.get_config().mpi:
        log("ERROR: h5py is not built with MPI; run `bash scripts/setup.sh --bench`")
        sys.exit(2)
    if not args.dir:
        log("ERROR: --dir is required for --backend hdf5")
        sys.exit(2)
    if rank == 0:
        os.makedirs(args.dir, exist_ok=True)
    comm.Barrier()


# ----------------------------------------------------------------------------
# pdcx backend


def obj_name(s: int, v: str) -> str:
    return f"step{s}/{v}"


class PdcxBackend:
    def __init__(self, args):
        try:
            import pdcx
        except ImportError as e:
            # Same on every rank, so a plain exit does not leave anyone hanging.
            log(f"ERROR: cannot import pdcx ({e}); run `bash scripts/setup.sh`")
            sys.exit(2)

        self.pdcx = pdcx
        self.args = args
        self.client = pdcx.connect()

    def create_all(self) -> None:
        """Rank 0 creates the container and all objects."""
        pdcx, args = self.pdcx, self.args
        total = args.particles * size
        try:
            cont = self.client.create_container(args.container, tags={"app": "vpic"})
        except pdcx.AlreadyExistsError as e:
            raise RuntimeError(
                f"container {args.container!r} already exists in this pdcx "
                "deployment; start a fresh one (new PDCX_ROOT) or use --container"
            ) from e
        for s, _vi, v in names(args.steps):
            cont.create_object(
                obj_name(s, v),
                shape=(total,),
                dtype=DTYPES[v].name,
                tags={"step": s, "var": v, "app": "vpic"},
            )

    def open_all(self) -> dict:
        return {(s, vi): self.client.open_object(obj_name(s, v)) for s, vi, v in names(self.args.steps)}

    def write(self, data: dict) -> tuple[float, list]:
        n = self.args.particles
        if rank == 0:
            self.create_all()
        comm.Barrier()
        objs = self.open_all()
        t_setup = time.perf_counter()
        transfers = [
            obj.write_async(data[key], offset=(rank * n,), durability=self.args.pdcx_durability)
            for key, obj in objs.items()
        ]
        self.pdcx.wait_all(transfers)
        return t_setup, transfers

    def read(self, src: int, results: dict) -> tuple[float, list]:
        n = self.args.particles
        objs = self.open_all()
        t_setup = time.perf_counter()
        keys = list(objs)
        transfers = [objs[k].read_async(offset=(src * n,), shape=(n,)) for k in keys]
        self.pdcx.wait_all(transfers)
        for k, t in zip(keys, transfers):
            results[k] = t.result()
        return t_setup, transfers

    @staticmethod
    def check_transfers(transfers: list, what: str) -> str | None:
        states = [t.status() for t in transfers]
        bad = [i for i, st in enumerate(states) if st != "complete"]
        if bad:
            return (
                f"{what}: {len(bad)} of {len(states)} transfers not complete after "
                f"wait_all (first: #{bad[0]} is {states[bad[0]]!r})"
            )
        return None

    def close(self) -> None:
        self.client.close()


# ----------------------------------------------------------------------------
# driver


def timed(fn):
    """barrier, t0, fn() -> t_setup, barrier, t1.  Returns (seconds, setup_s)."""
    comm.Barrier()
    t0 = time.perf_counter()
    t_setup = fn()
    comm.Barrier()
    t1 = time.perf_counter()
    setup = comm.allreduce(t_setup - t0, op=MPI.MAX)
    return comm.allreduce(t1 - t0, op=MPI.MAX), setup


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] + " Run with mpirun; see bench/README.md.",
    )
    p.add_argument("--backend", choices=("pdcx", "hdf5"), required=True)
    p.add_argument(
        "--particles",
        type=int,
        default=1 << 20,
        help="particles per rank (N); default 1048576 = 4 MiB per variable",
    )
    p.add_argument("--steps", type=int, default=1, help="time steps (S); default 1")
    p.add_argument(
        "--dir",
        help="directory for the HDF5 file (required for hdf5; ignored by pdcx, which stores data under $PDCX_ROOT)",
    )
    p.add_argument("--json", help="rank 0 writes the results to this JSON file")
    p.add_argument("--container", default="vpic", help="pdcx container name (default vpic)")
    p.add_argument(
        "--evict-cache",
        action="store_true",
        help="between the phases (untimed), fdatasync and POSIX_FADV_DONTNEED the "
        "backend's own files (--dir for hdf5, $PDCX_ROOT for pdcx) so reads "
        "come from storage, not the page cache; does not touch other files",
    )
    p.add_argument(
        "--pdcx-durability",
        choices=("local", "memory"),
        default="local",
        help="durability of the pdcx writes (default local: wait_all returns after the "
        "server fdatasyncs its log; memory: visible but not fsynced)",
    )
    args = p.parse_args(argv)
    if args.particles <= 0 or args.steps <= 0:
        p.error("--particles and --steps must be positive")
    return args


def main(argv=None) -> int:
    sys.excepthook = _abort_on_exception
    args = parse_args(argv)
    n, steps = args.particles, args.steps
    total_bytes = size * n * steps * BYTES_PER_PARTICLE
    src = (rank + 1) % size

    if args.backend == "hdf5":
        hdf5_check(args)
        backend = None
        cache_root = args.dir
    else:
        if "PDCX_ROOT" not in os.environ:
            log("WARNING: PDCX_ROOT is not set; pdcx.connect() uses its default")
        backend = PdcxBackend(args)
        cache_root = os.environ.get("PDCX_ROOT")

    log(
        f"vpic_bdcats: backend={args.backend} ranks={size} particles/rank={n} "
        f"steps={steps} arrays={len(VARS) * steps} "
        f"total={total_bytes / 1e6:.1f} MB per phase"
    )

    # Generate this rank's data before any timing.
    data = {(s, vi): gen(rank, s, vi, n) for s, vi, _v in names(steps)}

    # ---- write (VPIC-IO)
    fsync_s = None
    if backend is None:
        write_s, write_setup = timed(lambda: hdf5_write(args, data))
        fsync_s = hdf5_fsync(args)
    else:
        wt = []

        def do_write():
            t_setup, transfers = backend.write(data)
            wt.extend(transfers)
            return t_setup

        write_s, write_setup = timed(do_write)
        fail_all(backend.check_transfers(wt, "write"), "write")
        # A write transfer holds the client's copy of its data: drop them with the arrays.
        wt.clear()
    data.clear()  # free the write buffers before the read phase
    write_mbps = total_bytes / write_s / 1e6
    log(
        f"write: {total_bytes / 1e6:.1f} MB in {write_s:.3f} s = "
        f"{write_mbps:.1f} MB/s (open/create {write_setup:.3f} s)"
    )
    if fsync_s is not None:
        log(
            f"fsync of the file after close (not in the write time): {fsync_s:.3f} s; "
            f"write + fsync = {total_bytes / (write_s + fsync_s) / 1e6:.1f} MB/s"
        )

    if args.evict_cache:
        if not cache_root:
            log("ERROR: --evict-cache needs --dir (hdf5) or PDCX_ROOT (pdcx)")
            return 2
        comm.Barrier()
        nfiles = comm.allreduce(evict_page_cache(cache_root), op=MPI.SUM)
        comm.Barrier()
        log(f"evicted {nfiles} files under {cache_root} from the page cache")
    else:
        log("note: page cache not dropped; reads may be served from memory (equally for both backends)")

    # ---- read (BDCATS-IO), rank r reads rank (r+1)%R's slice
    results: dict = {}
    if backend is None:
        read_s, read_setup = timed(lambda: hdf5_read(args, src, results))
    else:
        rt = []

        def do_read():
            t_setup, transfers = backend.read(src, results)
            rt.extend(transfers)
            return t_setup

        read_s, read_setup = timed(do_read)
        fail_all(backend.check_transfers(rt, "read"), "read")
    read_mbps = total_bytes / read_s / 1e6
    log(f"read:  {total_bytes / 1e6:.1f} MB in {read_s:.3f} s = {read_mbps:.1f} MB/s (open {read_setup:.3f} s)")

    fail_all(verify(results, steps, n, src), "verification")
    log(f"verify: OK ({len(results)} arrays per rank, rank r read rank r+1's slice)")

    if backend is not None:
        backend.close()

    if args.json and rank == 0:
        out = {
            "backend": args.backend,
            "ranks": size,
            "particles": n,
            "steps": steps,
            "write_s": write_s,
            "write_MBps": write_mbps,
            "read_s": read_s,
            "read_MBps": read_mbps,
            "bytes": total_bytes,
            "write_setup_s": write_setup,
            "read_setup_s": read_setup,
            "evict_cache": args.evict_cache,
        }
        if backend is None:
            out["write_fsync_s"] = write_s + fsync_s
            out["write_fsync_MBps"] = total_bytes / (write_s + fsync_s) / 1e6
        else:
            out["durability"] = args.pdcx_durability
        d = os.path.dirname(os.path.abspath(args.json))
        os.makedirs(d, exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
