"""`doctor`: is this nccl-tests log normal for its machine, and if not, what does the log show?

    >>> d = diagnose(parse_log(open("all_reduce.log").read()))   # doctest: +SKIP
    >>> d.verdict                                                 # doctest: +SKIP
    '8 GiB at 71% of expected for 2 × DGX H100 over 8 × ib-ndr: well below expected'

One request value in, one Diagnosis value out: the machine inferred from the log (or given),
the model's prediction for every row, a verdict on the largest size, and the causes the log's
NCCL INFO lines point at.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ..collectives import get_collective
from ..dtypes import format_size
from ..errors import ConfigError
from ..hardware import get_nic
from ..simulate import nccl, nccl_tuning, predict
from ..simulate.p2p import P2P_COLLECTIVES
from ..simulate.versions import parse_version
from ..topology import Topology, build_topology
from ..limits import MAX_SWEEP_POINTS
from .columns import infer_collective
from .nccltests import NcclTestsLog, collective_of_test
from .system import PRESET_GPU, PRESET_OF_GPU, SystemGuess, infer_system, label

# nccl-tests' type names -> gpucomm dtypes
DTYPES = {"float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16",
          "int": "int32", "int32": "int32", "int8": "int8", "uint8": "uint8", "int64": "int64",
          "uint32": "uint32", "uint64": "uint64", "float16": "float16", "float32": "float32",
          "float64": "float64"}
# NCCL_ALGO names -> gpucomm names, first one registered wins (names changed once already)
# NCCL's ring channels on NVSwitch systems (2 per NVLink-switch plane; 24-32 on H100); fewer
# in a log means a cap was set (the model's own figure, simulate/predict.py CHANNELS)
NVSWITCH_CHANNELS = 16
NORMAL, LOW, VERY_LOW, HIGH = 0.85, 0.7, 0.5, 1.2
MID_LO, MID_HI = 64 << 10, 4 << 20  # the sizes a transport's per-message path decides
PATH_PXB = 4  # NCCL graph/topo.h; graph/paths.cc ncclTopoCheckGdr: netGdrLevel = PATH_PXB


@dataclass(frozen=True)
class DoctorRequest:
    """What to diagnose: a parsed log, and what the user overrides of the inferred machine."""
    log: NcclTestsLog
    name: str = "log"
    collective: str | None = None  # when the log does not say
    system: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    nic: str | None = None
    nics_per_node: int | None = None
    gpu: str | None = None  # catalog GPU model, overriding the log's device names
    model: str = "analytic"
    algorithm: str | None = None  # None: what the log's NCCL_ALGO says, else auto
    protocol: str | None = None
    select: str = "nccl"  # how auto chooses (predict's select): NCCL's model, or fastest
    topology: Topology | None = None  # a Topology to use as it is (sim --compare --topology FILE)
    profile: Any = None  # a topology.profile.Profile: the fitted parameters applied
    gpus_per_thread: int | None = None  # override the log's nGpus (nccl-tests -g)
    cuda_graph: bool | None = None  # override the log's graph: (nccl-tests -G)
    nccl_version: str | None = None  # the NCCL the log ran, overriding its INFO lines

    def __post_init__(self) -> None:
        # a version given is the user's, so it must be one gpucomm models: no silent fallback
        # to the log's (ConfigError naming what is allowed)
        if self.nccl_version is not None:
            parse_version(self.nccl_version, strict=True)


@dataclass(frozen=True)
class Diagnosis:
    name: str
    collective: str
    guess: SystemGuess
    system: dict  # build_topology arguments used
    label: str
    rows: list
    verdict: str
    ratio: float | None
    causes: tuple = ()
    notes: tuple = ()
    warnings: tuple = ()
    info: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        g = self.guess
        return {"log": self.name, "collective": self.collective, "nranks": g.nranks,
                "nodes": g.nodes, "gpus_per_node": g.gpus_per_node, "gpu": g.gpu,
                "gpu_name": g.gpu_name, "system": self.system, "label": self.label,
                "verdict": self.verdict, "ratio": self.ratio, "causes": list(self.causes),
                "notes": list(self.notes), "warnings": list(self.warnings),
                "evidence": list(g.evidence), "nccl": self.info, "rows": self.rows}


def diagnose(req: DoctorRequest) -> Diagnosis:
    log = req.log
    warnings: list[str] = []
    coll = get_collective(_collective(log, req, warnings))
    if log.collective and req.collective and get_collective(req.collective) != coll:
        warnings.append(f"--collective {req.collective} contradicts the log, which ran "
                        f"{log.test}; using {coll.name}")
    guess = _guess(log, req, warnings)
    if log.separate_runs > 1:
        warnings.append(f"the ranks restart at 0 in each of {log.separate_runs} processes: "
                        "each ran this test alone (a binary without MPI, or launched without "
                        "it), their rows interleaved: each is judged alone as a "
                        f"{guess.nranks}-rank test, its rows in the order they appear")
    if req.topology is not None:
        topo = _given_topology(req, guess)
        kw: dict[str, Any] = {"system": topo.name,
                              "nodes": len({topo.node_of(r) for r in range(topo.nranks)}),
                              "gpus_per_node": topo.gpus_per_node}
    else:
        kw = _system(guess, req, warnings)
        topo = build_topology(**kw)
    if req.profile is not None:
        topo = _profiled(topo, req.profile, kw, warnings)
        warnings.extend(_gdr_differs(req.profile, log.info.gdr))
        warnings.extend(_p2p_not_fitted(req.profile, coll.name, topo))
    if guess.nranks and topo.nranks != guess.nranks:
        warnings.append(f"the log has {guess.nranks} ranks, the modelled system {topo.nranks}")
    choice = _choice(log, coll, req, topo)
    launch = log.launch
    if req.gpus_per_thread is not None:
        launch["gpus_per_thread"] = req.gpus_per_thread
    if req.cuda_graph is not None:
        launch["cuda_graph"] = req.cuda_graph
    rows = []
    if len({r["size"] for r in log.rows}) > MAX_SWEEP_POINTS:
        raise ConfigError(f"{req.name}: {len({r['size'] for r in log.rows})} distinct sizes in "
                          f"one test, more than the {MAX_SWEEP_POINTS} an nccl-tests sweep can "
                          "print: split the file")
    for row in log.rows:
        if row.get("flag"):
            rows.append({**row, "predicted_time_us": None, "predicted_busbw": None,
                         "ratio": None, "algorithm": "-", "protocol": "-"})
            continue
        res = _predict(coll.name, row["size"], topo, DTYPES.get(row["type"], row["type"]),
                       req.model, row["redop"] if coll.reduces else "sum",
                       max(row["root"], 0) if coll.rooted else 0, _frozen({**launch, **choice}))
        out = dict(row)
        out.update(predicted_time_us=round(res.time_us, 3),
                   predicted_busbw=round(res.busbw_GBps, 3),
                   ratio=round(row["busbw"] / res.busbw_GBps, 4) if res.busbw_GBps > 0 else None,
                   algorithm=res.algorithm, protocol=res.protocol,
                   channels=res.timed.channels if res.timed else res.channels)
        rows.append(out)
    nics = _nics_of(topo)
    lab = label(kw, nics, kw.get("nic") or _nic_model(topo))
    flagged = [r for r in rows if r.get("flag")]
    if flagged:
        warnings.append(f"{len(flagged)} row(s) not judged: " + "; ".join(
            f"{r['size']} B: {r['flag']}" for r in flagged[:3]) + (" …" if len(flagged) > 3
                                                                    else ""))
    good = [r for r in rows if not r.get("flag")]
    verdict, ratio = _verdict(good, lab)
    corrupt = [r["size"] for r in good if _wrong(r)]
    if corrupt:  # a speed says nothing of results that are wrong: the verdict says so first
        sizes = _size(corrupt[0]) if len(corrupt) == 1 else \
            f"{_size(min(corrupt))} to {_size(max(corrupt))}"
        verdict = (f"results corrupt: {len(corrupt)} size(s) returned wrong values (#wrong, "
                   f"{sizes}); speed: {verdict}")
    ring = _ring_not_nvls(log, coll, topo, good, ratio, req, _frozen({**launch, **choice}))
    causes, notes = (_causes(log, coll, kw, topo, good, nics, ratio, req.nccl_version, ring)
                     if good else ([], []))
    if guess.nic_note and kw.get("nic") == guess.nic:  # no --nic, --topology or profile NIC
        notes = [guess.nic_note, *notes]
    info = {k: v for k, v in vars(log.info).items() if k != "warnings"}
    info["net_devices"] = sorted(info["net_devices"])
    return Diagnosis(req.name, coll.name, guess, kw, lab, rows, verdict, ratio, tuple(causes),
                     tuple(notes), tuple(warnings), info)


def _profiled(topo, profile, kw, warnings) -> Topology:
    """topo with the profile's fitted parameters; a warning when it was fitted elsewhere."""
    from ..topology.profile import apply_profile
    for key in ("system", "gpu", "nic"):
        fitted = profile.machine.get(key)
        if fitted is not None and kw.get(key) is not None and fitted != kw.get(key):
            warnings.append(f"the profile was fitted on {key}={fitted}, the log ran on "
                            f"{key}={kw[key]}")
    return apply_profile(topo, profile)


def _gdr_differs(profile, gdr) -> list:
    """A warning when the profile's NIC rate was fitted on logs whose network connections had
    GPUDirect RDMA the other way: NCCL decides it per GPU and NIC (graph/paths.cc
    ncclTopoCheckGdr: the path's distance, a PXN peer's when the GPU reaches the NIC through
    one), and a host-staged path and an RDMA path are different data paths."""
    fitted = {s.get("gdr") for s in profile.sources if s.get("gdr") is not None}
    if gdr is None or not fitted or gdr in fitted or "nic_efficiency" not in profile.parameters:
        return []
    on = {True: "on", False: "off"}
    return [f"the profile's NIC rate was fitted on logs with GPUDirect RDMA {on[not gdr]}; "
            f"this log's network connections have it {on[gdr]}: the fitted rate need not hold"]


def _p2p_not_fitted(profile, coll_name: str, topo) -> list:
    """A warning when a profile fitted on no point-to-point test times all-to-all or send/recv
    over HPE Slingshot, where the fitted NIC rate does not carry over to point-to-point.

    A ring moves Simple slices of up to 1 MiB to one peer per channel; NCCL's p2p moves
    NCCL_P2P_NET_CHUNKSIZE (128 KiB, init.cc) chunks to every remote peer at once, at most
    NCCL_SHARED_STEPS (16) of them in flight per channel (transport/net.cc sendProxyProgress
    maxDepth), each one fi_tsend of aws-ofi-nccl's SENDRECV protocol that the cxi provider
    matches and fetches by rendezvous. What that costs depends on the provider's settings
    (FI_CXI_RX_MATCH_MODE, FI_CXI_RDZV_PROTO, ...), which an all-reduce log does not show:
    on ALCF Sirius (alcf-nccl-tests bench_opt.sh setups 3-5, one node pair) all_reduce fits
    the same NIC rate, 0.71-0.73 of line rate, under each setting while the 1 GiB all-to-all
    took 72-131 ms against the 59-60 ms that rate gives."""
    if coll_name not in P2P_COLLECTIVES or "nic_efficiency" not in profile.parameters:
        return []
    fitted = set()
    for source in profile.sources:
        try:  # what calibrate read each log as; a profile written before that: its test name
            fitted.add(source.get("collective") or collective_of_test(str(source.get("test"))))
        except ConfigError:  # "unnamed", or a test that is no collective gpucomm models
            continue
    model = _nic_model(topo)
    if fitted & set(P2P_COLLECTIVES) or not model or get_nic(model).kind != "slingshot":
        return []
    return [f"the profile was fitted on {', '.join(sorted(fitted)) or 'unnamed tests'}, no "
            f"point-to-point test: over Slingshot {coll_name} moves 128 KiB chunks to every "
            "remote peer, whose cost depends on the cxi provider's matching and rendezvous "
            "settings, not on the fitted NIC rate (ALCF Sirius: the same all_reduce fit under "
            "three settings, all-to-all 1.2-2.1x slower than it predicts); calibrate on an "
            "alltoall_perf or sendrecv_perf log of this cluster"]


def _given_topology(req, guess) -> Topology:
    """req.topology as given, or a one-node file replicated to the log's nodes."""
    topo = req.topology
    nodes = req.nodes or guess.nodes
    if len({d.node for d in topo.devices}) == 1 and nodes > 1:
        opts = {k: v for k, v in (("gpus_per_node", req.gpus_per_node),
                                  ("nic", req.nic or guess.nic),
                                  ("nics_per_node", req.nics_per_node or guess.nics_per_node))
                if v is not None}
        return build_topology(nodes=nodes, node_topology=topo, **opts)
    return topo


def _collective(log, req, warnings) -> str:
    """The log's collective: its test name, else --collective, else its columns, command line
    and file name (interop.columns); ConfigError only when they leave several."""
    if log.collective or req.collective:
        return log.collective or req.collective
    inf = infer_collective(log, " ".join(filter(None, (log.command, req.name))))
    if inf.collective is None:
        raise ConfigError(f"{req.name}: the log does not name its test and its columns "
                          f"({inf.evidence or 'none readable'}) allow "
                          f"{' or '.join(inf.candidates) or 'no collective'}: give --collective")
    warnings.append(f"no test name in the log: {inf.collective} from {inf.evidence}")
    return inf.collective


def _frozen(d: dict) -> tuple:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in d.items()))


@lru_cache(maxsize=4096)
def _predict(coll, size, topo, dtype, model, redop, root, options):
    """predict(), remembered: several logs of one machine share their sizes."""
    kw: dict[str, Any] = {k: list(v) if isinstance(v, tuple) else v for k, v in options}
    return predict(coll, size, topo, dtype=dtype, model=model, redop=redop, root=root, **kw)


def _guess(log, req, warnings) -> SystemGuess:
    try:
        return infer_system(log)
    except ConfigError:
        if req.system is None:
            raise
        n = req.nodes or 1
        warnings.append("the log names no ranks or GPUs: using the system given")
        return SystemGuess(None, None, 0, n, req.gpus_per_node or 0, req.system)


def _system(g: SystemGuess, req, warnings) -> dict:
    """build_topology arguments: the inferred ones, each override replacing only what it names,
    with a warning wherever it contradicts the log."""
    gpu = g.gpu
    if req.gpu is not None:
        if g.gpu and req.gpu != g.gpu:
            warnings.append(f"--gpu {req.gpu} contradicts the log: its GPUs are {g.gpu_name}")
        gpu = req.gpu
    system = req.system or (PRESET_OF_GPU.get(gpu or "") if req.gpu else g.system)
    if system is None:
        raise ConfigError(f"no preset for GPU {g.gpu_name or 'unknown'!r}: give --system "
                          "(a preset name) or --gpu (a catalog GPU) to say which machine the "
                          "log ran on")
    if req.system is not None and g.system is not None and req.system != g.system:
        warnings.append(f"--system {req.system} contradicts the log: its GPUs are "
                        f"{g.gpu_name} ({g.gpu} -> {g.system})")
    guess = dataclasses.replace(g, system=system, gpu=gpu)
    kw = guess.build_kwargs()
    if system != "pcie" and req.gpu is not None and gpu != PRESET_GPU.get(system):
        kw["gpu"] = gpu
    for key, given, seen in (("nodes", req.nodes, g.nodes),
                             ("gpus_per_node", req.gpus_per_node, g.gpus_per_node)):
        if given is not None:
            if seen and given != seen:
                warnings.append(f"--{key.replace('_', '-')} {given} contradicts the log "
                                f"({seen})")
            kw[key] = given
    if req.nic is not None:
        if g.nic and req.nic != g.nic:
            warnings.append(f"--nic {req.nic} contradicts the log's network ({g.nic}"
                            + (", from NCCL's channel count)" if g.nic_note else ")"))
        kw["nic"] = req.nic
    if req.nics_per_node is not None:
        if g.nics_per_node and req.nics_per_node != g.nics_per_node:
            warnings.append(f"--nics-per-node {req.nics_per_node} contradicts the log "
                            f"({g.nics_per_node} NICs listed by NCCL)")
        kw["nics_per_node"] = req.nics_per_node
    if kw.get("nodes", 1) <= 1:
        kw.pop("nic", None)
        kw.pop("nics_per_node", None)
    return {k: v for k, v in kw.items() if v is not None}


def _choice(log, coll, req, topo) -> dict:
    """predict()'s algorithm/protocol arguments: the user's, else what the log's NCCL was told."""
    env = log.info.env
    out = {}
    if req.algorithm:
        out["algorithm"] = req.algorithm
    elif env.get("NCCL_ALGO") and "," not in env["NCCL_ALGO"] and "^" not in env["NCCL_ALGO"] \
            and coll.name not in nccl.P2P_COLLECTIVES:  # NCCL_ALGO rules collectives, not p2p
        try:  # as NCCL, an algorithm that cannot serve this collective here is not forced
            name = nccl.from_nccl_algo(env["NCCL_ALGO"])
            if name != "ring":
                nccl.check(name, coll, topo, range(topo.nranks))
            out["algorithm"] = name
        except ConfigError:
            pass
    if "algorithm" not in out and (env.get("NCCL_NVLS_ENABLE") == "0" or log.info.nvls is False
                                   or (log.info.nvls_channels == 0
                                       and log.info.coll_channels is not None)):
        out["exclude"] = ["nvls"]  # what the log says NCCL could not use is not predicted
    version = parse_version(req.nccl_version or log.nccl_version)  # the NCCL the log ran
    if version is not None:
        out["nccl_version"] = version
    out["select"] = req.select
    if req.protocol:
        out["protocol"] = req.protocol
    elif env.get("NCCL_PROTO") and "^" not in env["NCCL_PROTO"]:
        out["protocol"] = [p.strip().lower() for p in env["NCCL_PROTO"].split(",")]
    return out


def _full_nvswitch_node(kw, topo) -> bool:
    """Whether the log's nodes surely have NVSwitch: a switched preset with all its GPUs in
    use (4-GPU H100 boards join their GPUs directly; a part of a node says nothing)."""
    if not any(d.kind == "nvswitch" for d in topo.devices) or "gpus_per_node" not in kw:
        return False
    try:
        full = build_topology(kw["system"]).nranks
    except ConfigError:
        return False
    return kw["gpus_per_node"] == full


def _has_nvls(log, given: str | None = None) -> bool:
    """Whether the NCCL the log ran (`given` by the user, else its INFO or banner lines) has
    NVLS at all (2.17 and later; unknown: assume so)."""
    version = parse_version(given or log.nccl_version)
    return version is None or version >= (2, 17)


def _nics_of(topo) -> int:
    return sum(1 for d in topo.devices if d.kind == "nic" and d.node == 0)


def _nic_model(topo):
    return next((d.model for d in topo.devices if d.kind == "nic"), None)


def _verdict(rows, lab):
    if not rows:
        return "no row to judge: every row has nan, inf, negative values or a size beyond " \
               "the limit", None
    big = max(rows, key=lambda r: r["size"])
    ratio = big["ratio"]
    if ratio is None:
        return f"{format_size(big['size'])}: no prediction to compare with", None
    if ratio >= HIGH:
        judged = "above expected: the model is pessimistic for this machine, or the log's " \
                 "machine is not the one modelled"
    elif ratio >= NORMAL:
        judged = "normal for this machine"
    elif ratio >= LOW:
        judged = "below expected"
    elif ratio >= VERY_LOW:
        judged = "well below expected"
    else:
        judged = "far below expected: something is misconfigured"
    return (f"{_size(big['size'])} at {100 * ratio:.0f}% of expected for {lab}: {judged}",
            ratio)


def _size(n: int) -> str:
    for unit, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult:
            v = n / mult
            return f"{v:.0f} {unit}" if abs(v - round(v)) < 0.005 else f"{v:.1f} {unit}"
    return f"{n} B"


def _transport_causes(info, kw, nics, multi) -> list:
    """What the log's transports say: SHM instead of P2P, TCP instead of RDMA, no GDR, NICs
    unused."""
    out = []
    pcie_no_p2p = kw.get("system") == "pcie" and not kw.get("p2p", True)
    if "SHM" in info.transports and not pcie_no_p2p:
        out.append(f"P2P off: {info.transports['SHM']} intra-node connection(s) use the SHM "
                   "transport through host memory instead of NVLink/PCIe peer-to-peer "
                   "(NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, IOMMU/ACS, containers without IPC)")
    if multi and (info.net or "").lower().startswith("socket"):
        out.append("NCCL fell back to TCP sockets (NET/Socket): no RDMA NIC was usable "
                   "(NET/IB found no device, NCCL_IB_DISABLE=1, a missing net plugin or "
                   "libibverbs, or NCCL_NET=Socket); modelled over the Ethernet ports")
    if multi and info.gdr is False:
        out.append("GPUDirect RDMA off: network connections lack /GDRDMA, so NIC traffic is "
                   "staged through host memory (nvidia-peermem loaded? NCCL_NET_GDR_LEVEL?)")
    if multi and info.gdr_distance is not None and info.gdr_distance > PATH_PXB:
        out.append(f"GPUDirect RDMA through the CPU (NCCL path distance {info.gdr_distance} > "
                   f"{PATH_PXB}, PXB): NCCL enables it only up to PXB unless NCCL_NET_GDR_LEVEL "
                   f"says more (here {info.env.get('NCCL_NET_GDR_LEVEL', 'not shown')}); the "
                   "NIC then reads and writes GPU memory through the root complex (compare a "
                   "run without NCCL_NET_GDR_LEVEL)")
    used = len(info.net_devices) or (len(info.nics) if info.nics else 0)
    if multi and used and nics and used < nics:
        out.append(f"{'one NIC' if used == 1 else f'{used} NICs'} in use of the {nics} per "
                   "node the system has (NCCL_IB_HCA, NIC/GPU affinity, a NIC down)")
    return out


def _cxi_queue_cause(info, rows, multi) -> list:
    """Slingshot (libfabric's cxi provider, its FI_CXI_* settings in the job's environment)
    with the provider's default queue sizes, and mid sizes well below the model. CSCS's NCCL
    guide (eth-cscs/cscs-docs, docs/software/communication/nccl.md) sets FI_CXI_DEFAULT_CQ_SIZE
    and FI_CXI_DEFAULT_TX_SIZE; on Alps the same job with them (boeschf/nccl-benchmark-on-
    alps-2025, results/FI_CXI_DEFAULT_CQ_SIZE_131072_..._NCCL_WORK_FIFO_DEPTH_4194304_...) ran
    all_reduce at 512 KiB-1 MiB 2.6-3.2x faster, and from 2 MiB on as fast as without."""
    if not multi or "FI_CXI_DEFAULT_CQ_SIZE" in info.env \
            or not any(k.startswith("FI_CXI_") for k in info.env):
        return []
    mid = [r["ratio"] for r in rows if r.get("ratio") and MID_LO <= r["size"] < MID_HI]
    if not mid or statistics.median(mid) >= LOW:
        return []
    return [f"mid sizes at {100 * statistics.median(mid):.0f}% of expected on Slingshot with "
            "libfabric's default cxi queues: FI_CXI_DEFAULT_CQ_SIZE is not set (CSCS sets "
            "FI_CXI_DEFAULT_CQ_SIZE=131072 and FI_CXI_DEFAULT_TX_SIZE for NCCL)"]


def _setting_notes(info) -> list:
    """NCCL settings from the environment and the plugins in use."""
    out = [f"{key}={info.env[key]} set in the environment"
           for key in ("NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE",
                       "NCCL_NET_GDR_LEVEL", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS")
           if key in info.env]
    for kind, plugin in (("tuner", info.tuner_plugin), ("net", info.net_plugin)):
        if plugin and plugin != "internal":
            out.append(f"{kind} plugin in use: {plugin}" + (
                ": it chooses algorithms and protocols, not NCCL's own model"
                if kind == "tuner" else ""))
    return out


def _ring_not_nvls(log, coll, topo, rows, ratio, req, options) -> tuple:
    """A cause where the model ran NVLS at the largest size, the log does not say whether
    NCCL had it, and the busbw is what NCCL's ring gives there instead: NVLS likely not used
    (Together's H100 runs with NCCL_ALGO=RING: 75% of NVLS's prediction, 100% of ring's)."""
    if not rows or ratio is None or ratio >= NORMAL or req.algorithm or log.info.nvls is not None:
        return ()
    big = max(rows, key=lambda r: r["size"])
    if big.get("algorithm") not in ("nvls", "nvls_tree"):
        return ()
    opts = dict(options)
    opts.update(algorithm="ring", exclude=None)
    res = _predict(coll.name, big["size"], topo, DTYPES.get(big["type"], big["type"]), req.model,
                   big["redop"] if coll.reduces else "sum", 0,
                   _frozen({k: v for k, v in opts.items() if v is not None}))
    near = big["busbw"] / res.busbw_GBps if res.busbw_GBps > 0 else 0.0
    if not NORMAL <= near <= HIGH:
        return ()
    return (f"busbw is what NCCL's ring gives here ({near:.0%} of ring's "
            f"{res.busbw_GBps:.0f} GB/s), not what NVLS gives: NVLS was likely not used "
            "(NCCL_ALGO without NVLS, "
            "NCCL_NVLS_ENABLE=0, or no multicast support: driver, fabric manager or IMEX); "
            "NCCL_DEBUG=INFO says which",)


def _wrong(row) -> int:
    """The row's #wrong values, both halves (a half without a count, "N/A", adds none)."""
    return sum(v for k in ("wrong", "ip_wrong") if isinstance(v := row.get(k), int))


def _causes(log, coll, kw, topo, rows, nics, ratio, version=None, extra=()):
    info, causes, notes = log.info, list(extra), []
    wrong = sum(_wrong(r) for r in rows)
    if wrong or (log.wrong_total or 0) > 0:
        causes.append(f"{wrong or log.wrong_total} wrong values (#wrong): the results are "
                      "corrupt; check the GPUs and links before the speed")
    multi = kw.get("nodes", 1) > 1
    causes += _transport_causes(info, kw, nics, multi) + _cxi_queue_cause(info, rows, multi)
    full_node = _full_nvswitch_node(kw, topo)
    nvls_capable = full_node and coll.name == "all_reduce" and _has_nvls(log, version)
    nvls_off = info.env.get("NCCL_NVLS_ENABLE") == "0" or info.nvls is False \
        or (info.nvls_channels == 0 and info.coll_channels is not None)
    if nvls_capable and nvls_off:
        causes.append("NVLS off: this NVSwitch system can reduce in the switch, but NCCL did "
                      "not use it (NCCL_NVLS_ENABLE=0, no multicast support: driver, fabric "
                      "manager or IMEX)")
    big = max(rows, key=lambda r: r["size"])
    # across nodes NCCL's search sizes the channels to the NICs (2 per NIC on a 4-NIC DGX
    # A100, aws-p4d's `8 coll channels`): expect what the model runs there
    want = (nccl_tuning.topology_coll_channels(topo) if multi else NVSWITCH_CHANNELS) \
        if full_node else None
    if info.coll_channels and want and info.coll_channels < want:
        where = f"{nics} NIC(s) a node give {want}" if multi else \
            f"NVSwitch systems get {want} or more"
        causes.append(f"fewer channels than expected: NCCL ran {info.coll_channels}, {where} "
                      "(NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS, NCCL_MIN_CTAS, "
                      "NCCL_NCHANNELS_PER_NET_PEER)")
    notes += _setting_notes(info)
    for w in info.warnings[:3]:
        causes.append(f"NCCL warned: {w}")
    if not info.present:
        notes.append("no NCCL_DEBUG=INFO lines: rerun with NCCL_DEBUG=INFO so doctor can see "
                     "transports, channels, NICs and NVLS")
    if multi:
        try:
            nic_bw = get_nic(kw.get("nic") or _nic_model(topo)).bandwidth_Bps / 1e9
        except ConfigError:
            nic_bw = None
        if nic_bw and big["busbw"] > nic_bw * max(nics, 1) / max(kw.get("gpus_per_node", 1), 1):
            notes.append(f"busbw {big['busbw']:.1f} GB/s is above the {nic_bw:.0f} GB/s of "
                         "network per GPU: busbw counts every byte as if it crossed the slowest "
                         "link, but in-node hops (NVLink) and in-network reduction carry part "
                         "of the traffic, so it can exceed a NIC's speed")
    if ratio is not None and ratio < LOW and not causes:
        rerun = "" if info.present else \
            "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,NET and "
        causes.append(f"nothing in the log explains it; {rerun}check link health (ibstat, "
                      "nvidia-smi nvlink -s) and clocks")
    return causes, notes
