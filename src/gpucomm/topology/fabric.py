"""The network fabric beyond line rate: how flows are routed, what the fabric does with loss,
which links have failed; plus the port-level rail-optimised leaf/spine builder.

`Network` is the value a Topology carries (`Topology.network`, None = the plain model: one
ECMP path per (src, dst, channel), no loss). The mechanisms that use it at simulation time live
in `gpucomm.simulate.fabric`; here are the value, the topology transforms (failed links are
removed, so routes are recomputed: ECMP rehashes over what is left) and the fabric summary
`gpucomm topo show` prints.

Rail-optimised 2-tier Clos (`fabric="rail-2tier"`), the shape of NVIDIA's DGX SuperPOD and of
most RoCE training fabrics: nodes come in groups of `leaf_ports` (one leaf port per node and
rail); NIC i of every node of group g is cabled to leaf (g, i); each leaf has
`leaf_ports / oversubscription` uplinks at NIC speed, one cable to each spine. Unlike the
aggregated "rail" fabric, every cable is its own link, so a switch's per-flow hash can put two
flows on one cable while another cable idles.

    >>> from gpucomm.topology import build_topology
    >>> t = build_topology("dgx-h100", nodes=4, fabric="rail-2tier", leaf_ports=2)
    >>> fabric_summary(t)["tiers"][1]["switches"], fabric_summary(t)["redundancy"]["paths"]
    (2, 2)
"""
from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass

from ..errors import ConfigError, TopologyError
from ..hardware import get_link_tech
from .model import Device, Link

ROUTINGS = ("auto", "static", "ecmp", "flowlet", "adaptive", "spectrum-x", "spray")
# What each NIC technology gets when no routing is named:
# - InfiniBand: its subnet manager's static routing. OpenSM's and UFM's routing engines
#   (minhop, updn, ftree; NVIDIA UFM Enterprise User Manual, "Network Management": routing
#   engines) fill each switch's linear forwarding table per destination LID; on a fat tree
#   ftree spreads the destinations under one leaf over its up-ports (destination mod
#   up-ports, "optimised for congestion-free shift patterns"). Adaptive routing is a separate
#   SM feature the operator configures (UFM manual, "Appendix - Adaptive Routing"; the
#   switch-embedded MLNX-OS SM does not support it): `--routing adaptive`.
# - Ethernet (RoCE): per-flow ECMP hashing of the 5-tuple, the switches' default.
# - EFA: SRD sprays every packet over many paths.
DEFAULT_ROUTING = {"ib": "static", "efa": "spray"}
# fabrics that never drop: InfiniBand's credit-based link-level flow control
LOSSLESS_KINDS = ("ib",)
HASH_FIELDS = ("src", "dst", "qp")
MAX_QPS = 64


@dataclass(frozen=True)
class Network:
    """How the fabric treats flows.

    routing: "auto" (the NIC's own, DEFAULT_ROUTING: static on InfiniBand, spray on EFA,
    else ecmp), "static" (an InfiniBand subnet manager's destination-based tables: every flow
    to one NIC takes the up-port its destination's place under its leaf picks, D-mod-k),
    "ecmp" (a switch hashes each flow, one queue pair, onto one of the tied paths),
    "flowlet" (adaptive routing in flowlets, for NICs that cannot reorder: each queue pair
    placed once on the least loaded up-port; simulate/fabric_ar.py),
    "adaptive" (InfiniBand adaptive routing: each switch sends each packet to its least loaded
    port, and credit backpressure shows it a congested port further on), "spectrum-x"
    (Spectrum-4 switches' per-packet adaptive routing by the switch's own egress queues,
    BlueField-3/ConnectX-8 SuperNICs reordering: Ethernet has no credits, so congestion past
    the deciding switch is not in its view) or "spray" (oblivious per-packet spraying over
    every path, as EFA's SRD). qps_per_connection: queue pairs per
    NCCL connection (NCCL_IB_QPS_PER_CONNECTION); the connection's data is split over them.
    hash_inputs: the packet fields the ECMP hash reads: "src"/"dst" (the NICs' addresses) and
    "qp" (the destination queue pair: Meta's E-ECMP; without it all QPs between two NICs
    collide). seed: the switches' hash seed (and which links fail). placement_seed: where
    a randomly placed job's nodes land (-1: the hash seed, as before they were separate).
    lossless: PFC on (no drops);
    else RoCE drops under congestion at `loss_rate` per packet and the NIC goes back N
    (InfiniBand's credit-based links never drop: lossy applies to Ethernet NICs only).
    cc: congestion control on a lossless fabric, "dcqcn" (rate control: no pause spreading,
    a rate-recovery cost) or "none" (PFC alone: pauses spread to victim flows).
    fail_links: leaf-spine cables that are down. background: other jobs' mean share of each
    leaf-spine cable (their flows are hashed too, so the share varies from cable to cable:
    uniform in [0, 2 x background], capped at 0.95, drawn by the hash seed); 0: a fabric of
    its own. polarized: every switch computes the same hash of the same fields (one function,
    one seed), so where a path has two hashing stages (rail-3tier) the second repeats the
    first's choice; False: each switch its own seed (hash rotation), stages independent.

        >>> Network(qps_per_connection=4, lossless=False, loss_rate=1e-4).routing
        'auto'
    """
    routing: str = "auto"
    qps_per_connection: int = 1
    hash_inputs: tuple = HASH_FIELDS
    seed: int = 0
    lossless: bool = True
    loss_rate: float = 0.0
    cc: str = "dcqcn"
    fail_links: int = 0
    mtu: int = 4096
    connections: int = 0  # connections per network peer; 0: NCCL's default (2)
    placement_seed: int = -1  # the random placement's seed; -1: `seed`
    background: float = 0.0  # other jobs' mean share of each switch-to-switch cable
    polarized: bool = False  # every switch hashes alike: a later stage repeats the first

    def __post_init__(self):
        if self.routing not in ROUTINGS:
            raise ConfigError(f"routing {self.routing!r} not allowed: one of {', '.join(ROUTINGS)}")
        q = self.qps_per_connection
        if isinstance(q, bool) or not isinstance(q, int) or not 1 <= q <= MAX_QPS:
            raise ConfigError(f"qps_per_connection {q!r} not allowed: an integer 1..{MAX_QPS}")
        fields = tuple(self.hash_inputs)
        bad = [f for f in fields if f not in HASH_FIELDS]
        if bad or not fields or len(set(fields)) != len(fields):
            raise ConfigError(f"hash_inputs {','.join(map(str, fields)) or '(none)'} not "
                              f"allowed: distinct fields among {', '.join(HASH_FIELDS)}")
        object.__setattr__(self, "hash_inputs", tuple(f for f in HASH_FIELDS if f in fields))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed {self.seed!r} not allowed: an integer >= 0")
        ps = self.placement_seed
        if isinstance(ps, bool) or not isinstance(ps, int) or ps < -1:
            raise ConfigError(f"placement_seed {ps!r} not allowed: an integer >= 0 (-1: seed)")
        p = self.loss_rate
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
            raise ConfigError(f"loss_rate {p!r} not allowed: a probability in [0, 1)")
        if self.lossless and p > 0:
            raise ConfigError("loss_rate applies to a lossy fabric: give --lossy with "
                              "--loss-rate (a lossless fabric drops nothing)")
        if self.cc not in ("dcqcn", "none"):
            raise ConfigError(f"cc {self.cc!r} not allowed: dcqcn or none")
        k = self.fail_links
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ConfigError(f"fail_links {k!r} not allowed: an integer >= 0")
        bg = self.background
        if isinstance(bg, bool) or not isinstance(bg, (int, float)) or not 0.0 <= bg < 0.5:
            raise ConfigError(f"background {bg!r} not allowed: a mean share of a cable in "
                              "[0, 0.5) (each cable's share is drawn up to twice the mean)")
        c = self.connections
        if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= MAX_QPS:
            raise ConfigError(f"connections {c!r} not allowed: an integer 0..{MAX_QPS} (0: auto)")
        if not isinstance(self.polarized, bool):
            raise ConfigError(f"polarized {self.polarized!r} not allowed: true or false")
        if isinstance(self.mtu, bool) or not isinstance(self.mtu, int) or self.mtu < 256:
            raise ConfigError(f"mtu {self.mtu!r} not allowed: an integer >= 256 bytes")

    @property
    def placement_rng_seed(self) -> int:
        """The seed of a random placement: placement_seed, or the hash seed if unset."""
        return self.seed if self.placement_seed < 0 else self.placement_seed

    def resolved(self, nic_kind: str) -> "Network":
        """This network on NICs of `nic_kind` (catalog kind: ib, roce, efa, ...): the routing
        "auto" stands for made concrete, and InfiniBand made lossless.

            >>> Network(lossless=False, loss_rate=1e-3).resolved("ib").routing
            'static'
        """
        out = self
        if self.routing == "auto":
            out = dataclasses.replace(out, routing=DEFAULT_ROUTING.get(nic_kind, "ecmp"))
        if nic_kind in LOSSLESS_KINDS and not out.lossless:
            out = dataclasses.replace(out, lossless=True, loss_rate=0.0)
        return out


def with_network(topo, network: Network | None):
    """`topo` with `network` applied: the failed cables removed (routes recomputed), the
    network recorded for the simulator. TopologyError if the failures cut ranks apart."""
    if network is None:
        return topo
    kinds = {get_link_tech(d.model).kind for d in topo.devices if d.kind == "nic" and d.model}
    if len(kinds) == 1:
        network = network.resolved(kinds.pop())
    links = list(topo.links)
    if network.fail_links:
        cables = _cables(topo)
        if network.fail_links > len(cables):
            raise ConfigError(f"fail_links {network.fail_links} is more than the "
                              f"{len(cables)} switch-to-switch cables of {topo.name}")
        down: set[int] = set()
        for pair in random.Random(network.seed).sample(cables, network.fail_links):
            down.update(pair)
        links = [ln for i, ln in enumerate(links) if i not in down]
    out = dataclasses.replace(topo, links=tuple(links), network=network)
    if topo.cache.replica is not None:  # node-internal links come first and are never failed
        out.cache.replica = topo.cache.replica
    try:
        out.check_routes()
    except TopologyError as e:
        raise TopologyError(f"with {network.fail_links} failed cable(s) (seed "
                            f"{network.seed}): {e}") from None
    return out


def _cables(topo) -> list[tuple[int, int]]:
    """Switch-to-switch cables as (link, reverse link) index pairs, in link order."""
    kind = {d.name: d.kind for d in topo.devices}
    where = {(ln.src, ln.dst, k): i for i, ln in enumerate(topo.links) for k in [0]}
    seen: set[int] = set()
    out: list[tuple[int, int]] = []
    for i, ln in enumerate(topo.links):
        if kind[ln.src] == kind[ln.dst] == "switch" and i not in seen:
            j = where.get((ln.dst, ln.src, 0))
            pair = (i, j) if j is not None else (i, i)
            seen.update(pair)
            out.append(pair)
    return out


# ---- the port-level rail-optimised 2- and 3-tier builder ---------------------------------------
PLACEMENTS = ("packed", "spread", "random")


def rail_2tier(nodes, nic_names, nic_models, oversub, leaf_ports, placement="packed", seed=0,
               tiers=2, tor=False):
    """Devices and links of a rail-optimised leaf/spine fabric, one link per cable.

    placement: where the job's nodes sit. "packed": node k in leaf group k // leaf_ports (a
    ring stays under one leaf but at group boundaries); "spread": node k in group k % groups
    (consecutive ranks on different leaves: every ring hop crosses the spines); "random": the
    nodes shuffled over the leaves by `seed` (a job that lands wherever nodes were free).

    tiers=3 (`rail-3tier`): each rail plane is a three-tier fat tree of switches with
    2 x leaf_ports ports (a k-ary fat tree, Al-Fares et al., SIGCOMM 2008, per rail): pods of
    leaf_ports leaf groups; leaf (g, i) has one cable to each of its pod's U = leaf_ports /
    oversubscription aggregation switches of rail i; aggregation switch a of a pod has one
    cable to each of the leaf_ports core switches (a, *), which every rail shares (so a
    single pod of several rails has them too: rails meet only there). Between
    pods a flow has U x leaf_ports tied paths and two hashing stages (leaf, then aggregation
    switch): where every switch hashes alike, the second choice repeats the first
    (polarization, Network.polarized).

    tor=True (`tor-2tier`): not rail-optimised; every NIC of group g's nodes is cabled to one
    top-of-rack leaf g, which has leaf_ports x NICs / oversubscription uplinks, one cable to
    each spine (Meta's AI Zone: a rack training switch (RTSW) over copper to two Grand Teton
    hosts' 16 x 400G NICs, cluster training switches (CTSW) as spines, 1:1.125 spine
    over-provisioning, i.e. oversubscription 1/1.125 and 18 uplinks: Gangidi et al., "RDMA
    over Ethernet for Distributed AI Training at Meta Scale", SIGCOMM 2024, topology
    section)."""
    if tor:
        return _tor_2tier(nodes, nic_names, nic_models, oversub, leaf_ports, placement, seed)
    if placement not in PLACEMENTS:
        raise ConfigError(f"placement {placement!r} not allowed: one of {', '.join(PLACEMENTS)}")
    rails = len(nic_names)
    groups = math.ceil(nodes / leaf_ports)
    uplinks = max(1, round(leaf_ports / oversub))
    devices, links = [], []
    tech = get_link_tech(nic_models[0])
    for g in range(groups):
        for i in range(rails):
            devices.append(Device(f"leaf{g}.{i}", "switch", -1, nic_models[i]))
    for k, g in enumerate(_leaf_groups(nodes, leaf_ports, placement, seed)):
        for i in range(rails):
            links += _duplex(f"n{k}.{nic_names[i]}", f"leaf{g}.{i}", get_link_tech(nic_models[i]))
    if tiers == 3:
        d, ln = _upper_tiers(groups, rails, uplinks, leaf_ports, nic_models[0], tech)
        return devices + d, links + ln
    if groups * rails > 1:
        devices += [Device(f"spine{s}", "switch", -1, nic_models[0]) for s in range(uplinks)]
        for g in range(groups):
            for i in range(rails):
                for s in range(uplinks):
                    links += _duplex(f"leaf{g}.{i}", f"spine{s}", tech)
    return devices, links


def _leaf_groups(nodes, leaf_ports, placement, seed):
    """Per node, the leaf group it sits under (rail_2tier's `placement`)."""
    groups = math.ceil(nodes / leaf_ports)
    order = list(range(nodes))
    random.Random(seed).shuffle(order)
    return [k // leaf_ports if placement == "packed" else k % groups if
            placement == "spread" else order[k] // leaf_ports for k in range(nodes)]


def _tor_2tier(nodes, nic_names, nic_models, oversub, leaf_ports, placement, seed):
    """Devices and links of a top-of-rack leaf/spine fabric (rail_2tier with tor=True)."""
    groups = math.ceil(nodes / leaf_ports)
    uplinks = max(1, round(leaf_ports * len(nic_names) / oversub))
    tech = get_link_tech(nic_models[0])
    devices = [Device(f"leaf{g}", "switch", -1, nic_models[0]) for g in range(groups)]
    links = []
    for k, g in enumerate(_leaf_groups(nodes, leaf_ports, placement, seed)):
        for name, model in zip(nic_names, nic_models):
            links += _duplex(f"n{k}.{name}", f"leaf{g}", get_link_tech(model))
    if groups > 1:
        devices += [Device(f"spine{s}", "switch", -1, nic_models[0]) for s in range(uplinks)]
        for g in range(groups):
            for s in range(uplinks):
                links += _duplex(f"leaf{g}", f"spine{s}", tech)
    return devices, links


def _upper_tiers(groups, rails, uplinks, pod, model, tech):
    """Aggregation and core switches of a rail-optimised three-tier fat tree (rail_2tier)."""
    devices, links = [], []
    pods = math.ceil(groups / pod)
    # the core joins pods, and the rails: it is the only tier every rail's planes reach, so a
    # single pod of several rails has one too (a NIC of rail 0 reaches rail 1's NICs there)
    core = pods > 1 or rails > 1
    for p in range(pods):
        for i in range(rails):
            for a in range(uplinks):
                agg = f"agg{p}.{i}.{a}"
                devices.append(Device(agg, "switch", -1, model))
                for g in range(p * pod, min((p + 1) * pod, groups)):
                    links += _duplex(f"leaf{g}.{i}", agg, tech)
                if core:
                    links += [x for c in range(pod) for x in _duplex(agg, f"core{a}.{c}", tech)]
    if core:  # shared by the rails, as rail_2tier's spines: NICs of two rails connect
        devices += [Device(f"core{a}.{c}", "switch", -1, model) for a in range(uplinks)
                    for c in range(pod)]
    return devices, links


def _duplex(a, b, tech):
    return [Link(a, b, tech.bandwidth_Bps, tech.latency_s, tech.name, tech.efficiency),
            Link(b, a, tech.bandwidth_Bps, tech.latency_s, tech.name, tech.efficiency)]


# ---- what `topo show` prints --------------------------------------------------------------
def fabric_summary(topo) -> dict | None:
    """Tiers of the switch fabric (leaves: switches with NIC ports; spines: the rest), each
    tier's down:up capacity (oversubscription) and the redundancy between leaves: how many
    tied paths join two leaves and the share of a leaf's uplink one failed cable takes away.
    None for a topology without fabric switches."""
    kind = {d.name: d.kind for d in topo.devices}
    switches = [d.name for d in topo.devices if d.kind == "switch"]
    if not switches:
        return None
    down: dict[str, float] = {}        # leaf -> NIC port capacity into it
    up: dict[str, float] = {}          # switch -> capacity to other switches
    cables_up: dict[str, int] = {}     # switch -> cables to other switches
    for ln in topo.links:
        if kind[ln.dst] == "switch" and kind[ln.src] == "nic":
            down[ln.dst] = down.get(ln.dst, 0.0) + ln.bandwidth_Bps
        if kind[ln.src] == "switch" and kind[ln.dst] == "switch":
            up[ln.src] = up.get(ln.src, 0.0) + ln.bandwidth_Bps
            cables_up[ln.src] = cables_up.get(ln.src, 0) + 1
    leaves = [s for s in switches if s in down]
    spines = [s for s in switches if s not in down]
    ratios = [down[s] / up[s] for s in leaves if up.get(s)]
    uplinks_per_leaf = min((cables_up.get(s, 0) for s in leaves), default=0)
    tiers: list[dict[str, object]] = [
        {"tier": "leaf", "switches": len(leaves),
         "oversubscription": round(max(ratios), 3) if ratios else None,
         "uplinks_per_leaf": uplinks_per_leaf}]
    # a third tier (rail-3tier): switches cabled to no leaf are the core above the spines
    near = {ln.dst for ln in topo.links if ln.src in down and kind[ln.dst] == "switch"}
    core = [s for s in spines if s not in near]
    for name, group in (("spine", [s for s in spines if s in near] if core else spines),
                        ("core", core)):
        if group:
            tiers.append({"tier": name, "switches": len(group),
                          "links_per_spine": min(cables_up.get(s, 0) for s in group)})
    paths = _leaf_paths(topo, leaves)
    red = {"paths": paths,
           "cable_share": None if not paths else round(1.0 / max(uplinks_per_leaf, 1), 4)}
    net = topo.network
    return {"tiers": tiers, "redundancy": red,
            "network": None if net is None else dataclasses.asdict(net)}


def _leaf_paths(topo, leaves) -> int:
    """Fewest tied shortest paths between two leaves of one rail in different groups (or any
    two leaves): the ECMP width a flow's hash chooses among."""
    if len(leaves) < 2:
        return 0
    router = topo.router
    idx = topo.index_of
    best = None
    a = leaves[0]
    for b in leaves[1:]:
        n = len(router._paths(idx(a), idx(b), False))
        best = n if best is None else min(best, n)
    return best or 0
