"""NCCL's algorithms by NCCL's names, and the ones that are not schedules, as closed forms.

`NCCL_ALGO` spells NCCL's algorithms ring, tree, nvls, nvls_tree, collnet_direct,
collnet_chain and pat (NCCL's env.rst; `src/graph/tuning.cc` indexes them Tree, Ring,
CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT). `auto` chooses among the ones NCCL's tuner
may use for a collective on a topology (`candidates`), as NCCL does (tuning.cc):

- all-reduce: ring, tree, nvls on one node whose NVSwitch reduces, nvls_tree across such
  nodes (NVLS alone spans nodes only together with CollNet), collnet_* only with an in-network
  reduction fabric (IB SHARP; no catalog fabric has one, so they are refused with the reason);
- all-gather / reduce-scatter: ring, and pat where NCCL enables it by default (one GPU per node);
- broadcast / reduce: ring; all-to-all, send/recv, gather, scatter: grouped point-to-point.

`ring` and the point-to-point ones are schedules (algorithms/); `tree`, `nvls` and `nvls_tree`
are closed forms here, costed from the topology's links and the same protocol model:

- tree (trees.cc): a chain through the GPUs of each node and a double binary tree across the
  nodes' chain heads, one per channel, pipelined. Each GPU sends the buffer up the chain
  (reduce) and down (broadcast): where both go out of one port (an NVSwitch node) the port
  carries 2S, over point-to-point links S each way. Across nodes, each binary tree carries
  half the buffer, and the busiest node's NICs carry tree_net_factor(n) x S per direction: S
  on 2 nodes (each node is the root of one tree and the leaf of the other: the CSCS Alps
  2-node log reaches 158 GB/s busbw on 4 x 25 GB/s NICs, beyond any ring's 100),
  1.5S on 3, and 2S from 4 (a node inner in one tree and a leaf in the other receives 3/2 +
  1/2 of the buffer). NCCL's treeCorrectionFactor, its measured efficiency of trees by size,
  scales the bandwidth term below 512 MiB.
- nvls / nvls_tree: in-switch reduction; see `nvls`.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple, TypedDict

import numpy as np
import numpy.typing as npt

from ..collectives import BufferLayout, Collective, layout
from ..dtypes import DTypeLike
from ..errors import ConfigError
from . import constants as K
from . import nccl_tuning
from .caches import per_placement, topology_memo
from .nccl_trees import positions, tree_fabric_slowdown, tree_net_factor, tree_run_channels
from .paths import NET, PathTable
from .protocol import (Protocol, generation_of, get_protocol, net_stack_floor_s,
                       net_sync_s)
from .result import LinkBusy, RankTimeline, SimResult
from .rings import ring_orders
from .versions import value

if TYPE_CHECKING:
    from ..topology import Topology

NCCL_ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree", "collnet_direct", "collnet_chain",
                   "pat")
# NCCL_ALGO's spellings (any case, with or without underscores) -> the names above
_SPELLINGS = {name.replace("_", ""): name for name in NCCL_ALGORITHMS}
CLOSED_FORMS = ("tree", "nvls", "nvls_tree")
# PAT (NCCL 2.23, arXiv 2506.20252) is Bruck-like: log2(P) steps, each moving a power-of-two
# share; the schedules with that shape stand for it.
PAT_SCHEDULES = {"all_gather": "bruck", "reduce_scatter": "recursive_halving"}
NVLS_COLLECTIVES = ("all_reduce",)
P2P_COLLECTIVES = ("all_to_all", "sendrecv", "gather", "scatter")


def from_nccl_algo(value: str) -> str:
    """gpucomm's name for one NCCL_ALGO value ("Tree", "NVLSTree", "CollNetDirect", ...)."""
    name = _SPELLINGS.get(str(value).strip().lower().replace("_", ""))
    if name is None:
        raise ConfigError(f"NCCL_ALGO={value}: not one of NCCL's algorithms "
                          f"({', '.join(NCCL_ALGORITHMS)})")
    return name


def candidates(coll: Collective, topology: Topology, placement: npt.ArrayLike) -> list[str]:
    """The algorithms NCCL's tuner may choose from for `coll` on these ranks."""
    name = coll.name
    nodes = len(node_groups(topology, placement))
    if name in P2P_COLLECTIVES:
        return ["grouped" if name == "all_to_all" else "direct"]
    if name == "all_reduce":
        out = ["ring", "tree"]
        if nvls_ok(coll, topology):
            out.append("nvls" if nodes == 1 else "nvls_tree")
        return out
    if name in ("all_gather", "reduce_scatter"):
        per_node = max(len(v) for v in node_groups(topology, placement).values())
        return ["ring", "pat"] if nodes > 1 and per_node == 1 else ["ring"]
    if name in ("broadcast", "reduce"):
        return ["ring"]
    return []


def check(name: str, coll: Collective, topology: Topology, placement: npt.ArrayLike) -> None:
    """Refuse an NCCL algorithm where NCCL itself would not run it, saying why."""
    nodes = len(node_groups(topology, placement))
    if name.startswith("collnet"):
        raise ConfigError(f"{name} needs an in-network reduction fabric (CollNet plugin, e.g. "
                          f"IB SHARP); topology {topology.name!r} has none: use ring, tree"
                          + (", nvls_tree" if nvls_ok(coll, topology) and nodes > 1 else ""))
    if name in ("nvls", "nvls_tree"):
        if not nvls_ok(coll, topology):
            raise ConfigError(f"{name} needs an NVSwitch that reduces (topology "
                              f"{topology.name!r} has none) and one of "
                              f"{', '.join(NVLS_COLLECTIVES)}")
        if name == "nvls" and nodes > 1:
            raise ConfigError(f"nvls spans {nodes} nodes only with CollNet (NCCL); across "
                              "nodes use nvls_tree (NVLS inside the node, a tree across)")
        if name == "nvls_tree" and nodes == 1:
            raise ConfigError("nvls_tree is NVLS inside nodes and a tree across them: it needs "
                              "ranks on 2 or more nodes (on one node use nvls)")
    if name == "tree" and coll.name != "all_reduce":
        raise ConfigError(f"NCCL's tree serves all_reduce only, not {coll.name}: use ring")
    if name == "pat" and coll.name not in ("all_gather", "reduce_scatter"):
        raise ConfigError(f"pat serves all_gather and reduce_scatter only, not {coll.name}")


def schedule_of(collective: str, algorithm: str) -> str | None:
    """The registered schedule an algorithm name runs as; None for the closed forms."""
    if algorithm in CLOSED_FORMS:
        return None
    return PAT_SCHEDULES[collective] if algorithm == "pat" else algorithm


def nvls_ok(coll: Collective, topology: Topology) -> bool:
    gen = generation_of(topology)
    return (coll.name in NVLS_COLLECTIVES and bool(getattr(topology, "in_switch_reduction", False))
            and K.NVLS_EFFICIENCY.get(gen, 0) > 0)


def node_groups(topology: Topology, placement: npt.ArrayLike) -> dict[int, list[int]]:
    """Node -> the placed ranks on it, in placement order (nodes in order of first rank).
    Remembered per (topology, placement): the closed forms ask for it several times per
    prediction (a new dict each time; the rank lists are shared: read them, do not edit)."""
    placed = np.asarray(placement, dtype=np.int64).reshape(-1)
    groups = per_placement(topology_memo(topology).groups, topology, placed, _node_groups)
    return dict(groups)


def _node_groups(topology: Topology, placed: npt.NDArray[np.int64]) -> dict[int, list[int]]:
    if not placed.size:
        return {}
    node = np.asarray(topology.router.rank_node)[placed]
    order = np.argsort(node, kind="stable")  # by node, placement order within a node
    ns = node[order]
    starts = np.flatnonzero(np.r_[True, ns[1:] != ns[:-1]])
    members = placed[order].tolist()
    bounds = starts.tolist() + [len(order)]
    groups = {k: members[a:b] for k, a, b in zip(ns[starts].tolist(), bounds, bounds[1:])}
    first = np.argsort(order[starts], kind="stable")  # nodes by their first placed rank
    return {k: groups[k] for k in ns[starts][first].tolist()}


class _Chain(NamedTuple):
    """The longest node's chain of a tree (built by name; the tree unpacks it)."""
    gpus: int  # GPUs on the chain
    capacity: float  # per transfer (shared links)
    cls: int  # path class
    latency_s: float
    transfers: npt.NDArray[np.float64]  # per link
    links: npt.NDArray[np.int64]


class _Shape(TypedDict, total=False):
    """_shape's answer; `pair` only where a node has 2 or more ranks."""
    nodes: int
    g: int  # ranks on the largest node
    chain: _Chain | None
    net: tuple[float, float] | None  # (latency, payload capacity) of a node's NICs for the
    # tree's connections on this fabric; 1 node: None
    nic: tuple[float, float]  # the same on a fabric that never collides (_net)
    nvls_net: tuple[float, float]  # the same for nvls_tree's connections (_nvls_net)
    pair: float  # capacity between the chain's first two ranks
    ring_links: npt.NDArray[np.int64]


def _nvls_net(shape: _Shape, paths: PathTable, topology: Topology,
              placement: npt.ArrayLike) -> tuple[float, float] | None:
    """shape's `net` for nvls_tree's own connections (tree_fabric_slowdown with nvls),
    computed on first use and kept in the shape."""
    if shape["net"] is None:
        return None
    if "nvls_net" not in shape:
        lat_net, nic = shape["nic"]
        slow = tree_fabric_slowdown(paths, placement, node_groups(topology, placement), True)
        shape["nvls_net"] = (lat_net, nic / slow)
    return shape["nvls_net"]


def _net(paths: PathTable, placement: npt.ArrayLike,
         nodes: dict[int, list[int]]) -> tuple[float, float]:
    """(latency, total payload capacity) of one node's NICs for this placement."""
    first = positions(placement, [v[0] for v in nodes.values()][:2])
    table = paths.routes(first[:1], first[1:2], 0)
    lat_s, _, cap = paths.properties(table)
    return float(lat_s[0]), float(cap[0]) * paths.rails_per_node


def _rate(pr: Protocol, capacity: float, cls: int, nch: int) -> float:
    """Payload rate of `nch` channels sharing `capacity`, each under the protocol's per-channel
    limits (wire efficiency, caps, one message per overhead on network paths)."""
    return nch * float(pr.op_rate(capacity / nch, cls, lanes=1, channels=nch))


def _result(coll: Collective, name: str, proto: str, model: str, lay: BufferLayout, p: int,
            t: float, busy: Mapping[int, float], nch: int) -> SimResult:
    algbw, busbw = lay.busbw(t)
    timeline = RankTimeline(p, t, int(lay.size // p))
    return SimResult(collective=lay.collective.name, algorithm=name, protocol=proto,
                     model=model, nranks=p, size=lay.size, count=lay.count,
                     dtype=lay.dtype.name, time_s=t, algbw_GBps=algbw, busbw_GBps=busbw,
                     link_busy_s=busy, events=1, ops=p, timeline=timeline, nccl_channels=nch)


def chain_link_load(paths: PathTable, fwd: npt.NDArray[np.int64], back: npt.NDArray[np.int64]
                    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], float]:
    """The links a tree's chain puts bytes on, how many of the chain's transfers cross each,
    and the chain's capacity: min over links of capacity / transfers.

    A tree all-reduce sends every byte up the chain (reduce) and down it (broadcast), both
    at once, pipelined: each edge's route in each direction carries the whole buffer. Where
    routes share a link the link carries each of them: a middle GPU behind a switch port sends
    up and down through that one port (2 transfers), and two GPUs without P2P under one PCIe
    switch both cross its uplink to host memory, one direction's route writing host memory
    and the other reading it (NCCL's SHM transport), so the uplink carries both (2)."""
    used = np.concatenate([fwd[fwd >= 0], back[back >= 0]]).astype(np.int64)
    links, count = np.unique(used, return_counts=True)
    if not links.size:
        return links, count.astype(np.float64), float("inf")
    share = float((np.asarray(paths.capacity)[links] / count).min())
    return links, count.astype(np.float64), share


def _shape(paths: PathTable, topology: Topology, placement: npt.ArrayLike) -> _Shape:
    """What the closed forms need of a placement, whatever the size: node count, the longest
    node's chain (its capacity per transfer where its routes share links, class, latency,
    transfers per link, links; chain_link_load), the NICs, and the ring of neighbours' links
    (for NVLS's busy time). Cached on the placement's path table: a sweep's sizes share it."""
    hit: _Shape | None = paths.cache.nccl_shape
    if hit is not None:
        return hit
    nodes = node_groups(topology, placement)
    out: _Shape = {"nodes": len(nodes), "g": max(len(v) for v in nodes.values()), "chain": None,
           "net": None}
    if len(nodes) > 1:
        lat_net, nic = out["nic"] = _net(paths, placement, nodes)
        out["net"] = (lat_net, nic / tree_fabric_slowdown(paths, placement, nodes))
    chain = max(nodes.values(), key=len)
    orders = ring_orders(topology, chain) if len(chain) > 2 else None
    if orders is not None:  # NCCL's tree follows its searched graph inside the node, not the
        chain = [int(r) for r in orders[0]]  # rank order (on DGX-1 that crosses GPU 3-4 on PCIe)
    if len(chain) > 1:
        idx = positions(placement, chain)
        fwd = paths.routes(idx[:-1], idx[1:], 0)
        back = paths.routes(idx[1:], idx[:-1], 0)
        lat_s, cls, capf = paths.properties(fwd)
        links, count, share = chain_link_load(paths, fwd, back)
        out["chain"] = _Chain(gpus=len(chain), capacity=min(float(capf.min()), share),
                              cls=int(cls.max()), latency_s=float(lat_s.max()),
                              transfers=count, links=links)
        out["pair"] = float(paths.properties(paths.routes(idx[:1], idx[1:2], 0))[2][0])
    p = len(np.asarray(placement).reshape(-1))
    ring = paths.routes(np.arange(p), np.roll(np.arange(p), -1), 0)
    out["ring_links"] = np.unique(ring[ring >= 0])
    paths.cache.nccl_shape = out
    return out


def _loaded(shape: _Shape, net: tuple[float, float] | None, slowdown: float | None
            ) -> tuple[float, float] | None:
    """`net` (the shape's NICs for a tree's connections), or where `slowdown` is given the
    NICs of a fabric that never collides (shape's `nic`) slowed by it."""
    if net is None or slowdown is None:
        return net
    lat_net, nic = shape["nic"]
    return lat_net, nic / slowdown


def net_hop_floor(topology: Topology, placement: npt.ArrayLike, proto: str,
                  paths: PathTable) -> float:
    """Least software latency of one network step here (protocol.net_stack_floor_s) less the
    links' own latency on the path between nodes, which the step already pays."""
    return net_hop_floors(topology, placement, proto, paths)[0]


def net_hop_floors(topology: Topology, placement: npt.ArrayLike, proto: str,
                   paths: PathTable) -> tuple[float, float]:
    """net_hop_floor, and the same from the NIC kind's figure alone (net_stack_floor_s with
    measured=False: what a crossing of a one-channel ring pays), the path looked up once."""
    floors = [net_stack_floor_s(topology, proto, measured) for measured in (True, False)]
    nodes = node_groups(topology, placement) if max(floors) > 0 else {}
    if len(nodes) < 2:
        return 0.0, 0.0
    link = _net(paths, placement, nodes)[0]
    return max(floors[0] - link, 0.0), max(floors[1] - link, 0.0)


def _busy(links: npt.NDArray[np.int64], carried: npt.NDArray[np.float64],
          capacity: npt.NDArray[np.float64], t: float) -> LinkBusy:
    return LinkBusy(np.minimum(carried / capacity[links], t), links=links)


def tree(coll: Collective, nbytes: int, topology: Topology, placement: npt.NDArray[np.int64],
         dtype: DTypeLike, proto: str, paths: PathTable, model: str, *,
         slowdown: float | None = None) -> SimResult | None:
    """NCCL's tree all-reduce (chain in the node, double binary tree across nodes).
    `slowdown`: the fabric's slowdown of its network part where the caller knows it (other
    jobs' trees on the cables, trees_together); default: this placement's alone."""
    p = len(placement)
    lay = layout(coll, nbytes, dtype, p)
    shape = _shape(paths, topology, placement)
    n = shape["nodes"]
    gen = generation_of(topology)
    pr = get_protocol(proto, gen, n)
    gen = gen if gen in K.TREE_PER_CHANNEL_BW else K.DEFAULT_GENERATION  # NCCL's tables
    col = 0 if n <= 1 else 1 if n == 2 else 2
    # the channels NCCL runs the tree on (tree_run_channels: comm->nChannels), one timed count
    # for its per-channel rates, its Simple cap, its fill and the channels it reports
    nch = tree_run_channels(topology, n)
    # NCCL's per-channel caps on the tree's bus bandwidth (tuning.cc perChMaxTreeBws,
    # perChMaxTreeLL128Bws). LL128's counts the search's channels, as tuning.cc does
    # (tree_graph_channels): an LL128 tree moves every line through its SMs' threads, which
    # poll each 128-byte line's flag (prims_ll128.h recvReduceSendCopy), so across nodes it runs
    # at its SMs' pace, not the NICs': 2-node trees measure at that cap (Snellius, 4 x H100 on
    # 4 x HDR, 4 search channels: 118.7 GB/s busbw at 256 MiB against 4 x 36.7 / 2 x 7/4 =
    # 128.5; OCI, 8 x A100 on 8 x 200G, 8 channels: 156-165 at 128-512 MiB against
    # 8 x 20 / 2 x 15/8 = 150), about 0.8 of the Simple tree beside them. Simple's cap counts
    # every channel the tree runs on (nch: 8 on Snellius, 16 on OCI, each its own SM): Simple
    # trees measure above it counted NCCL's way (Snellius 156 GB/s against 145, OCI 238 against
    # 177), the NICs being their limit.
    if proto == "ll128":
        cap = value("TREE_LL128_PER_CHANNEL_BW")[gen][col] * K.GB * \
            tree_graph_channels(topology, n)
    elif proto == "simple":
        cap = value("TREE_PER_CHANNEL_BW")[gen][col] * K.GB * nch
    else:
        cap = float("inf")
    size = float(lay.size)
    hop = value("TREE_HOP_LATENCY_S")[proto]
    t_intra, lat = 0.0, value("TREE_BASE_LATENCY_S")[proto]
    if shape["chain"] is not None:
        length, capf, cls, lat_s, _, _ = shape["chain"]  # capf: per transfer (shared links)
        rate = min(_rate(pr, capf, cls, nch), cap)
        t_intra = size / rate
        lat += 2 * (length - 1) * (hop[cls] + lat_s)
    t_net = 0.0
    net = _loaded(shape, shape["net"], slowdown)
    if net is not None:  # 2 or more nodes
        lat_net, nic = net
        # the NICs carry f x size each way; NCCL's per-channel cap is on its busBw, which for a
        # tree is twice the algBw at any node count (tuning.cc), whatever the NICs carry
        t_net = size * max(tree_net_factor(n) / _rate(pr, nic, NET, nch), 2.0 / cap)
        hop_net = max(hop[NET], net_hop_floor(topology, placement, proto, paths)) + \
            net_sync_s(topology, size / p)
        lat += 2 * np.ceil(np.log2(n)) * (hop_net + lat_net)
    # tuning.cc ncclTopoGetAlgoTime reads the tree's factor for logSize < 23 only (v2.18.3-1 ..
    # v2.29.7-1; 2.29's 24th entry is NVLSTree's): none from 512 MiB
    table = value("TREE_CORRECTION")[proto]
    k = int(np.log2(max(size, 64) / 64))
    correction = table[k] if k < min(len(table), 23) else 1.0
    t = lat + max(t_intra, t_net) / correction + _tree_fill(shape, proto, size, nch, t_intra,
                                                            t_net)
    busy: Mapping[int, float] = {}
    if shape["chain"] is not None:
        count, links = shape["chain"].transfers, shape["chain"].links
        busy = _busy(links, size * count / 2, paths.capacity, t)
    return _result(coll, "tree", proto, model, lay, p, t, busy, nch)


def tree_graph_channels(topology: Topology, nodes: int) -> int:
    """The channels NCCL's tuning counts for a tree's per-channel caps here (tuning.cc: busBw
    capped at graphs[TREE]->nChannels x perChMaxTreeLL128Bw): across nodes the search's
    (nccl_tuning.topology_tree_graph_channels: 4 on 4 x HDR, 8 on 8 x NDR), which init.cc
    sets before ncclTopoPostset (connect.cc) doubles comm->nChannels for the mirror binary tree
    (the `8 coll channels` NCCL prints there); so each of those figures is what a pair of
    channels, one SM in each tree, carries. On one node, or nodes without NICs: TREE_CHANNELS."""
    searched = nccl_tuning.topology_tree_graph_channels(topology) if nodes > 1 else None
    return searched or K.TREE_CHANNELS


def tree_chunk_bytes(proto: str, nbytes: float, nch: int, nodes: int, ppn: int) -> float:
    """Payload bytes of one tree chunk (enqueue.cc calcCollChunking; constants.py)."""
    chunk = float(K.TREE_CHUNK_BYTES[proto])
    if proto == "simple":  # NCCL <= 2.19 only (versions.py)
        depth = ppn - 1 + int(np.log2(max(nodes, 1)))  # connect.cc; log2i: the floor
        for factor, floor in value("TREE_SIMPLE_CHUNK_RULES"):
            while nbytes // (nch * chunk) < depth * factor and chunk > floor:
                chunk //= 2
    elif proto == "ll128":
        steps = 1 + int(np.log2(max(nodes, 1))) + 0.1 * ppn  # log2i: the floor
        for factor, floor in K.TREE_LL128_CHUNK_RULES:
            while nbytes // (nch * chunk) < steps * factor / ppn and chunk > floor:
                chunk //= 2
    return min(chunk, nbytes / nch)


def _tree_fill(shape: _Shape, proto: str, size: float, nch: int, t_intra: float,
               t_net: float) -> float:
    """The tree pipeline's fill: a chunk climbs (ppn-1) chain hops and log2(nodes) network
    hops and comes back down. A hop that forwards a chunk only once all of it has arrived
    adds that chunk's time at the hop's per-channel rate (every such hop but the slowest,
    whose time is the bandwidth term). Network hops are such hops for every protocol: the
    proxy sends a slot once the GPU has filled it (transport/net.cc sendProxyProgress: after
    the GPU posts the slot, and for LL, or LL128 staged in host memory, once every line's flag
    is set). Over NVLink only Simple is: its receiver waits on
    the slot's tail counter, while LL and LL128 flag every 8 / 128-byte line and forward
    lines as they land (their cost per hop is the hop latency, already counted)."""
    if size <= 0:
        return 0.0
    n, g = shape["nodes"], shape["g"]
    chunk = tree_chunk_bytes(proto, size, nch, n, g)
    per_chunk = chunk * nch / size  # a chunk's share of the whole buffer's time on a hop
    hops = [t_intra * per_chunk] * (2 * (g - 1) if proto == "simple" else 0) + \
        [t_net * per_chunk] * (2 * int(np.ceil(np.log2(n))) if n > 1 else 0)
    return float(sum(hops) - max(hops)) if hops else 0.0


def nvls(coll: Collective, nbytes: int, topology: Topology, placement: npt.NDArray[np.int64],
         dtype: DTypeLike, proto: str, paths: PathTable, model: str, *,
         slowdown: float | None = None) -> SimResult | None:
    """In-switch reduction (NVLink SHARP): each GPU's share is reduced by the switch.

    All-reduce with multimem loads/stores: a GPU's link to the switch carries S + S/g in each
    direction (the switch pulls every GPU's slice of each reduction and returns the reduced
    slice; then each GPU's reduced slice is broadcast to all). Data moves in chunks; a chunk
    reaches chunk / (chunk + overhead) of the link, the overhead set by NCCL's nvlsEfficiency
    at its default chunk, and NCCL shrinks the chunk for smaller messages (constants.py).
    Across nodes (nvls_tree) each GPU's reduced 1/g of the buffer also crosses its NIC rail,
    pipelined with the NVLink part, and the latency adds 2·log2(nodes) network hops.
    `slowdown`: as tree's, for nvls_tree's connections.
    """
    if proto != "simple":
        return None  # NVLS runs the Simple protocol only
    lay = layout(coll, nbytes, dtype, len(placement))
    gen = generation_of(topology)
    shape = _shape(paths, topology, placement)
    g, n = shape["g"], shape["nodes"]
    if g < 2:
        return None
    size = float(lay.size)
    chunk = nvls_tree_chunk_bytes(size, g, n) if n > 1 else None
    eff = nvls_efficiency(gen, size, g, chunk)
    t_nvl = size * (1 + 1 / g) / (shape["pair"] * eff)
    lat = value("NVLS_LATENCY_S")
    t_net, f, fill = 0.0, 1.0, 0.0
    net = _loaded(shape, _nvls_net(shape, paths, topology, placement), slowdown)
    if net is not None and chunk is not None:  # 2 or more nodes
        lat_net, nic = net
        f = tree_net_factor(n)
        t_net = size * f / nic
        # no faster than NCCL's per-channel NVLSTree cap over the head channels (constants.py)
        per_ch = K.NVLSTREE_PER_CHANNEL_BW.get(gen, (0.0,) * 3)[1 if n == 2 else 2] * K.GB
        if per_ch > 0:
            heads = nvls_heads(g, paths.rails_per_node, n)
            t_net = max(t_net, size * 2 * (len(placement) - 1) / len(placement)
                        / (heads * per_ch))
        hop_net = max(K.NVLSTREE_NET_LATENCY_S,
                      net_hop_floor(topology, placement, proto, paths)) + \
            net_sync_s(topology, size / len(placement))
        lat += 2 * np.log2(n) * (hop_net + lat_net)
        # the pipeline's fill: a chunk crosses the switch twice and 2 log2(n) network hops;
        # every hop but the slowest adds its time for one chunk (per channel)
        per_chunk = min(chunk * K.NVLS_CHANNELS / size, 1.0)
        hops = [t_nvl * per_chunk] * 2 + [t_net * per_chunk] * (2 * int(np.ceil(np.log2(n))))
        fill = sum(hops) - max(hops)
    t = lat + max(t_nvl, t_net) + fill
    # every GPU's links to and from the switch carry S(1 + 1/g) (the ring of pairs covers each
    # GPU's uplink and downlink once); the NIC rails carry the inter-node shards
    links = shape["ring_links"]
    carried = np.where(paths.link_class[links] != 0, size * f / g, size * (1 + 1 / g) / eff)
    busy = _busy(links, carried, paths.capacity, t)
    name = "nvls" if n == 1 else "nvls_tree"
    return _result(coll, name, "simple", model, lay, len(placement), t, busy, K.NVLS_CHANNELS)


def nvls_heads(gpus: int, rails: int, nodes: int) -> int:
    """The NVLS graph's channels (its heads), which NCCL's model counts for NVLS and NVLSTree
    (tuning.cc: busBw = graphs[a]->nChannels x bw; init.cc: graphs[NVLS_TREE] is the NVLS
    graph): `gpus` per node at most, capped at NCCL_MAX_NVLS_ARITY (search.cc
    ncclTopoCompute), and across nodes one per NIC whose local GPU is not a head yet
    (search.cc ncclTopoSearchRecNet), so at most `rails`, the NICs next to the node's GPUs.
    On one node NCCL drops the NICs (paths.cc ncclTopoTrimSystem) and every GPU is a head."""
    return max(min(gpus, rails if nodes > 1 else gpus, K.NVLS_MAX_ARITY), 1)


def nvls_efficiency(generation: str, nbytes: float, gpus: int,
                    chunk: float | None = None) -> float:
    """Fraction of NVLink bandwidth NVLS reaches for a message (chunk size rules of NCCL;
    `chunk`: the chunk where the caller knows it, NVLSTree's)."""
    full = K.NVLS_EFFICIENCY.get(generation, 0.0)
    if full <= 0:
        return 0.0
    overhead = K.NVLS_CHUNK_BYTES * (1 - full) / full
    if chunk is None:
        chunk = K.NVLS_CHUNK_BYTES
        concurrent = K.NVLS_CHANNELS * gpus
        for factor, smaller in K.NVLS_CHUNK_STEPS:
            if nbytes < factor * concurrent * chunk and chunk > smaller:
                chunk = smaller
    return chunk / (chunk + overhead)


def nvls_tree_chunk_bytes(nbytes: float, gpus: int, nodes: int) -> int:
    """NVLSTree's chunk for a message (enqueue.cc calcCollChunking; constants.py)."""
    chunk = K.NVLS_CHUNK_BYTES
    if nodes >= 4:
        chunk = min(chunk, K.NVLSTREE_MAX_CHUNK_4NODES)
    concurrent = K.NVLS_CHANNELS * gpus
    for factor, smaller in K.NVLSTREE_CHUNK_STEPS:
        if nbytes < factor * concurrent * chunk and chunk > smaller:
            chunk = smaller
    return chunk


CLOSED = {"tree": tree, "nvls": nvls, "nvls_tree": nvls}
