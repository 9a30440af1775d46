"""The timeline of a ring the flow model answers from its frontier (core.FLOW_RING_OPS).

Past FLOW_RING_OPS ops the flow model times a ring by the max-plus recurrence of
frontier.py with each op at its max-min fair rate among a step's ops (analytic.ring_many,
maxmin=True), solved in closed form. A trace of that run is the same recurrence stepped op by
op: S_0 = 0, S_{s+1}[r] = max(S_s[r-1] + x_s[r-1] + a[r-1], S_s[r] + x_s[r]) per channel,
with x_s an op's own bytes times its seconds per byte. Its ops start at S and land at
S + x + a, and the last landing is the frontier's end (the same path), so the trace and
the printed time come from one timed run. (Where chunks differ by an element the frontier
answers the middle of the two chunk sizes' ends, within 0.1%; the trace keeps each op's own
bytes.)
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from .analytic import ring_rows
from .result import TimelineRecord

if TYPE_CHECKING:
    from ..schedule import Schedule
    from .steps import StepCoster

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


def ring_times(sched: Schedule, coster: StepCoster, bounds: Ints, itemsize: int
               ) -> list[tuple[Floats, Floats, Ints]]:
    """Per step of `sched` (a ring by its steps: analytic.is_ring), (start, land) seconds of
    its ops in the step's order, each op at its max-min fair rate among a step's ops, and the
    ops' bytes."""
    x0, a, _, _ = ring_rows(sched, coster, maxmin=True)
    start = np.zeros_like(x0)
    out: list[tuple[Floats, Floats, Ints]] = []
    for st in sched.steps():
        ch, src = st.channel.astype(np.int64), st.src.astype(np.int64)
        nb = (bounds[st.src_chunk + st.nchunks] - bounds[st.src_chunk]) * itemsize
        x = np.zeros_like(x0)
        x[ch, src] = nb * x0[ch, src]
        land = start + x + a  # the next step's op on r waits for r-1's data and its own wire
        out.append((start[ch, src].copy(), land[ch, src], nb))
        start = np.maximum(np.roll(land, 1, axis=1), start + x)
    return out


def ring_timeline(sched: Schedule, coster: StepCoster, bounds: Ints,
                  itemsize: int) -> list[TimelineRecord]:
    """ring_times as timeline records (what core.simulate(trace=True) returns)."""
    out: list[TimelineRecord] = []
    for si, (st, (begin, land, nb)) in enumerate(zip(sched.steps(),
                                                      ring_times(sched, coster, bounds,
                                                                 itemsize))):
        cols = zip(st.src.tolist(), st.dst.tolist(), st.dst_chunk.tolist(),
                   st.channel.tolist(), begin.tolist(), land.tolist(),
                   nb.astype(np.int64).tolist())
        out += [TimelineRecord(step=si, src=s, dst=d, chunk=c, channel=ch, start_s=b, end_s=e,
                               nbytes=n) for s, d, c, ch, b, e, n in cols]
    return out
