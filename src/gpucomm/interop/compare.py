"""An nccl-tests log beside its prediction, row by row (`gpucomm sim --compare`): what was
measured, what the model predicts for the same row on the log's machine (interop.doctor),
and how far apart they are.

    >>> compare_row({"time_us": 200.0, "busbw": 100.0, "predicted_time_us": 180.0,
    ...              "predicted_busbw": 111.0})["busbw_error"]
    0.11
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .doctor import Diagnosis


def compare_row(row: dict[str, Any]) -> dict[str, Any]:
    """`row` (a diagnosed log row: measured time_us and busbw, predicted_time_us and
    predicted_busbw) with the measured values under their own names, `busbw_error` (predicted
    over measured busbw, minus 1; None where nothing was measured) and `time_ratio` (predicted
    over measured time), both to 4 decimals."""
    busbw, time_us = row["busbw"], row["time_us"]
    err = (row["predicted_busbw"] - busbw) / busbw if busbw > 0 else None
    out = dict(row)
    out.update(measured_time_us=time_us, measured_busbw=busbw,
               busbw_error=None if err is None else round(err, 4),
               time_ratio=round(row["predicted_time_us"] / time_us, 4) if time_us else None)
    return out


def compared(d: Diagnosis) -> dict[str, Any]:
    """The document `gpucomm sim --compare` prints: the log's collective and machine, the
    warnings of reading it, and every row compared (compare_row)."""
    return {"collective": d.collective, "topology": d.system.get("system"),
            "nranks": d.guess.nranks, "system": d.system, "warnings": list(d.warnings),
            "rows": [compare_row(r) for r in d.rows]}
