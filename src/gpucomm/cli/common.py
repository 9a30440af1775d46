"""Helpers shared by the commands: argument types that fail with clear messages, output."""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys

from ..dtypes import parse_size
from ..errors import ConfigError
from ..inputs import float_flag, int_flag, parse_int
from ..limits import MAX_MODEL_RANKS, MAX_SWEEP_POINTS, check_size, sweep_points


def size_arg(text: str) -> int:
    """argparse type for sizes like 8, 64K, 1M, 8G (at most limits.MAX_SIZE_BYTES)."""
    try:
        return check_size(parse_size(text))
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _int(text: str) -> int:
    text = text.strip()
    if len(text) > 20:  # int() of thousands of digits is slow or refused; no count needs 20
        raise argparse.ArgumentTypeError(f"{text[:20]!r}... is not an integer of at most 20 "
                                         "digits")
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


# ---- numeric flags: one range per quantity, named in the error ---------------------------
# (inputs.int_flag / float_flag: ASCII digits, finite, inside the range.) The README's
# "Limits" table lists them; each bound is far above real use and below where the work or
# memory a value asks for stops being answerable in seconds.
COUNT_MAX = 1 << 20            # a generic count (ranks, nodes, GPUs): limits.py refines it
seeds_arg = int_flag(1, 1000)             # sim --seeds: one full prediction per seed
leaf_ports_arg = int_flag(1, 4096)        # switch radix: the largest switches have 512 ports
nics_arg = int_flag(1, 64)                # NICs per node: GB200/B300 trays have 8
oversubscription_arg = float_flag(0.5, 1000.0)  # fabric taper: 1:1 .. 8:1; < 1 spare uplinks
iters_arg = int_flag(1, 1_000_000)        # bench -n: timed iterations
agg_iters_arg = int_flag(1, 10_000)       # bench -m: collectives aggregated per iteration
warmup_arg = int_flag(0, 1_000_000)       # bench -w
graph_arg = int_flag(0, 1_000_000)        # bench -G: CUDA-graph launches (printed only)
timeout_arg = float_flag(1e-3, 86_400.0)  # a wait in seconds: 1 ms .. one day
workers_arg = int_flag(1, 64)             # sweep -j: local worker processes
seed_arg = int_flag(0, (1 << 64) - 1)     # a hash seed
fail_links_arg = int_flag(0, COUNT_MAX)
probability_arg = float_flag(0.0, 1.0)


def positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be >= 1")
    return value


def nonnegative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be >= 0")
    return value


def int_arg(text: str) -> int:
    """argparse type for any integer (a root, a rank, a seed) of sane length."""
    return _int(text)


def finite_float(text: str) -> float:
    """argparse type for a finite number (no nan, no inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number")
    return value


def output_file(path: str, flag: str, suffixes: tuple[str, ...]) -> str:
    """Check, before any work, that `path` can be written as a file of one of `suffixes`:
    not a directory, in a directory that exists and is writable. ConfigError names `flag`."""
    if not path:
        raise ConfigError(f"{flag}: empty file name")
    if not path.lower().endswith(suffixes):
        raise ConfigError(f"{flag} {path!r}: the file name must end in {' or '.join(suffixes)}")
    if os.path.isdir(path):
        raise ConfigError(f"{flag} {path!r} is a directory: give a file name in it")
    existed = os.path.exists(path)
    try:
        with open(path, "ab"):
            pass
    except OSError as e:
        raise ConfigError(f"{flag}: cannot write {path!r}: {e.strerror}") from None
    if not existed:
        os.unlink(path)  # only probed: the command writes it when it has the result
    return path


PLOT_SUFFIXES = (".png", ".svg", ".pdf")
HTML_SUFFIXES = (".html", ".htm")


def name_arg(text: str) -> str:
    """argparse type for a name or path that must not be empty (`--system ''` would
    otherwise fall back to the default without a word)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def html_arg(text: str) -> str:
    """argparse type for an HTML report's path: not empty, ending in .html or .htm."""
    name_arg(text)
    if not text.lower().endswith(HTML_SUFFIXES):
        raise argparse.ArgumentTypeError(f"{text!r}: an HTML report's file name must end in "
                                         ".html or .htm")
    return text



def nccl_version_arg(text: str) -> str:
    """--nccl-version X.Y: checked up front (a release gpucomm models), kept as given."""
    from ..simulate.versions import parse_version
    try:
        parse_version(text, strict=True)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_select(parser, default: str = "fastest") -> None:
    """--select: how auto chooses among NCCL's algorithms and protocols (predict's select);
    doctor and calibrate, which model logs NCCL's own choice produced, default to nccl."""
    parser.add_argument("--select", choices=("fastest", "nccl"), default=default,
                        help=f"auto runs the pair gpucomm times fastest, or the pair NCCL's own "
                        f"tuning model picks (nccl), timed by gpucomm (default: {default})")


def add_format(parser) -> None:
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="a table for people (default) or JSON for scripts")


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, default=_default)
    sys.stdout.write("\n")


def _default(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"cannot serialise {type(o).__name__}")


def sweep_sizes(minbytes: int, maxbytes: int, factor: float = 2.0, step: int = 0) -> list[int]:
    """nccl-tests' size sweep: -b MIN -e MAX with -f FACTOR (or -i STEP)."""
    if minbytes < 1 or maxbytes < minbytes:
        raise ConfigError(f"size range {minbytes}..{maxbytes} is empty: need 1 <= -b <= -e")
    check_size(maxbytes, "-e/--maxbytes")
    if step < 0:
        raise ConfigError(f"step -i {step} must be >= 0 (0: use -f FACTOR)")
    if not step and not (math.isfinite(factor) and factor > 1):
        raise ConfigError(f"step factor -f {factor} must be a finite number > 1 (or give -i STEP)")
    points = sweep_points(minbytes, maxbytes, factor, step)
    if points > MAX_SWEEP_POINTS:
        raise ConfigError(f"-b {minbytes} -e {maxbytes} " + (f"-i {step}" if step else
                          f"-f {factor}") + f" is {points} sizes, more than the limit of "
                          f"{MAX_SWEEP_POINTS}: raise -f or -i, or narrow -b/-e")
    if step:
        return list(range(minbytes, maxbytes + 1, step))
    sizes: list[int] = []
    s: float = minbytes
    while s <= maxbytes:
        if not sizes or int(s) > sizes[-1]:  # a factor near 1 repeats small sizes
            sizes.append(int(s))
        s = s * factor
    return sizes


def param_pairs(pairs: list[str]) -> dict:
    """`--param NAME=VALUE` builder parameters as a dict (integers where they parse)."""
    out: dict[str, int | str] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"parameter {pair!r} must look like NAME=VALUE")
        k, v = pair.split("=", 1)
        lo, hi = PARAM_RANGES.get(k, (0, COUNT_MAX))
        if k in PARAM_RANGES or re.fullmatch(r"\s*[+-]?[0-9]+\s*", v, re.ASCII):
            out[k] = parse_int(v, f"-p {k}", lo, hi)
        else:
            out[k] = v
    return out


# -p NAME=VALUE parameters with a range of their own: NCCL runs at most MAXCHANNELS = 32
# channels (src/include/device.h; simulate/constants.py MAX_CHANNELS); a pipeline of more
# than 256 chunks per block only multiplies the ops (chunks=10^6 ran for minutes), and a
# group holds at most every GPU gpucomm models.
PARAM_RANGES = {"channels": (1, 32), "chunks": (1, 256), "group_size": (1, MAX_MODEL_RANKS)}
