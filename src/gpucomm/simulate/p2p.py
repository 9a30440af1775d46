"""NCCL's point-to-point channels: what one send/receive to a peer can carry.

Send/recv and all-to-all run as grouped point-to-point operations (enqueue.cc
scheduleP2pTasksToPlan / addP2pToPlan). Unlike a ring, one operation to one peer runs on few
channels, each one CUDA block moving the data in p2p chunks; so a single peer is capped well
below the links when those channels are few. The rules, all NCCL's own (constants.py):

- channels per peer (graph/paths.cc ncclTopoGetNchannels, ncclTopoComputeP2pChannelsPerPeer):
  the minimum over every peer of {network peer: max(local NICs, ceil(NIC GB/s /
  NCCL_P2P_PER_CHANNEL_NET_BW = 14)); NVLink peer: 2·max(1, path bw / NVLink channel bw);
  PCIe peer: 2}, rounded up to a power of two; across nodes halved while
  perPeer x ceil(nRanks / 8) > p2p channels (ncclTopoComputeP2pChannels), so that every
  peer fits in one round of 8 ops per channel. That is NCCL 2.29's; 2.20-2.28 give a network
  peer max(local NICs, 2 halved while 2 x nRanks > 4 x p2p channels) and do not halve, and
  up to 2.19 a network peer gets NCCL_NCHANNELS_PER_NET_PEER = 2 (versions.py RULE_SINCE);
- channels per operation (enqueue.cc): start at nChannelsMin (perPeer halved while
  nChannelsMin x nRanks > p2p channels) and double while a part exceeds the maximum part
  (the p2p chunk across nodes, 32 chunks inside one) up to perPeer;
- what one channel carries: NCCL_P2P_PER_CHANNEL_NET_BW (14 GB/s) over the network, the SM's
  NVLink channel bandwidth (topo.h SMxx_NVLINK_BW) over NVLink; over PCIe the links bound it.

- the pipeline fill (constants.py P2P_FILL_STAGES): a chunk is copied into the connection's
  FIFO and out of it besides crossing the link; the busiest channel runs its batches (up to 8
  operations of one group of 8 rounds, enqueue.cc ncclAddWorkBatchToPlan) one after another,
  each paying k chunks through those copies and a hop. Chunks over the network shrink for
  small operations (a half below 8 chunks, a quarter below one).

- the proxy (constants.py P2P_PROXY_OP_S): every send and receive to a peer on another node,
  one per channel part and even of 0 bytes, is a network operation of the GPU's one proxy
  thread, which takes them in turn; the last one's own chain (base, its data, the network hop)
  starts after the others. This paces small all-to-alls across nodes (Sophia's 2 x 8 A100:
  16 operations a GPU, 50 us at 0 B) and leaves large ones to the bandwidth.

`limit` applies the cap to a simulated send/recv or all-to-all: the collective takes at least
as long as its slowest peer pair needs on its channels, plus the fill. Protocols as
addP2pToPlan picks them: LL while an operation is at most channels x NCCL_P2P_LL_THRESHOLD
(16 KiB), else Simple; never LL128 (`limit` returns None for a protocol NCCL would not run).

    >>> op_channels(32 << 20, {"nodes": 1, "chunk": 512 << 10, "cmin": 4, "cmax": 32})
    4
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, cast

import numpy as np
import numpy.typing as npt

from ..collectives import Collective, layout
from ..dtypes import DTypeLike
from . import constants as K
from . import versions
from .paths import NET, NVLINK, PCIE, PathTable
from .result import SimResult

if TYPE_CHECKING:
    from ..topology import Topology

P2P_COLLECTIVES = ("sendrecv", "all_to_all")


class P2PPlan(TypedDict):
    """NCCL's p2p channel counts for one communicator (`plan`)."""
    nodes: int  # nodes the ranks span
    p2p_channels: int  # channels for p2p operations in all
    cmax: int  # channels per peer (the most one operation runs on)
    cmin: int  # channels one operation starts from
    chunk: int  # p2p chunk, bytes
    nvl_Bps: float  # what one channel carries over NVLink, B/s
    classes: npt.NDArray[np.signedinteger[Any]]  # path classes among the peers (paths.NET...)


def _pow2_up(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def _sm(topology: Topology) -> str:
    for d in topology.devices:
        if d.kind == "gpu" and d.model:
            try:
                from ..hardware import get_gpu
                return get_gpu(d.model).sm
            except Exception:  # a GPU the catalog does not know: NCCL's default (SM80) applies
                return "sm80"
    return "sm80"


def pairs(coll_name: str, p: int) -> tuple[npt.NDArray[np.int_], npt.NDArray[np.int_]]:
    """The (sender, receiver) schedule ranks of nccl-tests' point-to-point pattern."""
    r = np.arange(p)
    if coll_name == "sendrecv":  # sendrecv_perf: rank r sends to r+1, receives from r-1
        return r, (r + 1) % p
    src, dst = np.repeat(r, p), np.tile(r, p)
    keep = src != dst  # all-to-all: every ordered pair, the copy to self crosses no link
    return src[keep], dst[keep]


def _net_per_peer(nics: int, nic_gbps: float, ranks: int, p2p_channels: int) -> int:
    """Channels to a network peer (paths.cc ncclTopoGetNchannels) as the active NCCL has it."""
    if versions.has_rule("p2p_channels_fit_one_round"):
        return max(nics, math.ceil(nic_gbps / K.P2P_NET_CHANNEL_GBPS))
    if not versions.has_rule("p2p_net_channels_by_nics"):
        return 2  # NCCL_NCHANNELS_PER_NET_PEER's default until 2.19
    most = 2  # 2.20-2.28: "start from 2 channels per NIC and reduce with scale"
    while most * ranks > p2p_channels * 4 and most > 1:
        most //= 2
    return max(nics, most)


def plan(topology: Topology, placement: npt.ArrayLike, paths: PathTable) -> P2PPlan:
    """NCCL's p2p channel counts for a communicator on these ranks (cached on `paths`)."""
    hit = paths.cache.p2p_plan
    if hit is not None and hit[0] == versions.rules_version():  # what this function stored below
        return cast(P2PPlan, hit[1])
    p = len(np.asarray(placement).reshape(-1))
    node = np.asarray(topology.router.rank_node)[np.asarray(placement).reshape(-1)]
    nodes = len(np.unique(node))
    # NCCL takes the minimum over each rank's peers, then over ranks (init.cc allGather3):
    # the first and the last rank's rows stand for all (nodes are alike), which keeps this
    # O(P) where every pair would be O(P^2) routes
    others = np.arange(1, p)
    src = np.concatenate([np.zeros(p - 1, dtype=np.int64), np.full(p - 1, p - 1)])
    dst = np.concatenate([others, others - 1])
    _, cls, cap = paths.properties(paths.routes(src, dst, 0))
    sm = _sm(topology)
    nvl_bw = K.P2P_NVLINK_CHANNEL_GBPS.get(sm, K.P2P_NVLINK_CHANNEL_GBPS["sm80"])
    rails = paths.rails_per_node
    if nodes > 1:
        ring = min(K.P2P_CHANNELS_MULTI_NODE_MAX, K.P2P_CHANNELS_PER_RAIL * rails)
    elif len(cls) and bool((cls == NVLINK).all()):
        ring = K.P2P_CHANNELS_ONE_NODE_NVLINK
    else:
        ring = K.P2P_CHANNELS_PER_RAIL
    p2p_channels = _pow2_up(min(ring, K.MAX_CHANNELS))
    per_class = []
    if (cls == NET).any():
        gpus_per_node = max(int(np.bincount(np.unique(node, return_inverse=True)[1]).max()), 1)
        nics = max(rails // gpus_per_node, 1)  # NICs next to each GPU
        nic_gbps = float(cap[cls == NET].min()) * nics / K.GB
        per_class.append(_net_per_peer(nics, nic_gbps, p, p2p_channels))
    if (cls == NVLINK).any():
        per_class.append(2 * max(1, int(float(cap[cls == NVLINK].min()) / K.GB / nvl_bw)))
    if (cls == PCIE).any():
        per_class.append(2)
    per_peer = _pow2_up(min(per_class, default=1))
    if nodes > 1 and versions.has_rule("p2p_channels_fit_one_round"):
        while per_peer * math.ceil(p / K.P2P_PER_BATCH) > p2p_channels and per_peer > 1:
            per_peer //= 2
    else:
        per_peer = min(per_peer, p2p_channels)
    cmin = per_peer
    while cmin * p > p2p_channels and cmin > 1:
        cmin //= 2
    chunk = K.P2P_NET_CHUNK if nodes > 1 else \
        K.P2P_NVL_CHUNK if len(cls) and bool((cls == NVLINK).all()) else K.P2P_PCI_CHUNK
    out: P2PPlan = {"nodes": nodes, "p2p_channels": p2p_channels, "cmax": per_peer,
                    "cmin": cmin, "chunk": chunk, "nvl_Bps": nvl_bw * K.GB,
                    "classes": np.unique(cls)}
    paths.cache.p2p_plan = (versions.rules_version(), out)
    return out


def op_channels(nbytes: float, p: P2PPlan) -> int:
    """Channels one send (or receive) of `nbytes` runs on (enqueue.cc addP2pToPlan)."""
    if nbytes <= 0:
        return 1
    multi = p["nodes"] > 1
    min_part = p["chunk"] // 2 if multi else p["chunk"] // 8
    max_part = p["chunk"] if multi else p["chunk"] * 32
    n = max(min(p["cmin"], math.ceil(nbytes / min_part)), 1)
    part = max(min_part, math.ceil(nbytes / n))
    while part > max_part and n <= p["cmax"] // 2:
        n *= 2
        part = math.ceil(nbytes / n)
    return n


def op_chunk(nbytes: float, p: P2PPlan, net: bool) -> int:
    """The Simple chunk one operation of `nbytes` moves in (enqueue.cc addP2pToPlan)."""
    if net:
        for mult, div in K.P2P_NET_SMALL_CHUNK_DIV:
            if nbytes < mult * p["chunk"]:
                return p["chunk"] // div
    return p["chunk"]


def round_peers(node: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], int]:
    """Rank 0's send peer in each p2p round and the schedule's group size (init.cc
    ncclP2pSchedule: groups of ranks, group deltas in the quadratic order (x*x+x)/2)."""
    node = np.asarray(node).reshape(-1)
    order = list(dict.fromkeys(node.tolist()))  # rank 0's node first, rank 0 its local 0
    members = [np.flatnonzero(node == n) for n in order]
    if len(order) > 1:
        group = K.P2P_SCHEDULE_GROUP_SIZE
        for m in members:
            if len(m) % group or len(m) < group:
                group = math.gcd(group, len(m))
    else:
        group = len(node)
    groups = [m[g:g + group] for m in members for g in range(0, len(m), group)]
    pow2, delta, turn, out = _pow2_up(len(groups)), 0, 0, []
    while True:
        if delta < len(groups):
            out.append(groups[delta])
        turn += 1
        delta = (delta + turn) & (pow2 - 1)
        if turn == pow2:
            return np.concatenate(out).astype(np.int64), group


def _bit_reverse(x: int, bits: int) -> int:
    return int(format(x & ((1 << bits) - 1), f"0{bits}b")[::-1], 2) if bits else 0


def channel_batches(nodes: int, group: int, nrounds: int, n: int,
                    p2p_channels: int) -> list[list[list[int]]]:
    """Per channel, its batches of rounds for operations on `n` channels each: a part goes to
    channel (base + part) mod p2p channels (channel.h, device.h ncclP2pChannelForPart) and
    joins the channel's last batch unless that holds 8 operations, this round, or a round of
    another group of 8 (enqueue.cc ncclAddWorkBatchToPlan)."""
    per = K.P2P_PER_BATCH
    bits = max(p2p_channels.bit_length() - 1, 0)
    chans: list[list[list[int]]] = [[] for _ in range(p2p_channels)]
    for r in range(nrounds):
        base = (r // group) * -(-group // per) + (r % group) // per if nodes > 1 else r
        base = _bit_reverse(base, bits)
        for part in range(n):
            batches = chans[(base + part) & (p2p_channels - 1)]
            last = batches[-1] if batches else None
            if last and len(last) < per and all(q != r and q // per == r // per for q in last):
                last.append(r)
            else:
                batches.append([r])
    return chans


class _Stage(NamedTuple):
    fill_s: float  # one chunk through the extra FIFO stages
    hop_s: float  # the hop latency


def _stage_s(cls: int, chunk: float, p: P2PPlan) -> _Stage:
    """The fill and hop of one chunk on a path of class `cls`."""
    name = {NET: "net", NVLINK: "nvlink", PCIE: "pcie"}.get(int(cls))
    if name is None:  # a copy to self: no FIFO, no hop
        return _Stage(fill_s=0.0, hop_s=0.0)
    rate = float(channel_Bps(np.asarray([cls]), p)[0])
    return _Stage(fill_s=K.P2P_FILL_STAGES[name] * chunk / rate,
                  hop_s=K.HOP_LATENCY_S["simple"][name])


def fill_s(per_op: float, n: int, info: P2PPlan, paths: PathTable,
           node: npt.NDArray[np.int64]) -> tuple[float, float]:
    """The pipeline fill an all-to-all pays on its busiest channel (constants.py
    P2P_FILL_STAGES): per batch of k operations, k chunks through the extra stages at the
    channel's rate plus one hop, summed over the channel's batches; also the hop of that
    channel's first batch (the one a flow bound already counts)."""
    hit = paths.cache.p2p_rounds.get(n)
    if hit is None:
        peers, group = round_peers(node)
        cls = np.full(len(peers), -1, dtype=np.int64)  # -1: the copy to self
        other = peers != 0
        _, cls[other], _ = paths.properties(paths.routes(np.zeros(int(other.sum()), np.int64),
                                                         peers[other], 0))
        hit = (cls, channel_batches(info["nodes"], group, len(peers), n, info["p2p_channels"]))
        paths.cache.p2p_rounds[n] = hit
    cls, chans = hit
    part = per_op / n
    stage = {}
    for c in {int(x) for x in cls}:
        chunk = min(op_chunk(per_op, info, c == NET), part)
        stage[c] = _stage_s(c, chunk, info)
    worst = (0.0, 0.0)
    for batches in chans:
        t, first = 0.0, 0.0
        for i, b in enumerate(batches):
            s = [stage[int(cls[r])] for r in b]
            hop = max(x.hop_s for x in s)
            t += len(b) * max(x.fill_s for x in s) + hop
            first = hop if i == 0 else first
        worst = max(worst, (t, first))
    return worst


def proxy_ops(coll_name: str, topology: Topology, placement: npt.NDArray[np.int64],
              cls: npt.ArrayLike, n: int) -> int:
    """The network operations the busiest GPU's proxy takes in turn (constants.py
    P2P_PROXY_OP_S): a send and a receive per network peer, `n` channel parts each. `cls`:
    for sendrecv, the path class of each of its pairs (`pairs`), which `limit` has read."""
    p = len(placement)
    if coll_name == "sendrecv":  # rank r sends pair r and receives pair r - 1
        net = (np.asarray(cls) == NET).astype(np.int64)
        return int((net + np.roll(net, 1)).max()) * n
    node = np.asarray(topology.router.rank_node)[placement]
    local = np.unique(node, return_counts=True)[1]
    return 2 * (p - int(local.min())) * n  # all-to-all: every rank off the node, both ways


def channel_Bps(cls: npt.ArrayLike, p: P2PPlan) -> npt.NDArray[np.float64]:
    """Payload rate one p2p channel reaches on a path of class `cls` (inf: the links bound)."""
    c = np.asarray(cls)
    return np.where(c == NET, K.P2P_NET_CHANNEL_GBPS * K.GB,
                    np.where(c == NVLINK, p["nvl_Bps"], np.inf))


def limit(res: SimResult, coll: Collective, nbytes: int, topology: Topology,
          placement: npt.NDArray[np.int64], paths: PathTable, dtype: DTypeLike,
          proto: str) -> SimResult | None:
    """`res` slowed to the time its slowest peer pair needs on NCCL's p2p channels; None
    where NCCL's p2p would not run protocol `proto` for this size."""
    if coll.name not in P2P_COLLECTIVES or len(placement) < 2:
        return res
    p = len(placement)
    info = plan(topology, placement, paths)
    if coll.name == "sendrecv":
        src, dst = pairs(coll.name, p)
        per_pair = float(nbytes)
        _, cls, _ = paths.properties(paths.routes(src, dst, 0))
    else:  # every pair moves S/P: the slowest class of path among the peers bounds
        per_pair = float(nbytes) / p
        cls = info["classes"]
    n = op_channels(per_pair, info)
    if proto == "ll128" or (proto == "ll" and per_pair > n * K.P2P_LL_THRESHOLD):
        return None  # NCCL's p2p runs LL (small operations) or Simple, never LL128
    t_bw = float((per_pair / (n * channel_Bps(cls, info))).max())
    t = K.BASE_LATENCY_S[proto] + t_bw
    res = dataclasses.replace(res, nccl_channels=n if coll.name == "sendrecv" else
                              res.nccl_channels)
    fill, first = 0.0, 0.0  # the pipeline fill; the hop of it a flow bound already counts
    if proto == "simple":  # LL operations are one step: their hop is the base latency's
        if coll.name == "sendrecv":  # one operation per direction: one batch of one
            worst = int(NET) if (np.asarray(cls) == NET).any() else int(np.asarray(cls).max())
            chunk = min(op_chunk(per_pair, info, worst == NET), per_pair / n)
            data, first = _stage_s(worst, chunk, info)
            fill = data + first
        else:
            node = np.asarray(topology.router.rank_node)[placement]
            fill, first = fill_s(per_pair, n, info, paths, node)
    ops = proxy_ops(coll.name, topology, placement, cls, n)
    # the last operation's own chain (base, its data, its network hop) starts after the proxy
    # has taken the ones before it
    t_proxy = 0.0 if ops == 0 else t + K.HOP_LATENCY_S[proto]["net"] + (ops - 1) * K.P2P_PROXY_OP_S
    if t <= res.time_s and fill == 0.0 and t_proxy <= res.time_s:
        return res
    note = f"p2p: {n} channel(s) per peer" if t > res.time_s else res.note
    t = max(t + fill, res.time_s + fill - first)
    if t_proxy > t:
        note = f"p2p: the proxy takes {ops} network operations in turn"
        t = t_proxy
    algbw, busbw = layout(coll, nbytes, dtype, p).busbw(t)
    return dataclasses.replace(res, time_s=t, algbw_GBps=algbw, busbw_GBps=busbw, note=note)
