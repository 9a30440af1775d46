"""auto's ranking: every candidate's floor in closed form first, simulation only where it can win.

NCCL's tuner ranks (algorithm, protocol) pairs with closed forms. `predict(algorithm="auto")`
times NCCL's closed forms (tree, nvls, nvls_tree: cheap) and the candidates without a floor
first, then simulates each remaining candidate only if its floor (a time it provably cannot
beat) is below the runner-up so far. A candidate above the runner-up can be neither the choice
nor the runner-up, so the choice, its time and the runner-up named in `reason` are those of
timing every candidate (tests/test_sim_fast_paths.py compares both).

Floors, from the analytic model's own rules (steps.py):
- a ring all-reduce, reduce-scatter or all-gather (by structure: each step forwards the chunk
  received in the step before) is a chain of 2(P-1) (resp. P-1) dependent ops, each landing
  no sooner than its protocol's smallest per-hop latency after it starts; plus the
  protocol's base latency once.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import GpucommError
from .result import SimResult
from .versions import value

Pair = tuple[str, str]  # (algorithm name, protocol)

RING_STEPS: dict[str, Callable[[int], int]] = {
    "all_reduce": lambda p: 2 * (p - 1), "reduce_scatter": lambda p: p - 1,
    "all_gather": lambda p: p - 1}


def ring_floor(collective: str, nranks: int, protocol: str) -> float | None:
    """Seconds no ring schedule of `collective` on `nranks` ranks beats with `protocol`
    (None: no floor known)."""
    steps = RING_STEPS.get(collective)
    if steps is None or nranks < 2 or protocol not in value("HOP_LATENCY_S"):
        return None
    hop = float(min(value("HOP_LATENCY_S")[protocol].values()))
    return float(value("BASE_LATENCY_S")[protocol]) + steps(nranks) * hop


def rank(pairs: Sequence[Pair], time_fn: Callable[[str, str], SimResult | None],
         floor_fn: Callable[[str, str], float | None]
         ) -> tuple[list[SimResult], list[tuple[str, GpucommError]], list[Pair]]:
    """Time the (name, protocol) `pairs` as auto needs them.

    `time_fn(name, pr)` returns a result (with `time_s`) or None, or raises GpucommError;
    `floor_fn(name, pr)` returns a floor in seconds or None. Returns (results in the order
    of `pairs`, errors as (name, exception), pairs skipped by their floor). A name whose
    timing raised is not tried with its other protocols (as a full evaluation)."""
    results: dict[Pair, SimResult] = {}
    errors: list[tuple[str, GpucommError]] = []
    failed: set[str] = set()
    skipped: list[Pair] = []
    floors = {pair: floor_fn(*pair) for pair in pairs}

    def attempt(pair: Pair) -> None:
        if pair[0] in failed:
            return
        try:
            res = time_fn(*pair)
        except GpucommError as e:
            errors.append((pair[0], e))
            failed.add(pair[0])
            return
        if res is not None:
            results[pair] = res

    for pair in pairs:  # closed forms and candidates without a floor
        if floors[pair] is None:
            attempt(pair)
    for pair in pairs:
        floor = floors[pair]
        if floor is None:
            continue
        times = sorted(r.time_s for r in results.values())
        if len(times) >= 2 and floor > times[1]:
            skipped.append(pair)
            continue
        attempt(pair)
    order = {name: i for i, (name, _) in reversed(list(enumerate(pairs)))}
    errors.sort(key=lambda e: order[e[0]])
    return [results[p] for p in pairs if p in results], errors, skipped
