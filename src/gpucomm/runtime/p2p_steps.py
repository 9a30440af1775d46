"""One rank's steps of a Schedule as element ranges per peer: what `P2PTransport` posts.

Both ends of a message list a step's ops in the same order, so a message's layout needs no
header: the sender packs its ranges end to end, the receiver lands them in its own ranges.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..schedule import Schedule

Range = tuple[int, int, bool]  # (lo, hi, reduce): elements lo..hi of the logical buffer
LocalOp = tuple[int, int, int, bool]  # (src_lo, src_hi, dst_lo, reduce)


def slice_tag(step: int, slice_index: int) -> int:
    """The tag of one slice of a step's message: every slice has one of its own."""
    return step * 4096 + slice_index % 4096


@dataclass(frozen=True)
class Message:
    """What this rank sends to or receives from one peer in one step: element ranges of the
    logical buffer, in the step's op order (`reduce` matters on the receiving side only)."""
    peer: int
    ranges: tuple[Range, ...]
    nelems: int


@dataclass(frozen=True)
class StepPlan:
    index: int
    sends: tuple[Message, ...]
    recvs: tuple[Message, ...]
    local: tuple[LocalOp, ...]


def plan_rank(schedule: Schedule, rank: int, block_count: int) -> tuple[StepPlan, ...]:
    """This rank's steps with their element ranges; steps where it has nothing to do are left out.

    >>> from gpucomm.algorithms import build
    >>> plan_rank(build("all_reduce", "ring", 2), 0, 4)[0].sends[0]
    Message(peer=1, ranges=((0, 2, True),), nelems=2)
    """
    bounds = schedule.chunk_bounds(block_count)
    plan = []
    for i, st in enumerate(schedule.steps()):
        src, dst, sc, dc, n, red = st.columns()[:6]
        mine = np.flatnonzero((src == rank) | (dst == rank))
        if not len(mine):
            continue
        sends: dict[int, list[Range]] = {}
        recvs: dict[int, list[Range]] = {}
        local: list[LocalOp] = []
        for j in mine.tolist():
            lo_s, hi_s = int(bounds[sc[j]]), int(bounds[sc[j] + n[j]])
            lo_d = int(bounds[dc[j]])
            if hi_s == lo_s:  # empty chunk: both ends skip it alike
                continue
            s, d, r = int(src[j]), int(dst[j]), bool(red[j])
            if s == d:
                local.append((lo_s, hi_s, lo_d, r))
            elif s == rank:
                sends.setdefault(d, []).append((lo_s, hi_s, r))
            else:
                recvs.setdefault(s, []).append((lo_d, lo_d + hi_s - lo_s, r))
        if sends or recvs or local:
            plan.append(StepPlan(i, _messages(sends), _messages(recvs), tuple(local)))
    return tuple(plan)


def _messages(by_peer: dict[int, list[Range]]) -> tuple[Message, ...]:
    return tuple(Message(p, tuple(rs), sum(hi - lo for lo, hi, _ in rs))
                 for p, rs in sorted(by_peer.items()))


__all__ = ["Message", "StepPlan", "plan_rank", "slice_tag"]
