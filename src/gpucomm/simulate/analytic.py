"""The analytic model: alpha-beta along the data-flow DAG, one vectorised update per step.

State is the time each (rank, chunk) gets its value and the time its last reader finished,
plus when each rank's channel put its previous step's bytes on the wire (sends and receives;
steps.py). An op occupies its engines for `bytes / rate` and its data lands `alpha` later
(protocol.py); ops of one step split the links they share evenly, ops of different steps never
contend (that is the flow model's job).

Ring schedules (all-reduce / reduce-scatter / all-gather whose steps are the ring's, whatever
their name: frontier.is_ring_schedule) have a structure the engine can use without building
their steps: each step forwards the chunk received in the step before, and every step has the
same (src, dst, channel) columns, so a per-rank frontier is exact:
`start_s[r] = max(end_{s-1}[r-1], start_{s-1}[r] + x_r)`, `end_s[r] = start_s[r] + x_r + alpha_r`
(the destination chunk is always free: a ring never writes a chunk a rank still has to
forward). That max-plus recurrence is solved in closed form (frontier.ring_line), O(P log P)
instead of O(P^2), O(P) where identical nodes make it periodic; and since its end is a convex
piecewise-linear function of the chunk size, a sweep's sizes come from a few solved points
(frontier.RingCurve). `tests/test_simulate.py` checks the frontier against the general engine
and the closed form against the recurrence.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError
from .caches import schedule_memo
from .result import TimelineRecord
from .steps import StepCoster, expand

if TYPE_CHECKING:
    from ..schedule import Schedule, Step
    from .frontier import RingCurve
    from .steps import Pattern

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bytes = npt.NDArray[np.number[Any]]  # payload bytes per op (and per size of a sweep)
DENSE_LIMIT = 64_000_000  # (ranks x chunks) cells of per-chunk state the general engine accepts


@dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    """The general engine's answer. `end_s` is a float for 1-D bounds and a float64 array (K,)
    for a table of K sizes (then `busy_bytes` is (links, K)), hence `Any`."""
    end_s: Any
    events: int
    busy_bytes: Floats  # bytes each link carried
    timeline: list[TimelineRecord]


@dataclass(frozen=True, kw_only=True, slots=True)
class RingOut:
    """A ring's answer for one size, from its frontier."""
    end_s: float
    ops: int
    busy_s_per_byte: Floats  # busy seconds per link per chunk byte
    chunk_bytes: float  # mean chunk bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class RingShape:
    """What every size of a ring shares (memoised on the coster)."""
    curve: RingCurve
    busy_s_per_byte: Floats  # per link per chunk byte
    ops: int


def run(sched: Schedule, coster: StepCoster, bounds: npt.ArrayLike, itemsize: int,
        trace: bool = False) -> Run:
    """End time, events, link busy bytes and timeline of a schedule, general engine.

    `bounds` may be a 2-D table, one row of chunk bounds per size of a sweep: the sizes then
    run side by side through one pass over the steps (ends (K,), busy (links, K))."""
    p, t = sched.nranks, sched.total_chunks
    if p * t > DENSE_LIMIT:
        raise ConfigError(f"{sched.algorithm} {sched.collective.name} on {p} ranks has {p * t} "
                          f"(rank, chunk) cells; the analytic model handles up to {DENSE_LIMIT}")
    sweep = np.ndim(bounds) == 2
    bounds2 = np.atleast_2d(bounds)
    k = len(bounds2)
    ready = np.zeros((p * t, k))
    readend = np.zeros((p * t, k))
    nch = max(int(sched.channels), 1)
    send_free = np.zeros((p * nch, k))  # (rank, channel) flattened
    recv_free = np.zeros((p * nch, k))
    # pattern id -> (pattern, bytes its ops carried over all its steps)
    carried: dict[int, tuple[Pattern, Floats]] = {}
    events, end = 0, np.zeros(k)
    timeline: list[TimelineRecord] = []
    for si, st in enumerate(sched.steps()):
        if len(st) == 0:
            continue
        pat = coster.pattern(st)
        nbytes = sweep_bytes(st, bounds2, itemsize)
        ch = st.channel
        if ch.size and int(ch.max()) >= nch:
            grow = int(ch.max()) + 1 - nch
            send_free = np.pad(send_free.reshape(p, nch, k), ((0, 0), (0, grow), (0, 0)))
            recv_free = np.pad(recv_free.reshape(p, nch, k), ((0, 0), (0, grow), (0, 0)))
            nch += grow
            send_free, recv_free = send_free.reshape(p * nch, k), recv_free.reshape(p * nch, k)
        sidx, sown = expand(st.src, st.src_chunk, st.nchunks, t)
        didx, down = expand(st.dst, st.dst_chunk, st.nchunks, t)
        seng, deng = st.src * nch + ch, st.dst * nch + ch
        src_ready = _gather_max(ready, sidx, sown, st.nchunks)
        dst_free = np.maximum(_gather_max(ready, didx, down, st.nchunks),
                              _gather_max(readend, didx, down, st.nchunks))
        start = np.maximum(np.maximum(src_ready, dst_free),
                           np.maximum(send_free[seng], recv_free[deng]))
        local = pat.local[:, None]
        xfer = np.where(local | (nbytes <= 0), 0.0, nbytes / pat.share_rate[:, None])
        sent = start + xfer  # the engines are free again; the data lands alpha later
        fin = sent + np.where(local, 0.0, pat.alpha[:, None])
        ready[didx] = fin if down is None else fin[down]
        scatter_max(readend, sidx, fin if sown is None else fin[sown])
        scatter_max(send_free, seng, sent)
        scatter_max(recv_free, deng, sent)
        acc = carried.get(id(pat))
        if acc is None or acc[0] is not pat:
            carried[id(pat)] = (pat, nbytes.astype(np.float64))
        else:
            acc[1][...] += nbytes
        events += len(st)
        np.maximum(end, fin.max(axis=0), out=end)
        if trace:
            timeline.extend(_records(si, st, start[:, 0], fin[:, 0], nbytes[:, 0]))
    busy = np.zeros((coster.paths.nlinks, k))
    for pat, nb in carried.values():
        _account(busy, pat, nb)
    if sweep:
        return Run(end_s=end, events=events, busy_bytes=busy, timeline=timeline)
    return Run(end_s=float(end[0]), events=events, busy_bytes=busy[:, 0], timeline=timeline)


def scatter_max(arr: Floats, idx: Ints, vals: Floats) -> None:
    """np.maximum.at(arr, idx, vals) along axis 0, without ufunc.at's per-element cost."""
    if len(idx) < 2:
        if len(idx):
            arr[idx] = np.maximum(arr[idx], vals)
        return
    order = np.argsort(idx, kind="stable")
    s = idx[order]
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    if new.all():
        arr[idx] = np.maximum(arr[idx], vals)
        return
    starts = np.flatnonzero(new)
    u = s[starts]
    arr[u] = np.maximum(arr[u], np.maximum.reduceat(vals[order], starts, axis=0))


def sweep_bytes(st: Step, bounds2: npt.NDArray[Any], itemsize: int) -> npt.NDArray[Any]:
    """(ops, sizes) payload bytes of a step's ops for each row of chunk bounds."""
    out: npt.NDArray[Any] = (bounds2[:, st.src_chunk + st.nchunks]
                             - bounds2[:, st.src_chunk]) * itemsize
    return out.T


def _gather_max(arr: Floats, idx: Ints, owner: Ints | None, nchunks: Ints) -> Floats:
    """Per op, the max of arr over its chunks (owner: expand()'s op of each chunk, sorted)."""
    if owner is None:
        return arr[idx]
    if not nchunks.all():  # an op without chunks waits on none (reduceat cannot say so)
        out = np.zeros((len(nchunks),) + arr.shape[1:])
        np.maximum.at(out, owner, arr[idx])
        return out
    red: Floats = np.maximum.reduceat(arr[idx], np.cumsum(nchunks) - nchunks, axis=0)
    return red


def _account(busy: Floats, pat: Pattern, nbytes: Bytes) -> None:
    """Busy time of each link: bytes over its payload capacity (what utilisation reports)."""
    valid = pat.table >= 0
    if not valid.any():
        return
    if busy.ndim == 1:
        rows = np.broadcast_to(nbytes[:, None], pat.table.shape)[valid]
        busy += np.bincount(pat.table[valid], weights=rows.astype(np.float64),
                            minlength=len(busy))
        return
    links, op = pat.table[valid], np.nonzero(valid)[0]
    order = np.argsort(links, kind="stable")
    s = links[order]
    starts = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1]]))
    busy[s[starts]] += np.add.reduceat(nbytes[op[order]].astype(np.float64), starts, axis=0)


def _records(si: int, st: Step, start: Floats, fin: Floats,
             nbytes: npt.NDArray[Any]) -> list[TimelineRecord]:
    cols = zip(st.src.tolist(), st.dst.tolist(), st.dst_chunk.tolist(), st.channel.tolist(),
               start.tolist(), fin.tolist(), nbytes.astype(np.int64).tolist())
    return [TimelineRecord(step=si, src=s, dst=d, chunk=c, channel=ch, start_s=a, end_s=b,
                           nbytes=n) for s, d, c, ch, a, b, n in cols]


# ---- the ring frontier -------------------------------------------------------------------
def is_ring(sched: Schedule) -> bool:
    """Whether `sched` is a ring by its steps, whatever its name (frontier.is_ring_schedule);
    remembered on the schedule (ScheduleMemo)."""
    from .frontier import is_ring_schedule
    memo = schedule_memo(sched)
    if memo.is_ring is None:
        memo.is_ring = is_ring_schedule(sched)
    return memo.is_ring


def chain_of(sched: Schedule) -> tuple[Ints, int, int] | None:
    """`sched`'s chain shape (chain.chain_shape: ranks in hop order, pieces, channels) or
    None; remembered on the schedule (ScheduleMemo)."""
    from .caches import UNSET
    from .chain import chain_shape
    memo = schedule_memo(sched)
    if memo.chain is UNSET:
        memo.chain = chain_shape(sched)
    return memo.chain


def ring_many(sched: Schedule, coster: StepCoster, block_counts: Sequence[int],
              itemsize: int, maxmin: bool = False) -> list[RingOut | None]:
    """Per block size (elements): the ring's answer from its frontier, or None where the
    general engine must answer (unequal chunks leave the end open by more than 0.1%, and
    the channels differ or none moves only the larger chunks).
    `maxmin`: an op's wire rate is its max-min fair rate among all the ops of a step (the
    flow model's sharing, flow.maxmin) instead of its even share of its links.

    Every size is a point of one curve per (schedule shape, coster): frontier.RingCurve,
    kept on the coster, so a sweep's sizes (and later calls) solve only the points the
    curve's pieces need."""
    p = sched.nranks
    shape = _ring_curve(sched, coster, maxmin)
    if p == 1:
        return [RingOut(end_s=0.0, ops=0, busy_s_per_byte=shape.busy_s_per_byte,
                        chunk_bytes=0.0) for _ in block_counts]
    cpb = sched.chunks_per_block
    wanted: list[float] = []
    spans: list[tuple[float, float, float, int]] = []
    for count in block_counts:  # chunks of a block: np.array_split's q+1 (extra of them), q
        q, extra = divmod(int(count), cpb)
        lo, hi = float(q * itemsize), float((q + (extra > 0)) * itemsize)
        spans.append((lo, hi, float(count) * itemsize / cpb, extra))
        wanted += [lo, hi]
    ends = shape.curve.values(wanted)
    one_row = len(shape.curve.rows) == 1

    def whole_big(extra: int) -> bool:
        """Whether a channel's chunks are all of the larger size: an all-reduce's channel
        owns P consecutive chunks (the first `extra` are larger), another ring's channel the
        chunk of its index in every block."""
        return extra >= p if sched.collective.name == "all_reduce" else extra > 0
    out: list[RingOut | None] = []
    for lo, hi, mean, extra in spans:
        e_lo, e_hi = ends[lo], ends[hi]
        # chunks differ by an element: every op moves between the smallest and the largest
        # chunk, and the frontier is monotone in every op's time, so the exact end lies
        # between the two; where they agree to 0.1% their middle is the answer (the
        # element is nothing next to a step's latency), else the general engine runs
        if e_hi - e_lo <= 1e-3 * max(e_lo, 1e-30):
            end: float | None = e_lo if lo == hi else 0.5 * (e_lo + e_hi)
        elif one_row and whole_big(extra):
            # every channel runs the same ring and one moves only the larger chunks: it is the
            # slowest (the frontier is monotone in every op's time), so the end is e_hi's
            end = e_hi
        else:
            end = None
        out.append(None if end is None else RingOut(
            end_s=end, ops=shape.ops, busy_s_per_byte=shape.busy_s_per_byte, chunk_bytes=mean))
    return out


def ring_note(sched: Schedule, coster: StepCoster) -> str:
    """How ring_many answered: what SimResult.note says."""
    curve = _ring_curve(sched, coster).curve
    p, c = sched.nranks, max(int(sched.channels), 1)
    periods = sorted({d for _, _, d in curve.rows})
    text = (f"ring frontier in closed form, steps not generated; {len(curve.rows)} of {c} "
            "channel(s) distinct")
    if periods and periods[-1] < p:
        text += (f"; ranks repeat every {'/'.join(map(str, periods))}: that many of {p} "
                 "solved per channel, the others their copies")
    return text


def _ring_curve(sched: Schedule, coster: StepCoster, maxmin: bool = False) -> RingShape:
    """What the sizes of a ring's shape share, memoised on the coster."""
    p, c = sched.nranks, max(int(sched.channels), 1)
    key = (sched.collective.name, p, c)
    hit = coster.rings.get((*key, maxmin))
    if hit is not None:
        known: RingShape = hit
        return known
    from .frontier import RingCurve
    x0, a, nsteps, pat = ring_rows(sched, coster, maxmin)
    # the protocols' costers share it (a sweep of a ring across nodes makes a coster per
    # protocol and size, and the links of a large cluster are a million)
    paths = coster.paths
    per_byte = paths.cache.ring_busy.get(key)
    if per_byte is None:
        unit = np.zeros(paths.nlinks)
        _account(unit, pat, np.full(len(pat.alpha), float(nsteps)))
        per_byte = paths.cache.ring_busy[key] = unit / paths.capacity / paths.lane_scale
    made = coster.rings[(*key, maxmin)] = RingShape(curve=RingCurve(zip(x0, a), nsteps),
                                                    busy_s_per_byte=per_byte,
                                                    ops=nsteps * len(pat.alpha))
    return made


def ring_rows(sched: Schedule, coster: StepCoster, maxmin: bool = False
              ) -> tuple[Floats, Floats, int, Pattern]:
    """A ring's per-op wire seconds per byte x0 and latency a, as (channel, rank) arrays (an op
    of every step from rank r to r+1 on a channel), its steps, and the probe step's pattern.
    `maxmin`: each op at its max-min fair rate among the step's ops (ring_many)."""
    from ..schedule import step
    p, c = sched.nranks, max(int(sched.channels), 1)
    r = np.arange(p)
    if sched.collective.name == "all_reduce":
        # channel ch owns chunks ch*P .. ch*P+P-1 (see algorithms/ring.py); one probe step
        probe = step(np.tile(r, c), np.tile((r + 1) % p, c), (np.arange(c) * p)[:, None].repeat(
            p, 1).reshape(-1) + np.tile(r, c), channel=np.repeat(np.arange(c), p))
        nsteps = 2 * (p - 1)
    else:
        probe = step(np.repeat(r, c), np.repeat((r + 1) % p, c),
                     (r[:, None] * c + np.arange(c)).reshape(-1),
                     channel=np.tile(np.arange(c), p))
        nsteps = p - 1
    pat = coster.pattern(probe)
    # rows: channels, columns: ranks (the all-reduce probe is channel-major, the others not)
    if sched.collective.name == "all_reduce":
        def shape(v: Floats) -> Floats:
            return v.reshape(c, p)
    else:
        def shape(v: Floats) -> Floats:
            return np.ascontiguousarray(v.reshape(p, c).T)
    rate = pat.share_rate
    if maxmin:  # every op of a step moving at once, shared max-min fairly (flow.py)
        from .flow import maxmin as fair
        moving = ~pat.local
        rate = np.full(len(probe), np.inf)
        rate[moving] = fair(pat.table[moving], coster.link_cap, pat.flow_cap[moving])
    x0 = shape(np.where(pat.local, 0.0, 1.0 / rate))
    a = shape(np.asarray(pat.alpha, dtype=np.float64))
    return x0, a, nsteps, pat
