"""Ring search: which orders of the GPUs a ring's channels follow, as NCCL's graph search does.

On an NVSwitch every order is as good as any other. On a direct NVLink mesh (DGX-1's hybrid
cube mesh, 4-GPU NVLink boards) a ring must follow NVLink pairs, and one ring uses only one or
two of a GPU's links; NCCL therefore searches several rings (one per channel) whose union
covers the links (`src/graph/search.cc`). Here: enumerate the Hamiltonian cycles of the
node (both directions; up to 8 GPUs), then pick rings greedily, each time the one whose
busiest link stays least loaded relative to its capacity, and keep the number of rings that
maximises `rings x min over links (capacity / rings on it)` — the bandwidth of equal channels.

    >>> from gpucomm.topology import build_topology
    >>> rings = ring_orders(build_topology("dgx-v100"), [0, 1, 2, 3, 4, 5, 6, 7])
    >>> len(rings) > 1
    True
"""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .paths import CLASS_NAMES, PathTable, _placed_rails

if TYPE_CHECKING:
    from ..topology import Topology

MAX_SEARCH_GPUS = 8
MAX_RINGS = 12


def ring_orders(topology: Topology, ranks: npt.ArrayLike) -> npt.NDArray[np.int64] | None:
    """(rings, P) table of rank orders for a ring's channels, or None if any order will do."""
    gpus = np.asarray(ranks, dtype=np.int64)
    p = len(gpus)
    node_of = [topology.node_of(int(r)) for r in gpus]
    if len(set(node_of)) != 1:
        return _across_nodes(topology, gpus, node_of)
    if p < 3 or p > MAX_SEARCH_GPUS:
        return None
    paths = PathTable(topology)
    src, dst = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    off = src != dst
    table = paths.routes(gpus[src[off]], gpus[dst[off]], 0)
    _, _, cap = paths.properties(table)
    pair: dict[tuple[int, int], npt.NDArray[np.signedinteger[Any]]] = {}
    for (i, j), row in zip(zip(src[off].tolist(), dst[off].tolist()), table):
        pair[(i, j)] = row[row >= 0]
    first: dict[int, set[int]] = {}
    for (i, _), hops in pair.items():
        first.setdefault(i, set()).add(int(hops[0]) if len(hops) else -1)
    if np.allclose(cap, cap[0]) and all(len(v) == 1 for v in first.values()):
        return None  # a switch (one link out of each GPU, equal paths): every ring is the same
    # (equal capacities with a link per peer is a full mesh, e.g. MI300X's xGMI: search)
    cycles = [(0,) + perm for perm in itertools.permutations(range(1, p))]
    links = [np.concatenate([pair[(c[k], c[(k + 1) % p])] for k in range(p)]) for c in cycles]
    width = max(len(x) for x in links)
    mat = np.full((len(cycles), width), -1, dtype=np.int64)
    for i, x in enumerate(links):
        mat[i, :len(x)] = x
    # two greedy passes that differ in how they break a tie: the one whose rings carry more
    # (a tie that repeats a ring can stop short of links still free: a 4-GPU mesh's 6 rings)
    found = max((_greedy(mat, paths.capacity, fresh) for fresh in (False, True)),
                key=lambda x: x[0] * (1 - 1e-9 * x[1]))
    return gpus[np.array([cycles[i] for i in found[2]], dtype=np.int64)]


def _greedy(mat: npt.NDArray[np.int64], capacity: npt.NDArray[np.float64],
            fresh: bool) -> tuple[float, int, list[int]]:
    """(bandwidth, rings, chosen ring indices): rings picked one by one, each the one whose
    busiest link stays least loaded relative to its capacity (with `fresh`, then one taken
    fewer times), then the widest; keeping the count that maximises rings x min over links
    (capacity / rings on it)."""
    valid = mat >= 0
    safe = np.where(valid, mat, 0)
    bottleneck = np.where(valid, capacity[safe], np.inf).min(axis=1)
    usage = np.zeros(len(capacity))
    times = np.zeros(len(mat))
    chosen, best, best_k = [], 0.0, 0
    for k in range(1, MAX_RINGS + 1):
        load = np.where(valid, (usage[safe] + 1) / capacity[safe], 0).max(axis=1)
        i = int(np.lexsort((-bottleneck, times if fresh else 0 * times, load))[0])
        times[i] += 1
        chosen.append(i)
        np.add.at(usage, mat[i][valid[i]], 1)
        used = usage > 0
        bw = k * float((capacity[used] / usage[used]).min())
        if bw > best * (1 + 1e-9):
            best, best_k = bw, k
    return best, best_k, chosen[:best_k]


def _across_nodes(topology: Topology, gpus: npt.NDArray[np.int64],
                  node_of: list[int]) -> npt.NDArray[np.int64] | None:
    """Rings over several alike nodes of a mesh: each channel follows, inside every node, one
    of the rings the search finds for a node, and crosses to the next node from its last GPU
    (NCCL's search builds the intra-node part of an inter-node ring the same way,
    search.cc ncclTopoSearchRec over the node's GPUs between the NET it enters and leaves by).
    Each channel's ring is rotated to leave a node by the NIC rail (then GPU) fewest channels
    leave by so far. None where any order will do (a switch), where the rings are not all over GPU
    links (NVLink / xGMI; a PCIe box's go through the host) or the nodes are not alike."""
    groups: dict[int, list[int]] = {}
    for g, nd in zip(gpus.tolist(), node_of):
        groups.setdefault(nd, []).append(g)
    members = list(groups.values())
    g = len(members[0])
    if any(len(m) != g for m in members):
        return None
    local = ring_orders(topology, members[0])
    if local is None or not _over_gpu_links(topology, local):
        return None
    where = {gpu: i for i, gpu in enumerate(members[0])}
    # the rail an inter-node op of channel k leaves by: its GPU's own NIC, shifted by k
    # (paths.PathTable._rail_gpus)
    rails, home = _placed_rails(topology, np.asarray(topology.router.rank_node), gpus)
    n_rails = max(len(rails.get(node_of[0], ())), 1)
    orders = local.tolist()
    best = _exit_rings(orders, members, where, home, n_rails)
    if len(orders) != n_rails:
        # NCCL starts channel c at NET nets[c % netCount] and takes bwInter off that NIC while
        # the links allow (search.cc ncclTopoSearchRecNet): the channels go round the node's
        # NICs, one each. Where the node's in-node rings are not one per NIC (a 4-GPU mesh:
        # 6 rings, 4 NICs) a channel per NIC, the rings taken in turn, unless that carries less
        per_nic = _exit_rings([orders[k % len(orders)] for k in range(n_rails)], members, where,
                              home, n_rails)
        if _carried(topology, per_nic) >= _carried(topology, best) * (1 - 1e-9):
            best = per_nic
    return best


def _exit_rings(orders: list[list[int]], members: list[list[int]], where: dict[int, int],
                home: Any, n_rails: int) -> npt.NDArray[np.int64]:
    """The rings over all nodes, each of `orders` rotated to leave a node by the NIC rail (then
    GPU) fewest channels leave by so far."""
    g = len(members[0])
    used = np.zeros(n_rails, dtype=np.int64)
    exits = np.zeros(g, dtype=np.int64)
    rings = []
    for k, order in enumerate(orders):
        pos = [where[x] for x in order]

        def rail(i: int, k: int = k) -> int:
            return (int(home.get(members[0][i], 0)) + k) % n_rails

        last = min(pos, key=lambda i: (used[rail(i)], exits[i], i))  # the least used way out
        used[rail(last)] += 1
        exits[last] += 1
        turned = np.roll(pos, g - 1 - pos.index(last))
        rings.append(np.concatenate([np.asarray(m)[turned] for m in members]))
    return np.asarray(rings, dtype=np.int64)


def _carried(topology: Topology, rings: npt.NDArray[np.int64]) -> float:
    """channels x what the busiest link lets each carry (NCCL's search objective,
    nChannels x bw): every hop of every ring, the network hops included, shares its links."""
    paths = PathTable(topology)
    src = rings.reshape(-1)
    dst = np.roll(rings, -1, axis=1).reshape(-1)
    channel = np.repeat(np.arange(len(rings)), rings.shape[1])  # ring k: channel k's rails
    table = paths.routes(src, dst, channel)
    hops = table[table >= 0]
    use = np.bincount(hops, minlength=len(paths.capacity))
    on = use > 0
    return len(rings) * float((paths.capacity[on] / use[on]).min())


def _over_gpu_links(topology: Topology, rings: npt.NDArray[np.int64]) -> bool:
    """Whether every hop of every ring is a GPU-to-GPU link class (NVLink / xGMI)."""
    paths = PathTable(topology)
    src = rings.reshape(-1)
    dst = np.roll(rings, -1, axis=1).reshape(-1)
    _, cls, _, _ = paths.geometry(paths.routes(src, dst, 0))
    return bool((np.asarray(cls) == CLASS_NAMES.index("nvlink")).all())
