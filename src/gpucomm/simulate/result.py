"""SimResult: what a simulation says, as a frozen value that prints and serialises."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SimResult:
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
    link_busy_s: dict = field(default_factory=dict, repr=False)  # link index -> busy seconds
    events: int = 0  # ops simulated (analytic) or event batches (flow)
    ops: int = 0
    timeline: tuple = field(default=(), repr=False)  # (step, src, dst, chunk, channel, start, end, bytes)
    redop: str = "sum"
    root: int = -1
    channels: int = 1
    candidates: tuple = field(default=(), repr=False)  # (algorithm, protocol, time_s) tried by auto
    nccl_channels: int = 0  # NCCL channels the schedule's channels stand for (0: as channels)
    note: str = ""  # how the answer was reached when not op by op (symmetry, closed form)

    @property
    def time_us(self) -> float:
        return self.time_s * 1e6

    def utilisation(self) -> dict:
        """Link index -> busy fraction of the collective's time."""
        if self.time_s <= 0:
            return {k: 0.0 for k in self.link_busy_s}
        return {k: v / self.time_s for k, v in self.link_busy_s.items()}

    @property
    def reason(self) -> str:
        """What was chosen, as NCCL_DEBUG=INFO would name it, and by how much it beat the
        runner-up among the candidates: 'nvls_tree/simple 16ch (ring/simple +31%)'."""
        text = f"{self.algorithm}/{self.protocol} {self.nccl_channels or self.channels}ch"
        others = [(t, a, p) for a, p, t in self.candidates
                  if (a, p) != (self.algorithm, self.protocol)]
        best = min((c for c in self.candidates if (c[0], c[1]) ==
                    (self.algorithm, self.protocol)), key=lambda c: c[2], default=None)
        if others and best is not None and best[2] > 0:
            t, a, p = min(others)
            text += f" ({a}/{p} {100 * (t / best[2] - 1):+.0f}%)"
        return text

    def to_row(self) -> dict:
        return {"size": self.size, "count": self.count, "type": self.dtype, "redop": self.redop,
                "root": self.root, "time_us": round(self.time_us, 3),
                "algbw": round(self.algbw_GBps, 4), "busbw": round(self.busbw_GBps, 4),
                "algorithm": self.algorithm, "protocol": self.protocol, "reason": self.reason}

    def __str__(self) -> str:
        return (f"{self.collective} {self.algorithm}/{self.protocol} on {self.nranks} ranks, "
                f"{self.size} B: {self.time_us:.2f} us, algbw {self.algbw_GBps:.2f} GB/s, "
                f"busbw {self.busbw_GBps:.2f} GB/s ({self.model} model)")
