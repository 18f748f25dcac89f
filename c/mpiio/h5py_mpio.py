"""h5py_mpio: an ordinary parallel h5py program (HDF5's MPI-IO driver; knows nothing about pdcx).

    mpirun -n 4 python3 h5py_mpio.py PATH [N]

The same workload as phdf5.c through h5py's `mpio` driver: over 3 steps it writes
  /contig   float64 [ranks*N], contiguous, rank r owns [r*N, (r+1)*N); rewritten every step,
            collectively in steps 0 and 2 (`dset.collective`), independently in step 1
  /chunked  int32 [3, ranks*N], chunks (1, N): step s writes row s, independently in steps 0
            and 2, collectively in step 1
  /extra    int64 [ranks], created in step 1
  attributes "step" and "title" on the root group, "scale" on /contig, rewritten every step
and flushes the file after every step (H5Fflush, MPI_File_sync underneath), then closes.
Values are deterministic and creation times are not tracked, so runs are byte-identical.
Needs h5py built with MPI (`h5py.get_config().mpi`). Rank 0 prints "h5py_mpio ok".
"""

from __future__ import annotations

import sys

import h5py
import numpy as np
from mpi4py import MPI

STEPS = 3


def main() -> int:
    comm = MPI.COMM_WORLD
    rank, nranks = comm.rank, comm.size
    if len(sys.argv) < 2:
        print("usage: h5py_mpio.py PATH [N]", file=sys.stderr)
        return 2
    if not h5py.get_config().mpi:
        print("h5py_mpio: this h5py was built without MPI", file=sys.stderr)
        return 2
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 65536
    total, mine = n * nranks, n * rank
    idx = np.arange(mine, mine + n, dtype=np.int64)

    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        contig = f.create_dataset("contig", (total,), dtype="f8", track_times=False)
        chunked = f.create_dataset("chunked", (STEPS, total), dtype="i4", chunks=(1, n), track_times=False)
        f.attrs["title"] = np.bytes_("pdcx h5py_mpio test")
        for s in range(STEPS):
            d = idx * 0.25 + s * 1000.0 + rank
            k = (idx * 7 + s * 100000 + rank * 13).astype(np.int32)
            if s != 1:
                with contig.collective:
                    contig[mine : mine + n] = d
            else:
                contig[mine : mine + n] = d
            if s == 1:
                with chunked.collective:
                    chunked[s, mine : mine + n] = k
            else:
                chunked[s, mine : mine + n] = k
            if s == 1:
                extra = f.create_dataset("extra", (nranks,), dtype="i8", track_times=False)
                with extra.collective:
                    extra[rank : rank + 1] = np.array([1000000007 * (rank + 1)], dtype=np.int64)
            # Attribute writes are collective metadata operations: every rank, same value.
            f.attrs["step"] = np.int32(s)
            contig.attrs["scale"] = 0.5 * (s + 1)
            f.flush()
    comm.Barrier()
    if rank == 0:
        print("h5py_mpio ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
