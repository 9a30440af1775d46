"""The topology value: devices, directed links, ranks — plus routing and YAML round trips.

A Topology is a frozen value. Routing state (shortest paths, ECMP alternatives, the vectorised
route tables) is computed lazily by `gpucomm.topology.routing.Router` and kept in its `cache`
(TopologyCache: named slots, plus the typed records of the layers above), which takes no part
in equality or hashing; `topology.cache.clear()` drops what can be derived again.

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

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GpucommError, TopologyError
from ..inputs import load_yaml, read_text
from ..outputs import write_text
from ..memo import Memo
from .elements import DEVICE_KINDS, TRANSIT_KINDS, Device, Link
from .routing import Router
from .tables import DeviceTable, LinkTable, NameIndex
from .yamlio import topology_fields

__all__ = ["DEVICE_KINDS", "TRANSIT_KINDS", "Device", "Link", "Topology", "load_topology",
           "topology_from_dict"]

class TopologyCache(Memo):
    """What a Topology knows of itself beyond its fields, one named slot each. Set when it is
    made: `index` (device name -> index), `kinds`, `rank_pos` (device index of each rank),
    `nic_pos` (of each rank's NIC, with nic_affinity), `replica` ((GPUs, links) per node where
    a builder laid every node out as a copy of node 0; None: unknown). Derived on demand and
    dropped by `clear()` (with the records of the layers above, `of`): the rest."""
    __slots__ = ("index", "kinds", "rank_pos", "nic_pos", "replica", "hash", "arrays", "ends",
                 "nodes", "kind_codes", "router")

    def __init__(self) -> None:
        super().__init__()
        self.index: Any = None  # NameIndex | dict[str, int]
        self.kinds: list[str] = []
        self.rank_pos: list[int] = []
        self.nic_pos: list[int] | None = None
        self.replica: tuple[int, int] | None = None
        self.clear()

    def clear(self) -> None:
        super().clear()
        self.hash: int | None = None
        self.arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.ends: tuple[np.ndarray, np.ndarray] | None = None
        self.nodes: np.ndarray | None = None
        self.kind_codes: np.ndarray | None = None
        self.router: Router | None = None


@dataclass(frozen=True)
class Topology:
    """Devices, directed links and the GPUs that are ranks (node-major order).

    `p2p=False` means GPUs cannot reach each other (or a NIC) directly over PCIe: data
    bounces through a host `memory` device. `nic_affinity` names each rank's NIC (the one
    it uses for inter-node traffic, GPUDirect RDMA); empty = the closest NIC.

    `devices` and `links` are tuples, or a cluster's columnar DeviceTable and LinkTable
    (tables.py: read-only sequences equal to the tuples of their items).
    """
    name: str
    devices: Sequence[Device]
    links: Sequence[Link]
    ranks: tuple[str, ...]
    gpus_per_node: int
    nodes: int
    in_switch_reduction: bool = False
    p2p: bool = True
    nic_affinity: tuple[str, ...] = ()
    network: object = None  # a topology.fabric.Network: routing, loss, failures (None: plain)
    # a calibrated cluster's per-step synchronisation cost across nodes (topology.profile
    # network_sync_us): every network step of a collective whose per-rank share is at least
    # `net_sync_from_bytes` pays `net_sync_s` (simulate/protocol.py plugin_latency_s)
    net_sync_s: float = 0.0
    net_sync_from_bytes: float = 0.0
    # a calibrated cluster's per-call synchronisation cost on the GPUs (topology.profile
    # call_sync_us): a collective whose per-rank share is at least `call_sync_from_bytes`
    # takes `call_sync_s` more, once (simulate/predict.py)
    call_sync_s: float = 0.0
    call_sync_from_bytes: float = 0.0
    cache: TopologyCache = field(default_factory=TopologyCache, init=False, repr=False,
                                 compare=False, hash=False)

    def __post_init__(self):
        for name in ("devices", "links", "ranks", "nic_affinity"):
            value = getattr(self, name)
            if not isinstance(value, (DeviceTable, LinkTable)):
                object.__setattr__(self, name, tuple(value))
        index: NameIndex | dict[str, int]
        kinds: list[str]
        if isinstance(self.devices, DeviceTable):   # checked when the table was made
            index = NameIndex(self.devices)
            kinds = self.devices.kinds()
        else:
            index, kinds = self._check_devices()
        if isinstance(self.links, LinkTable):
            if self.links.devices is not self.devices:
                raise TopologyError("a LinkTable must index this topology's devices")
        else:
            for i, ln in enumerate(self.links):
                for end in (ln.src, ln.dst):
                    if end not in index:
                        raise TopologyError(f"link {i} ({ln.src}->{ln.dst}) is dangling: no "
                                            f"device named {end!r}")
        self.cache.index = index
        self.cache.kinds = kinds
        self._check_ranks(index, kinds)

    def _check_devices(self) -> tuple[dict[str, int], list[str]]:
        index: dict[str, int] = {}
        for i, d in enumerate(self.devices):
            if not isinstance(d, Device):
                raise TopologyError(f"devices must be Device values, got {type(d).__name__}")
            if d.name in index:
                raise TopologyError(f"duplicate device name {d.name!r}")
            index[d.name] = i
        return index, [d.kind for d in self.devices]

    def _check_ranks(self, index, kinds) -> None:
        if not self.ranks:
            raise TopologyError(f"topology {self.name!r} has no ranks (no GPU devices)")
        pos = self._positions(self.ranks)
        # device positions stand for names one to one: distinct positions, distinct names
        if len(set(pos if None not in pos else self.ranks)) != len(self.ranks):
            raise TopologyError("ranks name the same GPU twice")
        if None in pos or _kinds_of(kinds, pos) != {"gpu"}:
            r = next(r for r, i in zip(self.ranks, pos) if i is None or kinds[i] != "gpu")
            raise TopologyError(f"rank device {r!r} is not a GPU in this topology")
        self.cache.rank_pos = pos
        for name in ("nodes", "gpus_per_node"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise TopologyError(f"{name} {v!r} must be an integer >= 1")
        if self.nic_affinity:
            if len(self.nic_affinity) != len(self.ranks):
                raise TopologyError(f"nic_affinity has {len(self.nic_affinity)} entries for "
                                    f"{len(self.ranks)} ranks")
            aff = self._positions(self.nic_affinity)
            nodes = self.device_nodes()
            if None in aff or _kinds_of(kinds, aff) != {"nic"} \
                    or not np.array_equal(nodes[np.asarray(aff)], nodes[np.asarray(pos)]):
                for r, n, i, g in zip(self.ranks, self.nic_affinity, aff, pos):
                    if i is None or kinds[i] != "nic" or nodes[i] != nodes[g]:
                        raise TopologyError(f"nic_affinity of {r!r} is {n!r}, which is not a "
                                            "NIC on the same node")
            self.cache.nic_pos = aff

    def _positions(self, names) -> list:
        """Device index of each name (None where there is none)."""
        index = self.cache.index
        if isinstance(index, NameIndex):
            return index.table.positions(names)
        return list(map(index.get, names))

    def __hash__(self) -> int:
        # from the sizes, not every device and link: equal topologies have equal sizes, and
        # hashing 10^6 links (or making them, for a cluster's columns) on a dict lookup is slow
        if self.cache.hash is None:
            self.cache.hash = hash((self.name, len(self.devices), len(self.links),
                                        self.ranks[:1], len(self.ranks), self.gpus_per_node,
                                        self.nodes, self.in_switch_reduction, self.p2p,
                                        self.network))
        return self.cache.hash

    # ---- lookups -------------------------------------------------------------------------
    @property
    def nranks(self) -> int:
        return len(self.ranks)

    def index_of(self, device_name: str) -> int:
        try:
            return self.cache.index[device_name]
        except KeyError:
            raise TopologyError(f"no device named {device_name!r}") from None

    def device(self, device_name: str) -> Device:
        return self.devices[self.index_of(device_name)]

    def rank_device(self, rank: int) -> Device:
        return self.devices[self.index_of(self.ranks[self._check_rank(rank)])]

    def node_of(self, rank: int) -> int:
        return int(self.device_nodes()[self.cache.rank_pos[self._check_rank(rank)]])

    def _check_rank(self, rank) -> int:
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) \
                or not 0 <= rank < len(self.ranks):
            raise TopologyError(f"rank {rank!r} out of range: this topology has ranks "
                                f"0..{len(self.ranks) - 1}")
        return int(rank)

    def link_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(bandwidth_Bps, latency_s, efficiency) as float64 arrays indexed by link."""
        if self.cache.arrays is None:
            if isinstance(self.links, LinkTable):
                self.cache.arrays = (self.links.bw, self.links.lat, self.links.eff)
            else:
                arr = np.array([(ln.bandwidth_Bps, ln.latency_s, ln.efficiency)
                                for ln in self.links], dtype=np.float64).reshape(-1, 3)
                arr.flags.writeable = False
                self.cache.arrays = (arr[:, 0], arr[:, 1], arr[:, 2])
        return self.cache.arrays

    def link_ends(self) -> tuple[np.ndarray, np.ndarray]:
        """(source, destination) device indices of every link, int64 arrays (read-only)."""
        if self.cache.ends is None:
            ends: tuple[np.ndarray, np.ndarray]
            if isinstance(self.links, LinkTable):
                ends = (self.links.src, self.links.dst)
            else:
                index = self.cache.index
                ends = (np.array([index[ln.src] for ln in self.links], dtype=np.int64),
                        np.array([index[ln.dst] for ln in self.links], dtype=np.int64))
                for a in ends:
                    a.flags.writeable = False
            self.cache.ends = ends
        return self.cache.ends

    def device_nodes(self) -> np.ndarray:
        """The node of every device (-1: fabric), an int64 array (read-only)."""
        if self.cache.nodes is None:
            nodes = self.devices.node_array() if isinstance(self.devices, DeviceTable) else \
                np.array([d.node for d in self.devices], dtype=np.int64)
            nodes.flags.writeable = False
            self.cache.nodes = nodes
        return self.cache.nodes

    def device_kinds(self) -> list[str]:
        """The kind of every device, by index."""
        return self.cache.kinds

    def device_kind_codes(self) -> np.ndarray:
        """The kind of every device as its index in DEVICE_KINDS (int8, read-only)."""
        if self.cache.kind_codes is None:
            if isinstance(self.devices, DeviceTable):
                codes = self.devices.kind_codes(DEVICE_KINDS)
            else:
                code = {k: i for i, k in enumerate(DEVICE_KINDS)}
                codes = np.array([code[k] for k in self.device_kinds()], dtype=np.int8)
            codes.flags.writeable = False
            self.cache.kind_codes = codes
        return self.cache.kind_codes

    # ---- routing (see routing.py) --------------------------------------------------------
    @property
    def router(self) -> Router:
        if self.cache.router is None:
            self.cache.router = Router(self)
        return self.cache.router

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
        if self.net_sync_s:  # a calibrated profile's sync (topology/profile.py), in its units
            out["network_sync_us"] = round(self.net_sync_s * 1e6, 6)
            out["network_sync_from_bytes"] = float(self.net_sync_from_bytes)
        if self.call_sync_s:
            out["call_sync_us"] = round(self.call_sync_s * 1e6, 6)
            out["call_sync_from_bytes"] = float(self.call_sync_from_bytes)
        return out

    def to_yaml(self) -> str:
        import yaml
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None,
                              width=160)

    def save(self, path) -> None:
        write_text(path, self.to_yaml(), "topology")

    @classmethod
    def from_dict(cls, data, where: str = "topology") -> "Topology":
        return topology_from_dict(data, where)

    @classmethod
    def from_yaml(cls, text: str, where: str = "topology YAML") -> "Topology":
        return cls.from_dict(load_yaml(text, where, TopologyError), where)

    @classmethod
    def load(cls, path) -> "Topology":
        p = Path(path)
        return cls.from_yaml(read_text(p, "topology file"), where=str(p))

    def __str__(self) -> str:
        kinds: dict[str, int] = {}
        for k in self.device_kinds():
            kinds[k] = kinds.get(k, 0) + 1
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


def _kinds_of(kinds: list, positions: list) -> set:
    """The set of kinds of the devices at `positions` (a C-speed gather)."""
    got = operator.itemgetter(*positions)(kinds) if positions else ()
    return {got} if len(positions) == 1 else set(got)


def topology_from_dict(data, where="topology") -> Topology:
    """Build and validate a Topology from the YAML mapping (see docs/topology-yaml.md)."""
    fields = topology_fields(data, where)
    try:
        return Topology(**fields)
    except GpucommError as e:
        msg = str(e)
        raise type(e)(msg if msg.startswith(where) else f"{where}: {msg}") from None


def load_topology(path) -> Topology:
    """Load a user topology YAML (format: docs/topology-yaml.md) and check every rank pair
    has a route."""
    topo = Topology.load(path)
    topo.check_routes()
    return topo

