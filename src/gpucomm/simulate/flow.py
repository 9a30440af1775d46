"""The flow model: event-driven, every link shared max-min fairly among the transfers on it.

1. Build the DAG of a schedule as a dense predecessor matrix (one row per op): the writer of
   its source chunks, the writer and last reader of its destination chunks, and the previous
   step of its source's send engine and its destination's receive engine on its channel
   (steps.py). An engine step with several ops becomes one barrier node.
2. Simulate: an op starts when its predecessors allow and becomes a flow of `bytes` with a
   max-min fair rate (progressive filling over the links of all active flows, with the
   protocol's per-flow caps as private links); when its bytes are sent its engines are free,
   and its data lands `alpha` later (steps.py). Time jumps from event to event: the next flow
   to finish or the next data to land. Ops that end
   within a relative 1e-12 of each other are one event, so the symmetric steps of a channel
   (every rank of a ring) cost one event, not one per rank.
3. Rates are recomputed only when the set of flows changes; while no link carries two flows,
   a new flow simply gets its own bottleneck rate and nothing else moves.

Large schedules are checked for ready ops in a sliding window of steps (`WINDOW_STEPS` past
the first step with an op not yet started); below `EXACT_OPS` ops every op is checked.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NotRequired, Protocol, TypedDict, cast

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError
from .steps import Pattern, StepCoster, expand, op_bytes

if TYPE_CHECKING:
    from ..schedule import Schedule

WINDOW_STEPS = 2
EXACT_OPS = 20_000
_TOL = 1e-12

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
Links = npt.NDArray[np.signedinteger[Any]]  # link indices per row, -1 padded
# a step with engine barriers: (first op, ops, send and receive barrier per op or None)
Group = tuple[int, int, Ints | None, Ints | None]


class FlowObserver(Protocol):
    """Watches the event loop (simulate_graph's `observer`): every rate it gives the flows
    whenever the set of flows changes, and every transfer's end. Arrays are the loop's own:
    copy what you keep."""

    def rates(self, now: float, ops: Ints, rates: Floats) -> None:
        """At `now`, the moving flows `ops` (op indices) run at `rates` bytes/s."""

    def sent(self, when: Floats, ops: Ints) -> None:
        """Ops `ops` finished sending their bytes at `when`."""


class OpGraph(TypedDict):
    """A schedule's ops and what each waits for, as the event loop reads them.

    Time slots: op i's end (data landed) is i, its transfer end nops + i, barrier b's time
    2 nops + b, and 2 nops + ngroups is the sentinel (time 0) a "no predecessor" points at."""
    nops: int
    ngroups: int  # engine barriers (steps with several ops on one engine)
    pred: Links  # (ops, k) time slots each op waits for
    bytes: Floats  # per op (0 for a copy inside one rank)
    row: npt.NDArray[np.int32]  # per op: its row of the per-row tables (FlowGraph)
    gsend: Ints | None  # per op: its send barrier or -1 (None: no barriers)
    grecv: Ints | None  # per op: its receive barrier or -1
    gsize: Ints  # per barrier: ops it waits for
    step_ptr: Ints  # ops of step s are step_ptr[s]:step_ptr[s + 1]


class FlowGraph(OpGraph):
    """build()'s graph: the ops with their routes and costs per row (symmetry.py builds
    reduced ones)."""
    route: npt.NDArray[np.int32]  # (rows, hops) links, -1 padded
    alpha_row: Floats  # per row: latency from transfer end to landing, s
    cap_row: Floats  # per row: the protocol's rate cap, B/s
    alone_row: Floats  # per row: the rate with every link to itself, B/s
    windowed: NotRequired[bool]  # whether the window of steps applies (default: by size)


def _touched(m: Links, crowded: Bools, changed: Links, nlinks: int) -> Bools:
    """The crowded flows (rows of link table `m`) linked to the links `changed` through
    chains of links they share: the union of the max-min groups a change can move."""
    mark = np.zeros(nlinks + 1, dtype=bool)  # index nlinks stands for padding (-1)
    mark[np.where(changed >= 0, changed, nlinks).reshape(-1)] = True
    mark[nlinks] = False
    mi = np.where(m >= 0, m, nlinks)
    sel = np.zeros(len(m), dtype=bool)
    while True:
        new = crowded & ~sel & mark[mi].any(axis=1)
        if not new.any():
            return sel
        sel |= new
        mark[mi[new].reshape(-1)] = True
        mark[nlinks] = False


def build(sched: Schedule, coster: StepCoster, bounds: Ints, itemsize: int) -> FlowGraph | None:
    p, t = sched.nranks, sched.total_chunks
    nch = max(int(sched.channels), 1)
    writer = np.full(p * t, -1, dtype=np.int64)
    reader = np.full(p * t, -1, dtype=np.int64)
    send_last = np.full((p, nch), -1, dtype=np.int64)
    recv_last = np.full((p, nch), -1, dtype=np.int64)
    preds, sizes, rows, step_ptr = [], [], [], [0]
    alphas, caps, alones = [], [], []  # per pattern row, like the route table
    groups: list[Group] = []  # the steps with barriers
    group_sizes = []
    pattern_rows: dict[int, tuple[Pattern, Ints]] = {}
    tables = []
    nops, ngroups, table_rows = 0, 0, 0
    for st in sched.steps():
        n = len(st)
        if n == 0:
            continue
        ch = st.channel
        if int(ch.max()) >= nch:
            grow = int(ch.max()) + 1 - nch
            send_last = np.pad(send_last, ((0, 0), (0, grow)), constant_values=-1)
            recv_last = np.pad(recv_last, ((0, 0), (0, grow)), constant_values=-1)
            nch += grow
        pat = coster.pattern(st)
        hit = pattern_rows.get(id(pat))
        if hit is None or hit[0] is not pat:  # (holding pat keeps its id unique)
            hit = pattern_rows[id(pat)] = (pat, table_rows + np.arange(n, dtype=np.int64))
            tables.append(pat.table)
            alphas.append(pat.alpha)
            caps.append(pat.flow_cap)
            alones.append(pat.alone_rate)
            table_rows += n
        ids = nops + np.arange(n, dtype=np.int64)
        sidx, sown = expand(st.src, st.src_chunk, st.nchunks, t)
        didx, down = expand(st.dst, st.dst_chunk, st.nchunks, t)
        cols = [send_last[st.src, ch][:, None], recv_last[st.dst, ch][:, None],
                _per_op(writer[sidx], sown, n), _per_op(writer[didx], down, n),
                _per_op(reader[didx], down, n)]
        preds.append(np.concatenate(cols, axis=1).astype(np.int32))
        writer[didx] = ids if down is None else ids[down]
        reader[didx] = -1
        reader[sidx] = ids if sown is None else ids[sown]
        # engines: one node per (rank, channel) of this step; a barrier if it has several ops
        members: list[Ints | None] = []
        for last, rank, side in ((send_last, st.src, "send"), (recv_last, st.dst, "recv")):
            engines = _engine_groups(pat, side, rank, ch, nch)
            if engines is None:  # one op per engine: the op itself is the node
                last[rank, ch] = ids
                members.append(None)
                continue
            uniq, inv, cnt = engines
            multi = cnt > 1
            gid = np.full(len(uniq), -1, dtype=np.int64)
            gid[multi] = ngroups + np.arange(int(multi.sum()))
            ngroups += int(multi.sum())
            group_sizes.append(cnt[multi])
            member = gid[inv]
            node = np.where(member >= 0, -(member + 2), ids)
            rep = np.empty(len(uniq), dtype=np.int64)
            rep[inv] = node
            last[uniq // nch, uniq % nch] = rep
            members.append(member)
        if members[0] is not None or members[1] is not None:
            groups.append((nops, n, members[0], members[1]))
        nb = op_bytes(st, bounds, itemsize).astype(np.float64)
        sizes.append(np.where(pat.local, 0.0, nb))
        rows.append(hit[1])
        nops += n
        step_ptr.append(nops)
    if nops == 0:
        return None
    width = max(m.shape[1] for m in preds)
    uniform = all(m.shape[1] == width for m in preds)
    pred = np.concatenate(preds) if uniform else np.full((nops, width), -1, dtype=np.int32)
    if not uniform:
        at = 0
        for m in preds:
            pred[at:at + len(m), :m.shape[1]] = m
            at += len(m)
    # One time array holds, in order: each op's end (its data has landed), each op's transfer
    # end (its engines are free again), each barrier's time, and a sentinel 0 for "no pred".
    # Engine columns (0, 1) wait for transfer ends, data columns for ends.
    sentinel = 2 * nops + ngroups
    if sentinel >= 2 ** 31 - 1:
        raise ConfigError(f"{nops} ops are more than the flow model handles (2**30); use the "
                          "analytic model")
    eng = pred[:, :2]
    eng_op = eng >= 0
    eng_group = eng < -1
    eng[eng_group] = 2 * nops - eng[eng_group] - 2
    eng[eng_op] += nops
    pred[pred == -1] = sentinel
    # columns that repeat another or never name a predecessor cost gathers for nothing
    keep: list[int] = []
    for k in range(pred.shape[1]):
        col = pred[:, k]
        if (col == sentinel).all() or any(np.array_equal(col, pred[:, j]) for j in keep):
            continue
        keep.append(k)
    pred = np.ascontiguousarray(pred[:, keep or [0]])
    hops = max((tb.shape[1] for tb in tables), default=0)
    route = np.full((table_rows, max(hops, 1)), -1, dtype=np.int32)
    at = 0
    for tb in tables:
        route[at:at + len(tb), :tb.shape[1]] = tb
        at += len(tb)
    return {
        "nops": nops, "ngroups": ngroups, "pred": pred,
        "bytes": np.concatenate(sizes), "row": np.concatenate(rows).astype(np.int32),
        "route": route, "alpha_row": np.concatenate(alphas), "cap_row": np.concatenate(caps),
        "alone_row": np.concatenate(alones),
        "gsend": _members(groups, nops, 2) if ngroups else None,
        "grecv": _members(groups, nops, 3) if ngroups else None,
        "gsize": np.concatenate(group_sizes) if group_sizes else np.zeros(0, np.int64),
        "step_ptr": np.array(step_ptr, dtype=np.int64),
    }


def _rowmax(x: Floats) -> Floats:
    """x.max(axis=1), column by column: several times faster for a few wide columns."""
    out = x[:, 0].copy()
    for k in range(1, x.shape[1]):
        np.maximum(out, x[:, k], out=out)
    return out


def _rowmin(x: Floats) -> Floats:
    out = x[:, 0].copy()
    for k in range(1, x.shape[1]):
        np.minimum(out, x[:, k], out=out)
    return out


def _engine_groups(pat: Pattern, side: str, rank: Ints, ch: Ints,
                   nch: int) -> tuple[Ints, Ints, Ints] | None:
    """(engine keys, op -> key, ops per key) of a step, or None if every op has its own
    engine; memoised on the step's pattern (it depends on src/dst/channel only)."""
    memo: dict[tuple[str, int], tuple[Ints, Ints, Ints] | None] = \
        pat.__dict__.setdefault("engines", {})
    key = (side, nch)
    if key not in memo:
        k = rank * nch + ch
        uniq, inv, cnt = np.unique(k, return_inverse=True, return_counts=True)
        memo[key] = None if len(uniq) == len(k) else (uniq, inv, cnt)
    return memo[key]


def _members(groups: list[Group], nops: int, col: Literal[2, 3]) -> Ints:
    out = np.full(nops, -1, dtype=np.int64)
    for g in groups:
        member = g[col]
        if member is not None:
            out[g[0]:g[0] + g[1]] = member
    return out


def _per_op(values: Ints, owner: Ints | None, n: int) -> Ints:
    if owner is None:
        return values[:, None]
    width = int(np.bincount(owner, minlength=n).max())
    out = np.full((n, width), -1, dtype=np.int64)
    first = np.searchsorted(owner, np.arange(n))
    pos = np.arange(len(owner)) - first[owner]
    out[owner, pos] = values
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    """The flow model's answer for a schedule."""
    end_s: float
    events: int  # event batches
    ops: int
    busy_s: Floats  # per link
    times: tuple[Floats, Floats] | None  # (start, end) per op, when traced


def run(sched: Schedule, coster: StepCoster, bounds: Ints, itemsize: int, trace: bool = False
        ) -> Run:
    """The flow model's end time, event batches, ops, link busy seconds and op times."""
    g = build(sched, coster, bounds, itemsize)
    nl = coster.paths.nlinks
    if g is None:
        return Run(end_s=0.0, events=0, ops=0, busy_s=np.zeros(nl), times=None)
    sim = simulate_graph(g, coster.link_cap, getattr(coster.paths.fabric, "recovery_s", 0.0))
    n = g["nops"]
    busy = np.zeros(nl)
    links = g["route"][g["row"]]
    valid = links >= 0
    np.add.at(busy, links[valid], np.broadcast_to(g["bytes"][:, None], links.shape)[valid])
    busy = busy / np.where(coster.paths.capacity > 0, coster.paths.capacity, 1.0)
    times = (sim.start, sim.time[:n]) if trace else None
    return Run(end_s=float(sim.time[:n].max()), events=sim.events, ops=n, busy_s=busy,
               times=times)


def simulate_graph(g: FlowGraph, link_cap: Floats, recovery_s: float = 0.0,
                   observer: FlowObserver | None = None) -> _Sim:
    """Run the event loop over a graph in build()'s format (symmetry.py builds reduced ones;
    g["windowed"], if given, says whether the window of steps applies, as for the whole
    schedule); the returned state holds each op's times. `recovery_s`: congestion control's
    ramp (fabric.py), 0 without one. `observer` sees every rate and transfer end."""
    sim = _Sim(g, link_cap, recovery_s, observer)
    sim.run()
    return sim


class _Sim:
    """The event loop. An op starts when its predecessors allow, transfers its bytes as a flow
    (its engines are busy meanwhile), and its data lands `alpha` later (when readers may go)."""

    def __init__(self, g: FlowGraph, link_cap: Floats, recovery_s: float = 0.0,
                 observer: FlowObserver | None = None) -> None:
        self.g = g
        self.observer = observer
        # congestion control's ramp: a flow whose rate rises by dR owes dR * recovery_s bytes
        self.recovery_s = recovery_s
        n = g["nops"]
        self.n = n
        self.time = np.full(2 * n + g["ngroups"] + 1, np.inf)  # end | transfer end | barrier
        self.time[-1] = 0.0
        self.start = np.full(n, np.nan)
        self.started = np.zeros(n, dtype=bool)
        self.gleft = g["gsize"].astype(np.int64).copy()
        self.gmax = np.zeros(g["ngroups"])
        self.link_cap = link_cap
        self.link_count = np.zeros(len(link_cap), dtype=np.int64)
        self.changed: Links | None = None  # links of the flows that last started or ended
        self.events = 0
        step_ptr = g["step_ptr"]
        self.step_of = np.repeat(np.arange(len(step_ptr) - 1), np.diff(step_ptr))
        self.unstarted = np.diff(step_ptr).astype(np.int64)
        self.lo = 0
        self.shared = 0  # links carrying more than one flow right now
        self.wait = np.zeros(0, dtype=np.int64)
        self.hi = 0

    def _waiting(self) -> Ints:
        """Ops not started yet in the window of steps whose readiness is checked now."""
        g = self.g
        sp = g["step_ptr"]
        nsteps = len(sp) - 1
        while self.lo < nsteps and self.unstarted[self.lo] == 0:
            self.lo += 1
        windowed = g.get("windowed", g["nops"] > EXACT_OPS)
        hi = min(self.lo + WINDOW_STEPS, nsteps) if windowed else nsteps
        if hi > self.hi:  # steps entering the window
            self.wait = np.concatenate([self.wait[~self.started[self.wait]],
                                        np.arange(sp[self.hi], sp[hi], dtype=np.int64)])
            self.hi = hi
        else:
            self.wait = self.wait[~self.started[self.wait]]
        return self.wait

    def run(self) -> float:
        g = self.g
        t = 0.0
        act = np.zeros(0, dtype=np.int64)  # flows moving bytes
        act_m = np.zeros((0, g["route"].shape[1]), dtype=np.int32)  # their links
        rem = np.zeros(0)
        rate = np.zeros(0)
        gap, gap_end = np.zeros(0), np.zeros(0)  # congestion control's ramp: deficit, until
        land = np.zeros(0, dtype=np.int64)  # bytes sent, data in flight for alpha
        land_t = np.zeros(0)
        contended = False
        check = True  # readiness changes only when a time was recorded
        done = 0
        while done < self.n:
            if check:
                wait = self._waiting()
                check = False
                if len(wait):
                    # most waiting ops still wait on their first predecessor: filter on it,
                    # then take the max over all predecessors of the few that remain
                    wait = wait[np.isfinite(self.time[g["pred"][wait, 0]])]
                    st = _rowmax(self.time[g["pred"][wait]])
                    ok = np.isfinite(st)
                    new = wait[ok]
                    if len(new):
                        s = np.maximum(st[ok], t)
                        self.start[new] = s
                        self.started[new] = True
                        cnt = np.bincount(self.step_of[new] - self.lo)  # new ops are >= lo
                        self.unstarted[self.lo:self.lo + len(cnt)] -= cnt
                        zero = g["bytes"][new] <= 0
                        if zero.any():  # nothing to move: the engines are free at once
                            z = new[zero]
                            self._sent(z, s[zero])
                            land = np.concatenate([land, z])
                            land_t = np.concatenate([land_t, s[zero] + g["alpha_row"][g["row"][z]]])
                            check = True
                        flows = new[~zero]
                        if len(flows):
                            fm = self._links(flows)
                            act = np.concatenate([act, flows])
                            act_m = np.concatenate([act_m, fm])
                            rem = np.concatenate([rem, g["bytes"][flows]])
                            rate = np.concatenate([rate, np.zeros(len(flows))])
                            gap = np.concatenate([gap, np.zeros(len(flows))])
                            gap_end = np.concatenate([gap_end, np.zeros(len(flows))])
                            self._load(fm)
                            old = rate.copy() if self.recovery_s else None
                            rate = self._rerate(act, rate, contended, fm,
                                                float(self.start[flows].max()))
                            gap, gap_end = self._ramp(t, old, rate, gap, gap_end)
                            contended = self.shared > 0
                    if check:
                        continue  # zero-byte ops may free engines for more ops at this time
            t_next = np.inf
            if len(land):
                t_next = float(land_t.min())
            if len(act):
                eff = self._effective(t, rate, gap, gap_end)
                fin_t = t + rem / eff
                t_next = min(t_next, float(fin_t.min()), self._ramp_end(t, gap_end))
            if not np.isfinite(t_next):
                raise RuntimeError("flow model stalled: ops wait on ops that never run")
            tol = _TOL * max(t_next, 1e-9)
            self.events += 1
            if len(act):
                gone = fin_t <= t_next + tol
                rem = rem - eff * (t_next - t)
                if gone.any():
                    ids = act[gone]
                    freed = act_m[gone]
                    self._unload(freed)
                    keep = ~gone
                    act, act_m, rem, rate = act[keep], act_m[keep], rem[keep], rate[keep]
                    gap, gap_end = gap[keep], gap_end[keep]
                    self._sent(ids, np.full(len(ids), t_next))
                    land = np.concatenate([land, ids])
                    land_t = np.concatenate([land_t, t_next + g["alpha_row"][g["row"][ids]]])
                    check = True
                    if len(act) and contended:
                        old = rate.copy() if self.recovery_s else None
                        rate = self._rerate(act, rate, contended, freed, t_next)
                        gap, gap_end = self._ramp(t_next, old, rate, gap, gap_end)
                    contended = self.shared > 0
            t = t_next
            land, land_t, landed = self._land(land, land_t, t + tol)
            if landed:
                done += landed
                check = True
        return t

    def _land(self, land: Ints, land_t: Floats, until: float) -> tuple[Ints, Floats, int]:
        """Record the data landed by `until`: (still in flight, their times, how many landed)."""
        due = land_t <= until
        if not due.any():
            return land, land_t, 0
        self.time[land[due]] = land_t[due]
        return land[~due], land_t[~due], int(due.sum())

    def _rerate(self, act: Ints, rate: Floats, contended: bool, changed: Links,
                now: float) -> Floats:
        """Rates of the moving flows `act` after those on `changed` links started or ended at
        `now` (told to the observer)."""
        self.changed = changed
        rate = self._rates(act, rate, contended)
        if self.observer is not None:
            self.observer.rates(now, act, rate)
        return rate

    def _ramp(self, t: float, old: Floats | None, rate: Floats, gap: Floats,
              gap_end: Floats) -> tuple[Floats, Floats]:
        """Congestion control's ramp after the rates changed at time t (`old`: the rates
        before, None without congestion control). A running flow whose fair rate rises by dR
        climbs to it (DCQCN fast recovery): it runs dR short for `recovery_s` (the same bytes
        as the halving climb, fabric.recovery_s), but only while the rise lasts: if its rate
        falls again (a competitor is back, as the next step of a pipelined collective comes
        within microseconds) the deficit shrinks by the fall, since the limiter never got
        there. A flow that just started (old 0) starts at its share (it has no state to
        climb from)."""
        if not self.recovery_s or old is None:
            return gap, gap_end
        live = gap_end > t
        gap = np.where(live, gap, 0.0)
        change = np.where(old > 0, rate - old, 0.0)
        gap = np.maximum(gap + np.minimum(change, 0.0), 0.0)  # a fall eats the deficit
        rise = np.maximum(change, 0.0)
        gap_end = np.where(rise > 0, t + self.recovery_s, np.where(gap > 0, gap_end, 0.0))
        return gap + rise, gap_end

    def _ramp_end(self, t: float, gap_end: Floats) -> float:
        """The next time a ramp ends (a rate changes), inf if none runs."""
        if not self.recovery_s:
            return np.inf
        return float(gap_end[gap_end > t].min(initial=np.inf))

    @staticmethod
    def _effective(t: float, rate: Floats, gap: Floats, gap_end: Floats) -> Floats:
        """Rates less the ramps' deficits still running at t."""
        if not len(gap) or not (gap_end > t).any():
            return rate
        return np.maximum(rate - np.where(gap_end > t, gap, 0.0), rate * 1e-3)

    def _sent(self, ids: Ints, when: Floats) -> None:
        """Record transfer ends; close engine barriers whose last member just finished."""
        g, n = self.g, self.n
        self.time[n + ids] = when
        if self.observer is not None and len(ids):
            self.observer.sent(when, ids)
        if not g["ngroups"]:
            return
        for groups in (g["gsend"], g["grecv"]):
            if groups is None:  # (both are arrays when there are barriers)
                continue
            member = groups[ids]
            sel = member >= 0
            if sel.any():
                m = member[sel]
                np.subtract.at(self.gleft, m, 1)
                np.maximum.at(self.gmax, m, when[sel])
                closed = m[self.gleft[m] == 0]
                self.time[2 * n + closed] = self.gmax[closed]

    def _links(self, ops: Ints) -> npt.NDArray[np.int32]:
        return self.g["route"][self.g["row"][ops]]

    def _load(self, m: Links) -> None:
        m = m[m >= 0]
        np.add.at(self.link_count, m, 1)
        if len(m) and self.link_count[m].max() > 1:  # only new flows can create sharing
            self.shared = int(np.count_nonzero(self.link_count > 1))

    def _unload(self, m: Links) -> None:
        np.subtract.at(self.link_count, m[m >= 0], 1)
        if self.shared:  # sharing can only end where it existed
            self.shared = int(np.count_nonzero(self.link_count > 1))

    def _rates(self, act: Ints, rate: Floats, was_contended: bool) -> Floats:
        """Rates after the set of flows changed on the links `self.changed` (the links of the
        flows that started or ended; None: anywhere). Max-min decomposes over groups of flows
        that share links, so flows with every link to themselves just get their bottleneck,
        and progressive filling runs only over the crowded flows of the groups the change
        touched (the others keep the rates they had)."""
        fresh = rate <= 0
        if self.shared == 0 and not was_contended:
            rate[fresh] = self._alone(act[fresh])
            return rate
        m = self._links(act)
        # (numpy's stub types .any(axis=1) as maybe a scalar: on a 2-D array it is 1-D)
        crowded = cast(Bools, ((self.link_count[np.where(m >= 0, m, 0)] > 1)
                               & (m >= 0)).any(axis=1))
        alone = ~crowded
        rate[alone] = self._alone(act[alone])
        if crowded.any():
            touched = crowded if self.changed is None else \
                _touched(m, crowded, self.changed, len(self.link_count))
            rate[touched] = self._maxmin(act[touched])
        return rate

    def _alone(self, ops: Ints) -> Floats:
        return self.g["alone_row"][self.g["row"][ops]]

    def _maxmin(self, ops: Ints) -> Floats:
        return maxmin(self._links(ops), self.link_cap, self.g["cap_row"][self.g["row"][ops]])


def maxmin(m: Links, link_cap: Floats, fcap: Floats) -> Floats:
    """Max-min fair rates of flows with links `m` (rows, -1 padded; a link listed k times in
    a row carries k shares of that flow) by progressive filling; the per-flow caps `fcap`
    act as private links. Each round raises every live flow to the next link's or cap's
    level and freezes the flows there, so rounds = distinct levels, each O(entries)."""
    valid = m >= 0
    used, inv = np.unique(m[valid], return_inverse=True)
    cap = link_cap[used].astype(np.float64).copy()
    fcap = np.asarray(fcap, dtype=np.float64)
    na = len(m)
    rate = np.zeros(na)
    live = np.ones(na, dtype=bool)
    flow_of = np.broadcast_to(np.arange(na)[:, None], m.shape)[valid]
    link_of = inv.reshape(-1)
    for _ in range(4 * na + 8):
        if not live.any():
            break
        on = live[flow_of]
        cnt = np.bincount(link_of[on], minlength=len(cap))
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(cnt > 0, cap / cnt, np.inf)
        inc = min(float(share.min(initial=np.inf)),
                  float((fcap - rate)[live].min(initial=np.inf)))
        if not np.isfinite(inc):
            rate[live] = np.inf
            break
        rate[live] += inc
        cap -= inc * cnt
        full = (cnt > 0) & (cap <= 1e-9 * np.maximum(link_cap[used], 1.0))
        hit = np.zeros(na, dtype=bool)
        if full.any():
            hit[flow_of[full[link_of] & on]] = True
        hit |= rate >= fcap * (1 - 1e-12)
        live &= ~hit
    return rate
