"""The rank program the harness starts on emulated hosts: gloo process group + torch transport.

    python3 -m gpucomm.emulate.worker check                 # all-reduce algorithms vs reference
    python3 -m gpucomm.emulate.worker bench --sizes 1M,4M --algorithms ring,hierarchical
    python3 -m gpucomm.emulate.worker fault --victim 3 --ready DIR --timeout 5

Reads RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (set by
EmulatedCluster.launch, or by torchrun on a real cluster). Output is one JSON object a line,
prefixed by the mode in capitals, so the parent can parse it out of the logs.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import statistics
import sys
import time

import numpy as np


def _init(timeout: float):
    import torch.distributed as dist
    from ..runtime.torch_transport import TorchTransport
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=max(timeout, 30)))
    return dist, TorchTransport(timeout=timeout)


def _schedule(name: str, p: int, rph: int):
    from ..algorithms import build
    params = {"group_size": rph} if name == "hierarchical" else {}
    return build("all_reduce", name, p, **params).materialize()


def check_cases(tr, rph: int) -> tuple:
    """Every registered all-reduce across the hosts, against the reference executor, bit for
    bit, and `check_outputs`. Returns (cases run, failures, algorithm names)."""
    from .. import dtypes as dt
    from ..algorithms import algorithms
    from ..collectives import check_outputs
    from ..execute import execute
    p, me = tr.nranks, tr.rank
    ran = failed = 0
    names = [x.name for x in algorithms("all_reduce")]
    for k, name in enumerate(names):
        try:
            sched = _schedule(name, p, rph)
        except Exception:  # an algorithm that does not serve p ranks
            continue
        for j, (dtype, op, n) in enumerate((("float32", "sum", 1 << 18), ("bfloat16", "max", 999),
                                            ("int32", "sum", 4097), ("float64", "avg", 1))):
            d = dt.get_dtype(dtype)
            rng = np.random.default_rng(1000 * k + j)
            ins = [dt.random_array(rng, n, d, op) for _ in range(p)]
            out = np.zeros(n, d.storage)
            try:
                tr.execute(sched, ins[me], out, op, dtype)
                want = execute(sched, ins, op, dtype)[me]
                if not np.array_equal(out.view(np.uint8), want.view(np.uint8)):
                    raise AssertionError(f"rank {me}: differs from the reference executor")
                outs = [want] * p
                outs[me] = out
                check_outputs("all_reduce", outs, ins, op, dtype, what=f"{name} {dtype} {op}: ")
                ran += 1
            except AssertionError as e:
                failed += 1
                print(f"FAIL {name} {dtype} {op} n={n}: {e}", flush=True)
    print("CHECK " + json.dumps({"rank": me, "cases": ran, "failures": failed,
                                 "algorithms": names}), flush=True)
    return ran, failed, names


def check(a) -> int:
    dist, tr = _init(a.timeout)
    _, failed, _ = check_cases(tr, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    _finish(dist)
    return 1 if failed else 0


def probe(tr, rph: int, nbytes: int = 16 << 20, pings: int = 200) -> dict | None:
    """Latency and goodput as the engine sees them (gloo + this transport, not raw TCP).

    Latency: median round trip / 2 of 4-byte messages, rank 0 <-> rank 1 (same host) and
    rank 0 <-> rank `rph` (first rank of host 1). Goodput (median of three): `nbytes` from rank 0
    to rank `rph`, one flow; within a host, every local pair exchanging `nbytes` both ways at
    once (what a collective's intra-host step does), per flow. Step latency: what one step of a
    schedule costs this transport beyond its bytes (see step_cost). Idle ranks wait in a
    receive (as in a collective), not in a gloo barrier, whose waiting costs the busy ranks
    CPU. Returns the numbers on rank 0, None elsewhere."""
    return _Probe(tr, rph, nbytes, pings).run()


class _Probe:
    """The measurements of `probe`, each a method every rank calls alike."""

    def __init__(self, tr, rph: int, nbytes: int, pings: int):
        import torch
        self.torch, self.tr, self.rph, self.nbytes, self.pings = torch, tr, rph, nbytes, pings
        self.me, self.p = tr.rank, tr.nranks
        self.tok = torch.zeros(1)

    def run(self) -> dict | None:
        me, p, rph, nbytes = self.me, self.p, self.rph, self.nbytes
        alpha = self.step_cost()
        inter_peer = rph if p > rph else None
        lat_intra = self.pingpong(0, 1) if rph > 1 else None
        lat_inter = self.pingpong(0, inter_peer) if inter_peer is not None else None
        coll_t = self.in_host() if rph > 1 else None
        coll_bw = None
        if coll_t is not None and lat_intra is not None:  # 2(g-1) steps of nbytes/g, each
            # also paying a message's latency
            steps = 2 * (rph - 1)
            coll_bw = steps * nbytes / rph / max(coll_t - steps * lat_intra, 1e-9)
        # median of three, as the benchmark reports its times (a loaded machine slows some runs)
        t_inter = [self.bulk([(0, inter_peer)]) for _ in range(3)] \
            if inter_peer is not None else None
        local_pairs = [(h * rph + i, h * rph + i + 1) for h in range(p // rph)
                       for i in range(0, rph - 1, 2)]
        t_intra = [self.bulk(local_pairs) for _ in range(3)] if local_pairs else None
        if me != 0:
            return None
        out = {"engine": "gloo", "pings": self.pings, "nbytes": nbytes, "step_latency_s": alpha}
        if lat_inter is not None and t_inter:
            t = statistics.median(t_inter)  # as the bench reports
            out.update(inter_latency_s=lat_inter,
                       inter_bandwidth_Bps=nbytes / max(t - 2 * lat_inter, 1e-9))
        if lat_intra is not None:
            t = statistics.median(t_intra) if t_intra else None
            out.update(intra_latency_s=lat_intra,
                       intra_bulk_bandwidth_Bps=nbytes / max(t - lat_intra, 1e-9),
                       intra_concurrent_flows=2 * len(local_pairs),
                       intra_bandwidth_Bps=coll_bw, intra_allreduce_s=coll_t)
        return out

    def release(self, a):  # everyone waits for a token from rank a
        if self.me == a:
            for q in range(self.p):
                if q != a:
                    self.tr.send(self.tok, q)
        else:
            self.tr.recv(self.tok, a)

    def slowest(self, secs):  # the largest of every rank's value, on rank 0
        t = self.torch.tensor([secs], dtype=self.torch.float64)
        if self.me != 0:
            self.tr.send(t, 0)
            return None
        worst = secs
        for q in range(1, self.p):
            self.tr.recv(t, q)
            worst = max(worst, float(t))
        return worst

    def pingpong(self, a, b):
        tr, tok, rtts = self.tr, self.tok, []
        for _ in range(self.pings):
            if self.me == a:
                t0 = time.perf_counter()
                tr.send(tok, b)
                tr.recv(tok, b)
                rtts.append(time.perf_counter() - t0)
            elif self.me == b:
                tr.recv(tok, a)
                tr.send(tok, a)
        self.release(a)
        return statistics.median(rtts[self.pings // 10:]) / 2 if rtts else None

    def bulk(self, pairs):
        me, tr = self.me, self.tr
        x = self.torch.ones(self.nbytes // 4)
        y = self.torch.empty(self.nbytes // 4)
        peer = next((b if me == a else a for a, b in pairs if me in (a, b)), None)
        self.release(0)
        t0 = time.perf_counter()
        if peer is not None:  # in the transport's slices, as its collectives send
            k = tr.slice_bytes // 4
            one_way = len(pairs) == 1
            sends = [] if one_way and me == pairs[0][1] else \
                [(peer, x[o:o + k], 7) for o in range(0, len(x), k)]
            recvs = [] if one_way and me == pairs[0][0] else \
                [(peer, y[o:o + k], 7) for o in range(0, len(y), k)]
            tr.engine.wait(tr.engine.post(sends, recvs), time.monotonic() + tr.timeout)
            if one_way:  # the receiver acknowledges: the sender's clock sees the whole flow
                (tr.send if recvs else tr.recv)(self.tok, peer)
        return self.slowest(time.perf_counter() - t0)

    def step_cost(self, reps=40):
        # For the record: a step of a schedule with (almost) no bytes, back-to-back ring
        # all-reduces of one element per chunk, per step, on the slowest rank. With 4 ranks
        # on a loaded 2-core machine it is ~10x a ping-pong's latency (every step wakes every
        # rank), but at >= 1 MiB those wake-ups overlap the transfers, so the topology takes
        # the per-message latency of the ping-pong instead.
        sched = _schedule("ring", self.p, self.rph)
        nsteps = sum(1 for _ in sched.steps())
        x = self.torch.ones(self.p)
        for _ in range(5):
            self.tr.execute(sched, x, x, "sum", "float32")
        self.release(0)
        t0 = time.perf_counter()
        for _ in range(reps):
            self.tr.execute(sched, x, x, "sum", "float32")
        worst = self.slowest(time.perf_counter() - t0)
        self.release(0)
        return None if worst is None else worst / (reps * nsteps)

    def in_host(self, reps=5):
        # In-host goodput as a collective's in-host part uses it: every host at once runs a
        # ring all-reduce of `nbytes` among its own ranks over the transport (slices, the
        # reduction of each arriving slice, the other hosts' ranks competing for the cores).
        # 2(g-1) steps of nbytes/g each: goodput = their bytes / (time - steps * latency).
        import torch.distributed as dist

        from ..runtime.torch_transport import TorchTransport
        rph = self.rph
        groups = [dist.new_group(list(range(h * rph, (h + 1) * rph)))
                  for h in range(self.p // rph)]
        sub = TorchTransport(groups[self.me // rph], timeout=self.tr.timeout)
        sched = _schedule("ring", rph, rph)
        x = self.torch.ones(self.nbytes // 4)
        sub.execute(sched, x, x, "sum", "float32")
        times = []
        for _ in range(reps):
            self.release(0)
            t0 = time.perf_counter()
            sub.execute(sched, x, x, "sum", "float32")
            times.append(self.slowest(time.perf_counter() - t0))
        self.release(0)
        return None if self.me != 0 else statistics.median(times)


def bench(a) -> int:
    import torch
    from ..dtypes import parse_size
    dist, tr = _init(a.timeout)
    p, me, rph = tr.nranks, tr.rank, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if a.probe:
        got = probe(tr, rph)
        if got is not None:
            print("PROBE " + json.dumps(got), flush=True)
    for size in [parse_size(s) for s in a.sizes.split(",")]:
        n = size // 4
        x = torch.ones(n, dtype=torch.float32)
        for name in a.algorithms.split(","):
            if name == "gloo":  # the engine's own all-reduce, the peer we compare with
                run = functools.partial(dist.all_reduce, x)
            else:
                run = functools.partial(tr.execute, _schedule(name, p, rph), x, x, "sum",
                                        "float32")
            run()  # warm-up: connections, plans, buffers
            times = []
            for _ in range(a.iters):
                dist.barrier()
                t0 = time.perf_counter()
                run()
                dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
                dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # a collective ends with its last rank
                times.append(float(dt))
            if me == 0:
                print("BENCH " + json.dumps({"algorithm": name, "size": size, "count": n,
                                             "time_s": statistics.median(times),
                                             "times_s": times, "nranks": p}), flush=True)
    _finish(dist)
    return 0


def _finish(dist) -> None:
    dist.barrier()  # nobody tears down gloo while a peer still talks to it
    dist.destroy_process_group()


def fault(a) -> int:
    from ..errors import TransportError
    _, tr = _init(a.timeout)
    me = tr.rank
    if a.check:  # the correctness cases first, in the same processes (saves a launch)
        check_cases(tr, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    sched = _schedule("ring", tr.nranks, 1)
    x = np.ones(a.count, np.float32)
    tr.execute(sched, x, x.copy())  # everyone is connected
    open(os.path.join(a.ready, f"ready.{me}"), "w").close()
    if me == a.victim:
        os._exit(0)  # die silently
    t0 = time.monotonic()
    try:
        end = t0 + a.duration
        while time.monotonic() < end:
            tr.execute(sched, x, x.copy(), timeout=a.timeout)
        print("FAULT " + json.dumps({"rank": me, "failed": False}), flush=True)
    except TransportError as e:
        print("FAULT " + json.dumps({"rank": me, "failed": True, "error": type(e).__name__,
                                     "message": str(e), "after_s": time.monotonic() - t0}),
              flush=True)
    sys.stdout.flush()
    os._exit(0)  # skip teardown, which could wait on a dead or cut-off peer


def store(a) -> int:
    """Host the job's key-value store, as torchrun's agent does, so that it outlives any rank
    (failure notes left in it reach the survivors); exits after --duration seconds."""
    from torch.distributed import TCPStore
    port = int(os.environ["MASTER_PORT"])
    server = TCPStore("0.0.0.0", port, None, True, datetime.timedelta(seconds=a.timeout),
                      wait_for_workers=False)
    print("STORE " + json.dumps({"port": port}), flush=True)
    time.sleep(a.duration)
    del server
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m gpucomm.emulate.worker")
    sub = ap.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("check")
    b = sub.add_parser("bench")
    b.add_argument("--sizes", default="1M,4M,16M")
    b.add_argument("--algorithms", default="ring,hierarchical,gloo")
    b.add_argument("--iters", type=int, default=5)
    b.add_argument("--probe", action="store_true", help="first measure the links with gloo")
    f = sub.add_parser("fault")
    f.add_argument("--victim", type=int, default=-1, help="rank that dies (-1: none)")
    f.add_argument("--ready", required=True, help="directory for ready.<rank> files")
    f.add_argument("--count", type=int, default=1 << 16)
    f.add_argument("--duration", type=float, default=30.0)
    f.add_argument("--check", action="store_true", help="run the `check` cases first")
    st = sub.add_parser("store")
    st.add_argument("--duration", type=float, default=600.0)
    for s in (c, b, f, st):
        s.add_argument("--timeout", type=float, default=60.0)
    a = ap.parse_args(argv)
    return {"check": check, "bench": bench, "fault": fault, "store": store}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
