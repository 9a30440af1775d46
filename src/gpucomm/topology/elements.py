"""The parts of a topology: devices and directed links (values with one-line checks).

Kept apart from `model.Topology`, routing and YAML parsing so that each of those imports
these without importing the others (no import cycle).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import TopologyError

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


def _finite(v) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:   # an int too large for a float
        return False


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
        bw, lat = self.bandwidth_Bps, self.latency_s
        if not (_finite(bw) and bw > 0):
            raise TopologyError(f"link {self.src}->{self.dst}: bandwidth_Bps {bw!r} must be a "
                                "finite number > 0")
        if not (_finite(lat) and lat >= 0):
            raise TopologyError(f"link {self.src}->{self.dst}: latency_s {lat!r} must be a "
                                "finite number >= 0")
        eff = self.efficiency
        if isinstance(eff, bool) or not isinstance(eff, (int, float)) or not 0.0 < eff <= 1.0:
            raise TopologyError(f"link {self.src}->{self.dst}: efficiency {self.efficiency!r} "
                                "must be in (0, 1]")

    @property
    def achievable_Bps(self) -> float:
        return self.bandwidth_Bps * self.efficiency


_new = object.__new__


def checked_device(name: str, kind: str, node: int, model: str) -> Device:
    """A Device built without its checks: for copies of a checked device under another name
    and node (a cluster's replicated nodes), where the checks cannot fail."""
    d = _new(Device)
    f = d.__dict__
    f["name"], f["kind"], f["node"], f["model"] = name, kind, node, model
    return d


def checked_link(src: str, dst: str, bandwidth_Bps: float, latency_s: float, tech: str,
                 efficiency: float) -> Link:
    """A Link built without its checks, from the values of a checked link (see
    checked_device)."""
    ln = _new(Link)
    f = ln.__dict__
    f["src"], f["dst"], f["bandwidth_Bps"], f["latency_s"] = src, dst, bandwidth_Bps, latency_s
    f["tech"], f["efficiency"] = tech, efficiency
    return ln
