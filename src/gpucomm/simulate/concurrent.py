"""Groups running one collective at the same time, timed together on shared links.

In a training step every TP group runs its all-reduce at once, every DP group its gradient
reduction, and so on; beside the job, a second job (`--other-job`) may run the same
collective on groups shaped like the job's. When these groups' traffic crosses the same links
(the NICs of a node that its GPUs share, the PCIe root complex of a PCIe box, the fabric's
cables) each gets a share of them. The simulator times one schedule; this module builds one
schedule that is the side-by-side union of g copies of the algorithm the simulator chose for
one group (copy j runs on ranks j*n .. j*n+n-1, placed on group j's GPUs) and lets the
simulator time them together. NCCL's tree closed forms (tree, nvls_tree) are not schedules:
their groups are timed by the simulator's own tree model, each tree at its slowest edge with
every group's connections on the cables (trees_together, below). It lives in `simulate` so that
every view (sim, plan, the tuner file) times a second job through the same functions.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..collectives import Collective, get_collective
from ..errors import ConfigError
from ..schedule import FIELDS, Schedule, Step, concat, step
from .nccl import CLOSED, node_groups
from .nccl_trees import tree_routes
from .paths import Routes
from .result import SimResult

if TYPE_CHECKING:
    from ..topology import Topology
    from .fabric import FabricPolicy
    from .timed import Timed

Groups = Sequence[Sequence[int]]  # groups of topology ranks, each shaped like the job's


def _shift(st: Step, offset: int, channel_offset: int = 0) -> Step:
    cols = dict(zip(FIELDS, st.columns()))
    return step(cols["src"] + offset, cols["dst"] + offset, cols["src_chunk"],
                cols["dst_chunk"], cols["nchunks"], cols["reduce"],
                cols["channel"] + channel_offset)


def union_schedule(sched: Schedule, copies: int,
                   channel_offsets: Iterable[int] | None = None) -> Schedule:
    """`copies` independent copies of `sched` on disjoint ranks, as one schedule.

    Chunk numbering is kept: a collective whose buffer has one block per rank keeps its block
    size when the caller scales nbytes by `copies` (see `union_nbytes`). Copy j's channels are
    shifted by channel_offsets[j] (default: none). No shift is needed to keep the copies on
    their own NICs: the simulator sends each op through the NICs next to its own GPUs.
    """
    offs = list(channel_offsets) if channel_offsets is not None else [0] * copies
    steps = tuple(concat([_shift(s, j * sched.nranks, offs[j]) for j in range(copies)])
                  for s in sched.steps())
    return Schedule(sched.collective, sched.nranks * copies, f"{sched.algorithm}x{copies}",
                    sched.chunks_per_block, steps, sched.scratch_blocks, sched.root,
                    sched.channels, sched.params)


def union_nbytes(collective: Collective | str, nbytes: int, n: int, copies: int) -> int:
    """The nccl-tests size of the union that keeps each copy's block size."""
    coll = get_collective(collective)
    return nbytes * coll.size_blocks(n * copies) // coll.size_blocks(n)


def time_together(collective: Collective | str, nbytes: int, topology: Topology,
                  groups: Groups, single: SimResult, *, dtype: str = "bfloat16",
                  model: str = "flow") -> float | None:
    """Seconds until all `groups` (lists of topology ranks) finish, each running what was
    timed for `single` (a prediction for one group: its schedule, protocol, lanes and, where
    its placement is on `groups[0]`, its ring orders, moved to each group). A schedule's
    copies are timed as one union schedule by `model`; NCCL's tree closed forms (tree,
    nvls_tree) each at its own tree's pace with every group's connections on the cables
    (time_each). None without a timed run, or for a closed form whose groups meet on no
    modelled link. Each group's inter-node traffic leaves by its own GPUs' NICs (the
    simulator's rail rule), so groups contend exactly where they share a NIC or a cable.
    """
    from .core import simulate
    timed = single.timed
    if timed is None or not groups:
        return None
    if timed.schedule is None:
        each = time_each(collective, topology, groups, single)
        return None if each is None else max(each)
    sched = union_schedule(timed.schedule, len(groups))
    res = simulate(sched, topology, union_nbytes(collective, nbytes, timed.schedule.nranks,
                                                 len(groups)),
                   dtype=dtype, model=model, protocol=timed.protocol,
                   ranks=union_placement(timed.placement, groups), lanes=timed.lanes)
    return float(res.time_s)


def time_each(collective: Collective | str, topology: Topology, groups: Groups,
              single: SimResult) -> list[float] | None:
    """Each group's own seconds when all `groups` run what was timed for `single` at once,
    where the model knows each one's end: NCCL's tree closed forms on a fabric model, whose
    trees each move at their slowest edge's pace (trees_together). None for a
    schedule, whose union is one run (time_together), and where the groups meet on no
    modelled link (no fabric model; nvls inside one node)."""
    timed = single.timed
    if timed is None or timed.schedule is not None or not groups:
        return None
    if timed.topology is not topology:
        timed = dataclasses.replace(timed, topology=topology)
    return trees_together(get_collective(collective), timed,
                          moved(timed.placement, groups))


def job_within(collective: Collective | str, nbytes: int, topology: Topology, own: Groups,
               second: Groups, single: SimResult, *, dtype: str = "bfloat16",
               model: str = "flow", alone: float | None = None) -> float | None:
    """The end of the job's groups `own` when a second job's groups `second` run the same
    collective at the same moment (both timed as for `single`); None where they cannot be
    timed together. Tree closed forms: the job's own groups' end, known exactly (time_each).
    Schedules: the union's end, less what the second job's own slowness adds
    (without_second_job, against the job alone, `alone`: timed here where not given)."""
    each = time_each(collective, topology, [*own, *second], single)
    if each is not None:
        return max(each[:len(own)])
    kw = {"dtype": dtype, "model": model}
    together = time_together(collective, nbytes, topology, [*own, *second], single, **kw)
    if together is None:
        return None
    if alone is None:
        alone = time_together(collective, nbytes, topology, own, single, **kw)
    return without_second_job(together, alone,
                              time_together(collective, nbytes, topology, second, single, **kw))


def moved(placement: npt.ArrayLike, groups: Groups) -> list[npt.NDArray[np.int64]]:
    """The timed `placement` of one group (schedule rank -> GPU, or a row per channel)
    moved from groups[0]'s GPUs to each group's; where it does not lie on groups[0], each
    group's GPUs in order."""
    first = {int(r): i for i, r in enumerate(groups[0])}
    pl = np.asarray(placement, dtype=np.int64)
    if not all(int(r) in first for r in pl.flat):
        return [np.asarray(g, dtype=np.int64) for g in groups]
    pos = np.vectorize(first.__getitem__, otypes=[np.int64])(pl)
    return [np.asarray(g, dtype=np.int64)[pos] for g in groups]


def union_placement(placement: npt.ArrayLike, groups: Groups) -> npt.NDArray[np.int64]:
    """The union's placement: `placement` moved to each group (moved), side by side."""
    return np.concatenate(moved(placement, groups), axis=-1)


def with_second_job(result: SimResult, topology: Topology, job: Sequence[int], second: Groups,
                    *, model: str = "analytic") -> SimResult:
    """`result` (a prediction for the job on ranks `job` of `topology`) with a second job
    running the same collective at the same moment on each group of `second` (lists of
    topology ranks shaped like `job`): both timed together on the shared cables (job_within:
    a schedule's union by `model`; NCCL's tree and nvls_tree at each tree's slowest edge
    under both jobs' connections), and the job's time raised by the slowdown over the job
    alone, recorded as a bound of its timed run. A job inside one node (nvls) sends nothing
    over the network, and a closed form without a fabric model meets no modelled link: a
    second job on other nodes leaves either as it is."""
    from ..collectives import layout
    timed = result.timed
    if not second or result.nranks < 2 or timed is None:
        return result
    coll, dtype, kw = result.collective, result.dtype, {"dtype": result.dtype, "model": model}
    alone = time_together(coll, result.size, topology, [job], result, **kw)
    own = job_within(coll, result.size, topology, [job], second, result, alone=alone, **kw)
    if own is None or not alone or own <= alone:
        return result
    t = result.time_s * own / alone
    algbw, busbw = layout(coll, result.size, dtype, result.nranks).busbw(t)
    what = "shared cables" if timed.schedule is not None else \
        f"its {timed.closed_form} connections on the job's cables (the job's tree at its " \
        "slowest edge)"
    why = f"a second job on {len(second)} group(s) of the job's shape: {what}"
    return dataclasses.replace(result, time_s=t, algbw_GBps=algbw, busbw_GBps=busbw,
                               timed=timed.bounded(why, t))


def fastest_beside(collective: Collective | str, nbytes: int, topology: Topology,
                   job: Sequence[int], second: Groups, *, model: str = "analytic",
                   **options: Any) -> SimResult:
    """The prediction `predict(collective, nbytes, topology, ranks=job, **options)` would
    give, but choosing the (algorithm, protocol) pair that is fastest with a second job on
    the groups `second` beside it (each pair timed as `predict(algorithm=, protocol=)` and
    slowed by with_second_job): what a tuner file written for the shared fabric should set.
    NCCL's own tuner does not see other jobs (`gpucomm sim --other-job`'s auto keeps its
    choice and is slowed by it). The pairs are those auto timed (its `candidates`) and the
    ring pairs it left untimed by their latency floor (ranking.ring_floor). A second job
    never speeds a job up, so with the analytic model a pair whose time alone (or floor) is
    no better than the best with the second job so far is not timed with it."""
    from ..dtypes import FP8, get_dtype
    from ..errors import GpucommError
    from .nccl_tuning import fp8_ring_penalty
    from .predict import predict
    from .ranking import ring_floor
    coll = get_collective(collective)
    kw = dict(options, model=model, ranks=job)
    fp8 = get_dtype(options.get("dtype", "float32")).name in FP8

    def score(res: SimResult) -> float:  # auto's argmin key (predict._select): fp8 rings last
        return res.time_s * fp8_ring_penalty(res.algorithm, fp8, len(job))
    auto = predict(coll, nbytes, topology, **kw)
    best = with_second_job(auto, topology, job, second, model=model)
    floors = {(a, p): t for a, p, t in auto.candidates}
    if "ring" not in {str(e).lower() for e in options.get("exclude", ())}:
        for p in dict.fromkeys(p for _, p, _ in auto.candidates):
            floors.setdefault(("ring", p), ring_floor(coll.name, len(job), p) or 0.0)
    floors.pop((auto.algorithm, auto.protocol), None)
    for (algorithm, protocol), floor in sorted(floors.items(), key=lambda kv: kv[1]):
        if model == "analytic" and floor >= score(best):
            break
        try:
            alone = predict(coll, nbytes, topology, algorithm=algorithm, protocol=protocol, **kw)
        except GpucommError:  # a pair auto did not time because it cannot run it
            continue
        if model != "analytic" or score(alone) < score(best):
            res = with_second_job(alone, topology, job, second, model=model)
            best = res if score(res) < score(best) else best
    return best


def without_second_job(together: float, job: float | None, second: float | None) -> float:
    """The job's own time within a union with a second job that ends at `together`: the
    union ends when the slower of the two does, so where the second job alone (`second`) is
    slower than the job alone (`job`), only how far the union runs past it is charged to the
    job (its own end inside the union is not timed: an estimate, never the second job's own
    slowness counted as the job's)."""
    if job is None or second is None or second <= job:
        return together
    return job * max(together / second, 1.0)


def check_other_job(nodes: object, whole: bool, contention: bool) -> int:
    """The second job's node count (0: none), checked against what can time it."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 0:
        raise ConfigError(f"other_job {nodes!r} not allowed: a node count >= 0 (0: none)")
    if nodes and not whole:
        raise ConfigError("--other-job needs a modelled fabric (--fabric rail-2tier, "
                          "rail-3tier or tor-2tier, or a --routing): a second job meets the "
                          "job only on the cables it shares")
    if nodes and not contention:
        raise ConfigError("--other-job is timed together with the job's groups: drop "
                          "--no-contention")
    return nodes


def other_job_groups(ranks: tuple[int, ...], job_nodes: int, other_nodes: int,
                     gpus_per_node: int) -> list[tuple[int, ...]]:
    """A second job's groups shaped like `ranks`, on its `other_nodes` nodes (cluster nodes
    job_nodes..job_nodes+other_nodes-1, which the placement puts on the leaves the job
    leaves): consecutive blocks of as many nodes as `ranks` spans, each member keeping its
    place in the group's node order and its GPU index shifted by 0..gpus_per_node-1, disjoint.
    The second job runs the same collective at the same moment on every such group (a job
    of the same shape at the same phase: the pessimistic end, as job_peers). A group inside
    one node meets no fabric and gets none."""
    order = list(dict.fromkeys(r // gpus_per_node for r in ranks))
    k = len(order)
    if k < 2 or other_nodes < k:
        return []
    place = {n: i for i, n in enumerate(order)}
    used: set[int] = set()
    out = []
    for j in range(other_nodes // k):
        for s in range(gpus_per_node):
            g = tuple((job_nodes + j * k + place[r // gpus_per_node]) * gpus_per_node
                      + (r + s) % gpus_per_node for r in ranks)
            if used.isdisjoint(g) and len(set(g)) == len(g):
                used.update(g)
                out.append(g)
    return out


def trees_together(coll: Collective, timed: Timed, groups: Sequence[npt.ArrayLike]
                   ) -> list[float] | None:
    """Each group's time for `timed`'s closed form (tree, nvls_tree) when every group of
    `groups` (placements, topology ranks: the job's and another job's, shaped like
    timed.placement) runs it at the same moment; None for a schedule, without a fabric model
    (topology.network None: no lane entries to share) or where no group leaves its node.

    Each group's tree connections are those it opens alone (tree_routes, on its own
    placement's paths: the same rails, channels, queue pairs and hash), and all groups' lane
    entries load the links together. A group's tree moves at its slowest edge's pace under
    that load (FabricPolicy.pipeline_slowdown with the others as `load`), against the same
    fabric that never collides as alone: so a group is slowed exactly by the cables (and
    NICs) it shares, never by another group's own slow edges. Without congestion control
    (PFC alone) another group's incast can also pause a link the group's connections cross
    upstream of it, holding them to the hot port's share (_held). A group inside one node
    (nvls) has no network traffic: groups on other nodes cannot slow it."""
    from .core import path_table
    name = timed.closed_form
    if timed.schedule is not None or name not in CLOSED:
        return None
    topology = timed.topology
    placed = [np.asarray(g, dtype=np.int64).reshape(-1) for g in groups]
    paths = [path_table(topology, g) for g in placed]
    rows = [tree_routes(p, g, node_groups(topology, g), name != "tree")
            for p, g in zip(paths, placed)]
    if all(r is None for r in rows):  # no fabric model, or no group leaves its node
        return None
    counts = [np.zeros(p.nlinks) if r is None else
              np.bincount(r[0][r[0] >= 0], minlength=p.nlinks).astype(np.float64)
              for p, r in zip(paths, rows)]
    total = np.sum(counts, axis=0)
    held = _held(paths[0].capacity, rows)
    out = []
    for g, p, r, mine, cap in zip(placed, paths, rows, counts, held):
        slow = 1.0 if r is None else r[1].pipeline_slowdown(r[0], p.capacity, total - mine,
                                                            cap)
        res = CLOSED[name](coll, timed.nbytes, topology, g, timed.dtype, timed.protocol.name,
                           p, timed.model, slowdown=slow)
        if res is None:
            return None
        out.append(float(res.time_s))
    return out


def _held(capacity: npt.NDArray[np.float64],
          rows: list[tuple[Routes, FabricPolicy] | None]) -> list[float]:
    """Per group of trees_together: the least pace (capacity x lanes / entry) PFC's pauses
    hold any of its connections to, every group's connections running at once
    (FabricPolicy.pause_caps: only without congestion control; a connection's demand is its
    path's bottleneck); inf where nothing pauses it. Inside one tree a pause never holds a
    connection below the tree's own pace (the hot port is on the tree's links), so a group
    alone is never held; another group's incast can pause a shared link upstream of it."""
    live = [r for r in rows if r is not None]
    if len(live) < 2:
        return [np.inf] * len(rows)
    one = live[0][1]
    width = max(t.shape[1] for t, _ in live)
    table = np.concatenate([np.pad(t, ((0, 0), (0, width - t.shape[1])), constant_values=-1)
                            for t, _ in live])
    valid = table >= 0
    safe = np.where(valid, table, 0)
    alone = np.where(valid, (capacity * one.lane_scale)[safe], np.inf).min(axis=1)
    caps = one.pause_caps(table, alone, capacity)
    out, at = [], 0
    for r in rows:
        n = 0 if r is None else len(r[0])
        out.append(float(caps[at:at + n].min(initial=np.inf)))
        at += n
    return out
