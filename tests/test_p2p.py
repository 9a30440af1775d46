"""The per-rank schedule executor over a point-to-point engine, on in-process threads.

Each rank is a thread with a P2PTransport over a queue engine; results must equal the reference
executor bit for bit, for every registered algorithm, rank counts, dtypes and ops.
"""
import queue
import threading
import time

import numpy as np
import pytest

from gpucomm import dtypes as dt
from gpucomm.algorithms import algorithms, build
from gpucomm.collectives import check_outputs, get_collective
from gpucomm.errors import CommTimeout, ConfigError, ScheduleError, TransportError
from gpucomm.execute import execute
from gpucomm.runtime.p2p import P2PTransport, check_deadline, peer_error, plan_rank

from conftest import make_inputs


class QueueWorld:
    """Mailboxes keyed by (src, dst, tag): the smallest engine there is."""

    def __init__(self, nranks):
        self.nranks = nranks
        self.boxes = {}
        self.lock = threading.Lock()

    def box(self, key):
        with self.lock:
            return self.boxes.setdefault(key, queue.Queue())


class QueueEngine:
    def __init__(self, world, rank):
        self.world, self.rank, self.nranks = world, rank, world.nranks
        self.messages = 0

    def post(self, sends, recvs):
        for peer, data, tag in sends:
            self.messages += 1
            copy = data.copy() if isinstance(data, np.ndarray) else data.clone()  # torch
            self.world.box((self.rank, peer, tag)).put(copy)
        return [("recv", peer, buf, tag) for peer, buf, tag in recvs] + \
            [("send", peer, None, tag) for peer, _, tag in sends]

    def wait(self, pending, deadline):
        for verb, peer, buf, tag in pending:
            if verb == "send":
                continue
            try:
                got = self.world.box((peer, self.rank, tag)).get(timeout=check_deadline(deadline))
            except queue.Empty:
                raise peer_error(self.rank, peer, "recv", "no message", True) from None
            if got.shape != buf.shape:
                raise TransportError(f"rank {self.rank}: rank {peer} sent {got.size} elements, "
                                     f"want {buf.size}")
            if isinstance(buf, np.ndarray):
                buf[...] = got
            else:
                buf.copy_(got)


def run_threads(sched, inputs, op, dtype, timeout=10.0, skip=(), slice_bytes=512 << 10,
                arrays=None):
    """Outputs of every rank (None where none), raising the first rank's error."""
    p = sched.nranks
    world = QueueWorld(p)
    coll = sched.collective
    outs = [None] * p
    errors = [None] * p
    bc = 0
    for r in range(p):
        rng = coll.inputs(r, p, sched.root)
        if rng is not None:
            x = inputs[r]
            bc = (x.numel() if hasattr(x, "numel") else np.asarray(x).size) // rng[1]
            break

    def work(r):
        rng = coll.outputs(r, p, sched.root)
        out = None if rng is None else np.zeros(rng[1] * bc, dtype=dt.get_dtype(dtype).storage)
        try:
            tr = P2PTransport(QueueEngine(world, r), timeout=timeout, slice_bytes=slice_bytes,
                              **({} if arrays is None else {"arrays": arrays}))
            tr.execute(
                sched, inputs[r], out, op, dtype)
            outs[r] = out
        except Exception as e:  # surfaced below, by rank
            errors[r] = e

    threads = [threading.Thread(target=work, args=(r,)) for r in range(p) if r not in skip]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    return outs, errors


ALGOS = [(a.collective, a.name) for a in algorithms()]


def _check(coll_name, name, p, bc, dtype, op, root=0, slice_bytes=512 << 10):
    try:
        sched = build(coll_name, name, p, root=root)
    except ScheduleError:
        return False
    op = op if sched.collective.reduces else "sum"
    if op == "avg" and not dt.get_dtype(dtype).is_float:
        op = "sum"
    ins = make_inputs(sched.collective, p, bc, dtype, op, root, seed=p * 31 + bc)
    outs, errors = run_threads(sched, ins, op, dtype, slice_bytes=slice_bytes)
    for e in errors:
        if e is not None:
            raise e
    want = execute(sched, ins, op, dtype)
    for r, (g, w) in enumerate(zip(outs, want)):
        if w is None:
            continue
        assert np.array_equal(g.view(np.uint8), w.view(np.uint8)), \
            f"{name} {coll_name} P={p} {dtype} {op}: rank {r} differs from execute()"
    check_outputs(sched.collective, outs, ins, op, dtype, root, what=f"{name} P={p}: ")
    return True


@pytest.mark.parametrize("alg", ALGOS, ids=[f"{c}-{n}" for c, n in ALGOS])
def test_every_algorithm_matches_reference_executor(alg):
    ran = 0
    for i, p in enumerate((1, 2, 3, 4, 5, 8)):
        dtype = list(dt.DTYPES)[(i + len(alg[1])) % len(dt.DTYPES)]
        op = dt.REDUCE_OPS[i % len(dt.REDUCE_OPS)]
        for bc in (0, 1, 13):
            ran += _check(alg[0], alg[1], p, bc, dtype, op, root=(p - 1) if p > 2 else 0)
    assert ran, f"{alg} served no rank count"


def test_sliced_messages_give_the_same_bits():
    # 20-byte slices cut messages mid-range and mid-chunk; packed multi-range messages too
    for coll, name in ALGOS:
        _check(coll, name, 4, 23, "float32", "sum", root=1, slice_bytes=20)
    assert _check("all_reduce", "ring", 3, 50, "bfloat16", "max", slice_bytes=6)
    sched = build("all_reduce", "ring", 2, channels=3)
    ins = make_inputs(sched.collective, 2, 60, "float64", "sum")
    outs, errors = run_threads(sched, ins, "sum", "float64", slice_bytes=8)
    np.testing.assert_array_equal(outs[0], execute(sched, ins, "sum", "float64")[0])


def test_torch_arrays_reduce_with_the_same_bits():
    """The torch transport's buffers and reductions (torch tensors; float16/bfloat16 widened
    and rounded per step; avg divided as numpy does), on threads: bit for bit."""
    pytest.importorskip("torch", reason="torch is not installed")
    import torch
    from gpucomm.runtime.torch_transport import _NAMES, TorchArrays, to_torch
    arrays = TorchArrays("cpu")
    for dtype in _NAMES:  # torch has no CPU arithmetic for uint32/uint64
        d = dt.get_dtype(dtype)
        for op in dt.REDUCE_OPS:
            if op == "avg" and not d.is_float:
                continue
            sched = build("all_reduce", "ring", 3)
            ins = make_inputs(sched.collective, 3, 21, dtype, op, seed=len(dtype))
            tins = [to_torch(x, d, "cpu") for x in ins]
            outs, errors = run_threads(sched, tins, op, dtype, slice_bytes=16, arrays=arrays)
            assert not any(errors), errors
            want = execute(sched, ins, op, dtype)
            for g, w in zip(outs, want):  # numpy outputs, written back from device tensors
                assert np.array_equal(g.view(np.uint8), w.view(np.uint8)), (dtype, op)
    # tensors in and out, a non-contiguous output among them: written back in place
    sched = build("all_reduce", "ring", 2)
    world = QueueWorld(2)
    outs = [torch.zeros(8, 2)[:, 0], torch.zeros(8)]
    threads = [threading.Thread(target=lambda r=r: P2PTransport(
        QueueEngine(world, r), arrays=arrays).execute(sched, torch.ones(8) * (r + 1), outs[r]))
        for r in range(2)]
    [t.start() for t in threads]
    [t.join(10) for t in threads]
    assert all(torch.equal(o, torch.full((8,), 3.0)) for o in outs), outs


@pytest.mark.parametrize("dtype", list(dt.DTYPES))
def test_every_dtype_and_op_on_all_reduce_ring(dtype):
    for op in dt.REDUCE_OPS:
        if op == "avg" and not dt.get_dtype(dtype).is_float:
            continue
        assert _check("all_reduce", "ring", 4, 37, dtype, op)


def test_plan_packs_one_message_per_peer_and_step():
    sched = build("all_reduce", "ring", 4, channels=3)  # 3 ops 0->1 in each step
    plan = plan_rank(sched, 0, 12)
    assert all(len(sp.sends) == 1 and len(sp.recvs) == 1 for sp in plan)
    assert [len(sp.sends[0].ranges) for sp in plan] == [3] * 6
    # each rank sends 2(P-1)/P of the buffer
    assert sum(m.nelems for sp in plan for m in sp.sends) == 2 * (4 - 1) * 12 // 4


def test_barrier_exchanges_tokens():
    sched = build("barrier", algorithms("barrier")[0].name, 3)
    plan = plan_rank(sched, 0, 1)
    assert sum(len(sp.sends) + len(sp.recvs) for sp in plan) > 0


def test_in_place_all_reduce_with_same_array():
    sched = build("all_reduce", "ring", 3)
    world = QueueWorld(3)
    bufs = [np.arange(10, dtype=np.float32) * (r + 1) for r in range(3)]
    threads = [threading.Thread(target=lambda r=r: P2PTransport(QueueEngine(world, r)).execute(
        sched, bufs[r], bufs[r])) for r in range(3)]
    [t.start() for t in threads]
    [t.join(10) for t in threads]
    for b in bufs:
        np.testing.assert_array_equal(b, np.arange(10, dtype=np.float32) * 6)


def test_missing_rank_times_out_naming_it():
    sched = build("all_reduce", "ring", 3)
    ins = [np.ones(6, np.float32)] * 3
    t0 = time.monotonic()
    outs, errors = run_threads(sched, ins, "sum", "float32", timeout=0.5, skip=(2,))
    assert time.monotonic() - t0 < 5
    assert isinstance(errors[0], CommTimeout) and "rank 2" in str(errors[0])
    assert "step" in str(errors[0]) and "ring all_reduce" in str(errors[0])
    assert isinstance(errors[1], CommTimeout)


def test_bad_buffers_are_rejected():
    sched = build("all_reduce", "ring", 1)
    tr = P2PTransport(QueueEngine(QueueWorld(1), 0))
    with pytest.raises(ConfigError, match="output has 3 elements"):
        tr.execute(sched, np.ones(4, np.float32), np.ones(3, np.float32))
    with pytest.raises(ConfigError, match="avg"):
        tr.execute(sched, np.ones(4, np.int32), np.ones(4, np.int32), op="avg")
    with pytest.raises(ConfigError, match="for 2 ranks"):
        tr.execute(build("all_reduce", "ring", 2), np.ones(4), np.ones(4))
    with pytest.raises(ConfigError, match="float64"):
        tr.execute(sched, np.ones(4, np.float32), np.ones(4, np.float64), dtype="float32")
    with pytest.raises(ConfigError, match="timeout"):
        P2PTransport(QueueEngine(QueueWorld(1), 0), timeout=0)


def test_one_rank_needs_no_engine_traffic():
    sched = build("all_reduce", "ring", 1)
    eng = QueueEngine(QueueWorld(1), 0)
    out = np.zeros(5, np.float32)
    P2PTransport(eng).execute(sched, np.arange(5, dtype=np.float32), out, op="avg")
    np.testing.assert_array_equal(out, np.arange(5, dtype=np.float32))
    assert eng.messages == 0
    assert get_collective("all_reduce").reduces
