"""predict(): build the schedule(s) for a collective and time them; `auto` picks like NCCL.

NCCL's tuner takes the argmin of predicted time over every (algorithm, protocol) pair it may
use; `predict(algorithm="auto", protocol="auto")` does the same over NCCL's algorithms for the
collective and placement (nccl.candidates: ring, tree, nvls / nvls_tree where the NVSwitch
reduces, pat, grouped point-to-point), and reports the pair it chose (`reason`, and every
candidate's time in `candidates`). Any registered schedule can still be asked for by name.
The argmin is of gpucomm's own times; `select="nccl"` takes instead the pair NCCL's own
estimate ranks first (nccl_tuning.py), which is what NCCL runs where the two disagree.

Channels: NCCL runs `CHANNELS` channels; the schedule gets one channel per NIC rail of its GPUs
(the NICs next to them, paths.py; so the channels spread over those NICs) and each stands for
the rest (`lanes`), which scales the protocol's per-channel caps.

Host: nccl-tests launches collectives back to back, so a collective looks no faster than the
host issues it: `gpus_per_thread` launches per collective (nccl-tests `-g`), none with CUDA
graphs (`-G`); see constants.HOST_LAUNCH_S.

    >>> from gpucomm.topology import build_topology
    >>> predict("all_reduce", "8", build_topology("dgx-h100")).protocol
    'll'
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..algorithms import algorithms, get_algorithm
from ..collectives import Collective, get_collective, layout
from ..dtypes import FP8, DTypeLike, get_dtype, parse_size
from ..errors import ConfigError, GpucommError
from ..hardware import get_link_tech
from . import constants as K
from .caches import PLACEMENTS_KEPT, per_placement, topology_memo
from .core import SizeSweep, _placement, path_table, simulate
from .protocol import (PROTOCOLS, Protocol, chain_pipeline_bytes, generation_of, get_protocol,
                       ring_protocol, with_net_sync)
from . import nccl, nccl_tuning, p2p, ranking, shm, versions
from ..topology.elements import DEVICE_KINDS
from .paths import NVLINK, PathTable, check_step_ops
from .result import SimResult
from .rings import ring_orders
from .timed import Timed

if TYPE_CHECKING:
    from ..topology import Topology

ProtocolChoice = str | Collection[str]  # "auto", one name, or the names auto may pick
Ranks = npt.NDArray[np.int64]  # schedule rank i runs on topology rank placement[i]

CHANNELS = 16  # NCCL's ring channel count on NVSwitch systems (2 rings per NVLink-switch plane)
MAX_PIPELINE_CHUNKS = 64
MAX_CHAIN_CHUNKS = 256  # a broadcast/reduce chain's chunks per channel (2 GiB of Simple on 16)
SELECTIONS = ("fastest", "nccl")  # how auto chooses: gpucomm's timing, or NCCL's tuning model
P2P_COLLECTIVES = ("sendrecv", "all_to_all")  # NCCL runs them as grouped send/recv


def predict(collective: Collective | str, nbytes: int | str, topology: Topology, *,
            algorithm: str = "auto", dtype: DTypeLike = "float32", model: str = "analytic",
            protocol: ProtocolChoice = "auto", ranks: Iterable[int] | None = None,
            root: int = 0, redop: str = "sum", exclude: Iterable[str] = (),
            gpus_per_thread: int = 1, cuda_graph: bool = False, also: Iterable[str] = (),
            nccl_version: str | Sequence[int] | None = None, sweep: SizeSweep | None = None,
            select: str = "fastest", **params: Any) -> SimResult:
    """Predict one nccl-tests point: the time of `collective` on `nbytes` (size S).

    `algorithm`: "auto", an NCCL algorithm (ring, tree, nvls, nvls_tree, pat, ...) or a
    registered schedule. `exclude`: algorithms auto may not pick (like NCCL_ALGO=^NVLS).
    `also`: registered schedules auto may pick besides NCCL's (e.g. the one-shot/two-shot
    all-reduce kernels serving frameworks run for small TP messages). `protocol`: "auto", one
    name, or a list of the protocols auto may pick (like NCCL_PROTO=LL,Simple). `model` is used
    for the final answer; auto ranks candidates with the analytic model, as NCCL's tuner ranks
    them with its own cheap model.
    `gpus_per_thread` (nccl-tests `-g`) and `cuda_graph` (`-G`): how the host issues the
    collective; the time is at least the host's issue time (`host_issue_s`).
    `nccl_version` ("2.18", "2.18.5-1", (2, 18); None: the newest): the NCCL whose constants
    and algorithms the model takes (versions.py). `sweep`: the sizes this call is one of
    (core.SizeSweep), timed together by the analytic model. `select`: how auto chooses among
    the candidates: "fastest" (by gpucomm's own timing) or "nccl" (the pair NCCL's tuning model
    ranks fastest, nccl_tuning.py, as NCCL runs it; timed by gpucomm's model).

        >>> from gpucomm.topology import build_topology
        >>> t = build_topology("dgx-a100")
        >>> predict("all_reduce", 8, t, gpus_per_thread=8).time_us >= 40
        True
    """
    version = versions.parse_version(nccl_version, strict=True)
    if select not in SELECTIONS:
        raise ConfigError(f"select {select!r} not allowed: choose from {', '.join(SELECTIONS)}")
    # tuning.cc's constants describe NCCL's collectives, not its p2p: p2p takes only the
    # version's channel rules (versions.py RULE_SINCE)
    with versions.use(version, constants=get_collective(collective).name not in P2P_COLLECTIVES):
        return _predict(collective, nbytes, topology, algorithm, dtype, model, protocol, ranks,
                        root, redop, exclude, gpus_per_thread, cuda_graph, also, params, sweep,
                        select)


def _predict(collective: Collective | str, nbytes: int | str, topology: Topology, algorithm: str,
             dtype: DTypeLike, model: str, protocol: ProtocolChoice, ranks: Iterable[int] | None,
             root: int, redop: str, exclude: Iterable[str], gpus_per_thread: int,
             cuda_graph: bool, also: Iterable[str], params: dict[str, Any],
             sweep: SizeSweep | None, select: str = "fastest") -> SimResult:
    coll = get_collective(collective)
    size = parse_size(nbytes)
    host_s = host_issue_s(gpus_per_thread, cuda_graph)
    p = len(list(ranks)) if ranks is not None else topology.nranks
    placement: Ranks = _placement(p, topology, ranks)
    if size == 0 and p > 1 and coll.name not in P2P_COLLECTIVES:
        return _empty(coll, topology, placement, dtype, model, redop, host_s)
    names = _candidates(coll, algorithm, topology, placement, exclude)
    if algorithm == "auto":
        for extra in also:
            get_algorithm(coll, extra)  # raises with the allowed names
            names += [extra] if extra not in names else []
    if isinstance(protocol, (list, tuple, set, frozenset)):
        protos = [str(x).lower() for x in protocol]  # the protocols auto may use
        if not protos:
            raise ConfigError(f"no protocol allowed: choose from {', '.join(PROTOCOLS)}")
    elif str(protocol).lower() == "auto":
        protos = list(PROTOCOLS)
    else:
        protos = [str(protocol).lower()]
    for pr in protos:
        get_protocol(pr)  # validates the name
    if generation_of(topology) not in versions.value("LL128_GENERATIONS") or \
            not _ll128_allowed_memo(topology, placement):
        protos = [pr for pr in protos if pr != "ll128"] or protos
    tried, errors, skipped = _rank(coll, names, protos, size, topology, placement, dtype, root,
                                   redop, params, sweep)
    if not tried:
        detail = "; ".join(errors) or "none applies"
        raise ConfigError(f"no algorithm can run {coll.name} on {p} ranks ({detail})")
    best = _select(select, tried, skipped, lambda name, pr: _time(
        coll, name, size, topology, placement, dtype, "analytic", pr, root, redop, params, sweep),
        coll, size, topology, placement, dtype)
    if model != "analytic":
        timed = _time(coll, best.algorithm, size, topology, placement, dtype, model,
                      best.protocol, root, redop, params, sweep)
        # the analytic pass timed this pair: closed forms and the p2p limit refuse a pair by
        # protocol and size, never by model
        assert timed is not None
        best = timed
    best = _host_bound(_call_sync(best, topology, coll, dtype), host_s, coll, dtype)
    if skipped:
        best = dataclasses.replace(best, note="; ".join(filter(None, [best.note, (
            f"auto: {', '.join(f'{a}/{b}' for a, b in skipped)} not simulated (their latency "
            "floor is above the runner-up)")])))
    return dataclasses.replace(best, candidates=tuple((r.algorithm, r.protocol, r.time_s)
                                                      for r in tried))


def _rank(coll: Collective, names: list[str], protos: list[str], nbytes: int, topology: Topology,
          placement: Ranks, dtype: DTypeLike, root: int, redop: str, params: dict[str, Any],
          sweep: SizeSweep | None) -> tuple[list[SimResult], list[str], list[ranking.Pair]]:
    """auto's candidates: closed forms first, a simulation only where it can win (ranking.py).
    Returns (results, error lines, pairs not simulated)."""
    p = len(placement)

    def time_fn(name: str, pr: str) -> SimResult | None:
        return _time(coll, name, nbytes, topology, placement, dtype, "analytic", pr, root,
                     redop, params, sweep)

    def floor_fn(name: str, pr: str) -> float | None:
        if len(names) * len(protos) < 3 or nccl.schedule_of(coll.name, name) != "ring":
            return None
        return ranking.ring_floor(coll.name, p, pr)

    tried, errors, skipped = ranking.rank([(n, pr) for n in names for pr in protos], time_fn,
                                          floor_fn)
    return tried, [f"{name}: {e}" for name, e in errors], skipped


def _select(select: str, tried: list[SimResult], skipped: list[ranking.Pair],
            time_fn: Callable[[str, str], SimResult | None], coll: Collective, nbytes: int,
            topology: Topology, placement: Ranks, dtype: DTypeLike) -> SimResult:
    """The candidate auto runs: the fastest by gpucomm's timing, or (select "nccl") the pair
    NCCL's tuning model ranks first among those gpucomm may run, on NCCL's channel counts
    (CHANNELS for its ring graph, the NVLS graph's heads for NVLS and NVLSTree), timed now if
    the ranking skipped it (`time_fn`: analytic; `tried` gains it); a candidate NCCL's model
    does not cover (a registered schedule asked for with `also`) is taken only if gpucomm
    times it faster than NCCL's pick."""
    p = len(placement)
    fp8 = get_dtype(dtype).name in FP8
    penalty = nccl_tuning.fp8_ring_penalty
    fastest = min(tried, key=lambda r: r.time_s * penalty(r.algorithm, fp8, p))
    if select == "fastest":
        return fastest
    timed = {(r.algorithm, r.protocol): r for r in tried}
    nodes = len(nccl.node_groups(topology, placement))
    heads = nccl.nvls_heads(topology.gpus_per_node, path_table(topology, placement).rails_per_node,
                            nodes)
    order = nccl_tuning.ranked(coll.name, nbytes, topology, CHANNELS, p, nodes,
                               {*timed, *skipped}, fp8, nvls_channels=heads)
    for pair in order:
        if pair not in timed:
            try:
                res = time_fn(*pair)
            except GpucommError:
                continue
            if res is None:
                continue
            skipped.remove(pair)
            tried.append(res)
            timed[pair] = res
        chosen = timed[pair]
        others = [r for r in tried if r.algorithm not in nccl.NCCL_ALGORITHMS and
                  r.time_s < chosen.time_s]
        return min(others, key=lambda r: r.time_s) if others else chosen
    return fastest


def host_issue_s(gpus_per_thread: int = 1, cuda_graph: bool = False) -> float:
    """Host seconds to issue one collective, the floor of nccl-tests' time per iteration:
    one NCCL launch per GPU the thread drives, none when replayed from a CUDA graph.

        >>> round(host_issue_s(8) * 1e6, 1)
        40.0
    """
    if isinstance(gpus_per_thread, bool) or not isinstance(gpus_per_thread, (int, np.integer)) \
            or gpus_per_thread < 1:
        raise ConfigError(f"gpus_per_thread {gpus_per_thread!r} not allowed: must be an "
                          "integer >= 1 (the GPUs one host thread drives, nccl-tests -g)")
    return 0.0 if cuda_graph else int(gpus_per_thread) * K.HOST_LAUNCH_S


def _host_bound(res: SimResult, host_s: float, coll: Collective, dtype: DTypeLike) -> SimResult:
    """Back-to-back collectives run no faster than the host issues them."""
    if res.nranks < 2 or res.time_s >= host_s:
        return res
    return _retimed(res, host_s, coll, dtype, f"host: {host_s * 1e6:.1f} us to issue the launches")


def _empty(coll: Collective, topology: Topology, placement: Ranks, dtype: DTypeLike,
           model: str, redop: str, host_s: float) -> SimResult:
    """A collective of 0 bytes (nccl-tests prints such rows where the size is below one element
    per rank): no step moves anything, so no algorithm is timed. From NCCL 2.20 nothing is
    launched (versions.RULE_SINCE "empty_collective_discarded"); before, the kernel still
    launched with no proxy operation, so the call costs LL's fixed latency (the least of any
    protocol), no less than the host's launches."""
    lay = layout(coll, 0, dtype, len(placement))
    gen, nodes = generation_of(topology), _nodes(topology, placement)
    ll = get_protocol("ll", gen, nodes)
    if versions.has_rule("empty_collective_discarded"):
        time_s, why = 0.0, ("0 bytes: NCCL discards an empty collective before launching "
                            "anything (" + versions.RULE_SINCE["empty_collective_discarded"][1]
                            + ")")
    else:
        time_s = max(ll.base_latency_s, host_s)
        why = ("0 bytes: this NCCL launches the kernel of an empty collective with no proxy "
               "operation (v2.18.3-1 enqueue.cc:336): the launch's fixed latency only")
    timed = Timed(algorithm="none", schedule=None, closed_form="empty", topology=topology,
                  placement=placement, protocol=ll, channels=0, lanes=1.0, nics=1, fabric=None,
                  model=model, nbytes=0, dtype=lay.dtype.name, redop=redop, simulated_s=time_s)
    return SimResult(collective=coll.name, algorithm="none", protocol="none", model=model,
                     nranks=len(placement), size=0, count=0, dtype=lay.dtype.name,
                     time_s=time_s, algbw_GBps=0.0, busbw_GBps=0.0, redop=redop, note=why,
                     timed=timed)


def _call_sync(res: SimResult, topology: Topology, coll: Collective,
               dtype: DTypeLike) -> SimResult:
    """A calibrated cluster's per-call synchronisation (Topology.call_sync_s, a profile's
    call_sync_us) added once where the per-rank share reaches call_sync_from_bytes; 0 on a
    catalog topology."""
    extra = topology.call_sync_s
    if extra <= 0 or res.nranks < 2 or res.size / res.nranks < topology.call_sync_from_bytes:
        return res
    return _retimed(res, res.time_s + extra, coll, dtype,
                    f"calibrated call sync: {extra * 1e6:.1f} us a call")


def _retimed(res: SimResult, time_s: float, coll: Collective, dtype: DTypeLike,
             why: str) -> SimResult:
    """`res` taking `time_s`, for the reason `why` (its bandwidths and timed view follow)."""
    algbw, busbw = layout(coll, res.size, dtype, res.nranks).busbw(time_s)
    timed = None if res.timed is None else res.timed.bounded(why, time_s)
    return dataclasses.replace(res, time_s=time_s, algbw_GBps=algbw, busbw_GBps=busbw,
                               timed=timed)


def _candidates(coll: Collective, algorithm: str, topology: Topology, placement: Ranks,
                exclude: Iterable[str]) -> list[str]:
    """The algorithms to time: NCCL's tuner's choices for `auto` (nccl.candidates), else the
    one asked for (an NCCL_ALGO name or a registered schedule)."""
    excluded = {e.lower() for e in exclude}
    if algorithm != "auto":
        name = str(algorithm).lower()
        if name in nccl.NCCL_ALGORITHMS and not versions.has_algorithm(name):
            since = versions.ALGORITHM_SINCE[name][0]
            raise ConfigError(f"algorithm {name!r} is not in NCCL {_version_text()}: it "
                              f"arrived in NCCL {since[0]}.{since[1]}")
        if name in nccl.NCCL_ALGORITHMS and name != "ring":
            nccl.check(name, coll, topology, placement)
            return [name]
        get_algorithm(coll, name)  # raises with the allowed names
        return [name]
    if "nvls" in excluded:  # as NCCL_NVLS_ENABLE=0: no in-switch reduction, in or across nodes
        excluded.add("nvls_tree")
    names = _nccl_candidates(coll, topology, placement) or \
        [a.name for a in algorithms(coll)]  # e.g. barrier: NCCL has none, every registered one
    names = [a for a in names if a not in excluded and versions.has_algorithm(a)]
    if not names:
        raise ConfigError(f"no algorithm left for {coll.name} after excluding "
                          f"{', '.join(sorted(excluded))}")
    return names


def _version_text() -> str:
    v = versions.active()
    return f"{v[0]}.{v[1]}" if v else "(newest)"


def _ll128_allowed_memo(topology: Topology, placement: Ranks) -> bool:
    """_ll128_allowed, once per (topology, placement, whether the active NCCL admits C2C
    paths): a sweep asks it for every size."""
    memo = topology_memo(topology).ll128.setdefault(bool(versions.value("LL128_C2C")), {})
    return per_placement(memo, topology, placement, _ll128_allowed)


def _nccl_candidates(coll: Collective, topology: Topology, placement: Ranks) -> list[str]:
    """nccl.candidates, once per (collective, topology, placement): a sweep's sizes share it."""
    memo = topology_memo(topology).candidates
    key = (coll.name, placement.tobytes())
    if key not in memo:
        if len(memo) >= PLACEMENTS_KEPT:
            memo.clear()
        memo[key] = nccl.candidates(coll, topology, placement)
    return list(memo[key])


def _ll128_allowed(topology: Topology, placement: Ranks) -> bool:
    """NCCL enables LL128 by default only where GPUs of a node talk over NVLink (typeIntra <=
    NVB in tuning.cc), not over PCIe switches or through the host; and only on the GPU
    generations its version lists (versions.py LL128_GENERATIONS, checked by the caller)."""
    if len(placement) < 2:
        return True
    orders = _ring_orders(topology, placement)  # NCCL judges the rings its search found
    ring = orders[0] if orders is not None else placement
    paths = path_table(topology, ring)
    src = np.arange(len(ring))
    dst = np.roll(src, -1)
    node = np.asarray(topology.router.rank_node)[np.asarray(ring, dtype=np.int64)]
    same = node[src] == node[dst]
    if not same.any():
        return True
    _, cls, _ = paths.properties(paths.routes(src[same], dst[same], 0))
    if len(set(node.tolist())) > 1 and _nic_behind_host(topology, ring[0]):
        return False
    return bool((cls == NVLINK).all())


def _nic_behind_host(topology: Topology, rank: int) -> bool:
    """Whether a GPU reaches every NIC of its node only through the host's PCIe root complex
    (NCCL's path type PHB or worse), as on nodes whose NICs sit on CPU root ports. NCCL then
    keeps LL128 off across nodes: tuning.cc enables it only for typeInter <= PATH_PXB (GPU and
    NIC under one PCIe switch), or <= PATH_PXN on Hopper and newer; from v2.27.3-1
    NCCL_LL128_C2C also admits a GPU reaching the NIC over its C2C link to the CPU, PATH_P2C
    (versions.py LL128_C2C: before, NCCL typed that path PHB)."""
    gpu = topology.rank_device(int(rank))
    hopper_on = generation_of(topology) not in ("volta", "ampere") and \
        versions.value("LL128_C2C")
    src, dst = topology.link_ends()
    nodes, codes = topology.device_nodes(), topology.device_kind_codes()
    out: dict[int, list[int]] = {}  # the links leaving each device of the GPU's node
    for i in np.flatnonzero(nodes[src] == gpu.node).tolist():
        out.setdefault(int(src[i]), []).append(i)
    nic, cpu, switch = (DEVICE_KINDS.index(k) for k in ("nic", "cpu", "pcie_switch"))
    start = topology.index_of(gpu.name)
    seen, todo = {start}, [start]
    while todo:
        here = todo.pop()
        for i in out.get(here, ()):
            nxt = int(dst[i])
            if nodes[nxt] != gpu.node:
                continue
            if codes[nxt] == nic:
                return False
            c2c = codes[nxt] == cpu and here == start and hopper_on and \
                _is_c2c(topology.links[i].tech)
            if nxt not in seen and (codes[nxt] == switch or c2c):
                seen.add(nxt)
                todo.append(nxt)
    return True


def _is_c2c(tech: str) -> bool:
    """A catalog technology of kind c2c (a topology's own technologies, e.g. an emulated
    host's loopback, are not)."""
    try:
        return get_link_tech(tech).kind == "c2c"
    except ConfigError:
        return False


def _time(coll: Collective, name: str, nbytes: int, topology: Topology, placement: Ranks,
          dtype: DTypeLike, model: str, proto: str, root: int, redop: str,
          params: dict[str, Any], sweep: SizeSweep | None = None) -> SimResult | None:
    """One (algorithm, protocol) timed on the links, then held to what NCCL's SHM transport
    allows where the ranks' hops go through host memory (shm.py); None: NCCL would not run it."""
    paths = path_table(topology, placement)
    res = _time_on_links(coll, name, nbytes, topology, placement, dtype, model, proto, root,
                         redop, params, paths, sweep)
    if res is None:
        return None
    limited = p2p.limit(res, coll, res.size, topology, placement, paths, dtype, proto)
    if limited is None:
        return None
    res = _bound(limited, res, "p2p: NCCL's channels per peer")
    return _bound(shm.limit(res, coll, res.size, topology, placement, paths, dtype, proto), res,
                  "shm: through host memory")


def _bound(res: SimResult, before: SimResult, why: str) -> SimResult:
    """`res` (a limit applied to `before`) with its timed run saying what the limit did."""
    assert before.timed is not None  # _time_on_links attaches it
    timed = before.timed.bounded(why, res.time_s)
    channels = res.nccl_channels or res.channels
    if channels != timed.channels:
        timed = dataclasses.replace(timed, channels=channels)
    return dataclasses.replace(res, timed=timed)


def _time_on_links(coll: Collective, name: str, nbytes: int, topology: Topology,
                   placement: Ranks, dtype: DTypeLike, model: str, proto: str, root: int,
                   redop: str, params: dict[str, Any], paths: PathTable,
                   sweep: SizeSweep | None = None) -> SimResult | None:
    p = len(placement)
    if name in nccl.CLOSED:
        res = nccl.CLOSED[name](coll, nbytes, topology, placement, dtype, proto, paths, model)
        if res is None:
            return None
        timed = Timed(algorithm=name, schedule=None, closed_form=name, topology=topology,
                      placement=placement, protocol=get_protocol(proto, generation_of(topology)),
                      channels=res.nccl_channels or res.channels, lanes=1.0,
                      nics=_rails(topology, placement, paths), fabric=paths.fabric, model=model,
                      nbytes=res.size, dtype=res.dtype, redop=redop, simulated_s=res.time_s)
        return dataclasses.replace(res, redop=redop, timed=timed)
    schedule = nccl.schedule_of(coll.name, name)
    assert schedule is not None  # None only for the closed forms, timed above
    alg = get_algorithm(coll, schedule)
    kw = dict(params)
    accepted = {k for k, _ in alg.params}
    rails = paths.rails_per_node if _multi_node(topology, placement) else 1
    ranks = placement
    if "channels" in accepted and "channels" not in kw:
        kw["channels"] = rails
        if name == "ring":  # one ring order per channel where the node is not a switch
            orders = _ring_orders(topology, placement)
            if orders is not None:
                kw["channels"], ranks = len(orders), orders
                if coll.name in ("broadcast", "reduce"):
                    ranks = _rooted(orders, placement, root)
    if "group_size" in accepted and kw.get("group_size") is None:
        # a hierarchical schedule's groups are the nodes: the builder's own default (largest
        # divisor <= 8) would put 2 nodes x 2 ranks in one group, a flat ring
        g = int(getattr(topology, "gpus_per_node", 0) or 0)
        if 1 <= g < p and p % g == 0:
            kw["group_size"] = g
    nccl_channels = CHANNELS
    if name == "ring" and coll.name in K.CHAIN_COLLECTIVES:
        chain = _chain_params(coll, nbytes, dtype, proto, kw, set(params), topology,
                              placement, ranks)
        nccl_channels, kw, ranks = chain.nccl_channels, chain.params, chain.ranks
    elif "chunks" in accepted and "chunks" not in kw:
        # other pipelined schedules move the buffer in protocol-sized slices; capped to keep
        # the schedule small
        kw["chunks"] = int(np.clip(np.ceil(float(nbytes) / K.SLICE_BYTES[proto]), 1,
                                   MAX_PIPELINE_CHUNKS))
    kw = {k: v for k, v in kw.items() if k in accepted}
    if coll.name == "all_to_all":  # every pair in one step: refuse before building P^2 ops
        check_step_ops(p * p, f"{name} all_to_all on {p:,} ranks")
    sched = alg.built(p, root=root, **kw)
    lanes = max(nccl_channels / max(sched.channels, 1), 1.0)
    timing: str | Protocol = proto  # a ring across nodes: NCCL's refined ring latencies
    if name == "ring" and _multi_node(topology, placement):
        gen, nodes = generation_of(topology), len(nccl.node_groups(topology, placement))
        size = float(layout(coll, nbytes, dtype, p).size)
        timing = with_net_sync(
            ring_protocol(get_protocol(proto, gen, nodes), gen, nodes, coll.name, size, p,
                          nccl_channels, *nccl.net_hop_floors(topology, placement, proto, paths),
                          channels_per_nic=nccl_tuning.coll_channels_per_nic(topology)),
            topology, size / p)
    res = simulate(sched, topology, nbytes, dtype=dtype, model=model, protocol=timing,
                   ranks=ranks, lanes=lanes, redop=redop, sweep=sweep)
    channels = int(sched.channels * lanes)
    timed = Timed(algorithm=name, schedule=sched, topology=topology,
                  placement=np.asarray(ranks, dtype=np.int64),
                  protocol=timing if isinstance(timing, Protocol) else
                  get_protocol(timing, generation_of(topology), _nodes(topology, placement)),
                  channels=channels, lanes=lanes, nics=rails, fabric=paths.fabric, model=model,
                  nbytes=res.size, dtype=res.dtype, redop=redop, simulated_s=res.time_s)
    return dataclasses.replace(res, algorithm=name, nccl_channels=channels, timed=timed)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Chain:
    """How NCCL runs a broadcast's or reduce's chain: on how many channels, which schedule
    parameters stand for them, on which rank orders."""
    nccl_channels: int
    params: dict[str, Any]
    ranks: Ranks


def _chain_params(coll: Collective, nbytes: int, dtype: DTypeLike, proto: str,
                  kw: dict[str, Any], given: set[str], topology: Topology, placement: Ranks,
                  ranks: Ranks) -> _Chain:
    """NCCL's ring broadcast / reduce (device/broadcast.h, reduce.h): the collective's channels
    (across nodes those NCCL's search builds, nccl_tuning.coll_channels; on one node CHANNELS),
    less those a small message cannot fill (enqueue.cc's channel tuning, protocol.ring_channels)
    each carry a contiguous 1/nChannels of the buffer (ncclCollCbdPart) along
    their own ring from the root, pipelined hop by hop in what a relaying GPU forwards at a
    time (protocol.chain_pipeline_bytes: a step's chunk for Simple, a trip of the channel's
    threads for LL and LL128). One schedule channel per NIC rail or ring order (what the ring
    all-reduce gets: every NIC carries chains), at most one per NCCL channel, each standing
    for nChannels / channels of them (lanes) and cut into pieces of one unit: the channels do
    not move in lockstep (each takes its links at their full rate in turn), so the chains of
    a schedule channel together pipeline at about one chunk. `given`: the caller's params,
    kept as they are."""
    p = len(placement)
    size = float(layout(coll, nbytes, dtype, p).size)
    most = CHANNELS
    if _multi_node(topology, placement):  # the collective channels NCCL builds across nodes
        most = nccl_tuning.topology_coll_channels(topology) or CHANNELS
    nccl_channels, unit = chain_pipeline_bytes(proto, size, p, most)
    out = dict(kw)
    if "channels" in out and "channels" not in given:
        out["channels"] = min(int(out["channels"]), nccl_channels)
    table = np.asarray(ranks)
    if table.ndim == 2:  # a ring order per channel (already turned to the root, _rooted)
        table = table[:out.get("channels", len(table))]
    if "chunks" not in given:
        share = size / out.get("channels", 1)  # one schedule channel's share
        # one hop (2 ranks) takes alpha + S/rate however it is cut (closed_form.chain_broadcast):
        # one piece, so that a sweep's sizes share one schedule
        out["chunks"] = 1 if p <= 2 else int(np.clip(np.ceil(share / unit), 1, MAX_CHAIN_CHUNKS))
    return _Chain(nccl_channels=nccl_channels, params=out, ranks=table)


def _ring_orders(topology: Topology, placement: Ranks) -> Ranks | None:
    return per_placement(topology_memo(topology).orders, topology, placement, ring_orders)


def _rooted(orders: Ranks, placement: Ranks, root: int) -> Ranks:
    """Each ring order turned so that the root's GPU sits at schedule rank `root`: a chain
    (broadcast, reduce) starts or ends at the same GPU on every channel, as NCCL's rings all
    pass through the root."""
    gpu = int(np.asarray(placement)[root])
    at = np.argmax(np.asarray(orders) == gpu, axis=1)
    return np.stack([np.roll(row, root - int(k)) for row, k in zip(orders, at)])


def _rails(topology: Topology, placement: Ranks, paths: PathTable) -> int:
    return int(paths.rails_per_node) if _multi_node(topology, placement) else 1


def _nodes(topology: Topology, placement: Ranks) -> int:
    return len(np.unique(np.asarray(topology.router.rank_node)[placement]))


def _multi_node(topology: Topology, placement: npt.ArrayLike) -> bool:
    node = topology.router.rank_node[np.asarray(placement)]
    return bool(node.size) and bool((node != node.flat[0]).any())
