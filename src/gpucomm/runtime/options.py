"""The runtime's settings in one value: `RuntimeOptions`, read once from the environment (or
given to `gpucomm.init(options=...)`), handed to the shm transport and to bench's predictor,
so both compile the same plan. Every `GPUCOMM_*` variable of the runtime is read here (but
`GPUCOMM_RUNTIME_YAML`, where `tuned` finds this host's tuned values); docs/runtime.md
("Runtime options") lists them, and the package's few others.

A leaf module: it imports nothing from gpucomm but the errors and `tuned` (this host's
tuned values, which the variables override).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from ..errors import ConfigError
from . import tuned


@dataclass(frozen=True)
class RuntimeOptions:
    """How the shm runtime cuts and moves data (defaults measured on this project's hosts;
    see docs/runtime.md and `benchmarks/runtime_vs_peers.py`).

    >>> RuntimeOptions(push=False).describe()[:48]
    'slice 4 MiB, direct from 16 KiB (512 KiB on 3 ra'
    >>> RuntimeOptions(slice_bytes=0)
    Traceback (most recent call last):
    ...
    gpucomm.errors.ConfigError: RuntimeOptions.slice_bytes must be an integer >= 1 (bytes), got 0
    """
    # Staged chunks are cut into slices of this size so consecutive steps pipeline; 4 MiB
    # copies are large enough for non-temporal stores (2 MiB pieces copy ~30% slower here).
    slice_bytes: int = 4 << 20
    # Chunks at least this large are read from the peer's own buffers by cross-memory attach
    # (one copy) instead of being staged through shared memory (two copies) ... Measured with
    # both plans in C (Intel Xeon VM, 2 MiB L2, 2 ranks, medians of 3 paired rounds, no tuned
    # file): direct from 16 KiB rather than 512 KiB ran the all-reduce at 64 KiB in 7.4
    # against 14.9 us, 256 KiB 19.5 against 29.0, 512 KiB 29.7 against 60.8, the all-gather
    # at 128 KiB 6.3 against 13.2, the reduce-scatter 6.8 against 15.8; 512 KiB against 3
    # MiB had run it 1.64x faster at 1 MiB. Below 16 KiB a read's fixed cost (3 us a
    # process_vm_readv here) loses to staging. The 3 MiB these replaced was measured on an
    # AMD EPYC VM when direct reductions still ran in Python.
    direct_min_bytes: int = 16 << 10
    # ... on 2 ranks; with more, from this size. There a rank reads every peer's chunk by a
    # call of its own where staging copies it once for all readers: 4 ranks on this host's 2
    # cores, all-reduce 1 MiB 425 us direct from 512 KiB against 515 from 16 KiB, 256 KiB 88
    # against 106; 8 ranks, all-gather 2 MiB 1146 against 1422 (medians of paired rounds).
    many_direct_min_bytes: int = 512 << 10
    # ... in slices this large (no staging to pipeline: fewer, larger calls).
    direct_slice_bytes: int = 16 << 20
    # All-to-all's chunks go direct from this size: each is read by one peer only, so staging
    # it is a whole extra copy that no second reader shares (2 ranks, paired rounds: 64 KiB
    # 4.7 against 7.9 us staged, 128 KiB 6.8 against 13.9, 256 KiB 10.4 against 17.5).
    a2a_direct_min_bytes: int = 16 << 10
    # A reduction read by cross-memory attach goes through a buffer this large, so the peer's
    # piece, the sum and the result pushed on stay in L2 (16 MiB all-reduce on 2 ranks, AMD
    # EPYC, 1 MiB L2: 1 MiB pieces 1.9 ms, 4 MiB pieces 2.5 ms; Intel Xeon, 2 MiB L2, C plans:
    # 256 KiB scored best of 128 KiB-1 MiB, `gpucomm bench --tune`); three such buffers fit a
    # 1 MiB L2 too.
    piece_bytes: int = 256 << 10
    # Direct plans let a rank write into a peer's output (`push`): off gives plain pull plans.
    push: bool = True
    # Large local copies in direct plans use streaming stores (`memcopy`), from this size on.
    stream: bool = True
    stream_min_bytes: int = 256 << 10
    # ... but a 2-rank all-to-all's local block only where the call's buffers (both ranks'
    # inputs and outputs: 8 blocks) reach this size; below, they fit in the last-level cache
    # (32 MiB here), where a cached copy is faster than streaming stores that write every line
    # out to memory (one block read by cross-memory attach while the other is copied locally,
    # notes/28-rt12: 512 KiB blocks 51 vs 77 us, 2 MiB 334 vs 381 us; 4 MiB blocks, 32 MiB in
    # all, 1269 vs 950 us, streamed faster). More ranks stream as before (`plan`).
    a2a_stream_min_bytes: int = 32 << 20
    # Cross-memory attach (process_vm_readv/writev) where the kernel allows it.
    cma: bool = True
    # All-reduces up to this size take the small-message path (`shm_ll`: one-shot through
    # self-flagged cache lines, polled and reduced in C) where the C extension is built; 0 turns
    # it off. At most 32 KiB: `auto` runs one-shot up to there (`communicator.SMALL_BYTES`),
    # and each rank's area holds that much. The default is the largest size where the path
    # beat the general one on every host measured (`benchmarks/allreduce_breakdown.py
    # --crossover`): up to 16 KiB on the AMD EPYC VM, up to 2 KiB on the Intel Xeon VM (2 KiB
    # 1.98 against 3.86 us; 4 KiB 5.02 against 4.13). `gpucomm bench --tune` finds the host's.
    ll_max_bytes: int = 2 << 10

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("bool", bool):
                if not isinstance(value, bool):
                    raise ConfigError(f"RuntimeOptions.{f.name} must be True or False, "
                                      f"got {value!r}")
                continue
            low = 0 if f.name.endswith(("min_bytes", "max_bytes")) else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"RuntimeOptions.{f.name} must be an integer >= {low} "
                                  f"(bytes), got {value!r}")
        if self.ll_max_bytes > LL_MAX_BYTES:
            raise ConfigError(f"RuntimeOptions.ll_max_bytes must be at most {LL_MAX_BYTES} "
                              f"(the small-message area), got {self.ll_max_bytes}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None,
                 tuned: Mapping[str, int] | None = None) -> "RuntimeOptions":
        """The defaults, overridden by this host's `tuned` values (`runtime.tuned`), then by
        the `GPUCOMM_*` variables that are set."""
        env = os.environ if env is None else env
        # field name -> its value: a bool or an int, per field
        given: dict[str, Any] = dict(tuned or {})
        for f in fields(cls):
            name = ENV_NAMES[f.name]
            text = env.get(name)
            if text is None or text == "":
                continue
            if f.type in ("bool", bool):
                if text not in ("0", "1"):
                    raise ConfigError(f"{name}={text!r}: allowed are 0 and 1")
                given[f.name] = text == "1"
                continue
            try:
                given[f.name] = int(text)
            except ValueError:
                raise ConfigError(f"{name}={text!r} is not an integer number of "
                                  f"bytes") from None
        try:
            return cls(**given)
        except ConfigError as e:
            bad = next((ENV_NAMES[k] for k in given if f"RuntimeOptions.{k} " in str(e)), "")
            raise ConfigError(f"{bad}: {e}" if bad else str(e)) from None

    def replace(self, **changes) -> "RuntimeOptions":
        return replace(self, **changes)

    def describe(self) -> str:
        """One line, as bench's header prints it."""
        on = {True: "on", False: "off"}
        return (f"slice {_size(self.slice_bytes)}, direct from {_size(self.direct_min_bytes)} "
                f"({_size(self.many_direct_min_bytes)} on 3 ranks or more) "
                f"in {_size(self.direct_slice_bytes)} slices (all-to-all from "
                f"{_size(self.a2a_direct_min_bytes)}), piece {_size(self.piece_bytes)}, "
                f"push {on[self.push]}, stream {on[self.stream]} from "
                f"{_size(self.stream_min_bytes)} (all-to-all: from "
                f"{_size(self.a2a_stream_min_bytes)} of buffers in all), cma {on[self.cma]}, "
                f"small-message path "
                f"{'to ' + _size(self.ll_max_bytes) if self.ll_max_bytes else 'off'}")


# RuntimeOptions field -> the environment variable that sets it
ENV_NAMES = {"slice_bytes": "GPUCOMM_SLICE_BYTES", "direct_min_bytes": "GPUCOMM_DIRECT_MIN_BYTES",
             "many_direct_min_bytes": "GPUCOMM_MANY_DIRECT_MIN_BYTES",
             "direct_slice_bytes": "GPUCOMM_DIRECT_SLICE_BYTES",
             "a2a_direct_min_bytes": "GPUCOMM_A2A_DIRECT_MIN_BYTES",
             "piece_bytes": "GPUCOMM_PIECE_BYTES", "push": "GPUCOMM_PUSH",
             "stream": "GPUCOMM_STREAM", "stream_min_bytes": "GPUCOMM_STREAM_MIN_BYTES",
             "a2a_stream_min_bytes": "GPUCOMM_A2A_STREAM_MIN_BYTES",
             "cma": "GPUCOMM_CMA", "ll_max_bytes": "GPUCOMM_LL_MAX_BYTES"}
LL_MAX_BYTES = 32 << 10  # see ll_max_bytes

_active: RuntimeOptions | None = None
_found: tuned.Tuned | None = None  # the tuned file `current` read (None: none, or `use`d)


def current() -> RuntimeOptions:
    """The options in force: those given to `use` (`gpucomm.init(options=...)`), else this
    host's tuned values under the environment's, read on first use."""
    global _active, _found
    if _active is None:
        _found = tuned.read()
        _active = RuntimeOptions.from_env(tuned=_found.values if _found else None)
    return _active


def tuned_file() -> tuned.Tuned | None:
    """The tuned file behind `current()`'s options, as it was read; None where there is none
    or the options were given to `use`."""
    current()
    return _found


def use(options: RuntimeOptions | None) -> RuntimeOptions:
    """Make `options` the ones in force (None: read the environment again)."""
    global _active, _found
    if options is not None and not isinstance(options, RuntimeOptions):
        raise ConfigError(f"options must be a gpucomm.runtime.RuntimeOptions, got "
                          f"{type(options).__name__}")
    _active, _found = options, None
    return current()


# --- the runtime's other variables: not plan settings, read here beside them ---------------
def env_timeout() -> str | None:
    """GPUCOMM_TIMEOUT: seconds every wait may last (`job.resolve_timeout` checks it)."""
    return os.environ.get("GPUCOMM_TIMEOUT") or None


def env_shm_session() -> str:
    """GPUCOMM_SHM_SESSION: the launcher's tag in shared-memory segment names."""
    return os.environ.get("GPUCOMM_SHM_SESSION", "")


def env_rdzv_token() -> str:
    """GPUCOMM_RDZV_TOKEN: the launcher's rendezvous secret."""
    return os.environ.get("GPUCOMM_RDZV_TOKEN", "")


def env_host_yaml(default: str) -> str:
    """GPUCOMM_HOST_YAML: where bench's calibration of this host is kept."""
    return os.environ.get("GPUCOMM_HOST_YAML", default)


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"
