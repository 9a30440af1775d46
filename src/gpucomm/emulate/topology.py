"""The emulated cluster as a gpucomm Topology, from the shaping applied and what was measured.

Per host h: ranks `h{h}.gpu{i}` (processes; kind gpu so they can be ranks) and a `h{h}.cpu0`
(the host's network stack: ranks on one host meet there, over loopback, and its veth leaves
from there); hosts meet at `sw0` (the bridge), or host to host without one.

- rank <-> cpu: the measured in-host goodput; half the measured in-host latency each way,
  so a rank-to-rank path inside a host sums to the measured one-way latency.
- cpu <-> switch (the veth and its shaper): the tc rate as nominal bandwidth (`rate_bps / 8`
  bytes/s of link-layer frames), efficiency = measured TCP goodput / nominal (headers, ACKs,
  shaper slack), and the rest of the measured host-to-host latency split over the fabric hops.

There is deliberately no `nic` device: every rank sends through the host's one veth itself, so
the simulator must not route a rank's traffic through a "rail owner" GPU as NCCL's PXN does.
"""
from __future__ import annotations

import yaml

from ..errors import ConfigError


def _parts(spec, m):
    nominal = spec.rate_bps / 8
    eff = min(1.0, max(m.inter_bandwidth_Bps / nominal, 1e-6))
    hops = 2 if spec.bridge else 1
    fabric_lat = max(m.inter_latency_s - m.intra_latency_s, 0.0) / hops
    rph = spec.ranks_per_host
    devices, links = [], []

    def duplex(a, b, bw, lat, tech, e=1.0):
        links.append(dict(src=a, dst=b, bandwidth_Bps=float(bw), latency_s=float(lat), tech=tech,
                          efficiency=float(e)))
        links.append(dict(src=b, dst=a, bandwidth_Bps=float(bw), latency_s=float(lat), tech=tech,
                          efficiency=float(e)))

    ranks = []
    for h in range(spec.hosts):
        cpu = f"h{h}.cpu0"
        devices.append(dict(name=cpu, kind="cpu", node=h, model="loopback"))
        for i in range(rph):
            g = f"h{h}.gpu{i}"
            devices.append(dict(name=g, kind="gpu", node=h, model="process"))
            ranks.append(g)
            duplex(g, cpu, m.intra_bandwidth_Bps, m.intra_latency_s / 2, "loopback")
    if spec.bridge:
        devices.append(dict(name="sw0", kind="switch", node=-1, model="linux-bridge"))
        for h in range(spec.hosts):
            duplex(f"h{h}.cpu0", "sw0", nominal, fabric_lat, f"tc-{spec.qdisc}", eff)
    else:
        duplex("h0.cpu0", "h1.cpu0", nominal, fabric_lat, f"tc-{spec.qdisc}", eff)
    return devices, links, ranks


def emulated_topology_dict(spec, measured, qdiscs: dict | None = None) -> dict:
    """The topology YAML mapping (docs/topology-yaml.md), with where each number came from."""
    devices, links, ranks = _parts(spec, measured)
    raw = measured.raw or {}
    source = (f"gpucomm.emulate: {spec.hosts} network namespaces x {spec.ranks_per_host} ranks, "
              f"{'bridge' if spec.bridge else 'direct veth'}, tc {spec.qdisc} at "
              f"{spec.rate_bps / 1e9:g} Gbit/s per direction, MTU {spec.mtu}; measured "
              f"inter-host one-way latency {measured.inter_latency_s * 1e6:.1f} us, goodput "
              f"{measured.inter_bandwidth_Bps / 1e6:.1f} MB/s; in a host "
              f"{measured.intra_latency_s * 1e6:.1f} us, {measured.intra_bandwidth_Bps / 1e9:.2f}"
              f" GB/s; " + raw.get("method", "with gpucomm.emulate.probe (median TCP ping-pong "
                                   "/ 2, bulk TCP goodput)"))
    if qdiscs:
        source += "; qdiscs: " + "; ".join(f"{ns}/{dev}: {text}" for (ns, dev), text in
                                            sorted(qdiscs.items()))
    out = {"name": f"emulated-{spec.hosts}x{spec.ranks_per_host}",
           "description": "emulated cluster (gpucomm.emulate); ranks are CPU processes",
           "source": source, "nodes": spec.hosts, "gpus_per_node": spec.ranks_per_host,
           "devices": devices, "links": links, "ranks": ranks}
    if raw:
        out["description"] += "; measured: " + yaml.safe_dump(raw, default_flow_style=True,
                                                               width=10 ** 6).strip()
    return out


def emulated_topology(spec, measured):
    """The Topology value (needs gpucomm.topology)."""
    try:
        from ..topology import Topology
    except ImportError as e:  # pragma: no cover - the topology package ships with gpucomm
        raise ConfigError(f"gpucomm.topology is not available: {e}") from None
    return Topology.from_dict(emulated_topology_dict(spec, measured), "emulated topology")


def emulated_topology_yaml(spec, measured, qdiscs: dict | None = None) -> str:
    data = emulated_topology_dict(spec, measured, qdiscs)
    try:
        emulated_topology(spec, measured)  # validate against the topology model when present
    except ImportError:  # pragma: no cover
        pass
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=160)
