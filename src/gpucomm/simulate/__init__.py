"""Time schedules on topologies: an analytic (alpha-beta over the data-flow DAG) and a flow
(event-driven, max-min fair link sharing) model behind one function, a protocol model applied
to every op, and `predict`, which picks the algorithm and protocol like NCCL's tuner.

    >>> from gpucomm.topology import build_topology
    >>> r = predict("all_reduce", "1G", build_topology("dgx-h100"))
    >>> r.algorithm, r.protocol
    ('nvls', 'simple')
"""
from .core import MODELS, simulate
from .predict import predict
from .protocol import PROTOCOLS, Protocol, get_protocol, ideal_protocol
from .result import SimResult

__all__ = ["MODELS", "PROTOCOLS", "Protocol", "SimResult", "get_protocol", "ideal_protocol",
           "predict", "simulate"]
