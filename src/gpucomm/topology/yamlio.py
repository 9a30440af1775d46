"""Topology from a YAML mapping, with one-line errors naming the field and what is allowed.

The format is documented in docs/topology-yaml.md. A link may give its bandwidth and latency
explicitly (`bandwidth_Bps`/`bandwidth_GBps`/`bandwidth_Gbps`, `latency_s`/`latency_us`) or
take them from the hardware catalog through `tech`; `duplex: true` adds the reverse link.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, TopologyError
from ..inputs import check_number
from .elements import Device, Link

if TYPE_CHECKING:
    from ..hardware.catalog import LinkTech

TOP_KEYS = ("name", "nodes", "gpus_per_node", "in_switch_reduction", "p2p", "devices", "links",
            "ranks", "nic_affinity", "network_sync_us", "network_sync_from_bytes",
            "call_sync_us", "call_sync_from_bytes", "description", "source")
DEVICE_KEYS = ("name", "kind", "node", "model")
LINK_KEYS = ("src", "dst", "tech", "bandwidth_Bps", "bandwidth_GBps", "bandwidth_Gbps",
             "latency_s", "latency_us", "efficiency", "duplex", "count")


def _mapping(obj: object, where: str) -> dict:
    if not isinstance(obj, dict):
        raise TopologyError(f"{where} must be a mapping, got {type(obj).__name__}")
    return obj


def _unknown(obj: dict, allowed: Sequence[str], where: str) -> None:
    extra = [k for k in obj if k not in allowed]
    if extra:
        raise TopologyError(f"{where}: unknown field {extra[0]!r}; allowed: {', '.join(allowed)}")


def _required(obj: dict, keys: Sequence[str], where: str, needs: str) -> None:
    for key in keys:
        if key not in obj:
            raise TopologyError(f"{where}: missing field {key!r} ({needs})")


# Physical bounds of a link's numbers, per unit as written (the checks run before any float
# conversion, so a 400-digit integer is refused, not overflowed): a link is between 1 MB/s
# (8 Mb/s, below any interconnect a collective runs on) and 100 TB/s per direction (over 50x
# an NVLink5 GPU's 1.8 TB/s), its latency at most 1 s, a bundle at most 1,024 links.
MIN_LINK_BPS, MAX_LINK_BPS = 1e6, 1e14
_RANGES = {"bandwidth_Bps": (MIN_LINK_BPS, MAX_LINK_BPS),
           "bandwidth_GBps": (MIN_LINK_BPS / 1e9, MAX_LINK_BPS / 1e9),
           "bandwidth_Gbps": (MIN_LINK_BPS * 8 / 1e9, MAX_LINK_BPS * 8 / 1e9),
           "latency_s": (0.0, 1.0), "latency_us": (0.0, 1e6), "efficiency": (1e-3, 1.0),
           # a calibrated cluster's per-step sync across nodes (topology/profile.py PARAMETERS)
           "network_sync_us": (0.0, 1e4), "network_sync_from_bytes": (0.0, float(1 << 40)),
           # and its per-call sync on the GPUs
           "call_sync_us": (0.0, 1e4), "call_sync_from_bytes": (0.0, float(1 << 40))}
MAX_LINK_COUNT = 1024


def _number(obj: dict, key: str, where: str) -> float:
    lo, hi = _RANGES[key]
    try:
        return float(check_number(obj[key], f"{where}: {key}", lo, hi))
    except ConfigError as e:
        raise TopologyError(str(e)) from None


def _catalog(tech: Any, where: str) -> LinkTech:
    """The catalog entry of `tech`, a YAML scalar of any type (named as given if unknown)."""
    from ..hardware import get_link_tech
    try:
        return get_link_tech(tech)
    except ConfigError as e:
        raise TopologyError(f"{where}: {e}") from None


def _count(obj: dict, where: str) -> int:
    """How many links of the technology the bundle holds (e.g. 2 NVLinks); 1 if not given."""
    try:
        return check_number(obj.get("count", 1), f"{where}: count", 1, MAX_LINK_COUNT,
                            integer=True)
    except ConfigError as e:
        raise TopologyError(str(e)) from None


def _bandwidth(obj: dict, tech: Any, count: int, where: str) -> float:
    """bandwidth_Bps in bytes/s, GB/s or Gb/s, or the catalog tech's (`count` of its links)."""
    if "bandwidth_Bps" in obj:
        return _number(obj, "bandwidth_Bps", where)
    if "bandwidth_GBps" in obj:
        return _number(obj, "bandwidth_GBps", where) * 1e9
    if "bandwidth_Gbps" in obj:
        return _number(obj, "bandwidth_Gbps", where) * 1e9 / 8
    if tech is None:
        raise TopologyError(f"{where}: missing field 'bandwidth_Bps' (give a bandwidth or a "
                            "catalog tech such as nvlink4, pcie5, ib-ndr)")
    cat = _catalog(tech, where)
    return cat.unit_Bps * count if "count" in obj else cat.bandwidth_Bps


def _latency(obj: dict, tech: Any, where: str) -> float:
    """latency_s in seconds or microseconds, or the catalog tech's."""
    if "latency_s" in obj:
        return _number(obj, "latency_s", where)
    if "latency_us" in obj:
        return _number(obj, "latency_us", where) * 1e-6
    if tech is None:
        raise TopologyError(f"{where}: missing field 'latency_s' (give a latency or a catalog "
                            "tech)")
    return _catalog(tech, where).latency_s


def _efficiency(obj: dict, tech: Any, where: str) -> float:
    """efficiency as given, else the catalog tech's, else 1."""
    if "efficiency" in obj:
        return _number(obj, "efficiency", where)
    if tech is None:
        return 1.0
    return _catalog(tech, where).efficiency


def parse_link(obj: object, where: str) -> list[Link]:
    """The link (and with `duplex: true` its reverse) of one YAML mapping."""
    link = _mapping(obj, where)
    _unknown(link, LINK_KEYS, where)
    _required(link, ("src", "dst"), where,
              "a link needs src, dst, and a tech or a bandwidth and latency")
    tech = link.get("tech")
    count = _count(link, where)
    bw = _bandwidth(link, tech, count, where)
    lat = _latency(link, tech, where)
    eff = _efficiency(link, tech, where)
    duplex = link.get("duplex", False)
    if not isinstance(duplex, bool):
        raise TopologyError(f"{where}: duplex must be true or false, got {duplex!r}")
    src, dst = str(link["src"]), str(link["dst"])
    try:
        out = [Link(src, dst, bw, lat, str(tech or "custom"), eff)]
        if duplex:
            out.append(Link(dst, src, bw, lat, str(tech or "custom"), eff))
    except TopologyError as e:
        raise TopologyError(f"{where}: {e}") from None
    return out


def _devices(items: list, where: str) -> list[Device]:
    devices = []
    for i, obj in enumerate(items):
        w = f"{where}: device {i}"
        dev = _mapping(obj, w)
        _unknown(dev, DEVICE_KEYS, w)
        _required(dev, ("name", "kind"), w, "a device needs name, kind, node")
        try:
            devices.append(Device(str(dev["name"]), dev["kind"], dev.get("node", 0),
                                  str(dev.get("model", ""))))
        except TopologyError as e:
            raise TopologyError(f"{where}: {e}") from None
    return devices


def _ranks(data: dict, devices: list[Device], by_name: dict[str, Device],
           where: str) -> list[str]:
    """The ranks as given (device names), else every GPU in node order."""
    if "ranks" in data:
        if not isinstance(data["ranks"], list):
            raise TopologyError(f"{where}: ranks must be a list of GPU device names")
        ranks = [str(r) for r in data["ranks"]]
    else:
        ranks = [d.name for d in sorted((d for d in devices if d.kind == "gpu"),
                                        key=lambda d: d.node)]
    for r in ranks:
        if r not in by_name:
            raise TopologyError(f"{where}: rank {r!r} is not a device")
    return ranks


def _affinity(data: dict, ranks: list[str], where: str) -> tuple[str, ...]:
    """Each rank's NIC from nic_affinity (rank -> NIC name); () if not given."""
    if "nic_affinity" not in data:
        return ()
    aff = _mapping(data["nic_affinity"], f"{where}: nic_affinity")
    missing = [r for r in ranks if r not in aff]
    if missing:
        raise TopologyError(f"{where}: nic_affinity has no NIC for rank {missing[0]!r} "
                            "(give one per rank, or leave nic_affinity out)")
    return tuple(str(aff[r]) for r in ranks)


def _flags(data: dict, where: str) -> dict[str, bool]:
    flags = {}
    for key, default in (("in_switch_reduction", False), ("p2p", True)):
        flags[key] = data.get(key, default)
        if not isinstance(flags[key], bool):
            raise TopologyError(f"{where}: {key} must be true or false, got {flags[key]!r}")
    return flags


# Devices and links in one topology file: a cluster at MAX_MODEL_RANKS GPUs is built with
# --nodes (and its tables), not read device by device; a file beyond these is refused before
# any device is made.
MAX_FILE_DEVICES = 1 << 16
MAX_FILE_LINKS = 1 << 18


def topology_fields(data: object, where: str = "topology") -> dict:
    """The Topology fields of a YAML mapping (see docs/topology-yaml.md), each checked;
    `model.topology_from_dict` makes the Topology (and checks the whole)."""
    top = _mapping(data, where)
    _unknown(top, TOP_KEYS, where)
    for key, most in (("devices", MAX_FILE_DEVICES), ("links", MAX_FILE_LINKS)):
        if key not in top:
            raise TopologyError(f"{where}: missing field {key!r} (a topology needs devices "
                                "and links)")
        if not isinstance(top[key], list):
            raise TopologyError(f"{where}: {key} must be a list")
        if len(top[key]) > most:
            raise TopologyError(f"{where}: {len(top[key])} {key}, more than the {most} a "
                                "topology file may hold (build large clusters with --nodes)")
    devices = _devices(top["devices"], where)
    links = []
    for i, obj in enumerate(top["links"]):
        links.extend(parse_link(obj, f"{where}: link {i}"))
    by_name = {d.name: d for d in devices}
    ranks = _ranks(top, devices, by_name, where)
    per_node: dict[int, int] = {}
    for r in ranks:
        per_node[by_name[r].node] = per_node.get(by_name[r].node, 0) + 1
    affinity = _affinity(top, ranks, where)
    flags = _flags(top, where)
    sync = {"net_sync_s": _number(top, "network_sync_us", where) * 1e-6
            if "network_sync_us" in top else 0.0,
            "net_sync_from_bytes": _number(top, "network_sync_from_bytes", where)
            if "network_sync_from_bytes" in top else 0.0,
            "call_sync_s": _number(top, "call_sync_us", where) * 1e-6
            if "call_sync_us" in top else 0.0,
            "call_sync_from_bytes": _number(top, "call_sync_from_bytes", where)
            if "call_sync_from_bytes" in top else 0.0}
    _check_models(devices, where)
    if flags["in_switch_reduction"] and not any(d.kind == "nvswitch" for d in devices):
        raise TopologyError(f"{where}: in_switch_reduction: true needs an NVSwitch (a device of "
                            "kind nvswitch) to reduce in; this topology has none")
    counted = {"gpus_per_node": max(per_node.values(), default=1),
               "nodes": max(len(per_node), 1)}
    for key, value in counted.items():
        if key in top and top[key] != value:
            raise TopologyError(f"{where}: {key}: {top[key]!r} disagrees with the devices, "
                                f"whose ranks make {key} {value} (leave {key} out, or give "
                                f"{value})")
    return dict(name=str(top.get("name", "custom")), devices=tuple(devices),
                links=tuple(links), ranks=tuple(ranks), nic_affinity=affinity,
                **counted, **flags, **sync)


def _check_models(devices: list[Device], where: str) -> None:
    """Every GPU's `model`, where given, is in the hardware catalog (its FLOP/s and HBM
    bandwidth are looked up by that name); "process" is a rank of an emulated cluster
    (`gpucomm.emulate`: a host process standing in for a GPU)."""
    from ..hardware import get_gpu
    for model in sorted({d.model for d in devices if d.kind == "gpu" and d.model} - {"process"}):
        try:
            get_gpu(model)
        except ConfigError as e:
            raise TopologyError(f"{where}: GPU model: {e}") from None
