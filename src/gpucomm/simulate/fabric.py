"""What the fabric does beyond line rate, at the level a flow model carries.

A Topology with a `network` (gpucomm.topology.fabric.Network) gets a `FabricPolicy` in its
PathTable. The flow and analytic models keep doing max-min sharing over links; the policy
decides which links a flow loads and how much of a link's capacity carries payload.

**Lanes: per-QP paths in a max-min model.** A connection (one NCCL channel between two
GPUs) is split into `L` lanes. Every route row holds L blocks, one path per lane; every link
capacity is multiplied by L. A flow of rate R that crosses link l in m of its L lanes then
loads it with m·R/L, and max-min over (flow, link) multiplicities is exact for that. The flow
stays one flow: NCCL splits a connection's data evenly over its QPs and a slow QP holds the
connection's buffer slots, so the QPs of a connection move at one rate (NCCL_IB_SPLIT_DATA_
ON_QPS; with round-robin of whole messages the coupling is the same over a few messages).
- ECMP: L = qps_per_connection; QP q of the connection on channel c from NIC a to NIC b takes
  the tied path that the switches' hash of `hash_inputs` (a, b, the QP, the seed) picks
  (Router.route_matrix with an explicit key). Two flows hashed onto one cable share it, and
  the flow model's max-min sharing turns that into time. Seeds give a distribution.
- spray (Spectrum-X): L = the widest set of tied paths; lane j takes path j (mod their
  number): every flow is split evenly over every path, whatever the hash.
- adaptive (InfiniBand AR): switches send each packet to the least loaded tied port. For tied
  paths of equal capacity (ECMP ties are equal by construction) the fluid limit is the even
  split, so it is routed as spray. Known to be wrong: AR reacts to load from other jobs and
  to asymmetric failures, which a split fixed per flow does not; AR and spraying reorder
  packets, which needs NIC support (not modelled: assumed present).

**Lossy RoCE: go-back-N goodput.** Without PFC a RoCE NIC (ConnectX before selective repeat)
answers a lost packet by resending everything after it: W packets, the window in flight
(bandwidth x round trip / MTU). With independent losses of probability p per packet the
fraction of the wire that is goodput is (1 - p) / (1 + (W - 1) p) (Bertsekas & Gallager,
Data Networks, go-back-N efficiency; the collapse of RoCE under loss is measured in Mittal
et al., "Revisiting Network Support for RDMA", SIGCOMM 2018). It scales every network link.
Wrong when losses come in bursts (one rollback covers a burst: pessimistic), with selective
repeat (ConnectX-6 Dx+, IRN: close to 1 - p), and when p·W nears 1 (timeouts dominate).

**Lossless: PFC pauses and their spreading (cc="none").** Flows converging on one port
(incast) get their max-min share of it. PFC keeps the excess from being dropped by pausing the
links upstream; a paused link stops *every* flow of the class on it, so a flow that merely
shares an upstream link with an incast flow (a victim) is held to the incast flow's rate
(head-of-line blocking; the pause tree reaches every link before the hot port on the incast
flows' paths; Guo et al., "RDMA over Commodity Ethernet at Scale", SIGCOMM 2016; Zhu et al.,
"Congestion Control for Large-Scale RDMA Deployments" (DCQCN), SIGCOMM 2015, victim flows).
Computed per step of the schedule over the ops that run together (one all-to-all step, one
tree step). Wrong for transient pauses (bursts shorter than a buffer: no pause at all) and
when the switch buffer absorbs the whole incast (deep-buffer spines, as Meta's CTSW).

**Congestion control (cc="dcqcn").** Rate control slows the incast senders before buffers
reach the pause threshold, so there are no victims; the cost is recovery: when a flow's fair
share rises (a competitor finished), DCQCN climbs back by halving the gap to its target every
T = 55 us (fast recovery, F = 5 rounds; Zhu et al. 2015 defaults), losing about
2·T·(1 - 2^-F) x (rate gained) bytes. The flow model charges exactly that debt at each event
where a flow's rate rises. Receiver-driven schemes (Meta's NCCL clear-to-send) avoid the
ramp but cap bytes in flight; not modelled. Wrong when the timers are tuned (newer NICs
recover faster) and for flows shorter than the recovery.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..topology.routing import lane_key, mix

MAX_LANES = 32
DCQCN_TIMER_S = 55e-6   # DCQCN rate-increase timer T (Zhu et al., SIGCOMM 2015, §5)
DCQCN_FAST_RECOVERY = 5  # F: fast-recovery rounds, each halving the gap to the target rate
_NET = 2  # paths.NET: the link class of NIC and switch links


def goodput(loss_rate: float, window_packets: float) -> float:
    """Go-back-N goodput fraction: (1 - p) / (1 + (W - 1) p).

        >>> round(goodput(1e-3, 61), 4)
        0.9424
    """
    p, w = float(loss_rate), max(float(window_packets), 1.0)
    if not 0.0 <= p < 1.0:
        raise ConfigError(f"loss_rate {p!r} must be in [0, 1)")
    return (1.0 - p) / (1.0 + (w - 1.0) * p)


def recovery_s() -> float:
    """Seconds of lost full rate per unit of rate regained under DCQCN fast recovery."""
    return DCQCN_TIMER_S * 2.0 * (1.0 - 2.0 ** -DCQCN_FAST_RECOVERY)


class FabricPolicy:
    """Routing lanes, payload capacity and pause caps for one PathTable."""

    def __init__(self, paths, network):
        self.net = network
        self.topo = paths.topo
        router = self.topo.router
        self.router = router
        if network.routing == "ecmp":
            # a schedule channel of a rail stands for CHANNELS / rails NCCL channels, each its
            # own connection with its own queue pairs (hashed independently)
            from .predict import CHANNELS
            self.connections = network.connections or \
                max(1, CHANNELS // max(paths.rails_per_node, 1))
            self.lanes = network.qps_per_connection * self.connections
        else:
            self.lanes = min(max(_widest(router), 1), MAX_LANES)
        self.ports = np.asarray(router.ports(), dtype=np.uint64)
        kind = {d.name: d.kind for d in self.topo.devices}
        # switch egress ports: where queues build and PFC pauses start (a NIC schedules its
        # own queue pairs and is never the congestion point)
        self.egress = np.array([kind[ln.src] == "switch" for ln in self.topo.links], dtype=bool)
        self.recovery_s = recovery_s() if network.lossless and network.cc == "dcqcn" else 0.0

    # ---- capacity --------------------------------------------------------------------------
    def capacity(self, capacity, link_class, latency):
        """Payload capacity of each link: network links lose go-back-N retransmissions on a
        lossy fabric (window = capacity x base round trip / MTU)."""
        if self.net.lossless or self.net.loss_rate == 0:
            return capacity
        rtt = 2.0 * _one_way(self.topo, latency)
        out = capacity.copy()
        net = link_class == _NET
        for i in np.flatnonzero(net):
            w = np.ceil(capacity[i] * rtt / self.net.mtu) + 1
            out[i] = capacity[i] * goodput(self.net.loss_rate, w)
        return out

    # ---- routes ----------------------------------------------------------------------------
    def lane_routes(self, single, idx, gs, gd, channel):
        """L lane blocks per row: `single` (one path per op) repeated, except rows `idx`,
        inter-node ops from rail GPU gs to gd on `channel`, which get one path per lane."""
        L = self.lanes
        if not len(idx):
            return np.tile(single, (1, L)) if L > 1 else single
        blocks = [self._lane(gs, gd, channel, j) for j in range(L)]
        width = max([single.shape[1]] + [b.shape[1] for b in blocks])
        out = np.full((len(single), L * width), -1, dtype=np.int32)
        for j in range(L):
            out[:, j * width:j * width + single.shape[1]] = single
            blk = np.full((len(idx), width), -1, dtype=np.int32)
            blk[:, :blocks[j].shape[1]] = blocks[j]
            out[idx, j * width:(j + 1) * width] = blk
        return out

    def _lane(self, gs, gd, channel, j):
        net = self.net
        gs, gd = np.asarray(gs, dtype=np.int64), np.asarray(gd, dtype=np.int64)
        c = np.asarray(channel, dtype=np.int64)
        if net.routing == "ecmp":
            f = net.hash_inputs
            a = self.ports[gs] if "src" in f else np.zeros(len(gs), np.uint64)
            b = self.ports[gd] if "dst" in f else np.zeros(len(gs), np.uint64)
            q = (c.astype(np.uint64) * np.uint64(64) + np.uint64(j + 1)) if "qp" in f \
                else np.zeros(len(gs), np.uint64)
            key = mix(mix(a, b, q), np.full(len(gs), net.seed, np.uint64),
                      np.zeros(len(gs), np.uint64))
        else:  # an even split: lane j on tied path j, rotated per pair so pairs differ
            rot = mix(self.ports[gs], self.ports[gd], np.full(len(gs), net.seed, np.uint64))
            key = lane_key((rot % np.uint64(MAX_LANES)) + np.uint64(j))
        return np.asarray(self.router.route_matrix(gs, gd, c, key=key), dtype=np.int32)

    def first_lane(self, table):
        """The columns of lane 0 (latency is that of one path, not of L copies)."""
        if self.lanes == 1 or table.shape[1] == 0:
            return table
        return table[:, :table.shape[1] // self.lanes]

    def bottleneck(self, table, capacity):
        """Per op: the rate it gets alone, min over links of capacity x L / multiplicity."""
        if table.shape[1] == 0:
            return np.full(len(table), np.inf)
        srt = np.sort(np.where(table >= 0, table, np.iinfo(np.int32).max), axis=1)
        valid = srt != np.iinfo(np.int32).max
        new = np.ones_like(valid)
        new[:, 1:] = srt[:, 1:] != srt[:, :-1]
        # multiplicity of each distinct link in the row
        run = np.cumsum(new, axis=1)
        mult = np.zeros(srt.shape, dtype=np.int64)
        rows = np.repeat(np.arange(len(srt)), srt.shape[1])
        np.add.at(mult, (rows, run.ravel() - 1), valid.ravel().astype(np.int64))
        first = new & valid
        m = np.zeros(srt.shape, dtype=np.float64)
        m[first] = mult[np.nonzero(first)[0], run[first] - 1]
        safe = np.where(valid, srt, 0)
        rate = np.where(first, capacity[safe] * self.lanes / np.maximum(m, 1), np.inf)
        return rate.min(axis=1)

    # ---- PFC pause spreading -----------------------------------------------------------------
    def pause_caps(self, table, alone, capacity, link_class):
        """Per op: the rate PFC's head-of-line blocking holds it to (inf: none), for ops that
        run together; only without congestion control on a lossless fabric."""
        n = len(table)
        caps = np.full(n, np.inf)
        if not self.net.lossless or self.net.cc != "none" or n < 2 or table.shape[1] == 0:
            return caps
        L = self.lanes
        valid = table >= 0
        safe = np.where(valid, table, 0)
        alone = np.where(np.isfinite(alone), alone, 0.0)
        demand = np.zeros(len(capacity))
        np.add.at(demand, safe[valid], np.broadcast_to(alone[:, None] / L, table.shape)[valid])
        lane_cap = capacity * L
        cnt = np.bincount(safe[valid], minlength=len(capacity)).astype(np.float64)
        per_link = np.where(valid, lane_cap[safe] / np.maximum(cnt[safe], 1), np.inf)
        share = per_link.min(axis=1)
        # hot: a switch egress that is some op's bottleneck, shared by more than one op, with
        # more demand than capacity (an incast or a hash collision)
        at = np.argmin(per_link, axis=1)
        neck = safe[np.arange(n), at]
        hot = np.zeros(len(capacity), dtype=bool)
        hot[neck[valid[np.arange(n), at]]] = True
        hot &= self.egress & (cnt > L) & (demand > capacity * (1 + 1e-9))
        paused = np.full(len(capacity), np.inf)
        w = table.shape[1] // L
        for j in range(L):
            blk = table[:, j * w:(j + 1) * w]
            ok = blk >= 0
            h = ok & hot[np.where(ok, blk, 0)]
            has = h.any(axis=1)
            if not has.any():
                continue
            first = np.argmax(h, axis=1)
            up = ok & (np.arange(w)[None, :] < first[:, None]) & has[:, None]
            up &= link_class[np.where(ok, blk, 0)] == _NET
            np.minimum.at(paused, blk[up], np.broadcast_to(share[:, None], blk.shape)[up])
        caps = np.where(valid, paused[safe], np.inf).min(axis=1)
        # the incast flows themselves are held by max-min at the hot port (and speed up when
        # it clears); the static cap is for victims only
        through = (valid & hot[safe]).any(axis=1)
        return np.where(through, np.inf, caps)


def _widest(router) -> int:
    """Most tied fabric paths between two ports (the switch-to-switch ECMP width)."""
    t = router._ensure_tables()
    if t is not None:
        return int(t["sw"][1].max(initial=1))
    return 1


def _one_way(topo, latency) -> float:
    """Latency of the longest route between the first rank and the others' nodes."""
    if topo.nodes < 2:
        return 0.0
    last = topo.nranks - 1
    return float(sum(latency[i] for i in topo.route(0, last)))
