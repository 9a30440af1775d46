"""What both engines need of a step: op sizes, routes and per-op costs, memoised by pattern.

Steps of one schedule repeat their (src, dst, channel) columns (every ring step has the same
ones), so routes, latencies and link shares are computed once per distinct pattern.

Timing semantics shared by the engines (schedule.py gives the data flow):
- an op starts when its source chunks hold their value (their last writer finished) and its
  destination chunks are free (their last writer and the readers since then finished);
- each rank runs a channel's steps in order, as one NCCL thread block per channel does: an
  op waits until the previous step's sends of its source on that channel, and the previous
  step's receives of its destination on that channel, have put their bytes on the wire; ops
  of one step run together. Latency is not serialised: a channel keeps NCCL_STEPS slices in
  flight, so the next step's bytes follow the previous ones without waiting for them to land.
  An op thus occupies its engines for bytes/rate and its data lands alpha after that.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from .paths import PathTable
from .protocol import Protocol

if TYPE_CHECKING:
    from ..schedule import Step
    from .analytic import RingShape

# (routes, latency, class, even link share, bottleneck) of a step's ops
Geometry = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass
class Pattern:
    table: np.ndarray  # (ops, hops) link indices, -1 padded
    alpha: np.ndarray  # per-op latency, s
    cls: np.ndarray  # path class per op
    flow_cap: np.ndarray  # per-op payload rate cap from the protocol (B/s)
    share_rate: np.ndarray  # payload rate with the step's links split among its ops (analytic)
    local: np.ndarray  # bool: a copy inside one rank (no link)
    alone_rate: np.ndarray  # payload rate of an op with every link to itself (flow)


class StepCoster:
    def __init__(self, paths: PathTable, protocol: Protocol, lanes: float, channels: int):
        self.paths, self.proto, self.lanes, self.channels = paths, protocol, lanes, channels
        # Patterns by (src, dst, channel) bytes; analytic.py's ring shapes by (collective,
        # ranks, channels, whether max-min fair)
        self.patterns: dict[tuple[bytes, bytes, bytes], Pattern] = {}
        self.rings: dict[tuple[str, int, int, bool], RingShape] = {}

    @cached_property
    def link_cap(self) -> np.ndarray:
        """Payload B/s per link; x lanes where a connection is split over paths (fabric.py).
        Made when asked (the flow model): a million links on a large cluster, and a sweep
        makes a coster per protocol and size."""
        cap: np.ndarray = self.paths.capacity * self.proto.wire_efficiency * self.paths.lane_scale
        return cap

    def pattern(self, step: Step) -> Pattern:
        key = (step.src.tobytes(), step.dst.tobytes(), step.channel.tobytes())
        pat = self.patterns.get(key)
        if pat is None:
            if len(self.patterns) > 4096:  # schedules whose steps never repeat: bound memory
                self.patterns.clear()
            pat = self.patterns[key] = self._build(step)
        return pat

    def _build(self, step: Step) -> Pattern:
        table, lat, cls, share, bottleneck = _geometry(self.paths, step)
        local = step.src == step.dst
        proto = self.proto
        alpha = np.where(local, 0.0, proto.alpha(lat, cls))
        inf = np.full(len(step), np.inf)
        flow_cap = np.where(local, np.inf, proto.op_rate(inf, cls, self.lanes, self.channels))
        share_rate = np.where(local, np.inf, proto.op_rate(share, cls, self.lanes, self.channels))
        alone = np.where(local, np.inf, proto.op_rate(bottleneck, cls, self.lanes, self.channels))
        if self.paths.fabric is not None:  # PFC: ops held back by pauses of others' incast
            held = self.paths.fabric.pause_caps(table, alone, self.paths.capacity
                                                * self.proto.wire_efficiency)
            flow_cap = np.minimum(flow_cap, held)
            share_rate = np.minimum(share_rate, held)
            alone = np.minimum(alone, held)
        return Pattern(table, alpha, cls, flow_cap, share_rate, local, alone)


def _geometry(paths: PathTable, step: Step) -> Geometry:
    """(routes, latency, class, even link share, bottleneck) of a step's ops: what does not
    depend on the protocol, so the protocols' costers of one placement share it."""
    memo = paths.cache.geometry
    key = (step.src.tobytes(), step.dst.tobytes(), step.channel.tobytes())
    hit: Geometry | None = memo.get(key)
    if hit is not None:
        return hit
    table = paths.routes(step.src, step.dst, step.channel)
    lat, cls, bottleneck, share = paths.geometry(table)
    if len(memo) > 4096:  # schedules whose steps never repeat: bound the memory
        memo.clear()
    hit = memo[key] = (table, lat, cls, share, bottleneck)
    return hit


def op_bytes(step: Step, bounds: np.ndarray, itemsize: int) -> np.ndarray:
    """Payload bytes of each op of a step."""
    nbytes: np.ndarray = (bounds[step.src_chunk + step.nchunks] - bounds[step.src_chunk]) \
        * itemsize
    return nbytes


def expand(rank: np.ndarray, first: np.ndarray, n: np.ndarray, total_chunks: int
           ) -> tuple[np.ndarray, np.ndarray | None]:
    """Flat (rank*T + chunk) indices of every chunk of every op, and the op each belongs to."""
    if n.size == 0 or int(n.max()) == 1:
        return rank * total_chunks + first, None
    owner = np.repeat(np.arange(len(n)), n)
    offs = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    return np.repeat(rank * total_chunks + first, n) + offs, owner
