"""What the fabric does beyond line rate, at the level a flow model carries.

A Topology with a `network` (gpucomm.topology.fabric.Network) gets a `FabricPolicy` in its
PathTable. The flow and analytic models keep doing max-min sharing over links; the policy
decides which links a flow loads and how much of a link's capacity carries payload.

**Lanes: per-QP paths in a max-min model.** An op (one schedule channel between two GPUs)
is split into `L` lanes: NCCL's connections to that peer (2, NCCL_NCHANNELS_PER_NET_PEER) times
their queue pairs. Lanes part only between switches, so a route row is lane 0's whole path
followed by the switch-to-switch links of lanes 1..L-1, and switch-to-switch links carry L x
their capacity. A flow of rate R listed m times on such a link loads it with m·R/L, and
max-min over (flow, link) multiplicities is exact for that; links common to all lanes appear
once, so a flow alone on its path keeps the flow model's fast path. The op stays one flow:
NCCL sends each message whole on the connection's next QP in turn (src/transport/net_ib.cc:
NCCL_IB_QPS_PER_CONNECTION 1, NCCL_IB_SPLIT_DATA_ON_QPS 0; 1 splits each message over all
QPs) and the connection's NCCL_STEPS buffer slots are freed in order, so a slow QP holds them
and the QPs move at one rate, that of the slowest times their number.
- ECMP: L = connections x qps_per_connection; QP q of a connection from NIC a to NIC b takes
  the tied path that the switches' hash of `hash_inputs` (a, b, the QP, the seed) picks
  (Router.route_matrix with an explicit key). Two flows hashed onto one cable share it, and
  the flow model's max-min sharing turns that into time. Seeds give a distribution.
- spray (oblivious per-packet spraying, as EFA's SRD): L = the widest set of tied paths;
  lane j takes path j (mod their number): every flow is split evenly over every path,
  whatever the hash.
- static (an InfiniBand subnet manager's tables, the default on InfiniBand): one path per
  destination NIC, up-port = the destination's place under its leaf mod the up-ports (OpenSM
  ftree's D-mod-k); every QP and connection to that NIC follows it (L = 1). On a two-leaf
  rail no two flows into one leaf share a spine; with more leaves, flows to the same place
  under different leaves do.
- flowlet (adaptive routing where the NIC cannot reorder: a queue pair moves only between
  flowlets, and an NCCL queue pair streaming a collective is one): L = connections x
  qps_per_connection units, each placed once on the tied path whose most loaded cable
  carries the fewest units so far (fabric_ar.py).
- adaptive (InfiniBand AR: "the switch selects the output port based on the port's load",
  among the ports the subnet manager put in the destination's AR group; NVIDIA InfiniBand
  Cluster Bring-up Procedure, "Adaptive Routing"; the NIC places out-of-order RDMA writes,
  NCCL_IB_ADAPTIVE_ROUTING / NCCL_IB_AR_THRESHOLD in src/transport/net_ib.cc) and spectrum-x
  (Spectrum-4 switches choose the least congested port per packet, the BlueField-3 SuperNIC
  puts packets back in order: NVIDIA Spectrum-X platform whitepaper): per packet, so on tied
  paths of equal capacity the fluid limit is the even split, routed as spray. They differ in
  what the deciding switch sees of other jobs' load (`_background`): InfiniBand's credits
  carry a congested link's backpressure up to the switch that chose it, so both the up-links
  leaving a leaf and the down-links into a leaf are pooled; Ethernet has no credits
  (Spectrum-X meters senders by in-band telemetry instead, a rate and not a path), so only
  the deciding leaf's own up-links are pooled and a loaded spine-to-leaf cable meets its own
  load. Their documented limits: reordering (without a NIC that reorders they fall back to
  flowlets, `flowlet`), and head-of-line blocking: a switch-to-switch cable carries only
  the share of its capacity that the cell model (fabric_cells.py) gives per-packet AR at
  full load on this fabric's shape, each setting with its own ingress buffer
  (fabric_ar.ar_share, AR_SWITCHES).

**Lossy RoCE: go-back-N goodput with retransmission timeouts** (fabric_loss.py) scales every
network link's capacity, so the analytic and flow models carry the same collapse.

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
2·T·(1 - 2^-F) x (rate gained) bytes. The flow model runs a flow whose fair rate rose dR
short by dR for 2·T·(1 - 2^-F) (the same bytes), but only while the rise lasts: when its rate
falls again (the next step of a pipelined collective brings the competitor back within a hop
latency, well inside one timer T) the fall cancels the deficit, as the limiter never climbed.
So collisions that persist from step to step (a hashed ring) cost no ramp, and the analytic
model, which prices every step at its contended share and charges no ramp, agrees with it;
contention that ends for good (an incast whose other senders finish) costs the full ramp.
Receiver-driven schemes (Meta's NCCL clear-to-send) avoid the
ramp but cap bytes in flight; not modelled. Wrong when the timers are tuned (newer NICs
recover faster) and for flows shorter than the recovery.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from ..topology.routing import lane_key, mix
from .fabric_ar import AR_SWITCHES, ar_share, flowlet_paths, polarized_key
from .fabric_loss import RTO_S, goodput

if TYPE_CHECKING:
    from ..topology import Topology
    from ..topology.fabric import Network
    from ..topology.routing import Router
    from .paths import PathTable

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Routes = npt.NDArray[np.signedinteger[Any]]  # padded link rows (ops, hops), -1: no link

MAX_LANES = 32
# NCCL_NCHANNELS_PER_NET_PEER's default (NCCL 2.x env docs): channels, so connections, per
# network peer; rings get the same from NCCL duplicating each ring channel (a DGX H100's search
# finds 8 at 48 GB/s, one per NIC, not doubled on sm90 below 50 GB/s: search.cc
# ncclTopoDupChannels; connect.cc ncclTopoPostset doubles them: 16, 2 per NIC). Trees list
# their own connections (nccl_trees.tree_fabric_slowdown, FabricPolicy.per_connection)
CONNECTIONS_PER_PEER = 2
DCQCN_TIMER_S = 55e-6   # DCQCN rate-increase timer T (Zhu et al., SIGCOMM 2015, §5)
DCQCN_FAST_RECOVERY = 5  # F: fast-recovery rounds, each halving the gap to the target rate
_NET = 2  # paths.NET: the link class of NIC and switch links
_NET_KINDS = ("nic", "switch")


def recovery_s() -> float:
    """Seconds of lost full rate per unit of rate regained under DCQCN fast recovery."""
    return DCQCN_TIMER_S * 2.0 * (1.0 - 2.0 ** -DCQCN_FAST_RECOVERY)


class FabricPolicy:
    """Routing lanes, payload capacity and pause caps for one PathTable."""

    connections: int  # NCCL connections per network peer (ECMP; each hashed on its own)
    lanes: int  # paths an op is split over

    def __init__(self, paths: PathTable, network: Network) -> None:
        if network.routing == "auto":  # NICs of mixed kinds (with_network resolves the rest)
            network = dataclasses.replace(network, routing="ecmp")
        self.net = network
        self.topo: Topology = paths.topo
        router = self.topo.router
        self.router = router
        if network.routing in ("ecmp", "flowlet"):
            # NCCL opens several connections to a network peer (each its own QPs, hashed on
            # their own); a schedule op stands for all of them
            self.connections = network.connections or CONNECTIONS_PER_PEER
            self.lanes = network.qps_per_connection * self.connections
        elif network.routing == "static":  # per destination: every lane takes one path
            self.connections, self.lanes = 1, 1
            self.dest_pos = _leaf_positions(router)
        else:
            self.lanes = min(max(_widest(router), 1), MAX_LANES)
        self.ports = np.asarray(router.ports(), dtype=np.uint64)
        kind = {d.name: d.kind for d in self.topo.devices}
        # switch egress ports: where queues build and PFC pauses start (a NIC schedules its
        # own queue pairs and is never the congestion point)
        self.egress = np.array([kind[ln.src] == "switch" for ln in self.topo.links], dtype=bool)
        self.network_link = np.array([kind[ln.src] in _NET_KINDS or kind[ln.dst] in _NET_KINDS
                                      for ln in self.topo.links], dtype=bool)
        # lanes part only on switch-to-switch links: those carry capacity x lanes, and a
        # flow lists them once per lane (m of L lanes on a link load it with m/L of the flow)
        between = np.array([kind[ln.src] == kind[ln.dst] == "switch"
                            for ln in self.topo.links], dtype=bool)
        self.between = between
        self.lane_scale = np.where(between, float(self.lanes), 1.0)
        self.recovery_s = recovery_s() if network.lossless and network.cc == "dcqcn" else 0.0

    def per_connection(self) -> FabricPolicy:
        """This policy with one NCCL connection per op (lanes = its queue pairs where
        connections are hashed apart): for callers that list every connection as its own
        op, as the trees do (nccl_trees.tree_fabric_slowdown), where NCCL's channel layout and
        not CONNECTIONS_PER_PEER sets how many connections cross a NIC."""
        if self.net.routing not in ("ecmp", "flowlet") or self.connections == 1:
            return self
        out = copy.copy(self)
        out.connections, out.lanes = 1, self.net.qps_per_connection
        out.lane_scale = np.where(self.between, float(out.lanes), 1.0)
        return out

    # ---- capacity --------------------------------------------------------------------------
    def capacity(self, capacity: Floats, link_class: npt.NDArray[np.signedinteger[Any]],
                 latency: Floats) -> Floats:
        """Payload capacity of each link: what other jobs leave of the switch-to-switch
        cables (background), then network links lose go-back-N retransmissions and timeouts
        on a lossy fabric (window = capacity x base round trip / MTU, the timeout RTO_S in
        packet times at the link's rate)."""
        capacity = self._background(capacity)
        if self.net.routing in AR_SWITCHES and self.between.any():  # fabric_ar.ar_share
            cable = np.flatnonzero(self.between)[0]
            capacity = np.where(self.between, capacity * ar_share(
                self.router, self.net.routing, float(capacity[cable]),
                float(latency[cable]), self.net.mtu), capacity)
        if self.net.lossless or self.net.loss_rate == 0:
            return capacity
        rtt = 2.0 * _one_way(self.topo, latency)
        out = capacity.copy()
        net = link_class == _NET
        for i in np.flatnonzero(net):
            w = np.ceil(capacity[i] * rtt / self.net.mtu) + 1
            rto = RTO_S * capacity[i] / self.net.mtu
            out[i] = capacity[i] * goodput(self.net.loss_rate, w, rto)
        return out

    def _background(self, capacity: Floats) -> Floats:
        """Capacity left by other jobs on switch-to-switch cables. Their share of a cable is
        drawn per cable (their flows are hashed too). Adaptive routing sends each packet to
        the least loaded up-port of the leaf it leaves: in the fluid limit the job's traffic
        fills what a leaf's up-links leave together, so they count the mean of what they
        leave. On InfiniBand (`adaptive`) a spine's congested down-link to the next leaf
        backs up into that up-port (credit-based flow control), so the choice sees the whole
        leaf-spine-leaf path and the down-links into a leaf are pooled too; on Spectrum-X
        (`spectrum-x`, Ethernet: no credits) they meet their own load. A hashed, static or
        sprayed (oblivious: an even split per path) flow meets each cable's own load."""
        if self.net.background <= 0:
            return capacity
        left = self.left()
        if self.net.routing in ("adaptive", "spectrum-x"):
            leaves = self._leaves()
            ends = [np.asarray(self.router.lsrc)]
            if self.net.routing == "adaptive":  # credits: a spine's congestion backs up
                ends.append(np.asarray(self.router.ldst))
            for end in ends:
                group = self.between & np.isin(end, leaves)
                for sw in np.unique(end[group]):
                    sel = group & (end == sw)
                    left[sel] = left[sel].mean()
        return capacity * left

    def left(self) -> Floats:
        """Per link, the share of its capacity other jobs leave (1 without background)."""
        rng = np.random.default_rng([self.net.seed, 0xB6])
        n = len(self.between)
        share = np.minimum(rng.uniform(0.0, 2.0 * self.net.background, n), 0.95)
        out: Floats = np.where(self.between & (self.net.background > 0), 1.0 - share, 1.0)
        return out

    def _leaves(self) -> Ints:
        """Device indices of the switches NICs hang off (the first tier)."""
        kind = self.topo.device_kinds()
        src, dst = np.asarray(self.router.lsrc), np.asarray(self.router.ldst)
        nic = np.array([k == "nic" for k in kind])[src]
        return np.unique(dst[nic & np.array([k == "switch" for k in kind])[dst]])

    # ---- routes ----------------------------------------------------------------------------
    def lane_routes(self, single: Routes, idx: Ints, gs: Ints, gd: Ints,
                    channel: Ints) -> Routes:
        """Route rows with lanes: each row is lane 0's path, then the switch-to-switch links
        of lanes 1..L-1 (where lanes part; the other links are common to all lanes and
        appear once). `single` holds one path per op; rows `idx`, inter-node ops from rail
        GPU gs to gd on `channel`, get one path per lane."""
        L = self.lanes
        if L == 1 and not len(idx):
            return single
        blocks = [single.copy() for _ in range(L)]
        placed = None
        if self.net.routing == "flowlet" and len(idx):  # each unit on one path (fabric_ar)
            placed = flowlet_paths(self.router, np.asarray(gs, dtype=np.int64),
                                   np.asarray(gd, dtype=np.int64), L, self.net.seed,
                                   self.left())
        for j in range(L):
            if len(idx):
                lane = self._lane(gs, gd, channel, j) if placed is None else \
                    np.asarray(self.router.route_matrix(gs, gd, channel,
                                                        key=lane_key(placed[:, j])),
                               dtype=np.int32)
                w = max(blocks[j].shape[1], lane.shape[1])
                blocks[j] = _widen(blocks[j], w)
                blocks[j][idx] = _widen(lane, w)
        split = self.lane_scale > 1
        parts = [blocks[0]]
        for b in blocks[1:]:
            parts.append(np.where((b >= 0) & split[np.where(b >= 0, b, 0)], b, -1))
        full = np.concatenate(parts, axis=1)
        order = np.argsort(full < 0, axis=1, kind="stable")
        full = np.take_along_axis(full, order, axis=1)
        width = int((full >= 0).sum(axis=1).max(initial=0))
        return np.ascontiguousarray(full[:, :width], dtype=np.int32)

    def _lane(self, gs: Ints, gd: Ints, channel: Ints, j: int) -> npt.NDArray[np.int32]:
        net = self.net
        gs, gd = np.asarray(gs, dtype=np.int64), np.asarray(gd, dtype=np.int64)
        c = np.asarray(channel, dtype=np.int64)
        n = len(gs)
        if net.routing == "ecmp":
            f = net.hash_inputs
            zero = np.zeros(n, np.uint64)
            a = self.ports[gs] if "src" in f else zero
            b = self.ports[gd] if "dst" in f else zero
            # lane j = connection j // qps (its channel's own), queue pair j % qps
            conn = c.astype(np.uint64) * np.uint64(self.connections) + \
                np.uint64(j // net.qps_per_connection)
            q = conn * np.uint64(MAX_LANES) + np.uint64(j % net.qps_per_connection + 1) \
                if "qp" in f else zero
            key = mix(mix(a, b, q), np.full(n, net.seed, np.uint64), zero)
            if net.polarized:  # every stage hashes alike: later stages repeat the first
                key = polarized_key(self.router, gs, gd, key)
        elif net.routing == "static":  # D-mod-k: the destination's place under its leaf
            key = lane_key(self.dest_pos[gd])
        else:  # an even split: lane j on tied path j, rotated per pair so pairs differ
            rot = mix(self.ports[gs], self.ports[gd], np.full(n, net.seed, np.uint64))
            key = lane_key((rot % np.uint64(MAX_LANES)) + np.uint64(j))
        return np.asarray(self.router.route_matrix(gs, gd, c, key=key), dtype=np.int32)

    def properties(self, table: Routes, latency: Floats,
                   link_class: npt.NDArray[np.signedinteger[Any]],
                   capacity: Floats) -> tuple[Floats, npt.NDArray[np.signedinteger[Any]], Floats]:
        """(latency, class, bottleneck) of lane rows: a link's latency counts 1/scale per
        entry (lanes' tied paths have equal latency), the bottleneck is the least
        capacity x scale / multiplicity over the row's links."""
        if table.shape[1] == 0:
            n = len(table)
            return np.zeros(n), np.zeros(n, dtype=np.int8), np.full(n, np.inf)
        valid = table >= 0
        safe = np.where(valid, table, 0)
        lat = np.where(valid, latency[safe] / self.lane_scale[safe], 0.0).sum(axis=1)
        cls = np.where(valid, link_class[safe], 0).max(axis=1)
        # multiplicity of each entry's link within its row
        mult = np.zeros(table.shape)
        for k in range(table.shape[1]):
            mult += valid & (table == table[:, k:k + 1])
        rate = np.where(valid, capacity[safe] * self.lane_scale[safe] / np.maximum(mult, 1),
                        np.inf)
        return lat, cls, rate.min(axis=1)

    # ---- pipelines -------------------------------------------------------------------------
    def pipeline_slowdown(self, table: Routes, capacity: Floats,
                          load: Floats | None = None, held: float = np.inf) -> float:
        """How much slower the flows of route rows `table` move on this fabric than on one
        whose switch-to-switch links never collide (unlimited), when they move at one pace:
        the edges of a pipelined tree each carry the same bytes, and the slowest edge holds
        the others back. The pace is the least over links of capacity x lanes / the lane
        entries on the link (so per-QP hashing, failed cables, oversubscription and loss all
        count); the ratio is >= 1. `load`: other flows' lane entries per link (another job's
        trees, concurrent.trees_together), which share the links but set no pace of these flows;
        the ideal is these flows' alone. `held`: a pace PFC's pauses hold one of them to
        (pause_caps of every flow together), in the same units (capacity x lanes / entry)."""
        if not len(table) or not table.shape[1]:
            return 1.0
        valid = table >= 0
        safe = np.where(valid, table, 0)
        cnt = np.bincount(safe[valid], minlength=len(capacity)).astype(np.float64)
        per = capacity * self.lane_scale / np.maximum(cnt, 1.0)
        ideal = float(np.where(valid & ~self.between[safe], per[safe], np.inf).min())
        if load is not None:
            per = capacity * self.lane_scale / np.maximum(cnt + load, 1.0)
        real = min(float(np.where(valid, per[safe], np.inf).min()), held)
        if not np.isfinite(ideal) or real <= 0:
            return 1.0
        return max(ideal / real, 1.0)

    # ---- PFC pause spreading -----------------------------------------------------------------
    def pause_caps(self, table: Routes, alone: Floats, capacity: Floats) -> Floats:
        """Per op: the rate PFC's head-of-line blocking holds it to (inf: none), for ops that
        run together; only without congestion control on a lossless fabric. A hot port is a
        switch egress that is some op's bottleneck, shared by several ops and asked for more
        than it carries (an incast, or flows hashed together); the links before it on those
        ops' rows (lane 0's path order) are paused to the hot ops' share, and every other op
        on a paused link is held to it."""
        n = len(table)
        caps = np.full(n, np.inf)
        if not self.net.lossless or self.net.cc != "none" or n < 2 or table.shape[1] == 0:
            return caps
        valid = table >= 0
        safe = np.where(valid, table, 0)
        scale = self.lane_scale
        alone = np.where(np.isfinite(alone), alone, 0.0)
        nl = len(capacity)
        demand = np.zeros(nl)
        np.add.at(demand, safe[valid], (alone[:, None] / scale[safe])[valid])
        cnt = np.bincount(safe[valid], minlength=nl).astype(np.float64)
        ops_on = np.zeros(nl)
        first = valid.copy()
        for k in range(1, table.shape[1]):  # count each op once per link
            first[:, k] &= ~(table[:, :k] == table[:, k:k + 1]).any(axis=1)
        np.add.at(ops_on, safe[first], 1)
        per_link = np.where(valid, (capacity * scale)[safe] / np.maximum(cnt[safe], 1), np.inf)
        share = per_link.min(axis=1)
        at = np.argmin(per_link, axis=1)
        rows = np.arange(n)
        hot = np.zeros(nl, dtype=bool)
        hot[safe[rows, at][valid[rows, at]]] = True
        hot &= self.egress & (ops_on > 1) & (demand > capacity * (1 + 1e-9))
        h = valid & hot[safe]
        # (numpy's stub types .any(axis=1) as maybe a scalar: on a 2-D array it is 1-D)
        has = cast(npt.NDArray[np.bool_], h.any(axis=1))
        if not has.any():
            return caps
        pos = np.argmax(h, axis=1)
        up = valid & (np.arange(table.shape[1])[None, :] < pos[:, None]) & has[:, None]
        up &= self.network_link[safe]
        paused = np.full(nl, np.inf)
        np.minimum.at(paused, safe[up], np.broadcast_to(share[:, None], table.shape)[up])
        caps = np.where(valid, paused[safe], np.inf).min(axis=1)
        # the incast flows themselves are held by max-min at the hot port (and speed up when
        # it clears); the static cap is for victims only
        return np.where(has, np.inf, caps)


def _widen(m: Routes, width: int) -> Routes:
    if m.shape[1] >= width:
        return m
    return np.concatenate([m, np.full((len(m), width - m.shape[1]), -1, np.int32)], axis=1)


def _leaf_positions(router: Router) -> Ints:
    """Per rank: the place of its NIC among the NICs under the same leaf (port order), the
    index a destination-based fat-tree routing (OpenSM ftree) spreads over the up-ports."""
    ports = np.asarray(router.ports(), dtype=np.int64)
    t = router._ensure_tables()
    leaf = t["y"] if t is not None else np.zeros(len(ports), dtype=np.int64)
    out = np.zeros(len(ports), dtype=np.int64)
    for y in np.unique(leaf):
        sel = np.flatnonzero(leaf == y)
        uniq, inv = np.unique(ports[sel], return_inverse=True)
        out[sel] = inv
    return out


def _widest(router: Router) -> int:
    """Most tied fabric paths between two ports (the switch-to-switch ECMP width)."""
    t = router._ensure_tables()
    if t is not None:
        return int(t["sw"][1].max(initial=1))
    return 1


def _one_way(topo: Topology, latency: Floats) -> float:
    """Latency of the longest route between the first rank and the others' nodes."""
    if topo.nodes < 2:
        return 0.0
    last = topo.nranks - 1
    return float(sum(latency[i] for i in topo.route(0, last)))
