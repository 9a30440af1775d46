"""Which machine a log ran on: GPU model, nodes, GPUs per node, NIC -> build_topology's arguments.

The rule reads what nccl-tests and NCCL print (device names, host names, `NET/IB : Using`,
the transports of each connection); it does not guess from the numbers.

    >>> from gpucomm.interop.nccltests import parse_log
    >>> g = infer_system(parse_log(LOG))                      # doctest: +SKIP
    >>> g.build_kwargs()                                      # doctest: +SKIP
    {'system': 'dgx-h100', 'nodes': 2, 'gpus_per_node': 8}
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..errors import ConfigError
from ..hardware import get_gpu, get_link_tech
from ..simulate.nccl_tuning import coll_channels
from .nccltests import NcclTestsLog

# Device names as CUDA reports them -> catalog GPU. Order matters (GH200 before H100 ...).
GPU_PATTERNS = (
    (r"\bG?B200\b|\bB100\b", "b200"),
    (r"\bH200\b", "h200"),
    (r"\bGH200\b", "gh200"),  # a Grace Hopper superchip's GPU: the 4-GH200 node, no NVSwitch
    (r"\bH100\b|\bH800\b", "h100"),
    (r"\bA100\b|\bA800\b", "a100"),
    (r"\bMI300X\b|\bMI325X\b", "mi300x"),
    (r"\bMI355X\b|\bMI350X\b", "mi355x"),
    (r"\bV100\b", "v100"),
    (r"\bL40S\b", "l40s"),
    (r"RTX\s*4090", "rtx4090"),
    (r"\bT4\b", "t4"),
)
# Catalog GPU -> the node preset it ships in (NVSwitch baseboards; PCIe cards in a PCIe box).
PRESET_OF_GPU = {"mi300x": "mi300x", "mi355x": "mi355x",
                 "b200": "dgx-b200", "h200": "hgx-h200", "h100": "dgx-h100",
                 "gh200": "cray-ex254n",
                 "a100": "dgx-a100", "v100": "dgx-v100", "l40s": "pcie", "rtx4090": "pcie",
                 "t4": "pcie"}
# Node preset -> the GPU model it ships with.
PRESET_GPU = {v: k for k, v in PRESET_OF_GPU.items() if v != "pcie"}
LABEL = {"dgx-b200": "DGX B200", "hgx-h200": "HGX H200", "dgx-h100": "DGX H100",
         "dgx-a100": "DGX A100", "dgx-v100": "DGX-1 V100", "polaris": "Polaris node",
         "pcie": "PCIe host", "mi300x": "MI300X platform", "mi355x": "MI355X platform",
         "cray-ex254n": "GH200 quad node"}
# Per-GPU-generation NIC of the same family when the log names only the family.
_ROCE = {"b200": "roce-400g", "h200": "roce-400g", "h100": "roce-400g", "gh200": "roce-400g",
         "a100": "roce-200g"}
_EFA = {"b200": "efa-400g", "h200": "efa-400g", "h100": "efa-400g", "gh200": "efa-400g",
        "a100": "efa-100g"}
# InfiniBand by GPU generation when NCCL prints no port speed (what those nodes shipped with).
_IB = {"b200": "ib-ndr", "h200": "ib-ndr", "h100": "ib-ndr", "gh200": "ib-ndr", "a100": "ib-hdr",
       "v100": "ib-edr",
       "mi300x": "ib-ndr", "mi355x": "ib-ndr"}
# NIC port speed (Mb/s, as NCCL prints it) -> catalog NIC of each kind.
_BY_SPEED = {"ib": {100000: "ib-edr", 200000: "ib-hdr", 400000: "ib-ndr", 800000: "ib-xdr"},
             "roce": {100000: "roce-100g", 200000: "roce-200g", 400000: "roce-400g",
                      800000: "roce-800g"}}


def gpu_of(name: str) -> str | None:
    """Catalog GPU of a CUDA device name ('NVIDIA H100 80GB HBM3' -> 'h100'), None if unknown."""
    for pattern, gpu in GPU_PATTERNS:
        if re.search(pattern, name, re.I):
            return gpu
    return None


@dataclass(frozen=True)
class SystemGuess:
    """What a log says about its machine, and where each fact came from."""
    gpu: str | None  # catalog name
    gpu_name: str | None  # as printed
    nranks: int
    nodes: int
    gpus_per_node: int
    system: str | None  # node preset
    nic: str | None = None  # catalog NIC, None: the preset's
    nics_per_node: int | None = None
    p2p: bool | None = None  # only for PCIe boxes
    evidence: tuple = ()  # one line per inference
    nic_note: str | None = None  # how the NIC's speed was read, where not from a speed line

    def build_kwargs(self) -> dict:
        if self.system is None:
            raise ConfigError(f"no preset for GPU {self.gpu_name or 'unknown'!r}: give --system "
                              "(a preset name) to say which machine the log ran on")
        kw = {"system": self.system, "nodes": self.nodes, "gpus_per_node": self.gpus_per_node}
        if self.system == "pcie":
            kw["gpu"] = self.gpu
            kw["pcie_gen"] = pcie_gen_of(self.gpu)
            if self.p2p is not None:
                kw["p2p"] = bool(self.p2p)
        if self.nodes > 1 and self.nic:
            kw["nic"] = self.nic
        if self.nodes > 1 and self.nics_per_node:
            kw["nics_per_node"] = self.nics_per_node
        return kw


def _amd_gpu_of_hosts(hosts, ev) -> str | None:
    """rccl-tests releases print no device name: an AMD model a host name spells out."""
    for host in hosts:
        m = re.search(r"mi\s*-?(300x?|325x?|350x?|355x?)", host, re.I)
        if m:
            model = "MI" + m.group(1).upper().rstrip("X") + "X"
            ev.append(f"rccl-tests printed no device names; host {host!r} names {model}")
            return f"AMD Instinct {model}"
    ev.append("rccl-tests printed no device names and no host name names the GPU: give --gpu")
    return None


def pcie_gen_of(gpu: str | None) -> int:
    """The PCIe generation a GPU model's host link has (catalog `pcie`), 4 when unknown."""
    try:
        return int(str(get_gpu(gpu).pcie).removeprefix("pcie")) if gpu else 4
    except (ConfigError, ValueError):
        return 4


def label(kw: dict, nics: int | None = None, nic: str | None = None) -> str:
    """'2 × DGX H100 over 8 × ib-ndr' for build_topology arguments (and the NICs it got)."""
    system = kw.get("system")
    node = LABEL.get(system, system) if system is not None else None
    g = kw.get("gpus_per_node")
    text = f"{kw.get('nodes', 1)} × {node}" + (f" ({g} GPU{'s' if g > 1 else ''} each)"
                                                if g else "")
    if kw.get("nodes", 1) > 1 and nic:
        text += f" over {nics} × {nic}" if nics else f" over {nic}"
    return text


def infer_system(log: NcclTestsLog) -> SystemGuess:
    """The machine of a log: ConfigError if it has neither device lines nor NCCL's rank counts."""
    info = log.info
    ev: list[str] = []
    names = tuple(n for n in log.gpu_names if n)
    gpu_name = names[0] if names else None
    if gpu_name is None and log.rccl:
        gpu_name = _amd_gpu_of_hosts(log.hosts, ev)
    if len(names) > 1:
        ev.append(f"mixed GPUs in the log: {', '.join(names)}; using {gpu_name}")
    gpu = gpu_of(gpu_name) if gpu_name else None
    if gpu_name:
        ev.append(f"GPU {gpu_name!r} -> {gpu or 'not in the catalog'}")
    nranks = log.nranks
    if not nranks:
        raise ConfigError("the log names no ranks: it has no '#  Rank N ... on HOST device D "
                          "[BUS] NAME' lines and no NCCL INFO 'nRanks' line")
    hosts = log.hosts
    if hosts:
        nodes = len(hosts)
        per_host = max(sum(1 for d in log.devices if d.host == h) for h in hosts)
        last = max(d.rank for d in log.devices) + 1
        if last > len(log.devices) and last % nodes == 0:  # device lines trimmed by hand
            nranks, per_host = last, last // nodes
            ev.append(f"device lines for {len(log.devices)} of {last} ranks (the rest cut): "
                      f"{per_host} per host")
        ev.append(f"{nranks} ranks on {nodes} host(s): {', '.join(hosts[:4])}"
                  + (" …" if nodes > 4 else ""))
    else:
        nodes = info.nnodes or 1
        per_host = info.local_ranks or -(-nranks // nodes)
        ev.append(f"NCCL: nRanks {nranks} nNodes {nodes} localRanks {per_host}")
    if info.nnodes and hosts and info.nnodes != nodes:
        ev.append(f"NCCL counts {info.nnodes} nodes, the device lines {nodes} hosts; "
                  f"using the hosts")
    system = PRESET_OF_GPU.get(gpu) if gpu is not None else None
    if system and gpu_name and re.search(r"PCIe", gpu_name, re.I):
        system = "pcie"  # a PCIe card of an NVLink GPU: a PCIe box, not its baseboard
    if system == "dgx-a100" and (info.provider == "cxi" or any(n.startswith("cxi")
                                                              for n in info.nics)):
        system = "polaris"  # A100 nodes on Slingshot: HPE's 4-GPU NVLink node
        ev.append("libfabric cxi provider: HPE Slingshot node (polaris preset)")
    elif system == "dgx-a100" and per_host == 4 and len(hosts) > 1 \
            and all(d.device < 4 for d in log.devices):
        system = "polaris"  # a 4-GPU A100 board joins its GPUs directly, no NVSwitch
        ev.append("4 A100 SXM per host on every host: a 4-GPU board, NVLink between every "
                  "pair and no NVSwitch (the polaris preset's node)")
    nic, nics, nic_note = _nic(log, gpu, per_host, ev) if nodes > 1 else (None, None, None)
    p2p = None
    if system == "pcie":
        if info.transports:
            p2p = "P2P" in info.transports or "SHM" not in info.transports
            ev.append(f"intra-node transports {sorted(info.transports)} -> P2P "
                      f"{'on' if p2p else 'off'}")
        else:
            p2p = gpu != "rtx4090"  # GeForce boards: the driver disables peer-to-peer
            ev.append(f"no transport lines; {gpu}: P2P {'on' if p2p else 'off'} by default")
    return SystemGuess(gpu, gpu_name, nranks, nodes, per_host, system, nic, nics, p2p, tuple(ev),
                       nic_note)


def _nic(log: NcclTestsLog, gpu, per_host, ev):
    """Catalog NIC, NICs per node and how the NIC's speed was read (None: a speed line or the
    GPU generation's) from NCCL's `NET/... : Using` line, port speeds, the channels' NET
    devices and the collective channel count; (None, None, None) keeps the preset's."""
    info = log.info
    names = " ".join(info.nics).lower()
    net = (info.net or "").lower()
    nic, nics, note = None, len(info.nics) or None, None
    if info.provider == "cxi" or "cxi" in names or any(k.startswith("FI_CXI_") for k in info.env):
        nic = "slingshot-200g"  # libfabric's cxi provider (its FI_CXI_* settings): Slingshot
    elif info.provider == "efa" or "efa" in names or "efa" in net or "rdmap" in names:
        nic = _EFA.get(gpu, "efa-100g")
    elif net.startswith("socket"):
        nic = "tcp-100g"
    elif info.nics:
        nic, nics, note = _ib_or_roce(info, gpu, per_host, ev)
    if nic and not nics and info.net_devices:  # a net plugin lists no NICs (aws-ofi-nccl on
        nics = len(info.net_devices)  # cxi or EFA): count the ones the channels use
        ev.append(f"channels use NET devices {sorted(info.net_devices)}: {nics} NIC(s)")
    if info.net or info.provider:
        ev.append(f"network: {info.net or info.provider}"
                  + (f", {nics} NIC(s) ({', '.join(info.nics[:4])})" if nics else "")
                  + (f" -> {nic}" if nic else " -> the preset's NICs"))
    else:
        ev.append("no NCCL INFO network lines: assuming the preset's NICs")
    return nic, nics, note


def _ib_or_roce(info, gpu, per_host, ev):
    """The data NICs of a `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_4:1/RoCE` line: the kind
    most ports are (a lone port of the other kind is a management or storage port), at the
    speed NCCL printed for them, else the speed NCCL's channel count implies
    (_speed_from_channels), else what the GPU's generation shipped with."""
    kinds = {d: ("roce" if d.lower().endswith("/roce") else "ib") for d in info.nics}
    count = {k: sum(1 for v in kinds.values() if v == k) for k in ("ib", "roce")}
    kind = max(count, key=lambda k: (count[k], k == "ib"))
    data = [d for d, k in kinds.items() if k == kind]
    other = [d for d, k in kinds.items() if k != kind]
    if other:
        minority = "/".join(sorted({kinds[o] for o in other}))
        ev.append(f"{', '.join(other)} not counted: {minority} beside {len(data)} {kind} "
                  "ports (a management or storage port)")
    speeds = {v for d, v in info.nic_speeds.items() if any(x.startswith(d + ":") or x == d
                                                           for x in data)}
    nic, note = None, None
    shipped = (_IB if kind == "ib" else _ROCE).get(gpu)
    if len(speeds) == 1:
        nic = _BY_SPEED[kind].get(speeds.pop())
    if nic is None and not info.nic_speeds:
        nic, note = _speed_from_channels(info, gpu, kind, len(data), per_host, shipped)
        if note:
            ev.append(note)
    if nic is None:
        nic = shipped or ("ib-hdr" if kind == "ib" else "roce-100g")
    return nic, len(data), note


# NCCL settings that change the channel count from what the search found (ncclMaxNchannels,
# ncclMinNchannels, the CTA limits of the communicator's config)
_CHANNEL_ENV = ("NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NRINGS", "NCCL_MIN_NRINGS",
                "NCCL_MAX_CTAS", "NCCL_MIN_CTAS")


def _speed_from_channels(info, gpu, kind, nics, per_host, default):
    """(catalog NIC, the line saying why) of the speed NCCL's collective channel count implies
    on a node whose log prints no port speed; (None, None) where the count is absent, was set
    by the environment or CollNet, agrees with `default`, or leaves no NIC of `kind`.
    NCCL's search gives one channel per NIC at the fastest speedArrayInter step no faster than
    the GPU->NIC path, ncclTopoDupChannels (search.cc) doubles them from 25 GB/s, and
    ncclTopoPostset (connect.cc) doubles the count again (simulate.nccl_tuning.coll_channels), so
    on 4 H100 NICs 16 channels mean 400G and 8 mean a NIC below 25 GB/s. Only as far as
    net_graph models the search: NCCL 2.18 or later, one NIC per GPU at most, and GPUDirect
    RDMA on (without it paths.cc routes the GPU->NIC path through the CPU: a slower path can
    hold the channels below 25 GB/s on a 400G NIC, as on MOC's 1-GPU RoCE nodes)."""
    printed = info.coll_channels or info.channels_total
    version = re.match(r"(\d+)\.(\d+)", info.version or "")
    if (not printed or default is None or gpu is None or not 0 < nics <= per_host
            or info.gdr is not True or info.collnet or any(k in info.env for k in _CHANNEL_ENV)
            or version is None or (int(version.group(1)), int(version.group(2))) < (2, 18)):
        return None, None
    g = get_gpu(gpu)
    if coll_channels(g, default, nics) == printed:
        return None, None
    rate = {name: get_link_tech(name).bandwidth_Bps for name in _BY_SPEED[kind].values()}
    fits = [name for name in rate if coll_channels(g, name, nics) == printed]
    if not fits:
        return None, None
    # of the speeds that give the count, the one nearest what the generation shipped with
    nic = min(fits, key=lambda n: abs(math.log(rate[n] / rate[default])))
    return nic, (f"NICs: {nics} × {nic} ({rate[nic] * 8 / 1e9:.0f}G), from NCCL's {printed} "
                 "collective channels (search.cc ncclTopoDupChannels)")
