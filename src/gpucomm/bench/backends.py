"""The engines a benchmark runs on, behind one small interface.

A backend runs one collective on numpy buffers: `shm` is gpucomm's runtime (our schedules
over shared memory); `mpi` is mpi4py's own collectives (MPICH from PyPI) and `gloo` (or `torch`)
torch.distributed's. With an algorithm other than `auto`, `mpi` and `torch` run OUR schedule
on that engine instead (MPITransport / TorchTransport over gloo), so a schedule can be timed
on the engine a cluster already has. Buffers are numpy arrays in every case (torch tensors
share their memory), so the timed work is the collective, not a conversion.
"""
from __future__ import annotations

import os
import time

import numpy as np

from .. import dtypes as dt
from ..errors import ConfigError

BACKENDS = ("shm", "mpi", "gloo", "torch")


class ShmBackend:
    """gpucomm's schedules through a Communicator: on shared memory, or (`transport`
    "torch" / "mpi") over that engine's point-to-point operations."""
    name = "shm"
    ours = True  # results land where gpucomm's API puts them (see sweep._engine_view)

    def __init__(self, timeout=None, transport="shm"):
        import gpucomm.runtime as rt
        self.comm = rt.init(timeout=timeout, transport=transport)
        self.name = transport
        self.rank, self.size = self.comm.rank, self.comm.world_size

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
    ours = False
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
    ours = False

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


def unsupported(name: str, algorithm: str, dtype: dt.DType, op: str, reduces: bool):
    """Why engine `name`'s own collectives cannot run this sweep (None: they can). Our
    schedules (shm, or any engine with an algorithm named) run every dtype and op."""
    if name == "mpi" and algorithm == "auto":
        if dtype.name in ("float16", "bfloat16", *dt.FP8):
            return f"MPI has no standard {dtype.name} type"
        if reduces and op not in MpiBackend.OPS:
            return f"MPI has no {op} reduction"
    return None


def make_backend(name: str, timeout=None, algorithm: str = "auto"):
    """The backend a sweep runs on: `algorithm` other than auto on mpi/torch means our
    schedule over that engine, auto its own collectives (torch's own is gloo's)."""
    if name not in BACKENDS:
        raise ConfigError(f"unknown backend {name!r}: allowed are {', '.join(BACKENDS)}")
    if name == "shm":
        return ShmBackend(timeout)
    if name in ("mpi", "torch") and algorithm != "auto":
        if name == "mpi":
            _need_mpi()
        return ShmBackend(timeout, transport=name)
    return MpiBackend(timeout) if name == "mpi" else GlooBackend(timeout)


def _need_mpi():
    try:
        from mpi4py import MPI  # noqa: F401
    except ImportError as e:
        raise ConfigError(f"--backend mpi needs mpi4py and an MPI (pip install mpi4py "
                          f"mpich): {e}") from None


def mpiexec() -> str | None:
    """The mpiexec that goes with mpi4py (the `mpich` wheel puts it beside python)."""
    import shutil
    import sys
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec")


# --- MPICH's shared memory ----------------------------------------------------------------
# MPICH (ch4:shm) keeps its intra-node segments in /dev/shm as mpich_shm_*; it unlinks them
# at a clean MPI_Finalize, but a job whose ranks die or exit without finalising (a killed
# rank, mpiexec -disable-auto-cleanup) leaves them behind. Whoever starts mpiexec snapshots
# /dev/shm first and afterwards removes the new segments no live process maps any more.
SHM_DIR = "/dev/shm"
MPICH_PREFIX = "mpich_shm_"


def shm_names(prefix: str = MPICH_PREFIX) -> set:
    """Names in /dev/shm starting with `prefix` (empty where there is no /dev/shm)."""
    try:
        return {n for n in os.listdir(SHM_DIR) if n.startswith(prefix)}
    except OSError:
        return set()


def mapped_shm(prefix: str = MPICH_PREFIX) -> set:
    """Names under /dev/shm starting with `prefix` that some live process has mapped (from
    /proc/*/maps; processes we may not read are skipped)."""
    mark = f"{SHM_DIR}/{prefix}"
    found = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    at = line.find(mark)
                    if at >= 0:
                        found.add(line[at + len(SHM_DIR) + 1:].split()[0])
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def remove_stale_mpich(before: set, grace_s: float = 2.0) -> list:
    """Remove the mpich_shm_* segments created since `before` (a shm_names() snapshot taken
    before starting mpiexec) that no live process maps; returns the names removed. A new
    segment still mapped gets up to `grace_s` to be let go: the ranks of a job whose mpiexec
    has returned may still be exiting (killed ranks outlive it by a moment), and a segment
    skipped as busy then would stay behind once they are gone. One still mapped after that
    belongs to a live job and is left to it."""
    deadline = time.monotonic() + grace_s
    gone: list = []
    while True:
        new = shm_names() - set(before)
        if not new:
            return gone
        busy = mapped_shm()
        for name in sorted(new - busy):
            try:
                os.unlink(os.path.join(SHM_DIR, name))
                gone.append(name)
            except FileNotFoundError:
                pass
        if not new & busy or time.monotonic() >= deadline:
            return gone
        time.sleep(0.05)
