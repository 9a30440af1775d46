"""Sweeps of predictions, as `gpucomm sim` prints them: one cluster over sizes, or one
cluster per fabric seed over sizes.

    >>> from gpucomm.topology import build_topology
    >>> [r.size for r in predict_sizes("all_reduce", [1024, 1 << 20], build_topology("dgx-h100"))]
    [1024, 1048576]
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError
from .core import SizeSweep
from .predict import predict
from .result import SimResult

if TYPE_CHECKING:
    from ..collectives import Collective
    from ..topology import Topology


def predict_sizes(collective: Collective | str, sizes: Sequence[int], topology: Topology, *,
                  on_size: Callable[[int], None] | None = None,
                  **options: Any) -> list[SimResult]:
    """predict() at each size, the sizes timed together (one SizeSweep); `on_size(size)`
    after each; `options` are predict()'s."""
    sweep = SizeSweep(sizes)
    out = []
    for size in sizes:
        out.append(predict(collective, size, topology, sweep=sweep, **options))
        if on_size is not None:
            on_size(size)
    return out


def seeded_rows(collective: Collective | str, sizes: Sequence[int],
                topologies: Iterable[Topology], **options: Any) -> list[dict[str, Any]]:
    """One prediction per topology (a fabric seed each: ECMP hashes, random placement, failed
    cables make the time a distribution) and size; per size the row (SimResult.to_row) of the
    median seed by busbw, with `seeds` and the busbw median, min and max over the seeds.

        >>> from gpucomm.topology import build_topology
        >>> topos = (build_topology("dgx-h100", nodes=2) for seed in range(3))  # no fabric
        >>> (row,) = seeded_rows("all_reduce", [1 << 20], topos)
        >>> row["seeds"], bool(row["busbw_min"] == row["busbw_median"] == row["busbw_max"])
        (3, True)
    """
    runs = [[predict(collective, size, topo, **options).to_row() for size in sizes]
            for topo in topologies]
    if not runs:
        raise ConfigError("seeded_rows needs at least one topology (one per seed)")
    rows = []
    for i in range(len(sizes)):
        per = sorted((run[i] for run in runs), key=lambda r: r["busbw"])
        bw = [r["busbw"] for r in per]
        row = dict(per[(len(per) - 1) // 2])
        row.update(seeds=len(runs), busbw_median=float(np.median(bw)), busbw_min=bw[0],
                   busbw_max=bw[-1])
        rows.append(row)
    return rows
