"""Cluster builders: N nodes of a preset on a rail-optimised or fat-tree fabric.

Node presets are topology YAML files for one node (gpucomm/data/presets/*.yaml, the format of
docs/topology-yaml.md). `build_topology` trims GPUs, swaps NICs and the PCIe generation,
replicates the node, names devices `n{k}.{name}`, and adds the fabric:

- rail:     NIC i of every node on leaf (rail) switch i; spines join the rails.
- fat-tree: nodes fill leaf switches in order (`leaf_ports` NIC ports per leaf); spines
            join the leaves.
- rail-2tier: rail-optimised leaf/spine at cable granularity (fabric.py): NIC i of each
            group of `leaf_ports` nodes on leaf (group, i), `leaf_ports / oversubscription`
            uplinks per leaf, one cable per spine; `network` (fabric.Network) says how flows
            are hashed, what loss does and which cables are down.
- tor-2tier: the same at cable granularity, but every NIC of a group of `leaf_ports` nodes
            on one top-of-rack leaf (Meta's RTSW), `leaf_ports x NICs / oversubscription`
            uplinks per leaf (oversubscription below 1: spare uplinks, Meta's 1:1.125).
Leaf uplinks carry the leaf's downlink bandwidth divided by `oversubscription`.

    >>> t = build_topology("dgx-h100", nodes=2)
    >>> t.nranks, t.in_switch_reduction
    (16, True)
"""
from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources

import numpy as np

from ..errors import ConfigError
from ..hardware.catalog import load_packaged_yaml
from ..hardware import (GPU_FABRIC_KINDS, get_gpu, get_link_tech, get_nic, get_nvswitch,
                        nic_names)
from ..limits import check_model_ranks
from .fabric import Network, rail_2tier, with_network
from .model import Device, Link, Topology, topology_from_dict
from .tables import DeviceTable, FabricColumns, replicate_links

FABRICS = ("rail", "fat-tree", "rail-2tier", "rail-3tier", "tor-2tier")
PORT_LEVEL = ("rail-2tier", "rail-3tier", "tor-2tier")  # fabric.rail_2tier: one link per cable
MIN_PORT_OVERSUB = 0.5  # a port-level leaf may have up to twice as many uplinks as NIC ports
PCIE_GENS = (3, 4, 5, 6)
MAX_SPINES = 8


@lru_cache(maxsize=None)
def preset_names() -> tuple[str, ...]:
    folder = resources.files("gpucomm").joinpath("data/presets")
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml")))


PRESETS = preset_names()


def check_preset(system: str, hint: str = "") -> None:
    """ConfigError unless `system` names a preset; the error lists them, then `hint`."""
    if system not in preset_names():
        raise ConfigError(f"unknown system preset {system!r}; allowed: "
                          f"{', '.join(preset_names())}{hint}")


@lru_cache(maxsize=None)
def preset_node(system: str) -> Topology:
    """The one-node topology of a preset."""
    check_preset(system, " (or --topology FILE)")
    return topology_from_dict(load_packaged_yaml(f"data/presets/{system}.yaml"),
                              f"preset {system}")


def _int_option(name, value, lo, hi=None):
    if isinstance(value, bool) or not isinstance(value, int) or value < lo \
            or (hi is not None and value > hi):
        allowed = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ConfigError(f"{name} {value!r} not allowed: must be an integer {allowed}")
    return value


def _parent(node: Topology, gpu: str) -> tuple[str, str]:
    """The device a GPU's host link goes to, and the PCIe tech a NIC placed there gets: the
    GPU's own PCIe link, or — where the GPU reaches its host over NVLink-C2C (GB200: the NICs
    hang off the Grace CPU's PCIe) — the PCIe generation the catalog gives the GPU model."""
    models = {d.name: d.model for d in node.devices}
    for kind in ("pcie", "c2c"):
        for ln in node.links:
            if ln.src == gpu and _kind(ln.tech) == kind:
                if kind == "pcie":
                    return ln.dst, ln.tech
                if not models.get(gpu):
                    raise ConfigError(f"GPU {gpu!r} reaches its host over C2C but has no "
                                      "catalog model to give its NICs a PCIe generation")
                return ln.dst, get_gpu(models[gpu]).pcie
    raise ConfigError(f"GPU {gpu!r} has no PCIe or C2C link; cannot attach NICs near it")


def build_topology(system: str = "dgx-h100", nodes: int = 1, gpus_per_node: int | None = None,
                   nic: str | None = None, nics_per_node: int | None = None,
                   pcie_gen: int | None = None, p2p: bool | None = None, fabric: str = "rail",
                   oversubscription: float = 1.0, *, gpu: str | None = None,
                   leaf_ports: int = 32, node_topology: Topology | None = None,
                   nvlink_partition: int | None = None,
                   network: Network | None = None, placement: str = "packed") -> Topology:
    """A cluster of `nodes` copies of a node preset (or of `node_topology`, a one-node
    Topology loaded from YAML) on a fabric.

    gpus_per_node: use the first K GPUs of each node. nic / nics_per_node: replace the
    preset's NICs (catalog names: ib-ndr, roce-400g, efa-100g, ...). pcie_gen: set every PCIe
    link to that generation. p2p=False: GPU traffic bounces through host memory; None: as
    the node allows and the GPUs' driver grants (catalog peer_to_peer: off for GeForce cards).
    gpu: another GPU model with the same NVLink generation (or none, e.g. pcie + rtx4090).
    nvlink_partition: split each node's NVLink switch domain into partitions of that many GPUs
    (NCCL's MNNVL cliques on a GB200 NVL72 rack); each partition is a node of the result, its
    GPUs reach the other partitions only through the NICs. A partition must keep together the
    GPUs that share a CPU, memory or NIC (a GB200 superchip), and divide the GPUs in use.
    network: a fabric.Network (routing, loss, failed cables; None: the plain model).
    placement: rail-2tier only, where the job's nodes sit on the leaves (fabric.PLACEMENTS).

        >>> build_topology("pcie", gpus_per_node=4, pcie_gen=5, p2p=False).nranks
        4
    """
    nodes = _int_option("nodes", nodes, 1)
    leaf_ports = _check_fabric_options(fabric, oversubscription, leaf_ports, placement)
    base = node_topology if node_topology is not None else preset_node(system)
    name = base.name if node_topology is not None else system
    if len({d.node for d in base.devices}) != 1:
        raise ConfigError(f"{name}: a node template must describe exactly one node")
    devices, links = list(base.devices), list(base.links)
    gpus = [d.name for d in devices if d.kind == "gpu"]
    ranks_all = [r for r in base.ranks] or gpus
    G = len(ranks_all)
    K = G if gpus_per_node is None else _int_option("gpus_per_node", gpus_per_node, 1)
    if K > G:
        raise ConfigError(f"gpus_per_node {K} is more than {name} has: allowed 1..{G}")
    check_model_ranks(nodes, K)
    if gpu is not None:
        devices = _with_gpu_model(name, devices, links, gpu)
    nic_devs = [d for d in devices if d.kind == "nic"]
    served = G   # the GPUs the NICs are laid out for: the preset's, or the K in use
    if nic is not None:
        get_nic(nic)
    if nics_per_node is not None:
        _int_option("nics_per_node", nics_per_node, 1)
    if nic is not None or nics_per_node is not None:
        devices, links, nic_devs, served = _with_nics(base, name, devices, links, ranks_all, K,
                                                      nic, nics_per_node)
    M = len(nic_devs)
    # GPU i uses NIC floor(i*M/n), the NIC on its PCIe switch: n = G for the preset's own NICs
    # (affinity does not change when fewer GPUs run), n = K when M NICs were laid out for the
    # K GPUs in use (so they spread over all M NICs, not all onto nic0)
    affinity = {ranks_all[i]: nic_devs[min(i * M // served, M - 1)].name
                for i in range(G)} if M else {}
    if pcie_gen is not None:
        devices, links = _with_pcie_gen(devices, links, pcie_gen)

    if p2p is None:
        p2p = base.p2p and all(get_gpu(d.model).peer_to_peer
                               for d in devices if d.kind == "gpu" and d.model)

    # --- trim GPUs ------------------------------------------------------------------------
    dropped = set(ranks_all[K:])
    devices = [d for d in devices if d.name not in dropped]
    links = [ln for ln in links if ln.src not in dropped and ln.dst not in dropped]
    ranks = ranks_all[:K]
    switches = [d for d in devices if d.kind == "nvswitch" and d.model]
    in_switch = all(get_nvswitch(d.model).reduces_in_switch for d in switches) if switches \
        else base.in_switch_reduction

    # --- NVLink partitions (MNNVL cliques) -------------------------------------------------
    blocks = [(devices, links, ranks)]
    if nvlink_partition is not None:
        blocks = _partitions(name, devices, links, ranks, affinity,
                             _int_option("nvlink_partition", nvlink_partition, 1))
    per = len(blocks)
    if nodes * per > 1:
        _check_joinable(name, nodes * per, M, fabric, per)

    # --- replicate and wire the fabric ----------------------------------------------------
    seed = network.placement_rng_seed if network is not None else 0
    if per == 1:   # copies of one node: columns, not a million Python objects (tables.py)
        all_devices, all_links, all_ranks, all_aff = _replicas(
            blocks[0], affinity, nodes, fabric, oversubscription, leaf_ports, placement, seed)
    else:
        all_devices, all_links, all_ranks, all_aff = _blocks(blocks, affinity, nodes,
                                                             fabric, oversubscription,
                                                             leaf_ports)
    label = name if nodes == 1 else f"{name}x{nodes}"
    if per > 1 or nvlink_partition is not None:
        label += f"-nvl{len(blocks[0][2])}"
    topo = Topology(name=label, devices=all_devices, links=all_links,
                    ranks=tuple(all_ranks), gpus_per_node=len(blocks[0][2]), nodes=nodes * per,
                    in_switch_reduction=in_switch, p2p=bool(p2p),
                    nic_affinity=tuple(all_aff))
    # Nodes are exact replicas laid out in the same order: the router derives node k's
    # local routes from node 0's by shifting indices instead of recomputing them.
    if len({_shape(b) for b in blocks}) == 1:
        topo.cache.replica = (len(blocks[0][0]), len(blocks[0][1]))
    if network is not None:
        return with_network(topo, network)  # checks the routes that are left
    topo.check_routes()
    return topo


def _check_fabric_options(fabric: str, oversubscription: float, leaf_ports: int,
                          placement: str) -> int:
    """Check the fabric's options (before the node is read); the leaf_ports to use."""
    if fabric not in FABRICS:
        raise ConfigError(f"unknown fabric {fabric!r}; allowed: {', '.join(FABRICS)}")
    least = MIN_PORT_OVERSUB if fabric in PORT_LEVEL else 1.0
    if isinstance(oversubscription, bool) or not isinstance(oversubscription, (int, float)) \
            or not oversubscription >= least or math.isinf(oversubscription):
        raise ConfigError(f"oversubscription {oversubscription!r} not allowed: must be a "
                          "number >= 1 (1 = full bisection, 2 = 2:1, ...; the port-level "
                          f"fabrics {', '.join(PORT_LEVEL)} also take {MIN_PORT_OVERSUB}..1: "
                          "spare uplinks)")
    leaf_ports = _int_option("leaf_ports", leaf_ports, 1)
    if placement != "packed" and fabric not in PORT_LEVEL:
        raise ConfigError(f"placement {placement!r} applies to fabric rail-2tier (the job's "
                          f"nodes on its leaves), not to {fabric!r}")
    return leaf_ports


def _with_gpu_model(name: str, devices: list[Device], links: list[Link],
                    gpu: str) -> list[Device]:
    """`devices` with every GPU made a `gpu`, which must use the node's NVLink generation."""
    new = get_gpu(gpu)
    nvl = {ln.tech for ln in links if _kind(ln.tech) in GPU_FABRIC_KINDS}
    if nvl and new.nvlink not in nvl:
        raise ConfigError(f"GPU {gpu!r} ({new.nvlink or 'no NVLink'}) does not fit {name}, "
                          f"whose GPUs use {', '.join(sorted(nvl))}; allowed: GPUs with "
                          f"{', '.join(sorted(nvl))}")
    return [Device(d.name, d.kind, d.node, new.name) if d.kind == "gpu" else d
            for d in devices]


def _with_nics(base: Topology, name: str, devices: list[Device], links: list[Link],
               ranks_all: list[str], K: int, nic: str | None, nics_per_node: int | None,
               ) -> tuple[list[Device], list[Link], list[Device], int]:
    """The node with its NICs replaced: `nics_per_node` of them (default: as many as
    before) of technology `nic` (default: the node's). Returns the devices, the links, the
    new NICs and how many GPUs they are laid out for (all the node's when the count is
    unchanged: same slots; else the K in use: NIC j next to GPU j*K/M). A multiple of K NICs
    becomes K fused NICs, one per GPU ("ib-hdr*2": hardware.fused_nic), as NCCL runs them."""
    nic_devs = [d for d in devices if d.kind == "nic"]
    served = len(ranks_all)
    M = nics_per_node if nics_per_node is not None else max(len(nic_devs), 1)
    tech = nic if nic is not None else (nic_devs[0].model if nic_devs else None)
    if tech is None:
        raise ConfigError(f"{name} has no NICs: give --nic NAME (allowed: "
                          f"{', '.join(nic_names())})")
    tech = get_nic(tech).name
    old = {d.name for d in nic_devs}
    if M == len(nic_devs):   # same count: same slots, new technology
        attach = {}
        for ln in links:
            if ln.src in old:
                attach[ln.src] = (ln.dst, ln.tech)
        slots = [attach.get(d.name) or _parent(base, ranks_all[0]) for d in nic_devs]
    else:   # M NICs for the K GPUs in use: NIC j next to GPU j*K/M (same PCIe switch)
        served = K
        if M > K and M % K == 0:   # M/K ports next to each GPU: NCCL fuses them into one
            tech, M = get_nic(f"{tech}*{M // K}").name, K   # virtual NIC (fused_nic)
        slots = [_parent(base, ranks_all[j * K // M]) for j in range(M)]
    links = [ln for ln in links if ln.src not in old and ln.dst not in old]
    first = next((i for i, d in enumerate(devices) if d.kind == "nic"), len(devices))
    devices = [d for d in devices if d.name not in old]
    nic_devs = [Device(f"nic{j}", "nic", devices[0].node, tech) for j in range(M)]
    devices[first:first] = nic_devs
    for d, (parent, ptech) in zip(nic_devs, slots):
        pt = get_link_tech(ptech)
        links.append(Link(d.name, parent, pt.bandwidth_Bps, pt.latency_s, pt.name,
                          pt.efficiency))
        links.append(Link(parent, d.name, pt.bandwidth_Bps, pt.latency_s, pt.name,
                          pt.efficiency))
    return devices, links, nic_devs, served


def _with_pcie_gen(devices: list[Device], links: list[Link],
                   pcie_gen: int) -> tuple[list[Device], list[Link]]:
    """Every PCIe link and switch of the node made generation `pcie_gen`."""
    if pcie_gen not in PCIE_GENS:
        raise ConfigError(f"pcie_gen {pcie_gen!r} not allowed: one of "
                          f"{', '.join(map(str, PCIE_GENS))}")
    pt = get_link_tech(f"pcie{pcie_gen}")
    links = [Link(ln.src, ln.dst, pt.bandwidth_Bps, pt.latency_s, pt.name, pt.efficiency)
             if _kind(ln.tech) == "pcie" else ln for ln in links]
    devices = [Device(d.name, d.kind, d.node, pt.name) if d.kind == "pcie_switch" else d
               for d in devices]
    return devices, links


def _check_joinable(name: str, total: int, nics: int, fabric: str, per: int) -> None:
    """`total` > 1 nodes (`per` partitions of each) with `nics` NICs each can join `fabric`."""
    if not nics:
        raise ConfigError(f"{name} has no NICs, so {total} nodes cannot be joined: "
                          f"give --nic NAME (allowed: {', '.join(nic_names())})")
    if fabric in PORT_LEVEL and per > 1:
        raise ConfigError("fabric rail-2tier joins whole nodes: it cannot be combined "
                          "with --nvlink-partition")


def _replicas(block, affinity, nodes, fabric, oversub, leaf_ports, placement, seed):
    """Devices (DeviceTable), links (LinkTable), ranks and NIC affinity of `nodes` copies of
    one node block on a fabric: device j of node k is `n{k}.{name}` at k * devices + j,
    node k's links follow node k-1's in the same order, then the fabric's."""
    bdev, blinks, branks = block
    ndev = len(bdev)
    nic_pos = [j for j, d in enumerate(bdev) if d.kind == "nic"]
    nic_names_, nic_models = [bdev[j].name for j in nic_pos], [bdev[j].model for j in nic_pos]
    fdev: list[Device] = []
    cols: FabricColumns = ([], [], [], [], [], ((), []))   # no fabric: no links
    if nodes > 1 and fabric in PORT_LEVEL:
        fdev, flinks = rail_2tier(nodes, nic_names_, nic_models, oversub, leaf_ports,
                                  placement, seed, tiers=3 if fabric == "rail-3tier" else 2,
                                  tor=fabric == "tor-2tier")
        devices = DeviceTable(bdev, nodes, fdev)
        cols = ([devices.position(ln.src) for ln in flinks],
                [devices.position(ln.dst) for ln in flinks],
                [ln.bandwidth_Bps for ln in flinks], [ln.latency_s for ln in flinks],
                [ln.efficiency for ln in flinks], _codes([ln.tech for ln in flinks]))
    else:
        if nodes > 1:
            fdev, cols = _fabric_columns(nodes, ndev, nic_pos, nic_models, fabric, oversub,
                                         leaf_ports)
        devices = DeviceTable(bdev, nodes, fdev)
    links = replicate_links(devices, blinks, cols)
    ranks = devices.remember(branks)
    aff = devices.remember([affinity[r] for r in branks]) if affinity else []
    return devices, links, ranks, aff


def _blocks(blocks, affinity, nodes, fabric, oversub, leaf_ports):
    """Devices, links, ranks and NIC affinity of the blocks of an NVLink partition, each a
    node, in turn, on a rail or fat-tree fabric."""
    per = len(blocks)
    all_devices, all_links, all_ranks, all_aff, node_nics = [], [], [], [], []
    for k in range(nodes * per):
        bdev, blinks, branks = blocks[k % per]
        rename = {d.name: f"n{k}.{d.name}" for d in bdev}
        all_devices += [Device(rename[d.name], d.kind, k, d.model) for d in bdev]
        all_links += [Link(rename[ln.src], rename[ln.dst], ln.bandwidth_Bps, ln.latency_s,
                           ln.tech, ln.efficiency) for ln in blinks]
        all_ranks += [rename[r] for r in branks]
        all_aff += [rename[affinity[r]] for r in branks] if affinity else []
        node_nics.append([(rename[d.name], d.model) for d in bdev if d.kind == "nic"])
    if nodes * per > 1:
        fdev, flinks = _fabric(node_nics, fabric, oversub, leaf_ports)
        all_devices += fdev
        all_links += flinks
    return all_devices, all_links, all_ranks, all_aff


def _fabric_columns(nodes, ndev, nic_pos, nic_models, fabric, oversub, leaf_ports):
    """`_fabric` for `nodes` copies of a node (NIC i at device nic_pos[i] of each), as
    (devices, link columns) with device indices: the same devices and links in the same
    order, without a Python object per link."""
    M = len(nic_pos)
    model0 = nic_models[0]
    k = np.repeat(np.arange(nodes, dtype=np.int64), M)
    i = np.tile(np.arange(M, dtype=np.int64), nodes)
    if fabric == "rail":
        nleaves, leaf, prefix = M, i, "rail"
    else:
        per_leaf = max(1, leaf_ports // M)     # whole nodes per leaf
        nleaves, leaf, prefix = math.ceil(nodes / per_leaf), k // per_leaf, "leaf"
    devices = [Device(f"{prefix}{j}", "switch", -1, model0) for j in range(nleaves)]
    base = nodes * ndev
    techs = [get_link_tech(m) for m in nic_models]
    nic = k * ndev + np.asarray(nic_pos, dtype=np.int64)[i]
    sw = base + leaf
    bw = np.array([t.bandwidth_Bps for t in techs])[i]
    down = np.zeros(nleaves)
    np.add.at(down, leaf, bw)   # unbuffered, in order: the same sums as a loop adding them
    src, dst = [np.stack([nic, sw], 1).ravel()], [np.stack([sw, nic], 1).ravel()]
    cols = [[np.repeat(bw, 2)], [np.repeat(np.array([t.latency_s for t in techs])[i], 2)],
            [np.repeat(np.array([t.efficiency for t in techs])[i], 2)]]
    names, code = _codes([t.name for t in techs] + [get_link_tech(model0).name])
    codes = [np.repeat(np.asarray(code[:M], dtype=np.int64)[i], 2)]
    if nleaves > 1:
        nspines = min(nleaves, MAX_SPINES)
        tech = get_link_tech(model0)
        devices += [Device(f"spine{s}", "switch", -1, model0) for s in range(nspines)]
        # uplink capacity = downlink capacity / oversubscription, spread over the spines
        j = np.repeat(np.arange(nleaves, dtype=np.int64), nspines)
        s = np.tile(np.arange(nspines, dtype=np.int64), nleaves)
        leaf_i, spine_i = base + j, base + nleaves + s
        src.append(np.stack([leaf_i, spine_i], 1).ravel())
        dst.append(np.stack([spine_i, leaf_i], 1).ravel())
        up = np.repeat(down / oversub / nspines, nspines)
        cols[0].append(np.repeat(up, 2))
        cols[1].append(np.full(len(up) * 2, tech.latency_s))
        cols[2].append(np.full(len(up) * 2, tech.efficiency))
        codes.append(np.full(len(up) * 2, code[M], dtype=np.int64))
    return devices, (np.concatenate(src), np.concatenate(dst), np.concatenate(cols[0]),
                     np.concatenate(cols[1]), np.concatenate(cols[2]),
                     (names, np.concatenate(codes)))


def _codes(values) -> tuple[tuple, list[int]]:
    """(the distinct values in order of first appearance, each value's position in them)."""
    seen: dict = {}
    codes = [seen.setdefault(v, len(seen)) for v in values]
    return tuple(seen), codes


def _shape(block) -> tuple:
    """A node block's structure by device position: equal shapes are index-shifted replicas."""
    devices, links, _ = block
    pos = {d.name: i for i, d in enumerate(devices)}
    return (tuple((d.kind, d.model) for d in devices),
            tuple((pos[ln.src], pos[ln.dst], ln.bandwidth_Bps, ln.latency_s, ln.tech,
                   ln.efficiency) for ln in links))


def _partitions(name, devices, links, ranks, affinity, size):
    """Split one node's NVLink switch domain into partitions of `size` GPUs, in rank order.

    Every device but the NVSwitches belongs to the GPUs it is wired to without an NVSwitch
    (a GB200 superchip: 2 GPUs, their Grace CPU, its memory and NICs); those groups stay whole.
    Each partition gets its own copy of every NVSwitch, wired to its GPUs only."""
    switches = [d for d in devices if d.kind == "nvswitch"]
    if not switches:
        raise ConfigError(f"nvlink_partition needs an NVLink switch domain to split; {name} "
                          "has no NVSwitch")
    names = {d.name for d in switches}
    group = {d.name: d.name for d in devices if d.name not in names}

    def find(x):
        while group[x] != x:
            group[x] = group[group[x]]
            x = group[x]
        return x
    for ln in links:
        if ln.src not in names and ln.dst not in names:
            group[find(ln.src)] = find(ln.dst)
    gpu_group = {r: find(r) for r in ranks}

    def fits(p):
        if len(ranks) % p:
            return False
        owner: dict[str, int] = {}   # CPU/memory/NIC group -> its partition
        for i, r in enumerate(ranks):
            if owner.setdefault(gpu_group[r], i // p) != i // p:
                return False
        return True
    if not fits(size):
        allowed = [p for p in range(1, len(ranks) + 1) if fits(p)]
        raise ConfigError(f"nvlink_partition {size} not allowed for {name} with {len(ranks)} "
                          "GPUs: a partition must divide them and keep GPUs that share a CPU, "
                          f"memory or NIC together; allowed: {', '.join(map(str, allowed))}")
    blocks = []
    for q in range(len(ranks) // size):
        mine = ranks[q * size:(q + 1) * size]
        groups = {gpu_group[r] for r in mine}
        keep = {d.name for d in devices if d.name not in names and find(d.name) in groups}
        if affinity:
            for r in mine:
                if affinity[r] not in keep:
                    raise ConfigError(f"nvlink_partition {size}: the NIC of {r} "
                                      f"({affinity[r]}) lies outside its partition")
        gpus = set(mine)
        bdev = [d for d in devices if d.name in keep or d.name in names]
        blinks = [ln for ln in links if (ln.src in keep and ln.dst in keep)
                  or (ln.src in names and ln.dst in gpus) or (ln.dst in names and ln.src in gpus)]
        blocks.append((bdev, blinks, list(mine)))
    return blocks


def _kind(tech: str) -> str:
    try:
        return get_link_tech(tech).kind
    except ConfigError:
        return "custom"


def _duplex(a, b, bw, tech):
    return [Link(a, b, bw, tech.latency_s, tech.name, tech.efficiency),
            Link(b, a, bw, tech.latency_s, tech.name, tech.efficiency)]


def _fabric(node_nics, fabric, oversub, leaf_ports):
    """Leaf and spine switches and their links; NIC i of node k -> its leaf.

    node_nics: per node, its NICs as (device name, catalog model), in NIC order."""
    nodes = len(node_nics)
    M = len(node_nics[0])
    if any(len(n) != M for n in node_nics):
        raise ConfigError("every node must have the same number of NICs to join a fabric")
    model0 = node_nics[0][0][1]
    leaf_of = {}
    if fabric == "rail":
        nleaves = M
        for k in range(nodes):
            for i in range(M):
                leaf_of[(k, i)] = i
    else:
        per_leaf = max(1, leaf_ports // M)     # whole nodes per leaf
        nleaves = math.ceil(nodes / per_leaf)
        for k in range(nodes):
            for i in range(M):
                leaf_of[(k, i)] = k // per_leaf
    prefix = "rail" if fabric == "rail" else "leaf"
    devices = [Device(f"{prefix}{j}", "switch", -1, model0) for j in range(nleaves)]
    links = []
    down = [0.0] * nleaves
    for (k, i), j in leaf_of.items():
        nic, model = node_nics[k][i]
        tech = get_link_tech(model)
        links += _duplex(nic, f"{prefix}{j}", tech.bandwidth_Bps, tech)
        down[j] += tech.bandwidth_Bps
    if nleaves > 1:
        nspines = min(nleaves, MAX_SPINES)
        tech = get_link_tech(model0)
        devices += [Device(f"spine{s}", "switch", -1, model0) for s in range(nspines)]
        for j in range(nleaves):
            # uplink capacity = downlink capacity / oversubscription, spread over the spines
            bw = down[j] / oversub / nspines
            for s in range(nspines):
                links += _duplex(f"{prefix}{j}", f"spine{s}", bw, tech)
    return devices, links
