"""Prove by symbolic execution that a schedule implements its collective.

Each chunk of each rank holds a symbolic value: the set of contributions (origin rank, origin
block) reduced into it, or None before it holds anything. Replaying the steps checks that no op
reads an empty chunk, no contribution is reduced twice, no two ops of a step conflict, and at
the end every chunk the collective defines holds exactly its postcondition.
"""
from __future__ import annotations

from .errors import ScheduleError
from .schedule import Schedule


class VerifyError(ScheduleError):
    """A schedule that is wrong, with the step, rank and chunk where it goes wrong."""

    def __init__(self, message: str, step=None, rank=None, chunk=None):
        where = " ".join(f"{k} {v}" for k, v in (("step", step), ("rank", rank), ("chunk", chunk))
                         if v is not None)
        super().__init__(f"{where}: {message}" if where else message)
        self.step, self.rank, self.chunk = step, rank, chunk


def _describe(v) -> str:
    if v is None:
        return "nothing"
    return "{" + ", ".join(f"r{r}.b{b}" for r, b in sorted(v)) + "}"


def verify(schedule: Schedule) -> Schedule:
    """Return the schedule if it is correct; raise VerifyError naming step, rank and chunk."""
    s, coll, p = schedule, schedule.collective, schedule.nranks
    cpb, total = s.chunks_per_block, s.total_chunks
    if s.collective.rooted and not 0 <= s.root < p:
        raise VerifyError(f"root {s.root} is not a rank (0..{p - 1})")
    state = [[None] * total for _ in range(p)]
    for r in range(p):
        for b in range(s.nblocks):
            v = coll.pre(r, b, p, s.root)
            for k in range(cpb):
                state[r][b * cpb + k] = v

    for i, st in enumerate(s.steps()):
        rows = list(zip(*(c.tolist() for c in st.columns())))
        written, read = {}, {}
        for n_op, (src, dst, sc, dc, n, red, ch) in enumerate(rows):
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
        updates = []
        for src, dst, sc, dc, n, red, ch in rows:
            for j in range(n):
                v = state[src][sc + j]
                if v is None:
                    raise VerifyError(f"sent to rank {dst} before it holds a value",
                                      step=i, rank=src, chunk=sc + j)
                if red:
                    old = state[dst][dc + j]
                    if old is None:
                        raise VerifyError(f"reduced into before it holds a value (from rank "
                                          f"{src})", step=i, rank=dst, chunk=dc + j)
                    twice = v & old
                    if twice:
                        raise VerifyError(f"contribution(s) {_describe(twice)} reduced twice "
                                          f"(from rank {src})", step=i, rank=dst, chunk=dc + j)
                    if len({b for _, b in v | old}) != 1:
                        raise VerifyError(f"reduces {_describe(v)} into {_describe(old)}: "
                                          f"different blocks", step=i, rank=dst, chunk=dc + j)
                    v = v | old
                updates.append((dst, dc + j, v))
        for dst, c, v in updates:
            state[dst][c] = v

    for r in range(p):
        for b in range(s.nblocks):
            want = coll.post(r, b, p, s.root)
            if want is None:
                continue
            for k in range(cpb):
                got = state[r][b * cpb + k]
                if got != want:
                    missing = want - (got or frozenset())
                    extra = (got or frozenset()) - want
                    detail = (f"missing {_describe(missing)}" if missing else "") + \
                             (f"{'; ' if missing else ''}unexpected {_describe(extra)}"
                              if extra else "")
                    raise VerifyError(f"ends with {_describe(got)}, want {_describe(want)} "
                                      f"({detail})", rank=r, chunk=b * cpb + k)
    return schedule
