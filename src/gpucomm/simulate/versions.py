"""NCCL's tuning constants by NCCL version: the model of the NCCL a table or a user ran.

constants.py holds today's NCCL (2.23-2.30). Older releases had other latencies, other caps and
fewer algorithms; `HISTORY` lists, for every constant that changed, its value from the first
release that had it (read from the release tags of github.com/NVIDIA/nccl, src/graph/tuning.cc
unless said otherwise). Nothing here is fitted: each value is NCCL's own at that tag.

`use(version)` makes a version the active one for the model (predict does it around one
prediction; a context variable, so threads do not see each other's); `value(name)` is a
constant as the active version had it.

    >>> parse_version("~2.19 (pytorch:24.01)")
    (2, 19)
    >>> with use("2.12"):
    ...     value("HOP_LATENCY_S")["simple"]["net"] * 1e6
    28.0
"""
from __future__ import annotations

import contextvars
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from ..errors import ConfigError
from . import constants as K

US = K.US
NEWEST = (2, 30)
OLDEST = (2, 5)  # the first release with a tuning model (tuning.cc, LL128)

Version = tuple[int, int]  # (major, minor)
Triple = tuple[float, float, float]  # by path class or by node-count column
_T = TypeVar("_T")


def _lat(ll: Triple, ll128: Triple, simple: Triple) -> dict[str, dict[str, float]]:
    """hwLat rows in us (NVLink, PCI, NET) -> the constants.py layout, seconds."""
    names = ("nvlink", "pcie", "net")
    return {"ll": dict(zip(names, (x * US for x in ll))),
            "ll128": dict(zip(names, (x * US for x in ll128))),
            "simple": dict(zip(names, (x * US for x in simple)))}


def _tree_lat(ll: Triple, ll128: Triple,
              simple: Triple) -> dict[str, tuple[float, ...]]:
    return {"ll": tuple(x * US for x in ll), "ll128": tuple(x * US for x in ll128),
            "simple": tuple(x * US for x in simple)}


def _base(ll: float, ll128: float, simple: float) -> dict[str, float]:
    return {"ll": ll * US, "ll128": ll128 * US, "simple": simple * US}


def _gens(volta: _T, ampere: _T, hopper: _T, blackwell: _T) -> dict[str, _T]:
    return {"volta": volta, "ampere": ampere, "hopper": hopper, "blackwell": blackwell}


_INF3 = (float("inf"),) * 3
_TC_26 = {"ll": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .5, .5, .6, .7, .8, .9, .9,
                 1.0, 1.0, 1.0),
          "ll128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .8, .7, .7, .7, .6, .6, .7, .7, .8,
                    .8, .9, .9, 1.0),
          "simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6,
                     .7, .8, .9)}
_TC_27 = {"ll": K.TREE_CORRECTION["ll"][:22],
          "ll128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7,
                    .8, .9, .9, 1.0),
          "simple": _TC_26["simple"]}
_TC_28 = {"ll": K.TREE_CORRECTION["ll"][:23],
          "ll128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7,
                    .8, .9, .9, .92, .92),
          "simple": K.TREE_CORRECTION["simple"][:23]}
_NO_TC = {p: (1.0,) for p in ("ll", "ll128", "simple")}
# ll128MaxBwPerCh before perChMaxRingLL128Bws / perChMaxTreeLL128Bws (v2.18.3-1): one cap that
# rings and trees shared; by compute capability from v2.17.1-1 ({20.0, 20.0, 36.7}: Hopper's
# 36.7). Blackwell reads Hopper's row until its own (v2.25.1-1 compCapIndex)
_L20, _H367 = (20.0,) * 3, (36.7,) * 3
_LL128_PER_CH_BEFORE_2_18: list[tuple[Version, Any, str]] = [
    ((2, 5), _gens(*[(16.7,) * 3] * 4), "v2.7.3-1 ll128MaxBwPerCh[AllReduce]"),
    ((2, 8), _gens(*[(16.9,) * 3] * 4), "v2.8.3-1 ll128MaxBwPerCh[AllReduce]"),
    ((2, 10), _gens(*[_L20] * 4), "v2.10.3-1 ll128MaxBwPerCh"),
    ((2, 17), _gens(_L20, _L20, _H367, _H367), "v2.17.1-1 ll128MaxBwPerCh[compCapIndex]")]

# name -> [(first version, value, where it is read)], oldest first; the last entry of each is
# today's (constants.py), which tests/test_nccl_versions.py checks.
HISTORY: dict[str, list[tuple[Version, Any, str]]] = {
    # hwLat[hw][Ring][proto]
    "HOP_LATENCY_S": [
        ((2, 5), _lat((.4, 1.0, .9), (2.5, 2.5, 2.5), (5.7, 5.7, 6.6)), "v2.5.6-1"),
        ((2, 7), _lat((.47, 1.0, 2.7), (1.9, 2.5, 4.0), (3.4, 5.7, 9.6)), "v2.7.3-1"),
        ((2, 12), _lat((.47, 1.0, 2.7), (1.9, 2.5, 4.0), (3.4, 5.7, 28)), "v2.12.7-1"),
        ((2, 14), _lat((.47, 1.0, 2.7), (1.9, 2.5, 4.0), (3.4, 5.7, 9.6)), "v2.14.3-1"),
        ((2, 18), K.HOP_LATENCY_S, "v2.18.1-1")],
    # baseLat[Ring][proto]
    "BASE_LATENCY_S": [
        ((2, 5), _base(3.6, 3.6, 8.4), "v2.5.6-1"),
        ((2, 7), _base(3.6, 10.0, 8.4), "v2.7.3-1"),
        ((2, 18), K.BASE_LATENCY_S, "v2.18.1-1")],
    # baseLat[Tree][proto]
    "TREE_BASE_LATENCY_S": [
        ((2, 5), _base(4.4, 4.4, 0.0), "v2.5.6-1"),
        ((2, 18), _base(6.8, 14.0, 0.0), "v2.18.1-1"),
        ((2, 23), K.TREE_BASE_LATENCY_S, "v2.23.4-1")],
    "TREE_SIMPLE_CHUNK_RULES": [
        ((2, 5), ((8, 131072), (4, 65536), (1, 32768)),
         "v2.5.6-1..v2.19.4-1 enqueue.cc computeColl: Tree/Simple, ncclPatternTreeUpDown"),
        ((2, 20), K.TREE_SIMPLE_CHUNK_RULES, "v2.20.3-1 computeCollChunkInfo (rule removed)")],
    # hwLat[hw][Tree][proto]: 28 us a Simple tree step until 2.23 (50 across nodes until 2.8)
    "TREE_HOP_LATENCY_S": [
        ((2, 5), _tree_lat((.5, 1.0, 5.0), (1.9, 1.9, 7.5), (28, 28, 50)), "v2.5.6-1"),
        ((2, 7), _tree_lat((.52, 1.0, 5.0), (1.2, 1.9, 8.5), (28, 28, 50)), "v2.7.3-1"),
        ((2, 8), _tree_lat((.52, 1.0, 5.0), (1.25, 1.9, 8.5), (28, 28, 28)), "v2.8.3-1"),
        ((2, 18), _tree_lat((.6, 1.0, 5.0), (1.25, 1.9, 8.5), (28, 28, 28)), "v2.18.1-1"),
        ((2, 23), K.TREE_HOP_LATENCY_S, "v2.23.4-1")],
    # tuning.cc latencies across nodes: LL's intraLat x1.8, then getNetOverhead
    "LL_MULTI_NODE_INTRA_FACTOR": [
        ((2, 5), 1.0, "v2.5.6-1 (none)"),
        ((2, 7), 1.8, "v2.7.3-1 .. v2.17.1-1 if (nNodes > 1 && p == NCCL_PROTO_LL) intraLat *= "
                      "1.8"),
        ((2, 18), K.LL_MULTI_NODE_INTRA_FACTOR, "v2.18.1-1 (removed for netOverhead)")],
    "NET_OVERHEAD_US": [
        ((2, 5), 0.0, "v2.5.6-1 .. v2.17.1-1 (no getNetOverhead)"),
        ((2, 18), K.NET_OVERHEAD_US, "v2.18.1-1 getNetOverhead")],
    # ring/LL's share of the ring graph's busBw: 1/4 across nodes or for all-reduce/reduce, 1/3
    # otherwise (1/4 for all in v2.5.6-1), then .5 for all
    "RING_LL_BUSBW_SHARE": [
        ((2, 5), (0.25, 0.25), "v2.5.6-1 busBw *= 1.0/4.0"),
        ((2, 7), (0.25, 1 / 3), "v2.7.3-1 .. v2.20.5-1 (nNodes > 1 || AllReduce || Reduce) ? "
                                "1.0/4.0 : 1.0/3.0"),
        ((2, 21), K.RING_LL_BUSBW_SHARE, "v2.21.5-1 busBw * .5")],
    # llMaxBws (none before 2.8); Hopper used the Ampere row until its own in 2.21, Blackwell
    # the Hopper row until 2.25
    "LL_MAX_BW": [
        ((2, 5), _gens(_INF3, _INF3, _INF3, _INF3), "v2.5.6-1 (no llMaxBws)"),
        ((2, 8), _gens((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0),
                       (87.7, 22.5, 19.0)), "v2.8.3-1"),
        ((2, 21), _gens((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0),
                        (141.0, 45.0, 35.0)), "v2.21.5-1"),
        ((2, 25), K.LL_MAX_BW, "v2.25.1-1")],
    "LL_MAX_BW_MULTI_NODE": [
        ((2, 5), _INF3, "v2.5.6-1 (no llMaxBws)"),
        ((2, 8), K.LL_MAX_BW_MULTI_NODE, "v2.8.3-1")],
    # ll128MaxBwPerCh (2.7-2.9: per collective, the model takes the all-reduce one, index
    # ncclFuncAllReduce = 4 of devcomm.h; 2.10: 20 for all; 2.17: by compute capability);
    # perChMaxRingLL128Bws from v2.18.3-1. Before 2.7 LL128 had a total cap (ll128MaxBw,
    # 100 GB/s for all-reduce), taken as the 2.7 per-channel one. Blackwell's row: 2 x 36.7
    # (v2.25.1-1), its N2 34.6 (v2.28.7-1; v2.28.3-1 had 2 x 36.7), 40.0 (v2.29.7-1; v2.29.2-1
    # and v2.29.3-1 had 34.5, 34.6, 34.5). A minor release reads its last patch's.
    "LL128_PER_CHANNEL_BW": [
        *_LL128_PER_CH_BEFORE_2_18,
        ((2, 18), _gens(_L20, _L20, _H367, _H367), "v2.18.3-1 perChMaxRingLL128Bws"),
        ((2, 25), _gens(_L20, _L20, _H367, (2 * 36.7,) * 3), "v2.25.1-1"),
        ((2, 28), _gens(_L20, _L20, _H367, (2 * 36.7, 34.6, 2 * 36.7)), "v2.28.9-1"),
        ((2, 29), K.LL128_PER_CHANNEL_BW, "v2.29.7-1")],
    # tuning.cc's ring/LL128 factor on busBw (one GPU a node, else): 120/128 for all in 2.5-2.6;
    # from v2.7.3-1 `ppn < 2 ? 0.7 : 0.92` ("if ppn < 2, then we are sending/receiving at the
    # same GPU through the NIC, apply some bw discount"; v2.22.3-1 tuning.cc:179); v2.23.4-1
    # dropped the discount (tuning.cc:188 `busBw * (0.92 /*120.0/128.0*/)`, as in v2.29.7-1:306)
    "RING_LL128_BUSBW_SHARE": [
        ((2, 5), (120 / 128, 120 / 128), "v2.5.6-1 busBw*120.0/128.0"),
        ((2, 7), (0.7, 0.92), "v2.7.3-1 .. v2.22.3-1 ppn < 2 ? 0.7 : 0.92"),
        ((2, 23), K.RING_LL128_BUSBW_SHARE, "v2.23.4-1 0.92")],
    # perChMaxTreeBws (none before 2.8); Hopper row from 2.17, changed in 2.19
    "TREE_PER_CHANNEL_BW": [
        ((2, 5), _gens(_INF3, _INF3, _INF3, _INF3), "v2.5.6-1 (no perChMaxTreeBws)"),
        ((2, 8), _gens((26.5, 18.5, 10.0), (24.0, 22.5, 16.0), (24.0, 22.5, 16.0),
                       (24.0, 22.5, 16.0)), "v2.8.3-1"),
        ((2, 10), _gens((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (24.0, 23.6, 17.8),
                        (24.0, 23.6, 17.8)), "v2.10.3-1"),
        ((2, 17), _gens((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 33.0),
                        (38.7, 41.4, 33.0)), "v2.17.1-1"),
        ((2, 18), _gens((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0),
                        (38.7, 41.4, 36.0)), "v2.18.3-1 (v2.18.1-1: v2.17.1-1's)"),
        ((2, 25), _gens((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0),
                        (2 * 38.7, 2 * 41.4, 2 * 36.0)), "v2.25.1-1 Blackwell's row"),
        ((2, 28), K.TREE_PER_CHANNEL_BW, "v2.28.3-1")],
    # a tree's LL128 cap was the ring's per-channel one until perChMaxTreeLL128Bws (v2.18.3-1);
    # Blackwell's row 2 x (36.7, 36.7, 29.0) from v2.25.1-1, today's from v2.28.3-1
    "TREE_LL128_PER_CHANNEL_BW": [
        *_LL128_PER_CH_BEFORE_2_18,
        ((2, 18), _gens(_L20, _L20, (36.7, 36.7, 29.0), (36.7, 36.7, 29.0)),
         "v2.18.3-1 perChMaxTreeLL128Bws"),
        ((2, 25), _gens(_L20, _L20, (36.7, 36.7, 29.0), (2 * 36.7, 2 * 36.7, 2 * 29.0)),
         "v2.25.1-1"),
        ((2, 28), K.TREE_LL128_PER_CHANNEL_BW, "v2.28.3-1")],
    # treeCorrectionFactor: none before 2.6
    "TREE_CORRECTION": [
        ((2, 5), _NO_TC, "v2.5.6-1 (no treeCorrectionFactor)"),
        ((2, 6), _TC_26, "v2.6.4-1"),
        ((2, 7), _TC_27, "v2.7.3-1"),
        ((2, 8), _TC_28, "v2.8.3-1"),
        ((2, 10), K.TREE_CORRECTION, "v2.10.3-1")],
    # NVLS inside a node: baseLat[NVLS][Simple] + hwLat[NVLINK][NVLS][Simple]
    "NVLS_LATENCY_S": [
        ((2, 17), 40.0 * US, "v2.17.1-1 (baseLat 40, hwLat 0)"),
        ((2, 18), 23.0 * US, "v2.18.1-1 (baseLat 23, hwLat 0)"),
        ((2, 19), 23.0 * US, "v2.19.1-1 (baseLat 0, hwLat 23)"),
        ((2, 21), K.NVLS_LATENCY_S, "v2.21.5-1 (hwLat 25)")],
    # where LL128 is on by default ("Enable LL128 by default only on ...+NVLink")
    "LL128_GENERATIONS": [
        ((2, 5), ("volta",), "v2.5.6-1"),
        ((2, 7), ("volta", "ampere"), "v2.7.3-1"),
        ((2, 15), ("volta", "ampere", "hopper"), "v2.15.1-1"),
        ((2, 25), K.LL128_GENERATIONS, "v2.25.1-1")],
    # LL128 across nodes where a GPU reaches its NIC over C2C (constants.LL128_C2C)
    "LL128_C2C": [
        ((2, 5), False, "v2.5.6-1 .. v2.26 tuning.cc typeInter <= PATH_PXB (PXN on Hopper); "
                        "topo.h has no PATH_P2C"),
        ((2, 27), K.LL128_C2C, "v2.27.3-1 NCCL_LL128_C2C: typeInter <= PATH_P2C")],
}

# The first release whose tuner has each algorithm (NCCL_ALGORITHMS in nccl.py)
ALGORITHM_SINCE: dict[str, tuple[Version, str]] = {
    "ring": ((2, 5), "v2.5.6-1"), "tree": ((2, 5), "v2.5.6-1"),
    "collnet_direct": ((2, 6), "v2.6.4-1 (CollNet)"),
    "collnet_chain": ((2, 14), "v2.14.3-1"),
    "nvls": ((2, 17), "v2.17.1-1"), "nvls_tree": ((2, 18), "v2.18.1-1"),
    "pat": ((2, 23), "v2.23.4-1 (NCCL_PAT_ENABLE)")}

# The first release with each of NCCL's p2p channel rules (simulate/p2p.py), read from
# src/graph/paths.cc at the release tags
RULE_SINCE: dict[str, tuple[Version, str]] = {
    # ncclTopoGetNchannels, a network peer: NCCL_NCHANNELS_PER_NET_PEER defaults to -1, and the
    # channels are max(local NICs by bandwidth, 2 halved while 2 x nRanks > 4 x p2pnChannels);
    # before, the parameter's default: 2
    "p2p_net_channels_by_nics": ((2, 20), "v2.20.3-1 paths.cc ncclTopoGetNchannels"),
    # a network peer gets max(NICs, ceil(NIC GB/s / NCCL_P2P_PER_CHANNEL_NET_BW)) channels, and
    # ncclTopoComputeP2pChannels halves p2pnChannelsPerPeer across nodes while perPeer x
    # ceil(nRanks / NCCL_MAX_DEV_WORK_P2P_PER_BATCH) > p2pnChannels (absent in v2.28.9-1)
    "p2p_channels_fit_one_round": ((2, 29), "v2.29.2-1 paths.cc ncclTopoComputeP2pChannels"),
    # a collective of 0 elements returns before anything is enqueued (no kernel, no proxy);
    # before, it still launched its kernel, with no proxy operation (v2.18.3-1 enqueue.cc:336
    # "Empty collectives do not make it to the proxy thread")
    "empty_collective_discarded": ((2, 20), "v2.20.3-1 enqueue.cc:1865 taskAppend")}

_ACTIVE: contextvars.ContextVar[Version | None] = contextvars.ContextVar("gpucomm_nccl_version",
                                                                         default=None)
# the NCCL whose rules (RULE_SINCE) apply; `use` sets it with _ACTIVE, or alone for p2p, whose
# timing takes no tuning.cc constants
_RULES: contextvars.ContextVar[Version | None] = contextvars.ContextVar("gpucomm_nccl_rules",
                                                                        default=None)
_VERSION = re.compile(r"(\d+)\.(\d+)")


def parse_version(text: str | Sequence[int] | None, strict: bool = False) -> Version | None:
    """(major, minor) from text such as "2.18", "2.18.5-1", "~2.19 (pytorch:24.01)"; None
    (the newest) for None/"" or text without a version, or a ConfigError when `strict`.
    Leniently a 2.x outside OLDEST..NEWEST is the nearest of the two; strictly one before
    OLDEST is refused."""
    if text is None:
        return None
    if isinstance(text, (tuple, list)):  # (major, minor) already
        text = ".".join(str(x) for x in text[:2])
    for m in _VERSION.finditer(str(text)):  # "pytorch:24.01 container (~2.19)": NCCL is 2.x
        version = (int(m.group(1)), int(m.group(2)))
        if version[0] == 2 and (OLDEST <= version or not strict):
            # leniently a release before the first tuning model (2.4.x) is modelled with the
            # oldest one, as one after the newest is with the newest: the nearest NCCL
            return max(min(version, NEWEST), OLDEST)
    if strict:
        raise ConfigError(f"nccl version {text!r} not understood: give MAJOR.MINOR of NCCL 2, "
                          f"{OLDEST[0]}.{OLDEST[1]} or later (e.g. 2.18 or 2.18.5-1)")
    return None


@contextmanager
def use(version: str | Version | None, constants: bool = True) -> Iterator[None]:
    """Make `version` (text or (major, minor); None = the newest) the model's NCCL; with
    `constants` False only its rules (RULE_SINCE), the tuning constants staying the newest."""
    v = parse_version(version, strict=True) if isinstance(version, str) else version
    token = _ACTIVE.set(v if constants else None)
    rules = _RULES.set(v)
    try:
        yield
    finally:
        _RULES.reset(rules)
        _ACTIVE.reset(token)


def active() -> Version | None:
    """The active NCCL version, (major, minor), or None for the newest."""
    return _ACTIVE.get()


def value(name: str, version: Version | None = None) -> Any:
    """Constant `name` as the active (or given) NCCL version had it."""
    version = version or _ACTIVE.get()
    history = HISTORY.get(name)
    if version is None or history is None:
        return getattr(K, name)
    chosen = history[0][1]
    for since, val, _ in history:
        if version >= since:
            chosen = val
    return chosen


def has_algorithm(name: str, version: Version | None = None) -> bool:
    """Whether NCCL `version` (default: the active one) has algorithm `name`."""
    version = version or _ACTIVE.get()
    since = ALGORITHM_SINCE.get(name)
    return version is None or since is None or version >= since[0]


def rules_version() -> Version | None:
    """The NCCL whose rules apply (`use`), (major, minor), or None for the newest."""
    return _RULES.get()


def has_rule(name: str, version: Version | None = None) -> bool:
    """Whether NCCL `version` (default: the one `use` set; None: the newest) has rule `name`
    (RULE_SINCE)."""
    version = version or _RULES.get()
    return version is None or version >= RULE_SINCE[name][0]
