"""NCCL's own table-free estimate of a collective's time, as a baseline for accuracy.py.

NVIDIA/nccl src/graph/tuning.cc (snapshot 5067397, 2026-06): `ncclTopoTuneModel` sets, per
collective, algorithm and protocol, a bus bandwidth (`nChannels * bw`, bw = the ring/tree
graph's bwIntra on <= 2 nodes, else bwInter; then the LL/LL128/tree/PAT refinements with
llMaxBws, perChMaxRingLL128Bws, perChMaxTreeBws, perChMaxTreeLL128Bws, perChMaxNVLSTreeBws,
nvlsEfficiency; busBw -> algBw by nRanks/nsteps or .5) and a latency (baseLatencies +
hwLatencies by path class, `interLat += graphs[a]->latencyInter` — the net plugin's latency
property — twice for Simple, netOverhead x3 for Simple on inter-node rings);
`ncclTopoGetAlgoTime` is `lat + bytes / (1000 * bw)` with treeCorrectionFactor and the ring
plateau (x1.4 from sm80); NCCL picks the fastest. Facts and formulas only; no code copied.

What NCCL reads from its topology search is taken here from gpucomm's topology: the GPU's
NVLink/xGMI figure as NCCL's topo.h has it (catalog `nccl_GBps`, all links: NCCL's search
packs rings over all of them; PCIe boxes get their PCIe figure: the host path's lower figures
NCCL's search finds without peer-to-peer are not modelled), the node's NICs (catalog
`nccl_GBps`), and the ring channel count gpucomm's model gives (what NCCL's search would
find is not modelled). `net_latency_us` is the plugin's latency property (0 for NCCL's own
IB/socket transports; the catalog's plugin_latency_us, net_latency_us()).
"""
from __future__ import annotations

import math

from gpucomm.collectives import get_collective
from gpucomm.hardware import get_gpu, get_link_tech, get_nic
from gpucomm.simulate import constants as K
from gpucomm.simulate.constants import TREE_CORRECTION

# tuning.cc's tables are gpucomm's own (simulate/constants.py), indexed here as tuning.cc
# indexes them: by compute-capability class and protocol
GENERATIONS = ("volta", "ampere", "hopper", "blackwell")
ARCH = {"sm70": 0, "sm80": 1, "sm86": 1, "sm89": 1, "sm90": 2, "sm100": 3}
PROTOS = ("ll", "ll128", "simple")
LL_MAX = tuple(K.LL_MAX_BW[g] for g in GENERATIONS)
RING_LL128 = tuple(K.LL128_PER_CHANNEL_BW[g] for g in GENERATIONS)
TREE_LL128 = tuple(K.TREE_LL128_PER_CHANNEL_BW[g] for g in GENERATIONS)
TREE_BW = tuple(K.TREE_PER_CHANNEL_BW[g] for g in GENERATIONS)
NVLS_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0))
NVLS_EFF = tuple(K.NVLS_EFFICIENCY[g] for g in GENERATIONS)


def _us(seconds: dict) -> tuple:
    return tuple(round(seconds[p] / K.US, 6) for p in PROTOS)


BASE = {"tree": _us(K.TREE_BASE_LATENCY_S), "ring": _us(K.BASE_LATENCY_S), "nvls": (0, 0, 0),
        "nvls_tree": (0, 0, 0), "pat": (8.0, 8.0, 8.0)}


def _hw(i: int, path: str, **others) -> dict:
    """hwLatencies[hw][algorithm][protocol], us: Tree (column i) and Ring (path class) from
    constants, the other algorithms as tuning.cc gives them."""
    return {"tree": _us({p: K.TREE_HOP_LATENCY_S[p][i] for p in PROTOS}),
            "ring": _us({p: K.HOP_LATENCY_S[p][path] for p in PROTOS}), **others}


NVLS_US = round(K.NVLS_LATENCY_S / K.US, 6)
HW = {"nvlink": _hw(0, "nvlink", nvls=(0, 0, NVLS_US), nvls_tree=(0, 0, NVLS_US), pat=(0, 0, 4.0)),
      "pci": _hw(1, "pcie", nvls=(0, 0, 0), nvls_tree=(0, 0, 0), pat=(0, 0, 4.0)),
      "net": _hw(2, "net", nvls=(0, 0, 18), pat=(0, 0, 14.0),
                 nvls_tree=(0, 0, round(K.NVLSTREE_NET_LATENCY_S / K.US, 6)))}


def net_latency_us(topo) -> float:
    """The latency property the net plugin of the topology's NICs reports, which NCCL adds to
    every inter-node step: the catalog's plugin_latency_us (aws-ofi-nccl's 75 us on p4d/p5 EFA,
    src/platform-aws.cpp; 0 for NCCL's own IB and socket transports)."""
    nic = next((d.model for d in topo.devices if d.kind == "nic" and d.model), None)
    return get_nic(nic).plugin_latency_s * 1e6 if nic else 0.0


NET_OVERHEAD_US = 1.0  # getNetOverhead: x86 Intel (2.0 on AMD CPUs; the tables rarely say)


def _graph(topo, channels):
    """(arch index, intra hw class, bwIntra per channel, bwInter per channel, nChannels)."""
    gpu_dev = next(d for d in topo.devices if d.kind == "gpu")
    gpu = get_gpu(gpu_dev.model)
    arch = ARCH.get(gpu.sm, 1)
    ppn = topo.gpus_per_node
    if gpu.nvlink and ppn > 1 and topo.p2p:
        # NCCL's search packs rings over every NVLink of the GPU, switched or a full mesh
        total = (get_link_tech(gpu.nvlink).nccl_Bps or 0) / 1e9
        hw = "nvlink"
    else:
        total = (get_link_tech(gpu.pcie).nccl_Bps or 24e9) / 1e9
        hw = "pci"
    nics = [d for d in topo.devices if d.kind == "nic" and d.node == 0]
    inter_total = 0.0
    for d in nics[:max(ppn, 1)]:
        inter_total += (get_link_tech(d.model).nccl_Bps or 0) / 1e9
    n = max(channels, 1)
    intra = total / n
    inter = min(intra, inter_total / n) if inter_total else intra
    if ppn == 1:
        intra = inter
    return arch, hw, intra, inter, n


def estimate(coll_name, nbytes, topo, channels, net_latency_us=0.0):
    """(time_us, algorithm, protocol) NCCL's model picks, or None where it has no model
    (point-to-point: all_to_all, sendrecv, gather, scatter)."""
    coll = get_collective(coll_name)
    if coll.name not in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"):
        return None
    nranks = topo.nranks
    nodes = max(nranks // max(topo.gpus_per_node, 1), 1)
    if nranks <= 1:
        return None
    ppn = nranks / nodes
    arch, intra_hw, bw_intra, bw_inter, nch = _graph(topo, channels)
    i2 = min(nodes, 3) - 1
    ll_max = LL_MAX[arch if nodes == 1 else 0][i2]
    nsteps = 2 * (nranks - 1) if coll.name == "all_reduce" else \
        nranks - 1 if coll.name in ("all_gather", "reduce_scatter") else nranks
    nvswitch_full = bool(topo.in_switch_reduction) and NVLS_EFF[arch] > 0
    best = None
    for algo in _algorithms(coll.name, nodes, ppn, nvswitch_full):
        for pi, proto in enumerate(PROTOS):
            if algo in ("nvls", "nvls_tree", "pat") and proto != "simple":
                continue
            if proto == "ll128" and (arch < 1 or intra_hw != "nvlink"):
                continue
            bw = _busbw(coll.name, algo, pi, nodes, ppn, nch, bw_intra, bw_inter, arch, i2,
                        ll_max)
            if bw <= 0:
                continue
            if not (algo != "ring" and coll.name in ("all_gather", "reduce_scatter")):
                bw *= nranks / nsteps if algo in ("ring", "nvls", "nvls_tree") else 0.5
            lat = _latency(coll.name, algo, pi, nodes, nranks, ppn, nsteps, intra_hw,
                           net_latency_us)
            log_size = int(math.log2(nbytes >> 6)) if nbytes >= 64 else -1
            if algo == "tree" and coll.name == "all_reduce" and 0 <= log_size < 23:
                bw *= TREE_CORRECTION[proto][log_size]
            if algo == "ring" and proto == "simple" and nodes > 1 and coll.name == "all_reduce" \
                    and nbytes / (nch * nranks) >= 64:
                lat *= 1.4 if arch >= 1 else 1.9
            t = lat + nbytes / (1000 * bw)
            if best is None or t < best[0]:
                best = (t, algo, proto)
    return best


def _algorithms(coll, nodes, ppn, nvswitch_full):
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
    return out


def _busbw(coll, algo, pi, nodes, ppn, nch, bw_intra, bw_inter, arch, i2, ll_max):
    bw = bw_intra if nodes <= 2 else bw_inter
    if algo in ("nvls", "nvls_tree"):
        intra = bw_intra * NVLS_EFF[arch] * (nch - 1) / nch
        intra *= 2.0 if coll == "all_reduce" else (ppn - 1) / ppn
        inter = bw_inter * (2 if nodes <= 2 and algo == "nvls_tree" else 1)
        bw = min(intra, inter if nodes > 1 else intra,
                 NVLS_TREE_BW[arch][i2] if algo == "nvls_tree" else math.inf)
    bus = nch * bw
    if algo == "ring" and pi == 0:
        bus = min(ll_max, bus * .5)
    if algo == "ring" and pi == 1:
        bus = min(bus * .92, nch * RING_LL128[arch][i2])
    if algo == "tree" and coll == "all_reduce":
        bus = min(bus * .92, nch * TREE_BW[arch][i2])
    if algo == "tree" and pi == 0:
        bus = min(bus / 3.8, ll_max)
    if algo == "tree" and pi == 1:
        bus = min(bus * (7 / 9 if nodes == 1 else 120 / 128), nch * TREE_LL128[arch][i2])
    if algo == "pat":
        bus *= .75
    return bus


def _latency(coll, algo, pi, nodes, nranks, ppn, nsteps, intra_hw, net_lat):
    lat = BASE[algo][pi]
    intra = HW[intra_hw][algo][pi]
    inter = HW["net"]["tree" if ppn == 1 else algo][pi] + net_lat
    if pi == 2:
        inter += net_lat  # the flush
    if algo == "ring":
        if coll in ("broadcast", "reduce"):
            return lat + HW["net" if nodes > 1 else intra_hw]["ring"][pi]
        overhead = NET_OVERHEAD_US * (3 if pi == 2 else 1) if nodes > 1 else 0.0
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
