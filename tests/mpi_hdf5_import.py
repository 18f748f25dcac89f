"""Run under mpirun by tests/test_hdf5.py: every rank imports the same HDF5 file with
pdcx.hdf5.import_file (rank 0 creates, all copy); rank 0 writes the report to a JSON file
(ranks share one stdout pipe, where long lines may interleave)."""

import json
import sys

import pdcx
from mpi4py import MPI
from pdcx import hdf5

comm = MPI.COMM_WORLD
path, container, report_path = sys.argv[1], sys.argv[2], sys.argv[3]
client = pdcx.connect()  # PDCX_ROOT: every rank joins the same deployment
report = hdf5.import_file(client, path, container, comm=comm)
assert report.objects and report.bytes == sum(report.bytes_per_rank)
if comm.rank == 0:
    with open(report_path, "w") as f:
        json.dump({**report.__dict__, "local_servers": comm.gather(client.local_server)}, f)
else:
    comm.gather(client.local_server)
client.close()
print(f"rank {comm.rank}/{comm.size}: ok", flush=True)
