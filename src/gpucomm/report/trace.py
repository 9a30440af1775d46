"""A simulated timeline as Chrome-trace JSON (open it in https://ui.perfetto.dev).

One process per rank (named after its GPU), one thread per channel; every op is a complete
event ("ph": "X") on its source rank, from its start to its end, in microseconds. An in-switch
reduction (NVLS) is drawn as what the model says it does: after its fixed latency, every rank
streams its share of the buffer through the switch in NCCL's NVLS chunks on 16 channels, each
chunk a multimem load-reduce, (across nodes) its trip through the inter-node tree, and a
multimem store that multicasts it. With a topology, one more process holds a counter track
per link: its utilisation (0..1 of achievable bandwidth) over the collective (links.py).

    >>> from gpucomm.simulate.result import SimResult, TimelineRecord
    >>> events = trace_events(SimResult(collective="all_reduce", algorithm="ring",
    ...     protocol="simple", model="analytic", nranks=2, size=8, count=2, dtype="float32",
    ...     time_s=1e-5, algbw_GBps=0.0, busbw_GBps=0.0,
    ...     timeline=(TimelineRecord(step=0, src=0, dst=1, chunk=0, channel=0, start_s=0.0,
    ...                               end_s=1e-5, nbytes=4),)))
    >>> events[-1]["dur"]
    10.0
"""
from __future__ import annotations

import json
import math

from ..outputs import write_text
from .links import NVLS_ALGORITHMS, link_usage

LINKS_PID = 1_000_000  # the process that holds the link counter tracks
PHASES_PID = 999_999  # the process that holds what the time adds beyond the ops
MAX_NVLS_ROUNDS = 32  # chunk rounds per channel drawn one by one; more are drawn in groups
MAX_COUNTER_POINTS = 200_000  # above this, link counters are sampled on a grid


def trace_events(result, topology=None, counters=True, ranks=None, schedule=None) -> list:
    """Chrome-trace events: metadata, one "X" event per op, and (with a topology) "C" link
    counters (exact flow-model rates with the `schedule`). `ranks`: only these ranks' ops."""
    if result.algorithm in NVLS_ALGORITHMS:
        ops = nvls_ops(result, topology, ranks)
    else:
        keep = None if ranks is None else set(ranks)
        ops = [(f"step {step}: {src}→{dst} c{chunk}", "op", int(src), int(channel), start, end,
                {"step": step, "dst": dst, "chunk": chunk, "bytes": nbytes})
               for step, src, dst, chunk, channel, start, end, nbytes in result.timeline
               if keep is None or src in keep]
    named = {op[2] for op in ops} | {r for rec in result.timeline for r in (rec.src, rec.dst)}
    events = []
    for r in sorted(named if ranks is None else named & set(ranks)):
        name = topology.ranks[r] if topology is not None and r < topology.nranks else f"rank {r}"
        events.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0,
                       "args": {"name": f"rank {r} ({name})"}})
    for name, cat, pid, tid, start, end, args in ops:
        events.append({"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid,
                       "ts": start * 1e6, "dur": (end - start) * 1e6, "args": args})
    events += phase_events(result)
    if topology is not None and counters:
        events += counter_events(result, topology, schedule)
    return events


def phase_events(result) -> list:
    """What the printed time adds after the ops (the protocol's fixed latency, a bound that
    held it higher: simulate.timed.phases), on a track of its own."""
    from ..simulate.timed import phases
    spans = phases(result)
    if not spans:
        return []
    return [{"ph": "M", "name": "process_name", "pid": PHASES_PID, "tid": 0,
             "args": {"name": "the time beyond the ops"}}] + [
        {"ph": "X", "name": what, "cat": "model", "pid": PHASES_PID, "tid": 0, "ts": a * 1e6,
         "dur": (b - a) * 1e6, "args": {"what": what}} for what, a, b in spans]


def counter_events(result, topology, schedule=None) -> list:
    """One counter track per link the collective used: its utilisation over time."""
    usage = link_usage(result, topology, schedule)
    if usage is None:
        return []
    events = [{"ph": "M", "name": "process_name", "pid": LINKS_PID, "tid": 0,
               "args": {"name": "links (utilisation of achievable bandwidth)"}}]
    points = sum(len(t) for t in usage.times)
    if points > MAX_COUNTER_POINTS:
        edges, grid = usage.binned(max(MAX_COUNTER_POINTS // max(len(usage.links), 1), 2))
        series = [(edges[:-1], row) for row in grid]
    else:
        series = list(zip(usage.times, usage.util))
    for name, (times, util) in zip(usage.names, series):
        for t, u in zip(times, util):
            events.append({"ph": "C", "name": name, "pid": LINKS_PID, "ts": float(t) * 1e6,
                           "args": {"utilisation": round(float(u), 6)}})
    return events


def nvls_ops(result, topology=None, ranks=None) -> list:
    """The ops of an in-switch reduction as (name, cat, rank, channel, start, end, args).

    The model (simulate.predict._nvls) streams S(1 + 1/g) over each GPU's NVLink to the
    switch after a fixed latency; the busiest link's busy time is that streaming body. Each
    rank's share S/P is cut into NCCL's NVLS chunks (smaller for small messages, as
    enqueue.cc), dealt round-robin to the NVLS channels, and each chunk round takes an equal
    part of the body: load-reduce, then (across nodes) the tree, then store."""
    from ..simulate import constants as K
    p, size, t_end = result.nranks, float(result.size), result.time_s
    busy = result.link_busy_s or {}
    body = min(max(busy.values(), default=t_end), t_end)
    t0 = t_end - body
    nodes = max(len({topology.node_of(r) for r in range(p)}), 1) if topology is not None else 1
    g = max(p // nodes, 1)
    share = size / p
    chunk = nvls_chunk_bytes(size, g)
    nchunks = max(math.ceil(share / chunk), 1)
    channels = min(K.NVLS_CHANNELS, nchunks)
    rounds = math.ceil(nchunks / channels)
    group = max(math.ceil(rounds / MAX_NVLS_ROUNDS), 1)  # chunk rounds per drawn event
    drawn = math.ceil(rounds / group)
    phases = [("load-reduce", "multimem.ld_reduce: the switch sums the chunk over the node's GPUs")]
    if nodes > 1:
        phases.append(("inter-node tree", "NVLSTree: the node's partial sum to and from the "
                       "other nodes over the NIC rails"))
    phases.append(("multicast", "multimem.st: the switch writes the reduced chunk to every GPU"))
    ranks = range(p) if ranks is None else ranks
    ops: list[tuple] = [(f"NVLS latency ({t0 * 1e6:.1f} us)", "nvls", r, 0, 0.0, t0,
            {"what": "fixed cost: launch, switch and (across nodes) tree hops"})
           for r in ranks] if t0 > 0 else []
    step = body / drawn
    for r in ranks:
        for c in range(channels):
            last_i = (nchunks - 1 - c) // channels  # this channel's last chunk round
            for k in range(drawn):
                lo, hi = k * group, min((k + 1) * group - 1, last_i)
                if lo > hi:
                    break
                first, last = c + channels * lo, c + channels * hi
                label = f"c{first}" if first == last else f"c{first}..c{last}"
                nbytes = (hi - lo + 1) * chunk - (chunk * nchunks - share if last == nchunks - 1
                                                  else 0.0)
                start = t0 + k * step
                for j, (name, what) in enumerate(phases):
                    a = start + step * j / len(phases)
                    ops.append((f"{name} {label}", "nvls", r, c, a, a + step / len(phases),
                                {"chunks": label, "bytes": int(nbytes), "what": what}))
    return ops


def nvls_chunk_bytes(nbytes: float, gpus: int) -> int:
    """NCCL's NVLS chunk for a message: 128 KiB, shrunk for small messages (enqueue.cc)."""
    from ..simulate import constants as K
    chunk = K.NVLS_CHUNK_BYTES
    concurrent = K.NVLS_CHANNELS * gpus
    for factor, smaller in K.NVLS_CHUNK_STEPS:
        if nbytes < factor * concurrent * chunk and chunk > smaller:
            chunk = smaller
    return chunk


def trace_doc(result, topology=None, schedule=None) -> dict:
    from ..simulate.timed import printed_s
    return {"traceEvents": trace_events(result, topology, schedule=schedule),
            "displayTimeUnit": "ns",
            "otherData": {"collective": result.collective, "algorithm": result.algorithm,
                          "protocol": result.protocol, "model": result.model,
                          "size": result.size, "time_us": printed_s(result) * 1e6}}


def write_trace(result, path, topology=None, schedule=None) -> None:
    """Write `result.timeline` (simulate(..., trace=True), or simulate.timed.traced of a
    prediction) as Chrome-trace JSON; `schedule` (what was simulated; a prediction's
    `timed.schedule` by default) makes a flow-model run's link counters exact (links.py)."""
    write_text(path, json.dumps(trace_doc(result, topology, schedule)), "trace")
