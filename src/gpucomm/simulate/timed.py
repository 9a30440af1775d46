"""Timed: what a prediction timed, carried by its SimResult so that every view shows that run.

`predict` times a schedule (or a closed form) with a placement, a protocol, a number of
channels, lanes and a fabric policy, then may hold the time higher (NCCL's p2p channels, the
SHM transport, the host's launches). A view that rebuilt the schedule from the algorithm's
name could time something else; a view reads `result.timed` instead: `traced(result)` re-runs
exactly that with a timeline, and `phases(result)` says what the time adds beyond its ops.

    >>> from gpucomm.simulate import predict
    >>> from gpucomm.topology import build_topology
    >>> r = predict("all_reduce", "64M", build_topology("dgx-v100"), algorithm="ring")
    >>> t = traced(r)
    >>> abs(t.time_s / r.timed.simulated_s - 1) < 1e-4, r.timed.channels
    (True, 16)
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ..schedule import Schedule
    from ..topology import Topology
    from .fabric import FabricPolicy
    from .protocol import Protocol
    from .result import SimResult


@dataclass(frozen=True, kw_only=True, eq=False)
class Timed:
    """One timed run: everything `simulate` was given, and what held its time higher."""
    algorithm: str  # as NCCL names it (ring, tree, nvls, ...) or a registered schedule
    schedule: Schedule | None  # None: a closed form (closed_form names it)
    closed_form: str = ""
    topology: Topology
    placement: npt.NDArray[np.int64]  # schedule rank -> GPU; 2-D: one row per channel
    protocol: Protocol  # as timed: a ring across nodes carries NCCL's refined latencies
    channels: int  # as NCCL counts them (NCCL_DEBUG=INFO's nChannels)
    lanes: float  # NCCL channels each schedule channel stands for
    nics: int  # NIC rails per node the channels spread over (1 inside a node)
    fabric: FabricPolicy | None  # routing lanes, ECMP, loss: None for the plain model
    model: str
    nbytes: int
    dtype: str
    redop: str
    simulated_s: float  # the schedule's (or closed form's) time, before any bound
    bounds: tuple[tuple[str, float], ...] = ()  # (what, seconds): each raised the time to

    @property
    def time_s(self) -> float:
        """The printed time: the last bound, else what was simulated."""
        return self.bounds[-1][1] if self.bounds else self.simulated_s

    def bounded(self, why: str, time_s: float) -> Timed:
        """This run with one more bound (when `time_s` differs from the time so far; a
        limit that recomputed the same time to the last bit or two keeps its value)."""
        time_s = float(time_s)
        if abs(time_s - self.time_s) > 1e-12 * max(abs(time_s), 1e-30):
            return dataclasses.replace(self, bounds=self.bounds + ((why, time_s),))
        if self.bounds:
            last = self.bounds[-1]
            return dataclasses.replace(self, bounds=self.bounds[:-1] + ((last[0], time_s),))
        return dataclasses.replace(self, simulated_s=time_s)


def traced(result: SimResult) -> SimResult:
    """`result`'s run again with a timeline of its ops: the same schedule, placement,
    protocol, lanes and fabric (a closed form has its own timeline). The returned result
    keeps `result.timed`; its time_s is the simulated time (`timed.simulated_s`)."""
    t = result.timed
    if t is None:
        raise ValueError(f"{result.algorithm} {result.collective}: no timed run attached "
                         "(a SimResult from predict() carries one)")
    if t.schedule is None:
        return result if not t.bounds else dataclasses.replace(result, time_s=t.simulated_s)
    from .core import simulate
    res = simulate(t.schedule, t.topology, t.nbytes, dtype=t.dtype, model=t.model,
                   protocol=t.protocol, ranks=t.placement, lanes=t.lanes, redop=t.redop,
                   trace=True)
    return dataclasses.replace(res, algorithm=t.algorithm, nccl_channels=t.channels, timed=t,
                               candidates=result.candidates, note=result.note)


def printed_s(result: SimResult) -> float:
    """The time a prediction printed (`result` may be its traced run); else result.time_s."""
    return result.timed.time_s if result.timed is not None else result.time_s


def phases(result: SimResult) -> list[tuple[str, float, float]]:
    """What the printed time adds after the ops of `result`'s timeline, as (what, start s,
    end s): the protocol's fixed latency (launch and synchronisation, NCCL's baseLat) and
    each bound that held the time higher."""
    t = result.timed
    ops_end = max((rec.end_s for rec in result.timeline), default=0.0)
    out = []
    start = ops_end
    if t is None:
        return []
    if t.schedule is not None and t.simulated_s > ops_end:
        out.append((f"fixed latency ({t.protocol.name}: launch, synchronisation)", ops_end,
                    t.simulated_s))
        start = t.simulated_s
    start = max(start, t.simulated_s) if t.schedule is None else start
    for why, end in t.bounds:
        if end > start:
            out.append((why, start, end))
        start = max(start, end)
    return out
