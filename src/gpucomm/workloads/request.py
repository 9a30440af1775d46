"""One planning request as a value, and the one function that answers it.

`gpucomm plan` parses its command line into a `PlanRequest` and prints what `answer` returns:
a `PredictedStep` (one layout), a `Comparison` (what-ifs: the same request with some settings
changed) or a `SearchResult` (`search`: the layouts ranked). Comparisons and searches are
loops over requests and layouts, not second paths.

    >>> req = PlanRequest("llama3-8b", system="dgx-h100", nodes=1,
    ...                   layout=(("tp", 8), ("seq", 4096)))
    >>> answer(req).layout.dp
    1
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

from ..errors import ConfigError
from .frameworks import get_framework
from .layout import Layout
from .models import get_model
from .steptime import Cluster, PredictedStep, make_cluster, plan

# "network": a topology.fabric.Network value (routing, QPs, loss, failed cables), built by the CLI;
# "other_job": a second job's node count (steptime.other_job_groups); "profile": a calibration
# profile's (parameter, value) pairs
TOPOLOGY_KEYS = ("gpu", "pcie_gen", "fabric", "oversubscription", "nics_per_node", "p2p",
                 "gpus_per_node", "leaf_ports", "placement", "network", "other_job",
                 "profile")
LAYOUT_KEYS = tuple(f.name for f in fields(Layout))
COMPARE_KEYS = ("system", "nic", "nodes") + tuple(k for k in TOPOLOGY_KEYS
                                                  if k not in ("network", "profile")) \
    + LAYOUT_KEYS


@dataclass(frozen=True)
class PlanRequest:
    """What to model (model), on which cluster (system x nodes, nic, topology options), with
    which layout settings (Layout fields; dp and global_batch may be left out: dp takes the
    GPUs tp*pp*cp leave, the global batch is dp micro-batches), and what to do: one plan,
    `compare` (key, values) what-ifs, or `search` (ranked layouts, `top` shown)."""
    model: str
    system: str = "dgx-h100"
    nodes: int = 1
    nic: str | None = None
    topology: tuple = ()  # (key, value) pairs of TOPOLOGY_KEYS
    layout: tuple = ()  # (field, value) pairs of LAYOUT_KEYS
    sim_model: str = "analytic"
    contention: bool = True
    compare: tuple = ()  # (key, (value, ...)) pairs of COMPARE_KEYS
    search: bool = False
    top: int = 10

    def __post_init__(self):
        for key, _ in self.topology:
            if key not in TOPOLOGY_KEYS:
                raise ConfigError(f"topology option {key!r} is unknown: allowed are "
                                  f"{', '.join(TOPOLOGY_KEYS)}")
        for key, _ in self.layout:
            if key not in LAYOUT_KEYS:
                raise ConfigError(f"layout field {key!r} is unknown: allowed are "
                                  f"{', '.join(LAYOUT_KEYS)}")
        for key, values in self.compare:
            if key not in COMPARE_KEYS:
                raise ConfigError(f"--compare key {key!r} is unknown: allowed are "
                                  f"{', '.join(COMPARE_KEYS)}")
            if not values:
                raise ConfigError(f"--compare {key}= needs at least one value")
        if self.sim_model not in ("analytic", "flow"):
            raise ConfigError(f"sim_model must be analytic or flow, got {self.sim_model!r}")
        if self.search and self.compare:
            raise ConfigError("--search and --compare do not combine: search ranks layouts "
                              "on one cluster")
        if not isinstance(self.top, int) or self.top < 1:
            raise ConfigError(f"top must be an integer >= 1, got {self.top!r}")

    def with_(self, key: str, value) -> "PlanRequest":
        """The request with one setting changed (a cluster field, topology option or layout
        field)."""
        if key in ("system", "nic", "nodes"):
            return replace(self, **{key: value})
        if key in TOPOLOGY_KEYS:
            return replace(self, topology=_set(self.topology, key, value))
        return replace(self, layout=_set(self.layout, key, value))

    def cluster(self) -> Cluster:
        opts = {k: v for k, v in self.topology if v is not None}
        return make_cluster(self.system, self.nodes, self.nic, **opts)

    def resolve(self, cluster: Cluster | None = None) -> Layout:
        """The layout this request describes on its cluster (dp and global batch derived)."""
        cluster = cluster or self.cluster()
        lay = dict(self.layout)
        if lay.get("dp") is None:
            others = lay.get("tp", 1) * lay.get("pp", 1) * lay.get("cp", 1)
            if cluster.gpus % others:
                raise ConfigError(f"tp*pp*cp = {others} does not divide the {cluster.gpus} "
                                  f"GPUs of {self.nodes} x {self.system}")
            lay["dp"] = cluster.gpus // others
        lay = with_framework_defaults(lay)
        if lay.get("global_batch") is None:
            mode = lay.get("mode", "train")
            lay["global_batch"] = lay["dp"] * (lay.get("micro_batch", 1) if mode == "train"
                                               else 1)
        return Layout(**lay)


def with_framework_defaults(lay: dict) -> dict:
    """Layout fields with the overlap switches the request leaves out taken from its
    framework's profile."""
    fw = get_framework(lay.get("framework", "megatron"))
    return {**{k: v for k, v in fw.overlaps.items() if lay.get(k) is None},
            **{k: v for k, v in lay.items() if v is not None}}


def _set(pairs: tuple, key: str, value) -> tuple:
    d = dict(pairs)
    d[key] = value
    return tuple(sorted(d.items()))


@dataclass(frozen=True)
class Comparison:
    """The same request under what-if settings: (label, plan) pairs, the first the base."""
    variants: tuple


def answer(req: PlanRequest):
    """PredictedStep, Comparison or SearchResult for a request."""
    if req.search:
        from .search import search
        return search(req)
    if req.compare:
        return Comparison(tuple((label, _plan(r)) for label, r in variants(req)))
    return _plan(req)


def variants(req: PlanRequest) -> list[tuple[str, PlanRequest]]:
    """The base request and every combination of the compare values, labelled."""
    out: list[tuple[dict, PlanRequest]] = [({}, replace(req, compare=()))]
    for key, values in req.compare:
        out = [({**lab, key: v}, r.with_(key, v)) for lab, r in out for v in values]
    labelled = []
    for lab, r in out:
        if "dp" not in lab and any(k in lab for k in ("tp", "pp", "cp", "nodes")):
            r = replace(r, layout=tuple((k, v) for k, v in r.layout if k != "dp"))
        labelled.append((",".join(f"{k}={v}" for k, v in lab.items()), r))
    return labelled


def _plan(req: PlanRequest) -> PredictedStep:
    cluster = req.cluster()
    return plan(get_model(req.model), cluster.system, cluster.nodes, req.resolve(cluster),
                cluster.nic, cluster=cluster, sim_model=req.sim_model,
                contention=req.contention)
