"""Prove by symbolic execution that a schedule implements its collective.

Each chunk of each rank holds a symbolic value: the set of contributions (origin rank, origin
block) reduced into it, or None before it holds anything. Replaying the steps checks that no op
reads an empty chunk, no contribution is reduced twice, no two ops of a step conflict, and at
the end every chunk the collective defines holds exactly its postcondition.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from .collectives import Value, get_collective
from .errors import ScheduleError
from .schedule import Schedule

State = list[list[Value | None]]  # rank -> chunk -> symbolic value
Row = tuple[int, int, int, int, int, bool, int]  # src, dst, src_chunk, dst_chunk, n, reduce, ch


class VerifyError(ScheduleError):
    """A schedule that is wrong, with the step, rank and chunk where it goes wrong."""

    def __init__(self, message: str, step: int | None = None, rank: int | None = None,
                 chunk: int | None = None):
        where = " ".join(f"{k} {v}" for k, v in (("step", step), ("rank", rank), ("chunk", chunk))
                         if v is not None)
        super().__init__(f"{where}: {message}" if where else message)
        self.step, self.rank, self.chunk = step, rank, chunk


def _describe(v: Value | None) -> str:
    if v is None:
        return "nothing"
    return "{" + ", ".join(f"r{r}.b{b}" for r, b in sorted(v)) + "}"


def verify(schedule: Schedule) -> Schedule:
    """Return the schedule if it is correct; raise VerifyError naming step, rank and chunk."""
    s, p = schedule, schedule.nranks
    if s.collective.rooted and not 0 <= s.root < p:
        raise VerifyError(f"root {s.root} is not a rank (0..{p - 1})")
    state = _initial_state(s)
    for i, st in enumerate(s.steps()):
        rows: list[Row] = list(zip(*(c.tolist() for c in st.columns())))
        written: dict[tuple[int, int], int] = {}
        read: dict[tuple[int, int], set[int]] = {}
        for n_op, row in enumerate(rows):
            _check_op(s, i, n_op, row)
            _check_conflicts(i, n_op, row, written, read)
        _apply(i, rows, state)
    _check_postcondition(s, state)
    return schedule


def _initial_state(s: Schedule) -> State:
    p, cpb = s.nranks, s.chunks_per_block
    state: State = [[None] * s.total_chunks for _ in range(p)]
    for r in range(p):
        for b in range(s.nblocks):
            v = s.collective.pre(r, b, p, s.root)
            for k in range(cpb):
                state[r][b * cpb + k] = v
    return state


def _check_op(s: Schedule, i: int, n_op: int, row: Row) -> None:
    """One op's ranks, chunk range and channel are in range."""
    src, dst, sc, dc, n, _, ch = row
    p, cpb, total = s.nranks, s.chunks_per_block, s.total_chunks
    for rank in (src, dst):
        if not 0 <= rank < p:
            raise VerifyError(f"op {n_op} names rank {rank}, not in 0..{p - 1}", step=i)
    if n < 1 or min(sc, dc) < 0 or max(sc, dc) + n > total:
        raise VerifyError(f"op {n_op} covers chunks {sc}+{n}→{dc}+{n}, outside "
                          f"0..{total - 1}", step=i, rank=src)
    if sc % cpb != dc % cpb:
        raise VerifyError(f"op {n_op} moves chunk {sc} to chunk {dc}, which sit at "
                          f"different positions of their blocks (sizes would differ)",
                          step=i, rank=src)
    if not 0 <= ch < max(1, s.channels):
        raise VerifyError(f"op {n_op} uses channel {ch}, allowed 0..{s.channels - 1}",
                          step=i, rank=src)


def _check_conflicts(i: int, n_op: int, row: Row, written: dict[tuple[int, int], int],
                     read: dict[tuple[int, int], set[int]]) -> None:
    """No chunk is written by two ops of a step, or read by one and written by another
    (`written`, `read`: what the step's earlier ops touch, by (rank, chunk))."""
    src, dst, sc, dc, n, _, _ = row
    for j in range(n):
        key = (dst, dc + j)
        if key in written or read.get(key, {n_op}) != {n_op}:
            raise VerifyError("two ops of one step touch this chunk and one writes it "
                              "(put them in separate steps)",
                              step=i, rank=dst, chunk=dc + j)
        written[key] = n_op
        key = (src, sc + j)
        if written.get(key, n_op) != n_op:
            raise VerifyError("read and written by different ops of one step",
                              step=i, rank=src, chunk=sc + j)
        read.setdefault(key, set()).add(n_op)


def _apply(i: int, rows: list[Row], state: State) -> None:
    """The step's ops, all reading the state before the step (they are concurrent)."""
    updates = []
    for src, dst, sc, dc, n, red, _ in rows:
        for j in range(n):
            v = state[src][sc + j]
            if v is None:
                raise VerifyError(f"sent to rank {dst} before it holds a value",
                                  step=i, rank=src, chunk=sc + j)
            if red:
                v = _reduced(v, state[dst][dc + j], i, src, dst, dc + j)
            updates.append((dst, dc + j, v))
    for dst, c, v in updates:
        state[dst][c] = v


def _reduced(v: Value, old: Value | None, i: int, src: int, dst: int, chunk: int) -> Value:
    if old is None:
        raise VerifyError(f"reduced into before it holds a value (from rank "
                          f"{src})", step=i, rank=dst, chunk=chunk)
    twice = v & old
    if twice:
        raise VerifyError(f"contribution(s) {_describe(twice)} reduced twice "
                          f"(from rank {src})", step=i, rank=dst, chunk=chunk)
    if len({b for _, b in v | old}) != 1:
        raise VerifyError(f"reduces {_describe(v)} into {_describe(old)}: "
                          f"different blocks", step=i, rank=dst, chunk=chunk)
    return v | old


def _check_postcondition(s: Schedule, state: State) -> None:
    p, cpb = s.nranks, s.chunks_per_block
    for r in range(p):
        for b in range(s.nblocks):
            want = s.collective.post(r, b, p, s.root)
            if want is None:
                continue
            for k in range(cpb):
                got = state[r][b * cpb + k]
                if got != want:
                    have: Value = got or frozenset()
                    missing, extra = want - have, have - want
                    detail = (f"missing {_describe(missing)}" if missing else "") + \
                             (f"{'; ' if missing else ''}unexpected {_describe(extra)}"
                              if extra else "")
                    raise VerifyError(f"ends with {_describe(got)}, want {_describe(want)} "
                                      f"({detail})", rank=r, chunk=b * cpb + k)


class Builder(Protocol):
    """What `prove_builder` needs of an algorithm (algorithms.Algorithm is one)."""
    @property
    def collective(self) -> str: ...

    @property
    def name(self) -> str: ...

    def build(self, nranks: int, root: int = 0) -> Schedule: ...


@dataclass(frozen=True, kw_only=True)
class BuilderProof:
    """`prove_builder`'s answer: how many schedules were proven, how many rank counts the
    builder refused, and the first failure (None: every schedule is right)."""
    collective: str
    algorithm: str
    verified: int
    not_supported: int
    error: str | None
    seconds: float


def roots_to_prove(collective: str, nranks: int) -> list[int]:
    """Roots worth proving: all of them for small P, a spread for larger P (0 if unrooted)."""
    if not get_collective(collective).rooted:
        return [0]
    return list(range(nranks)) if nranks <= 8 else sorted({0, 1, nranks // 2, nranks - 1})


def prove_builder(alg: Builder, max_ranks: int) -> BuilderProof:
    """Build and verify `alg`'s schedule for 1..max_ranks ranks (and roots_to_prove), up to
    the first wrong one; a rank count the builder refuses (ScheduleError) is not supported.

        >>> from gpucomm.algorithms import get_algorithm
        >>> prove_builder(get_algorithm("all_reduce", "ring"), 5).verified
        5
    """
    t0, ok, skipped, err = time.perf_counter(), 0, 0, None
    for p in range(1, max_ranks + 1):
        for root in roots_to_prove(alg.collective, p):
            try:
                sched = alg.build(p, root=root)
            except ScheduleError:
                skipped += 1  # the builder says it cannot serve this rank count
                continue
            try:
                verify(sched)
                ok += 1
            except ScheduleError as e:
                err = f"{p} ranks, root {root}: {e}"
                break
        if err:
            break
    return BuilderProof(collective=alg.collective, algorithm=alg.name, verified=ok,
                        not_supported=skipped, error=err,
                        seconds=round(time.perf_counter() - t0, 3))
