"""Helpers shared by the commands: argument types that fail with clear messages, output."""
from __future__ import annotations

import argparse
import json
import sys

from ..dtypes import parse_size
from ..errors import ConfigError


def size_arg(text: str) -> int:
    """argparse type for sizes like 8, 64K, 1M, 8G."""
    try:
        return parse_size(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be >= 1")
    return value


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
    if step:
        return list(range(minbytes, maxbytes + 1, step))
    if factor <= 1:
        raise ConfigError(f"step factor {factor} must be > 1 (or give -i STEP)")
    sizes, s = [], minbytes
    while s <= maxbytes:
        sizes.append(int(s))
        s = s * factor
    return sizes


def param_pairs(pairs: list[str]) -> dict:
    """`-p NAME=VALUE` builder parameters as a dict (integers where they parse)."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"parameter {pair!r} must look like NAME=VALUE")
        k, v = pair.split("=", 1)
        try:
            out[k] = int(v)
        except ValueError:
            out[k] = v
    return out
