"""Textbook alpha-beta costs of collective algorithms, the check the models must pass.

alpha: latency of one message, beta: seconds per byte (1 / bandwidth) of a link, p: ranks,
n: the buffer size S in bytes as nccl-tests counts it. Valid where no two messages share a link
(every rank sends and receives at most one message at a time on full-duplex links).
Sources: Thakur, Rabenseifner & Gropp 2005 (MPICH); Patarasuk & Yuan 2009 (ring);
Chan et al. 2007 (collective communication: theory, practice, experience); Alexandrov et al.
1995 (LogGP: consecutive messages overlap their latency, pay their gap).

    >>> round(ring_all_reduce(4, 1e-6, 1e-9, 4000), 9)  # 6 steps of 1 us + 1000 B at 1 GB/s
    1.2e-05
"""
from __future__ import annotations

import math


def ring_all_reduce(p: int, alpha: float, beta: float, n: float) -> float:
    """2(p-1) steps, each moving n/p: 2(p-1)·alpha + 2(p-1)/p·n·beta."""
    return 2 * (p - 1) * (alpha + n / p * beta)


def ring_reduce_scatter(p: int, alpha: float, beta: float, n: float) -> float:
    """n is the whole array (p blocks): (p-1)·alpha + (p-1)/p·n·beta."""
    return (p - 1) * (alpha + n / p * beta)


ring_all_gather = ring_reduce_scatter


def recursive_halving_doubling_all_reduce(p: int, alpha: float, beta: float, n: float) -> float:
    """Rabenseifner (p a power of two): 2·log2(p)·alpha + 2(p-1)/p·n·beta."""
    return 2 * math.log2(p) * alpha + 2 * (p - 1) / p * n * beta


def recursive_doubling_all_reduce(p: int, alpha: float, beta: float, n: float) -> float:
    """p a power of two: log2(p)·(alpha + n·beta)."""
    return math.log2(p) * (alpha + n * beta)


def recursive_doubling_all_gather(p: int, alpha: float, beta: float, n: float) -> float:
    """p a power of two, n the whole array: log2(p)·alpha + (p-1)/p·n·beta."""
    return math.log2(p) * alpha + (p - 1) / p * n * beta


def binomial_tree_broadcast(p: int, alpha: float, beta: float, n: float) -> float:
    """ceil(log2 p) rounds of the whole buffer."""
    return math.ceil(math.log2(p)) * (alpha + n * beta)


def pairwise_all_to_all(p: int, alpha: float, beta: float, n: float) -> float:
    """p-1 rounds of one block n/p; rounds do not wait for each other's data, so their
    latencies overlap (LogGP-style, as NCCL posts them): alpha + (p-1)/p·n·beta."""
    return alpha + (p - 1) / p * n * beta


def chain_broadcast(p: int, alpha: float, beta: float, n: float, chunks: int) -> float:
    """Pipelined chain of `chunks` pieces whose latencies overlap on each hop:
    (p-1)·(alpha + n/chunks·beta) + (chunks-1)·n/chunks·beta."""
    return (p - 1) * (alpha + n / chunks * beta) + (chunks - 1) * n / chunks * beta
