"""`gpucomm bench --tune`: time the runtime's cache-dependent options on this host, save the
fastest (`runtime.tuned`).

The candidates are every pair of a reduction piece (`piece_bytes`) and a direct threshold
(`direct_min_bytes`) below. Each runs the 2-rank all-reduce of nccl-tests' sweep at 256 KiB
(where the threshold decides: its 128 KiB chunks go direct or are staged), 1, 4 and 16 MiB,
out of place and in place, as `gpucomm bench` runs it; the candidates run in
interleaved rounds (the order rotating), so a burst of load on the shared cores hits them
alike. A candidate's score is the geometric mean, over the eight timings, of the median of its
per-round time against the defaults' in the same round (below 1: faster). The lowest wins
if it beats the defaults by at least `MIN_GAIN`; otherwise the file keeps the defaults.

Then the small-message path's reach (`ll_max_bytes`): the all-reduce at 256 B-32 KiB with the
path (up to 32 KiB) and without, in interleaved rounds; it keeps the sizes up to the first
where the path's median per-round time (both columns' geometric mean) is not below the
general path's (`ll_crossover`). That size was 16 KiB on the AMD host and 2 KiB on the Intel
one (`benchmarks/allreduce_breakdown.py --crossover`); the default is the smaller
(`RuntimeOptions.ll_max_bytes`).
"""
from __future__ import annotations

import math
import os
import statistics
import sys
import time
from contextlib import contextmanager
from itertools import product

import yaml

from ..errors import ConfigError
from ..outputs import write_text
from ..runtime import tuned
from ..runtime.options import ENV_NAMES, RuntimeOptions

MiB = 1 << 20
PIECES = (128 << 10, 256 << 10, 512 << 10, 1 * MiB)
DIRECT_MINS = (16 << 10, 512 << 10, 3 * MiB)
SIZES = (256 << 10, 1 * MiB, 4 * MiB, 16 * MiB)
COLUMNS = ("time_us", "ip_time_us")  # out of place, in place
MIN_GAIN = 0.03  # a winner must be at least 3% faster than the defaults (noise otherwise)
LL_SIZES = (256, 1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10)
LL_ON_OFF = ({"ll_max_bytes": LL_SIZES[-1]}, {"ll_max_bytes": 0})


def candidates() -> list[dict]:
    """The defaults first, then every other (piece, direct threshold) pair."""
    d = RuntimeOptions()
    default = {"piece_bytes": d.piece_bytes, "direct_min_bytes": d.direct_min_bytes}
    rest = [{"piece_bytes": p, "direct_min_bytes": m} for p, m in product(PIECES, DIRECT_MINS)]
    return [default] + [c for c in rest if c != default]


def score(times: dict, default: int = 0) -> list[float]:
    """Per candidate: the geometric mean over timings of the median per-round ratio against
    candidate `default`. `times[c][key]` lists candidate c's seconds per round for timing
    `key` (one size and column), rounds in the same order for every candidate."""
    out = []
    for c in range(len(times)):
        logs = [math.log(statistics.median(t / b for t, b in zip(times[c][k], base)))
                for k, base in times[default].items()]
        out.append(math.exp(sum(logs) / len(logs)))
    return out


def choose(cands: list[dict], scores: list[float], default: int = 0) -> int:
    """The candidate to save: the best, unless it gains less than MIN_GAIN on the default."""
    best = min(range(len(cands)), key=lambda c: (scores[c], c))
    return best if scores[best] <= (1 - MIN_GAIN) * scores[default] else default


def ll_crossover(times: dict) -> tuple[int, dict]:
    """(the largest size up to which the small-message path was faster at every size, 0
    where it lost at the smallest; {size: its time against the general path's}) from
    `measure`'s times of LL_ON_OFF: per size, the geometric mean over the columns of the
    median per-round ratio."""
    ratios: dict = {}
    for (size, col), on in sorted(times[0].items()):
        r = statistics.median(a / b for a, b in zip(on, times[1][(size, col)]))
        ratios.setdefault(size, []).append(math.log(r))
    ratios = {size: math.exp(sum(v) / len(v)) for size, v in ratios.items()}
    reach = 0
    for size, r in sorted(ratios.items()):
        if r >= 1:
            break
        reach = size
    return reach, ratios


@contextmanager
def _env(values: dict):
    """The ranks a benchmark starts inherit this environment: the candidate's variables, and
    no tuned file (a saved one must not leak into the fields not set here)."""
    keys = [ENV_NAMES[k] for k in values] + [tuned.VAR]
    old = {k: os.environ.get(k) for k in keys}
    os.environ.update({ENV_NAMES[k]: str(v) for k, v in values.items()}, **{tuned.VAR: "off"})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def measure(cands: list[dict], rounds: int, sizes=SIZES, iters: int = 20, log=None) -> dict:
    """{candidate index: {(size, column): [seconds per round]}}, rounds interleaved."""
    from . import run_bench
    times: dict = {c: {} for c in range(len(cands))}
    for rnd in range(rounds):
        order = list(range(len(cands)))
        order = order[rnd % len(order):] + order[:rnd % len(order)]
        for c in order:
            with _env(cands[c]):
                rows = run_bench("shm", 2, "all_reduce", list(sizes), iters=iters,
                                 warmup=max(3, iters // 4), check=0)
            for row in rows:
                for col in COLUMNS:
                    times[c].setdefault((row["size"], col), []).append(row[col] * 1e-6)
        if log:
            log(f"  round {rnd + 1}/{rounds} done")
    return times


def tune(path: str | None = None, quick: bool = False, log=None) -> tuple[str, dict]:
    """Measure the candidates, save the winner to `path` (default `tuned.path()`), and
    return (path, the saved document)."""
    from .hostcal import cma_allowed
    path = path or tuned.path()
    if path is None:
        raise ConfigError(f"{tuned.VAR}=off: there is nowhere to save the tuned options; set "
                          f"it to a file, or unset it for {tuned.DEFAULT_PATH}")
    if not cma_allowed():
        raise ConfigError("cross-memory attach is not permitted on this host (ptrace "
                          "restrictions), so the runtime stages every chunk and the options "
                          "--tune chooses change nothing; nothing saved")
    cands = candidates()
    rounds, sizes = (2, (4 * MiB,)) if quick else (3, SIZES)
    load = round(os.getloadavg()[0], 2)
    times = measure(cands, rounds, sizes, log=log)
    scores = score(times)
    win = choose(cands, scores)
    reach, ratios = ll_crossover(measure(list(LL_ON_OFF), rounds, LL_SIZES, iters=200, log=log))
    options = {} if win == 0 else dict(cands[win])
    if reach != RuntimeOptions().ll_max_bytes:
        options["ll_max_bytes"] = reach
    doc = {"format": tuned.FORMAT, "host": tuned.fingerprint(),
           "tuned": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_1min": load,
           "options": options,
           "method": (f"{'quick' if quick else 'full'}: 2-rank all_reduce float32 sum at "
                      f"{', '.join(f'{s >> 20} MiB' for s in sizes)}, out of place and in "
                      f"place, {rounds} interleaved rounds of every candidate; score: geometric "
                      f"mean of the median per-round time against the defaults "
                      f"(a winner must gain {MIN_GAIN:.0%}); then the small-message path "
                      f"against the general one at 256 B-32 KiB, {rounds} interleaved rounds: "
                      f"it keeps the sizes up to the first where it is not faster"),
           "small_messages": {"ll_max_bytes": reach, "time_vs_general": {
               size: round(r, 3) for size, r in ratios.items()}},
           "candidates": [{**cands[c], "score": round(scores[c], 3),
                           "median_us": {f"{s >> 20}MiB{'' if col == 'time_us' else ' in place'}":
                                         round(statistics.median(v) * 1e6, 1)
                                         for (s, col), v in sorted(times[c].items())}}
                          for c in range(len(cands))]}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    write_text(path, yaml.safe_dump(doc, sort_keys=False), "tuned runtime options")
    return path, doc


def report(path: str, doc: dict) -> str:
    """What `gpucomm bench --tune` prints: every candidate's score, and the choice."""
    lines = [f"{'piece':>8} {'direct from':>12} {'score':>6}  (median time / the defaults')"]
    for c in doc["candidates"]:
        lines.append(f"{c['piece_bytes'] >> 10:>5} KiB {c['direct_min_bytes'] >> 10:>8} KiB "
                     f"{c['score']:>6.3f}")
    small = doc["small_messages"]
    lines.append("small-message path / general path: " + ", ".join(
        f"{size} B {r:.2f}" for size, r in small["time_vs_general"].items())
        + f" -> up to {small['ll_max_bytes']} B")
    chosen = doc["options"]
    lines.append(f"saved {path}: " + (", ".join(f"{k} {v}" for k, v in chosen.items())
                                      if chosen else "the defaults (no candidate gained "
                                      f"{MIN_GAIN:.0%})"))
    return "\n".join(lines)


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
