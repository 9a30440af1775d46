"""SimResult: what a simulation says, as a frozen value that prints and serialises."""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, TypedDict, overload

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from .timed import Timed

class TimelineRecord(NamedTuple):
    """One op of a timeline (built by name; a tuple, so it serialises as one)."""
    step: int
    src: int
    dst: int
    chunk: int  # the destination chunk
    channel: int
    start_s: float
    end_s: float
    nbytes: int


class SimRow(TypedDict):
    """SimResult.to_row(): one size of a sweep, the columns nccl-tests prints and more."""
    size: int
    count: int
    type: str
    redop: str
    root: int
    time_us: float
    algbw: float
    busbw: float
    algorithm: str
    protocol: str
    reason: str


class LinkBusy(Mapping[int, float]):
    """Link index -> busy seconds of the links that carried bytes, read from a per-link array
    (times `scale`) when first asked: a sweep's results hold one shared array, not a dict of
    every link each (a million links on 100,000 GPUs). With `links`, `busy` holds the
    seconds of those links, each kept."""

    __slots__ = ("_busy", "_scale", "_links", "_dict")
    _busy: npt.ArrayLike
    _scale: float
    _links: npt.ArrayLike | None
    _dict: dict[int, float] | None

    def __init__(self, busy: npt.ArrayLike, scale: float = 1.0,
                 links: npt.ArrayLike | None = None) -> None:
        self._busy, self._scale, self._links, self._dict = busy, float(scale), links, None

    def _items(self) -> dict[int, float]:
        if self._dict is None:
            b = np.asarray(self._busy, dtype=np.float64)
            if self._links is not None:
                self._dict = dict(zip(np.asarray(self._links).tolist(),
                                      (b * self._scale).tolist()))
                return self._dict
            nz = np.flatnonzero(b > 0) if self._scale > 0 else np.zeros(0, dtype=np.int64)
            self._dict = dict(zip(nz.tolist(), (b[nz] * self._scale).tolist()))
        return self._dict

    def __getitem__(self, key: int) -> float:
        return self._items()[key]

    def __iter__(self) -> Iterator[int]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __repr__(self) -> str:
        return repr(self._items())

    def __reduce__(self) -> tuple[type[dict[int, float]], tuple[dict[int, float]]]:
        return dict, (self._items(),)  # pickles (process pools) as the plain dict it reads as


class RankTimeline(Sequence[TimelineRecord]):
    """A closed form's timeline: one record per rank, (0, r, r, r, 0, 0.0, t, bytes), made
    when read (a sweep's candidates on 100,000 ranks would otherwise build millions)."""

    __slots__ = ("nranks", "time_s", "nbytes")

    def __init__(self, nranks: int, time_s: float, nbytes: int):
        self.nranks, self.time_s, self.nbytes = int(nranks), float(time_s), int(nbytes)

    def _record(self, r: int) -> TimelineRecord:
        return TimelineRecord(step=0, src=r, dst=r, chunk=r, channel=0, start_s=0.0,
                              end_s=self.time_s, nbytes=self.nbytes)

    def __len__(self) -> int:
        return self.nranks

    @overload
    def __getitem__(self, i: int) -> TimelineRecord: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[TimelineRecord, ...]: ...

    def __getitem__(self, i: int | slice) -> TimelineRecord | tuple[TimelineRecord, ...]:
        if isinstance(i, slice):
            return tuple(self._record(r) for r in range(*i.indices(self.nranks)))
        r = range(self.nranks)[i]  # negative indices, IndexError
        return self._record(r)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (tuple, Sequence)) and tuple(self) == tuple(other)

    # no __hash__: a class that defines __eq__ alone gets __hash__ = None (unhashable, as a
    # list is); mypy does not model that, and an explicit `__hash__ = None` fails its checks

    def __reduce__(self) -> tuple[type[RankTimeline], tuple[int, float, int]]:
        return RankTimeline, (self.nranks, self.time_s, self.nbytes)


@dataclass(frozen=True, kw_only=True)
class SimResult:
    """One timed collective, built by name. `timed` (from predict) says what was timed."""
    collective: str
    algorithm: str
    protocol: str
    model: str
    nranks: int
    size: int  # nccl-tests S, bytes
    count: int  # elements
    dtype: str
    time_s: float
    algbw_GBps: float
    busbw_GBps: float
    # link index -> busy seconds
    link_busy_s: Mapping[int, float] = field(default_factory=dict, repr=False)
    events: int = 0  # ops simulated (analytic) or event batches (flow)
    ops: int = 0
    # (step, src, dst, chunk, channel, start, end, bytes) per op
    timeline: Sequence[TimelineRecord] = field(default=(), repr=False)
    redop: str = "sum"
    root: int = -1
    channels: int = 1
    # (algorithm, protocol, time_s) tried by auto
    candidates: tuple[tuple[str, str, float], ...] = field(default=(), repr=False)
    nccl_channels: int = 0  # NCCL channels the schedule's channels stand for (0: as channels)
    note: str = ""  # how the answer was reached when not op by op (symmetry, closed form)
    # what was timed (predict): the views (trace, HTML, tuner file, planner) read it
    timed: Timed | None = field(default=None, repr=False, compare=False)

    @property
    def time_us(self) -> float:
        return self.time_s * 1e6

    def utilisation(self) -> dict[int, float]:
        """Link index -> busy fraction of the collective's time."""
        if self.time_s <= 0:
            return {k: 0.0 for k in self.link_busy_s}
        return {k: v / self.time_s for k, v in self.link_busy_s.items()}

    @property
    def reason(self) -> str:
        """What was chosen, as NCCL_DEBUG=INFO would name it, and by how much it beat the
        runner-up among the candidates: 'nvls_tree/simple 16ch (ring/simple +31%)'; 'none'
        for a collective of 0 bytes, which moves nothing (predict._empty)."""
        if self.algorithm == "none":
            return "none (0 bytes)"
        text = f"{self.algorithm}/{self.protocol} {self.nccl_channels or self.channels}ch"
        others = [(t, a, p) for a, p, t in self.candidates
                  if (a, p) != (self.algorithm, self.protocol)]
        best = min((c for c in self.candidates if (c[0], c[1]) ==
                    (self.algorithm, self.protocol)), key=lambda c: c[2], default=None)
        if others and best is not None and best[2] > 0:
            t, a, p = min(others)
            text += f" ({a}/{p} {100 * (t / best[2] - 1):+.0f}%)"
        return text

    def to_row(self) -> SimRow:
        return {"size": self.size, "count": self.count, "type": self.dtype, "redop": self.redop,
                "root": self.root, "time_us": round(self.time_us, 3),
                "algbw": round(self.algbw_GBps, 4), "busbw": round(self.busbw_GBps, 4),
                "algorithm": self.algorithm, "protocol": self.protocol, "reason": self.reason}

    def __str__(self) -> str:
        return (f"{self.collective} {self.algorithm}/{self.protocol} on {self.nranks} ranks, "
                f"{self.size} B: {self.time_us:.2f} us, algbw {self.algbw_GBps:.2f} GB/s, "
                f"busbw {self.busbw_GBps:.2f} GB/s ({self.model} model)")
