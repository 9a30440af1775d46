"""A calibration profile: a cluster's physical parameters, fitted from its own logs, and the
machine they were fitted on. It builds a new Topology; it never patches the simulator.

    >>> p = load_profile("cluster.yaml")                          # doctest: +SKIP
    >>> topo = apply_profile(build_topology(**p.machine), p)      # doctest: +SKIP

The parameters (each optional; absent = the catalog's figure):
- `nic_efficiency`: the fraction of a NIC's line rate the network delivers (catalog: the NIC
  technology's `efficiency`); set on every network link (InfiniBand, RoCE, EFA, Ethernet,
  Slingshot ports).
- `network_latency_us`: the one-way latency of one network hop, including what the NIC, its
  proxy thread and the net plugin add to each message (catalog: the technology's latency).
- `intra_efficiency`: the fraction of NVLink / xGMI nominal bandwidth GPUs reach inside a
  node (catalog: the link technology's `efficiency`).
- `network_sync_us` with `network_sync_from_bytes`: the per-step synchronisation cost across
  nodes: every network step of a collective whose per-rank share is at least
  `network_sync_from_bytes` pays `network_sync_us` more (catalog: 0, none). What a net plugin
  and its provider add to each step of larger messages (a rendezvous before the data moves),
  which NCCL's tuning does not know: Polaris's aws-ofi-nccl over Slingshot takes a flat
  0.5-1 ms from 128 KiB to 16 MiB.
- `call_sync_us` with `call_sync_from_bytes`: the per-call synchronisation cost on the GPUs:
  a collective whose per-rank share is at least `call_sync_from_bytes` takes `call_sync_us`
  more, once, whatever its algorithm and step count (catalog: 0; NCCL's own fixed cost of a
  call, tuning.cc baseLat, is already in the model). What a node adds to each call beyond
  NCCL's model: superbench's DGX A100 (`-g 8`, one thread) takes ~30 us more from 64 KiB per
  rank, for every collective alike.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import yaml

from ..errors import ConfigError
from ..hardware import get_gpu, get_link_tech, get_nic
from .build import check_preset
from .model import Topology

NETWORK_KINDS = ("ib", "roce", "efa", "ethernet", "slingshot")
INTRA_KINDS = ("nvlink", "xgmi")
# name -> (lowest, highest) allowed value: a fraction of line rate, or microseconds
PARAMETERS = {"nic_efficiency": (0.01, 1.0), "network_latency_us": (0.0, 1000.0),
              "intra_efficiency": (0.01, 1.0), "network_sync_us": (0.0, 10000.0),
              "network_sync_from_bytes": (0.0, float(1 << 40)),
              "call_sync_us": (0.0, 10000.0), "call_sync_from_bytes": (0.0, float(1 << 40))}
MACHINE_KEYS = ("system", "nodes", "gpus_per_node", "nic", "nics_per_node", "gpu")
FORMAT = 1


@dataclass(frozen=True)
class Profile:
    machine: dict  # build_topology arguments of the machine the logs ran on
    parameters: dict  # name -> value (PARAMETERS)
    details: dict = field(default_factory=dict)  # name -> {catalog, meaning, note, rows}
    sources: tuple = ()  # {log, test, rows} per test fitted
    fit: dict = field(default_factory=dict)  # errors before and after, per size class

    def __post_init__(self):
        for key, value in self.parameters.items():
            check_parameter(key, value)
        unknown = set(self.machine) - set(MACHINE_KEYS)
        if unknown:
            raise ConfigError(f"profile machine: unknown key(s) {', '.join(sorted(unknown))}; "
                              f"allowed: {', '.join(MACHINE_KEYS)}")
        for key, value in self.machine.items():
            check_machine(key, value)

    def to_yaml(self) -> str:
        head = ("# gpucomm calibration profile: physical parameters of one cluster fitted from "
                "its own\n# nccl-tests logs (gpucomm calibrate). Edit a value to try another; "
                "delete one to use\n# the catalog's. Use: gpucomm sim|doctor|tune --profile "
                "THIS.yaml (other flags override it).\n")
        doc = {"profile": FORMAT, "machine": self.machine,
               "parameters": {k: int(v) if k.endswith("_bytes") else _round(v)
                              for k, v in self.parameters.items()},
               "details": self.details, "fit": self.fit,
               "sources": [dict(s) for s in self.sources]}
        return head + yaml.safe_dump(doc, sort_keys=False, width=100, allow_unicode=True)


def check_parameter(name: str, value: object) -> float:
    if name not in PARAMETERS:
        raise ConfigError(f"profile: unknown parameter {name!r}; allowed: "
                          f"{', '.join(PARAMETERS)}")
    low, high = PARAMETERS[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not low <= value <= high:
        raise ConfigError(f"profile: {name} = {value!r} must be a number in [{low}, {high}]")
    return float(value)


def check_machine(key: str, value: object) -> None:
    """A machine entry of a profile: a name (system, nic, gpu) the presets or the catalog hold,
    or a count >= 1; a count of 0 would otherwise read as not given, and the command fall back
    to its default unsaid."""
    if key in ("system", "nic", "gpu"):
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"profile machine: {key} = {value!r} must be a non-empty name")
        try:  # refused here, the error names the profile; later it would name no file
            if key == "nic":
                get_nic(value)
            elif key == "gpu":
                get_gpu(value)
            else:
                check_preset(value)
        except ConfigError as e:
            raise ConfigError(f"profile machine: {key}: {e}") from None
    elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"profile machine: {key} = {value!r} must be an integer >= 1")


def _round(v: float) -> float:
    return float(f"{v:.4g}")


def load_profile(path: str) -> Profile:
    """A profile YAML file, validated; ConfigError (one line) naming what is wrong."""
    from ..inputs import read_text
    text = read_text(path, "profile")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict) or data.get("profile") != FORMAT:
        raise ConfigError(f"{path}: not a gpucomm profile (expected 'profile: {FORMAT}' at the "
                          "top, as gpucomm calibrate writes)")
    machine, params = data.get("machine") or {}, data.get("parameters") or {}
    if not isinstance(machine, dict) or not isinstance(params, dict):
        raise ConfigError(f"{path}: 'machine' and 'parameters' must be mappings")
    try:
        return Profile(machine=dict(machine), parameters=dict(params),
                       details=dict(data.get("details") or {}),
                       sources=tuple(data.get("sources") or ()), fit=dict(data.get("fit") or {}))
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def link_class(tech: str) -> str | None:
    """'network', 'intra' or None for a link technology name."""
    try:
        kind = get_link_tech(tech).kind
    except ConfigError:
        return None
    return "network" if kind in NETWORK_KINDS else "intra" if kind in INTRA_KINDS else None


def apply_profile(topo: Topology, profile: Profile | dict) -> Topology:
    """A new Topology whose network and intra-node links carry the profile's parameters."""
    params = profile.parameters if isinstance(profile, Profile) else profile
    nic_eff = params.get("nic_efficiency")
    lat = params.get("network_latency_us")
    intra = params.get("intra_efficiency")
    sync = params.get("network_sync_us")
    classes: dict[str, str | None] = {}
    links = []
    for link in topo.links:
        cls = classes.setdefault(link.tech, link_class(link.tech))
        if cls == "network" and (nic_eff is not None or lat is not None):
            link = dataclasses.replace(
                link, efficiency=link.efficiency if nic_eff is None else nic_eff,
                latency_s=link.latency_s if lat is None else lat * 1e-6)
        elif cls == "intra" and intra is not None:
            link = dataclasses.replace(link, efficiency=intra)
        links.append(link)
    out = dataclasses.replace(topo, links=tuple(links), devices=tuple(topo.devices))
    if sync is not None:
        out = dataclasses.replace(out, net_sync_s=sync * 1e-6, net_sync_from_bytes=float(
            params.get("network_sync_from_bytes", 0.0)))
    call = params.get("call_sync_us")
    if call is not None:
        out = dataclasses.replace(out, call_sync_s=call * 1e-6, call_sync_from_bytes=float(
            params.get("call_sync_from_bytes", 0.0)))
    return out


def catalog_values(topo: Topology) -> dict:
    """The parameters as the catalog has them for this topology (first link of each class)."""
    out: dict[str, float] = {}
    for link in topo.links:
        cls = link_class(link.tech)
        if cls == "network" and "nic_efficiency" not in out:
            out["nic_efficiency"] = link.efficiency
            out["network_latency_us"] = link.latency_s * 1e6
        elif cls == "intra" and "intra_efficiency" not in out:
            out["intra_efficiency"] = link.efficiency
    if "nic_efficiency" in out:  # the catalog knows no such cost (simulate adds none)
        out["network_sync_us"] = 0.0
    if "intra_efficiency" in out:  # nor this one
        out["call_sync_us"] = 0.0
    return out
