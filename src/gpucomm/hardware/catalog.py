"""The hardware catalog: link technologies, GPUs and NVSwitch generations, with sources.

Numbers live in `gpucomm/data/hardware.yaml`; this module turns them into frozen values in SI
units (bytes/s per direction, seconds, bytes, FLOP/s).

    >>> get_link_tech("pcie5").bidirectional_Bps
    128000000000.0
    >>> get_link_tech("nvlink4").bidirectional_Bps / get_link_tech("pcie5").bidirectional_Bps
    7.03125
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ..errors import ConfigError

LINK_KINDS = ("pcie", "nvlink", "xgmi", "c2c", "ib", "roce", "efa", "ethernet", "slingshot", "cpu",
              "memory")
NIC_KINDS = ("ib", "roce", "efa", "ethernet", "slingshot")
# GPU-to-GPU fabrics: NVLink, and AMD's Infinity Fabric (xGMI) between MI300X GPUs
GPU_FABRIC_KINDS = ("nvlink", "xgmi")


@dataclass(frozen=True)
class LinkTech:
    """One link technology. `bandwidth_Bps` is nominal per direction: per GPU (all links) for
    NVLink, per x16 link for PCIe, per port for NICs, per socket pair for CPU links."""
    name: str
    kind: str
    bandwidth_Bps: float
    efficiency: float
    latency_s: float
    source: str
    links: int = 1                 # NVLink / xGMI: links per GPU; others 1
    unit_Bps: float = 0.0          # one link (NVLink) / one port; = bandwidth_Bps if not NVLink
    nccl_Bps: float | None = None  # what NCCL's topology model assumes (for comparison)
    # NICs: the latency NCCL's net plugin reports (ncclNetProperties_t.latency), which NCCL's
    # tuning adds to every step across nodes when it chooses (simulate/nccl_tuning.py)
    plugin_latency_s: float = 0.0
    # NICs: the least software latency of one network step on this NIC generation, where it is
    # measured and above NCCL's (simulate/protocol.py net_stack_floor_s); 0 = the kind's
    stack_latency_s: float = 0.0

    @property
    def bidirectional_Bps(self) -> float:
        return 2.0 * self.bandwidth_Bps

    @property
    def achievable_Bps(self) -> float:
        return self.bandwidth_Bps * self.efficiency

    @property
    def is_nic(self) -> bool:
        return self.kind in NIC_KINDS

    @property
    def is_gpu_fabric(self) -> bool:
        return self.kind in GPU_FABRIC_KINDS


@dataclass(frozen=True)
class GPU:
    name: str
    hbm_bandwidth_Bps: float
    hbm_bytes: int
    bf16_flops: float              # dense
    fp16_flops: float              # dense
    nvlink: str | None             # GPU-to-GPU link tech (NVLink, or xGMI on MI300X); None without
    nvlink_links: int
    pcie: str                      # link tech name
    sm: str                        # SM architecture (sm90, ...), or the AMD target (gfx942)
    source: str
    fp8_flops: float = 0.0         # dense; 0 where the GPU has no fp8 tensor cores
    peer_to_peer: bool = True      # the driver grants peer access between two of them


@dataclass(frozen=True)
class NVSwitch:
    name: str
    generation: int
    nvlink: str
    ports: int
    reduces_in_switch: bool        # NVLink SHARP (NVLS): the switch reduces data in flight
    source: str


def _fail(what, name, allowed):
    raise ConfigError(f"unknown {what} {name!r}; allowed: {', '.join(allowed)}")


def _num(entry, key, where):
    v = entry.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise ConfigError(f"hardware catalog: {where}: {key} must be a non-negative number, "
                          f"got {v!r}")
    return float(v)


def _link(name, e) -> LinkTech:
    where = f"link {name}"
    if e.get("kind") not in LINK_KINDS:
        raise ConfigError(f"hardware catalog: {where}: kind {e.get('kind')!r} not one of "
                          f"{', '.join(LINK_KINDS)}")
    if "bandwidth_GBps" in e:
        bw = _num(e, "bandwidth_GBps", where) * 1e9
    else:
        bw = _num(e, "bandwidth_Gbps", where) * 1e9 / 8
    links = int(e.get("links", 1))
    unit = _num(e, "per_link_GBps", where) * 1e9 if "per_link_GBps" in e else bw / links
    if abs(unit * links - bw) > 1e-6 * bw:
        raise ConfigError(f"hardware catalog: {where}: {links} links x {unit / 1e9} GB/s "
                          f"!= {bw / 1e9} GB/s")
    if not e.get("source"):
        raise ConfigError(f"hardware catalog: {where} has no source")
    nccl = _num(e, "nccl_GBps", where) * 1e9 if "nccl_GBps" in e else None
    nic = {}
    for key in ("plugin_latency_us", "stack_latency_us"):
        nic[key] = _num(e, key, where) * 1e-6 if key in e else 0.0
        if nic[key] and e["kind"] not in NIC_KINDS:
            raise ConfigError(f"hardware catalog: {where}: {key} is a NIC's property; kind "
                              f"{e['kind']!r} is not a NIC")
    return LinkTech(name, e["kind"], bw, _num(e, "efficiency", where),
                    _num(e, "latency_us", where) * 1e-6, e["source"], links, unit, nccl,
                    nic["plugin_latency_us"], nic["stack_latency_us"])


def _gpu(name, e) -> GPU:
    where = f"gpu {name}"
    if not e.get("source"):
        raise ConfigError(f"hardware catalog: {where} has no source")
    p2p = e.get("peer_to_peer", True)
    if not isinstance(p2p, bool):
        raise ConfigError(f"hardware catalog: {where}: peer_to_peer {p2p!r} must be true or "
                          "false")
    return GPU(name, _num(e, "hbm_bandwidth_GBps", where) * 1e9,
               int(_num(e, "hbm_GB", where) * 1e9), _num(e, "bf16_tflops", where) * 1e12,
               _num(e, "fp16_tflops", where) * 1e12, e.get("nvlink"),
               int(e.get("nvlink_links", 0)), e["pcie"], e["sm"], e["source"],
               _num(e, "fp8_tflops", where) * 1e12 if "fp8_tflops" in e else 0.0, p2p)


CACHE_ENV = "GPUCOMM_CACHE_DIR"   # where parsed data files are kept; "off": nowhere


def _cache_dir() -> Path | None:
    where = os.environ.get(CACHE_ENV)
    if where == "off":
        return None
    if where:
        return Path(where)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpucomm"


def load_packaged_yaml(relpath: str):
    """One of gpucomm's own data files (`relpath` under gpucomm/), parsed. The parsed value is
    kept as JSON in the user's cache folder (GPUCOMM_CACHE_DIR, else ~/.cache/gpucomm), keyed
    by a digest of the file's bytes, so that a command's start-up reads JSON instead of
    importing and running a YAML parser; a cache that cannot be read or written is skipped."""
    raw = resources.files("gpucomm").joinpath(relpath).read_bytes()
    key = hashlib.sha256(raw).hexdigest()
    folder = _cache_dir()
    cached = folder / (relpath.replace("/", "__") + ".json") if folder else None
    if cached is not None:
        try:
            entry = json.loads(cached.read_text())
            if entry.get("key") == key:
                return entry["data"]
        except (OSError, ValueError, AttributeError, KeyError):
            pass
    data = _parse_yaml(raw.decode("utf-8"))
    if cached is not None and json.loads(json.dumps(data)) == data:   # JSON keeps it exact
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"key": key, "data": data}))
            os.replace(tmp, cached)
        except OSError:
            pass
    return data


def _parse_yaml(text: str):
    """libyaml's C parser where PyYAML has it (about ten times faster than the pure-Python
    one, the same values), else the safe loader."""
    import yaml
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@lru_cache(maxsize=1)
def catalog() -> dict:
    """{"links": {name: LinkTech}, "gpus": {name: GPU}, "nvswitches": {name: NVSwitch}}."""
    raw = load_packaged_yaml("data/hardware.yaml")
    links = {n: _link(n, e) for n, e in raw["links"].items()}
    gpus = {n: _gpu(n, e) for n, e in raw["gpus"].items()}
    switches = {n: NVSwitch(n, int(e["generation"]), e["nvlink"], int(e["ports"]),
                            bool(e["reduces_in_switch"]), e["source"])
                for n, e in raw["nvswitches"].items()}
    for g in gpus.values():   # the catalog must be self-consistent
        for tech in (g.nvlink, g.pcie):
            if tech is not None and tech not in links:
                raise ConfigError(f"hardware catalog: gpu {g.name} names unknown link {tech!r}")
    return {"links": links, "gpus": gpus, "nvswitches": switches}


def _norm(name) -> str:
    return str(name).strip().lower()


def _lookup(table: str, what: str, name):
    entries = catalog()[table]
    if _norm(name) not in entries:
        _fail(what, name, entries)
    return entries[_norm(name)]


def get_link_tech(name: str) -> LinkTech:
    """A link technology by name, e.g. "nvlink4", "pcie5", "ib-ndr", "roce-400g"; a NIC name
    with "*N" is N such ports fused into one (fused_nic)."""
    if "*" in str(name):
        return fused_nic(name)
    return _lookup("links", "link technology", name)


def fused_nic(name: str) -> LinkTech:
    """"NAME*N": N ports of NIC NAME fused into one virtual NIC of N times the bandwidth, as
    NCCL fuses the NICs that share a GPU's PCIe switch (graph/topo.cc, NIC fusion since 2.21:
    NCCL_NET_MERGE_LEVEL) and aws-ofi-nccl stripes one NCCL device over several EFA ports
    (multi-rail). Latency and efficiency are the port's."""
    base_name, _, count = _norm(name).partition("*")
    if not count.isdigit() or int(count) < 2:
        raise ConfigError(f"fused NIC {name!r}: write NAME*N with N >= 2 ports of NIC NAME")
    base = get_nic(base_name)
    n = int(count)
    return dataclasses.replace(
        base, name=f"{base.name}*{n}", bandwidth_Bps=base.bandwidth_Bps * n, links=n,
        unit_Bps=base.bandwidth_Bps,
        nccl_Bps=None if base.nccl_Bps is None else base.nccl_Bps * n,
        source=f"{base.source}; {n} ports fused into one virtual NIC (NCCL NIC fusion)")


def get_gpu(name: str) -> GPU:
    return _lookup("gpus", "GPU", name)


def get_nvswitch(name: str) -> NVSwitch:
    return _lookup("nvswitches", "NVSwitch generation", name)


def get_nic(name: str) -> LinkTech:
    """A network port technology (ib-*, roce-*, efa-*, tcp-*, slingshot-*)."""
    names = nic_names()
    if "*" not in str(name) and _norm(name) not in names:
        _fail("NIC", name, names)
    return get_link_tech(name)  # a fused "NAME*N" checks NAME itself (fused_nic)


def link_techs() -> tuple[LinkTech, ...]:
    return tuple(catalog()["links"].values())


def gpus() -> tuple[GPU, ...]:
    return tuple(catalog()["gpus"].values())


def nvswitches() -> tuple[NVSwitch, ...]:
    return tuple(catalog()["nvswitches"].values())


def nic_names() -> tuple[str, ...]:
    return tuple(t.name for t in link_techs() if t.is_nic)
