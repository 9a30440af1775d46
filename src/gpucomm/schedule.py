"""The schedule IR: a collective algorithm as plain data.

A Schedule is an ordered list of *steps*; a step is a set of point-to-point ops issued together,
stored column-wise as numpy arrays (`src`, `dst`, `src_chunk`, `dst_chunk`, `nchunks`, `reduce`,
`channel`). Op `i` of a step moves chunks `src_chunk[i] .. +nchunks[i]` of rank `src`'s logical
buffer into chunks `dst_chunk[i] ..` of rank `dst`'s, copying or reducing. `src == dst` is a
local copy.

Semantics: steps run in order; the ops of one step are concurrent, so they may not conflict
(no chunk written twice in a step, none both read and written). That makes dependencies a
matter of data flow alone: an op may start once its source chunks hold their value and the
earlier readers of its destination are done — no barrier between steps. `verify` proves the
postcondition; the simulator and the runtimes honour exactly these dependencies.

Chunks: the logical buffer is `nblocks` blocks (see `collectives`) plus `scratch_blocks`; each
block is cut into `chunks_per_block` chunks with `np.array_split` sizes, so sizes need not
divide. An op's source and destination start at the same position within a block, so the
sizes always agree.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, Union

import numpy as np
from numpy.typing import ArrayLike

from .collectives import Collective, get_collective
from .errors import ScheduleError
from .memo import Memo

FIELDS = ("src", "dst", "src_chunk", "dst_chunk", "nchunks", "reduce", "channel")


class Op(NamedTuple):
    step: int
    src: int
    dst: int
    src_chunk: int
    dst_chunk: int
    nchunks: int
    reduce: bool
    channel: int


@dataclass(frozen=True, eq=False)
class Step:
    """Concurrent ops, column-wise. Build with `step(...)`, which broadcasts scalars."""
    src: np.ndarray
    dst: np.ndarray
    src_chunk: np.ndarray
    dst_chunk: np.ndarray
    nchunks: np.ndarray
    reduce: np.ndarray
    channel: np.ndarray

    def __len__(self) -> int:
        return len(self.src)

    def columns(self) -> tuple[np.ndarray, ...]:
        return tuple(getattr(self, f) for f in FIELDS)


def step(src: ArrayLike, dst: ArrayLike, src_chunk: ArrayLike, dst_chunk: ArrayLike | None = None,
         nchunks: ArrayLike = 1, reduce: ArrayLike = False, channel: ArrayLike = 0) -> Step:
    """A step of ops; any argument may be a scalar (broadcast) or an array.

    >>> len(step(src=[0, 1], dst=[1, 0], src_chunk=[0, 1]))
    2
    """
    if dst_chunk is None:
        dst_chunk = src_chunk
    cols = np.broadcast_arrays(*(np.asarray(v) for v in (src, dst, src_chunk, dst_chunk, nchunks,
                                                           reduce, channel)))
    ints = [np.array(c, dtype=np.int64).reshape(-1) for c in cols[:5]]
    flag = np.array(cols[5], dtype=bool).reshape(-1)
    chan = np.array(cols[6], dtype=np.int64).reshape(-1)
    for c in (*ints, flag, chan):
        c.setflags(write=False)
    return Step(ints[0], ints[1], ints[2], ints[3], ints[4], flag, chan)


def concat(steps: list[Step]) -> Step:
    """Several steps' ops as one step (the caller guarantees they do not conflict)."""
    steps = [s for s in steps if len(s)]
    if not steps:
        return step([], [], [])
    return step(*(np.concatenate([getattr(s, f) for s in steps]) for f in FIELDS))


StepSource = Union[tuple[Step, ...], Callable[[], Iterable[Step]]]


@dataclass(frozen=True)
class Schedule:
    """An algorithm for one collective on `nranks` ranks. Print it to read it."""
    collective: Collective
    nranks: int
    algorithm: str
    chunks_per_block: int
    source: StepSource = field(repr=False, compare=False)
    scratch_blocks: int = 0
    root: int = 0
    channels: int = 1
    params: tuple[tuple[str, Any], ...] = ()  # (name, value) pairs the builder was given
    # what the layers above derive from this schedule (memo.py), e.g. whether it is a ring
    cache: Memo = field(default_factory=Memo, init=False, repr=False, compare=False)

    if TYPE_CHECKING:  # builders pass the collective by name; __post_init__ resolves it
        def __init__(self, collective: Collective | str, nranks: int, algorithm: str,
                     chunks_per_block: int, source: StepSource, scratch_blocks: int = 0,
                     root: int = 0, channels: int = 1,
                     params: tuple[tuple[str, Any], ...] = ()) -> None: ...

    def __post_init__(self) -> None:
        object.__setattr__(self, "collective", get_collective(self.collective))
        if self.chunks_per_block < 1:
            raise ScheduleError(f"chunks_per_block must be >= 1, got {self.chunks_per_block}")

    # --- structure -------------------------------------------------------------------
    @property
    def nblocks(self) -> int:
        return self.collective.nblocks(self.nranks)

    @property
    def total_chunks(self) -> int:
        return (self.nblocks + self.scratch_blocks) * self.chunks_per_block

    def steps(self) -> Iterator[Step]:
        if callable(self.source):
            return iter(self.source())
        return iter(self.source)

    def ops(self) -> Iterator[Op]:
        for i, s in enumerate(self.steps()):
            for row in zip(*(c.tolist() for c in s.columns())):
                yield Op(i, *row)

    @property
    def nsteps(self) -> int:
        return sum(1 for _ in self.steps())

    @property
    def nops(self) -> int:
        return sum(len(s) for s in self.steps())

    def ops_at_most(self, limit: int) -> bool:
        """Whether the schedule has at most `limit` ops; generates only the steps it needs
        (a 100,000-rank ring answers after its first steps, not its 2·10^10 ops)."""
        n = 0
        for s in self.steps():
            n += len(s)
            if n > limit:
                return False
        return True

    # --- sizes -----------------------------------------------------------------------
    def chunk_bounds(self, block_count: int) -> np.ndarray:
        """Element offsets of every chunk of the logical buffer, plus the end (length+1)."""
        q, extra = divmod(int(block_count), self.chunks_per_block)  # np.array_split's sizes
        sizes = np.full(self.chunks_per_block, q, dtype=np.int64)
        sizes[:extra] += 1
        per_block = np.concatenate([[0], np.cumsum(sizes)])[:-1]
        nb = self.nblocks + self.scratch_blocks
        starts = (np.arange(nb, dtype=np.int64)[:, None] * block_count + per_block).reshape(-1)
        return np.append(starts, nb * block_count)

    def bytes_sent(self, block_bytes_or_layout: Any, itemsize: int = 1) -> np.ndarray:
        """Bytes each rank sends to other ranks (local copies excluded), an array per rank.

        Pass a collectives.BufferLayout, or a block size in elements and the element size.
        """
        if hasattr(block_bytes_or_layout, "block_count"):
            block_count, itemsize = (block_bytes_or_layout.block_count,
                                     block_bytes_or_layout.dtype.itemsize)
        else:
            block_count = int(block_bytes_or_layout)
        bounds = self.chunk_bounds(block_count)
        sent = np.zeros(self.nranks, dtype=np.int64)
        for s in self.steps():
            remote = s.src != s.dst
            elems = bounds[s.src_chunk + s.nchunks] - bounds[s.src_chunk]
            np.add.at(sent, s.src[remote], elems[remote])
        return sent * itemsize

    # --- reading and writing ---------------------------------------------------------
    def __str__(self) -> str:
        head = (f"{self.algorithm} {self.collective.name}: {self.nranks} ranks, "
                f"{self.chunks_per_block} chunk(s)/block × {self.nblocks} block(s)"
                + (f" + {self.scratch_blocks} scratch" if self.scratch_blocks else "")
                + (f", {self.channels} channels" if self.channels > 1 else "")
                + (f", root {self.root}" if self.collective.rooted else ""))
        lines = [head]
        for i, s in enumerate(self.steps()):
            lines.append(f"step {i}: " + ", ".join(_op_text(row, self.channels) for row in
                                                  zip(*(c.tolist() for c in s.columns()))))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "collective": self.collective.name, "nranks": self.nranks,
            "algorithm": self.algorithm, "chunks_per_block": self.chunks_per_block,
            "scratch_blocks": self.scratch_blocks, "root": self.root, "channels": self.channels,
            "params": [list(p) for p in self.params],
            "fields": list(FIELDS),
            "steps": [[list(row) for row in zip(*(c.tolist() for c in s.columns()))]
                      for s in self.steps()],
        }

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Schedule:
        try:
            steps = tuple(step(*zip(*rows)) if rows else step([], [], []) for rows in d["steps"])
            return cls(d["collective"], int(d["nranks"]), d["algorithm"],
                       int(d["chunks_per_block"]), steps, int(d.get("scratch_blocks", 0)),
                       int(d.get("root", 0)), int(d.get("channels", 1)),
                       tuple(tuple(p) for p in d.get("params", ())))
        except (KeyError, TypeError, ValueError) as e:
            raise ScheduleError(f"not a schedule: {e!r} (need collective, nranks, algorithm, "
                                f"chunks_per_block and steps)") from None

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        return cls.from_dict(json.loads(text))

    def materialize(self) -> Schedule:
        """The same schedule with its steps held in memory (for repeated execution)."""
        if not callable(self.source):
            return self
        return Schedule(self.collective, self.nranks, self.algorithm, self.chunks_per_block,
                        tuple(self.steps()), self.scratch_blocks, self.root, self.channels,
                        self.params)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.collective.name, self.nranks, self.algorithm, self.params))


def _op_text(row: tuple[Any, ...], channels: int) -> str:
    src, dst, sc, dc, n, red, ch = row

    def rng(c: int) -> str:
        return f"c{c}" if n == 1 else f"c{c}-{c + n - 1}"
    chunks = rng(sc) if sc == dc else f"{rng(sc)}→{rng(dc)}"
    text = f"{src}→{dst} {chunks}" + (" (reduce)" if red else "")
    return text + (f" [ch{ch}]" if channels > 1 else "")
