"""Per-link utilisation over a simulated collective, from its timeline.

Every op of a traced SimResult crosses the links of its route (the simulator's own path
table, same placement); its bytes are spread evenly over [start, end) on each of them, as a
fraction of the link's achievable bandwidth. Integrated over time this gives back exactly the
simulator's `link_busy_s` (bytes / capacity). It is each op's average rate: where the flow
model changed an op's rate midway (another flow joined its link) the averages of overlapping
ops can add up to more than 1 for a while, and the analytic model, which ignores sharing,
shows above 1 what a link would need to carry (the demand, not a rate the link reached).

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

NVLS_ALGORITHM = "nvls"


@dataclass(frozen=True)
class LinkUsage:
    """Piecewise-constant utilisation: for link `links[k]`, the value `util[k][j]` holds from
    `times[k][j]` to `times[k][j + 1]` (the last value is 0)."""
    links: tuple  # link indices of the topology, in topology order
    names: tuple  # "src→dst (tech)"
    times: tuple  # per link: np.ndarray of breakpoints, s
    util: tuple  # per link: np.ndarray, fraction of achievable bandwidth
    capacity: tuple  # per link: achievable bytes/s
    end_s: float

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


def link_usage(result, topology) -> LinkUsage | None:
    """The utilisation of every link the traced `result` used; None if it has no timeline."""
    if result.algorithm == NVLS_ALGORITHM:
        return _nvls_usage(result, topology)
    tl = result.timeline
    if not tl:
        return None
    from ..simulate.core import path_table
    arr = np.asarray([rec[1:8] for rec in tl], dtype=np.float64)
    src, dst, ch = arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64), arr[:, 3].astype(np.int64)
    start, end, nbytes = arr[:, 4], arr[:, 5], arr[:, 6]
    paths = path_table(topology, np.arange(result.nranks, dtype=np.int64))
    routes = paths.routes(src, dst, ch)
    moving = (end > start) & (nbytes > 0)
    ops, hops = np.nonzero((routes >= 0) & moving[:, None])
    link = routes[ops, hops]
    cap = paths.capacity[link]
    rate = nbytes[ops] / (end[ops] - start[ops]) / np.where(cap > 0, cap, 1.0)
    # a +rate step at each op's start and a -rate step at its end, summed per link in time
    t = np.concatenate([start[ops], end[ops]])
    d = np.concatenate([rate, -rate])
    ln = np.concatenate([link, link])
    order = np.lexsort((t, ln))
    t, d, ln = t[order], d[order], ln[order]
    first = np.flatnonzero(np.r_[True, ln[1:] != ln[:-1]])
    total = np.cumsum(d)
    util = total - np.repeat(total[first] - d[first], np.diff(np.r_[first, len(ln)]))
    util[np.abs(util) < 1e-9] = 0.0
    keep = np.r_[(ln[1:] != ln[:-1]) | (t[1:] != t[:-1]), True]  # one value per time
    t, util, ln = t[keep], util[keep], ln[keep]
    bounds = np.r_[np.flatnonzero(np.r_[True, ln[1:] != ln[:-1]]), len(ln)]
    per_link = {int(ln[a]): (t[a:b], util[a:b]) for a, b in zip(bounds[:-1], bounds[1:])}
    return _usage(topology, paths.capacity, per_link, result.time_s)


def _nvls_usage(result, topology) -> LinkUsage | None:
    """In-switch reduction streams at a steady rate: each link busy for `busy` seconds is
    used evenly over the last `body` seconds of the collective (after its fixed latency)."""
    busy = result.link_busy_s
    if not busy:
        return None
    from ..simulate.core import path_table
    paths = path_table(topology, np.arange(result.nranks, dtype=np.int64))
    body = max(busy.values())
    t0 = result.time_s - body
    per_link = {int(ln): (np.array([t0, result.time_s]), np.array([b / body, 0.0]))
                for ln, b in busy.items() if b > 0}
    return _usage(topology, paths.capacity, per_link, result.time_s)


def _usage(topology, capacity, per_link, end_s) -> LinkUsage:
    links = tuple(sorted(per_link))
    return LinkUsage(links, tuple(link_name(topology, ln) for ln in links),
                     tuple(per_link[ln][0] for ln in links),
                     tuple(per_link[ln][1] for ln in links),
                     tuple(float(capacity[ln]) for ln in links), float(end_s))


def link_name(topology, index: int) -> str:
    ln = topology.links[index]
    return f"{ln.src}→{ln.dst} ({ln.tech})"
