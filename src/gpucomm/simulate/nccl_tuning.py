"""NCCL's own table-free tuning model: which (algorithm, protocol) NCCL runs, and its estimate.

NVIDIA/nccl src/graph/tuning.cc (snapshot 5067397, 2026-06): `ncclTopoTuneModel` sets, per
collective, algorithm and protocol, a bus bandwidth (`nChannels * bw`, bw = the ring/tree
graph's bwIntra on <= 2 nodes, else bwInter; then the LL/LL128/tree/PAT refinements with
llMaxBws, perChMaxRingLL128Bws, perChMaxTreeBws, perChMaxTreeLL128Bws, perChMaxNVLSTreeBws,
nvlsEfficiency; busBw -> algBw by nRanks/nsteps or .5) and a latency (baseLatencies +
hwLatencies by path class, `interLat += graphs[a]->latencyInter` — the net plugin's latency
property — twice for Simple, netOverhead x3 for Simple on inter-node rings);
`ncclTopoGetAlgoTime` is `lat + bytes / (1000 * bw)` with treeCorrectionFactor and the ring
plateau (x1.4 from sm80); src/enqueue.cc (updateCollCostTable / topoGetAlgoInfo) runs the
pair of least estimated time, with ring on fp8 over more than 8 ranks ranked 1024x slower.
Facts and formulas only; no code copied.

gpucomm times a collective with its own model (predict.py); `ranked` orders the pairs gpucomm
may run as NCCL's model would, NCCL running the first, so `predict(select="nccl")` times what NCCL
runs rather than what gpucomm's own timing finds fastest.

What NCCL reads from its topology search is taken here from gpucomm's topology: the GPU's
NVLink/xGMI figure as NCCL's topo.h has it (catalog `nccl_GBps`, all links: NCCL's search
packs rings over all of them; PCIe boxes get their PCIe figure), the node's NICs (catalog
`nccl_GBps`); on one node the ring channel count gpucomm's model gives, across nodes the ring
and tree graphs NCCL's search finds from the NICs (net_graph: a channel per NIC at a speed of
its speed array, the tree's bwIntra raised to twice its bwInter, which is what tuning.cc reads
on 2 nodes) and, where the caller gives it, the NVLS graph's heads (nccl.nvls_heads; else
NVLS and NVLSTree are timed over the ring's count too). The net plugin's latency is the
catalog's plugin_latency_us.
"""
from __future__ import annotations

import math
from functools import lru_cache
from collections.abc import Collection
from typing import TYPE_CHECKING

from ..collectives import get_collective
from ..hardware import get_gpu, get_link_tech, get_nic
from . import constants as K
from . import versions
from .caches import topology_memo
from .constants import TREE_CORRECTION

if TYPE_CHECKING:
    from ..hardware import GPU
    from ..topology import Topology

Estimate = tuple[float, str, str]  # (time in us, algorithm, protocol)
PerProto = tuple[float, float, float]  # us, by protocol (LL, LL128, Simple)
Triple = tuple[float, float, float]  # GB/s per channel, by node-count class (N1, N2, N4)

# tuning.cc's tables are gpucomm's own (constants.py), indexed as tuning.cc indexes them:
# by compute-capability class and protocol
GENERATIONS = ("volta", "ampere", "hopper", "blackwell")
ARCH = {"sm70": 0, "sm80": 1, "sm86": 1, "sm89": 1, "sm90": 2, "sm100": 3}
PROTOS = ("ll", "ll128", "simple")
MODELLED = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
# tuning.cc perChMaxNVLSTreeBws[arch][nodes class]
NVLS_TREE_BW = tuple(K.NVLSTREE_PER_CHANNEL_BW[g] for g in GENERATIONS)
NVLS_EFF = tuple(K.NVLS_EFFICIENCY[g] for g in GENERATIONS)
NVLS_ALGOS = ("nvls", "nvls_tree")  # timed over the NVLS graph's channels, not the ring's


def _us(seconds: dict[str, float]) -> PerProto:
    a, b, c = (round(seconds[p] / K.US, 6) for p in PROTOS)
    return a, b, c


BASE: dict[str, PerProto] = {
    "tree": _us(K.TREE_BASE_LATENCY_S), "ring": _us(K.BASE_LATENCY_S), "nvls": (0, 0, 0),
    "nvls_tree": (0, 0, 0), "pat": (8.0, 8.0, 8.0)}


def _hw(i: int, path: str, **others: PerProto) -> dict[str, PerProto]:
    """hwLatencies[hw][algorithm][protocol], us: Tree (column i) and Ring (path class) from
    constants, the other algorithms as tuning.cc gives them."""
    return {"tree": _us({p: K.TREE_HOP_LATENCY_S[p][i] for p in PROTOS}),
            "ring": _us({p: K.HOP_LATENCY_S[p][path] for p in PROTOS}), **others}


NVLS_US = round(K.NVLS_LATENCY_S / K.US, 6)
HW: dict[str, dict[str, PerProto]] = {
    "nvlink": _hw(0, "nvlink", nvls=(0, 0, NVLS_US), nvls_tree=(0, 0, NVLS_US), pat=(0, 0, 4.0)),
    "pci": _hw(1, "pcie", nvls=(0, 0, 0), nvls_tree=(0, 0, 0), pat=(0, 0, 4.0)),
    "net": _hw(2, "net", nvls=(0, 0, 18), pat=(0, 0, 14.0),
               nvls_tree=(0, 0, round(K.NVLSTREE_NET_LATENCY_S / K.US, 6)))}


@lru_cache(maxsize=None)
def _tables(version: versions.Version | None) -> tuple[dict[str, PerProto],
                                                         dict[str, dict[str, PerProto]]]:
    """(BASE, HW) with the ring's and tree's latencies of NCCL `version` (versions.HISTORY:
    baseLat and hwLat changed from release to release); BASE, HW for the newest."""
    if version is None:
        return BASE, HW
    base = {**BASE, "tree": _us(versions.value("TREE_BASE_LATENCY_S", version)),
            "ring": _us(versions.value("BASE_LATENCY_S", version))}
    hop = versions.value("HOP_LATENCY_S", version)
    tree_hop = versions.value("TREE_HOP_LATENCY_S", version)
    hw = {hw_class: {**HW[hw_class], "tree": _us({p: tree_hop[p][i] for p in PROTOS}),
                     "ring": _us({p: hop[p][path] for p in PROTOS})}
          for i, (hw_class, path) in enumerate((("nvlink", "nvlink"), ("pci", "pcie"),
                                                ("net", "net")))}
    return base, hw


def net_latency_us(topo: Topology) -> float:
    """The latency property the net plugin of the topology's NICs reports, which NCCL adds to
    every inter-node step: the catalog's plugin_latency_us (aws-ofi-nccl's 75 us on p4d/p5 EFA,
    src/platform-aws.cpp; 0 for NCCL's own IB and socket transports)."""
    nic = next((d.model for d in topo.devices if d.kind == "nic" and d.model), None)
    return get_nic(nic).plugin_latency_s * 1e6 if nic else 0.0


# search.cc speedArrayInter / sm90SpeedArrayInter / sm100SpeedArrayInter (GB/s per channel;
# the same from v2.18.3-1 to v2.29.7-1 but sm100's, which is v2.29's): the speeds NCCL's search
# tries for a graph that leaves the node, fastest first
SPEEDS_INTER = {
    0: (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4,
        1.2, 0.24, 0.12),
    2: (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
        0.24, 0.12),
    3: (96.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0,
        2.4, 1.2, 0.24, 0.12)}
Graph = tuple[int, str, float, float, int]  # (arch, intra hw class, bwIntra, bwInter, nChannels)


def _graph(topo: Topology, channels: int, nodes: int = 1) -> dict[str, Graph]:
    """NCCL's ring and tree graphs as its tuning reads them (arch index, intra hw class,
    bwIntra and bwInter per channel, nChannels). On one node: `channels` over every NVLink of
    the GPU (NCCL's search packs rings over all of them, switched or a full mesh) or its PCIe
    figure, ring and tree alike. Across nodes, the search's own graphs (net_graph): the ring
    graph's bwIntra is its bwInter, and the tree graph's bwIntra is raised to twice it."""
    gpu_dev = next(d for d in topo.devices if d.kind == "gpu")
    gpu = get_gpu(gpu_dev.model)
    arch = ARCH.get(gpu.sm, 1)
    ppn = topo.gpus_per_node
    if gpu.nvlink and ppn > 1 and topo.p2p:
        total = (get_link_tech(gpu.nvlink).nccl_Bps or 0) / 1e9
        hw = "nvlink"
    else:
        total = pcie_GBps(gpu)
        hw = "pci"
    nics = _node_nics_GBps(topo)
    if nodes > 1 and nics:
        path = min(max(nics), pcie_GBps(gpu))
        n, inter, tree_intra = net_graph(gpu.sm, len(nics), path, total if ppn > 1 else None)
        return {"ring": (arch, hw, inter, inter, n), "tree": (arch, hw, tree_intra, inter, n)}
    n = max(channels, 1)
    intra = total / n
    inter = min(intra, sum(nics) / n) if nics else intra
    if ppn == 1:
        intra = inter
    return {"ring": (arch, hw, intra, inter, n), "tree": (arch, hw, intra, inter, n)}


def pcie_GBps(gpu: GPU) -> float:
    """The GPU's PCIe figure as NCCL's topo.h has it (24 GB/s where the catalog has none)."""
    return (get_link_tech(gpu.pcie).nccl_Bps or 24e9) / 1e9


def _node_nics_GBps(topo: Topology) -> list[float]:
    """NCCL's rate (GB/s) of node 0's NICs, at most one per GPU, those that have one;
    remembered on the topology (TopologyMemo.node_nics): a scan of every device, asked for
    each multi-node ring and chain predict times."""
    memo = topology_memo(topo)
    if memo.node_nics is None:
        nics = [(get_link_tech(d.model).nccl_Bps or 0) / 1e9 for d in topo.devices
                if d.kind == "nic" and d.node == 0][:max(topo.gpus_per_node, 1)]
        memo.node_nics = [b for b in nics if b > 0]
    return memo.node_nics


def coll_channels(gpu: GPU, nic: str, nics: int) -> int:
    """The collective channels NCCL prints across nodes (`N coll channels`, `Channel xx/NN`)
    on a node of `nics` NICs of catalog kind `nic` beside `gpu`s."""
    return _coll_channels(gpu, (get_link_tech(nic).nccl_Bps or 0) / 1e9, nics)


def _coll_channels(gpu: GPU, nic_GBps: float, nics: int) -> int:
    """_searched_channels doubled by connect.cc ncclTopoPostset, at most MAXCHANNELS."""
    return min(2 * _searched_channels(gpu, nic_GBps, nics), K.MAX_CHANNELS)


def _searched_channels(gpu: GPU, nic_GBps: float, nics: int) -> int:
    """net_graph's channels over the GPU->NIC path (the NIC, or the GPU's PCIe if slower)."""
    return net_graph(gpu.sm, nics, min(nic_GBps, pcie_GBps(gpu)), None)[0]


def topology_coll_channels(topo: Topology) -> int | None:
    """coll_channels of a topology's nodes (its first GPU's model, node 0's NICs as _graph
    reads them, the fastest's rate); None where its nodes have no NIC."""
    nics = _node_nics_GBps(topo)
    return _coll_channels(_first_gpu(topo), max(nics), len(nics)) if nics else None


def topology_tree_graph_channels(topo: Topology) -> int | None:
    """The channels of NCCL's tree graph across these nodes, as its tuning counts them
    (tuning.cc busBw = graphs[a]->nChannels x bw, capped at graphs[a]->nChannels x
    perChMaxTreeBw / perChMaxTreeLL128Bw): the search's (net_graph), half the collective
    channels NCCL runs (topology_coll_channels), because init.cc sets graphs[TREE]->nChannels
    before ncclTopoPostset (connect.cc) doubles comm->nChannels, the copy of channel c running
    the mirror binary tree. None where the nodes have no NIC."""
    nics = _node_nics_GBps(topo)
    return _searched_channels(_first_gpu(topo), max(nics), len(nics)) if nics else None


def _first_gpu(topo: Topology) -> GPU:
    return get_gpu(next(d for d in topo.devices if d.kind == "gpu").model)


def coll_channels_per_nic(topo: Topology) -> float:
    """NCCL's collective channels across nodes (topology_coll_channels) per NIC of a node: the
    channels whose network messages one GPU's proxy thread posts; 1 where nodes have no NIC."""
    channels, nics = topology_coll_channels(topo), _node_nics_GBps(topo)
    return channels / len(nics) if channels is not None else 1.0


def net_graph(sm: str, nics: int, path_GBps: float, nvlink_GBps: float | None
              ) -> tuple[int, float, float]:
    """(nChannels, the ring graph's bw per channel, the tree graph's bwIntra) of NCCL's search
    across nodes (search.cc ncclTopoCompute, v2.18.3-1 ... v2.29.7-1), from the node's `nics`,
    the best GPU->NIC path (`path_GBps`: the NIC's speed, or the GPU's PCIe if slower: maxBw)
    and the GPU's NVLink total (None: one GPU per node, no chain inside the node):
    - a channel per NIC at the fastest speed of speedArrayInter no faster than maxBw; the ring
      search raises bwIntra and bwInter together, so the ring graph's bwIntra is its bwInter;
    - ncclTopoDupChannels doubles the channels at half the speed (at most MAXCHANNELS/2), except
      below 25 GB/s or, from sm86, below 50 GB/s on more than 4 channels;
    - the tree graph is searched on as many channels (init.cc), at the same bwInter, then its
      bwIntra is raised along the speed array while below twice bwInter ("increase bwIntra for
      trees (2 nodes or collnet)"), as far as the GPUs' NVLink carries it: what tuning.cc's
      busBw reads at nNodes <= 2.

        >>> net_graph("sm80", 2, 24.0, 240.0)  # Polaris: 4 x A100, 2 x Slingshot
        (2, 24.0, 48.0)
        >>> net_graph("sm90", 4, 25.0, 370.8)  # 4 x H100, 4 x NDR200
        (4, 24.0, 48.0)
        >>> net_graph("sm90", 8, 48.0, 370.8)  # DGX H100: 8 x NDR, the array's top
        (8, 48.0, 48.0)
    """
    ccmin = int(sm[2:]) if sm.startswith("sm") and sm[2:].isdigit() else 80
    speeds = SPEEDS_INTER[3 if ccmin >= 100 else 2 if ccmin >= 90 else 0]
    i = next((k for k, v in enumerate(speeds) if v <= path_GBps), len(speeds) - 1)
    n, bw = nics, speeds[i]
    if bw >= 25.0 and not (ccmin > 80 and bw < 50.0 and n > 4):
        dup = min(2 * n, K.MAX_CHANNELS // 2)
        bw /= -(-dup // n)
        n = dup
    i = next((k for k, v in enumerate(speeds) if v <= bw), len(speeds) - 1)
    intra = speeds[i]
    limit = math.inf if nvlink_GBps is None else nvlink_GBps / n
    while i > 0 and intra < 2 * bw and speeds[i - 1] <= limit:
        i -= 1
        intra = speeds[i]
    return n, bw, max(intra, bw)


def estimates(coll_name: str, nbytes: int, topo: Topology, channels: int, *,
              nranks: int | None = None, nodes: int | None = None,
              net_latency: float | None = None,
              algorithms: Collection[str] | None = None,
              protocols: Collection[str] | None = None,
              nvls_channels: int | None = None) -> list[Estimate]:
    """NCCL's estimate of every (algorithm, protocol) its model has for the collective, fastest
    first ([] where it has none: point-to-point, one rank). `channels`: the ring graph's, which
    ring, tree and PAT count (init.cc: the tree graph is searched with the ring's count and both
    are set to the lesser); `nvls_channels`: the NVLS graph's heads, which NVLS and NVLSTree
    count (nccl.nvls_heads; default: `channels`); tuning.cc busBw = graphs[a]->nChannels x bw.
    `nranks`/`nodes`: the ranks taking part (default: the whole topology); `net_latency`: the
    plugin's latency in us (default: net_latency_us); `algorithms`/`protocols`: only these."""
    coll = get_collective(coll_name)
    nranks = topo.nranks if nranks is None else nranks
    nodes = max(nranks // max(topo.gpus_per_node, 1), 1) if nodes is None else max(nodes, 1)
    if coll.name not in MODELLED or nranks <= 1:
        return []
    net_lat = net_latency_us(topo) if net_latency is None else net_latency
    ppn = nranks / nodes
    graphs = {**_graph(topo, channels, nodes),
              "nvls": _graph(topo, channels if nvls_channels is None else nvls_channels)["ring"]}
    arch, intra_hw = graphs["ring"][:2]
    i2 = min(nodes, 3) - 1
    ll_max = _per_arch("LL_MAX_BW")[arch if nodes == 1 else 0][i2]
    nsteps = 2 * (nranks - 1) if coll.name == "all_reduce" else \
        nranks - 1 if coll.name in ("all_gather", "reduce_scatter") else nranks
    nvswitch_full = bool(topo.in_switch_reduction) and NVLS_EFF[arch] > 0
    out = []
    for algo in _algorithms(coll.name, nodes, ppn, nvswitch_full):
        if algorithms is not None and algo not in algorithms:
            continue
        _, _, bw_intra, bw_inter, nch = graphs["nvls" if algo in NVLS_ALGOS else
                                               "tree" if algo == "tree" else "ring"]
        for pi, proto in enumerate(PROTOS):
            if (protocols is not None and proto not in protocols) or \
                    (algo in ("nvls", "nvls_tree", "pat") and proto != "simple") or \
                    (proto == "ll128" and not _ll128_on(arch, intra_hw, ppn)):
                continue
            bw = _busbw(coll.name, algo, pi, nodes, ppn, nch, bw_intra, bw_inter, arch, i2,
                        ll_max)
            if bw <= 0:
                continue
            if not (algo != "ring" and coll.name in ("all_gather", "reduce_scatter")):
                bw *= nranks / nsteps if algo in ("ring", "nvls", "nvls_tree") else 0.5
            lat = _latency(coll.name, algo, pi, nodes, nranks, ppn, nsteps, intra_hw, net_lat)
            log_size = int(math.log2(nbytes >> 6)) if nbytes >= 64 else -1
            if algo == "tree" and coll.name == "all_reduce" and 0 <= log_size < 23:
                bw *= TREE_CORRECTION[proto][log_size]
            if algo == "ring" and proto == "simple" and nodes > 1 and coll.name == "all_reduce" \
                    and nbytes / (nch * nranks) >= 64:
                lat *= 1.4 if arch >= 1 else 1.9
            out.append((lat + nbytes / (1000 * bw), algo, proto))
    return sorted(out)


def estimate(coll_name: str, nbytes: int, topo: Topology, channels: int,
             net_latency: float = 0.0) -> Estimate | None:
    """(time_us, algorithm, protocol) NCCL's model picks, or None where it has no model."""
    found = estimates(coll_name, nbytes, topo, channels, net_latency=net_latency)
    return found[0] if found else None


def ranked(coll_name: str, nbytes: int, topo: Topology, channels: int, nranks: int, nodes: int,
           pairs: Collection[tuple[str, str]], fp8: bool = False,
           nvls_channels: int | None = None) -> list[tuple[str, str]]:
    """The (algorithm, protocol) `pairs` NCCL's model covers, in the order NCCL's tuning ranks
    them (its estimate, least first; ring on fp8 over more than 8 ranks ranked 1024x slower, as
    enqueue.cc does); NCCL runs the first. `channels` is the ring graph's count, `nvls_channels`
    the NVLS graph's (its heads: nccl.nvls_heads), which NVLS and NVLSTree count."""
    found = estimates(coll_name, nbytes, topo, channels, nranks=nranks, nodes=nodes,
                      algorithms={a for a, _ in pairs}, protocols={p for _, p in pairs},
                      nvls_channels=nvls_channels)
    keyed = sorted((t * fp8_ring_penalty(a, fp8, nranks), a, p)
                   for t, a, p in found if (a, p) in pairs)
    return [(a, p) for _, a, p in keyed]


def fp8_ring_penalty(algorithm: str, fp8: bool, nranks: int) -> float:
    """NCCL's tuner ranks ring 1024x slower for fp8 on more than 8 ranks: a long chain of
    fp8 roundings loses precision (src/enqueue.cc updateCollCostTable); the time is not
    changed, only the choice."""
    return 1024.0 if fp8 and nranks > 8 and algorithm == "ring" else 1.0


def _ll128_on(arch: int, intra_hw: str, ppn: float) -> bool:
    """LL128 on by default (tuning.cc: typeIntra <= PATH_NVB) on the GPU generations the active
    NCCL enables it on (versions LL128_GENERATIONS: Volta too, v2.8.4-1 `(minCompCap == 70 &&
    maxCompCap == 70) || (minCompCap == 80 && ...)`, 5067397 `!(minCompCap < 70 || ...)`): the
    graph's intra-node path is NVLink, or, with one GPU per node, PATH_LOC (search.cc starts
    minTypeIntra at PATH_LOC and raises it only for ngpus > 1). Whether the NICs sit close
    enough (typeInter <= PXB, or PXN on Hopper) is left to the caller (predict.py)."""
    return GENERATIONS[arch] in versions.value("LL128_GENERATIONS") and \
        (intra_hw == "nvlink" or ppn == 1)


def _algorithms(coll: str, nodes: int, ppn: float, nvswitch_full: bool) -> tuple[str, ...]:
    if coll in ("broadcast", "reduce"):
        return ("ring",)
    out = ["ring"]
    if coll == "all_reduce":
        out.append("tree")
        if nvswitch_full:
            out.append("nvls" if nodes == 1 else "nvls_tree")
    else:
        if ppn == 1 and nodes > 1:
            out.append("pat")
        if nvswitch_full and nodes == 1:
            out.append("nvls")
    return tuple(out)


def _busbw(coll: str, algo: str, pi: int, nodes: int, ppn: float, nch: int, bw_intra: float,
           bw_inter: float, arch: int, i2: int, ll_max: float) -> float:
    bw = bw_intra if nodes <= 2 else bw_inter
    if algo in ("nvls", "nvls_tree"):
        intra = bw_intra * NVLS_EFF[arch] * (nch - 1) / nch
        intra *= 2.0 if coll == "all_reduce" else (ppn - 1) / ppn
        inter = bw_inter * (2 if nodes <= 2 and algo == "nvls_tree" else 1)
        bw = min(intra, inter if nodes > 1 else intra,
                 NVLS_TREE_BW[arch][i2] if algo == "nvls_tree" else math.inf)
    bus = nch * bw
    if algo == "ring" and pi == 0:
        share = versions.value("RING_LL_BUSBW_SHARE")
        bus = min(ll_max, bus * share[0 if nodes > 1 or coll in ("all_reduce", "reduce") else 1])
    if algo == "ring" and pi == 1:
        share = versions.value("RING_LL128_BUSBW_SHARE")[0 if ppn < 2 else 1]
        bus = min(bus * share, nch * _per_arch("LL128_PER_CHANNEL_BW")[arch][i2])
    if algo == "tree" and coll == "all_reduce":
        bus = min(bus * .92, nch * _per_arch("TREE_PER_CHANNEL_BW")[arch][i2])
    if algo == "tree" and pi == 0:
        bus = min(bus / 3.8, ll_max)
    if algo == "tree" and pi == 1:
        bus = min(bus * (7 / 9 if nodes == 1 else 120 / 128),
                  nch * _per_arch("TREE_LL128_PER_CHANNEL_BW")[arch][i2])
    if algo == "tree" and ppn == 1:  # search.cc: one GPU a node searches the TREE pattern
        bus *= .85
    if algo == "pat":
        bus *= .75
    return bus


def _per_arch(name: str) -> tuple[Triple, ...]:
    """A per-channel table of tuning.cc (llMaxBws, perChMaxRingLL128Bws, perChMaxTreeBws,
    perChMaxTreeLL128Bws) as the active NCCL version had it (versions.py), by ARCH index."""
    table = versions.value(name)
    return tuple(table[g] for g in GENERATIONS)


def _latency(coll: str, algo: str, pi: int, nodes: int, nranks: int, ppn: float, nsteps: int,
             intra_hw: str, net_lat: float) -> float:
    base, hw = _tables(versions.active())
    lat = base[algo][pi]
    intra = hw[intra_hw][algo][pi]
    if nodes > 1 and pi == 0:
        intra *= versions.value("LL_MULTI_NODE_INTRA_FACTOR")
    inter = hw["net"]["tree" if ppn == 1 else algo][pi] + net_lat
    if pi == 2:
        inter += net_lat  # the flush
    if algo == "ring":
        if coll in ("broadcast", "reduce"):
            return lat + hw["net" if nodes > 1 else intra_hw]["ring"][pi]
        overhead = versions.value("NET_OVERHEAD_US") * (3 if pi == 2 else 1) if nodes > 1 else 0.0
        intra = max(intra, overhead)
        n_inter = 0 if nodes == 1 else 2 * (nodes - 1) if coll == "all_reduce" else nodes - 1
        return lat + (nsteps - n_inter) * intra + n_inter * inter
    if algo == "tree":
        return lat + 2 * ((nranks // nodes - 1) * intra + int(math.log2(nodes)) * inter)
    if algo == "nvls":
        return intra + (inter if nodes > 1 else 0.0)
    if algo == "nvls_tree":
        return lat + intra + 2 * int(math.log2(nodes)) * inter
    return lat + int(math.log2(nodes)) * (inter / 3.5) + nranks * 2.8  # pat
