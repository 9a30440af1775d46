"""Which links an op crosses: routes per (source, destination, channel), rail by rail.

Inside a node an op follows the topology's route. Between nodes, channel `c` uses NIC rail
`c mod NICs`: the op is charged on the route from the GPU that owns that rail's NIC to the GPU
owning the same rail in the destination node. That is how NCCL lays channels out: it searches
one ring per NIC and rotates each channel's ring so that the node is entered and left by the
GPUs next to that channel's NIC (and PXN moves other traffic to the rail GPU over NVLink, which
is not charged here), so the channels of one collective spread over all NICs of a node.

Routes are cached as rows of a padded int32 table (`-1` = no link), so the engines gather the
links of thousands of ops with one numpy fancy-index.
"""
from __future__ import annotations

import numpy as np

# Path classes, for the protocol's per-hop software latency.
NVLINK, PCIE, NET = 0, 1, 2
CLASS_NAMES = ("nvlink", "pcie", "net")
_NET_KINDS = {"nic", "switch"}
_PCIE_KINDS = {"cpu", "pcie_switch", "memory"}


class PathTable:
    """Routes and their properties for one topology and one rank placement."""

    def __init__(self, topology, ranks=None):
        self.topo = topology
        bw, lat, eff = topology.link_arrays()
        self.capacity = np.asarray(bw, dtype=np.float64) * np.asarray(eff, dtype=np.float64)
        self.latency = np.asarray(lat, dtype=np.float64)
        self.nlinks = len(self.capacity)
        kinds = {d.name: d.kind for d in topology.devices}
        cls = np.zeros(self.nlinks, dtype=np.int8)
        for i, ln in enumerate(topology.links):
            ends = {kinds[ln.src], kinds[ln.dst]}
            cls[i] = NET if ends & _NET_KINDS else PCIE if ends & _PCIE_KINDS else NVLINK
        self.link_class = cls
        n = topology.nranks
        # one row per channel group: channel c runs schedule rank i on GPU placement[c % k, i]
        self.placement = np.atleast_2d(np.arange(n, dtype=np.int64) if ranks is None else
                                       np.asarray(ranks, dtype=np.int64))
        self.node = np.array([topology.node_of(r) for r in range(n)], dtype=np.int64)
        self._rails = _rails(topology, self.node)
        self._cache: dict = {}

    @property
    def rails_per_node(self) -> int:
        return min((len(v) for v in self._rails.values()), default=1) or 1

    def routes(self, src, dst, channel) -> np.ndarray:
        """Padded link table (ops, hops) for schedule ranks src -> dst on channels."""
        src = np.asarray(src, dtype=np.int64)
        c = np.broadcast_to(np.asarray(channel, dtype=np.int64), src.shape)
        row = c % len(self.placement)
        s = self.placement[row, src]
        d = self.placement[row, np.asarray(dst, dtype=np.int64)]
        out = _matrix(self.topo, s, d, c)
        inter = (self.node[s] != self.node[d]) & (s != d)
        if inter.any() and self._rails:
            idx = np.flatnonzero(inter)
            gs = self._rail_gpu(self.node[s[idx]], c[idx])
            gd = self._rail_gpu(self.node[d[idx]], c[idx])
            rows = _matrix(self.topo, gs, gd, c[idx])
            width = max(out.shape[1], rows.shape[1])
            out = _widen(out, width)
            out[idx] = _widen(rows, width)
        out[s == d] = -1  # a local copy crosses no link
        return out

    def _rail_gpu(self, nodes, channels):
        res = np.empty(len(nodes), dtype=np.int64)
        for k, (nd, ch) in enumerate(zip(nodes.tolist(), channels.tolist())):
            rail = self._rails.get(nd)
            res[k] = rail[ch % len(rail)] if rail is not None and len(rail) else -1
        return res

    def properties(self, table: np.ndarray):
        """Per op: (latency sum, path class, bottleneck capacity) of padded route rows."""
        valid = table >= 0
        safe = np.where(valid, table, 0)
        lat = np.where(valid, self.latency[safe], 0.0).sum(axis=1)
        cls = np.where(valid, self.link_class[safe], 0).max(axis=1) if table.shape[1] else \
            np.zeros(len(table), dtype=np.int8)
        cap = np.where(valid, self.capacity[safe], np.inf).min(axis=1) if table.shape[1] else \
            np.full(len(table), np.inf)
        return lat, cls, cap


def _matrix(topo, s, d, c) -> np.ndarray:
    if len(s) == 0:
        return np.full((0, 0), -1, dtype=np.int32)
    m = np.asarray(topo.route_matrix(s, d, c))
    if m.ndim == 1:
        m = m.reshape(len(s), -1)
    return m.astype(np.int32, copy=True)


def _widen(m: np.ndarray, width: int) -> np.ndarray:
    if m.shape[1] >= width:
        return m
    return np.concatenate([m, np.full((m.shape[0], width - m.shape[1]), -1, np.int32)], axis=1)


def _join(parts) -> np.ndarray:
    """Concatenate padded route segments row by row, keeping the links left-aligned."""
    full = np.concatenate(parts, axis=1)
    order = np.argsort(full < 0, axis=1, kind="stable")
    return np.take_along_axis(full, order, axis=1)


def _rails(topo, node_of_rank) -> dict:
    """node -> the ranks that own each of the node's NICs (one per rail), in NIC order."""
    affinity = tuple(getattr(topo, "nic_affinity", ()) or ())
    if not affinity:
        nics = [d for d in topo.devices if d.kind == "nic"]
        if not nics:
            return {}
        affinity = tuple(_closest_nic(topo, r) for r in range(topo.nranks))
    rails: dict = {}
    seen = set()
    for r, nic in enumerate(affinity):
        if nic is None or nic in seen:
            continue
        seen.add(nic)
        rails.setdefault(int(node_of_rank[r]), []).append(r)
    return {k: np.array(v, dtype=np.int64) for k, v in rails.items()}


def _closest_nic(topo, rank):
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
