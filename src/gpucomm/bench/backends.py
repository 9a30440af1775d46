"""The engines a benchmark runs on, behind one small interface.

A backend runs one collective on numpy buffers with that engine's own implementation:
`shm` is gpucomm's runtime (our schedules), `mpi` is mpi4py's (MPICH from PyPI, its own shared
memory algorithms), `gloo` is torch.distributed's gloo. Buffers are numpy arrays in every case
(torch tensors share their memory), so the timed work is the collective, not a conversion.
"""
from __future__ import annotations

import os

import numpy as np

from .. import dtypes as dt
from ..errors import ConfigError

BACKENDS = ("shm", "mpi", "gloo")


class ShmBackend:
    name = "shm"

    def __init__(self, timeout=None):
        import gpucomm.runtime as rt
        self.comm = rt.init(timeout=timeout)
        self.rank, self.size = self.comm.rank, self.comm.world_size

    def supports(self, coll: str, dtype: dt.DType, op: str):
        return None

    def algorithm(self, coll, nbytes, algorithm, root=0) -> str:
        return self.comm.schedule(coll, nbytes, algorithm, root).algorithm

    def prepare(self, coll, inp, out, op, dtype, root, algorithm, nbytes, inplace=False):
        """A zero-argument function that runs the collective once."""
        sched = self.comm.schedule(coll, nbytes, algorithm, root)
        tr, timeout = self.comm.transport, self.comm.timeout
        return lambda: tr.execute(sched, inp, out, op, dtype, timeout)

    def barrier(self):
        self.comm.barrier()

    def allreduce_max(self, value: float) -> float:
        x = np.array([value], np.float64)
        self.comm.all_reduce(x, "max")
        return float(x[0])

    def close(self):
        self.comm.close()


class MpiBackend:
    name = "mpi"
    OPS = {"sum": "SUM", "prod": "PROD", "min": "MIN", "max": "MAX"}

    def __init__(self, timeout=None):
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise ConfigError(f"--backend mpi needs mpi4py and an MPI (pip install mpi4py "
                              f"mpich): {e}") from None
        self.MPI = MPI
        self.world = MPI.COMM_WORLD
        self.rank, self.size = self.world.rank, self.world.size

    def supports(self, coll, dtype, op):
        if dtype.name in ("float16", "bfloat16"):
            return f"MPI has no standard {dtype.name} type"
        if op not in self.OPS:
            return f"MPI has no {op} reduction"
        return None

    def algorithm(self, coll, nbytes, algorithm, root=0) -> str:
        return "mpich"

    def prepare(self, coll, inp, out, op, dtype, root, algorithm, nbytes, inplace=False):
        c, MPI = self.world, self.MPI
        mop = getattr(MPI, self.OPS.get(op, "SUM"))
        send = MPI.IN_PLACE if inplace else inp
        if coll == "all_reduce":
            return lambda: c.Allreduce(send, out, op=mop)
        if coll == "reduce_scatter":
            if inplace:  # MPI's in-place reduce-scatter takes the whole buffer
                return lambda: c.Reduce_scatter_block(MPI.IN_PLACE, inp, op=mop)
            return lambda: c.Reduce_scatter_block(inp, out, op=mop)
        if coll == "all_gather":
            return lambda: c.Allgather(send, out)
        if coll == "broadcast":
            buf = inp if self.rank == root and inp is not None else out
            return lambda: c.Bcast(buf, root=root)
        if coll == "reduce":
            if self.rank == root:
                return lambda: c.Reduce(send, out, op=mop, root=root)
            return lambda: c.Reduce(inp, None, op=mop, root=root)
        if coll == "all_to_all":
            return lambda: c.Alltoall(MPI.IN_PLACE if inplace else inp, out)
        if coll == "gather":
            if self.rank == root:
                return lambda: c.Gather(send, out, root=root)
            return lambda: c.Gather(inp, None, root=root)
        if coll == "scatter":
            if self.rank == root:
                return lambda: c.Scatter(inp, MPI.IN_PLACE if inplace else out, root=root)
            return lambda: c.Scatter(None, out, root=root)
        raise ConfigError(f"--backend mpi cannot run {coll}")

    def barrier(self):
        self.world.Barrier()

    def allreduce_max(self, value: float) -> float:
        return float(self.world.allreduce(value, op=self.MPI.MAX))

    def close(self):
        pass


class GlooBackend:
    name = "gloo"

    def __init__(self, timeout=None):
        try:
            import torch
            import torch.distributed as dist
        except ImportError as e:
            raise ConfigError(f"--backend gloo needs torch (pip install torch==2.13.0): "
                              f"{e}") from None
        from datetime import timedelta
        self.torch, self.dist = torch, dist
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout or 300))
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT,
                    "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
                    "avg": dist.ReduceOp.AVG}

    def supports(self, coll, dtype, op):
        if dtype.name == "uint8" and op in ("prod",):
            return None
        return None

    def algorithm(self, coll, nbytes, algorithm, root=0) -> str:
        return "gloo"

    def _t(self, a, dtype):
        if a is None:
            return None
        if dtype.name == "bfloat16":
            return self.torch.from_numpy(a.view(np.int16)).view(self.torch.bfloat16)
        return self.torch.from_numpy(a)

    def prepare(self, coll, inp, out, op, dtype, root, algorithm, nbytes, inplace=False):
        d, p = self.dist, self.size
        rop = self.OPS[op]
        ti, to = self._t(inp, dtype), self._t(out, dtype)
        if coll == "all_reduce":
            if inplace:
                return lambda: d.all_reduce(to, op=rop)

            def run():
                to.copy_(ti)  # torch.distributed's all-reduce is in place only
                d.all_reduce(to, op=rop)
            return run
        if coll == "reduce_scatter":
            return lambda: d.reduce_scatter_tensor(to, ti, op=rop)
        if coll == "all_gather":
            return lambda: d.all_gather_into_tensor(to, ti)
        if coll == "broadcast":
            buf = ti if self.rank == root and ti is not None else to
            return lambda: d.broadcast(buf, src=root)
        if coll == "reduce":
            if inplace or self.rank != root:
                return lambda: d.reduce(ti, dst=root, op=rop)

            def run_reduce():
                to.copy_(ti)
                d.reduce(to, dst=root, op=rop)
            return run_reduce
        if coll == "all_to_all":
            if inplace:  # gloo has no in-place all-to-all: send from a copy
                return lambda: d.all_to_all_single(to, ti.clone())
            return lambda: d.all_to_all_single(to, ti)
        if coll == "gather":
            outs = list(to.chunk(p)) if self.rank == root else None
            return lambda: d.gather(ti, outs, dst=root)
        if coll == "scatter":
            ins = list(ti.chunk(p)) if self.rank == root else None
            return lambda: d.scatter(to, ins, src=root)
        raise ConfigError(f"--backend gloo cannot run {coll}")

    def barrier(self):
        self.dist.barrier()

    def allreduce_max(self, value: float) -> float:
        t = self.torch.tensor([value], dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return float(t[0])

    def close(self):
        self.dist.destroy_process_group()


def make_backend(name: str, timeout=None):
    cls = {"shm": ShmBackend, "mpi": MpiBackend, "gloo": GlooBackend}.get(name)
    if cls is None:
        raise ConfigError(f"unknown backend {name!r}: allowed are {', '.join(BACKENDS)}")
    return cls(timeout)


def mpiexec() -> str | None:
    """The mpiexec that goes with mpi4py (the `mpich` wheel puts it beside python)."""
    import shutil
    import sys
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec")
