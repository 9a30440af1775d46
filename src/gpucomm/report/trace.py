"""A simulated timeline as Chrome-trace JSON (open it in https://ui.perfetto.dev).

One process per rank (named after its GPU), one thread per channel; every op is a complete
event ("ph": "X") on its source rank, from its start to its end, in microseconds.

    >>> from gpucomm.simulate.result import SimResult
    >>> events = trace_events(SimResult("all_reduce", "ring", "simple", "analytic", 2, 8, 2,
    ...     "float32", 1e-5, 0.0, 0.0, timeline=((0, 0, 1, 0, 0, 0.0, 1e-5, 4),)))
    >>> events[-1]["dur"]
    10.0
"""
from __future__ import annotations

import json
from pathlib import Path


def trace_events(result, topology=None) -> list:
    ranks = sorted({r for rec in result.timeline for r in (rec[1], rec[2])})
    events = []
    for r in ranks:
        name = topology.ranks[r] if topology is not None and r < topology.nranks else f"rank {r}"
        events.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0,
                       "args": {"name": f"rank {r} ({name})"}})
    for step, src, dst, chunk, channel, start, end, nbytes in result.timeline:
        events.append({"ph": "X", "name": f"step {step}: {src}→{dst} c{chunk}", "cat": "op",
                       "pid": int(src), "tid": int(channel), "ts": start * 1e6,
                       "dur": (end - start) * 1e6,
                       "args": {"step": step, "dst": dst, "chunk": chunk, "bytes": nbytes}})
    return events


def write_trace(result, path, topology=None) -> None:
    """Write `result.timeline` (simulate(..., trace=True)) as Chrome-trace JSON."""
    doc = {"traceEvents": trace_events(result, topology), "displayTimeUnit": "ns",
           "otherData": {"collective": result.collective, "algorithm": result.algorithm,
                         "protocol": result.protocol, "model": result.model,
                         "size": result.size, "time_us": result.time_s * 1e6}}
    Path(path).write_text(json.dumps(doc))
