"""One rank of a fault-matrix case (tests/test_fault_matrix.py).

    fault_worker.py TRANSPORT COLLECTIVE VICTIM ACTION DELAY_S TIMEOUT_S OUT_DIR

TRANSPORT: shm | torch | mpi (gpucomm.init(transport=...)) or backend (torch.distributed on
backend "gpucomm"). Every rank loops COLLECTIVE; rank VICTIM, DELAY_S after the loop starts,
sends itself ACTION (kill = SIGKILL, stop = SIGSTOP) from a timer thread, so it dies or
freezes at a random point, inside a call or between two. Survivors loop until the runtime
raises and write {error, since_progress_s} to OUT_DIR/rankR.json. VICTIM -1: a healthy run,
a few calls checked against the expected values.
"""
import json
import os
import signal
import sys
import threading
import time

import numpy as np

transport, coll, victim, action = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
delay_s, timeout_s, out_dir = float(sys.argv[5]), float(sys.argv[6]), sys.argv[7]
N = 1 << 12  # elements per block


def communicator():
    if transport == "backend":
        from datetime import timedelta

        import torch.distributed as dist

        import gpucomm.torch  # noqa: F401
        dist.init_process_group("gpucomm", timeout=timedelta(seconds=timeout_s))
        return None, dist.get_rank(), dist.get_world_size()
    import gpucomm
    comm = gpucomm.init(timeout=timeout_s, transport=transport)
    return comm, comm.rank, comm.world_size


def call(comm, rank, p):
    """One COLLECTIVE; returns (output, expected) for the healthy run's check."""
    x = np.full(N * p, rank + 1.0, np.float32)
    total = p * (p + 1) / 2
    if comm is None:  # torch.distributed on "gpucomm"
        import torch
        import torch.distributed as dist
        t = torch.from_numpy(x)
        if coll == "all_reduce":
            dist.all_reduce(t)
            return t.numpy(), total
        if coll == "all_gather":
            out = torch.empty(N * p * p)
            dist.all_gather_into_tensor(out, t)
            return out.numpy()[::N * p], np.arange(1, p + 1)
        if coll == "broadcast":
            dist.broadcast(t, 0)
            return t.numpy(), 1.0
        dist.barrier()
        return None, None
    out = np.zeros(N * p, np.float32)
    if coll == "all_reduce":
        comm.all_reduce(x)
        return x, total
    if coll == "reduce_scatter":
        comm.reduce_scatter(out[:N], x)
        return out[:N], total
    if coll == "all_gather":
        comm.all_gather(out, x[:N])
        return out[::N], np.arange(1, p + 1)
    if coll == "broadcast":
        comm.broadcast(x, root=0)
        return x, 1.0
    if coll == "reduce":
        comm.reduce(x, root=0)
        return (x, total) if rank == 0 else (None, None)
    if coll == "all_to_all":
        comm.all_to_all(out, x)
        return out[::N], np.arange(1, p + 1)
    if coll == "gather":
        big = np.zeros(N * p * p, np.float32) if rank == 0 else None
        comm.gather(big, x, root=0)
        return (big[::N * p], np.arange(1, p + 1)) if rank == 0 else (None, None)
    if coll == "scatter":
        comm.scatter(out[:N], x if rank == 0 else None, root=0)
        return out[:N], 1.0
    comm.barrier()
    return None, None


def main():
    comm, rank, p = communicator()
    result = {"rank": rank}
    if victim < 0:
        for _ in range(3):
            got, want = call(comm, rank, p)
            if got is not None and not np.array_equal(got, np.broadcast_to(want, got.shape)):
                result["error"] = f"wrong result: {got[:4]} != {want}"
        result.setdefault("ok", True)
    else:
        if rank == victim:
            sig = signal.SIGKILL if action == "kill" else signal.SIGSTOP
            threading.Timer(delay_s, os.kill, (os.getpid(), sig)).start()
        last, end = time.monotonic(), time.monotonic() + delay_s + 4 * timeout_s + 30
        try:
            while time.monotonic() < end:
                call(comm, rank, p)
                last = time.monotonic()
            result["error"] = "no error: the loop ran out"
        except Exception as e:  # what the runtime raised, judged by the test
            result["error"] = f"{type(e).__name__}: {e}"
            result["since_progress_s"] = time.monotonic() - last
    if comm is None:
        import torch.distributed as dist
        comm = dist.distributed_c10d._get_default_group().comm
    comm.close()  # removes this rank's shared memory; the peer's is the runtime's to remove
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    os._exit(0)  # the job is broken: skip teardown (MPI_Finalize, gloo) that waits for peers


if __name__ == "__main__":
    main()
