"""NCCL's own table-free estimate of a collective's time, as a baseline for accuracy.py.

The model (tuning.cc's bandwidths and latencies, NCCL's pick of least estimated time) lives in
the library, src/gpucomm/simulate/nccl_tuning.py, where `predict(select="nccl")` also uses it
to choose the algorithm and protocol NCCL would run; this module names it for the benchmarks.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gpucomm.simulate.nccl_tuning import estimate, estimates, net_latency_us  # noqa: E402

__all__ = ["estimate", "estimates", "net_latency_us"]
