"""gpucomm schedules over MPI (mpi4py): every collective with a registered algorithm.

    mpiexec -n 4 python3 examples/mpi_transport.py
    mpiexec -f hosts -n 16 -ppn 8 python3 examples/mpi_transport.py     # MPICH, two hosts

Each rank runs all-reduce (ring), all-gather (ring) and all-to-all (direct) on numpy arrays and
checks them against the numpy reference.
"""
import numpy as np
from mpi4py import MPI

from gpucomm.algorithms import build
from gpucomm.collectives import reference
from gpucomm.runtime.mpi_transport import MPITransport

comm = MPI.COMM_WORLD
t = MPITransport(comm, timeout=60)
p, me = t.nranks, t.rank
n = 1 << 16
inputs = [np.arange(n, dtype=np.float32) * (r + 1) for r in range(p)]  # every rank's input

out = np.empty(n, np.float32)
t.execute(build("all_reduce", "ring", p), inputs[me], out)
assert np.array_equal(out, reference("all_reduce", inputs)[me])

block = inputs[me][: n // p]
out = np.empty(n // p * p, np.float32)
t.execute(build("all_gather", "ring", p), block, out)
assert np.array_equal(out, reference("all_gather", [x[: n // p] for x in inputs])[me])

out = np.empty(n // p * p, np.float32)
x = inputs[me][: n // p * p]
t.execute(build("all_to_all", "direct", p), x, out)
assert np.array_equal(out, reference("all_to_all", [y[: n // p * p] for y in inputs])[me])

t.barrier()
if me == 0:
    print(f"all_reduce, all_gather, all_to_all on {p} MPI ranks: correct")
