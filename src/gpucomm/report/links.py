"""Per-link utilisation over a simulated collective.

With the schedule of a flow-model result, `flow_link_usage` runs the flow model again and
records every rate it gives every flow (max-min fair shares change whenever a flow starts or
ends), so each link's utilisation is exact: the sum of its flows' rates over its payload
capacity (the protocol's wire overhead included: LL fills a link at half its bandwidth).

Otherwise (the analytic model, or no schedule) every op of a traced SimResult crosses the links
of its route (the simulator's own path table, same placement); its bytes are spread evenly over
[start, end) on each of them, as a fraction of the link's achievable bandwidth. Integrated over
time this gives back exactly the simulator's `link_busy_s` (bytes / capacity). It is each op's
average rate: where the flow model changed an op's rate midway (another flow joined its link)
the averages of overlapping ops can add up to more than 1 for a while, and the analytic model,
which ignores sharing, shows above 1 what a link would need to carry (the demand, not a rate
the link reached).

    >>> from gpucomm.algorithms import build
    >>> from gpucomm.simulate import simulate
    >>> from gpucomm.topology import build_topology
    >>> topo = build_topology("dgx-h100")
    >>> r = simulate(build("all_reduce", "ring", 8), topo, 1 << 20, model="flow", trace=True)
    >>> u = link_usage(r, topo)
    >>> abs(u.busy_s()[u.links[0]] - r.link_busy_s[u.links[0]]) < 1e-12
    True
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NVLS_ALGORITHMS = ("nvls", "nvls_tree")  # the closed forms that stream NVLS chunks


@dataclass(frozen=True)
class LinkUsage:
    """Piecewise-constant utilisation: for link `links[k]`, the value `util[k][j]` holds from
    `times[k][j]` to `times[k][j + 1]` (the last value is 0)."""
    links: tuple  # link indices of the topology, in topology order
    names: tuple  # "src→dst (tech)"
    times: tuple  # per link: np.ndarray of breakpoints, s
    util: tuple  # per link: np.ndarray, fraction of achievable bandwidth
    capacity: tuple  # per link: bytes/s that fill it (payload, after wire overhead)
    end_s: float
    method: str = "op averages"  # or "flow rates" (exact), "steady stream" (NVLS)

    def busy_s(self) -> dict:
        """Link index -> busy seconds (the integral of utilisation), as SimResult.link_busy_s."""
        return {ln: float(np.sum(u[:-1] * np.diff(t)))
                for ln, t, u in zip(self.links, self.times, self.util)}

    def binned(self, bins: int = 120) -> tuple[np.ndarray, np.ndarray]:
        """(bin edges, utilisation [links x bins]): the mean utilisation of each bin."""
        edges = np.linspace(0.0, self.end_s if self.end_s > 0 else 1.0, bins + 1)
        out = np.zeros((len(self.links), bins))
        for k, (t, u) in enumerate(zip(self.times, self.util)):
            # the integral of the step function at every edge, differenced per bin
            cum = np.concatenate([[0.0], np.cumsum(u[:-1] * np.diff(t))])
            at = np.interp(edges, t, cum)
            out[k] = np.diff(at) / np.diff(edges)
        return edges, out


def link_usage(result, topology, schedule=None) -> LinkUsage | None:
    """The utilisation of every link the traced `result` used; None if it has no timeline.
    Exact rates for a flow-model result when its `schedule` is given (a prediction's timed
    schedule by default: flow_link_usage). A prediction (`result.timed`, simulate.timed) is
    drawn on its own placement, up to the time it printed."""
    timed = result.timed
    if schedule is None and timed is not None:
        schedule = timed.schedule
    if schedule is not None and result.model == "flow" and result.algorithm not in NVLS_ALGORITHMS:
        usage = flow_link_usage(schedule, topology, result)
        if usage is not None:
            return usage
    if result.algorithm in NVLS_ALGORITHMS:
        return _nvls_usage(result, topology)
    tl = result.timeline
    if not tl:
        return None
    arr = np.asarray([(rec.src, rec.dst, rec.chunk, rec.channel, rec.start_s, rec.end_s,
                       rec.nbytes) for rec in tl], dtype=np.float64)
    src, dst = arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64)
    ch = arr[:, 3].astype(np.int64)
    start, end, nbytes = arr[:, 4], arr[:, 5], arr[:, 6]
    paths = _paths(result, topology)
    routes = paths.routes(src, dst, ch)
    moving = (end > start) & (nbytes > 0)
    ops, hops = np.nonzero((routes >= 0) & moving[:, None])
    if not len(ops):  # nothing crossed a link (a closed form's per-rank records)
        return _usage(topology, paths.capacity, {}, _end_s(result))
    link = routes[ops, hops]
    cap = paths.capacity[link]
    rate = nbytes[ops] / (end[ops] - start[ops]) / np.where(cap > 0, cap, 1.0)
    # a +rate step at each op's start and a -rate step at its end, summed per link in time
    per_link = _steps(np.concatenate([start[ops], end[ops]]), np.concatenate([rate, -rate]),
                      np.concatenate([link, link]))
    return _usage(topology, paths.capacity, per_link, _end_s(result))


def _paths(result, topology):
    """The simulator's path table for `result`'s placement (a prediction's own; else GPUs
    0..P-1, as simulate() places a schedule by default)."""
    from ..simulate.core import path_table
    timed = result.timed
    placement = timed.placement if timed is not None else \
        np.arange(result.nranks, dtype=np.int64)
    return path_table(topology, placement)


def _end_s(result) -> float:
    """Where the time axis ends: the printed time of a prediction, else the result's."""
    from ..simulate.timed import printed_s
    return printed_s(result)


MAX_RECORDED_OPS = 200_000  # above this the flow model is not re-run to record rates


def flow_link_usage(schedule, topology, result) -> LinkUsage | None:
    """Re-run the flow model on `schedule` as simulate() ran it for `result` (a prediction's
    placement, protocol and lanes; else the default placement and `result`'s protocol),
    watching every flow's rate; None if the re-run does not reproduce `result` (then the
    caller falls back to even spreading)."""
    from ..collectives import layout
    from ..dtypes import get_dtype
    from ..simulate import flow
    from ..simulate.core import coster
    from ..simulate.protocol import generation_of, get_protocol
    p = schedule.nranks
    lay = layout(schedule.collective, result.size, result.dtype, p)
    timed = result.timed
    if timed is not None:
        proto, lanes = timed.protocol, timed.lanes
    else:
        nodes = len({topology.node_of(r) for r in range(p)})
        proto, lanes = get_protocol(result.protocol, generation_of(topology), nodes), 1.0
    paths = _paths(result, topology)
    cst = coster(paths, proto, lanes, schedule.channels)
    g = flow.build(schedule, cst, schedule.chunk_bounds(lay.block_count),
                   get_dtype(lay.dtype).itemsize)
    if g is None or g["nops"] > MAX_RECORDED_OPS:
        return None
    rec = RateRecorder()
    sim = flow.simulate_graph(g, cst.link_cap, getattr(paths.fabric, "recovery_s", 0.0), rec)
    n = g["nops"]
    end = float(sim.time[:n].max()) + proto.base_latency_s
    if abs(end - result.time_s) > 1e-9 * max(result.time_s, 1e-12) or not rec.changes:
        return None
    t = np.concatenate([c[0] for c in rec.changes])
    op = np.concatenate([c[1] for c in rec.changes])
    rate = np.concatenate([c[2] for c in rec.changes])
    order = np.argsort(op, kind="stable")  # per op, in the order the rates were given
    t, op, rate = t[order], op[order], rate[order]
    prev = np.r_[0.0, rate[:-1]]
    prev[np.r_[True, op[1:] != op[:-1]]] = 0.0
    delta = rate - prev
    moved = delta != 0
    t, op, delta = t[moved], op[moved], delta[moved]
    route = g["route"][g["row"][op]]
    rows, hops = np.nonzero(route >= 0)
    link = route[rows, hops]
    cap = cst.link_cap[link]
    per_link = _steps(t[rows], delta[rows] / np.where(cap > 0, cap, 1.0), link)
    return _usage(topology, cst.link_cap, per_link, _end_s(result), "flow rates")


def _steps(t, d, ln) -> dict:
    """Link -> (times, values) of the running sum of steps `d` at times `t` on links `ln`."""
    order = np.lexsort((t, ln))
    t, d, ln = t[order], d[order], ln[order]
    first = np.flatnonzero(np.r_[True, ln[1:] != ln[:-1]])
    total = np.cumsum(d)
    util = total - np.repeat(total[first] - d[first], np.diff(np.r_[first, len(ln)]))
    util[np.abs(util) < 1e-9] = 0.0
    keep = np.r_[(ln[1:] != ln[:-1]) | (t[1:] != t[:-1]), True]  # one value per time
    t, util, ln = t[keep], util[keep], ln[keep]
    bounds = np.r_[np.flatnonzero(np.r_[True, ln[1:] != ln[:-1]]), len(ln)]
    return {int(ln[a]): (t[a:b], util[a:b]) for a, b in zip(bounds[:-1], bounds[1:])}


class RateRecorder:
    """A flow-model observer (simulate.flow.FlowObserver) that notes (times, flows, rates)
    whenever rates are set (a flow starts, or one ends while links are shared) and
    (time, flows, 0) when flows have sent their bytes."""

    def __init__(self) -> None:
        self.changes: list = []

    def rates(self, now, ops, rates) -> None:
        self.changes.append((np.full(len(ops), now), ops.copy(), rates.copy()))

    def sent(self, when, ops) -> None:
        self.changes.append((np.asarray(when, dtype=np.float64).copy(), ops.copy(),
                             np.zeros(len(ops))))


def _nvls_usage(result, topology) -> LinkUsage | None:
    """In-switch reduction streams at a steady rate: each link busy for `busy` seconds is
    used evenly over the last `body` seconds of the collective (after its fixed latency)."""
    busy = result.link_busy_s
    if not busy:
        return None
    paths = _paths(result, topology)
    body = max(busy.values())
    t0 = result.time_s - body
    per_link = {int(ln): (np.array([t0, result.time_s]), np.array([b / body, 0.0]))
                for ln, b in busy.items() if b > 0}
    return _usage(topology, paths.capacity, per_link, _end_s(result), "steady stream")


def _usage(topology, capacity, per_link, end_s, method="op averages") -> LinkUsage:
    links = tuple(sorted(per_link))
    return LinkUsage(links, tuple(link_name(topology, ln) for ln in links),
                     tuple(per_link[ln][0] for ln in links),
                     tuple(per_link[ln][1] for ln in links),
                     tuple(float(capacity[ln]) for ln in links), float(end_s), method)


def link_name(topology, index: int) -> str:
    ln = topology.links[index]
    return f"{ln.src}→{ln.dst} ({ln.tech})"
