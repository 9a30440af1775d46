"""Adaptive routing: where a unit that must stay on one path goes, given the load the
deciding switch sees; and what per-packet adaptive routing loses, from the cell model.

Per packet (`ar_share`): the fluid limit of per-packet AR is the even split, so the fabric
model routes it as spray and takes its loss from the cell model (fabric_cells.py): random
pairs exchanging at full rate on the fabric's two-tier shape, the deciding leaf reading its
own egress queues, ingress buffers of the setting's size (AR_SWITCHES, each with its
source) stopping their sender when full. What it loses is head-of-line blocking: a
spine-to-leaf cable at a load of one takes random bursts, its spine's ingress buffer fills
and holds the cells behind it bound elsewhere. The share it gives is what a
switch-to-switch cable carries of its capacity (fabric.FabricPolicy.capacity); at lower
loads that is pessimistic, and a cable that is not the bottleneck never shows it.

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
are taken to move at one rate (fabric.py). So it is the limit of perfect, serialized
knowledge: on G&H's Clos it gives 77.0% (1000 random pairings), where flowlets chosen by
the leaves themselves in the cell model (fabric_cells.py, CONGA's path view a round trip
old, each leaf knowing only its own choices, G&H's Sendrecv loop) reach about 68%.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..topology.routing import lane_key
from .fabric_cells import Clos, Switching, pair_rates
from .flow import maxmin

if TYPE_CHECKING:
    from ..topology.routing import Router

Ints = npt.NDArray[np.int64]


@dataclass(frozen=True, kw_only=True)
class ArSwitch:
    """A per-packet adaptive routing setting for the cell model (fabric_cells.py): what
    one ingress port may hold before its sender stops (`buffer_bytes`; None: the credit
    loop's worth, the least that keeps a port at line rate), and the source."""
    name: str
    buffer_bytes: float | None
    source: str


AR_SWITCHES = {
    "adaptive": ArSwitch(
        name="InfiniBand AR", buffer_bytes=None,
        source="InfiniBand credit-based link flow control (IBTA Vol. 1, 7.9): a port sends "
               "only against credits for free receive buffer. NVIDIA publishes no per-port "
               "buffer for Quantum-2, so each port gets the credit loop's worth (2 x the "
               "catalog's hop latency x line rate, plus one MTU): the least that keeps a "
               "link at line rate, so the share is a lower bound"),
    "spectrum-x": ArSwitch(
        name="Spectrum-X", buffer_bytes=128e6 / 128,
        source="Spectrum-4 (SN5600): a 128 MB fully shared packet buffer (NVIDIA's "
               "Spectrum-4 announcement calls it fully shared; 128 MB is the SN5600 figure as "
               "third-party summaries quote it) over 128 ports of 400GbE: 1 MB per ingress "
               "port before PFC pauses its sender"),
}
# the cell model's run: random pairs on at most this many hosts (the leaves beyond it add
# senders of the same kind), cells of warm-up and of measure (2 MiB at 4 KiB)
AR_MAX_HOSTS = 512
AR_CELLS = 512


def ar_switching(routing: str, rate_Bps: float, hop_latency_s: float, mtu: int) -> Switching:
    """The cell model's switches for adaptive routing `routing` (AR_SWITCHES) on links of
    `rate_Bps` whose hop takes `hop_latency_s`, in cells of `mtu` bytes: a credit or pause
    comes back a round trip (2 hops) later, a decision reads the deciding switch's own egress
    queues as they are (hardware counters: no reaction time)."""
    spec = AR_SWITCHES[routing]
    loop = max(math.ceil(2.0 * hop_latency_s * rate_Bps / mtu), 1)
    buf = loop + 1 if spec.buffer_bytes is None else max(int(spec.buffer_bytes // mtu), loop + 1)
    return Switching(choice="packet", buffer=buf, credit_rtt=loop)


def random_pairs(nhosts: int, patterns: int, seed: int) -> Ints:
    """`patterns` rows of destinations: hosts in random pairs, each sending to the other."""
    rng = np.random.default_rng([seed, 0x6E])
    dests = np.empty((patterns, nhosts), dtype=np.int64)
    for p in range(patterns):
        o = rng.permutation(nhosts)
        dests[p, o[0::2]], dests[p, o[1::2]] = o[1::2], o[0::2]
    return dests


@functools.lru_cache(maxsize=64)
def clos_share(clos: Clos, sw: Switching, seed: int = 0, patterns: int = 1,
               message: int = 0) -> float:
    """Mean delivered share of line rate of the flows that cross the spines, when random
    pairs of hosts exchange at full rate (Geoffray & Hoefler's pattern) on `clos`, streaming
    or in messages of `message` cells (fabric_cells.pair_rates)."""
    n = clos.nhosts
    dests = random_pairs(n, patterns, seed)
    rates = pair_rates(clos, dests, sw, cells=AR_CELLS, warmup=AR_CELLS, seed=seed,
                       message=message)
    far = np.arange(n)[None, :] // clos.hosts != dests // clos.hosts
    return float(rates[far].mean()) if far.any() else 1.0


def sendrecv_share(clos: Clos, sw: Switching, *, message: int, cells: int, patterns: int,
                   seed: int = 0) -> npt.NDArray[np.float64]:
    """Geoffray & Hoefler's statistic per pattern: random pairs run an MPI_Sendrecv loop of
    `message` cells from an empty fabric for `cells` cell times; the mean over pairs of a
    pair's slower direction, over what a lone pair (hosts on the first and last leaf) gets
    in the same loop (their point-to-point bandwidth)."""
    n = clos.nhosts
    dests = random_pairs(n, patterns, seed)
    rates = pair_rates(clos, dests, sw, cells=cells, warmup=0, seed=seed, message=message)
    lone = np.arange(n)
    lone[0], lone[n - 1] = n - 1, 0
    base = pair_rates(clos, lone, sw, cells=cells, warmup=0, seed=seed, message=message)[0, 0]
    out: npt.NDArray[np.float64] = \
        np.minimum(rates, np.take_along_axis(rates, dests, 1)).mean(axis=1) / base
    return out


def ar_share(router: Router, routing: str, rate_Bps: float, hop_latency_s: float,
             mtu: int) -> float:
    """The share of its capacity a switch-to-switch cable carries under per-packet adaptive
    routing `routing` at full load: the cell model on the router's two-tier shape (hosts per
    leaf, spines per leaf, leaves up to AR_MAX_HOSTS hosts); 1.0 for a fabric of one leaf."""
    t = router._ensure_tables()
    if t is None or routing not in AR_SWITCHES:
        return 1.0
    hosts = int(np.bincount(np.asarray(t["x"], dtype=np.int64)).max(initial=1))
    spines = int(np.asarray(t["sw"][1]).max(initial=0))
    leaves = min(len(t["sw"][1]), max(2, AR_MAX_HOSTS // hosts))
    if spines < 1 or leaves < 2:
        return 1.0
    clos = Clos(leaves=leaves, hosts=hosts, spines=spines)
    return clos_share(clos, ar_switching(routing, rate_Bps, hop_latency_s, mtu))


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
