"""NCCL's SHM transport: collectives between GPUs that cannot reach each other (p2p off).

When two GPUs of a node have no peer-to-peer access (consumer cards such as the RTX 4090,
NCCL_P2P_DISABLE=1), NCCL routes them through the host (graph/paths.cc: `p2p == 0` ->
addInterStep through the local CPU) and connects them with the SHM transport
(transport/shm.cc): each connection's buffers live in host memory on the receiver's side
(NCCL_SHM_LOCALITY default SHM_RECV_SIDE), the sending GPU's SMs store into them across PCIe
and the receiving GPU's SMs load from them across PCIe (NCCL_SHM_USE_CUDA_MEMCPY is off by
default, so no copy engine or CPU thread moves data). The topology already routes such a hop
GPU -> ... -> host memory -> ... -> GPU (topology/routing.py), so a ring's hops share the
PCIe switch uplinks and root ports they cross. This module adds what NCCL does on top:

- NCCL's search charges GPU traffic that turns around in an Intel root complex 6/5 of its rate
  on every PCIe link of the path (search.cc followPath: a PATH_PHB path from a GPU through an
  x86 Intel CPU costs INTEL_P2P_OVERHEAD(bw) = bw * 6 / 5, topo.h): a through-CPU transfer
  gets 5/6 of what the PCIe link carries. Paths across the inter-socket link are PATH_SYS and
  not charged (they are bounded by the socket link, topo.h SKL_QPI_BW etc.). The CPU vendor is
  read from the node's inter-socket link (qpi/upi: Intel; epyc-xgmi: AMD); a one-socket node
  says nothing, so nothing is charged.
- The links' bound, in closed form: one ring moves the same bytes over every hop, so a ring
  whose hops cross link l `n_l` times (each at overhead `o_l`) runs at most

      link_GBps = min over links l of  capacity_l / (n_l x o_l)

  (`capacity` the catalog's achievable rate per direction; memory links included).
- The channels NCCL runs (reported, `nccl_channels`): the ring search keeps the largest speed
  of search.cc speedArrayIntra at which a ring fits NCCL's own link figures (with the 6/5
  charge), as many rings as fit at it; ncclTopoDupChannels doubles them only at >= 25 GB/s,
  and connect.cc doubles the rings once more. GPUs under one switch of an Intel host get 1
  ring, so 2 channels; tuning.cc gives a Simple block 256 threads when ring bw x rings <=
  PCI_BW (12), else 512.
- What a GPU can receive through host memory: every byte a GPU receives over SHM is loaded by
  its SMs from host memory across PCIe (NCCL_SHM_USE_CUDA_MEMCPY off), and that, not the
  links, is what published runs show as the ceiling: nccl-tests all_reduce_perf on 2 x RTX 3090
  without P2P (dual-socket host, `SYS`, `via SHM/direct/direct`) measured 2.29 GB/s busbw flat
  from 8 MiB to 512 MiB, and 2 x A100 80GB PCIe whose host refuses P2P (`PHB`, `CNS`) measured
  2.29 GB/s too (github.com/adamdivak/distrain, docs/sessions/2026-08-09-runpod-2x3090.md
  section 9 and docs/sessions/2026-08-22-pcie-hunt.md section 5): two GPU generations, two
  hosts, PCIe Gen4 x16 links (27 GB/s achievable), one figure. So a GPU receives at most
  SHM_RECV_GBPS = 2.29 GB/s of loads through SHM, chosen once for this class (GPUs reading
  host memory with SM loads across PCIe) from those runs; a ring's busbw equals what each GPU
  receives per second, so the ring runs at min(links, SHM_RECV_GBPS x the protocol's wire
  efficiency) (LL loads 16 B lines carrying 8 B). A Little's-law reading of one NCCL block
  (256 threads x 8 x 16 B in flight over a ~1-2 us PCIe read: 8-16 GB/s) does not explain
  the figure, so it is taken as measured, per GPU rather than per channel (the runs do not
  state NCCL's channel count; per GPU is the reading that needs none). It is a ceiling seen
  on several hosts, not a law: kalavai-net/kalavai-client's 4090 box measured 3.85 GB/s on a
  pair under different sockets (the same box's pair under one switch: 2.24).

send/recv and all-to-all inside one node meet the same receive ceiling; their links and
channels stay with simulate/p2p.py.

    >>> from gpucomm.topology import build_topology
    >>> from gpucomm.simulate.core import path_table
    >>> import numpy as np
    >>> t = build_topology("pcie", gpus_per_node=2, pcie_gen=4, p2p=False)
    >>> p = plan(t, np.arange(2), path_table(t, np.arange(2)))
    >>> round(p.link_GBps, 2), p.recv_GBps, p.channels, p.threads
    (11.33, 2.29, 2, 256)
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import numpy.typing as npt

from ..collectives import Collective, layout
from ..dtypes import DTypeLike
from ..errors import GpucommError
from ..hardware import get_gpu, get_link_tech
from ..topology.elements import DEVICE_KINDS
from . import constants as K
from .caches import UNSET
from .paths import PathTable
from .result import SimResult

if TYPE_CHECKING:
    from ..topology import Topology

# topo.h: #define INTEL_P2P_OVERHEAD(bw) (bw * 6 / 5)
INTEL_P2P_OVERHEAD = 6.0 / 5.0
# search.cc speedArrayIntra (SM < 90) and sm90SpeedArrayIntra (SM >= 90), GB/s per ring
SPEEDS_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEEDS_INTRA_SM90 = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
DUP_MIN_GBPS = 25.0  # search.cc ncclTopoDupChannels: no duplication below bwIntra 25
PCI_BW = 12.0  # topo.h PCI_BW; tuning.cc: Simple threads 256 where bwIntra x rings <= PCI_BW
SIMPLE_THREADS, SIMPLE_THREADS_PCI = 512, 256  # NCCL_SIMPLE_MAX_NTHREADS; the PCI default
# What one GPU receives through NCCL's SHM transport, GB/s of loads from host memory: nccl-tests
# on 2 x RTX 3090 (SYS) and 2 x A100 PCIe (PHB) without P2P, github.com/adamdivak/distrain
# docs/sessions/2026-08-09-runpod-2x3090.md s9, 2026-08-22-pcie-hunt.md s5 (module docstring)
SHM_RECV_GBPS = 2.29
RING_MAX_CHANNELS = K.MAX_CHANNELS // 2  # init.cc: the ring search's maxChannels = MAXCHANNELS/2
P2P_COLLECTIVES = ("sendrecv", "all_to_all")  # links and channels timed by p2p.py

_INTEL_CPU_LINKS = ("qpi", "upi")
_AMD_CPU_LINKS = ("epyc",)


@dataclass(frozen=True)
class ShmPlan:
    """How NCCL runs a ring whose hops go through host memory, and how fast it can go."""
    link_GBps: float  # the links' closed-form bound on the ring's busbw (module docstring)
    recv_GBps: float  # what a GPU receives through host memory (SHM_RECV_GBPS)
    bw_intra: float  # NCCL's search: GB/s per ring (graph->bwIntra, after duplication)
    rings: int  # rings the search keeps (graph->nChannels, after duplication)
    channels: int  # channels the communicator runs (connect.cc: 2 x rings, <= 32)
    threads: int  # threads of a Simple block (tuning.cc)
    intel: bool  # the hops turn around in an Intel root complex (6/5 charged)


def _link_ends(topology: Topology) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(source, destination) device index of every link, from the router where it has them."""
    router = topology.router
    src = getattr(router, "lsrc", None)
    if src is not None and len(src) == len(topology.links):
        return np.asarray(src, dtype=np.int64), np.asarray(router.ldst, dtype=np.int64)
    ends = [(topology.index_of(ln.src), topology.index_of(ln.dst)) for ln in topology.links]
    arr = np.asarray(ends, dtype=np.int64).reshape(-1, 2)
    return arr[:, 0], arr[:, 1]


def cpu_vendor(topology: Topology) -> str | None:
    """'intel' or 'amd' from the inter-socket link's technology; None if the node has none."""
    kinds = topology.device_kind_codes()
    cpu = DEVICE_KINDS.index("cpu")
    src, dst = _link_ends(topology)
    for i in np.flatnonzero((kinds[src] == cpu) & (kinds[dst] == cpu))[:8]:
        tech = str(topology.links[int(i)].tech).lower()
        if tech.startswith(_INTEL_CPU_LINKS):
            return "intel"
        if tech.startswith(_AMD_CPU_LINKS):
            return "amd"
    return None


def _hops(topology: Topology, placement: npt.NDArray[np.int64], paths: PathTable
          ) -> list[list[int]] | None:
    """The link lists of the ring's hops inside one node that bounce through host memory
    (the ring in placement order, as NCCL orders GPUs of a PCIe node); None if no hop does."""
    p = len(placement)
    if topology.p2p or p < 2:
        return None
    node = np.asarray(topology.router.rank_node)[placement]
    src = np.arange(p)
    dst = np.roll(src, -1)
    same = node[src] == node[dst]
    if not same.any():
        return None
    table = paths.routes(src[same], dst[same], 0)
    kinds = topology.device_kind_codes()
    memory = DEVICE_KINDS.index("memory")
    lsrc, ldst = _link_ends(topology)
    hops = []
    for row in np.asarray(table):
        links = [int(x) for x in row if x >= 0]
        if any(kinds[lsrc[i]] == memory or kinds[ldst[i]] == memory for i in links):
            hops.append(links)
    return hops or None


def _loads(topology: Topology, hops: list[list[int]], intel: bool) -> dict[int, float]:
    """Link -> how many ring-rates it carries, each PCIe link of a path through exactly one
    Intel CPU charged 6/5 (search.cc followPath on a PATH_PHB path)."""
    cpu = DEVICE_KINDS.index("cpu")
    kinds = topology.device_kind_codes()
    lsrc, ldst = _link_ends(topology)
    load: dict[int, float] = {}
    for links in hops:
        cpus = {int(e) for i in links for e in (lsrc[i], ldst[i]) if kinds[e] == cpu}
        phb = intel and len(cpus) == 1
        for i in links:
            pcie = get_link_tech(topology.links[i].tech).kind == "pcie"
            load[i] = load.get(i, 0.0) + (INTEL_P2P_OVERHEAD if phb and pcie else 1.0)
    return load


def _nccl_link_GBps(topology: Topology, link: int) -> float:
    """The bandwidth NCCL's topology gives a link (catalog nccl_GBps; else the achievable)."""
    tech = get_link_tech(topology.links[link].tech)
    bps = tech.nccl_Bps if tech.nccl_Bps else tech.achievable_Bps
    return float(bps) / K.GB


class Rings(NamedTuple):
    """What the ring search found: `rings` rings of `bw_GBps` each."""
    bw_GBps: float
    rings: int


def search(caps_GBps: dict[int, float], load: dict[int, float], sm90: bool = False) -> Rings:
    """NCCL's ring search reduced to one ring pattern: bw per ring, rings. Speeds from the
    highest that fits, as many rings as fit at each; a lower speed is tried while it is more
    than .49 of the best so far and kept only if rings x speed grows (search.cc
    ncclTopoCompute, pass 1); nothing fits at the lowest speed: one ring at the bound."""
    speeds = SPEEDS_INTRA_SM90 if sm90 else SPEEDS_INTRA
    bound = min(caps_GBps[i] / load[i] for i in load)
    best: Rings | None = None
    for s in speeds:
        if best is not None and s / best.bw_GBps <= 0.49:
            break
        rings = min(int(math.floor(bound / s + 1e-9)), RING_MAX_CHANNELS)
        if rings >= 1 and (best is None or rings * s > best.rings * best.bw_GBps):
            best = Rings(bw_GBps=s, rings=rings)
    return best if best is not None else Rings(bw_GBps=bound, rings=1)


def plan(topology: Topology, placement: npt.ArrayLike, paths: PathTable) -> ShmPlan | None:
    """NCCL's SHM ring on these ranks, or None where no ring hop goes through host memory
    (p2p on, one rank, or every hop across nodes). Cached on `paths`."""
    if paths.cache.shm_plan is not UNSET:
        hit: ShmPlan | None = paths.cache.shm_plan
        return hit
    place = np.asarray(placement, dtype=np.int64).reshape(-1)
    hops = _hops(topology, place, paths)
    out = None
    if hops is not None:
        intel = cpu_vendor(topology) == "intel"
        load = _loads(topology, hops, intel)
        bound = min(float(paths.capacity[i]) / load[i] for i in load) / K.GB
        sm90 = _sm(topology) >= 90
        bw, rings = search({i: _nccl_link_GBps(topology, i) for i in load}, load, sm90)
        if bw >= DUP_MIN_GBPS:  # ncclTopoDupChannels: twice the rings at half the speed
            dup = min(2 * rings, RING_MAX_CHANNELS)
            bw, rings = bw * rings / dup, dup
        threads = SIMPLE_THREADS_PCI if bw * rings <= PCI_BW else SIMPLE_THREADS
        out = ShmPlan(bound, SHM_RECV_GBPS, bw, rings, min(2 * rings, K.MAX_CHANNELS), threads,
                      intel)
    paths.cache.shm_plan = out
    return out


def _sm(topology: Topology) -> int:
    """The SM version of the ranks' GPUs (NCCL's ccMin; 0 if the catalog does not know)."""
    model = topology.rank_device(0).model if topology.nranks else ""
    try:
        sm = get_gpu(model).sm if model else ""
    except GpucommError:  # not a catalog GPU
        return 0
    return int(sm[2:]) if sm.startswith("sm") and sm[2:].isdigit() else 0


def limit(res: SimResult, coll: Collective, nbytes: int, topology: Topology,
          placement: npt.NDArray[np.int64], paths: PathTable, dtype: DTypeLike,
          proto: str) -> SimResult:
    """`res` slowed to what SHM allows where the ranks' hops go through host memory: a ring
    (or tree) collective to min(links, SHM_RECV_GBPS x wire efficiency), NCCL's channels
    reported; send/recv and all-to-all inside one node to the receive ceiling alone (their
    links and channels are p2p.py's). A collective's busbw is what each GPU receives per
    second (nccl-tests' factors), so one formula times both."""
    if nbytes <= 0:
        return res
    shm = plan(topology, placement, paths)
    if shm is None:
        return res
    rate = shm.recv_GBps * K.WIRE_EFFICIENCY[proto]
    if coll.name in P2P_COLLECTIVES:
        node = np.asarray(topology.router.rank_node)[np.asarray(placement)]
        if (node != node.flat[0]).any():
            return res  # across nodes the network, not SHM, moves most of it
    else:
        res = dataclasses.replace(res, nccl_channels=shm.channels)
        rate = min(shm.link_GBps, rate)
    lay = layout(coll, nbytes, dtype, len(placement))
    _, bus_bytes = lay.busbw(1.0)  # GB each rank receives (busbw at t = 1 s)
    t = K.BASE_LATENCY_S[proto] + bus_bytes / rate
    if t <= res.time_s:
        return res
    algbw, busbw = lay.busbw(t)
    note = "; ".join(filter(None, [res.note if coll.name in P2P_COLLECTIVES else "",
                                   f"shm: through host memory at {rate:.2f} GB/s"
                                   f" ({res.nccl_channels or shm.channels} channels)"]))
    return dataclasses.replace(res, time_s=t, algbw_GBps=algbw, busbw_GBps=busbw, note=note)
