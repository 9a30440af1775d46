"""simulate(): time one schedule on one topology with the analytic or the flow model."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..collectives import BufferLayout, layout
from ..dtypes import DTypeLike, get_dtype
from ..errors import ConfigError
from . import analytic, flow, symmetry
from .caches import per_placement, topology_memo
from .chain import chain_many
from .paths import PathTable
from .protocol import PROTOCOLS, Protocol, generation_of, get_protocol, with_net_sync
from .result import LinkBusy, SimResult, TimelineRecord
from .steps import StepCoster

if TYPE_CHECKING:
    from ..schedule import Schedule
    from ..topology import Topology

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
# schedule rank -> topology rank, or one such row per channel (a 2-D table)
Ranks = Iterable[int] | Iterable[Iterable[int]]
# (id(schedule), id(topology), placement, protocol, lanes, dtype, redop): the answers of a
# SizeSweep (SweepPass), each kept with its schedule and topology (so an id stays theirs)
SweepKey = tuple[int, int, bytes, Protocol, float, str, str]


MODELS = ("analytic", "flow")
FLOW_MAX_RANKS = 16_384  # op by op; beyond, only the symmetric ring (symmetry.py) is answered
# op by op, the flow model holds ~100 bytes per op and events cost ~0.1 ms per 1,000 ops on
# one core (a 128-GPU contended ring, 260,000 ops: 20 s, 85 MB): beyond this many ops it
# refuses before building anything rather than run for an hour or out of memory
FLOW_MAX_OPS = 8_000_000
# a ring with more ops than this is answered from its frontier with max-min fair rates
# (analytic.ring_many(maxmin=True)) instead of op by op: equal to the event loop where the
# most loaded link stays busy (bandwidth-bound; tests/test_fabric_scale.py), up to ~13% slower
# where the steps' flows do not all overlap (latency-bound); 8,192 contended GPUs in seconds
FLOW_RING_OPS = 200_000
CHAIN_NOTE = "chain frontier: every hop routed once, the pipeline stepped window by window"


class SizeSweep:
    """The sizes of one sweep, passed as `sweep=` to simulate() (or predict()): the analytic
    model then answers a schedule for every size of `sizes` at its first call, in one pass
    over the schedule's steps with the sizes side by side (the same arithmetic, vectorised),
    and keeps the answers here for the calls of the other sizes. `clear()` forgets them.

    >>> from gpucomm.algorithms import build
    >>> from gpucomm.topology import build_topology
    >>> sched, topo = build("all_reduce", "ring", 8), build_topology("dgx-h100")
    >>> sweep = SizeSweep([1024, 1 << 20])
    >>> a = simulate(sched, topo, 1024, sweep=sweep).time_s
    >>> a == simulate(sched, topo, 1024).time_s, len(sweep.answers)  # one pass per protocol
    (True, 3)
    """

    def __init__(self, sizes: Iterable[int]) -> None:
        self.sizes = frozenset(int(x) for x in sizes)
        self.answers: dict[SweepKey, SweepPass] = {}

    def clear(self) -> None:
        self.answers = {}

    def __repr__(self) -> str:
        return f"SizeSweep({len(self.sizes)} sizes, {len(self.answers)} answered)"


def simulate(schedule: Schedule, topology: Topology, nbytes: int | str, *,
             dtype: DTypeLike = "float32", model: str = "analytic",
             protocol: str | Protocol = "auto", ranks: Ranks | None = None,
             trace: bool = False, lanes: float = 1.0, redop: str = "sum",
             sweep: SizeSweep | None = None) -> SimResult:
    """Time `schedule` moving an nccl-tests size of `nbytes` on `topology`.

    `ranks[i]` is the topology rank that runs schedule rank i (default 0..P-1); a 2-D table
    gives channel c the row c % rows (rings laid out differently per channel, as NCCL's ring
    search does: valid for schedules whose channels are independent, like ring). `protocol`
    is "ll", "ll128", "simple", "auto" (the fastest) or a Protocol value. `lanes`: NCCL
    channels each schedule channel stands for (scales per-channel caps). `sweep`: the sizes
    this call is one of (SizeSweep), answered together by the analytic model.

    >>> from gpucomm.algorithms import build
    >>> from gpucomm.topology import build_topology
    >>> r = simulate(build("all_reduce", "ring", 8), build_topology("dgx-h100"), 1 << 30)
    >>> r.busbw_GBps > 300
    True
    """
    if model not in MODELS:
        raise ConfigError(f"unknown model {model!r}: allowed are {', '.join(MODELS)}")
    placement = _placement(schedule.nranks, topology, ranks)
    lay = layout(schedule.collective, nbytes, dtype, schedule.nranks)
    gen = generation_of(topology)
    nodes = per_placement(topology_memo(topology).nodes, topology, placement, _node_count)
    if isinstance(protocol, Protocol):
        protos = [protocol]
    elif str(protocol).lower() == "auto":
        protos = [get_protocol(p, gen, nodes) for p in PROTOCOLS]
    else:
        protos = [get_protocol(protocol, gen, nodes)]
    if nodes > 1 and not isinstance(protocol, Protocol):  # a given Protocol value is as given
        share = lay.size / max(schedule.nranks, 1)
        protos = [with_net_sync(p, topology, share) for p in protos]
    swept = sweep is not None and model == "analytic" and not trace and lay.size in sweep.sizes
    results = (
        _from_sweep(sweep, schedule, topology, dtype, placement, proto, lanes, redop, lay)
        if sweep is not None and swept
        else _one(schedule, topology, lay, placement, proto, model, trace, lanes, redop)
        for proto in protos)
    return min(results, key=lambda res: res.time_s)  # the first of the fastest


def _placement(p: int, topology: Topology, ranks: Ranks | None) -> Ints:
    if ranks is None:
        if p > topology.nranks:
            raise ConfigError(f"the schedule has {p} ranks but topology {topology.name!r} has "
                              f"only {topology.nranks} GPUs")
        return np.arange(p, dtype=np.int64)
    arr = np.asarray(ranks if isinstance(ranks, np.ndarray) else list(ranks), dtype=np.int64)
    if arr.ndim not in (1, 2) or arr.shape[-1] != p:
        raise ConfigError(f"ranks has {arr.shape[-1] if arr.ndim else 0} entries per row; the "
                          f"schedule has {p} ranks")
    if arr.size and (arr.min() < 0 or arr.max() >= topology.nranks):
        raise ConfigError(f"ranks must lie in 0..{topology.nranks - 1}")
    rows = np.sort(np.atleast_2d(arr), axis=1)
    if p > 1 and (rows[:, 1:] == rows[:, :-1]).any():
        raise ConfigError("ranks names the same GPU twice")
    if arr.ndim == 2 and (rows != rows[0]).any():
        raise ConfigError("every row of a per-channel ranks table must use the same GPUs")
    return arr


def _node_count(topology: Topology, placement: Ints) -> int:
    nodes = np.sort(topology.router.rank_node[placement.reshape(-1)])
    return int((nodes[1:] != nodes[:-1]).sum()) + 1 if nodes.size else 0


def path_table(topology: Topology, placement: Ints) -> PathTable:
    """The placement's PathTable, kept on the topology (TopologyMemo.paths)."""
    return per_placement(topology_memo(topology).paths, topology, placement, PathTable)


def coster(paths: PathTable, proto: Protocol, lanes: float, channels: int) -> StepCoster:
    """The protocol's StepCoster of a placement, kept on its PathTable (PathMemo.costers)."""
    key = (proto, float(lanes), int(channels))
    hit = paths.cache.costers.get(key)
    if hit is None:
        if len(paths.cache.costers) > 256:
            paths.cache.costers.clear()
        hit = paths.cache.costers[key] = StepCoster(paths, proto, lanes, channels)
    return hit


def _one(schedule: Schedule, topology: Topology, lay: BufferLayout, placement: Ints,
         proto: Protocol, model: str, trace: bool, lanes: float, redop: str) -> SimResult:
    paths = path_table(topology, placement)
    cst = coster(paths, proto, lanes, schedule.channels)
    itemsize = get_dtype(lay.dtype).itemsize
    bounds = schedule.chunk_bounds(lay.block_count)
    timeline: Sequence[TimelineRecord] = ()
    events, ops, note = 0, 0, ""
    end: float | None = None
    busy: LinkBusy | Floats
    if model == "analytic":
        if not trace and analytic.is_ring(schedule):
            ring = analytic.ring_many(schedule, cst, [lay.block_count], itemsize)[0]
            if ring is not None:
                end, ops = ring.end_s, ring.ops
                busy = LinkBusy(ring.busy_s_per_byte, ring.chunk_bytes)
                events = ops
                note = analytic.ring_note(schedule, cst)
        shape = analytic.chain_of(schedule) if end is None and not trace else None
        chain = chain_many(schedule, shape, cst, bounds, itemsize) if shape else None
        if chain is not None:
            end, ops = float(chain.end_s[0]), chain.ops
            busy = chain.busy_bytes[:, 0] / paths.capacity / paths.lane_scale
            events, note = ops, CHAIN_NOTE
        if end is None:
            run = analytic.run(schedule, cst, bounds, itemsize, trace)
            end, ops, timeline = run.end_s, run.events, run.timeline
            busy = run.busy_bytes / paths.capacity / paths.lane_scale
            events = ops
    else:
        # node-shift symmetry holds only where routing is deterministic (no fabric policy:
        # ECMP hashing, failed cables and lanes make nodes differ)
        symmetric = not trace and paths.fabric is None
        out = symmetry.ring_all_reduce_flow(schedule, cst, bounds, itemsize, placement) \
            if symmetric else None
        if out is not None:
            end, events, ops, busy = out.end_s, out.events, out.ops, out.busy_s
            note = (f"node-shift symmetry: {out.simulated} of "
                    f"{ops // (2 * (schedule.nranks - 1))} ops per step simulated, one node "
                    "standing for all")
            if out.extrapolated:
                note += (f"; periodic from a step on: the last {out.extrapolated} of "
                         f"{2 * (schedule.nranks - 1)} steps extrapolated")
        elif analytic.is_ring(schedule) and not schedule.ops_at_most(FLOW_RING_OPS) and \
                (ring := analytic.ring_many(schedule, cst, [lay.block_count], itemsize,
                                            maxmin=True)[0]) is not None:
            end, ops = ring.end_s, ring.ops
            busy = LinkBusy(ring.busy_s_per_byte, ring.chunk_bytes)
            events = 0
            note = (f"flow model from the ring's frontier: each op at its max-min fair rate "
                    f"among a step's {schedule.nranks * max(schedule.channels, 1):,} ops, "
                    f"{ops:,} ops not simulated one by one (more than {FLOW_RING_OPS:,})")
            if trace:  # the same recurrence stepped op by op: the trace of this very run
                timeline = _ring_trace(schedule, cst, bounds, itemsize)
        else:
            if schedule.nranks > FLOW_MAX_RANKS:
                raise ConfigError(
                    f"the flow model simulates {schedule.algorithm} {schedule.collective.name} "
                    f"op by op up to {FLOW_MAX_RANKS:,} ranks ({schedule.nranks:,} asked; only a "
                    "ring all-reduce on a node-symmetric cluster goes beyond): use --sim-model "
                    "analytic above that")
            if not schedule.ops_at_most(FLOW_MAX_OPS):
                why = "routes hashed per flow (a fabric model) make nodes differ, so no " \
                    "symmetry applies" if paths.fabric is not None else "no symmetry applies"
                raise ConfigError(
                    f"the flow model would simulate {schedule.algorithm} "
                    f"{schedule.collective.name} on {schedule.nranks:,} ranks op by op, more "
                    f"than {FLOW_MAX_OPS:,} ops ({why}): use --sim-model analytic, which times the "
                    "same routes and fabric, or fewer nodes")
            fl = flow.run(schedule, cst, bounds, itemsize, trace)
            end, events, ops = fl.end_s, fl.events, fl.ops
            busy = fl.busy_s / paths.lane_scale  # a link in m of L lanes carries m/L of the bytes
            if trace and fl.times is not None:
                timeline = _flow_timeline(schedule, fl.times, bounds, itemsize)
    if end is None:  # every branch above sets it; say so rather than time a None
        raise ConfigError(f"no time for {schedule.algorithm} {schedule.collective.name}")
    return _result(schedule, lay, proto, model, end, events, ops, busy, timeline, redop, note)


def _result(schedule: Schedule, lay: BufferLayout, proto: Protocol, model: str, end: float,
            events: int, ops: int, busy: LinkBusy | Floats, timeline: Sequence[TimelineRecord],
            redop: str, note: str = "") -> SimResult:
    t = (end + proto.base_latency_s) if schedule.nranks > 1 else 0.0
    algbw, busbw = lay.busbw(t) if t > 0 else (0.0, 0.0)
    link_busy = busy if isinstance(busy, LinkBusy) else LinkBusy(busy)
    return SimResult(collective=lay.collective.name, algorithm=schedule.algorithm,
                     protocol=proto.name, model=model, nranks=schedule.nranks, size=lay.size,
                     count=lay.count, dtype=lay.dtype.name, time_s=t, algbw_GBps=algbw,
                     busbw_GBps=busbw, link_busy_s=link_busy, events=events, ops=ops,
                     timeline=tuple(timeline), redop=redop,
                     root=schedule.root if lay.collective.rooted else -1,
                     channels=schedule.channels, note=note)


def _from_sweep(sweep: SizeSweep, schedule: Schedule, topology: Topology, dtype: DTypeLike,
                placement: Ints, proto: Protocol, lanes: float, redop: str,
                lay: BufferLayout) -> SimResult:
    """The analytic answer for `lay` from a pass over every size of the sweep."""
    key: SweepKey = (id(schedule), id(topology), placement.tobytes(), proto, float(lanes),
                     str(dtype), redop)
    hit = sweep.answers.get(key)
    if hit is None or hit.schedule is not schedule or hit.paths.topo is not topology:
        hit = sweep.answers[key] = _sweep_pass(schedule, topology, sweep.sizes, dtype,
                                               placement, proto, lanes, redop)
    res = hit.result(lay)
    if res is None:
        res = _one(schedule, topology, lay, placement, proto, "analytic", False, lanes, redop)
    return res


class SweepPass:
    """One schedule's pass over a sweep's sizes (one key of SizeSweep.answers): the ring's
    frontier answers every size at once (`ring`: each size's RingOut; its curve solves only
    the points the sizes' pieces need). Other sizes, a chain's or the general engine's, run
    when asked, one size a row: each size is a column of its own there, so alone it gets the
    numbers a batch gives it. A sweep of a ring across nodes asks most keys one size (the
    ring's network messages follow the size, so below the largest sizes each size times its
    own protocol): a result, and its link busy seconds, is made for the sizes asked only."""

    def __init__(self, *, schedule: Schedule, sizes: frozenset[int], paths: PathTable,
                 proto: Protocol, lanes: float, redop: str,
                 ring: dict[int, analytic.RingOut], note: str) -> None:
        self.schedule, self.paths, self.proto, self.lanes = schedule, paths, proto, lanes
        self.sizes, self.redop, self.ring, self.note = sizes, redop, ring, note

    def result(self, lay: BufferLayout) -> SimResult | None:
        """The answer for `lay`, None where the pass has none (not a size of the sweep, or
        one the general engine refuses: alone, it raises as it would alone)."""
        size, sched = lay.size, self.schedule
        if size not in self.sizes:
            return None
        busy: LinkBusy | Floats
        if size in self.ring:
            ring = self.ring[size]
            end, ops, note = ring.end_s, ring.ops, self.note
            busy = LinkBusy(ring.busy_s_per_byte, ring.chunk_bytes)
        else:
            cst = coster(self.paths, self.proto, self.lanes, sched.channels)
            row = np.array([sched.chunk_bounds(lay.block_count)])
            itemsize = get_dtype(lay.dtype).itemsize
            shape = analytic.chain_of(sched)
            chain = chain_many(sched, shape, cst, row, itemsize) if shape else None
            scale = self.paths.capacity * self.paths.lane_scale  # lanes carry m/L of a link
            if chain is not None:
                end, ops, note = float(chain.end_s[0]), chain.ops, CHAIN_NOTE
                busy = chain.busy_bytes[:, 0] / scale
            elif sched.nranks * sched.total_chunks > analytic.DENSE_LIMIT:
                return None  # the general engine refuses: _from_sweep asks _one, which says why
            else:
                run = analytic.run(sched, cst, row, itemsize)
                end, ops, note = float(run.end_s[0]), run.events, ""
                busy = run.busy_bytes[:, 0] / scale
        return _result(sched, lay, self.proto, "analytic", end, ops, ops, busy, (), self.redop,
                       note)


def _sweep_pass(schedule: Schedule, topology: Topology, sizes: frozenset[int],
                dtype: DTypeLike, placement: Ints, proto: Protocol, lanes: float,
                redop: str) -> SweepPass:
    """A ring's frontier over every size of `sizes` (nothing yet for other schedules)."""
    paths = path_table(topology, placement)
    ring: dict[int, analytic.RingOut] = {}
    note = ""
    if analytic.is_ring(schedule):
        lays = []
        for size in sorted(sizes):
            try:
                lays.append(layout(schedule.collective, size, dtype, schedule.nranks))
            except ConfigError:  # a size this dtype cannot hold: asked for alone, if ever
                continue
        cst = coster(paths, proto, lanes, schedule.channels)
        note = analytic.ring_note(schedule, cst)
        itemsize = get_dtype(lays[0].dtype).itemsize if lays else 1
        outs = analytic.ring_many(schedule, cst, [lay.block_count for lay in lays], itemsize)
        ring = {lay.size: out for lay, out in zip(lays, outs) if out is not None}
    return SweepPass(schedule=schedule, sizes=sizes, paths=paths, proto=proto, lanes=lanes,
                     redop=redop, ring=ring, note=note)


def _ring_trace(schedule: Schedule, cst: StepCoster, bounds: Ints,
                itemsize: int) -> list[TimelineRecord]:
    """The timeline of a ring the flow model answered from its frontier (flow_ring.py), up to
    FLOW_MAX_OPS records."""
    if not schedule.ops_at_most(FLOW_MAX_OPS):
        raise ConfigError(f"a trace of {schedule.algorithm} {schedule.collective.name} on "
                          f"{schedule.nranks:,} ranks would hold more than {FLOW_MAX_OPS:,} ops: "
                          "drop --trace/--html or use fewer nodes or a smaller size")
    from .flow_ring import ring_timeline
    return ring_timeline(schedule, cst, bounds, itemsize)


def _flow_timeline(schedule: Schedule, times: tuple[Floats, Floats], bounds: Ints,
                   itemsize: int) -> list[TimelineRecord]:
    start, end = times
    out: list[TimelineRecord] = []
    k = 0
    for si, st in enumerate(schedule.steps()):
        n = len(st)
        if n == 0:
            continue
        nb = (bounds[st.src_chunk + st.nchunks] - bounds[st.src_chunk]) * itemsize
        cols = zip(st.src.tolist(), st.dst.tolist(), st.dst_chunk.tolist(), st.channel.tolist(),
                   start[k:k + n].tolist(), end[k:k + n].tolist(), nb.astype(np.int64).tolist())
        out += [TimelineRecord(step=si, src=s, dst=d, chunk=c, channel=ch, start_s=a, end_s=b,
                               nbytes=m) for s, d, c, ch, a, b, m in cols]
        k += n
    return out
