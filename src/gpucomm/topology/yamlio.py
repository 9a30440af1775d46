"""Topology from a YAML mapping, with one-line errors naming the field and what is allowed.

The format is documented in docs/topology-yaml.md. A link may give its bandwidth and latency
explicitly (`bandwidth_Bps`/`bandwidth_GBps`/`bandwidth_Gbps`, `latency_s`/`latency_us`) or
take them from the hardware catalog through `tech`; `duplex: true` adds the reverse link.
"""
from __future__ import annotations

from ..errors import ConfigError, TopologyError
from .elements import Device, Link

TOP_KEYS = ("name", "nodes", "gpus_per_node", "in_switch_reduction", "p2p", "devices", "links",
            "ranks", "nic_affinity", "description", "source")
DEVICE_KEYS = ("name", "kind", "node", "model")
LINK_KEYS = ("src", "dst", "tech", "bandwidth_Bps", "bandwidth_GBps", "bandwidth_Gbps",
             "latency_s", "latency_us", "efficiency", "duplex", "count")


def _mapping(obj, where):
    if not isinstance(obj, dict):
        raise TopologyError(f"{where} must be a mapping, got {type(obj).__name__}")
    return obj


def _unknown(obj, allowed, where):
    extra = [k for k in obj if k not in allowed]
    if extra:
        raise TopologyError(f"{where}: unknown field {extra[0]!r}; allowed: {', '.join(allowed)}")


def _number(obj, key, where):
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TopologyError(f"{where}: {key} must be a number, got {v!r}")
    return float(v)


def _catalog(tech, where):
    from ..hardware import get_link_tech
    try:
        return get_link_tech(tech)
    except ConfigError as e:
        raise TopologyError(f"{where}: {e}") from None


def parse_link(obj, where) -> list[Link]:
    _mapping(obj, where)
    _unknown(obj, LINK_KEYS, where)
    for key in ("src", "dst"):
        if key not in obj:
            raise TopologyError(f"{where}: missing field {key!r} (a link needs src, dst, and "
                                "a tech or a bandwidth and latency)")
    tech = obj.get("tech")
    cat = None
    count = obj.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise TopologyError(f"{where}: count {count!r} must be an integer >= 1")
    if "bandwidth_Bps" in obj:
        bw = _number(obj, "bandwidth_Bps", where)
    elif "bandwidth_GBps" in obj:
        bw = _number(obj, "bandwidth_GBps", where) * 1e9
    elif "bandwidth_Gbps" in obj:
        bw = _number(obj, "bandwidth_Gbps", where) * 1e9 / 8
    elif tech is not None:
        # count: how many links of the technology the bundle holds (e.g. 2 NVLinks)
        cat = _catalog(tech, where)
        bw = cat.unit_Bps * count if "count" in obj else cat.bandwidth_Bps
    else:
        raise TopologyError(f"{where}: missing field 'bandwidth_Bps' (give a bandwidth or a "
                            "catalog tech such as nvlink4, pcie5, ib-ndr)")
    if "latency_s" in obj:
        lat = _number(obj, "latency_s", where)
    elif "latency_us" in obj:
        lat = _number(obj, "latency_us", where) * 1e-6
    elif tech is not None:
        cat = cat or _catalog(tech, where)
        lat = cat.latency_s
    else:
        raise TopologyError(f"{where}: missing field 'latency_s' (give a latency or a catalog "
                            "tech)")
    if "efficiency" in obj:
        eff = _number(obj, "efficiency", where)
    elif tech is not None:
        cat = cat or _catalog(tech, where)
        eff = cat.efficiency
    else:
        eff = 1.0
    duplex = obj.get("duplex", False)
    if not isinstance(duplex, bool):
        raise TopologyError(f"{where}: duplex must be true or false, got {duplex!r}")
    src, dst = str(obj["src"]), str(obj["dst"])
    try:
        out = [Link(src, dst, bw, lat, str(tech or "custom"), eff)]
        if duplex:
            out.append(Link(dst, src, bw, lat, str(tech or "custom"), eff))
    except TopologyError as e:
        raise TopologyError(f"{where}: {e}") from None
    return out


def topology_fields(data, where="topology") -> dict:
    """The Topology fields of a YAML mapping (see docs/topology-yaml.md), each checked;
    `model.topology_from_dict` makes the Topology (and checks the whole)."""
    _mapping(data, where)
    _unknown(data, TOP_KEYS, where)
    for key in ("devices", "links"):
        if key not in data:
            raise TopologyError(f"{where}: missing field {key!r} (a topology needs devices "
                                "and links)")
        if not isinstance(data[key], list):
            raise TopologyError(f"{where}: {key} must be a list")
    devices = []
    for i, obj in enumerate(data["devices"]):
        w = f"{where}: device {i}"
        _mapping(obj, w)
        _unknown(obj, DEVICE_KEYS, w)
        for key in ("name", "kind"):
            if key not in obj:
                raise TopologyError(f"{w}: missing field {key!r} (a device needs name, kind, "
                                    "node)")
        try:
            devices.append(Device(str(obj["name"]), obj["kind"], obj.get("node", 0),
                                  str(obj.get("model", ""))))
        except TopologyError as e:
            raise TopologyError(f"{where}: {e}") from None
    links = []
    for i, obj in enumerate(data["links"]):
        links.extend(parse_link(obj, f"{where}: link {i}"))
    by_name = {d.name: d for d in devices}
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
    per_node = {}
    for r in ranks:
        per_node[by_name[r].node] = per_node.get(by_name[r].node, 0) + 1
    affinity = ()
    if "nic_affinity" in data:
        aff = _mapping(data["nic_affinity"], f"{where}: nic_affinity")
        missing = [r for r in ranks if r not in aff]
        if missing:
            raise TopologyError(f"{where}: nic_affinity has no NIC for rank {missing[0]!r} "
                                "(give one per rank, or leave nic_affinity out)")
        affinity = tuple(str(aff[r]) for r in ranks)
    flags = {}
    for key, default in (("in_switch_reduction", False), ("p2p", True)):
        flags[key] = data.get(key, default)
        if not isinstance(flags[key], bool):
            raise TopologyError(f"{where}: {key} must be true or false, got {flags[key]!r}")
    return dict(name=str(data.get("name", "custom")), devices=tuple(devices),
                links=tuple(links), ranks=tuple(ranks),
                gpus_per_node=data.get("gpus_per_node", max(per_node.values(), default=1)),
                nodes=data.get("nodes", max(len(per_node), 1)), nic_affinity=affinity,
                **flags)
