"""Shortest-path routing with ECMP, composed from node-local and fabric segments.

Rules (docs/topology-yaml.md):
- A path is shortest by the time a 1 MiB reference message takes hop by hop (sum over its
  links of latency + 1 MiB / achievable bandwidth), then by hop count; paths tied on both are
  ECMP alternatives. A channel picks one by a hash of (src, dst, channel), as a switch hashes
  flows. (Hop count alone would tie GPU->PCIe switch->GPU with GPU->NVSwitch->GPU; the time
  metric picks NVLink, as NCCL's path search does.)
- Routes never pass through a GPU or host memory, and never through a third node: a host is
  not a router.
- Two GPUs of one node talk inside the node; the fabric is used only if the node has no
  internal path between them.
- Between nodes, traffic leaves by the source GPU's NIC and arrives by the destination GPU's
  NIC (GPUDirect RDMA, NIC affinity); each segment is a shortest path:
      src GPU -> its NIC -> fabric -> peer NIC -> dst GPU
- With p2p off, GPU traffic (to a GPU or a NIC) bounces through host memory:
      GPU -> ... -> memory -> ... -> GPU/NIC      (best memory device, ECMP on ties)

Because routes are composed from per-GPU segments and a switch-to-switch table, the
vectorised `route_matrix` costs a few numpy gathers for a million pairs.
"""
from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from typing import Any, Protocol, TypedDict, overload

import numpy as np
import numpy.typing as npt

from ..errors import TopologyError
from .elements import DEVICE_KINDS, TRANSIT_KINDS, Device

MAX_ECMP = 64
HOPS = 1 << 20   # more hops than any route: (cost, hops) packed as cost * HOPS + hops
REF_BYTES = 1 << 20   # the reference message of the route metric
_M64 = (1 << 64) - 1


@overload
def mix(src: int, dst: int, channel: int) -> int: ...
@overload
def mix(src: npt.NDArray[Any], dst: npt.NDArray[Any],
        channel: npt.NDArray[Any]) -> npt.NDArray[np.uint64]: ...
def mix(src: Any, dst: Any, channel: Any) -> Any:
    """A 64-bit hash of (src, dst, channel); works on Python ints and uint64 arrays alike."""
    if isinstance(src, np.ndarray):
        with np.errstate(over="ignore"):
            x = (src.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
                 + dst.astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)
                 + channel.astype(np.uint64) * np.uint64(0x165667B19E3779F9)
                 + np.uint64(0x27D4EB2F165667C5))
            x ^= x >> np.uint64(29)
            x *= np.uint64(0xBF58476D1CE4E5B9)
            x ^= x >> np.uint64(32)
        return x
    x = (src * 0x9E3779B97F4A7C15 + dst * 0xC2B2AE3D27D4EB4F + channel * 0x165667B19E3779F9
         + 0x27D4EB2F165667C5) & _M64
    x ^= x >> 29
    x = (x * 0xBF58476D1CE4E5B9) & _M64
    x ^= x >> 32
    return x


def _pick(x, n, shift):
    """ECMP choice among n alternatives from hash x (independent bits per segment)."""
    return (x >> shift) % n


def lane_key(j: Any) -> npt.NDArray[np.uint64]:
    """A hash value that picks alternative j (mod their number) of the switch-to-switch
    segment and the first alternative of the node segments (an even split over paths)."""
    return np.asarray(j, dtype=np.uint64) << np.uint64(20)


# Inter-node route tables (Router._build_tables), per rank r and switch pair (x, y):
# "out"/"in": (paths GPU -> NIC / NIC -> GPU [rank, alt, hop] padded -1, counts [rank]);
# "sw": (paths between the leaves [x, y, alt, hop], counts [x, y]); "up"/"down": each rank's
# NIC uplink/downlink; "x"/"y": the index of its leaf among the up/down switches.
Path = tuple[int, ...]                      # link indices, in order
Edge = tuple[int, int, int]                 # (link, next device, cost in ps)
# Dijkstra's result from one source: device -> (cost in ps, hops), device -> tied last links
ShortestPaths = tuple[dict[int, tuple[int, int]], dict[int, list[int]]]

_Tables = TypedDict("_Tables", {"out": tuple[np.ndarray, np.ndarray],
                                "in": tuple[np.ndarray, np.ndarray],
                                "sw": tuple[np.ndarray, np.ndarray],
                                "up": np.ndarray, "down": np.ndarray,
                                "x": np.ndarray, "y": np.ndarray})


class RoutedTopology(Protocol):
    """What the router reads of a topology (model.Topology; a protocol, so that routing
    does not import the model that imports it)."""
    @property
    def cache(self) -> Any: ...   # model.TopologyCache: index, rank_pos, nic_pos, replica
    @property
    def devices(self) -> Sequence[Device]: ...
    @property
    def ranks(self) -> tuple[str, ...]: ...
    @property
    def nic_affinity(self) -> tuple[str, ...]: ...
    @property
    def nodes(self) -> int: ...
    @property
    def p2p(self) -> bool: ...
    def device_nodes(self) -> np.ndarray: ...
    def device_kinds(self) -> list[str]: ...
    def device_kind_codes(self) -> np.ndarray: ...
    def link_ends(self) -> tuple[np.ndarray, np.ndarray]: ...
    def link_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


class Router:
    """Routing state of one Topology (built lazily, cached)."""

    def __init__(self, topo: RoutedTopology):
        self.topo = topo
        self.index = topo.cache.index      # name -> device index (a dict or NameIndex)
        nodes = topo.device_nodes()
        self.node = nodes.tolist()
        self.kind = topo.device_kinds()
        codes = topo.device_kind_codes()
        self.transit = np.array([k in TRANSIT_KINDS for k in DEVICE_KINDS])[codes].tolist()
        src, dst = topo.link_ends()
        bw, lat, eff = topo.link_arrays()
        # link cost in integer picoseconds, so that ties (ECMP) compare exactly (numpy's
        # float64 arithmetic and round-half-even are Python's)
        self.cost = np.rint((lat + REF_BYTES / (bw * eff)) * 1e12).astype(np.int64)
        self._ends = (src, dst)
        # device (or ("sw", switch): its links to switches) -> its out-links, on first use
        self._adj: dict[int | tuple[str, int], list[Edge]] = {}
        self._csr: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.rank_dev = list(topo.cache.rank_pos)
        self.rank_node = nodes[np.asarray(self.rank_dev, dtype=np.int64)] if self.rank_dev \
            else np.zeros(0, dtype=np.int64)
        self.memories: dict[int, list[int]] = {}    # node -> its host memory devices
        for i in np.flatnonzero(codes == DEVICE_KINDS.index("memory")).tolist():
            self.memories.setdefault(self.node[i], []).append(i)
        self._local: dict[int, ShortestPaths] = {}    # src device -> inside its node
        self._fabric: dict[int, ShortestPaths] = {}   # src device -> over the fabric
        self._switch: dict[int, ShortestPaths] = {}   # fabric switch -> over switches only
        self._routes: dict[tuple[int, int], tuple[Path, ...]] = {}   # rank pair -> all paths
        # rank pair -> its segments, each a tuple of ECMP alternatives
        self._segs: dict[tuple[int, int], tuple[tuple[Path, ...], ...]] = {}
        self._port: list[int] | None = None
        self._parr: tuple[np.ndarray, ...] | None = None
        self._lp0: dict[tuple[int, int], list[Path]] = {}   # node-0 local paths, for replicas
        self._tables: _Tables | None = None
        self._tables_built = False
        self._tail_list: list[int] | None = None   # link -> its source device, as a list
        # the predecessors of the last source `_paths` walked, and its paths per device
        self._walked: tuple[Any, dict[int, list[Path]]] = (None, {})

    @property
    def lsrc(self) -> np.ndarray:
        """Source device index of every link (int64, read-only)."""
        return self._ends[0]

    @property
    def ldst(self) -> np.ndarray:
        """Destination device index of every link (int64, read-only)."""
        return self._ends[1]

    @property
    def out(self) -> list:
        """Out-links of every device, [(link, next device, cost in ps)] (built for all)."""
        return [self._out(u) for u in range(len(self.node))]

    def _out(self, u):
        """Out-links of device u in link order, [(link, next device, cost in ps)]."""
        adj = self._adj.get(u)
        if adj is None:
            adj = self._adj[u] = self._edges(u, False)
        return adj

    def _switch_out(self, u):
        """Out-links of fabric switch u to other fabric switches."""
        key = ("sw", u)
        adj = self._adj.get(key)
        if adj is None:
            adj = self._adj[key] = self._edges(u, True)
        return adj

    def _edges(self, u, switches):
        if self._csr is None:
            src = self._ends[0]
            order = np.argsort(src, kind="stable")
            starts = np.searchsorted(src[order], np.arange(len(self.node) + 1))
            self._csr = (order, starts, self.topo.device_nodes())
        order, starts, nodes = self._csr
        lis = order[starts[u]:starts[u + 1]]
        vs = self._ends[1][lis]
        if switches:
            keep = nodes[vs] == -1
            lis, vs = lis[keep], vs[keep]
        return list(zip(lis.tolist(), vs.tolist(), self.cost[lis].tolist()))

    # ---- shortest paths ------------------------------------------------------------------
    def _sssp(self, src, local, switches=False):
        """Dijkstra on (cost, hops) with all tied predecessors. switches: over the fabric's
        switches only (node -1), which gives the same paths between two switches as the
        whole fabric (a fabric path passes only switches) without visiting every NIC."""
        cache = self._local if local else self._switch if switches else self._fabric
        if src in cache:
            return cache[src]
        if switches:
            cache[src] = self._switch_sssp(src)
            return cache[src]
        node, n0 = self.node, self.node[src]
        out = self._switch_out if switches else self._out
        dist, preds = {src: (0, 0)}, {}
        heap = [(0, 0, src)]
        while heap:
            c, h, u = heapq.heappop(heap)
            if (c, h) > dist[u]:
                continue
            if u != src and not (self.transit[u] and (local or node[u] == -1)):
                continue
            for li, v, cost in out(u):
                if local:
                    if node[v] != n0:
                        continue
                elif node[u] == node[v] != -1:
                    continue    # a node-internal link is not part of the fabric
                nd = (c + cost, h + 1)
                d = dist.get(v)
                if d is None or nd < d:
                    dist[v], preds[v] = nd, [li]
                    heapq.heappush(heap, (nd[0], nd[1], v))
                elif nd == d:
                    preds[v].append(li)
        cache[src] = (dist, preds)
        return dist, preds

    def _switch_sssp(self, src) -> ShortestPaths:
        """_sssp over fabric switches only (every device on the way a switch, a router):
        the same search with (cost, hops) packed in one integer, cost * HOPS + hops, whose
        order is the pair's (a fabric has fewer than HOPS hops), so ties and the order of
        the heap, hence of each device's tied predecessors, are the general search's."""
        dist, preds = {src: 0}, {}
        heap = [(0, src)]
        pop, push, out = heapq.heappop, heapq.heappush, self._switch_out
        while heap:
            k, u = pop(heap)
            if k > dist[u]:
                continue
            for li, v, cost in out(u):
                nd = k + cost * HOPS + 1
                d = dist.get(v)
                if d is None or nd < d:
                    dist[v], preds[v] = nd, [li]
                    push(heap, (nd, v))
                elif nd == d:
                    preds[v].append(li)
        return {v: divmod(k, HOPS) for v, k in dist.items()}, preds

    def _paths(self, src, dst, local):
        """All tied shortest paths src -> dst (tuples of link indices), [] if none."""
        if src == dst:
            return [()]
        switches = not local and self.node[src] == -1 and self.node[dst] == -1
        dist, preds = self._sssp(src, local, switches)
        if dst not in dist:
            return []
        if self._walked[0] is not preds:   # one source at a time: a table row, a check
            self._walked = (preds, {src: [()]})
        memo = self._walked[1]
        return sorted(memo[dst] if dst in memo else self._tied(preds, dst, memo))

    def _tied(self, preds, v, memo) -> list[Path]:
        """The first MAX_ECMP tied paths to v in depth-first order over `preds` (each
        predecessor link in turn, the paths to its tail before the next link), remembered
        per device in `memo`: a fabric's devices share their paths' prefixes, so every
        destination of one source reuses them (a three-tier fabric has up to 256 paths)."""
        got: list[Path] = []
        tails = self._tails()
        for li in preds[v]:
            u = tails[li]
            sub = memo.get(u)
            if sub is None:
                sub = self._tied(preds, u, memo)
            got.extend([p + (li,) for p in sub[:MAX_ECMP - len(got)]])
            if len(got) >= MAX_ECMP:
                break
        memo[v] = got
        return got

    def _tails(self) -> list[int]:
        if self._tail_list is None:
            self._tail_list = self._ends[0].tolist()
        return self._tail_list

    def _cost(self, path):
        return (int(self.cost[list(path)].sum()) if path else 0, len(path))

    def _best(self, candidates):
        """Keep the candidates of least (cost, hops), deduplicated, capped."""
        if not candidates:
            return []
        best = min(self._cost(p) for p in candidates)
        return sorted({p for p in candidates if self._cost(p) == best})[:MAX_ECMP]

    def _local_paths(self, a, b):
        """Node-local paths device a -> device b, bouncing through memory if P2P is off."""
        replica = self.topo.cache.replica
        if replica and self.node[a] > 0:
            # node k is node 0 shifted by k devices/links blocks (set by build_topology)
            ndev, nlink = replica
            k = self.node[a]
            key = (a - k * ndev, b - k * ndev)
            if key not in self._lp0:
                self._lp0[key] = self._local_paths_direct(*key)
            return [tuple(li + k * nlink for li in p) for p in self._lp0[key]]
        return self._local_paths_direct(a, b)

    def _local_paths_direct(self, a, b):
        if a == b:
            return [()]
        if self.topo.p2p or self.kind[a] == "memory" or self.kind[b] == "memory":
            return self._paths(a, b, True)
        cands = []
        for m in self.memories.get(self.node[a], []):
            for p in self._paths(a, m, True):
                for q in self._paths(m, b, True):
                    cands.append(p + q)
        return self._best(cands)

    # ---- ports (the NIC a GPU uses) ------------------------------------------------------
    def _port_arrays(self):
        """Per device: the number of fabric links (not internal to one node) out of it and
        into it, and the first of each (-1 if none)."""
        if self._parr is None:
            src, dst = self._ends
            nodes = np.asarray(self.node, dtype=np.int64)
            ns, nd = nodes[src], nodes[dst]
            fab = np.flatnonzero((ns != nd) | (ns == -1))
            n = len(self.node)
            arrays = []
            for ends in (src, dst):
                count = np.bincount(ends[fab], minlength=n)
                first = np.full(n, -1, dtype=np.int64)
                first[ends[fab][::-1]] = fab[::-1]      # the first link wins
                arrays += [count, first]
            self._parr = tuple(arrays)
        return self._parr

    def _simple_array(self, ports):
        """(uplink, downlink) arrays for ports, and whether each port is simple (_simple)."""
        up_n, up_1, down_n, down_1 = self._port_arrays()
        p = np.asarray(ports, dtype=np.int64)
        nodes = np.asarray(self.node, dtype=np.int64)
        ldst, lsrc = self._ends[1], self._ends[0]
        ok = (up_n[p] == 1) & (down_n[p] == 1) & (nodes[p] != -1)
        ok[ok] &= (nodes[ldst[up_1[p[ok]]]] == -1) & (nodes[lsrc[down_1[p[ok]]]] == -1)
        return up_1[p], down_1[p], ok

    def _simple(self, p):
        """(uplink, downlink) if port p has exactly one link into the fabric, to a switch,
        and one out of it, from a switch; else None."""
        up, down, ok = self._simple_array([p])
        return (int(up[0]), int(down[0])) if ok[0] else None

    def _fabric_paths(self, pa, pb):
        sa, sb = self._simple(pa), self._simple(pb)
        if sa and sb and pa != pb:
            x, y = int(self._ends[1][sa[0]]), int(self._ends[0][sb[1]])
            return [(sa[0],) + p + (sb[1],) for p in self._paths(x, y, False)]
        return self._paths(pa, pb, False)

    def ports(self) -> list[int]:
        """Per rank: the device where its inter-node traffic enters the fabric."""
        if self._port is None:
            if self.topo.nic_affinity:
                self._port = list(self.topo.cache.nic_pos)
                return self._port
            has_uplink = ((self._port_arrays()[0] > 0)
                          & (np.asarray(self.node) != -1)).tolist()
            port = []
            for r, g in enumerate(self.rank_dev):
                if self.topo.nic_affinity:
                    port.append(self.index[self.topo.nic_affinity[r]])
                    continue
                if has_uplink[g]:
                    port.append(g)
                    continue
                dist, _ = self._sssp(g, True)
                cands = [(dist[d], self.kind[d] != "nic", d) for d in dist
                         if has_uplink[d] and self.kind[d] != "gpu"]
                if not cands:   # no fabric yet (one node): the closest NIC, for reports
                    cands = [(dist[d], False, d) for d in dist if self.kind[d] == "nic"]
                port.append(min(cands)[2] if cands else -1)
            self._port = port
        return self._port

    # ---- scalar routes -------------------------------------------------------------------
    def _segments(self, s, d):
        """The segments of the route s -> d, each a list of ECMP alternatives."""
        a, b = self.rank_dev[s], self.rank_dev[d]
        if self.node[a] == self.node[b]:
            local = self._local_paths(a, b)
            if local:
                return [local]
        ports = self.ports()
        pa, pb = ports[s], ports[d]
        why = None
        if pa < 0 or pb < 0:
            n = self.node[a] if pa < 0 else self.node[b]
            inside = f"no path inside node {n}, and " if self.node[a] == self.node[b] else ""
            why = f"{inside}node {n} has no link to the fabric"
        elif pa == pb:   # in and out of one NIC: a NIC is never a router (TRANSIT_KINDS)
            why = (f"no path inside node {self.node[a]}, and a route may not turn around in "
                   f"NIC {self.topo.devices[pa].name} (a NIC is never a router)")
        else:
            seg1, seg3 = self._local_paths(a, pa), self._local_paths(pb, b)
            fab = self._fabric_paths(pa, pb)
            if seg1 and seg3 and fab:
                return [seg1, fab, seg3]
            if not seg1:
                why = f"{self.topo.devices[a].name} cannot reach its NIC " \
                      f"{self.topo.devices[pa].name}"
            elif not seg3:
                why = f"NIC {self.topo.devices[pb].name} cannot reach " \
                      f"{self.topo.devices[b].name}"
            else:
                why = f"the fabric does not connect {self.topo.devices[pa].name} to " \
                      f"{self.topo.devices[pb].name}"
        raise TopologyError(f"no route from rank {s} ({self.topo.ranks[s]}) to rank {d} "
                            f"({self.topo.ranks[d]}): {why}")

    def routes(self, s, d):
        key = (s, d)
        if key not in self._routes:
            if s == d:
                self._routes[key] = ((),)
            else:
                segs = self._segments(s, d)
                combos = itertools.islice(itertools.product(*segs), MAX_ECMP)
                self._routes[key] = tuple(sum(c, ()) for c in combos)
        return self._routes[key]

    def route(self, s, d, channel=0, key=None):
        if s == d:
            return ()
        segs = self._segments_cached(s, d)
        x = mix(s, d, channel) if key is None else int(key)
        return sum((seg[_pick(x, len(seg), 20 * i)] for i, seg in enumerate(segs)), ())

    def _segments_cached(self, s: int, d: int) -> tuple[tuple[Path, ...], ...]:
        key = (s, d)
        if key not in self._segs:
            self._segs[key] = tuple(tuple(seg) for seg in self._segments(s, d))
        return self._segs[key]

    # ---- vectorised routes ---------------------------------------------------------------
    def _build_tables(self) -> _Tables | None:
        """Padded segment tables for inter-node routes, when every port is simple."""
        ports = self.ports()
        if any(p < 0 for p in ports):
            return None
        up, down, ok = self._simple_array(ports)
        if not ok.all():
            return None
        seg = self._replica_segments(ports)
        if seg is None:
            R = len(self.rank_dev)
            seg = (_pad([self._local_paths(self.rank_dev[r], ports[r]) for r in range(R)]),
                   _pad([self._local_paths(ports[r], self.rank_dev[r]) for r in range(R)]))
        xs = np.asarray(self._ends[1])[up]
        ys = np.asarray(self._ends[0])[down]
        sw_up, x = np.unique(xs, return_inverse=True)
        sw_down, y = np.unique(ys, return_inverse=True)
        fast = self._two_tier(sw_up, sw_down)
        if fast is None:
            fast = _pad2([self._paths(int(a), int(b), False) for b in sw_down] for a in sw_up)
        return {"out": seg[0], "in": seg[1], "sw": fast, "up": up, "down": down,
                "x": x.astype(np.int64), "y": y.astype(np.int64)}

    def _two_tier(self, sw_up: np.ndarray, sw_down: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray] | None:
        """The switch-to-switch table of a two-tier fabric without a Dijkstra per leaf pair:
        where every switch link joins a leaf (a switch NICs hang off) and a spine, once, at
        one cost, and every two leaves share a spine, the tied shortest paths between two
        leaves are exactly leaf -> spine -> leaf over their common spines (sorted, as
        `_paths` sorts). None where that does not hold (the general search answers)."""
        src, dst = self._ends
        nodes = np.asarray(self.node, dtype=np.int64)
        li = np.flatnonzero((nodes[src] == -1) & (nodes[dst] == -1))
        if not len(li):
            return None
        a, b = src[li], dst[li]
        is_leaf = np.zeros(len(nodes), dtype=bool)
        is_leaf[np.union1d(sw_up, sw_down)] = True
        if (is_leaf[a] == is_leaf[b]).any() or len(np.unique(self.cost[li])) > 1:
            return None
        spines = np.unique(np.where(is_leaf[a], b, a))
        S = len(spines)
        if S > MAX_ECMP:
            return None
        up = np.full((len(sw_up), S), -1, dtype=np.int64)  # leaf -> spine link
        down = np.full((S, len(sw_down)), -1, dtype=np.int64)  # spine -> leaf link
        for table, leaf_end, spine_end, leaves, rows in (
                (up, a, b, sw_up, True), (down, b, a, sw_down, False)):
            sel = is_leaf[leaf_end] & np.isin(leaf_end, leaves)
            i = np.searchsorted(leaves, leaf_end[sel])
            k = np.searchsorted(spines, spine_end[sel])
            pair = (i, k) if rows else (k, i)
            if len(np.unique(np.ravel_multi_index(pair, table.shape))) != len(i):
                return None  # parallel cables: the general search lists each
            table[pair] = li[sel]
        nx, ny = len(sw_up), len(sw_down)
        arr = np.full((nx, ny, S, 2), -1, dtype=np.int32)
        counts = np.zeros((nx, ny), dtype=np.int64)
        same = sw_up[:, None] == sw_down[None, :]
        for x in range(nx):
            order = np.argsort(np.where(up[x] >= 0, up[x], np.iinfo(np.int64).max), kind="stable")
            u, d = up[x][order], down[order].T  # spines by their up-link: [S], [ny, S]
            valid = (u[None, :] >= 0) & (d >= 0)
            pos = np.argsort(~valid, axis=1, kind="stable")  # valid spines first, in order
            ok = np.take_along_axis(valid, pos, axis=1)
            arr[x, :, :, 0] = np.where(ok, u[pos], -1)
            arr[x, :, :, 1] = np.where(ok, np.take_along_axis(d, pos, axis=1), -1)
            counts[x] = valid.sum(axis=1)
        arr[same] = -1
        counts[same] = 1
        if (counts == 0).any():
            return None  # leaves without a common spine: longer paths, the general search
        return arr, counts

    def _replica_segments(self, ports):
        """The GPU <-> NIC segments of every rank from node 0's, shifted by node k's device
        and link offsets, when the nodes are replicas (build_topology) with ranks and ports
        laid out alike in every node; else None."""
        replica = self.topo.cache.replica
        R = len(self.rank_dev)
        nodes = int(self.topo.nodes)
        if not replica or nodes < 2 or R % nodes:
            return None
        ndev, nlink = replica
        gpn = R // nodes
        k = np.arange(R, dtype=np.int64) // gpn
        dev = np.asarray(self.rank_dev, dtype=np.int64) - k * ndev
        port = np.asarray(ports, dtype=np.int64) - k * ndev
        if not (np.array_equal(self.rank_node, k) and np.array_equal(dev, np.tile(dev[:gpn], nodes))
                and np.array_equal(port, np.tile(port[:gpn], nodes))):
            return None
        out = []
        for pairs in ([(int(dev[r]), int(port[r])) for r in range(gpn)],
                      [(int(port[r]), int(dev[r])) for r in range(gpn)]):
            arr, counts = _pad([self._local_paths(a, b) for a, b in pairs])
            shift = (k * nlink).reshape(nodes, gpn)[..., None, None]
            full = np.where(arr[None] >= 0, arr[None] + shift, -1).reshape((R,) + arr.shape[1:])
            out.append((full.astype(np.int32), np.tile(counts, nodes)))
        return out

    def _ensure_tables(self) -> _Tables | None:
        if not self._tables_built:
            self._tables, self._tables_built = self._build_tables(), True
        return self._tables

    def route_matrix(self, src: Any, dst: Any, channel: Any = 0,
                     key: Any = None) -> npt.NDArray[np.int64]:
        """Routes of many pairs; `key` (uint64 per pair) replaces the hash of (src, dst,
        channel) that picks among ECMP alternatives (fabric routing policies hash other
        fields)."""
        src, dst, channel = np.broadcast_arrays(np.asarray(src, dtype=np.int64),
                                                np.asarray(dst, dtype=np.int64),
                                                np.asarray(channel, dtype=np.int64))
        src, dst, channel = src.ravel(), dst.ravel(), channel.ravel()
        if key is not None:
            key = np.broadcast_to(np.asarray(key, dtype=np.uint64), src.shape).ravel()
        R = len(self.rank_dev)
        bad = (src < 0) | (src >= R) | (dst < 0) | (dst >= R)
        if bad.any():
            k = int(np.argmax(bad))
            raise TopologyError(f"rank pair ({src[k]}, {dst[k]}) out of range: this topology "
                                f"has ranks 0..{R - 1}")
        n = len(src)
        inter = self.rank_node[src] != self.rank_node[dst]
        tables = self._ensure_tables() if inter.any() else self._tables
        parts = []
        loop = np.nonzero(~inter)[0] if tables else np.arange(n)
        if tables and inter.any():
            parts.append((np.nonzero(inter)[0], self._compose(
                tables, src[inter], dst[inter], channel[inter],
                None if key is None else key[inter])))
        if len(loop):
            rows = [self.route(int(src[k]), int(dst[k]), int(channel[k]),
                               None if key is None else key[k]) for k in loop]
            parts.append((loop, _pad(rows, single=True)))
        width = max([p[1].shape[1] for p in parts] + [0])
        out = np.full((n, width), -1, dtype=np.int32)
        for idx, arr in parts:
            out[idx, :arr.shape[1]] = arr
        return out

    def _compose(self, t: _Tables, s, d, c, key=None):
        x = mix(s, d, c) if key is None else key
        n_out, n_sw, n_in = t["out"][1], t["sw"][1], t["in"][1]
        x0, y0 = t["x"][s], t["y"][d]
        missing = (n_sw[x0, y0] == 0) | (n_out[s] == 0) | (n_in[d] == 0)
        if missing.any():
            k = int(np.argmax(missing))
            self._segments(int(s[k]), int(d[k]))    # raises with the precise reason
        seg1 = t["out"][0][s, _pick(x, n_out[s].astype(np.uint64), np.uint64(0)).astype(np.int64)]
        fab = t["sw"][0][x0, y0, _pick(x, n_sw[x0, y0].astype(np.uint64),
                                       np.uint64(20)).astype(np.int64)]
        seg3 = t["in"][0][d, _pick(x, n_in[d].astype(np.uint64), np.uint64(40)).astype(np.int64)]
        segments = (seg1, t["up"][s][:, None], fab, t["down"][d][:, None], seg3)
        # each segment is left-aligned with -1 padding: place it after the ones before it
        lengths = [(seg >= 0).sum(axis=1) for seg in segments]
        width = int(sum(lengths).max()) if len(s) else 0
        out = np.full((len(s), width), -1, dtype=np.int32)
        offset = np.zeros(len(s), dtype=np.int64)
        for seg, n in zip(segments, lengths):
            rows, cols = np.nonzero(seg >= 0)
            out[rows, offset[rows] + cols] = seg[rows, cols]
            offset += n
        return out

    def check_all(self):
        """Every ordered pair of ranks has a route (raises TopologyError naming one that
        does not). Cheap: per node all pairs (one node when nodes are replicas), then every
        rank's segments and the switch-to-switch table."""
        R = len(self.rank_dev)
        rank_node = self.rank_node
        order = np.argsort(rank_node, kind="stable")
        cuts = np.flatnonzero(np.diff(rank_node[order])) + 1
        groups = sorted(np.split(order, cuts), key=lambda g: g[0]) if R else []
        if self.topo.cache.replica:
            groups = groups[:1]
        for ranks in groups:
            ranks = ranks.tolist()
            for s in ranks:
                for d in ranks:
                    if s != d:
                        self._segments_cached(s, d)
        if len(cuts) < 1:
            return
        t = self._ensure_tables()
        if t is None:
            for s in range(R):
                for d in range(R):
                    if rank_node[s] != rank_node[d]:
                        self._segments_cached(s, d)
            return
        self._check_tables(t)

    def _check_tables(self, t: _Tables) -> None:
        """Raise naming a pair of ranks on different nodes that the tables cannot join."""
        rank_node = self.rank_node
        for counts in (t["out"][1], t["in"][1]):
            if (counts == 0).any():
                r = int(np.argmax(counts == 0))
                other = int(np.argmax(rank_node != rank_node[r]))
                self._segments(r, other) if counts is t["out"][1] else self._segments(other, r)
        for xi, yi in np.argwhere(t["sw"][1] == 0):
            srcs = np.nonzero(t["x"] == xi)[0]
            dsts = np.nonzero(t["y"] == yi)[0]
            for s in srcs:
                far = dsts[rank_node[dsts] != rank_node[s]]
                if len(far):
                    self._segments(int(s), int(far[0]))    # raises, naming the reason


def _pad(rows, single=False):
    """List (per item) of lists of paths -> (array [items, alts, hops] padded -1, counts).
    With single=True, rows are single paths -> array [items, hops]."""
    if single:
        width = max((len(p) for p in rows), default=0)
        arr = np.full((len(rows), width), -1, dtype=np.int32)
        for i, p in enumerate(rows):
            arr[i, :len(p)] = p
        return arr
    alts = max((len(r) for r in rows), default=0) or 1
    width = max((len(p) for r in rows for p in r), default=0)
    arr = np.full((len(rows), alts, width), -1, dtype=np.int32)
    counts = np.zeros(len(rows), dtype=np.int64)
    for i, r in enumerate(rows):
        counts[i] = len(r)
        for j, p in enumerate(r):
            arr[i, j, :len(p)] = p
    return arr, counts


def _pad2(grid):
    """Rows (an iterable, each a list per column of path lists) -> (array [x, y, alts,
    hops], counts [x, y]). A row is padded as it comes, so only one row's paths are held as
    Python tuples at a time (a 1,024-node rail-3tier has 512 x 512 cells of 64 paths)."""
    rows = [_pad_row(row) for row in grid]
    nx, ny = len(rows), rows[0][0].shape[0] if rows else 0
    alts = max((r[0].shape[1] for r in rows), default=1)
    width = max((r[0].shape[2] for r in rows), default=0)
    arr = np.full((nx, ny, alts, width), -1, dtype=np.int32)
    counts = np.zeros((nx, ny), dtype=np.int64)
    for i in range(nx):
        row, counts[i] = rows[i]
        arr[i, :, :row.shape[1], :row.shape[2]] = row
        rows[i] = None  # let the row go: the whole table is held once
    return arr, counts


def _pad_row(row):
    """One row of _pad2: (array [y, alts, hops], counts [y])."""
    alts = max((len(c) for c in row), default=0) or 1
    width = max((max(map(len, c)) for c in row if c), default=0)
    arr = np.full((len(row), alts, width), -1, dtype=np.int32)
    counts = np.zeros(len(row), dtype=np.int64)
    for j, c in enumerate(row):
        counts[j] = len(c)
        if c and len(set(map(len, c))) == 1:  # tied paths: one hop count
            arr[j, :len(c), :len(c[0])] = c
            continue
        for k, p in enumerate(c):
            arr[j, k, :len(p)] = p
    return arr, counts
