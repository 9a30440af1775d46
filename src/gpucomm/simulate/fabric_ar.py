"""Adaptive routing at flow granularity: where a unit that must stay on one path goes, given
the load the deciding switch sees.

Adaptive routing moves traffic to the least loaded of the tied up-ports, but only in units
the receiver can take out of order. Per packet (InfiniBand AR with ConnectX NICs placing
out-of-order RDMA writes, which NCCL arranges by sending data and its completion separately,
NCCL_IB_ADAPTIVE_ROUTING / NCCL_IB_AR_THRESHOLD in src/transport/net_ib.cc; Spectrum-X with
the SuperNIC's direct data placement) the fluid limit is the even split over the paths, the
`adaptive`, `spectrum-x` and `spray` routings of fabric.py. A NIC that delivers in order
only (RoCE on a NIC without reordering, the common Ethernet case) lets the switch move a
flow only between flowlets: bursts separated by an idle gap longer than the delay difference
of the paths, so the packets of one burst stay in order (Kandula et al., "Dynamic Load
Balancing Without Packet Reordering" (FLARE), CCR 2007; Alizadeh et al., CONGA, SIGCOMM
2014: flowlet switching on the least congested uplink; Vanini et al., LetFlow, NSDI 2017). A
queue pair streaming a collective's steps back to back never idles that long, so it is one
flowlet: the `flowlet` routing places each unit (a queue pair of an NCCL connection, as
ECMP's units) once, on the tied path whose most loaded cable carries the fewest of the job's
units placed before it (CONGA's leaf-to-leaf feedback: the source leaf learns each path's
congestion, the maximum over its links, from the destination leaf). Decisions are taken one
unit at a time in a seeded order (a switch decides on packets one at a time).

What it shows: a flowlet keeps its path, so each choice is greedy and never revisited. On a
two-leaf rail (every path from one source leaf to its one destination leaf) that reaches the
even split; with many leaves the units placed first constrain the later ones and the most
loaded cable ends above the mean (Geoffray & Hoefler, HOTI 2008: adaptive routing 100% of the
full bisection at small node counts, 77% at 512; benchmarks/fabric_ecmp.py runs their
512-node Clos). Other jobs' load (`--background`) is in the view as what each cable leaves.
Wrong: congestion feedback is taken as current (CONGA's is a round trip old), every unit is
placed before traffic starts and other jobs' load stays put meanwhile; the units of one op
are taken to move at one rate (fabric.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..topology.routing import lane_key
from .flow import maxmin

if TYPE_CHECKING:
    from ..topology.routing import Router

Ints = npt.NDArray[np.int64]


def flowlet_paths(router: Router, gs: Ints, gd: Ints, units: int, seed: int,
                  left: npt.NDArray[np.float64] | None = None) -> Ints:
    """Per op (NIC-owning ranks gs -> gd) and unit: the index of the tied leaf-to-leaf path
    the unit is placed on (what `topology.routing.lane_key` selects), one unit at a time in
    an order drawn by `seed`: the path whose cables would give it the most, the least over
    them of (what other jobs leave of the cable, `left`) / (the job's units on it + 1)."""
    n = len(gs)
    out = np.zeros((n, units), dtype=np.int64)
    t = router._ensure_tables()
    if t is None or not n:
        return out
    paths, count = t["sw"]
    x0 = np.asarray(t["x"], dtype=np.int64)[gs]
    y0 = np.asarray(t["y"], dtype=np.int64)[gd]
    width = np.asarray(count, dtype=np.int64)[x0, y0]
    hops: Any = paths[x0, y0]  # (ops, alternatives, hops): each tied path's cables
    load: dict[int, int] = {}
    free = [1.0] * (int(paths.max(initial=0)) + 1) if left is None else \
        np.asarray(left, dtype=np.float64).tolist()
    rng = np.random.default_rng([seed, 0xF1])
    order = rng.permutation(n * units)
    ties = rng.random((n * units, max(int(width.max(initial=1)), 1)))
    for k in order.tolist():
        i, j = divmod(k, units)
        w = int(width[i])
        if w <= 1:
            continue
        cand = [[c for c in row if c >= 0] for row in hops[i, :w].tolist()]
        used = [max((load.get(c, 0) + 1) / free[c] for c in row) + 1e-6 * ties[k, a]
                for a, row in enumerate(cand)]
        a = int(np.argmin(used))
        out[i, j] = a
        for c in cand[a]:
            load[c] = load.get(c, 0) + 1
    return out


def polarized_key(router: Router, gs: Ints, gd: Ints, key: npt.NDArray[np.uint64]
                  ) -> npt.NDArray[np.uint64]:
    """ECMP keys where every switch hashes alike (Network.polarized): the tied leaf-to-leaf
    paths, sorted, come in k1 groups by their first hop (the leaf's up-port) of k2 each (the
    next switch's choice); the leaf picks group h mod k1 and the next switch, hashing the same
    fields with the same function, picks h mod k2 within it, so with k1 = k2 the second
    choice repeats the first and only k1 of the k1 x k2 paths carry traffic (hash
    polarization; Alibaba HPN, SIGCOMM 2024, on three-tier Clos fabrics). One stage (k2 = 1):
    the plain hash."""
    t = router._ensure_tables()
    if t is None or not len(gs):
        return key
    paths, count = t["sw"]
    x0 = np.asarray(t["x"], dtype=np.int64)[gs]
    y0 = np.asarray(t["y"], dtype=np.int64)[gd]
    n = np.asarray(count, dtype=np.int64)[x0, y0]
    first = paths[x0, y0, :, 0]
    inside = np.arange(first.shape[1])[None, 1:] < n[:, None]
    k1 = 1 + (inside & (first[:, 1:] != first[:, :-1])).sum(axis=1)
    k2 = np.maximum(n // np.maximum(k1, 1), 1)
    h = (np.asarray(key, dtype=np.uint64) >> np.uint64(20)).astype(np.uint64)
    alt = (h % k1.astype(np.uint64)) * k2.astype(np.uint64) + h % k2.astype(np.uint64)
    return np.where(k2 > 1, lane_key(alt), key).astype(np.uint64)


def maxmin_rates(table: npt.NDArray[np.signedinteger[Any]], capacity: npt.NDArray[np.float64],
                 scale: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Max-min fair rates of flows that all run at once, each a row of link indices (-1:
    padding) listing a link once per lane on it (fabric.py's lane rows: m of a flow's L lanes
    on a link load it with m/L of the flow's rate, the link carrying capacity x L = `scale`).
    The flow model's progressive filling (flow.maxmin) with no per-flow cap: a flow's own NIC
    links are in its row, so it never exceeds line rate."""
    room = np.asarray(capacity, dtype=np.float64) * np.asarray(scale, dtype=np.float64)
    return maxmin(np.asarray(table), room, np.full(len(table), np.inf))
