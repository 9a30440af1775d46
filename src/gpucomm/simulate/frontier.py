"""The ring frontier in closed form, and as a curve in the chunk size shared by a sweep.

A ring step's ops start on the max-plus recurrence of analytic.py's docstring:
S_s[r] = max(S_{s-1}[r-1] + w[r-1], S_{s-1}[r] + x[r]) with x an op's wire time and w = x + a
(a its latency). The end is the longest of the paths through that recurrence. When every op
moves the same chunk of c bytes, x = c * x0 (x0 = 1 / rate), so each path's length is a line
in c and the end f(c) = max over paths of lines is convex and piecewise linear. `ring_line`
returns f(c) and the slope of the path that attains it (a supporting line of f);
`RingCurve` answers a sweep's sizes from a few of them: where the supporting line at one
evaluated size passes through the value at the next, f is that line in between (convexity:
f lies under the chord and over every supporting line), so the sizes in between are exact
without being solved.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ..schedule import Schedule, Step

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
# (src, dst, chunk, reduce, channel) of one ring step: ring_step
RingStep = tuple[Ints, Ints, Ints, bool, Ints]

LINE_REL = 1e-12  # a supporting line "passes through" a point within this relative gap


def period(x0: npt.ArrayLike, a: npt.ArrayLike, limit: int = 512) -> int:
    """The smallest d <= limit dividing P with x0 and a repeating every d ranks (a ring over
    identical nodes repeats every node), else P."""
    xv, av = np.asarray(x0), np.asarray(a)
    p = len(xv)
    for d in range(1, min(limit, p // 2) + 1):
        if p % d == 0 and (xv.reshape(-1, d) == xv[:d]).all() and \
                (av.reshape(-1, d) == av[:d]).all():
            return d
    return p


def ring_line(x0: npt.ArrayLike, a: npt.ArrayLike, nsteps: int, c: float = 1.0,
              d: int = 0) -> tuple[float, float]:
    """(end, slope) of `nsteps` ring steps whose op r takes c*x0[r] on the wire + a[r].

    With S_s[r] the start of rank r's op in step s (S_0 = 0) and w = x + a, a path of
    K = nsteps-1 moves ending at r advances k times (from r-k to r, collecting w) and stays
    K-k times, each stay best spent on the largest x among the ranks it passed. So
    S_K[r] = max_k (sum of w over r-k..r-1) + (K-k) * max(x[r-k..r]); for each distinct value
    m of x the k with max(x[r-k..r]) = m form an interval, and the best k in it is a range
    maximum of v*m - C[v] (C the prefix sum of w over the unrolled ring), taken with a sparse
    table. O(P log P) per distinct x, exactly the recurrence (tests/test_simulate.py). The
    slope is d(end)/dc along the maximising path (its x0 moves and stays, 0 for stays at c=0).

    `d`: a period of x0 and a (`period`; 0: none known). Then S_K repeats every d ranks, so
    d ranks are solved, and along each residue class mod d the maximised term changes by the
    same amount per period, so a range maximum is at one end of each class: O(P + d^2).
    """
    xv = np.asarray(x0, dtype=np.float64)
    av = np.asarray(a, dtype=np.float64)
    x = c * xv
    p = len(x)
    w = x + av
    k_max = nsteps - 1
    if k_max <= 0:
        r = int(np.argmax(w))
        return float(w[r]), float(xv[r])
    n = p + k_max  # unrolled positions v; rank(v) = (v - K) mod P, rank r sits at u = r + K
    rank = (np.arange(n) - k_max) % p
    xu = x[rank]
    csum = np.concatenate([[0.0], np.cumsum(w[rank])])  # C[v] = sum of w over positions < v
    periodic = 0 < d < p and p % d == 0
    q = d if periodic else p  # the ranks solved
    u = np.arange(q) + k_max
    idx = np.arange(n)
    best = np.full(q, -np.inf)
    arg_v = np.zeros(q, dtype=np.int64)
    arg_m0 = np.zeros(q)
    for m in distinct(x):
        last_gt = np.maximum.accumulate(np.where(xu > m, idx, -1))[u]
        last_eq = np.maximum.accumulate(np.where(xu == m, idx, -1))[u]
        lo = np.maximum(last_gt + 1, u - k_max)
        hi = last_eq
        ok = np.flatnonzero(hi >= lo)
        if not ok.size:
            continue
        g = idx * m - csum[:n]
        if periodic:  # g(v + d) - g(v) = d m - (w summed over a period)
            v = _periodic_argmax(g, lo[ok], hi[ok], d, d * m >= float(w[:d].sum()))
        else:
            v = _range_argmax(g, lo[ok], hi[ok])
        cand = csum[u[ok]] - csum[v] + (k_max - u[ok] + v) * m
        better = cand > best[ok]
        sel = ok[better]
        best[sel], arg_v[sel] = cand[better], v[better]
        arg_m0[sel] = m / c if c > 0 else 0.0
    total = best + w[:q]
    r = int(np.argmax(total))
    ur, vr = r + k_max, int(arg_v[r])
    xs = float(xv[rank[vr:ur]].sum())
    slope = xs + (k_max - ur + vr) * arg_m0[r] + xv[r]
    return float(total[r]), float(slope)


def distinct(a: npt.ArrayLike) -> npt.NDArray[Any]:
    """The distinct values of `a`, sorted (np.unique without its first call's import of
    numpy.ma, a noticeable share of a one-size prediction)."""
    s: npt.NDArray[Any] = np.sort(np.asarray(a).reshape(-1))
    return s[np.r_[True, s[1:] != s[:-1]]] if s.size else s


def _periodic_argmax(g: Floats, lo: Ints, hi: Ints, d: int, rising: bool) -> Ints:
    """argmax of g[lo_i..hi_i] where g changes by the same amount every d positions (up if
    `rising`): the best of each residue class's last (rising) or first member in range."""
    rho = np.arange(d)
    first = lo[:, None] + (rho - lo[:, None]) % d
    cand = hi[:, None] - (hi[:, None] - rho) % d if rising else first
    valid = first <= hi[:, None]
    vals = np.where(valid, g[np.where(valid, cand, 0)], -np.inf)
    out: Ints = cand[np.arange(len(lo)), vals.argmax(axis=1)]
    return out


def _range_argmax(values: Floats, lo: Ints, hi: Ints) -> Ints:
    """argmax of values[lo_i..hi_i] for each i (inclusive bounds), by a sparse table."""
    vals: list[Floats] = [values]
    args: list[Ints] = [np.arange(len(values), dtype=np.int64)]
    span = 1
    longest = int((hi - lo + 1).max())
    while 2 * span <= longest:
        pv, pa = vals[-1], args[-1]
        right = pv[span:] > pv[:-span]
        vals.append(np.where(right, pv[span:], pv[:-span]))
        args.append(np.where(right, pa[span:], pa[:-span]))
        span *= 2
    j = np.floor(np.log2(hi - lo + 1)).astype(np.int64)
    out = np.empty(len(lo), dtype=np.int64)
    for lv in distinct(j):
        sel = j == lv
        tv, ta = vals[lv], args[lv]
        i1, i2 = lo[sel], hi[sel] - (1 << int(lv)) + 1
        out[sel] = np.where(tv[i2] > tv[i1], ta[i2], ta[i1])
    return out


class RingCurve:
    """f(c): the end of a ring's steps when every op moves c bytes, for any c, from as few
    solved points as the curve's pieces need; each row of `rows` is one channel's (x0, a)
    and f is the slowest channel's end (identical channels are solved once)."""

    def __init__(self, rows: Iterable[tuple[npt.ArrayLike, npt.ArrayLike]], nsteps: int) -> None:
        seen: set[tuple[bytes, bytes]] = set()
        self.rows: list[tuple[Floats, Floats, int]] = []
        for x0, a in rows:
            key = (np.asarray(x0).tobytes(), np.asarray(a).tobytes())
            if key not in seen:
                seen.add(key)
                xv, av = np.asarray(x0, dtype=np.float64), np.asarray(a, dtype=np.float64)
                self.rows.append((xv, av, period(xv, av)))
        self.nsteps = nsteps
        # c -> (f(c), slope of a supporting line at c)
        self.points: dict[float, tuple[float, float]] = {}
        self.solved = 0

    def line(self, c: float) -> tuple[float, float]:
        hit = self.points.get(c)
        if hit is None:
            hit = max((ring_line(x0, a, self.nsteps, c, d) for x0, a, d in self.rows),
                      key=lambda t: t[0])
            self.points[c] = hit
            self.solved += 1
        return hit

    def values(self, cs: Iterable[float]) -> dict[float, float]:
        """c -> f(c) for every c of `cs`: the ends of the range solved, then each interval
        whose left supporting line passes through its right end filled from that line,
        the others split at their middle point."""
        cs = sorted({float(c) for c in cs})
        out: dict[float, float] = {}
        if not cs:
            return out
        stack = [(0, len(cs) - 1)]
        while stack:
            i, j = stack.pop()
            fi, si = self.line(cs[i])
            fj, _ = self.line(cs[j])
            out[cs[i]], out[cs[j]] = fi, fj
            if j - i < 2:
                continue
            if abs(fi + si * (cs[j] - cs[i]) - fj) <= LINE_REL * max(abs(fj), 1e-300):
                for k in range(i + 1, j):
                    out[cs[k]] = self.points[cs[k]][0] if cs[k] in self.points else \
                        fi + si * (cs[k] - cs[i])
                continue
            k = (i + j) // 2
            stack += [(i, k), (k, j)]
        return out


# ---- which schedules are rings ----------------------------------------------------------
RING_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")
CHECK_OPS = 200_000  # ops of a generated schedule compared step by step (2 steps at least)


def ring_step(collective: str, p: int, c: int, s: int) -> RingStep:
    """(src, dst, chunk, reduce, channel) of step `s` of the C-channel ring on `p` ranks:
    every step sends r -> r+1 on each channel and forwards the chunk received the step
    before (all-reduce: reduce-scatter then all-gather over chunks ch*P + k; reduce-scatter
    and all-gather: block k's chunk ch)."""
    r = np.arange(p, dtype=np.int64)
    if collective == "all_reduce":
        reduce = s < p - 1
        k = (r - s) % p if reduce else (r + 1 - (s - (p - 1))) % p
        chunk = ((np.arange(c) * p)[:, None] + k).reshape(-1)
        return np.tile(r, c), np.tile((r + 1) % p, c), chunk, reduce, np.repeat(np.arange(c), p)
    reduce = collective == "reduce_scatter"
    blocks = (r - s - 1) % p if reduce else (r - s) % p
    return (np.repeat(r, c), np.repeat((r + 1) % p, c),
            (blocks[:, None] * c + np.arange(c)).reshape(-1), reduce,
            np.tile(np.arange(c), p))


def is_ring_schedule(sched: Schedule) -> bool:
    """Whether `sched`'s steps are exactly the ring's (ring_step), whatever it is called:
    the frontier is exact only for that structure. Steps held in memory (a schedule loaded
    from JSON) are all compared; a generated schedule's first CHECK_OPS ops are, and its
    generator (a registered builder's code, not data) stands for the rest."""
    coll, p, c = sched.collective.name, sched.nranks, max(int(sched.channels), 1)
    if coll not in RING_COLLECTIVES or sched.scratch_blocks or p < 2:
        return False
    if sched.total_chunks != c * p or sched.chunks_per_block != (c * p if coll == "all_reduce"
                                                                 else c):
        return False
    nsteps = 2 * (p - 1) if coll == "all_reduce" else p - 1
    lazy = callable(sched.source)
    checked, seen = 0, 0
    for st in sched.steps():
        if seen >= nsteps or not _is_ring_step(st, coll, p, c, seen):
            return False
        seen += 1
        checked += len(st)
        if lazy and checked > CHECK_OPS and seen >= 2:
            return True
    return seen == nsteps


def _is_ring_step(st: Step, coll: str, p: int, c: int, s: int) -> bool:
    if len(st) != p * c:
        return False
    src, dst, chunk, reduce, channel = ring_step(coll, p, c, s)
    return bool(np.array_equal(st.src, src) and np.array_equal(st.dst, dst)
                and np.array_equal(st.src_chunk, chunk) and np.array_equal(st.dst_chunk, chunk)
                and (st.nchunks == 1).all() and (st.reduce == reduce).all()
                and np.array_equal(st.channel, channel))
