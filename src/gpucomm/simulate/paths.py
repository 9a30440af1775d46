"""Which links an op crosses: routes per (source, destination, channel), rail by rail.

Inside a node an op follows the topology's route. Between nodes an op uses the NICs local to
the GPUs that run the schedule on that node (their `nic_affinity`), never a NIC none of them
sits next to: NCCL gives each communicator its own GPUs' nearest NICs. The node's rails for a
placement are those NICs in NIC order, each owned by the first placed GPU next to it. An op
leaving GPU `s` on channel `c` takes rail `(position of s's own NIC + c) mod rails` and is
charged on the route from that rail's owner GPU to the owner of the same rail in the
destination node. So:

- a full-node ring on a DGX (a NIC per GPU) spreads its channels over all the node's rails:
  that is how NCCL lays channels out, one ring per NIC, each rotated so that the node is
  entered and left by the GPUs next to that channel's NIC (PXN moves other traffic to the rail
  GPU over NVLink, which is not charged here);
- a group with one GPU per node sends through that GPU's own NIC;
- several groups timed as one schedule (the planner's side-by-side union) each start at their
  own GPUs' NICs, so groups with NICs of their own do not queue on NIC 0, and groups whose
  GPUs share a NIC (a PCIe box: 2 NICs for 8 GPUs) do share it.

Routes are cached as rows of a padded int32 table (`-1` = no link), so the engines gather the
links of thousands of ops with one numpy fancy-index.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError
from ..topology.elements import DEVICE_KINDS
from .caches import PathMemo, topology_memo
from .frontier import distinct

if TYPE_CHECKING:
    from ..topology import Topology
    from .fabric import FabricPolicy

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Classes = npt.NDArray[np.int8]  # path class per link or op
Routes = npt.NDArray[np.signedinteger[Any]]  # padded link rows (ops, hops), -1: no link
Rails = dict[int, Ints]  # node -> owner ranks of its rails, NIC order
Home = dict[int, int]  # rank -> position of its own NIC in its node's rails
# (GPUs per node, links per node, node 0's route table [i, j, hop]): _replica_routes
Replica = tuple[int, int, Ints]

# ops of one all-to-all step (P^2) routed at once: a route row per op (and per lane), so
# 1,024 ranks take ~1 GB and ~30 s; beyond, predict refuses before building anything
MAX_STEP_OPS = 1 << 20

# Path classes, for the protocol's per-hop software latency.
NVLINK, PCIE, NET = 0, 1, 2
CLASS_NAMES = ("nvlink", "pcie", "net")
_NET_KINDS = {"nic", "switch"}
_PCIE_KINDS = {"cpu", "pcie_switch", "memory"}


class PathTable:
    """Routes and their properties for one topology and one rank placement."""

    def __init__(self, topology: Topology, ranks: npt.ArrayLike | None = None) -> None:
        self.topo = topology
        capacity, self.latency, cls = _link_props(topology)
        self.capacity = capacity.copy()
        self.nlinks = len(self.capacity)
        self.link_class = cls
        n = topology.nranks
        # one row per channel group: channel c runs schedule rank i on GPU placement[c % k, i]
        self.placement = np.atleast_2d(np.arange(n, dtype=np.int64) if ranks is None else
                                       np.asarray(ranks, dtype=np.int64))
        self.node = np.asarray(topology.router.rank_node, dtype=np.int64)
        self._rails, self._home = _placed_rails(topology, self.node, self.placement[0])
        self.cache = PathMemo()  # what this placement's routes give (caches.py); clear()
        # a network (routing policy, loss) changes routes and payload capacity: fabric.py
        self.fabric: FabricPolicy | None = None
        self.lane_scale: Floats = np.ones(self.nlinks)  # capacity x lanes on links lanes split
        network = getattr(topology, "network", None)
        if network is not None:
            from ..topology.fabric import Network
            from .fabric import FabricPolicy
            if not isinstance(network, Network):
                raise ConfigError(f"topology {topology.name!r}: network is a "
                                  f"{type(network).__name__}; allowed: a topology.fabric.Network "
                                  "or None")
            self.fabric = FabricPolicy(self, network)
            self.lane_scale = self.fabric.lane_scale
            self.capacity = self.fabric.capacity(self.capacity, cls, self.latency)
        self._local = _replica_routes(topology, self.node)
        self._rail_tab: tuple[Ints, Ints, Ints] | None = None

    @property
    def rails_per_node(self) -> int:
        if self.cache.rails_per_node is None:
            self.cache.rails_per_node = min((len(v) for v in self._rails.values()),
                                            default=1) or 1
        return int(self.cache.rails_per_node)

    def routes(self, src: npt.ArrayLike, dst: npt.ArrayLike, channel: npt.ArrayLike,
               fabric: FabricPolicy | None = None) -> Routes:
        """Padded link table (ops, hops) for schedule ranks src -> dst on channels; `fabric`
        (a variant of this table's policy, e.g. FabricPolicy.per_connection) lays the lanes
        instead of self.fabric."""
        src = np.asarray(src, dtype=np.int64)
        c = np.broadcast_to(np.asarray(channel, dtype=np.int64), src.shape)
        row = c % len(self.placement)
        s = self.placement[row, src]
        d = self.placement[row, np.asarray(dst, dtype=np.int64)]
        out = _matrix(self.topo, s, d, c, self._local)
        inter = (self.node[s] != self.node[d]) & (s != d)
        idx = gs = gd = np.zeros(0, dtype=np.int64)
        if inter.any() and self._rails:
            idx = np.flatnonzero(inter)
            gs, gd = self._rail_gpus(s[idx], d[idx], c[idx])
            rows = _matrix(self.topo, gs, gd, c[idx])
            width = max(out.shape[1], rows.shape[1])
            out = _widen(out, width)
            out[idx] = _widen(rows, width)
        out[s == d] = -1  # a local copy crosses no link
        fabric = fabric or self.fabric
        if fabric is not None:  # one path per lane (queue pair, sprayed share)
            out = fabric.lane_routes(out, idx, gs, gd, c[idx])
        return out

    def _rail_gpus(self, src: Ints, dst: Ints, channels: Ints) -> tuple[Ints, Ints]:
        """The GPUs owning the rail an inter-node op leaves by and the one it arrives at."""
        if self._rail_tab is None:
            nn = int(self.node.max()) + 1 if len(self.node) else 1
            width = max((len(v) for v in self._rails.values()), default=1)
            tab = np.full((nn, width), -1, dtype=np.int64)
            count = np.zeros(nn, dtype=np.int64)
            for nd, owners in self._rails.items():
                tab[nd, :len(owners)], count[nd] = owners, len(owners)
            home = np.zeros(len(self.node), dtype=np.int64)
            for r, pos in self._home.items():
                home[r] = pos
            self._rail_tab = (tab, count, home)
        tab, count, home = self._rail_tab
        na, nb = self.node[src], self.node[dst]
        n_out, n_in = count[na], count[nb]
        ok = (n_out > 0) & (n_in > 0)  # a node without NICs: the plain route
        i = (home[src] + channels) % np.maximum(n_out, 1)
        gs = np.where(ok, tab[na, np.where(ok, i, 0)], src)
        gd = np.where(ok, tab[nb, np.where(ok, i % np.maximum(n_in, 1), 0)], dst)
        return gs, gd

    def properties(self, table: Routes) -> tuple[Floats, Classes, Floats]:
        """Per op: (latency sum, path class, bottleneck capacity) of padded route rows."""
        if self.fabric is not None and self.fabric.lanes > 1:  # lanes: weighted by 1/scale
            return self.fabric.properties(table, self.latency, self.link_class, self.capacity)
        if not table.shape[1]:
            n = len(table)
            return np.zeros(n), np.zeros(n, dtype=np.int8), np.full(n, np.inf)
        return self._props(_sentinel(table, self.nlinks))

    def _props(self, safe: Routes) -> tuple[Floats, Classes, Floats]:
        """properties() of route columns (hop, row) whose padding is the sentinel link
        `nlinks` (no latency, no class, no bottleneck), reduced hop by hop: no (rows x hops)
        temporaries (numpy reduces short rows one by one, slowly)."""
        lat_x, cls_x = np.append(self.latency, 0.0), np.append(self.link_class, np.int8(0))
        cap_x = np.append(self.capacity, np.inf)
        lat, cls, cap = lat_x[safe[0]], cls_x[safe[0]], cap_x[safe[0]]
        for col in safe[1:]:
            lat += lat_x[col]
            np.maximum(cls, cls_x[col], out=cls)
            np.minimum(cap, cap_x[col], out=cap)
        return lat, cls, cap

    def geometry(self, table: Routes) -> tuple[Floats, Classes, Floats, Floats]:
        """(latency sum, path class, bottleneck capacity, even share) per route row, the
        share being the least over the row's links of capacity x lanes / the rows on it."""
        if not table.shape[1] or (self.fabric is not None and self.fabric.lanes > 1):
            lat, cls, cap = self.properties(table)
            return lat, cls, cap, _even_share(self, table)
        safe = _sentinel(table, self.nlinks)
        lat, cls, cap = self._props(safe)
        counts = np.bincount(safe.reshape(-1), minlength=self.nlinks + 1)[:self.nlinks]
        per = np.append(self.capacity * self.lane_scale / np.maximum(counts, 1), np.inf)
        share = per[safe[0]]
        for col in safe[1:]:
            np.minimum(share, per[col], out=share)
        return lat, cls, cap, share


def check_step_ops(n: int, what: str = "one step of the schedule") -> None:
    """Refuse a step of more than MAX_STEP_OPS ops (ConfigError naming the size allowed)."""
    if n > MAX_STEP_OPS:
        raise ConfigError(f"{what} has {n:,} ops: the simulator routes at most "
                          f"{MAX_STEP_OPS:,} at once (an all-to-all, P^2 ops, of up to "
                          f"{math.isqrt(MAX_STEP_OPS):,} ranks); use fewer nodes")


def _sentinel(table: Routes, nlinks: int) -> Routes:
    """The route rows as columns (hop, row), the -1 padding replaced by the index `nlinks`
    (one past the links)."""
    cols = np.ascontiguousarray(table.T)
    return np.where(cols < 0, nlinks, cols)


def _even_share(paths: PathTable, table: Routes) -> Floats:
    """Per row, the least over its links of capacity x lanes / the rows crossing the link."""
    valid = table >= 0
    if not table.shape[1]:
        return np.full(len(table), np.inf)
    counts = np.bincount(table[valid], minlength=paths.nlinks) if valid.any() else \
        np.zeros(paths.nlinks)
    safe = np.where(valid, table, 0)
    share = np.where(valid, (paths.capacity * paths.lane_scale)[safe]
                     / np.maximum(counts[safe], 1), np.inf)
    least: Floats = share.min(axis=1)
    return least


def _matrix(topo: Topology, s: Ints, d: Ints, c: npt.ArrayLike,
            local: Replica | None = None) -> Routes:
    if len(s) == 0:
        return np.full((0, 0), -1, dtype=np.int32)
    if local is not None:
        gpn, nlinks, base = local
        node = s // gpn
        inside = node == d // gpn
        # node k's routes are node 0's shifted by k x (links per node)
        rows = base[(s % gpn)[inside], (d % gpn)[inside]]
        rows = np.where(rows >= 0, rows + (node[inside] * nlinks)[:, None], -1).astype(np.int32)
        if inside.all():
            return rows
        far = _matrix(topo, s[~inside], d[~inside], np.broadcast_to(c, s.shape)[~inside])
        width = max(rows.shape[1], far.shape[1])
        out = np.full((len(s), width), -1, dtype=np.int32)
        out[inside, :rows.shape[1]] = rows
        out[~inside, :far.shape[1]] = far
        return out
    m = np.asarray(topo.route_matrix(s, d, c))
    if m.ndim == 1:
        m = m.reshape(len(s), -1)
    return m.astype(np.int32, copy=True)


def _replica_routes(topo: Topology, node_of_rank: Ints) -> Replica | None:
    """(GPUs per node, links per node, node 0's route table [i, j, hop]) when every node is a
    replica of node 0 laid out in the same order (build_topology's clusters) and each pair of
    a node's GPUs has one shortest route (no ECMP choice by channel), else None. Intra-node
    routes then cost a gather instead of a Python call per op."""
    replica = topo.cache.replica
    gpn, nodes = int(topo.gpus_per_node or 0), int(topo.nodes or 1)
    if not replica or nodes < 2 or gpn < 1 or len(node_of_rank) != gpn * nodes \
            or not np.array_equal(node_of_rank, np.arange(len(node_of_rank)) // gpn):
        return None
    rows = []
    for i in range(gpn):
        for j in range(gpn):
            alts = topo.routes(i, j)
            if len(alts) != 1:
                return None
            rows.append(alts[0])
    width = max((len(r) for r in rows), default=0)
    base = np.full((gpn * gpn, max(width, 1)), -1, dtype=np.int64)
    for k, r in enumerate(rows):
        base[k, :len(r)] = r
    nlinks = int(replica[1])
    if len(topo.links) < nodes * nlinks:
        return None
    return gpn, nlinks, base.reshape(gpn, gpn, -1)


def _widen(m: np.ndarray, width: int) -> np.ndarray:
    if m.shape[1] >= width:
        return m
    return np.concatenate([m, np.full((m.shape[0], width - m.shape[1]), -1, np.int32)], axis=1)


def _join(parts: list[Routes]) -> Routes:
    """Concatenate padded route segments row by row, keeping the links left-aligned."""
    full = np.concatenate(parts, axis=1)
    order = np.argsort(full < 0, axis=1, kind="stable")
    return np.take_along_axis(full, order, axis=1)


def _link_props(topology: Topology) -> tuple[Floats, Floats, Classes]:
    """(payload capacity, latency, path class) per link, once per topology object (every
    placement's table shares them; a 100,000-GPU cluster has a million links)."""
    memo = topology_memo(topology)
    hit = memo.link_props
    if hit is None:
        bw, lat, eff = topology.link_arrays()
        capacity = np.asarray(bw, dtype=np.float64) * np.asarray(eff, dtype=np.float64)
        # a bit per end kind: 4 = network, 2 = PCIe/host; the class is the highest bit set
        kind_bits = np.array([4 if k in _NET_KINDS else 2 if k in _PCIE_KINDS else 0
                              for k in DEVICE_KINDS], dtype=np.int8)
        bits = kind_bits[topology.device_kind_codes()]
        router = topology.router
        if len(getattr(router, "lsrc", ())) == len(topology.links):  # device index per end
            ends = bits[np.asarray(router.lsrc)] | bits[np.asarray(router.ldst)]
        else:
            ends = np.fromiter((bits[topology.index_of(ln.src)] | bits[topology.index_of(ln.dst)]
                                for ln in topology.links), dtype=np.int8,
                               count=len(topology.links))
        cls = np.where(ends & 4, NET, np.where(ends & 2, PCIE, NVLINK)).astype(np.int8)
        for arr in (capacity, cls):
            arr.flags.writeable = False
        hit = memo.link_props = (capacity, np.asarray(lat, dtype=np.float64), cls)
    capacity, lat, cls = hit
    return capacity, lat, cls


def _placed_rails(topo: Topology, node_of_rank: Ints, placed: Ints) -> tuple[Rails, Home]:
    """_rails, once per topology and set of placed GPUs (the rails depend on the set, not on
    the order: the channels' ring orders of one group share them)."""
    memo = topology_memo(topo).rails
    key = distinct(np.asarray(placed, dtype=np.int64)).tobytes()
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _rails(topo, node_of_rank, placed)
    rails, home = hit
    return rails, home


def _rails(topo: Topology, node_of_rank: Ints, placed: Ints) -> tuple[Rails, Home]:
    """Rails of a placement: node -> owner ranks of the NICs next to its placed GPUs (NIC
    order), and rank -> position of its own NIC in its node's list."""
    affinity = tuple(getattr(topo, "nic_affinity", ()) or ())
    if not affinity:
        if not any(d.kind == "nic" for d in topo.devices):
            return {}, {}
        affinity = tuple(_closest_nic(topo, r) for r in range(topo.nranks))
    memo = topology_memo(topo)
    index = memo.nic_index
    if index is None or len(index) != len(affinity):  # device index of each rank's NIC
        known = topo.cache.nic_pos  # device positions of the NICs, known when built
        at: list[int | None] = list(known) if known is not None and len(known) == len(
            affinity) else [None if a is None else topo.index_of(a) for a in affinity]
        index = memo.nic_index = np.array(
            [-1 if i is None else i for i in at], dtype=np.int64)
    ranks = distinct(np.asarray(placed, dtype=np.int64))
    ranks = ranks[index[ranks] >= 0]
    if not ranks.size:
        return {}, {}
    node, nic = np.asarray(node_of_rank)[ranks], index[ranks]
    # each (node, NIC) pair's owner is its lowest placed rank; a node's NICs in device order
    order = np.lexsort((ranks, nic, node))
    node_s, nic_s, rank_s = node[order], nic[order], ranks[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (node_s[1:] != node_s[:-1]) | (nic_s[1:] != nic_s[:-1])
    o_node, o_rank = node_s[first], rank_s[first]
    starts = np.flatnonzero(np.r_[True, o_node[1:] != o_node[:-1]])
    pos = np.arange(len(o_node)) - np.repeat(starts, np.diff(np.r_[starts, len(o_node)]))
    rails = dict(zip(o_node[starts].tolist(), np.split(o_rank, starts[1:])))
    # every placed rank's position: that of its (node, NIC) pair
    pair = np.cumsum(first) - 1
    home_pos = np.empty(len(order), dtype=np.int64)
    home_pos[order] = pos[pair]
    return rails, dict(zip(ranks.tolist(), home_pos.tolist()))


def _closest_nic(topo: Topology, rank: int) -> str | None:
    """The NIC a rank's inter-node route leaves by (None on a single node)."""
    me = topo.node_of(rank)
    for other in range(topo.nranks):
        if topo.node_of(other) != me:
            for li in topo.route(rank, other):
                dev = topo.device(topo.links[li].dst)
                if dev.kind == "nic":
                    return dev.name
            return None
    return None
