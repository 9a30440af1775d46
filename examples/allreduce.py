"""All-reduce across local processes over shared memory.

    gpucomm launch --nproc 4 examples/allreduce.py
"""
import numpy as np

import gpucomm

comm = gpucomm.init()
x = np.full(8, comm.rank + 1, dtype=np.float32)
comm.all_reduce(x)                       # in place, op="sum"
want = comm.world_size * (comm.world_size + 1) / 2
print(f"rank {comm.rank}/{comm.world_size}: {x[:4]} (want {want})")
assert np.all(x == want)

blocks = np.empty(comm.world_size * 2, dtype=np.int64)
comm.all_gather(blocks, np.array([comm.rank, comm.rank * 10]))
print(f"rank {comm.rank}: all_gather -> {blocks.tolist()}")
comm.barrier()
