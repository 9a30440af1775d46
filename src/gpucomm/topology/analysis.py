"""What a topology offers each GPU, and its bisection bandwidth.

    >>> from gpucomm.topology import build_topology
    >>> gpu_bandwidths(build_topology("dgx-h100"))[0]["nvlink_Bps"] / 1e9
    450.0
"""
from __future__ import annotations

from ..errors import TopologyError
from ..hardware import GPU_FABRIC_KINDS


def tech_kind(tech: str) -> str:
    from ..hardware import get_link_tech
    try:
        return get_link_tech(tech).kind
    except Exception:   # a custom link: no catalog kind
        return "custom"


def _bottleneck(topo, path):
    """(nominal, achievable) smallest bandwidth along a path of link indices."""
    if not path:
        return float("inf"), float("inf")
    bw, _, eff = topo.link_arrays()
    idx = list(path)
    return float(bw[idx].min()), float((bw[idx] * eff[idx]).min())


def _port_rate(model):
    from ..hardware import get_link_tech
    try:
        return get_link_tech(model).bandwidth_Bps
    except Exception:
        return None


def _port_eff(model):
    from ..hardware import get_link_tech
    try:
        return get_link_tech(model).efficiency
    except Exception:
        return 1.0


def gpu_bandwidths(topo) -> list[dict]:
    """Per rank, per direction (bytes/s): NVLink out of the GPU, to its NIC (through PCIe,
    the NIC's port included) and to host memory (the nearest memory device)."""
    router = topo.router
    ports = router.ports() if any(d.kind == "nic" for d in topo.devices) else \
        [-1] * topo.nranks
    per, n = topo.gpus_per_node, topo.nranks
    if (topo.cache.replica and topo.nodes > 1 and n == topo.nodes * per
            and all(topo.node_of(r) == r // per for r in range(0, n, per))):
        # node k is node 0 shifted (build_topology): its GPUs' rows are node 0's, renamed;
        # computing each of 131,072 GPUs' paths would take minutes
        rows0 = _rows(topo, router, ports, range(per))
        out = []
        for r in range(n):
            row = dict(rows0[r % per], rank=r, gpu=topo.ranks[r], node=r // per)
            if row["nic"] is not None:
                row["nic"] = topo.devices[ports[r]].name
            out.append(row)
        return out
    return _rows(topo, router, ports, range(n))


def _rows(topo, router, ports, ranks) -> list[dict]:
    import numpy as np
    gpus = [router.rank_dev[r] for r in ranks]
    nics = [ports[r] for r in ranks if ports[r] >= 0]
    src = router._ends[0]
    mine = np.flatnonzero(np.isin(src, np.asarray(gpus + nics, dtype=np.int64)))
    nvlink: dict[str, float] = {}    # device -> NVLink (or xGMI) bandwidth out of it
    uplink: dict[str, float] = {}    # device -> its fastest link out of its node
    kinds: dict[str, str] = {}       # link tech -> catalog kind
    for i in mine.tolist():          # only the links out of these GPUs and their NICs
        ln = topo.links[i]
        if ln.tech not in kinds:
            kinds[ln.tech] = tech_kind(ln.tech)
        if kinds[ln.tech] in GPU_FABRIC_KINDS:   # NVLink, or xGMI between MI300X
            nvlink[ln.src] = nvlink.get(ln.src, 0.0) + ln.bandwidth_Bps
        if router.node[router.index[ln.src]] != router.node[router.index[ln.dst]]:
            uplink[ln.src] = max(uplink.get(ln.src, 0.0), ln.bandwidth_Bps)
    out = []
    for r in ranks:
        name = topo.ranks[r]
        g = router.rank_dev[r]
        nvl = nvlink.get(name, 0.0)
        row = {"rank": r, "gpu": name, "node": topo.node_of(r),
               "model": topo.devices[g].model, "nvlink_Bps": nvl}
        nic = ports[r] if ports[r] >= 0 and topo.devices[ports[r]].kind == "nic" else -1
        row["nic"] = topo.devices[nic].name if nic >= 0 else None
        if nic >= 0:
            paths = router._local_paths(g, nic)
            port = uplink.get(topo.devices[nic].name)
            nom, ach = _bottleneck(topo, paths[0]) if paths else (0.0, 0.0)
            if port is None:   # one node: no fabric link; the NIC's catalog port rate
                port = _port_rate(topo.devices[nic].model)
            if port is not None:
                tech_eff = _port_eff(topo.devices[nic].model)
                nom, ach = min(nom, port), min(ach, port * tech_eff)
            row["to_nic_Bps"], row["to_nic_achievable_Bps"] = nom, ach
        else:
            row["to_nic_Bps"] = row["to_nic_achievable_Bps"] = None
        best = None
        for m in router.memories.get(topo.devices[g].node, []):
            for p in router._local_paths(g, m)[:1]:   # node 0's paths, shifted (replicas)
                cand = (router._cost(p), p)
                best = cand if best is None or cand < best else best
        if best:
            row["to_host_Bps"], row["to_host_achievable_Bps"] = _bottleneck(topo, best[1])
        else:
            row["to_host_Bps"] = row["to_host_achievable_Bps"] = None
        out.append(row)
    return out


def bisection_bandwidth(topo, achievable: bool = False) -> float:
    """Max flow (bytes/s, one direction) from the first half of the ranks to the second —
    the node halves for a cluster, the GPU halves for one node. 0 for a single rank.

    The cut is the natural one (first half of nodes against the rest), which is where a
    rail-optimised or fat-tree fabric is narrowest; it is not a search over all bisections.
    """
    n = topo.nranks
    if n < 2:
        return 0.0
    if topo.nodes > 1:
        half = topo.nodes // 2
        a = [r for r in range(n) if topo.node_of(r) < half]
        b = [r for r in range(n) if topo.node_of(r) >= half]
    else:
        a, b = list(range(n // 2)), list(range(n // 2, n))
    import networkx as nx  # here, not at import: it costs every command ~0.3 s

    g: nx.DiGraph[str | tuple[str, int]] = nx.DiGraph()
    bw, _, eff = topo.link_arrays()
    cap = bw * eff if achievable else bw
    for i, ln in enumerate(topo.links):
        if g.has_edge(ln.src, ln.dst):
            g[ln.src][ln.dst]["capacity"] += float(cap[i])
        else:
            g.add_edge(ln.src, ln.dst, capacity=float(cap[i]))
    src, dst = ("__A__", 0), ("__B__", 0)
    for r in a:
        g.add_edge(src, topo.ranks[r], capacity=float("inf"))
    for r in b:
        g.add_edge(topo.ranks[r], dst, capacity=float("inf"))
    try:
        value = nx.maximum_flow_value(g, src, dst)
    except nx.NetworkXUnbounded:  # pragma: no cover - every GPU link has finite capacity
        raise TopologyError("bisection is unbounded: a GPU-to-GPU path has no finite "
                            "link") from None
    return float(value)


def summary(topo) -> dict:
    """Counts by device kind and link technology (for `gpucomm topo show`)."""
    kinds: dict[str, int] = {}
    for d in topo.devices:
        kinds[d.kind] = kinds.get(d.kind, 0) + 1
    links: dict[str, int] = {}
    rates: dict[str, set[float]] = {}
    for ln in topo.links:
        links[ln.tech] = links.get(ln.tech, 0) + 1
        rates.setdefault(ln.tech, set()).add(ln.bandwidth_Bps)
    techs = {t: {"links": n, "bandwidth_Bps": sorted(rates[t])} for t, n in links.items()}
    return {"devices": kinds, "links": techs}
