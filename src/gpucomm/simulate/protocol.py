"""The protocol model: how one op's bytes cross a path, applied to every op of any schedule.

An op of `b` payload bytes over a path costs

    alpha = hop software latency of the protocol on the path's class (NVLink / PCIe / network)
          + the sum of the links' latencies (catalog)
    rate  = min(bottleneck share x wire efficiency,           # LL 1/2, LL128 120/128, Simple 1
                per-channel cap x lanes,                      # LL128 per-channel cap, LL total cap
                slice payload / per-message overhead)         # network message rate, per slice
    time  = alpha + b / rate

and a collective pays the protocol's base latency (kernel launch, connection setup) once.
Data moves in slices through a few buffers, so a multi-hop path is cut-through (its links'
latencies add, its bandwidths do not) and consecutive ops of a channel pipeline.

`lanes` is how many of NCCL's channels one schedule channel stands for (predict builds one
schedule channel per NIC rail and lets it carry the rest), so the per-channel caps scale.

    >>> p = get_protocol("ll")
    >>> p.wire_efficiency
    0.5
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError
from . import constants as K
from .caches import TopologyMemo, topology_memo
from .versions import value
from .paths import CLASS_NAMES, NET

if TYPE_CHECKING:
    from ..topology import Topology

PROTOCOLS = ("ll", "ll128", "simple")


@dataclass(frozen=True)
class Protocol:
    name: str
    wire_efficiency: float
    hop_latency_s: tuple[float, ...]  # by path class (nvlink, pcie, net)
    base_latency_s: float
    slice_bytes: int
    message_overhead_s: float  # per slice on network paths
    channel_cap_Bps: float  # payload rate one NCCL channel can reach (inf = none)
    total_cap_Bps: float  # payload rate of the whole collective per rank (inf = none)

    def op_rate(self, share_Bps: npt.ArrayLike, cls: npt.ArrayLike, lanes: float = 1.0,
                channels: int = 1) -> npt.NDArray[np.float64]:
        """Payload rate (B/s) of ops given their bottleneck share of link capacity."""
        rate = np.asarray(share_Bps, dtype=np.float64) * self.wire_efficiency
        rate = np.minimum(rate, self.channel_cap_Bps * lanes)
        rate = np.minimum(rate, self.total_cap_Bps / max(channels, 1))
        if self.message_overhead_s > 0:
            # one message per slice and per NCCL channel: `lanes` channels send side by side
            msg = self.slice_bytes * self.wire_efficiency / self.message_overhead_s * lanes
            rate = np.where(np.asarray(cls) == NET, np.minimum(rate, msg), rate)
        return rate

    def alpha(self, link_latency_s: npt.ArrayLike, cls: npt.ArrayLike) -> npt.NDArray[np.float64]:
        hop = np.asarray(self.hop_latency_s)[np.asarray(cls, dtype=np.int64)]
        out: npt.NDArray[np.float64] = np.asarray(link_latency_s) + hop
        return out


def get_protocol(name: str = "simple", generation: str = K.DEFAULT_GENERATION,
                 nodes: int = 1) -> Protocol:
    """The protocol model for a GPU generation and node count (NCCL's caps depend on both)."""
    key = str(name).lower()
    if key not in PROTOCOLS:
        raise ConfigError(f"unknown protocol {name!r}: allowed are {', '.join(PROTOCOLS)}, auto")
    gen = generation if generation in K.LL_MAX_BW else K.DEFAULT_GENERATION
    col = 0 if nodes <= 1 else 1 if nodes == 2 else 2
    channel_cap = float("inf")
    total_cap = float("inf")
    if key == "ll128":  # the active NCCL version's constants (versions.py)
        channel_cap = value("LL128_PER_CHANNEL_BW")[gen][col] * K.GB
    if key == "ll":
        total_cap = (value("LL_MAX_BW")[gen] if nodes <= 1
                     else value("LL_MAX_BW_MULTI_NODE"))[col] * K.GB
    return Protocol(key, K.WIRE_EFFICIENCY[key],
                    tuple(value("HOP_LATENCY_S")[key][c] for c in CLASS_NAMES),
                    value("BASE_LATENCY_S")[key], K.SLICE_BYTES[key],
                    K.NET_MESSAGE_OVERHEAD_S[key], channel_cap, total_cap)


def ring_protocol(proto: Protocol, generation: str, nodes: int, collective: str,
                  nbytes: float, nranks: int, channels: int, net_floor_s: float = 0.0,
                  net_latency_s: float | None = None, channels_per_nic: float = 1.0
                  ) -> Protocol:
    """The protocol of an NCCL ring across nodes, with the latency refinements of NCCL's own
    model (constants.py) and one of ours: where NCCL runs the ring on more than one channel
    (ring_channels), every step, NVLink ones included, costs at least a network step
    (constants.RING_STEP_AT_NET_PACE); on one channel only the network steps do, as in NCCL's
    own model. A Simple all-reduce ring's latency
    carries the plateau factor. A broadcast's or reduce's chain (K.CHAIN_COLLECTIVES) sends
    each channel's share in chunks of K.CHAIN_CHUNK_BYTES, not 1/nranks of it a step: its
    network messages are those chunks; and its hops keep their own latencies (tuning.cc adds
    the network overhead floor to the steps of the other ring collectives only), on however
    many channels. `net_floor_s`: the least software latency of a network step on
    these NICs (net_stack_floor_s less the link's); `net_latency_s`: the same without the NIC's
    measured stack floor (net_stack_floor_s(measured=False)), what a crossing of a one-channel
    ring pays (constants.RING_STEP_AT_NET_PACE); None: net_floor_s. `channels_per_nic`: NCCL's
    channels across nodes that leave by one NIC, whose messages its GPU's proxy posts in turn
    (a Simple ring's pace, constants.RING_PACE_PER_MESSAGE)."""
    if nodes <= 1 or proto.name not in K.NET_MESSAGE_OVERHEAD_S:
        return proto
    net = CLASS_NAMES.index("net")
    chain = collective in K.CHAIN_COLLECTIVES
    paced = K.RING_STEP_AT_NET_PACE and not chain and \
        ring_channels(proto.name, nbytes, nranks, channels) > 1
    if not paced and net_latency_s is not None:
        net_floor_s = net_latency_s
    step = max(proto.hop_latency_s[net], net_floor_s)  # one network step's software latency
    pace = step  # what a paced step costs: a network step, or its proxy's messages
    if proto.name in K.RING_PACE_PER_MESSAGE:
        pace = max(max(channels_per_nic, 1.0) * K.NET_MESSAGE_OVERHEAD_S[proto.name], net_floor_s)
    floor = pace if paced else 0.0 if chain else K.NET_MESSAGE_OVERHEAD_S[proto.name]
    hop = tuple(step if c == "net" else max(h, floor)
                for h, c in zip(proto.hop_latency_s, CLASS_NAMES))
    factor = 1.0
    per_step = nbytes / max(channels * nranks, 1)  # one channel's chunk of one ring step
    if proto.name == "simple" and collective == "all_reduce" and \
            per_step >= K.RING_PLATEAU_MIN_BYTES:
        factor = K.RING_PLATEAU_FACTOR.get(generation, K.RING_PLATEAU_FACTOR_DEFAULT)
    chunk, slices = K.RING_CHUNK_BYTES[proto.name]
    if chain:  # a chain's step carries the channel's whole share
        per_step = nbytes / max(ring_channels(proto.name, nbytes, nranks, channels), 1)
        chunk, slices = K.CHAIN_CHUNK_BYTES[proto.name]
    message = max(min(chunk, per_step) / slices, 1.0)  # payload of one network message
    return replace(proto, hop_latency_s=tuple(h * factor for h in hop),
                   base_latency_s=proto.base_latency_s * factor,
                   slice_bytes=min(proto.slice_bytes,
                                   int(np.ceil(message / proto.wire_efficiency))))


def ring_channels(proto_name: str, nbytes: float, nranks: int, channels: int) -> int:
    """The channels NCCL runs a ring collective of `nbytes` on: its channel tuning
    (enqueue.cc, v2.18 and 2.4 alike) drops channels while nBytes < nc x nThreads x
    threadThreshold (constants.RING_THREADS; the LL threshold is x nRanks for rings,
    tuning.cc), down to one."""
    threads, per_thread = K.RING_THREADS[proto_name]
    if proto_name == "ll":
        per_thread *= nranks
    nc = max(int(channels), 1)
    while nc > 1 and nbytes < nc * threads * per_thread:
        nc -= 1
    return nc


def ring_threads(proto_name: str, nbytes: float, nranks: int, channels: int) -> int:
    """The threads NCCL gives each channel of a ring collective of `nbytes` on `channels`
    channels (enqueue.cc, after the channel tuning): halved from the protocol's maximum while
    nBytes < nc x nt x threshold and nt is a multiple of 128, at least 3 warps."""
    threads, per_thread = K.RING_THREADS[proto_name]
    if proto_name == "ll":
        per_thread *= nranks
    nt = threads
    while nbytes < max(int(channels), 1) * nt * per_thread and nt % 128 == 0:
        nt //= 2
    return max(nt, 3 * 32)


def chain_pipeline_bytes(proto_name: str, nbytes: float, nranks: int,
                         channels: int) -> tuple[int, int]:
    """(channels, bytes) of NCCL's broadcast / reduce chain of `nbytes` on `nranks` ranks and
    at most `channels` channels: the channels it runs on (ring_channels) and what a relaying
    GPU forwards at a time, the pipeline's unit: a Simple chunk, an LL / LL128 trip of the
    channel's threads (constants.CHAIN_TRIP_BYTES_PER_THREAD, ring_threads)."""
    nc = ring_channels(proto_name, nbytes, nranks, channels)
    if proto_name == "simple":
        return nc, K.CHAIN_CHUNK_BYTES["simple"][0]
    threads = ring_threads(proto_name, nbytes, nranks, nc)
    return nc, threads * K.CHAIN_TRIP_BYTES_PER_THREAD[proto_name]


def net_stack_floor_s(topology: Topology, proto_name: str, measured: bool = True) -> float:
    """Least latency of one network step (software stack and wire) on this topology's NICs,
    beyond NCCL's InfiniBand-measured one: the NIC's own (catalog stack_latency_us), else the
    libfabric plugins' by NIC kind (constants.py), else 0. `measured=False`: the kind's figure
    only, without the NIC's measured floor (what a ring on one channel pays a crossing)."""
    model = _nic_model(topology)
    if not model:
        return 0.0
    try:
        from ..hardware import get_nic
        nic = get_nic(model)
    except Exception:  # not a catalog NIC: no stack figure
        return 0.0
    floor = (measured and nic.stack_latency_s) or K.NET_STACK_LATENCY_S.get(nic.kind, 0.0)
    kind = nic.kind
    if proto_name == "simple":
        floor += K.NET_STACK_COMPLETION_S.get(kind, 0.0)
    return floor


def net_sync_s(topology: Topology, share_bytes: float = 0.0) -> float:
    """A calibrated cluster's per-step synchronisation cost across nodes (Topology.net_sync_s,
    from a profile's network_sync_us) where the collective's per-rank share `share_bytes`
    reaches Topology.net_sync_from_bytes: what the net plugin and its provider add to each
    network step of larger messages (a rendezvous), which NCCL's tuning does not know. 0 on a
    catalog topology.

    Not the latency the net plugin reports to NCCL (the catalog's plugin_latency_us, which
    NCCL's tuning adds to every inter-node step): aws-ofi-nccl chose that value to steer NCCL's
    algorithm choice (its commit bf7ca48d: "tried to see which chose the correct algorithm
    (tree or ring) most times"), and a p5 log whose plugin reports 75 us runs a 2-node 1 KiB
    all-reduce in 65 us in all, so it is no time a step takes."""
    sync = float(getattr(topology, "net_sync_s", 0.0) or 0.0)
    if sync and share_bytes < float(getattr(topology, "net_sync_from_bytes", 0.0)):
        return 0.0
    return sync


def with_net_sync(proto: Protocol, topology: Topology, share_bytes: float = 0.0) -> Protocol:
    """`proto` with the cluster's per-step synchronisation (net_sync_s) added to its network
    hop: every op that crosses nodes pays it, whatever the algorithm."""
    extra = net_sync_s(topology, share_bytes)
    if extra <= 0:
        return proto
    hop = tuple(h + extra if c == "net" else h for h, c in zip(proto.hop_latency_s, CLASS_NAMES))
    return replace(proto, hop_latency_s=hop)


def _nic_model(topology: Topology) -> str:
    """The model of the topology's first NIC with one (read by position: a cluster's devices
    are not all made)."""
    memo = _memo(topology)
    if memo is not None and memo.nic_model is not None:
        return memo.nic_model
    from ..topology.elements import DEVICE_KINDS
    if hasattr(topology, "device_kind_codes"):
        nics = np.flatnonzero(topology.device_kind_codes() == DEVICE_KINDS.index("nic"))
        devices = (topology.devices[int(i)] for i in nics)
    else:
        devices = (d for d in topology.devices if d.kind == "nic")
    model = next((d.model for d in devices if d.model), "")
    if memo is not None:
        memo.nic_model = model
    return model


def ideal_protocol() -> Protocol:
    """No protocol overheads at all: the pure alpha-beta of the links (for closed forms)."""
    return Protocol("ideal", 1.0, (0.0, 0.0, 0.0), 0.0, 1 << 30, 0.0, float("inf"),
                    float("inf"))


def generation_of(topology: Topology) -> str:
    """The GPU generation of a topology's ranks (from the catalog's SM architecture)."""
    memo = _memo(topology)
    if memo is not None and memo.generation is not None:
        return memo.generation
    gen = _generation_of_model(_gpu_model(topology))
    if memo is not None:
        memo.generation = gen
    return gen


def _memo(topology: Topology) -> TopologyMemo | None:
    """The simulator's record on a Topology; None for a stand-in without a cache."""
    return topology_memo(topology) if getattr(topology, "cache", None) is not None else None


def _gpu_model(topology: Topology) -> str:
    """The model of the ranks' GPUs: rank 0's device (ranks are GPUs), else the first GPU
    device with a model; reading one device, not making all of a cluster's."""
    if getattr(topology, "ranks", None):
        d = topology.rank_device(0)
        if d.kind == "gpu" and d.model:
            return d.model
    for d in topology.devices:
        if d.kind == "gpu" and d.model:
            return d.model
    return ""


def _generation_of_model(model: str) -> str:
    try:
        from ..hardware import get_gpu
        sm = get_gpu(model).sm if model else ""
    except Exception:  # no catalog entry: fall back on the name
        sm = ""
    if sm in K.GENERATION_OF_SM:
        return K.GENERATION_OF_SM[sm]
    low = model.lower()
    for prefix, gen in (("v100", "volta"), ("a100", "ampere"), ("a800", "ampere"),
                        ("rtx4090", "ampere"), ("l40", "ampere"), ("h100", "hopper"),
                        ("h200", "hopper"), ("h800", "hopper"), ("b200", "blackwell"),
                        ("gb200", "blackwell")):
        if low.startswith(prefix):
            return gen
    return K.DEFAULT_GENERATION
