"""The topology value: devices, directed links, ranks — plus routing and YAML round trips.

A Topology is a frozen value. Routing state (shortest paths, ECMP alternatives, the vectorised
route tables) is computed lazily by `gpucomm.topology.routing.Router` and kept in a private
cache that takes no part in equality or hashing.

Example:
    >>> t = Topology.from_yaml('''
    ... name: two-gpus
    ... devices:
    ...   - {name: g0, kind: gpu, node: 0}
    ...   - {name: g1, kind: gpu, node: 0}
    ... links:
    ...   - {src: g0, dst: g1, tech: nvlink4, duplex: true}
    ... ''')
    >>> t.route(0, 1), t.links[0].bandwidth_Bps
    ((0,), 450000000000.0)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from ..errors import TopologyError
from ..limits import read_text

DEVICE_KINDS = ("gpu", "cpu", "pcie_switch", "nvswitch", "nic", "switch", "memory")
# Devices a route may pass through. A GPU or a NIC is never a router, host memory only a
# bounce buffer (used on purpose when P2P is off), never a shortcut between two CPUs.
TRANSIT_KINDS = frozenset({"cpu", "pcie_switch", "nvswitch", "switch"})


@dataclass(frozen=True)
class Device:
    """A GPU, CPU root complex, PCIe switch, NVSwitch, NIC, network switch or host memory.

    `node` is the node index, -1 for fabric switches that belong to no node."""
    name: str
    kind: str
    node: int
    model: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TopologyError(f"device name {self.name!r} must be a non-empty string")
        if self.kind not in DEVICE_KINDS:
            raise TopologyError(f"device {self.name!r}: unknown kind {self.kind!r}; "
                                f"allowed: {', '.join(DEVICE_KINDS)}")
        if isinstance(self.node, bool) or not isinstance(self.node, int) or self.node < -1:
            raise TopologyError(f"device {self.name!r}: node {self.node!r} must be an integer "
                                ">= 0, or -1 for a fabric switch")
        if self.node == -1 and self.kind != "switch":
            raise TopologyError(f"device {self.name!r}: only kind 'switch' may have node -1 "
                                f"(a {self.kind} belongs to a node)")


@dataclass(frozen=True)
class Link:
    """A DIRECTED link (a bundle of lanes/links between the same two devices).

    `bandwidth_Bps` is nominal per direction; `efficiency` is the achievable fraction
    (encoding and protocol overhead), kept apart so both stay visible."""
    src: str
    dst: str
    bandwidth_Bps: float
    latency_s: float
    tech: str
    efficiency: float = 1.0

    def __post_init__(self):
        if self.src == self.dst:
            raise TopologyError(f"link {self.src}->{self.dst} connects a device to itself")
        for name, minimum in (("bandwidth_Bps", "> 0"), ("latency_s", ">= 0")):
            v = getattr(self, name)
            ok = (not isinstance(v, bool) and isinstance(v, (int, float)) and np.isfinite(v)
                  and (v > 0 if minimum == "> 0" else v >= 0))
            if not ok:
                raise TopologyError(f"link {self.src}->{self.dst}: {name} {v!r} must be a "
                                    f"finite number {minimum}")
        eff = self.efficiency
        if isinstance(eff, bool) or not isinstance(eff, (int, float)) or not 0.0 < eff <= 1.0:
            raise TopologyError(f"link {self.src}->{self.dst}: efficiency {self.efficiency!r} "
                                "must be in (0, 1]")

    @property
    def achievable_Bps(self) -> float:
        return self.bandwidth_Bps * self.efficiency


@dataclass(frozen=True)
class Topology:
    """Devices, directed links and the GPUs that are ranks (node-major order).

    `p2p=False` means GPUs cannot reach each other (or a NIC) directly over PCIe: data
    bounces through a host `memory` device. `nic_affinity` names each rank's NIC (the one
    it uses for inter-node traffic, GPUDirect RDMA); empty = the closest NIC.
    """
    name: str
    devices: tuple[Device, ...]
    links: tuple[Link, ...]
    ranks: tuple[str, ...]
    gpus_per_node: int
    nodes: int
    in_switch_reduction: bool = False
    p2p: bool = True
    nic_affinity: tuple[str, ...] = ()
    network: object = None  # a topology.fabric.Network: routing, loss, failures (None: plain)
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False,
                         hash=False)

    def __post_init__(self):
        for name in ("devices", "links", "ranks", "nic_affinity"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        index = {}
        for d in self.devices:
            if not isinstance(d, Device):
                raise TopologyError(f"devices must be Device values, got {type(d).__name__}")
            if d.name in index:
                raise TopologyError(f"duplicate device name {d.name!r}")
            index[d.name] = d
        for i, ln in enumerate(self.links):
            for end in (ln.src, ln.dst):
                if end not in index:
                    raise TopologyError(f"link {i} ({ln.src}->{ln.dst}) is dangling: no device "
                                        f"named {end!r}")
        if not self.ranks:
            raise TopologyError(f"topology {self.name!r} has no ranks (no GPU devices)")
        if len(set(self.ranks)) != len(self.ranks):
            raise TopologyError("ranks name the same GPU twice")
        for r in self.ranks:
            if r not in index or index[r].kind != "gpu":
                raise TopologyError(f"rank device {r!r} is not a GPU in this topology")
        for name in ("nodes", "gpus_per_node"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise TopologyError(f"{name} {v!r} must be an integer >= 1")
        if self.nic_affinity:
            if len(self.nic_affinity) != len(self.ranks):
                raise TopologyError(f"nic_affinity has {len(self.nic_affinity)} entries for "
                                    f"{len(self.ranks)} ranks")
            for r, n in zip(self.ranks, self.nic_affinity):
                if n not in index or index[n].kind != "nic" or index[n].node != index[r].node:
                    raise TopologyError(f"nic_affinity of {r!r} is {n!r}, which is not a NIC "
                                        "on the same node")
        self._cache["index"] = {d.name: i for i, d in enumerate(self.devices)}

    def __hash__(self) -> int:
        # computed once: hashing 10^5 links on every dict lookup would be slow
        if "hash" not in self._cache:
            self._cache["hash"] = hash((self.name, self.devices, self.links, self.ranks,
                                        self.gpus_per_node, self.nodes, self.in_switch_reduction,
                                        self.p2p, self.nic_affinity, self.network))
        return self._cache["hash"]

    # ---- lookups -------------------------------------------------------------------------
    @property
    def nranks(self) -> int:
        return len(self.ranks)

    def index_of(self, device_name: str) -> int:
        try:
            return self._cache["index"][device_name]
        except KeyError:
            raise TopologyError(f"no device named {device_name!r}") from None

    def device(self, device_name: str) -> Device:
        return self.devices[self.index_of(device_name)]

    def rank_device(self, rank: int) -> Device:
        return self.devices[self.index_of(self.ranks[self._check_rank(rank)])]

    def node_of(self, rank: int) -> int:
        return self.rank_device(rank).node

    def _check_rank(self, rank) -> int:
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) \
                or not 0 <= rank < len(self.ranks):
            raise TopologyError(f"rank {rank!r} out of range: this topology has ranks "
                                f"0..{len(self.ranks) - 1}")
        return int(rank)

    def link_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(bandwidth_Bps, latency_s, efficiency) as float64 arrays indexed by link."""
        if "arrays" not in self._cache:
            arr = np.array([(ln.bandwidth_Bps, ln.latency_s, ln.efficiency) for ln in self.links],
                           dtype=np.float64).reshape(-1, 3)
            arr.flags.writeable = False
            self._cache["arrays"] = (arr[:, 0], arr[:, 1], arr[:, 2])
        return self._cache["arrays"]

    # ---- routing (see routing.py) --------------------------------------------------------
    @property
    def router(self):
        if "router" not in self._cache:
            from .routing import Router
            self._cache["router"] = Router(self)
        return self._cache["router"]

    def route(self, src_rank: int, dst_rank: int, channel: int = 0) -> tuple[int, ...]:
        """Link indices of one shortest path; ECMP ties are picked by a hash of
        (src, dst, channel), so each channel of a flow may take a different path."""
        return self.router.route(self._check_rank(src_rank), self._check_rank(dst_rank),
                                 int(channel))

    def routes(self, src_rank: int, dst_rank: int) -> tuple[tuple[int, ...], ...]:
        """All tied shortest paths (ECMP), capped at 64."""
        return self.router.routes(self._check_rank(src_rank), self._check_rank(dst_rank))

    def route_matrix(self, src_ranks, dst_ranks, channel=0) -> np.ndarray:
        """Vectorised route(): int32 array (pairs, max hops) of link indices, padded with -1.

        Row k equals route(src_ranks[k], dst_ranks[k], channel[k]). Made for the simulator:
        ~1M pairs on a 1024-GPU cluster in well under a second."""
        return self.router.route_matrix(src_ranks, dst_ranks, channel)

    def path_bandwidth(self, src_rank: int, dst_rank: int, channel: int = 0) -> float:
        """Smallest achievable bandwidth (nominal x efficiency) along route(); inf if empty."""
        path = self.route(src_rank, dst_rank, channel)
        bw, _, eff = self.link_arrays()
        return float(np.min(bw[list(path)] * eff[list(path)])) if path else float("inf")

    def path_latency(self, src_rank: int, dst_rank: int, channel: int = 0) -> float:
        path = self.route(src_rank, dst_rank, channel)
        return float(np.sum(self.link_arrays()[1][list(path)])) if path else 0.0

    def check_routes(self) -> None:
        """Raise TopologyError naming the first pair of ranks with no route between them."""
        self.router.check_all()

    # ---- YAML ----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        out = {"name": self.name, "nodes": self.nodes, "gpus_per_node": self.gpus_per_node,
               "in_switch_reduction": self.in_switch_reduction, "p2p": self.p2p,
               "devices": [_device_dict(d) for d in self.devices],
               "links": [_link_dict(ln) for ln in self.links],
               "ranks": list(self.ranks)}
        if self.nic_affinity:
            out["nic_affinity"] = dict(zip(self.ranks, self.nic_affinity))
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None,
                              width=160)

    def save(self, path) -> None:
        Path(path).write_text(self.to_yaml())

    @classmethod
    def from_dict(cls, data, where: str = "topology") -> "Topology":
        from .yamlio import topology_from_dict
        return topology_from_dict(data, where)

    @classmethod
    def from_yaml(cls, text: str, where: str = "topology YAML") -> "Topology":
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise TopologyError(f"{where}: not valid YAML ({first})") from None
        except RecursionError:
            raise TopologyError(f"{where}: YAML nested too deeply to be a topology") from None
        return cls.from_dict(data, where)

    @classmethod
    def load(cls, path) -> "Topology":
        p = Path(path)
        return cls.from_yaml(read_text(p, "topology file"), where=str(p))

    def __str__(self) -> str:
        kinds = {}
        for d in self.devices:
            kinds[d.kind] = kinds.get(d.kind, 0) + 1
        parts = ", ".join(f"{n} {k}" for k, n in kinds.items())
        return (f"Topology {self.name}: {self.nodes} node(s) x {self.gpus_per_node} GPU(s), "
                f"{len(self.ranks)} ranks, {len(self.links)} links ({parts})")


def _device_dict(d: Device) -> dict:
    out = {"name": d.name, "kind": d.kind, "node": d.node}
    if d.model:
        out["model"] = d.model
    return out


def _link_dict(ln: Link) -> dict:
    return {"src": ln.src, "dst": ln.dst, "bandwidth_Bps": float(ln.bandwidth_Bps),
            "latency_s": float(ln.latency_s), "tech": ln.tech, "efficiency": float(ln.efficiency)}


def load_topology(path) -> Topology:
    """Load a user topology YAML (format: docs/topology-yaml.md) and check every rank pair
    has a route."""
    topo = Topology.load(path)
    topo.check_routes()
    return topo

