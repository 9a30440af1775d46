"""Node-shift symmetry: simulate one node of a ring and let it stand for all of them.

A cluster built from replicas of one node on a rail fabric looks the same from every node:
shifting every rank by one node's GPUs maps each link to a link of the same capacity and
latency (`node_shift`), and a ring all-reduce onto itself (op r -> r+1 of step s becomes op
r+g -> r+g+1 of step s, on the same chunk shifted by g). When the routes agree too (the
route of the shifted op is the shifted route, checked op by op), the flow model's state is
shift-invariant at every instant: the max-min fair rates are unique, so symmetric flows get
symmetric rates, and symmetric ops start, finish and land together. Then one node's ops
stand for every node's: links become their orbits under the shift (every link of an orbit
carries the same flows' copies, so an orbit with the capacity of one link and the
representatives' crossings shares exactly as each of its links does), and an op's
predecessors on other nodes are the representatives of the same step.
`tests/test_sim_fast_paths.py` checks the reduced flow model against the whole one on clusters
small enough to simulate whole.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from . import flow
from .caches import UNSET, topology_memo
from .flow import Floats, Ints
from .steps import StepCoster

if TYPE_CHECKING:
    from ..schedule import Schedule
    from ..topology import Topology

_NODE = re.compile(r"^n(\d+)\.(.*)$")

# (perm, orbit, free): the link each link shifts to, its orbit, whether an orbit is free
NodeShift = tuple[Ints, Ints, npt.NDArray[np.bool_]]


@dataclass(frozen=True, kw_only=True, slots=True)
class RingFlow:
    """flow.Run's answer for a ring all-reduce, from one node's ops."""
    end_s: float
    events: int  # event batches
    ops: int  # ops stood for
    busy_s: Floats  # per link
    simulated: int  # ops simulated per step
    extrapolated: int  # steps extrapolated from the periodic regime


def node_shift(topology: Topology) -> NodeShift | None:
    """(perm, orbit, free) for a shift by one node, or None: perm[link] is the link the shift
    maps it to, orbit[link] its orbit id, free[orbit] whether the orbit holds one link per
    node (links the shift fixes, like a spine, do not; a reduced ring must not use them)."""
    memo = topology_memo(topology)
    if memo.node_shift is UNSET:
        memo.node_shift = _node_shift(topology)
    return memo.node_shift


def _node_shift(topology: Topology) -> NodeShift | None:
    nodes = int(topology.nodes or 1)
    if nodes < 2 or not topology.cache.replica:
        return None
    index: dict[tuple[str, str], int] = {}
    keys: dict[tuple[str, str], int] = {}
    shifted: list[tuple[str, str, tuple[str, str]]] = []
    for i, ln in enumerate(topology.links):
        index[(ln.src, ln.dst)] = i
    if len(index) != len(topology.links):
        return None  # parallel links: names do not tell them apart
    for ln in topology.links:
        a, b = _split(ln.src), _split(ln.dst)
        keys.setdefault((a[1], b[1]), len(keys))
        shifted.append((_name(a, nodes), _name(b, nodes), (a[1], b[1])))
    perm = np.empty(len(topology.links), dtype=np.int64)
    orbit = np.empty(len(topology.links), dtype=np.int64)
    for i, (s, d, key) in enumerate(shifted):
        j = index.get((s, d))
        if j is None:
            return None
        perm[i], orbit[i] = j, keys[key]
    bw, lat, eff = topology.link_arrays()
    if not (np.array_equal(bw[perm], bw) and np.array_equal(lat[perm], lat)
            and np.array_equal(eff[perm], eff)):
        return None
    free = np.bincount(orbit, minlength=len(keys)) == nodes  # else: fixed (a spine), or odd
    return perm, orbit, free


def _split(name: str) -> tuple[int | None, str]:
    m = _NODE.match(name)
    return (int(m.group(1)), m.group(2)) if m else (None, name)


def _name(part: tuple[int | None, str], nodes: int) -> str:
    k, rest = part
    return rest if k is None else f"n{(k + 1) % nodes}.{rest}"


def ring_all_reduce_flow(sched: Schedule, coster: StepCoster, bounds: Ints, itemsize: int,
                         placement: Ints) -> RingFlow | None:
    """flow.run's answer for a ring all-reduce from one node's ops, or None where the cluster
    or the ring is not node-shift symmetric."""
    topo = coster.paths.topo
    p, c = sched.nranks, max(int(sched.channels), 1)
    g = int(topo.gpus_per_node or 0)
    if (sched.collective.name != "all_reduce" or sched.algorithm != "ring" or p < 2
            or sched.scratch_blocks or g < 1 or p != topo.nranks or p % g or p == g
            or placement.ndim != 1 or not np.array_equal(placement, np.arange(p))):
        return None
    # sizes must repeat node by node (the shift maps chunk x to x+g); chunks of an uneven
    # split that differ by one element in 10,000 or less are let pass (0.01% at most)
    sizes = np.diff(bounds)[:c * p].reshape(c, p).astype(np.float64)
    if not np.array_equal(sizes, np.roll(sizes, g, axis=1)) and \
            sizes.max() - sizes.min() > 1e-4 * sizes.min():
        return None
    shift = node_shift(topo)
    if shift is None:
        return None
    perm, orbit, free = shift
    r = np.arange(p)
    # the probe step as analytic._ring_curve builds it: channel-major rows (ch * P + r)
    from ..schedule import step
    probe = step(np.tile(r, c), np.tile((r + 1) % p, c),
                 (np.arange(c) * p)[:, None].repeat(p, 1).reshape(-1) + np.tile(r, c),
                 channel=np.repeat(np.arange(c), p))
    pat = coster.pattern(probe)
    table = pat.table.reshape(c, p, -1)
    moved = np.where(table >= 0, perm[np.where(table >= 0, table, 0)], -1)
    if not np.array_equal(moved, np.roll(table, -g, axis=1)):
        return None  # some route is not the shifted route of its neighbour's
    q = g  # representatives: the ranks of node 0
    rep = (np.arange(c)[:, None] * p + np.arange(q)).reshape(-1)  # their probe rows, (ch, r)
    route = np.where(pat.table[rep] >= 0, orbit[np.where(pat.table[rep] >= 0,
                                                         pat.table[rep], 0)], -1)
    if not free[route[route >= 0]].all():
        return None
    norbits = int(orbit.max()) + 1
    first = np.full(norbits, -1, dtype=np.int64)
    first[orbit[::-1]] = np.arange(len(orbit))[::-1]
    link_cap = coster.link_cap[first]
    nsteps = 2 * (p - 1)
    windowed = nsteps * p * c > flow.EXACT_OPS  # as the whole schedule would be

    def graph_of(steps: int) -> flow.FlowGraph:
        graph: flow.FlowGraph = {
            **_ring_graph(steps, p, q, c, bounds, itemsize), "route": route.astype(np.int32),
            "alpha_row": pat.alpha[rep], "cap_row": pat.flow_cap[rep],
            "alone_row": pat.alone_rate[rep], "windowed": windowed}
        graph["bytes"] = np.where(pat.local[rep][graph["row"]], 0.0, graph["bytes"])
        return graph

    equal = sizes.min() == sizes.max()
    out = _steady_state(graph_of, link_cap, nsteps, p, q * c, q) if equal else None
    if out is None:
        graph = graph_of(nsteps)
        sim = flow.simulate_graph(graph, link_cap)
        end, events, extrapolated = float(sim.time[:graph["nops"]].max()), sim.events, 0
    else:
        end, events, extrapolated = out
        graph = graph_of(1)  # every step moves the same bytes over the same routes
    crossings = np.zeros(norbits)
    links = route[graph["row"]]
    valid = links >= 0
    np.add.at(crossings, links[valid], np.broadcast_to(graph["bytes"][:, None],
                                                       links.shape)[valid])
    if out is not None:
        crossings *= nsteps
    cap = coster.paths.capacity
    busy = crossings[orbit] / np.where(cap > 0, cap, 1.0)
    return RingFlow(end_s=end, events=events, ops=nsteps * p * c, busy_s=busy, simulated=q * c,
                    extrapolated=extrapolated)


STEADY_PROBE_STEPS = 96  # ring steps simulated before looking for the periodic regime


def _steady_state(graph_of: Callable[[int], flow.FlowGraph], link_cap: Floats, nsteps: int,
                  p: int, per: int, q: int) -> tuple[float, int, int] | None:
    """(end, events, steps extrapolated) of a long ring from its first steps, or None.

    Simulate the first M steps (M <= P-1, so no op yet waits on the chunk it wrote P steps
    before). If, well before the truncation can matter (an op lives L steps: the last L+1
    are cut short of later steps' contention), a window of more than L+1+K consecutive steps
    repeats the steps K before it shifted by one period D for every op (start, transfer end,
    landing) -- K is 1 or, where the slow hop between nodes visits the node's q ranks in
    turn, up to 2q -- the state the event loop carries (flows alive, their bytes left, data
    in flight) repeats too, and so does everything after: step b + jK ends j·D after step b.
    The dependencies on the steps P and P-1 back, absent from the probe, must not bind from
    step P-1 on: checked on the extrapolated times. Otherwise None (simulate every step).
    """
    m = STEADY_PROBE_STEPS
    if nsteps < 2 * m + 2 or m > p - 1:
        return None
    graph = graph_of(m)
    sim = flow.simulate_graph(graph, link_cap)
    n = graph["nops"]
    start = sim.start.reshape(m, per)
    land = sim.time[:n].reshape(m, per)
    sent = sim.time[n:2 * n].reshape(m, per)
    first, last = start.min(axis=1), land.max(axis=1)
    life = int((np.searchsorted(first, last, side="left") - np.arange(m)).max())
    hi = m - life - 2  # steps from hi on may feel the missing ones
    tol = 1e-9 * float(land.max())
    for k in range(1, 2 * q + 1):
        lo = hi - (life + 2 + k)
        if lo < k:
            return None
        period = float(start[hi - 1, 0] - start[hi - 1 - k, 0])
        if all(np.abs(x[lo:hi] - x[lo - k:hi - k] - period).max() <= tol
               for x in (start, land, sent)):
            break
    else:
        return None
    b = hi - 1
    # from step P-1 on, op (S, r) also waits on the landing of (S-P, r) and (S+1-P, r+1):
    # none of them (steps 0..b as simulated, later ones periodic) may land after the
    # earliest the waiting op can start (the block of K steps ending at b, j periods on)
    block = b - k + 1
    earliest = float(start[block:b + 1].min())
    late = float(land[block:b + 1].max())
    j = (np.arange(b + 1) + p - 1 - block) // k
    if (land.max(axis=1)[:b + 1] > earliest + j * period + tol).any() or \
            late > earliest + ((p - 1) // k) * period + tol:
        return None
    last_step = nsteps - 1
    ref = b - ((b - last_step) % k)  # the step of the verified block in phase with the last
    return float(land[ref].max()) + ((last_step - ref) // k) * period, sim.events, nsteps - m


def _ring_graph(nsteps: int, p: int, q: int, c: int, bounds: Ints,
                itemsize: int) -> flow.OpGraph:
    """flow.build's graph of a ring all-reduce, for ranks 0..q-1 only.

    Op (S, r, ch) sends chunk ch*P + (r - S) mod P from r to r+1. Its predecessors (flow.py):
    the transfer of (S-1, r, ch) (send engine of r and receive engine of r+1 on ch), the
    landing of (S-1, r-1, ch) (which wrote its source chunk), of (S-P, r, ch) (last writer of
    its destination chunk) and of (S+1-P, r+1, ch) (the destination's last reader). Ranks on
    other nodes are the representatives r mod q of the same step.
    """
    per = q * c
    n = nsteps * per
    s = np.repeat(np.arange(nsteps), per)
    ch = np.tile(np.repeat(np.arange(c), q), nsteps)
    r = np.tile(np.arange(q), nsteps * c)
    sentinel = 2 * n

    def op(step_: Ints, rank: Ints, valid: bool | npt.NDArray[np.bool_]) -> Ints:
        ids = step_ * per + ch * q + rank % q
        return np.where(valid, ids, sentinel)

    pred = np.stack([
        np.where(s >= 1, n + op(s - 1, r, True), sentinel),  # engines: transfer end
        op(s - 1, r - 1 + q, s >= 1),
        op(s - p, r, s >= p),
        op(s + 1 - p, r + 1, s + 1 - p >= 0),
    ], axis=1)
    pred = np.ascontiguousarray(pred[:, [k for k in range(4) if (pred[:, k] != sentinel).any()]
                                     or [0]]).astype(np.int32 if sentinel < 2 ** 31 - 1 else
                                                     np.int64)
    chunk = ch * p + (r - s) % p
    size = (bounds[chunk + 1] - bounds[chunk]) * itemsize
    return {"nops": n, "ngroups": 0, "pred": pred, "bytes": size.astype(np.float64),
            "row": (ch * q + r).astype(np.int32), "gsend": None, "grecv": None,
            "gsize": np.zeros(0, np.int64), "step_ptr": np.arange(nsteps + 1) * per}
